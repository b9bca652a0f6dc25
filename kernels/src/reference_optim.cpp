// CPU references: the gradients' sum of squares; AdamW and LAMB over flat fp32 master buffers (multi-tensor).
#include <cmath>

#include "colo/kernels/reference.h"
#include "optim_math.h"

namespace colo::kernels::ref {

template <class T>
void addSumOfSquares(const T* x, Index n, double* out) {
  double sum = 0;
  for (Index i = 0; i < n; ++i) {
    const double v = toFloat(x[i]);
    sum += v * v;
  }
  *out += sum;
}

template <class G>
void adamwStep(std::span<const FlatTensor<G>> tensors, const AdamWConfig& config, float gradScale) {
  const math::AdamFactors f = math::adamFactors(config.beta1, config.beta2, config.step);
  for (const FlatTensor<G>& t : tensors) {
    for (Index i = 0; i < t.numel; ++i) {
      const float u = math::adamMoments(toFloat(t.grad[i]) * gradScale, t.expAvg[i], t.expAvgSq[i], config.beta1,
                                        config.beta2, f, config.eps);
      t.param[i] -= config.lr * (u + config.weightDecay * t.param[i]);
      if (t.modelCopy) t.modelCopy[i] = toBf16(t.param[i]);
    }
  }
}

template <class G>
void lambStep(std::span<const FlatTensor<G>> tensors, const LambConfig& config, float gradScale) {
  const math::AdamFactors f = math::adamFactors(config.beta1, config.beta2, config.step);
  for (const FlatTensor<G>& t : tensors) {
    // Pass 1: the moments, and the norms of the weights and of the update (kept in expAvg/expAvgSq).
    double weightNorm = 0, updateNorm = 0;
    for (Index i = 0; i < t.numel; ++i) {
      const float u = math::adamMoments(toFloat(t.grad[i]) * gradScale, t.expAvg[i], t.expAvgSq[i], config.beta1,
                                        config.beta2, f, config.eps) +
                      config.weightDecay * t.param[i];
      weightNorm += static_cast<double>(t.param[i]) * t.param[i];
      updateNorm += static_cast<double>(u) * u;
    }
    const float trust = math::trustRatio(static_cast<float>(std::sqrt(weightNorm)), static_cast<float>(std::sqrt(updateNorm)));
    // Pass 2: the update again from the new moments, scaled by the trust ratio.
    for (Index i = 0; i < t.numel; ++i) {
      const float u = math::adamUpdate(t.expAvg[i], t.expAvgSq[i], f, config.eps) + config.weightDecay * t.param[i];
      t.param[i] -= config.lr * trust * u;
      if (t.modelCopy) t.modelCopy[i] = toBf16(t.param[i]);
    }
  }
}

template void addSumOfSquares<float>(const float*, Index, double*);
template void addSumOfSquares<bf16>(const bf16*, Index, double*);
template void adamwStep<float>(std::span<const FlatTensor<float>>, const AdamWConfig&, float);
template void adamwStep<bf16>(std::span<const FlatTensor<bf16>>, const AdamWConfig&, float);
template void lambStep<float>(std::span<const FlatTensor<float>>, const LambConfig&, float);
template void lambStep<bf16>(std::span<const FlatTensor<bf16>>, const LambConfig&, float);

}  // namespace colo::kernels::ref
