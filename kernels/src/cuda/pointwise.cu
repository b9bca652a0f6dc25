// SwiGLU, bias + GeLU and rotary embedding. Where rows are whole packs (16 bytes: 8 bf16 or 4 fp32) and
// the pointers pack-aligned, a thread moves one pack per load and store, with 32-bit index arithmetic
// where the tensor allows (a 64-bit division per element made these kernels slower than LibTorch's on
// an H200); otherwise one thread per element (grid-stride). The bias-GeLU backward computes dx and the
// bias gradient in one pass: a thread walks down a column pack over a group of rows.
#include "../pointwise_math.h"
#include "common.cuh"

namespace colo::kernels::cuda {
namespace detail {
namespace {

#define COLO_GRID_STRIDE(i, n) \
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += static_cast<Index>(gridDim.x) * blockDim.x)

// Packed SwiGLU on gate and up rows `ld` elements apart (ld = cols: two tensors; 2 cols: one
// [rows, 2 cols] tensor with gate in the first half), y and the gradients `ldOut` apart.
template <class D, class I>
__global__ void swigluForwardPacked(const D* gate, const D* up, I ld, D* y, I rows, I cols) {
  constexpr int N = kPack<D>;
  const I perRow = cols / N, packs = rows * perRow;
  for (I v = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; v < packs; v += static_cast<I>(gridDim.x) * blockDim.x) {
    const I r = v / perRow, c = (v - r * perRow) * N;
    float g[N], u[N], out[N];
    loadPack(gate, static_cast<Index>(r) * ld + c, g);
    loadPack(up, static_cast<Index>(r) * ld + c, u);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = math::silu(g[k]) * u[k];
    storePack(y, static_cast<Index>(v) * N, out);
  }
}

template <class D, class I>
__global__ void swigluBackwardPacked(const D* dy, const D* gate, const D* up, I ld, D* dGate, D* dUp, I ldOut, I rows, I cols) {
  constexpr int N = kPack<D>;
  const I perRow = cols / N, packs = rows * perRow;
  for (I v = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; v < packs; v += static_cast<I>(gridDim.x) * blockDim.x) {
    const I r = v / perRow, c = (v - r * perRow) * N;
    float d[N], g[N], u[N], dg[N], du[N];
    loadPack(dy, static_cast<Index>(v) * N, d);
    loadPack(gate, static_cast<Index>(r) * ld + c, g);
    loadPack(up, static_cast<Index>(r) * ld + c, u);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      dg[k] = d[k] * u[k] * math::siluGrad(g[k]);
      du[k] = d[k] * math::silu(g[k]);
    }
    storePack(dGate, static_cast<Index>(r) * ldOut + c, dg);
    storePack(dUp, static_cast<Index>(r) * ldOut + c, du);
  }
}

template <class D, class I>
__global__ void biasGeluForwardPacked(const D* x, const D* bias, D* y, I rows, I cols) {
  constexpr int N = kPack<D>;
  const I perRow = cols / N, packs = rows * perRow;
  for (I v = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; v < packs; v += static_cast<I>(gridDim.x) * blockDim.x) {
    const I c = (v % perRow) * N;
    float z[N], b[N];
    loadPack(x, static_cast<Index>(v) * N, z);
    loadPack(bias, c, b);
#pragma unroll
    for (int k = 0; k < N; ++k) z[k] = math::gelu(z[k] + b[k]);
    storePack(y, static_cast<Index>(v) * N, z);
  }
}

// dx and dbias in one pass: the thread of column pack c walks rows blockIdx.y, + gridDim.y, ...; its
// fp32 sums go to dbias (cleared) by atomics. dx may be dy (each element is read before it is written).
template <class D>
__global__ void biasGeluBackwardPacked(const D* dy, const D* x, const D* bias, D* dx, float* dbias, Index rows, Index cols) {
  constexpr int N = kPack<D>;
  const Index c = (static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (c >= cols) return;
  float b[N], sum[N];
  loadPack(bias, c, b);
#pragma unroll
  for (int k = 0; k < N; ++k) sum[k] = 0;
  for (Index r = blockIdx.y; r < rows; r += gridDim.y) {
    float d[N], z[N];
    loadPack(dy, r * cols + c, d);
    loadPack(x, r * cols + c, z);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      d[k] *= math::geluGrad(z[k] + b[k]);
      sum[k] += d[k];
    }
    storePack(dx, r * cols + c, d);
  }
#pragma unroll
  for (int k = 0; k < N; ++k) atomicAdd(dbias + c + k, sum[k]);
}

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
__global__ void swigluSplitForwardKernel(const T* gate, const T* up, T* y, Index n) {
  COLO_GRID_STRIDE(i, n) { store(y, i, math::silu(load(gate, i)) * load(up, i)); }
}

template <class T>
__global__ void swigluSplitBackwardKernel(const T* dy, const T* gate, const T* up, T* dGate, T* dUp, Index n) {
  COLO_GRID_STRIDE(i, n) {
    const float g = load(gate, i), u = load(up, i), d = load(dy, i);
    store(dGate, i, d * u * math::siluGrad(g));
    store(dUp, i, d * math::silu(g));
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

namespace {

// 32-bit indexes where every pack index fits.
bool small(Index elements) { return elements < (Index{1} << 31); }

// The packed SwiGLU launchers; false when the shapes or pointers are not whole packs.
template <class D>
bool swigluPacked(const D* gate, const D* up, Index ld, D* y, Index rows, Index cols, cudaStream_t s) {
  constexpr int N = kPack<D>;
  if (cols % N || ld % N || !packAligned(gate) || !packAligned(up) || !packAligned(y)) return false;
  const unsigned blocks = blocksFor(rows * cols / N);
  if (small(rows * ld)) {
    swigluForwardPacked<D, unsigned><<<blocks, kBlock, 0, s>>>(gate, up, static_cast<unsigned>(ld), y, static_cast<unsigned>(rows),
                                                              static_cast<unsigned>(cols));
  } else {
    swigluForwardPacked<D, Index><<<blocks, kBlock, 0, s>>>(gate, up, ld, y, rows, cols);
  }
  return true;
}

template <class D>
bool swigluBackwardPackedLaunch(const D* dy, const D* gate, const D* up, Index ld, D* dGate, D* dUp, Index ldOut, Index rows, Index cols,
                                cudaStream_t s) {
  constexpr int N = kPack<D>;
  if (cols % N || ld % N || ldOut % N) return false;
  for (const void* p : {static_cast<const void*>(dy), static_cast<const void*>(gate), static_cast<const void*>(up),
                        static_cast<const void*>(dGate), static_cast<const void*>(dUp)}) {
    if (!packAligned(p)) return false;
  }
  const unsigned blocks = blocksFor(rows * cols / N);
  if (small(rows * (ld > ldOut ? ld : ldOut))) {
    swigluBackwardPacked<D, unsigned><<<blocks, kBlock, 0, s>>>(dy, gate, up, static_cast<unsigned>(ld), dGate, dUp,
                                                               static_cast<unsigned>(ldOut), static_cast<unsigned>(rows),
                                                               static_cast<unsigned>(cols));
  } else {
    swigluBackwardPacked<D, Index><<<blocks, kBlock, 0, s>>>(dy, gate, up, ld, dGate, dUp, ldOut, rows, cols);
  }
  return true;
}

}  // namespace

template <class T>
Status swigluForward(const T* gateUp, T* y, Index rows, Index cols, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (rows * cols == 0) return 0;
  if (swigluPacked(dev(gateUp), dev(gateUp) + cols, 2 * cols, dev(y), rows, cols, s)) return launched();
  swigluForwardKernel<<<blocksFor(rows * cols), kBlock, 0, s>>>(dev(gateUp), dev(y), rows, cols);
  return launched();
}

template <class T>
Status swigluBackward(const T* dy, const T* gateUp, T* dGateUp, Index rows, Index cols, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (rows * cols == 0) return 0;
  if (swigluBackwardPackedLaunch(dev(dy), dev(gateUp), dev(gateUp) + cols, 2 * cols, dev(dGateUp), dev(dGateUp) + cols, 2 * cols, rows,
                                 cols, s)) {
    return launched();
  }
  swigluBackwardKernel<<<blocksFor(rows * cols), kBlock, 0, s>>>(dev(dy), dev(gateUp), dev(dGateUp), rows, cols);
  return launched();
}

template <class T>
Status swigluForwardSplit(const T* gate, const T* up, T* y, Index rows, Index cols, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (rows * cols == 0) return 0;
  if (swigluPacked(dev(gate), dev(up), cols, dev(y), rows, cols, s)) return launched();
  swigluSplitForwardKernel<<<blocksFor(rows * cols), kBlock, 0, s>>>(dev(gate), dev(up), dev(y), rows * cols);
  return launched();
}

template <class T>
Status swigluBackwardSplit(const T* dy, const T* gate, const T* up, T* dGate, T* dUp, Index rows, Index cols, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (rows * cols == 0) return 0;
  if (swigluBackwardPackedLaunch(dev(dy), dev(gate), dev(up), cols, dev(dGate), dev(dUp), cols, rows, cols, s)) return launched();
  swigluSplitBackwardKernel<<<blocksFor(rows * cols), kBlock, 0, s>>>(dev(dy), dev(gate), dev(up), dev(dGate), dev(dUp), rows * cols);
  return launched();
}

template <class T>
Status biasGeluForward(const T* x, const T* bias, T* y, Index rows, Index cols, Stream stream) {
  using D = DeviceT<T>;
  auto s = static_cast<cudaStream_t>(stream);
  if (rows * cols == 0) return 0;
  if (cols % kPack<D> == 0 && packAligned(x) && packAligned(bias) && packAligned(y)) {
    const unsigned blocks = blocksFor(rows * cols / kPack<D>);
    if (small(rows * cols)) {
      biasGeluForwardPacked<D, unsigned><<<blocks, kBlock, 0, s>>>(dev(x), dev(bias), dev(y), static_cast<unsigned>(rows),
                                                                  static_cast<unsigned>(cols));
    } else {
      biasGeluForwardPacked<D, Index><<<blocks, kBlock, 0, s>>>(dev(x), dev(bias), dev(y), rows, cols);
    }
    return launched();
  }
  biasGeluForwardKernel<<<blocksFor(rows * cols), kBlock, 0, s>>>(dev(x), dev(bias), dev(y), rows, cols);
  return launched();
}

template <class T>
Status biasGeluBackward(const T* dy, const T* x, const T* bias, T* dx, float* dbias, Index rows, Index cols, Stream stream) {
  using D = DeviceT<T>;
  auto s = static_cast<cudaStream_t>(stream);
  if (auto e = cudaMemsetAsync(dbias, 0, sizeof(float) * cols, s)) return static_cast<Status>(e);
  if (rows * cols == 0) return 0;
  if (cols % kPack<D> == 0 && packAligned(dy) && packAligned(x) && packAligned(bias) && packAligned(dx)) {
    // Threads over column packs; about 512 blocks in all, each thread summing its column pack over
    // rows / groups rows (fewer atomics than one row a block, enough blocks to fill the device).
    const Index packsPerRow = cols / kPack<D>;
    const int threads = packsPerRow >= kBlock ? kBlock : static_cast<int>((packsPerRow + 31) / 32 * 32);
    const unsigned xBlocks = static_cast<unsigned>((packsPerRow + threads - 1) / threads);
    const Index want = 512 / static_cast<Index>(xBlocks);
    const unsigned groups = static_cast<unsigned>(want < 1 ? 1 : (want > rows ? rows : want));
    biasGeluBackwardPacked<D><<<dim3(xBlocks, groups), threads, 0, s>>>(dev(dy), dev(x), dev(bias), dev(dx), dbias, rows, cols);
    return launched();
  }
  // The bias gradient first: it re-reads dy and x, which an in-place dx would overwrite.
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
  template Status swigluForwardSplit<T>(const T*, const T*, T*, Index, Index, Stream);                          \
  template Status swigluBackwardSplit<T>(const T*, const T*, const T*, T*, T*, Index, Index, Stream);           \
  template Status biasGeluForward<T>(const T*, const T*, T*, Index, Index, Stream);                             \
  template Status biasGeluBackward<T>(const T*, const T*, const T*, T*, float*, Index, Index, Stream);          \
  template Status rotaryForward<T>(const T*, const float*, const float*, T*, Index, Index, Index, Stream);      \
  template Status rotaryBackward<T>(const T*, const float*, const float*, T*, Index, Index, Index, Stream);
COLO_POINTWISE(float)
COLO_POINTWISE(bf16)
#undef COLO_POINTWISE

}  // namespace colo::kernels::cuda
