// RMSNorm and LayerNorm: one block per row for the row statistics and dx; the weight (and bias)
// gradients by a column reduction over groups of rows, accumulated with atomics into cleared fp32.
#include "common.cuh"

namespace colo::kernels::cuda {
namespace detail {
namespace {

template <class T>
__global__ void rmsnormForwardKernel(const T* x, const T* w, T* y, float* rstd, Index cols, float eps) {
  __shared__ float shared[kBlock / 32];
  const Index row = blockIdx.x;
  const T* xr = x + row * cols;
  float squares = 0;
  for (Index c = threadIdx.x; c < cols; c += blockDim.x) squares += load(xr, c) * load(xr, c);
  const float s = rsqrtf(blockSum(squares, shared) / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[row] = s;
  for (Index c = threadIdx.x; c < cols; c += blockDim.x) store(y, row * cols + c, load(xr, c) * s * load(w, c));
}

template <class T>
__global__ void rmsnormBackwardKernel(const T* dy, const T* x, const T* w, const float* rstd, T* dx, Index cols) {
  __shared__ float shared[kBlock / 32];
  const Index row = blockIdx.x;
  const T* xr = x + row * cols;
  const T* dyr = dy + row * cols;
  const float s = rstd[row];
  float dot = 0;
  for (Index c = threadIdx.x; c < cols; c += blockDim.x) dot += load(dyr, c) * load(w, c) * load(xr, c);
  const float k = blockSum(dot, shared) * s * s * s / static_cast<float>(cols);
  for (Index c = threadIdx.x; c < cols; c += blockDim.x) {
    store(dx, row * cols + c, s * load(w, c) * load(dyr, c) - load(xr, c) * k);
  }
}

template <class T>
__global__ void layernormForwardKernel(const T* x, const T* w, const T* b, T* y, float* mean, float* rstd, Index cols, float eps) {
  __shared__ float shared[kBlock / 32];
  const Index row = blockIdx.x;
  const T* xr = x + row * cols;
  const float n = static_cast<float>(cols);
  float sum = 0;
  for (Index c = threadIdx.x; c < cols; c += blockDim.x) sum += load(xr, c);
  const float mu = blockSum(sum, shared) / n;
  float var = 0;  // two passes over the row (cached): no cancellation for rows with a large mean
  for (Index c = threadIdx.x; c < cols; c += blockDim.x) var += (load(xr, c) - mu) * (load(xr, c) - mu);
  const float s = rsqrtf(blockSum(var, shared) / n + eps);
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = s;
  }
  for (Index c = threadIdx.x; c < cols; c += blockDim.x) store(y, row * cols + c, (load(xr, c) - mu) * s * load(w, c) + load(b, c));
}

template <class T>
__global__ void layernormBackwardKernel(const T* dy, const T* x, const T* w, const float* mean, const float* rstd, T* dx, Index cols) {
  __shared__ float shared[kBlock / 32];
  const Index row = blockIdx.x;
  const T* xr = x + row * cols;
  const T* dyr = dy + row * cols;
  const float mu = mean[row], s = rstd[row], n = static_cast<float>(cols);
  float sumG = 0, sumGx = 0;
  for (Index c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = load(dyr, c) * load(w, c);
    sumG += g;
    sumGx += g * (load(xr, c) - mu) * s;
  }
  sumG = blockSum(sumG, shared);
  sumGx = blockSum(sumGx, shared);
  for (Index c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (load(xr, c) - mu) * s;
    store(dx, row * cols + c, s * (load(dyr, c) * load(w, c) - sumG / n - xhat * sumGx / n));
  }
}

constexpr int kRowGroups = 64;  // row groups of the column reductions (blocks along y)

// dweight[c] += sum over this group's rows of dy * xhat (xhat = x * rstd, or (x - mean) * rstd);
// dbias[c] += sum of dy (when dbias is not null).
template <class T>
__global__ void normParamGradKernel(const T* dy, const T* x, const float* mean, const float* rstd, float* dweight, float* dbias,
                                    Index rows, Index cols) {
  const Index c = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const Index per = (rows + gridDim.y - 1) / gridDim.y;
  const Index first = blockIdx.y * per;
  const Index last = first + per < rows ? first + per : rows;
  float gw = 0, gb = 0;
  for (Index r = first; r < last; ++r) {
    const float d = load(dy, r * cols + c);
    gw += d * (load(x, r * cols + c) - (mean ? mean[r] : 0.0f)) * rstd[r];
    gb += d;
  }
  if (first < last) {
    atomicAdd(dweight + c, gw);
    if (dbias) atomicAdd(dbias + c, gb);
  }
}

template <class D>
Status paramGrads(const D* dy, const D* x, const float* mean, const float* rstd, float* dweight, float* dbias, Index rows,
                  Index cols, cudaStream_t s) {
  if (auto e = cudaMemsetAsync(dweight, 0, sizeof(float) * cols, s)) return static_cast<Status>(e);
  if (dbias) {
    if (auto e = cudaMemsetAsync(dbias, 0, sizeof(float) * cols, s)) return static_cast<Status>(e);
  }
  const unsigned groups = static_cast<unsigned>(rows < kRowGroups ? (rows < 1 ? 1 : rows) : kRowGroups);
  normParamGradKernel<<<dim3(blocksFor(cols), groups), kBlock, 0, s>>>(dy, x, mean, rstd, dweight, dbias, rows, cols);
  return launched();
}

}  // namespace
}  // namespace detail

using namespace detail;

template <class T>
Status rmsnormForward(const T* x, const T* weight, T* y, float* rstd, Index rows, Index cols, float eps, Stream stream) {
  if (rows <= 0) return 0;
  if (rows > kMaxRows) return static_cast<Status>(cudaErrorInvalidValue);
  rmsnormForwardKernel<<<static_cast<unsigned>(rows), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(dev(x), dev(weight), dev(y), rstd, cols, eps);
  return launched();
}

template <class T>
Status rmsnormBackward(const T* dy, const T* x, const T* weight, const float* rstd, T* dx, float* dweight, Index rows, Index cols,
                       Stream stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (rows > kMaxRows) return static_cast<Status>(cudaErrorInvalidValue);
  // The weight gradient first: it re-reads dy and x, which an in-place dx would overwrite.
  if (auto e = paramGrads(dev(dy), dev(x), nullptr, rstd, dweight, nullptr, rows, cols, s)) return e;
  if (rows > 0) rmsnormBackwardKernel<<<static_cast<unsigned>(rows), kBlock, 0, s>>>(dev(dy), dev(x), dev(weight), rstd, dev(dx), cols);
  return launched();
}

template <class T>
Status layernormForward(const T* x, const T* weight, const T* bias, T* y, float* mean, float* rstd, Index rows, Index cols, float eps,
                        Stream stream) {
  if (rows <= 0) return 0;
  if (rows > kMaxRows) return static_cast<Status>(cudaErrorInvalidValue);
  layernormForwardKernel<<<static_cast<unsigned>(rows), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      dev(x), dev(weight), dev(bias), dev(y), mean, rstd, cols, eps);
  return launched();
}

template <class T>
Status layernormBackward(const T* dy, const T* x, const T* weight, const float* mean, const float* rstd, T* dx, float* dweight,
                         float* dbias, Index rows, Index cols, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (rows > kMaxRows) return static_cast<Status>(cudaErrorInvalidValue);
  if (auto e = paramGrads(dev(dy), dev(x), mean, rstd, dweight, dbias, rows, cols, s)) return e;  // before an in-place dx
  if (rows > 0) {
    layernormBackwardKernel<<<static_cast<unsigned>(rows), kBlock, 0, s>>>(dev(dy), dev(x), dev(weight), mean, rstd, dev(dx), cols);
  }
  return launched();
}

#define COLO_NORMS(T)                                                                                                  \
  template Status rmsnormForward<T>(const T*, const T*, T*, float*, Index, Index, float, Stream);                     \
  template Status rmsnormBackward<T>(const T*, const T*, const T*, const float*, T*, float*, Index, Index, Stream);    \
  template Status layernormForward<T>(const T*, const T*, const T*, T*, float*, float*, Index, Index, float, Stream);  \
  template Status layernormBackward<T>(const T*, const T*, const T*, const float*, const float*, T*, float*, float*, Index, \
                                       Index, Stream);
COLO_NORMS(float)
COLO_NORMS(bf16)
#undef COLO_NORMS

}  // namespace colo::kernels::cuda
