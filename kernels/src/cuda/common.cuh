#pragma once
// Shared by the CUDA kernels: element loads and stores in fp32, block reductions, launch checks.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "colo/kernels/cuda.h"

namespace colo::kernels::cuda::detail {

/// colo's bf16 and CUDA's __nv_bfloat16 are the same 16 bits.
template <class T>
struct Device {
  using type = T;
};
template <>
struct Device<bf16> {
  using type = __nv_bfloat16;
};
template <class T>
using DeviceT = typename Device<T>::type;

template <class T>
auto* dev(T* p) {
  return reinterpret_cast<DeviceT<T>*>(p);
}
template <class T>
const auto* dev(const T* p) {
  return reinterpret_cast<const DeviceT<T>*>(p);
}

__device__ __forceinline__ float load(const float* p, Index i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, Index i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, Index i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, Index i, float v) { p[i] = __float2bfloat16_rn(v); }

/// Packs: 16 bytes of elements (8 bf16 or 4 fp32) moved by one load or store instruction. A kernel
/// takes its packed path when every row length and pointer it touches is a whole number of packs.
template <class D>
inline constexpr int kPack = 16 / static_cast<int>(sizeof(D));

template <class D>
__device__ __forceinline__ void loadPack(const D* p, Index i, float (&out)[kPack<D>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p + i);
  const D* e = reinterpret_cast<const D*>(&raw);
#pragma unroll
  for (int k = 0; k < kPack<D>; ++k) out[k] = load(e, k);
}

template <class D>
__device__ __forceinline__ void storePack(D* p, Index i, const float (&in)[kPack<D>]) {
  uint4 raw;
  D* e = reinterpret_cast<D*>(&raw);
#pragma unroll
  for (int k = 0; k < kPack<D>; ++k) store(e, k, in[k]);
  *reinterpret_cast<uint4*>(p + i) = raw;
}

/// Whether `p` starts on a pack boundary (16 bytes).
inline bool packAligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

constexpr int kBlock = 256;  // threads per block of the row kernels
constexpr Index kMaxRows = 2147483647;  // one block per row: the grid's x limit

/// The sum of `v` over the warp, in every lane (float for the row kernels, double for the norm's partials).
template <class T>
__device__ __forceinline__ T warpSum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// The sum of `v` over the block, returned to every thread, its warps added in a fixed order (so a
/// repeat gives the same bits). `shared` holds kBlock / 32 values.
template <class T>
__device__ __forceinline__ T blockSum(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warpSum(v);
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x) / 32; ++w) total += shared[w];
  return total;
}

/// Launch geometry for `n` independent elements.
inline unsigned blocksFor(Index n, int threads = kBlock) {
  const Index blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 32 ? 65535 * 32 : blocks));
}

inline Status launched() { return static_cast<Status>(cudaGetLastError()); }

}  // namespace colo::kernels::cuda::detail
