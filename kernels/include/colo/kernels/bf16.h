#pragma once
// bfloat16 on the host: the upper 16 bits of an IEEE float, rounded to nearest even; the same bits as
// CUDA's __nv_bfloat16 and LibTorch's at::BFloat16, so a buffer of either is a buffer of this.
#include <bit>
#include <cstdint>
#include <type_traits>

namespace colo::kernels {

struct bf16 {
  std::uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

/// The float with these upper bits (exact).
[[nodiscard]] inline float toFloat(bf16 v) { return std::bit_cast<float>(static_cast<std::uint32_t>(v.bits) << 16); }
[[nodiscard]] inline float toFloat(float v) { return v; }

/// Round to nearest, ties to even; NaN stays a (quiet) NaN.
[[nodiscard]] inline bf16 toBf16(float v) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return bf16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>((u + rounding) >> 16)};
}

/// Stores a float as T (float: as is; bf16: rounded).
template <class T>
[[nodiscard]] inline T fromFloat(float v) {
  if constexpr (std::is_same_v<T, bf16>) return toBf16(v);
  else return v;
}

}  // namespace colo::kernels
