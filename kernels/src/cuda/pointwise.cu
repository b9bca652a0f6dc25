// SwiGLU, bias + GeLU and rotary embedding: one thread per output element (grid-stride).
#include "../pointwise_math.h"
#include "common.cuh"

namespace colo::kernels::cuda {
namespace detail {
namespace {

#define COLO_GRID_STRIDE(i, n) \
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += static_cast<Index>(gridDim.x) * blockDim.x)

template <class T>
__global__ void swigluForwardKernel(const T* gateUp, T* y, Index rows, Index cols) {
  COLO_GRID_STRIDE(i, rows * cols) {
    const Index r = i / cols, c = i % cols;
    store(y, i, math::silu(load(gateUp, r * 2 * cols + c)) * load(gateUp, r * 2 * cols + cols + c));
  }
}

template <class T>
__global__ void swigluBackwardKernel(const T* dy, const T* gateUp, T* dGateUp, Index rows, Index cols) {
  COLO_GRID_STRIDE(i, rows * cols) {
    const Index r = i / cols, c = i % cols;
    const float g = load(gateUp, r * 2 * cols + c), u = load(gateUp, r * 2 * cols + cols + c), d = load(dy, i);
    store(dGateUp, r * 2 * cols + c, d * u * math::siluGrad(g));
    store(dGateUp, r * 2 * cols + cols + c, d * math::silu(g));
  }
}

template <class T>
__global__ void biasGeluForwardKernel(const T* x, const T* bias, T* y, Index rows, Index cols) {
  COLO_GRID_STRIDE(i, rows * cols) { store(y, i, math::gelu(load(x, i) + load(bias, i % cols))); }
}

template <class T>
__global__ void biasGeluBackwardKernel(const T* dy, const T* x, const T* bias, T* dx, Index rows, Index cols) {
  COLO_GRID_STRIDE(i, rows * cols) { store(dx, i, load(dy, i) * math::geluGrad(load(x, i) + load(bias, i % cols))); }
}

constexpr int kRowGroups = 64;

// dbias[c] += the fp32 gradient summed over this group's rows (recomputed, not read back rounded).
template <class T>
__global__ void biasGeluBiasGradKernel(const T* dy, const T* x, const T* bias, float* dbias, Index rows, Index cols) {
  const Index c = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const Index per = (rows + gridDim.y - 1) / gridDim.y;
  const Index first = blockIdx.y * per;
  const Index last = first + per < rows ? first + per : rows;
  const float b = load(bias, c);
  float sum = 0;
  for (Index r = first; r < last; ++r) sum += load(dy, r * cols + c) * math::geluGrad(load(x, r * cols + c) + b);
  if (first < last) atomicAdd(dbias + c, sum);
}

// sign +1: the rotation; -1: its inverse. One thread per (token, head, pair).
template <class T>
__global__ void rotaryKernel(const T* in, const float* cos, const float* sin, T* out, Index tokens, Index heads, Index headDim,
                             float sign) {
  const Index half = headDim / 2;
  COLO_GRID_STRIDE(i, tokens * heads * half) {
    const Index p = i % half, th = i / half, t = th / heads;
    const Index base = th * headDim;
    const float c = cos[t * half + p], s = sign * sin[t * half + p];
    const float x1 = load(in, base + p), x2 = load(in, base + p + half);
    store(out, base + p, x1 * c - x2 * s);
    store(out, base + p + half, x2 * c + x1 * s);
  }
}

}  // namespace
}  // namespace detail

using namespace detail;

template <class T>
Status swigluForward(const T* gateUp, T* y, Index rows, Index cols, Stream stream) {
  swigluForwardKernel<<<blocksFor(rows * cols), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(dev(gateUp), dev(y), rows, cols);
  return launched();
}

template <class T>
Status swigluBackward(const T* dy, const T* gateUp, T* dGateUp, Index rows, Index cols, Stream stream) {
  swigluBackwardKernel<<<blocksFor(rows * cols), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(dev(dy), dev(gateUp), dev(dGateUp),
                                                                                                   rows, cols);
  return launched();
}

template <class T>
Status biasGeluForward(const T* x, const T* bias, T* y, Index rows, Index cols, Stream stream) {
  biasGeluForwardKernel<<<blocksFor(rows * cols), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(dev(x), dev(bias), dev(y), rows, cols);
  return launched();
}

template <class T>
Status biasGeluBackward(const T* dy, const T* x, const T* bias, T* dx, float* dbias, Index rows, Index cols, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream);
  // The bias gradient first: it re-reads dy and x, which an in-place dx would overwrite.
  if (auto e = cudaMemsetAsync(dbias, 0, sizeof(float) * cols, s)) return static_cast<Status>(e);
  const unsigned groups = static_cast<unsigned>(rows < kRowGroups ? (rows < 1 ? 1 : rows) : kRowGroups);
  biasGeluBiasGradKernel<<<dim3(blocksFor(cols), groups), kBlock, 0, s>>>(dev(dy), dev(x), dev(bias), dbias, rows, cols);
  if (auto e = launched()) return e;
  biasGeluBackwardKernel<<<blocksFor(rows * cols), kBlock, 0, s>>>(dev(dy), dev(x), dev(bias), dev(dx), rows, cols);
  return launched();
}

template <class T>
Status rotaryForward(const T* x, const float* cos, const float* sin, T* y, Index tokens, Index heads, Index headDim, Stream stream) {
  rotaryKernel<<<blocksFor(tokens * heads * (headDim / 2)), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      dev(x), cos, sin, dev(y), tokens, heads, headDim, 1.0f);
  return launched();
}

template <class T>
Status rotaryBackward(const T* dy, const float* cos, const float* sin, T* dx, Index tokens, Index heads, Index headDim, Stream stream) {
  rotaryKernel<<<blocksFor(tokens * heads * (headDim / 2)), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      dev(dy), cos, sin, dev(dx), tokens, heads, headDim, -1.0f);
  return launched();
}

#define COLO_POINTWISE(T)                                                                                        \
  template Status swigluForward<T>(const T*, T*, Index, Index, Stream);                                         \
  template Status swigluBackward<T>(const T*, const T*, T*, Index, Index, Stream);                              \
  template Status biasGeluForward<T>(const T*, const T*, T*, Index, Index, Stream);                             \
  template Status biasGeluBackward<T>(const T*, const T*, const T*, T*, float*, Index, Index, Stream);          \
  template Status rotaryForward<T>(const T*, const float*, const float*, T*, Index, Index, Index, Stream);      \
  template Status rotaryBackward<T>(const T*, const float*, const float*, T*, Index, Index, Index, Stream);
COLO_POINTWISE(float)
COLO_POINTWISE(bf16)
#undef COLO_POINTWISE

}  // namespace colo::kernels::cuda
