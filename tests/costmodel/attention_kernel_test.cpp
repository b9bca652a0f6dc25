// Which fused attention kernel a plan runs: the GPU's fastest (cuDNN's fused attention, FlashAttention-3)
// or FlashAttention-2's Ampere kernels (PyTorch's SDPA flash backend). docs/costmodel.md, "Which fused
// attention kernel".
#include <gtest/gtest.h>

#include <string>

#include "colo/core/plan.h"
#include "colo/costmodel/evaluator.h"
#include "colo/costmodel/hardware.h"
#include "colo/costmodel/op_cost.h"
#include "core/test_support.h"

namespace colo::costmodel {
namespace {

Plan planOn(const std::string& model, const std::string& cluster, std::int64_t seqLen = 0) {
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/" + model + ".json"));
  auto c = scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/" + cluster + ".json")), 8);
  EXPECT_TRUE(c) << (c ? "" : c.error().toString());
  p.cluster = *c;
  p.parallel.tp = 8;
  p.parallel.dp = 1;
  p.microBatchSize = 1;
  p.globalBatchSize = 8;
  p.seqLen = seqLen > 0 ? seqLen : p.model.defaultSeqLen();
  p.stages = uniformStages(p.model.numLayers(), 1, RecomputePolicy::kNone);
  return p;
}

Plan llamaOn(const std::string& cluster) { return planOn("llama2-7b", cluster); }

Evaluator::OpTime flashOp(const Plan& p) {
  auto ops = opTimesOf(p);
  EXPECT_TRUE(ops) << (ops ? "" : ops.error().toString());
  if (ops) {
    for (const auto& o : *ops) {
      if (o.op == "attn.flash") return o;
    }
  }
  ADD_FAILURE() << "no attn.flash op";
  return {};
}

TEST(AttentionKernel, FlashAttention2RunsAtItsOwnShareOnHopperAndAsTheFusedKernelOnAmpere) {
  Plan native = llamaOn("dgx-h100");
  Plan fa2 = native;
  ASSERT_TRUE(setAttention(fa2.execution, "flash2"));
  ASSERT_TRUE(fa2.execution.flashAttention && fa2.execution.flashAttention2);
  const auto hopper = deviceModel(native.cluster.gpu, DType::kBf16);
  const auto hopper2 = deviceModel(native.cluster.gpu, DType::kBf16, true);
  // The FlashAttention-3 paper's H100 figures at 1,830 MHz: FA2 333 TFLOP/s forward (causal, head dim
  // 128, 8k) and 318 backward without the mask, which a causal backward reaches 277.4/303.3 of (PyTorch
  // SDPA's flash kernel, head dim 128, 8k, one measurement with and without the mask).
  const double peakAtClock = hopper.peakFlopsPerSecond * 1830.0 / 1980.0;
  EXPECT_NEAR(hopper2.flashFwdEfficiency, 333e12 / peakAtClock, 0.002);
  EXPECT_NEAR(hopper2.flashBwdEfficiency, 318e12 * (277.4 / 303.3) / peakAtClock, 0.002);
  EXPECT_LT(hopper2.flashFwdEfficiency, hopper.flashFwdEfficiency);
  EXPECT_LT(hopper2.flashBwdEfficiency, hopper.flashBwdEfficiency);
  EXPECT_EQ(hopper2.gemmEfficiency, hopper.gemmEfficiency);  // only the attention kernel changes

  const auto a = flashOp(native);
  const auto b = flashOp(fa2);
  EXPECT_NEAR(b.forwardSeconds / a.forwardSeconds, hopper.flashFwdEfficiency / hopper2.flashFwdEfficiency, 1e-9);
  EXPECT_NEAR(b.backwardSeconds / a.backwardSeconds, hopper.flashBwdEfficiency / hopper2.flashBwdEfficiency, 1e-9);
  auto evNative = evaluatePlan(native);
  auto evFa2 = evaluatePlan(fa2);
  ASSERT_TRUE(evNative && evFa2);
  EXPECT_GT(evFa2->stepSeconds, evNative->stepSeconds);
  // The kernel saves the same tensors either way.
  EXPECT_EQ(evFa2->stages[0].memory.activations, evNative->stages[0].memory.activations);

  // On an A100 FlashAttention-2 is the fused kernel: nothing changes.
  Plan ampere = llamaOn("dgx-a100-80gb");
  Plan ampere2 = ampere;
  ASSERT_TRUE(setAttention(ampere2.execution, "flash2"));
  auto e1 = evaluatePlan(ampere);
  auto e2 = evaluatePlan(ampere2);
  ASSERT_TRUE(e1 && e2);
  EXPECT_EQ(e1->stepSeconds, e2->stepSeconds);
}

TEST(AttentionKernel, PlanFilesNameTheKernelAndRefuseAContradiction) {
  Plan p = llamaOn("dgx-h100");
  EXPECT_EQ(attentionName(p.execution), "flash");
  ASSERT_TRUE(setAttention(p.execution, "flash2"));
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["attention"], "flash2");
  auto back = planFromJson(j, "plan.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.flashAttention2);
  EXPECT_TRUE(back->execution.flashAttention);
  ASSERT_TRUE(setAttention(p.execution, "unfused"));
  EXPECT_FALSE(p.execution.flashAttention || p.execution.flashAttention2);
  EXPECT_FALSE(setAttention(p.execution, "cudnn"));
  EXPECT_FALSE(p.execution.flashAttention);  // unchanged by a refused name

  Plan bad = llamaOn("dgx-h100");
  bad.execution.flashAttention = false;
  bad.execution.flashAttention2 = true;
  auto ok = validatePlan(bad, "bad.json");
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().toString().find("/execution/attention"), std::string::npos) << ok.error().toString();
}

TEST(AttentionKernel, LatentAttentionsWideHeadsRunAtTheirMeasuredSharesOnB200Only) {
  // DeepSeek's latent attention (query/key head dim 192, values 128): Transformer Engine's fused kernels
  // on B200 measured 0.46 forward and 0.35 backward of the clock-held peak, below the 0.55 / 0.42 of head
  // dim 128. Where no wide-head figure was measured (Hopper) the kernel keeps the GPU's shares.
  const Plan blackwell = planOn("deepseek-v3", "dgx-b200", 4096);
  const auto b200 = deviceModel(blackwell.cluster.gpu, DType::kBf16);
  EXPECT_DOUBLE_EQ(b200.flashWideFwdEfficiency, 0.46);
  EXPECT_DOUBLE_EQ(b200.flashWideBwdEfficiency, 0.35);
  // 128 heads / tp 8 at 4,096 tokens, causal: b * heads * s^2 * (192 + 128) FLOPs forward.
  const double work = 16.0 * 4096.0 * 4096.0 * (192.0 + 128.0);
  const double rate = b200.attentionPeakFlopsPerSecond * b200.sustainedClock;
  const auto op = flashOp(blackwell);
  EXPECT_NEAR(op.forwardSeconds, work / (rate * 0.46), 1e-9);
  EXPECT_NEAR(op.backwardSeconds, 2.5 * work / (rate * 0.35), 1e-9);
  // The same call at head dim 128 keeps the GPU's own shares; on Hopper the wide shares are those.
  const auto narrow = fusedAttentionSeconds(work, b200, 128);
  EXPECT_NEAR(narrow.forward, work / (rate * b200.flashFwdEfficiency), 1e-12);
  const auto hopper = deviceModel(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json")).gpu, DType::kBf16);
  EXPECT_EQ(hopper.flashWideFwdEfficiency, hopper.flashFwdEfficiency);
  EXPECT_EQ(hopper.flashWideBwdEfficiency, hopper.flashBwdEfficiency);
  // FlashAttention-2's kernels were not measured at wide heads: its own shares serve both.
  const auto fa2 = deviceModel(blackwell.cluster.gpu, DType::kBf16, true);
  EXPECT_EQ(fa2.flashWideBwdEfficiency, fa2.flashBwdEfficiency);
}

}  // namespace
}  // namespace colo::costmodel
