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

Plan llamaOnB200(DType precision, Float8Recipe recipe, const std::string& model = "llama3-8b") {
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/" + model + ".json"));
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
  // fp8_output_proj under MXFP8: the head runs at the fp8 rate too, and the step is shorter.
  Plan mx = llamaOnB200(DType::kFp8, Float8Recipe::kMxfp8);
  Plan mxHead = mx;
  mxHead.execution.fp8OutputProj = true;
  EXPECT_LT(opOf(mxHead, "head.lm_head").forwardSeconds, 0.8 * head16.forwardSeconds);
  const auto plain = evaluatePlan(mx);
  const auto fast = evaluatePlan(mxHead);
  ASSERT_TRUE(plain && fast);
  EXPECT_LT(fast->stepSeconds, plain->stepSeconds);
}

TEST(OutputLayer, TheMxfp8HeadKeepsItsSixteenBitWeightAndACachedCopyQuantizedParametersOrNot) {
  // Megatron-Core builds the output layer outside fp8_model_init: beside its bf16 weight TE caches a
  // row-wise and a column-wise MXFP8 copy with a scale per 32 elements, 2.0625 B an element, also when
  // the layers' weights are quantized (--fp8-param-gather). Llama 3 8B's head: 128,256 x 4,096.
  const double head = 128256.0 * 4096.0;
  auto weights = [](const Plan& p) {
    const auto e = evaluatePlan(p);
    EXPECT_TRUE(e) << (e ? "" : e.error().toString());
    return e ? e->stages[0].memory.weights : 0.0;
  };
  for (const bool quantized : {false, true}) {
    Plan mx = llamaOnB200(DType::kFp8, Float8Recipe::kMxfp8);
    mx.execution.quantizedParams = quantized;
    Plan mxHead = mx;
    mxHead.execution.fp8OutputProj = true;
    EXPECT_NEAR(weights(mxHead) - weights(mx), head * 2.0 * (1.0 + 1.0 / 32.0), 1.0) << "quantized " << quantized;
  }
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
  // Megatron-Core's TE head: a GPT model's only, not tied to the embedding on one stage, not with
  // userbuffers at tp > 1.
  Plan bert = llamaOnB200(DType::kFp8, Float8Recipe::kMxfp8, "bert-large");
  bert.seqLen = bert.model.defaultSeqLen();
  ASSERT_TRUE(validatePlan(bert)) << validatePlan(bert).error().toString();
  bert.execution.fp8OutputProj = true;
  auto bertRefused = validatePlan(bert);
  ASSERT_FALSE(bertRefused);
  EXPECT_EQ(bertRefused.error().path, "/execution/fp8_output_proj");
  Plan tied = llamaOnB200(DType::kFp8, Float8Recipe::kMxfp8, "gpt3-1.3b");
  tied.seqLen = tied.model.defaultSeqLen();
  ASSERT_TRUE(validatePlan(tied)) << validatePlan(tied).error().toString();
  tied.execution.fp8OutputProj = true;
  auto tiedRefused = validatePlan(tied);
  ASSERT_FALSE(tiedRefused);
  EXPECT_EQ(tiedRefused.error().path, "/execution/fp8_output_proj");
  EXPECT_NE(tiedRefused.error().message.find("tie"), std::string::npos) << tiedRefused.error().toString();
  Plan overlapped = p;
  overlapped.parallel.tp = 2;
  overlapped.parallel.dp = 4;
  overlapped.parallel.sequenceParallel = true;
  overlapped.execution.tpCommOverlap = true;
  overlapped.execution.fp8OutputProj = false;
  ASSERT_TRUE(validatePlan(overlapped)) << validatePlan(overlapped).error().toString();
  overlapped.execution.fp8OutputProj = true;
  auto overlapRefused = validatePlan(overlapped);
  ASSERT_FALSE(overlapRefused);
  EXPECT_EQ(overlapRefused.error().path, "/execution/fp8_output_proj");
  EXPECT_NE(overlapRefused.error().message.find("userbuffers"), std::string::npos) << overlapRefused.error().message;
  auto back = planFromJson(planToJson(p), "round-trip.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.fp8OutputProj);
  EXPECT_FALSE(planToJson(llamaOnB200(DType::kBf16, Float8Recipe::kTransformerEngine))["execution"].contains("fp8_output_proj"));
}

}  // namespace
}  // namespace colo::costmodel
