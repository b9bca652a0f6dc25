#pragma once
/// \file
/// What a GPU achieves, as opposed to its datasheet peak: the efficiencies the roofline applies.
/// Every constant is documented with its source in docs/costmodel.md.

#include <cstdint>

#include "colo/core/cluster.h"

namespace colo::costmodel {

/// Achievable-rate model of one GPU for one training precision.
struct DeviceModel {
  double peakFlopsPerSecond = 0;   ///< dense peak of the training precision
  double gemmEfficiency = 0;       ///< share of peak a large, well-shaped GEMM reaches (at boost clock)
  /// Attention's own products run at 16 bits under fp8 training (Transformer Engine's fp8_dpa and
  /// torchtitan's float8 converters leave them alone): their peak and GEMM share. Same as above otherwise.
  double attentionPeakFlopsPerSecond = 0;
  double attentionGemmEfficiency = 0;
  double sustainedClock = 1;       ///< share of the boost clock held under sustained tensor-core load
  double flashFwdEfficiency = 0;   ///< share of peak a fused attention forward reaches
  double flashBwdEfficiency = 0;   ///< share of peak a fused attention backward reaches
  /// The same two shares at a query/key head dim above 128 (DeepSeek's latent attention: 192), where the
  /// kernels tile the sequence in smaller blocks; the shares above where nothing was measured.
  double flashWideFwdEfficiency = 0;
  double flashWideBwdEfficiency = 0;
  double memoryBytesPerSecond = 0; ///< achievable device-memory bandwidth
  /// The host issues kernels to a separate device, which can run ahead of it or wait for it (false on a
  /// CPU, whose per-op cost is already its kernel floor). Kept between 8-byte members on purpose: a
  /// trailing bool leaves tail padding, where libc++ 16's std::expected keeps its has-value flag and a
  /// copy of the value overwrites it (LLVM issue 70494; found by the fuzz build).
  bool hostIssued = true;
  std::int64_t streamingProcessors = 0;  ///< SMs: GEMM tiles fill waves of this many
  double kernelFloorSeconds = 0;   ///< the least time any kernel takes (launch and tail)
  double contextBytes = 0;         ///< CUDA context, cuBLAS workspaces: memory outside the allocator
  double commChannelBytes = 0;     ///< NCCL FIFO per channel per connection of a communicator (0: no NCCL)
  double cpuAdamParamsPerSecond = 0;  ///< optimizer throughput of the host when states are offloaded (per GPU)
  /// Compute running beside an overlapped collective is this much slower (the collective's kernels
  /// hold SMs and memory bandwidth): a hidden collective of duration C still costs overlapSlowdown * C.
  double overlapSlowdown = 0;
  friend bool operator==(const DeviceModel&, const DeviceModel&) = default;
};

/// The device model of `gpu` training in `precision`. GPUs are recognised by name (V100, A100, H100,
/// H200, B200, RTX 4090/Ada); others get conservative defaults. `flashAttention2`: the fused attention
/// kernels are FlashAttention-2's (Execution::flashAttention2), slower than the GPU's own from Hopper on.
[[nodiscard]] DeviceModel deviceModel(const GpuSpec& gpu, DType precision, bool flashAttention2 = false);

/// Device memory NCCL keeps for one communicator of `group` (its per-channel FIFOs); 0 for one member.
[[nodiscard]] double communicatorBytes(const DeviceModel& device, std::int64_t members, LinkKind innermost, bool crossesNodes);

/// Fraction of a link level's nominal bandwidth that NCCL-style collectives achieve on it.
[[nodiscard]] inline double linkEfficiency(LinkKind kind) {
  switch (kind) {
    case LinkKind::kNvSwitch:
      return 0.78;  // NCCL all-reduce bus bandwidth ~235 of 300 GB/s (A100), ~360 of 450 (H100)
    case LinkKind::kNvLink:
      return 0.80;
    case LinkKind::kHybridCubeMesh:
      return 0.85;  // DGX-1: ~130 of 150 GB/s bus bandwidth in nccl-tests
    case LinkKind::kPcie:
      return 0.75;
    case LinkKind::kInfiniBand:
      return 0.90;  // ~23 of 25 GB/s per HDR NIC
    case LinkKind::kRoce:
      return 0.85;
    case LinkKind::kEthernet:
      return 0.70;
  }
  return 0.75;
}

}  // namespace colo::costmodel
