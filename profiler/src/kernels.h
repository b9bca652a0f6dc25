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
/// swiglu, geglu, cross_entropy. Errors: kBadInput for other keys.
[[nodiscard]] Result<std::pair<Timing, std::optional<Timing>>> timeKernel(const std::string& key, std::int64_t elements,
                                                                          std::int64_t width, DType dtype,
                                                                          const std::string& device, int warmup, int repetitions);

}  // namespace colo::profiler::detail
