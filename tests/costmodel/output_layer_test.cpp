// The output layer's precision under Transformer Engine's recipes: Megatron's own ColumnParallelLinear,
// outside TE's autocast, runs at 16 bits whatever the layers run at, unless Megatron-Core's
// fp8_output_proj makes it a TE linear under MXFP8. docs/costmodel.md, "The output layer's precision".
#include <gtest/gtest.h>

#include <string>

#include "colo/core/plan.h"
#include "colo/costmodel/evaluator.h"
#include "core/test_support.h"

namespace colo::costmodel {
namespace {

Plan llamaOnB200(DType precision, Float8Recipe recipe) {
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  p.cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-b200.json"));
  p.parallel.tp = 1;
  p.parallel.dp = 8;
  p.zeroStage = 1;
  p.microBatchSize = 1;
  p.globalBatchSize = 8;
  p.seqLen = 8192;
  p.precision = precision;
  p.execution.float8Recipe = recipe;
  p.stages = uniformStages(p.model.numLayers(), 1, RecomputePolicy::kNone);
  return p;
}

Evaluator::OpTime opOf(const Plan& p, const std::string& name) {
  auto ops = opTimesOf(p);
  EXPECT_TRUE(ops) << (ops ? "" : ops.error().toString());
  if (ops) {
    for (const auto& o : *ops) {
      if (o.op == name) return o;
    }
  }
  ADD_FAILURE() << "no op " << name;
  return {};
}

TEST(OutputLayer, RunsAtSixteenBitsUnderTransformerEnginesRecipesUnlessFp8OutputProjIsSet) {
  const Plan bf16 = llamaOnB200(DType::kBf16, Float8Recipe::kTransformerEngine);
  const auto head16 = opOf(bf16, "head.lm_head");
  ASSERT_GT(head16.forwardSeconds, 0);
  // Per-tensor fp8, MXFP8 and NVFP4: the layers' linears get faster, the head does not.
  for (const auto& [precision, recipe] : {std::pair{DType::kFp8, Float8Recipe::kTransformerEngine},
                                          std::pair{DType::kFp8, Float8Recipe::kMxfp8},
                                          std::pair{DType::kFp4, Float8Recipe::kTransformerEngine}}) {
    const Plan quantized = llamaOnB200(precision, recipe);
    const std::string what = toString(precision) + " " + toString(recipe);
    EXPECT_DOUBLE_EQ(opOf(quantized, "head.lm_head").forwardSeconds, head16.forwardSeconds) << what;
    EXPECT_DOUBLE_EQ(opOf(quantized, "head.lm_head").backwardSeconds, head16.backwardSeconds) << what;
    EXPECT_LT(opOf(quantized, "mlp.down").forwardSeconds, 0.8 * opOf(bf16, "mlp.down").forwardSeconds) << what;
  }
  // fp8_output_proj under MXFP8: the head runs at the fp8 rate too, its weight is cached quantized
  // like the layers', and the step is shorter.
  Plan mx = llamaOnB200(DType::kFp8, Float8Recipe::kMxfp8);
  Plan mxHead = mx;
  mxHead.execution.fp8OutputProj = true;
  EXPECT_LT(opOf(mxHead, "head.lm_head").forwardSeconds, 0.8 * head16.forwardSeconds);
  const auto plain = evaluatePlan(mx);
  const auto fast = evaluatePlan(mxHead);
  ASSERT_TRUE(plain && fast);
  EXPECT_LT(fast->stepSeconds, plain->stepSeconds);
  EXPECT_GT(fast->stages[0].memory.weights, plain->stages[0].memory.weights);
}

TEST(OutputLayer, Fp8OutputProjNeedsFp8WithTheMxfp8RecipeAndRoundTrips) {
  Plan p = llamaOnB200(DType::kFp8, Float8Recipe::kTransformerEngine);
  p.execution.fp8OutputProj = true;
  auto refused = validatePlan(p);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/fp8_output_proj");
  EXPECT_NE(refused.error().message.find("transformer_engine"), std::string::npos) << refused.error().message;
  p.precision = DType::kBf16;
  ASSERT_FALSE(validatePlan(p));
  p.precision = DType::kFp8;
  p.execution.float8Recipe = Float8Recipe::kMxfp8;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  auto back = planFromJson(planToJson(p), "round-trip.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.fp8OutputProj);
  EXPECT_FALSE(planToJson(llamaOnB200(DType::kBf16, Float8Recipe::kTransformerEngine))["execution"].contains("fp8_output_proj"));
}

}  // namespace
}  // namespace colo::costmodel
