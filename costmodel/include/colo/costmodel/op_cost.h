#pragma once
/// \file
/// The per-kernel timings the evaluator's roofline uses, for planners that cost operators one by one
/// (the operator-level auto-parallel solver): a GEMM with tile and wave quantisation, a memory-bound
/// kernel, and fused attention. Same formulas and constants as the evaluator (docs/costmodel.md).

#include <cstdint>

#include "colo/core/plan.h"
#include "colo/costmodel/hardware.h"

namespace colo::costmodel {

/// Seconds of `count` GEMMs [m, k] x [k, n] with `dtypeBytes` operands on the device (0 for an empty one).
[[nodiscard]] double gemmSeconds(double m, double n, double k, double count, std::int64_t dtypeBytes,
                                 const DeviceModel& device);

/// Seconds of `count` expert GEMMs [m, k] x [k, n]: one grouped kernel when `streams` is 0, else one
/// GEMM per expert launched in turn over `streams` streams, as Transformer Engine's GroupedLinear runs
/// them (docs/costmodel.md, "Transformer Engine's grouped linear").
[[nodiscard]] double groupedGemmSeconds(double m, double n, double k, double count, int streams,
                                        std::int64_t dtypeBytes, const DeviceModel& device);

/// Seconds of a memory-bound kernel that reads and writes `bytes` in all (at least the kernel floor;
/// 0 when it moves nothing).
[[nodiscard]] double streamSeconds(double bytes, const DeviceModel& device);

/// Forward and backward seconds of fused (Flash) attention doing `flops` of score and context products
/// forward after any causal or window mask (the backward does 2.5 times the forward's work), at a
/// query/key head dim of `headDim` (above 128 the device's wide-head shares apply).
struct FusedAttentionSeconds {
  double forward = 0, backward = 0;
};
[[nodiscard]] FusedAttentionSeconds fusedAttentionSeconds(double flops, const DeviceModel& device, double headDim);

/// torchao's float8 casts around `linears` nn.Linear layers that share one input (torchtitan's float8
/// converter; a fused GEMM of colo's graph, such as qkv, stands for several): the kernels each recipe runs
/// on the input [m, k], the weights [k, n] and the output gradient [m, n] (element counts, all linears
/// together), forward and backward. Nothing for Transformer Engine, whose casts are fused into the kernels
/// around its GEMMs. docs/costmodel.md, "float8 recipes".
struct Float8CastSeconds {
  double forward = 0, backward = 0;
  int kernelsForward = 0, kernelsBackward = 0;
};
[[nodiscard]] Float8CastSeconds float8CastSeconds(Float8Recipe recipe, double input, double weight, double gradOutput,
                                                  double linears, const DeviceModel& device);

}  // namespace colo::costmodel
