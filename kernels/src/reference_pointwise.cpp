// CPU references: SwiGLU, bias + GeLU (tanh), rotary embedding.
#include <cmath>

#include "colo/kernels/reference.h"
#include "pointwise_math.h"

namespace colo::kernels::ref {

template <class T>
void swigluForward(const T* gateUp, T* y, Index rows, Index cols) {
  for (Index r = 0; r < rows; ++r) {
    for (Index c = 0; c < cols; ++c) {
      const float g = toFloat(gateUp[r * 2 * cols + c]), u = toFloat(gateUp[r * 2 * cols + cols + c]);
      y[r * cols + c] = fromFloat<T>(math::silu(g) * u);
    }
  }
}

template <class T>
void swigluBackward(const T* dy, const T* gateUp, T* dGateUp, Index rows, Index cols) {
  for (Index r = 0; r < rows; ++r) {
    for (Index c = 0; c < cols; ++c) {
      const float g = toFloat(gateUp[r * 2 * cols + c]), u = toFloat(gateUp[r * 2 * cols + cols + c]);
      const float d = toFloat(dy[r * cols + c]);
      dGateUp[r * 2 * cols + c] = fromFloat<T>(d * u * math::siluGrad(g));
      dGateUp[r * 2 * cols + cols + c] = fromFloat<T>(d * math::silu(g));
    }
  }
}

template <class T>
void biasGeluForward(const T* x, const T* bias, T* y, Index rows, Index cols) {
  for (Index r = 0; r < rows; ++r) {
    for (Index c = 0; c < cols; ++c) y[r * cols + c] = fromFloat<T>(math::gelu(toFloat(x[r * cols + c]) + toFloat(bias[c])));
  }
}

template <class T>
void biasGeluBackward(const T* dy, const T* x, const T* bias, T* dx, float* dbias, Index rows, Index cols) {
  for (Index c = 0; c < cols; ++c) dbias[c] = 0;
  for (Index r = 0; r < rows; ++r) {
    for (Index c = 0; c < cols; ++c) {
      const float d = toFloat(dy[r * cols + c]) * math::geluGrad(toFloat(x[r * cols + c]) + toFloat(bias[c]));
      dx[r * cols + c] = fromFloat<T>(d);
      dbias[c] += d;
    }
  }
}

namespace {
// sign +1: forward rotation; -1: its inverse.
template <class T>
void rotate(const T* in, const float* cos, const float* sin, T* out, Index tokens, Index heads, Index headDim, float sign) {
  const Index half = headDim / 2;
  for (Index t = 0; t < tokens; ++t) {
    for (Index h = 0; h < heads; ++h) {
      const T* a = in + (t * heads + h) * headDim;
      T* b = out + (t * heads + h) * headDim;
      for (Index i = 0; i < half; ++i) {
        const float c = cos[t * half + i], s = sign * sin[t * half + i];
        const float x1 = toFloat(a[i]), x2 = toFloat(a[i + half]);
        b[i] = fromFloat<T>(x1 * c - x2 * s);
        b[i + half] = fromFloat<T>(x2 * c + x1 * s);
      }
    }
  }
}
}  // namespace

template <class T>
void rotaryForward(const T* x, const float* cos, const float* sin, T* y, Index tokens, Index heads, Index headDim) {
  rotate(x, cos, sin, y, tokens, heads, headDim, 1.0f);
}

template <class T>
void rotaryBackward(const T* dy, const float* cos, const float* sin, T* dx, Index tokens, Index heads, Index headDim) {
  rotate(dy, cos, sin, dx, tokens, heads, headDim, -1.0f);
}

#define COLO_POINTWISE(T)                                                                             \
  template void swigluForward<T>(const T*, T*, Index, Index);                                        \
  template void swigluBackward<T>(const T*, const T*, T*, Index, Index);                             \
  template void biasGeluForward<T>(const T*, const T*, T*, Index, Index);                            \
  template void biasGeluBackward<T>(const T*, const T*, const T*, T*, float*, Index, Index);         \
  template void rotaryForward<T>(const T*, const float*, const float*, T*, Index, Index, Index);     \
  template void rotaryBackward<T>(const T*, const float*, const float*, T*, Index, Index, Index);
COLO_POINTWISE(float)
COLO_POINTWISE(bf16)
#undef COLO_POINTWISE

}  // namespace colo::kernels::ref
