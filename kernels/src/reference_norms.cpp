// CPU references: RMSNorm and LayerNorm, forward and backward.
#include <cmath>
#include <vector>

#include "colo/kernels/reference.h"

namespace colo::kernels::ref {

template <class T>
void rmsnormForward(const T* x, const T* weight, T* y, float* rstd, Index rows, Index cols, float eps) {
  for (Index r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    float squares = 0;
    for (Index c = 0; c < cols; ++c) squares += toFloat(xr[c]) * toFloat(xr[c]);
    const float s = 1.0f / std::sqrt(squares / static_cast<float>(cols) + eps);
    rstd[r] = s;
    for (Index c = 0; c < cols; ++c) y[r * cols + c] = fromFloat<T>(toFloat(xr[c]) * s * toFloat(weight[c]));
  }
}

// y_i = x_i s w_i with s = (mean(x^2) + eps)^-1/2:  dx_i = s w_i dy_i - x_i s^3 / n * sum_j dy_j w_j x_j.
template <class T>
void rmsnormBackward(const T* dy, const T* x, const T* weight, const float* rstd, T* dx, float* dweight, Index rows,
                     Index cols) {
  for (Index c = 0; c < cols; ++c) dweight[c] = 0;
  for (Index r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    const float s = rstd[r];
    float dot = 0;
    for (Index c = 0; c < cols; ++c) dot += toFloat(dyr[c]) * toFloat(weight[c]) * toFloat(xr[c]);
    const float k = dot * s * s * s / static_cast<float>(cols);
    for (Index c = 0; c < cols; ++c) {
      const float xv = toFloat(xr[c]), g = toFloat(dyr[c]);
      dx[r * cols + c] = fromFloat<T>(s * toFloat(weight[c]) * g - xv * k);
      dweight[c] += g * xv * s;
    }
  }
}

template <class T>
void layernormForward(const T* x, const T* weight, const T* bias, T* y, float* mean, float* rstd, Index rows, Index cols,
                      float eps) {
  const auto n = static_cast<float>(cols);
  for (Index r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    float sum = 0;
    for (Index c = 0; c < cols; ++c) sum += toFloat(xr[c]);
    const float mu = sum / n;
    float var = 0;
    for (Index c = 0; c < cols; ++c) var += (toFloat(xr[c]) - mu) * (toFloat(xr[c]) - mu);
    const float s = 1.0f / std::sqrt(var / n + eps);
    mean[r] = mu;
    rstd[r] = s;
    for (Index c = 0; c < cols; ++c) {
      y[r * cols + c] = fromFloat<T>((toFloat(xr[c]) - mu) * s * toFloat(weight[c]) + toFloat(bias[c]));
    }
  }
}

// With xhat = (x - mu) s and g = dy * w:  dx = s * (g - mean(g) - xhat * mean(g * xhat)).
template <class T>
void layernormBackward(const T* dy, const T* x, const T* weight, const float* mean, const float* rstd, T* dx,
                       float* dweight, float* dbias, Index rows, Index cols) {
  const auto n = static_cast<float>(cols);
  for (Index c = 0; c < cols; ++c) dweight[c] = dbias[c] = 0;
  for (Index r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    const float mu = mean[r], s = rstd[r];
    float sumG = 0, sumGx = 0;
    for (Index c = 0; c < cols; ++c) {
      const float g = toFloat(dyr[c]) * toFloat(weight[c]);
      sumG += g;
      sumGx += g * (toFloat(xr[c]) - mu) * s;
    }
    for (Index c = 0; c < cols; ++c) {
      const float xhat = (toFloat(xr[c]) - mu) * s, d = toFloat(dyr[c]);
      const float g = d * toFloat(weight[c]);
      dx[r * cols + c] = fromFloat<T>(s * (g - sumG / n - xhat * sumGx / n));
      dweight[c] += d * xhat;
      dbias[c] += d;
    }
  }
}

#define COLO_NORMS(T)                                                                                         \
  template void rmsnormForward<T>(const T*, const T*, T*, float*, Index, Index, float);                      \
  template void rmsnormBackward<T>(const T*, const T*, const T*, const float*, T*, float*, Index, Index);   \
  template void layernormForward<T>(const T*, const T*, const T*, T*, float*, float*, Index, Index, float); \
  template void layernormBackward<T>(const T*, const T*, const T*, const float*, const float*, T*, float*, float*, Index, Index);
COLO_NORMS(float)
COLO_NORMS(bf16)
#undef COLO_NORMS

}  // namespace colo::kernels::ref
