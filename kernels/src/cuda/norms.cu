// RMSNorm and LayerNorm: one block per row for the row statistics and dx; the weight (and bias)
// gradients by a column reduction over groups of rows, accumulated with atomics into cleared fp32.
// Where rows are whole packs (16 bytes) and pointers pack-aligned, each thread moves packs (a row of
// 1024 bf16 is 128 packs: one block of 128 threads), and the column reduction gives each thread a
// column pack over a group of rows; otherwise one element at a time.
#include <initializer_list>

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

// Packed row kernels: block of `blockDim.x` threads over the row's packs.
template <class D>
__global__ void rmsnormForwardPacked(const D* x, const D* w, D* y, float* rstd, Index cols, float eps) {
  constexpr int N = kPack<D>;
  __shared__ float shared[kBlock / 32];
  const Index row = blockIdx.x, packs = cols / N;
  const D* xr = x + row * cols;
  float squares = 0;
  for (Index p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
    loadPack(xr, p * N, v);
#pragma unroll
    for (int k = 0; k < N; ++k) squares += v[k] * v[k];
  }
  const float s = rsqrtf(blockSum(squares, shared) / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[row] = s;
  for (Index p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N], g[N];
    loadPack(xr, p * N, v);
    loadPack(w, p * N, g);
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = v[k] * s * g[k];
    storePack(y, row * cols + p * N, v);
  }
}

template <class D>
__global__ void rmsnormBackwardPacked(const D* dy, const D* x, const D* w, const float* rstd, D* dx, Index cols) {
  constexpr int N = kPack<D>;
  __shared__ float shared[kBlock / 32];
  const Index row = blockIdx.x, packs = cols / N;
  const D* xr = x + row * cols;
  const D* dyr = dy + row * cols;
  const float s = rstd[row];
  float dot = 0;
  for (Index p = threadIdx.x; p < packs; p += blockDim.x) {
    float d[N], g[N], v[N];
    loadPack(dyr, p * N, d);
    loadPack(w, p * N, g);
    loadPack(xr, p * N, v);
#pragma unroll
    for (int k = 0; k < N; ++k) dot += d[k] * g[k] * v[k];
  }
  const float k3 = blockSum(dot, shared) * s * s * s / static_cast<float>(cols);
  for (Index p = threadIdx.x; p < packs; p += blockDim.x) {
    float d[N], g[N], v[N];
    loadPack(dyr, p * N, d);
    loadPack(w, p * N, g);
    loadPack(xr, p * N, v);
#pragma unroll
    for (int k = 0; k < N; ++k) d[k] = s * g[k] * d[k] - v[k] * k3;
    storePack(dx, row * cols + p * N, d);
  }
}

template <class D>
__global__ void layernormForwardPacked(const D* x, const D* w, const D* b, D* y, float* mean, float* rstd, Index cols, float eps) {
  constexpr int N = kPack<D>;
  __shared__ float shared[kBlock / 32];
  const Index row = blockIdx.x, packs = cols / N;
  const D* xr = x + row * cols;
  const float n = static_cast<float>(cols);
  float sum = 0;
  for (Index p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
    loadPack(xr, p * N, v);
#pragma unroll
    for (int k = 0; k < N; ++k) sum += v[k];
  }
  const float mu = blockSum(sum, shared) / n;
  float var = 0;  // two passes over the row (cached): no cancellation for rows with a large mean
  for (Index p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
    loadPack(xr, p * N, v);
#pragma unroll
    for (int k = 0; k < N; ++k) var += (v[k] - mu) * (v[k] - mu);
  }
  const float s = rsqrtf(blockSum(var, shared) / n + eps);
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = s;
  }
  for (Index p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N], g[N], o[N];
    loadPack(xr, p * N, v);
    loadPack(w, p * N, g);
    loadPack(b, p * N, o);
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] += (v[k] - mu) * s * g[k];
    storePack(y, row * cols + p * N, o);
  }
}

template <class D>
__global__ void layernormBackwardPacked(const D* dy, const D* x, const D* w, const float* mean, const float* rstd, D* dx, Index cols) {
  constexpr int N = kPack<D>;
  __shared__ float shared[kBlock / 32];
  const Index row = blockIdx.x, packs = cols / N;
  const D* xr = x + row * cols;
  const D* dyr = dy + row * cols;
  const float mu = mean[row], s = rstd[row], n = static_cast<float>(cols);
  float sumG = 0, sumGx = 0;
  for (Index p = threadIdx.x; p < packs; p += blockDim.x) {
    float d[N], g[N], v[N];
    loadPack(dyr, p * N, d);
    loadPack(w, p * N, g);
    loadPack(xr, p * N, v);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float gk = d[k] * g[k];
      sumG += gk;
      sumGx += gk * (v[k] - mu) * s;
    }
  }
  sumG = blockSum(sumG, shared);
  sumGx = blockSum(sumGx, shared);
  for (Index p = threadIdx.x; p < packs; p += blockDim.x) {
    float d[N], g[N], v[N];
    loadPack(dyr, p * N, d);
    loadPack(w, p * N, g);
    loadPack(xr, p * N, v);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float xhat = (v[k] - mu) * s;
      d[k] = s * (d[k] * g[k] - sumG / n - xhat * sumGx / n);
    }
    storePack(dx, row * cols + p * N, d);
  }
}

// The column reduction by packs: the thread of column pack c sums rows blockIdx.y, + gridDim.y, ...
template <class D>
__global__ void normParamGradPacked(const D* dy, const D* x, const float* mean, const float* rstd, float* dweight, float* dbias,
                                    Index rows, Index cols) {
  constexpr int N = kPack<D>;
  const Index c = (static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (c >= cols) return;
  float gw[N], gb[N];
#pragma unroll
  for (int k = 0; k < N; ++k) gw[k] = gb[k] = 0;
  for (Index r = blockIdx.y; r < rows; r += gridDim.y) {
    float d[N], v[N];
    loadPack(dy, r * cols + c, d);
    loadPack(x, r * cols + c, v);
    const float mu = mean ? mean[r] : 0.0f, s = rstd[r];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      gw[k] += d[k] * (v[k] - mu) * s;
      gb[k] += d[k];
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    atomicAdd(dweight + c + k, gw[k]);
    if (dbias) atomicAdd(dbias + c + k, gb[k]);
  }
}

// Threads a block for a row of `cols` elements in packs: the packs rounded up to a warp, at most kBlock.
template <class D>
int packThreads(Index cols) {
  const Index packs = cols / kPack<D>;
  return packs >= kBlock ? kBlock : static_cast<int>((packs + 31) / 32 * 32);
}

// Whether rows of `cols` elements at these pointers go by packs.
template <class D>
bool packed(Index cols, std::initializer_list<const void*> pointers) {
  if (cols % kPack<D> != 0) return false;
  for (const void* p : pointers) {
    if (p && !packAligned(p)) return false;
  }
  return true;
}

template <class D>
Status paramGrads(const D* dy, const D* x, const float* mean, const float* rstd, float* dweight, float* dbias, Index rows,
                  Index cols, cudaStream_t s) {
  if (auto e = cudaMemsetAsync(dweight, 0, sizeof(float) * cols, s)) return static_cast<Status>(e);
  if (dbias) {
    if (auto e = cudaMemsetAsync(dbias, 0, sizeof(float) * cols, s)) return static_cast<Status>(e);
  }
  if (rows > 0 && packed<D>(cols, {dy, x})) {
    // About 512 blocks in all: each thread sums its column pack over rows / groups rows.
    const int threads = packThreads<D>(cols);
    const unsigned xBlocks = static_cast<unsigned>((cols / kPack<D> + threads - 1) / threads);
    const Index want = 512 / static_cast<Index>(xBlocks);
    const unsigned groups = static_cast<unsigned>(want < 1 ? 1 : (want > rows ? rows : want));
    normParamGradPacked<D><<<dim3(xBlocks, groups), threads, 0, s>>>(dy, x, mean, rstd, dweight, dbias, rows, cols);
    return launched();
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
  if (packed<DeviceT<T>>(cols, {x, weight, y})) {
    rmsnormForwardPacked<<<static_cast<unsigned>(rows), packThreads<DeviceT<T>>(cols), 0, static_cast<cudaStream_t>(stream)>>>(
        dev(x), dev(weight), dev(y), rstd, cols, eps);
    return launched();
  }
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
  if (rows > 0 && packed<DeviceT<T>>(cols, {dy, x, weight, dx})) {
    rmsnormBackwardPacked<<<static_cast<unsigned>(rows), packThreads<DeviceT<T>>(cols), 0, s>>>(dev(dy), dev(x), dev(weight), rstd, dev(dx),
                                                                                                cols);
  } else if (rows > 0) {
    rmsnormBackwardKernel<<<static_cast<unsigned>(rows), kBlock, 0, s>>>(dev(dy), dev(x), dev(weight), rstd, dev(dx), cols);
  }
  return launched();
}

template <class T>
Status layernormForward(const T* x, const T* weight, const T* bias, T* y, float* mean, float* rstd, Index rows, Index cols, float eps,
                        Stream stream) {
  if (rows <= 0) return 0;
  if (rows > kMaxRows) return static_cast<Status>(cudaErrorInvalidValue);
  if (packed<DeviceT<T>>(cols, {x, weight, bias, y})) {
    layernormForwardPacked<<<static_cast<unsigned>(rows), packThreads<DeviceT<T>>(cols), 0, static_cast<cudaStream_t>(stream)>>>(
        dev(x), dev(weight), dev(bias), dev(y), mean, rstd, cols, eps);
    return launched();
  }
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
  if (rows > 0 && packed<DeviceT<T>>(cols, {dy, x, weight, dx})) {
    layernormBackwardPacked<<<static_cast<unsigned>(rows), packThreads<DeviceT<T>>(cols), 0, s>>>(dev(dy), dev(x), dev(weight), mean, rstd,
                                                                                                  dev(dx), cols);
  } else if (rows > 0) {
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
