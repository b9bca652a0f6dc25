#pragma once
// Private: timing of non-GEMM kernels (see kernels.cpp).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "colo/core/cluster.h"
#include "colo/core/error.h"
#include "colo/profiler/profiler.h"

namespace colo::profiler::detail {

/// Forward and (for differentiable kernels) backward time of kernel `key` over `elements` (rows of
/// `width` for row-wise kernels). Keys: layernorm, rmsnorm, softmax, dropout, add, gelu, relu, silu,
/// swiglu, geglu, cross_entropy, embedding, rotary, and adam_step (one AdamW step over `elements` fp32
/// weights; forward only). Errors: kBadInput for other keys.
[[nodiscard]] Result<std::pair<Timing, std::optional<Timing>>> timeKernel(const std::string& key, std::int64_t elements,
                                                                          std::int64_t width, DType dtype,
                                                                          const std::string& device, int warmup, int repetitions);

/// Whether `device` runs colo's own kernels (a CUDA device, in a build that has them): what colo-run
/// steps with there, and so what the profiler times.
[[nodiscard]] bool coloSteps(const std::string& device);

/// Which AdamW step timeKernel("adam_step") times on `device`: colo's fused multi-tensor kernel on a
/// CUDA device where the build has it (what colo-run steps with there, as frameworks step with their
/// fused Adam), LibTorch's torch::optim::AdamW otherwise. The name goes into the database's impl column.
[[nodiscard]] std::string adamImplementation(const std::string& device);

/// Which implementation timeKernel(key) times on `device`: "colo fused" for the kernels colo-run runs
/// as colo's own on a CUDA device (RMSNorm, LayerNorm, rotary, the vocabulary-parallel cross-entropy,
/// SwiGLU: its --fused-kernels auto set) where the build has them, "aten" (LibTorch's operators) otherwise.
[[nodiscard]] std::string kernelImplementation(const std::string& key, const std::string& device);

/// One host-device copy of `bytes` ("h2d" or "d2h", pinned or pageable host memory) on a CUDA device.
/// Errors: kBadInput on a device that is not CUDA.
[[nodiscard]] Result<Timing> timeCopy(const std::string& direction, bool pinned, std::int64_t bytes, const std::string& device,
                                      int warmup, int repetitions);

}  // namespace colo::profiler::detail
