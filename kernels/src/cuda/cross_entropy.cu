// Softmax cross-entropy over a vocabulary shard: statistics in one pass over the row (online max and
// rescaled sum of exponentials, as in FlashAttention's softmax), the gradient in one pass; the logits
// are read in their own type and never copied to fp32.
#include <math_constants.h>

#include "common.cuh"

namespace colo::kernels::cuda {
namespace detail {
namespace {

// Merges (m2, s2) into (m, s): both sums of exp(x - their max).
// (the reference's per-element step when s2 is 1: one exponential, -inf skipped, +inf kept finite).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  if (m2 == -CUDART_INF_F) return;
  if (m >= m2) {
    s += s2 * __expf(m2 - m);
    return;
  }
  s = s * __expf(m - m2) + s2;  // m == -inf: s == 0 and __expf(-inf) == 0
  m = m2;
}

template <class T>
__global__ void statsKernel(const T* logits, const Index* targets, Index vocabStart, float* rowMax, float* sumExp, float* targetLogit,
                            Index shardVocab) {
  __shared__ float sharedMax[kBlock / 32], sharedSum[kBlock / 32];
  const Index row = blockIdx.x;
  const T* l = logits + row * shardVocab;
  float m = -CUDART_INF_F, s = 0;
  for (Index v = threadIdx.x; v < shardVocab; v += blockDim.x) merge(m, s, load(l, v), 1.0f);
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    merge(m, s, m2, s2);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    sharedMax[warp] = m;
    sharedSum[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bm = -CUDART_INF_F, bs = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x) / 32; ++w) merge(bm, bs, sharedMax[w], sharedSum[w]);
    rowMax[row] = bm;
    sumExp[row] = bs;
    const Index target = targets[row], local = target - vocabStart;
    targetLogit[row] = target >= 0 && local >= 0 && local < shardVocab ? load(l, local) : 0.0f;
  }
}

template <class T>
__global__ void backwardKernel(const T* logits, const Index* targets, Index vocabStart, const float* logSumExp, const float* gradLoss,
                               T* dlogits, Index rows, Index shardVocab) {
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * shardVocab;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index r = i / shardVocab, v = i % shardVocab;
    const Index target = targets[r];
    const bool ignored = target < 0;
    const float p = __expf(load(logits, i) - logSumExp[r]);
    const float hot = !ignored && v == target - vocabStart ? 1.0f : 0.0f;
    store(dlogits, i, ignored ? 0.0f : (p - hot) * gradLoss[r]);
  }
}

}  // namespace
}  // namespace detail

using namespace detail;

template <class T>
Status crossEntropyShardStats(const T* logits, const Index* targets, Index vocabStart, float* rowMax, float* sumExp, float* targetLogit,
                              Index rows, Index shardVocab, Stream stream) {
  if (rows <= 0) return 0;
  if (rows > kMaxRows) return static_cast<Status>(cudaErrorInvalidValue);
  statsKernel<<<static_cast<unsigned>(rows), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(dev(logits), targets, vocabStart, rowMax,
                                                                                              sumExp, targetLogit, shardVocab);
  return launched();
}

template <class T>
Status crossEntropyShardBackward(const T* logits, const Index* targets, Index vocabStart, const float* logSumExp, const float* gradLoss,
                                 T* dlogits, Index rows, Index shardVocab, Stream stream) {
  backwardKernel<<<blocksFor(rows * shardVocab), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      dev(logits), targets, vocabStart, logSumExp, gradLoss, dev(dlogits), rows, shardVocab);
  return launched();
}

#define COLO_CE(T)                                                                                                              \
  template Status crossEntropyShardStats<T>(const T*, const Index*, Index, float*, float*, float*, Index, Index, Stream);      \
  template Status crossEntropyShardBackward<T>(const T*, const Index*, Index, const float*, const float*, T*, Index, Index, Stream);
COLO_CE(float)
COLO_CE(bf16)
#undef COLO_CE

}  // namespace colo::kernels::cuda
