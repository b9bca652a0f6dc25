#pragma once
// The Adam arithmetic shared by the CPU references and the CUDA kernels (host and device).
#include <cmath>

#include "pointwise_math.h"

namespace colo::kernels::math {

struct AdamFactors {
  float correction1 = 1, correction2 = 1;  ///< 1 - beta^step
};

inline AdamFactors adamFactors(float beta1, float beta2, long long step) {
  return {1.0f - std::pow(beta1, static_cast<float>(step)), 1.0f - std::pow(beta2, static_cast<float>(step))};
}

/// mhat / (sqrt(vhat) + eps) from the moments as they are.
COLO_HD float adamUpdate(float m, float v, AdamFactors f, float eps) {
  return (m / f.correction1) / (sqrtf(v / f.correction2) + eps);
}

/// Updates the moments with gradient g and returns the Adam direction.
COLO_HD float adamMoments(float g, float& m, float& v, float beta1, float beta2, AdamFactors f, float eps) {
  m = beta1 * m + (1.0f - beta1) * g;
  v = beta2 * v + (1.0f - beta2) * g * g;
  return adamUpdate(m, v, f, eps);
}

/// LAMB's ||w|| / ||update||, 1 where either is 0 (the executor's LAMB and Apex FusedLAMB alike).
COLO_HD float trustRatio(float weightNorm, float updateNorm) {
  return weightNorm > 0.0f && updateNorm > 0.0f ? weightNorm / updateNorm : 1.0f;
}

}  // namespace colo::kernels::math
