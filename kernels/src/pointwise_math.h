#pragma once
// The activation formulas, shared by the CPU references and the CUDA kernels (host and device).
#include <cmath>

#if defined(__CUDACC__)
#define COLO_HD __host__ __device__ __forceinline__
#else
#define COLO_HD inline
#endif

namespace colo::kernels::math {

COLO_HD float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }
COLO_HD float silu(float g) { return g * sigmoid(g); }
/// d silu / dg = s (1 + g (1 - s)).
COLO_HD float siluGrad(float g) {
  const float s = sigmoid(g);
  return s * (1.0f + g * (1.0f - s));
}

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;
/// gelu(z) = z/2 (1 + tanh(k (z + c z^3))), Megatron's and PyTorch's approximate="tanh".
COLO_HD float gelu(float z) { return 0.5f * z * (1.0f + tanhf(kGeluK * (z + kGeluC * z * z * z))); }
COLO_HD float geluGrad(float z) {
  const float t = tanhf(kGeluK * (z + kGeluC * z * z * z));
  return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * z * z);
}

}  // namespace colo::kernels::math
