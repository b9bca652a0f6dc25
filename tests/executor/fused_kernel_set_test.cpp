// Which of colo's fused kernels colo-run puts in a plan's model under --fused-kernels auto on a GPU
// (executor/src/model.h, private): those measured faster than LibTorch's operators, less what the plan
// says its framework runs as PyTorch's eager operators, so that a run's measured step compares with the
// step the plan was costed at.
#include "model.h"

#include <gtest/gtest.h>

namespace colo::executor::detail {
namespace {

TEST(FusedKernelSet, AutoRunsWhatThePlanSaysItsFrameworkRunsEagerAsEagerOperators) {
  const FusedKernelSet fast = FusedKernelSet::fasterOnGpu();
  // A plan of fused kernels (Megatron, Transformer Engine): every kernel measured faster.
  EXPECT_EQ(fast.withoutEager(UnfusedKernels{}, false).names(), fast.names());
  // torchtitan without compile, or a Hugging Face model: every norm, rotary and SwiGLU eager, and PyTorch's
  // loss; LayerNorm (one aten kernel in eager PyTorch too), AdamW and the gradient norm stay fused.
  const FusedKernelSet eager = fast.withoutEager(UnfusedKernels::all(), true);
  EXPECT_FALSE(eager.rmsNorm);
  EXPECT_FALSE(eager.rotary);
  EXPECT_FALSE(eager.swiglu);
  EXPECT_FALSE(eager.crossEntropy);
  EXPECT_EQ(eager.layerNorm, fast.layerNorm);
  EXPECT_EQ(eager.adamw, fast.adamw);
  EXPECT_EQ(eager.gradNorm, fast.gradNorm);
  // One op at a time.
  UnfusedKernels rotaryOnly;
  rotaryOnly.rotary = true;
  const FusedKernelSet r = fast.withoutEager(rotaryOnly, false);
  EXPECT_FALSE(r.rotary);
  EXPECT_EQ(r.rmsNorm, fast.rmsNorm);
  EXPECT_EQ(r.swiglu, fast.swiglu);
  EXPECT_EQ(r.crossEntropy, fast.crossEntropy);
  // torchtitan's compiled runs (only the final norm eager) keep the fused norm: colo's model has one
  // norm kernel for every norm.
  UnfusedKernels finalOnly;
  finalOnly.finalNorm = true;
  EXPECT_EQ(fast.withoutEager(finalOnly, false).rmsNorm, fast.rmsNorm);
}

}  // namespace
}  // namespace colo::executor::detail
