#include "colo/costmodel/op_cost.h"

#include <algorithm>

#include "layer_cost.h"

namespace colo::costmodel {

double gemmSeconds(double m, double n, double k, double count, std::int64_t dtypeBytes, const DeviceModel& device) {
  return detail::gemmSeconds(m, n, k, count, dtypeBytes, device);
}

double groupedGemmSeconds(double m, double n, double k, double count, int streams, std::int64_t dtypeBytes,
                          const DeviceModel& device) {
  return detail::groupedGemmSeconds(m, n, k, count, streams, dtypeBytes, device);
}

double streamSeconds(double bytes, const DeviceModel& device) {
  if (bytes <= 0) return 0.0;
  return std::max(device.kernelFloorSeconds, bytes / device.memoryBytesPerSecond);
}

FusedAttentionSeconds fusedAttentionSeconds(double flops, const DeviceModel& device, double headDim) {
  if (flops <= 0) return {};
  // Attention's own peak, the sustained clock and the fused kernels' measured shares of it (their
  // wide-head shares above a query/key head dim of 128).
  const double rate = device.attentionPeakFlopsPerSecond * device.sustainedClock;
  const double floor = device.kernelFloorSeconds;
  const bool wide = headDim > 128;
  const double forward = wide ? device.flashWideFwdEfficiency : device.flashFwdEfficiency;
  const double backward = wide ? device.flashWideBwdEfficiency : device.flashBwdEfficiency;
  return {std::max(floor, flops / (rate * forward)), std::max(floor, 2.5 * flops / (rate * backward))};
}

namespace {

// torchao's rowwise recipe as measured (docs/costmodel.md, "float8 recipes"): its cast kernels (torch.compile's,
// with amax reductions along rows and along columns and the transposed copies) take 1.9 times what their
// bytes take at the elementwise stream rate, and each converted linear runs 80 us of GPU time more,
// forward and backward together. Both are the least mean |error| over torchao's published speedup table
// of a LayerNorm -> Linear -> Sigmoid block (216 shapes on H100; data/validation/published/kernels/),
// which colo-validate checks.
constexpr double kRowwiseCastTime = 1.9;
constexpr double kRowwiseLinearSeconds = 80e-6;

}  // namespace

Float8CastSeconds float8CastSeconds(Float8Recipe recipe, double input, double weight, double gradOutput, double linears,
                                    const DeviceModel& device) {
  Float8CastSeconds s;
  const double bw = device.memoryBytesPerSecond;
  const double floor = device.kernelFloorSeconds;
  double slow = 1.0;
  auto fwd = [&](double bytes) { s.forward += std::max(floor, slow * bytes / bw); ++s.kernelsForward; };
  auto bwd = [&](double bytes) { s.backward += std::max(floor, slow * bytes / bw); ++s.kernelsBackward; };
  // torchao's roofline of its recipes (torchao/testing/training/roofline_utils.py) counts the bytes each
  // kernel moves, with torch.compile fusing an activation's amax (and, rowwise, its read) into the kernel
  // before it. Every kernel costs at least the launch floor.
  switch (recipe) {
    case Float8Recipe::kTensorwise:
      fwd(4 * input);   // bf16 in, fp8 out twice (row- and column-major for the two GEMMs that use it)
      fwd(2 * weight);  // the weight's amax (nothing before it to fuse with)
      fwd(3 * weight);  // its cast for the forward GEMM
      bwd(3 * weight);  // and for the input-gradient GEMM
      bwd(4 * gradOutput);
      break;
    case Float8Recipe::kRowwise:
      slow = kRowwiseCastTime;
      // One linear's GEMMs: one forward, two backward.
      s.forward += linears * kRowwiseLinearSeconds / 3.0;
      s.backward += linears * kRowwiseLinearSeconds * 2.0 / 3.0;
      // A row's scale serves one GEMM only, so an operand is cast once per GEMM that reads it, along
      // that GEMM's reduction axis; the second cast goes through a transposed 16-bit copy.
      fwd(3 * input);       // fp8 along rows, and the transposed bf16 copy (its read fused before)
      bwd(3 * input);       // that copy to fp8, for the weight-gradient GEMM
      fwd(3 * weight);      // fp8 along rows, for the forward GEMM
      bwd(4 * weight);      // the transposed bf16 copy (read 2 B, write 2 B) ...
      bwd(3 * weight);      // ... to fp8, for the input-gradient GEMM
      bwd(3 * gradOutput);  // likewise the output gradient: fp8 along rows and the transposed copy,
      bwd(3 * gradOutput);  // then that copy to fp8
      // Without fast accumulation (the backward GEMMs) torchao runs the rowwise product through
      // cuBLAS's tensorwise kernel at unit scales and applies the row scales to its 16-bit output in a
      // kernel of its own (addmm_float8_unwrapped; pytorch/ao issue 2184): a read and a write of the
      // input gradient [m, k] and of the weight gradient [k, n].
      bwd(4 * input);
      bwd(4 * weight);
      break;
    case Float8Recipe::kRowwiseGwHp:
      // The weight-gradient GEMM stays in bf16: activations are cast along rows only, fused into the
      // kernel before them (which writes the fp8 copy beside its 16-bit output).
      fwd(1 * input);
      fwd(3 * weight);
      bwd(3 * weight);
      bwd(1 * gradOutput);
      break;
    case Float8Recipe::kTransformerEngine:
    case Float8Recipe::kMxfp8:
      break;
  }
  return s;
}

}  // namespace colo::costmodel
