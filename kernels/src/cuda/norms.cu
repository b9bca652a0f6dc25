// RMSNorm and LayerNorm. Where rows are whole packs (16 bytes) and pointers pack-aligned, and a row is at
// most 8 packs a lane (2,048 bf16, 1,024 fp32), one warp owns a row: it loads the row once into registers
// and reduces with shuffles alone (no shared memory, no block barrier), four rows to a block. Longer
// packed rows take one block per row, each thread a pack at a time; unpacked rows one element at a time.
// The weight (and bias) gradients: a column reduction over groups of rows; a block sums its rows in
// shared memory first, so each column takes one atomic add per group into cleared fp32.
#include <algorithm>
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

// Warp-per-row kernels: lane l holds the row's packs l, l + 32, ..., l + 32 (P - 1) in registers.
constexpr int kWarpRows = 4;  // rows (warps) a block

template <class D, int P>
__device__ __forceinline__ void loadRow(const D* row, Index packs, float (&v)[P][kPack<D>]) {
  constexpr int N = kPack<D>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const Index p = lane + 32 * j;
    if (p < packs) {
      loadPack(row, p * N, v[j]);
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) v[j][k] = 0;
    }
  }
}

// kLayer: LayerNorm (mean, bias) rather than RMSNorm.
template <class D, int P, bool kLayer>
__global__ void normForwardWarp(const D* x, const D* w, const D* b, D* y, float* mean, float* rstd, Index rows, Index cols, float eps) {
  constexpr int N = kPack<D>;
  const Index row = static_cast<Index>(blockIdx.x) * kWarpRows + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const Index packs = cols / N;
  const float n = static_cast<float>(cols);
  float v[P][N];
  loadRow<D, P>(x + row * cols, packs, v);
  float mu = 0;
  if constexpr (kLayer) {
    float sum = 0;
#pragma unroll
    for (int j = 0; j < P; ++j)
#pragma unroll
      for (int k = 0; k < N; ++k) sum += v[j][k];
    mu = warpSum(sum) / n;
  }
  float squares = 0;  // about the mean, from registers: no cancellation for rows with a large mean
#pragma unroll
  for (int j = 0; j < P; ++j) {
    if (lane + 32 * j < packs) {
#pragma unroll
      for (int k = 0; k < N; ++k) squares += (v[j][k] - mu) * (v[j][k] - mu);
    }
  }
  const float s = rsqrtf(warpSum(squares) / n + eps);
  if (lane == 0) {
    if constexpr (kLayer) mean[row] = mu;
    rstd[row] = s;
  }
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const Index p = lane + 32 * j;
    if (p >= packs) continue;
    float g[N], o[N];
    loadPack(w, p * N, g);
    if constexpr (kLayer) {
      loadPack(b, p * N, o);
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) o[k] = 0;
    }
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] += (v[j][k] - mu) * s * g[k];
    storePack(y, row * cols + p * N, o);
  }
}

// dx = s * (dy * w - mean(dy * w) - xhat * mean(dy * w * xhat)), xhat = (x - mu) * s; for RMSNorm mu = 0
// and the mean(dy * w) term is absent.
template <class D, int P, bool kLayer>
__global__ void normBackwardWarp(const D* dy, const D* x, const D* w, const float* mean, const float* rstd, D* dx, Index rows,
                                 Index cols) {
  constexpr int N = kPack<D>;
  const Index row = static_cast<Index>(blockIdx.x) * kWarpRows + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const Index packs = cols / N;
  const float n = static_cast<float>(cols);
  const float mu = kLayer ? mean[row] : 0.0f, s = rstd[row];
  float d[P][N], v[P][N];
  loadRow<D, P>(dy + row * cols, packs, d);
  loadRow<D, P>(x + row * cols, packs, v);
  float sumG = 0, sumGx = 0;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const Index p = lane + 32 * j;
    if (p >= packs) continue;
    float g[N];
    loadPack(w, p * N, g);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      d[j][k] *= g[k];  // from here on d holds dy * w
      v[j][k] = (v[j][k] - mu) * s;  // and v holds xhat
      sumG += d[j][k];
      sumGx += d[j][k] * v[j][k];
    }
  }
  const float meanG = kLayer ? warpSum(sumG) / n : 0.0f;
  const float meanGx = warpSum(sumGx) / n;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const Index p = lane + 32 * j;
    if (p >= packs) continue;
#pragma unroll
    for (int k = 0; k < N; ++k) d[j][k] = s * (d[j][k] - meanG - v[j][k] * meanGx);
    storePack(dx, row * cols + p * N, d[j]);
  }
}

// Packs a lane for a warp-per-row launch: 1, 2, 4 or 8, or 0 where the row is longer (block per row).
template <class D>
int warpPacks(Index cols) {
  const Index perLane = (cols / kPack<D> + 31) / 32;
  for (int p : {1, 2, 4, 8}) {
    if (perLane <= p) return p;
  }
  return 0;
}

template <class D, bool kLayer>
bool forwardByWarps(const D* x, const D* w, const D* b, D* y, float* mean, float* rstd, Index rows, Index cols, float eps,
                    cudaStream_t s) {
  const auto blocks = static_cast<unsigned>((rows + kWarpRows - 1) / kWarpRows);
  const unsigned threads = 32 * kWarpRows;
  switch (warpPacks<D>(cols)) {
    case 1: normForwardWarp<D, 1, kLayer><<<blocks, threads, 0, s>>>(x, w, b, y, mean, rstd, rows, cols, eps); return true;
    case 2: normForwardWarp<D, 2, kLayer><<<blocks, threads, 0, s>>>(x, w, b, y, mean, rstd, rows, cols, eps); return true;
    case 4: normForwardWarp<D, 4, kLayer><<<blocks, threads, 0, s>>>(x, w, b, y, mean, rstd, rows, cols, eps); return true;
    case 8: normForwardWarp<D, 8, kLayer><<<blocks, threads, 0, s>>>(x, w, b, y, mean, rstd, rows, cols, eps); return true;
    default: return false;
  }
}

template <class D, bool kLayer>
bool backwardByWarps(const D* dy, const D* x, const D* w, const float* mean, const float* rstd, D* dx, Index rows, Index cols,
                     cudaStream_t s) {
  const auto blocks = static_cast<unsigned>((rows + kWarpRows - 1) / kWarpRows);
  const unsigned threads = 32 * kWarpRows;
  switch (warpPacks<D>(cols)) {
    case 1: normBackwardWarp<D, 1, kLayer><<<blocks, threads, 0, s>>>(dy, x, w, mean, rstd, dx, rows, cols); return true;
    case 2: normBackwardWarp<D, 2, kLayer><<<blocks, threads, 0, s>>>(dy, x, w, mean, rstd, dx, rows, cols); return true;
    case 4: normBackwardWarp<D, 4, kLayer><<<blocks, threads, 0, s>>>(dy, x, w, mean, rstd, dx, rows, cols); return true;
    case 8: normBackwardWarp<D, 8, kLayer><<<blocks, threads, 0, s>>>(dy, x, w, mean, rstd, dx, rows, cols); return true;
    default: return false;
  }
}

// The column reduction by packs, summed over the block's rows first: a block of 32 x kGradRowLanes
// threads covers 32 column packs; thread (l, r) sums the rows r, r + kGradRowLanes, ... of its group,
// the block adds its row lanes in shared memory, and one atomic a column goes out per group.
constexpr int kGradRowLanes = 8;

template <class D>
__global__ void normParamGradBlock(const D* dy, const D* x, const float* mean, const float* rstd, float* dweight, float* dbias, Index rows,
                                   Index cols, Index rowsPerGroup) {
  constexpr int N = kPack<D>;
  __shared__ float sums[2][kGradRowLanes][32 * N];
  const int lane = threadIdx.x % 32, rowLane = threadIdx.x / 32;
  const Index c = (static_cast<Index>(blockIdx.x) * 32 + lane) * N;
  const Index first = static_cast<Index>(blockIdx.y) * rowsPerGroup;
  const Index last = first + rowsPerGroup < rows ? first + rowsPerGroup : rows;
  float gw[N], gb[N];
#pragma unroll
  for (int k = 0; k < N; ++k) gw[k] = gb[k] = 0;
  if (c < cols) {
#pragma unroll 4
    for (Index r = first + rowLane; r < last; r += kGradRowLanes) {
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
  }
#pragma unroll
  for (int k = 0; k < N; ++k) {
    sums[0][rowLane][lane * N + k] = gw[k];
    sums[1][rowLane][lane * N + k] = gb[k];
  }
  __syncthreads();
  // Thread t of the block adds column element t (and t + blockDim.x, ...) over the row lanes.
  for (int e = threadIdx.x; e < 32 * N; e += blockDim.x) {
    const Index col = static_cast<Index>(blockIdx.x) * 32 * N + e;
    if (col >= cols) continue;
    float w = 0, bsum = 0;
#pragma unroll
    for (int r = 0; r < kGradRowLanes; ++r) {
      w += sums[0][r][e];
      bsum += sums[1][r][e];
    }
    atomicAdd(dweight + col, w);
    if (dbias) atomicAdd(dbias + col, bsum);
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
    // About 512 blocks in all, groups of at least 64 rows: each thread sums a column pack over 8 of them.
    const auto xBlocks = static_cast<unsigned>((cols / kPack<D> + 31) / 32);
    const Index byRows = (rows + 63) / 64, byBlocks = 512 / static_cast<Index>(xBlocks);
    const Index groups = std::max<Index>(1, std::min(byRows, byBlocks));
    const Index perGroup = (rows + groups - 1) / groups;
    normParamGradBlock<D><<<dim3(xBlocks, static_cast<unsigned>(groups)), 32 * kGradRowLanes, 0, s>>>(dy, x, mean, rstd, dweight, dbias,
                                                                                                      rows, cols, perGroup);
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
    if (forwardByWarps<DeviceT<T>, false>(dev(x), dev(weight), nullptr, dev(y), nullptr, rstd, rows, cols, eps, static_cast<cudaStream_t>(stream))) {
      return launched();
    }
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
  const bool byPacks = rows > 0 && packed<DeviceT<T>>(cols, {dy, x, weight, dx});
  if (byPacks && backwardByWarps<DeviceT<T>, false>(dev(dy), dev(x), dev(weight), nullptr, rstd, dev(dx), rows, cols, s)) return launched();
  if (byPacks) {
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
    if (forwardByWarps<DeviceT<T>, true>(dev(x), dev(weight), dev(bias), dev(y), mean, rstd, rows, cols, eps, static_cast<cudaStream_t>(stream))) {
      return launched();
    }
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
  const bool byPacks = rows > 0 && packed<DeviceT<T>>(cols, {dy, x, weight, dx});
  if (byPacks && backwardByWarps<DeviceT<T>, true>(dev(dy), dev(x), dev(weight), mean, rstd, dev(dx), rows, cols, s)) return launched();
  if (byPacks) {
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
