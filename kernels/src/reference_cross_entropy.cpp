// CPU reference: softmax cross-entropy over a vocabulary-parallel shard, without an fp32 logits copy.
#include <algorithm>
#include <cmath>
#include <limits>

#include "colo/kernels/reference.h"

namespace colo::kernels::ref {

template <class T>
void crossEntropyShardStats(const T* logits, const Index* targets, Index vocabStart, float* rowMax, float* sumExp,
                            float* targetLogit, Index rows, Index shardVocab) {
  for (Index r = 0; r < rows; ++r) {
    const T* l = logits + r * shardVocab;
    // Online max and rescaled sum in one pass (what the CUDA kernel does per thread).
    float m = -std::numeric_limits<float>::infinity(), s = 0;
    for (Index v = 0; v < shardVocab; ++v) {
      const float x = toFloat(l[v]);
      if (x > m) {
        s = s * std::exp(m - x) + 1.0f;
        m = x;
      } else if (x != -std::numeric_limits<float>::infinity()) {  // a masked logit adds nothing (and no NaN)
        s += std::exp(x - m);
      }
    }
    rowMax[r] = m;
    sumExp[r] = s;
    const Index local = targets[r] - vocabStart;
    targetLogit[r] = targets[r] >= 0 && local >= 0 && local < shardVocab ? toFloat(l[local]) : 0.0f;
  }
}

void crossEntropyCombine(std::span<const float* const> rowMax, std::span<const float* const> sumExp,
                         std::span<const float* const> targetLogit, const Index* targets, float* logSumExp, float* loss,
                         Index rows) {
  for (Index r = 0; r < rows; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (const float* shard : rowMax) m = std::max(m, shard[r]);
    float s = 0, target = 0;
    for (std::size_t k = 0; k < rowMax.size(); ++k) {
      s += sumExp[k][r] * std::exp(rowMax[k][r] - m);
      target += targetLogit[k][r];
    }
    logSumExp[r] = m + std::log(s);
    loss[r] = targets[r] >= 0 ? logSumExp[r] - target : 0.0f;
  }
}

template <class T>
void crossEntropyShardBackward(const T* logits, const Index* targets, Index vocabStart, const float* logSumExp,
                               const float* gradLoss, T* dlogits, Index rows, Index shardVocab) {
  for (Index r = 0; r < rows; ++r) {
    const bool ignored = targets[r] < 0;
    const float g = ignored ? 0.0f : gradLoss[r];
    const Index local = targets[r] - vocabStart;
    for (Index v = 0; v < shardVocab; ++v) {
      const float p = std::exp(toFloat(logits[r * shardVocab + v]) - logSumExp[r]);
      dlogits[r * shardVocab + v] = fromFloat<T>((p - (v == local && !ignored ? 1.0f : 0.0f)) * g);
    }
  }
}

#define COLO_CE(T)                                                                                               \
  template void crossEntropyShardStats<T>(const T*, const Index*, Index, float*, float*, float*, Index, Index); \
  template void crossEntropyShardBackward<T>(const T*, const Index*, Index, const float*, const float*, T*, Index, Index);
COLO_CE(float)
COLO_CE(bf16)
#undef COLO_CE

}  // namespace colo::kernels::ref
