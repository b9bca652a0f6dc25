#pragma once
// The fused training kernels' CPU reference implementations: the exact arithmetic the CUDA kernels do
// (fp32 accumulation, the same formulas), on host memory. They are what CPU tests check against finite
// differences and LibTorch, and what GPU tests check the CUDA kernels against. T is float or bf16; every
// statistic (mean, 1/rms, max, sum of exponentials) and every parameter gradient is fp32.
//
// Shapes are row-major: `rows` rows of `cols` (the hidden size, or this rank's vocabulary shard).
#include <cstdint>
#include <span>

#include "colo/kernels/bf16.h"

namespace colo::kernels::ref {

using Index = std::int64_t;

// RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight. `rstd` (rows) keeps 1/rms for the backward.
template <class T>
void rmsnormForward(const T* x, const T* weight, T* y, float* rstd, Index rows, Index cols, float eps);
/// dx (rows x cols) and dweight (cols, overwritten: summed over the rows).
template <class T>
void rmsnormBackward(const T* dy, const T* x, const T* weight, const float* rstd, T* dx, float* dweight, Index rows,
                     Index cols);

// LayerNorm: y = (x - mean) / sqrt(var + eps) * weight + bias; `mean` and `rstd` (rows) for the backward.
template <class T>
void layernormForward(const T* x, const T* weight, const T* bias, T* y, float* mean, float* rstd, Index rows, Index cols,
                      float eps);
template <class T>
void layernormBackward(const T* dy, const T* x, const T* weight, const float* mean, const float* rstd, T* dx,
                       float* dweight, float* dbias, Index rows, Index cols);

// SwiGLU on the fused gate-and-up projection: `gateUp` is rows x 2*cols, gate in the first half of each
// row and up in the second; y (rows x cols) = silu(gate) * up.
template <class T>
void swigluForward(const T* gateUp, T* y, Index rows, Index cols);
template <class T>
void swigluBackward(const T* dy, const T* gateUp, T* dGateUp, Index rows, Index cols);

// Bias + GeLU (tanh approximation, as Megatron's bias_gelu): y = gelu(x + bias), bias per column.
template <class T>
void biasGeluForward(const T* x, const T* bias, T* y, Index rows, Index cols);
/// dx and dbias (cols, overwritten: summed over the rows).
template <class T>
void biasGeluBackward(const T* dy, const T* x, const T* bias, T* dx, float* dbias, Index rows, Index cols);

// Rotary position embedding, rotate-half convention (GPT-NeoX, Llama): x is tokens x heads x headDim,
// cos and sin are tokens x headDim/2 (fp32); the pair (x[i], x[i + headDim/2]) turns by the angle of i.
template <class T>
void rotaryForward(const T* x, const float* cos, const float* sin, T* y, Index tokens, Index heads, Index headDim);
/// The inverse rotation (the backward of a rotation is its transpose).
template <class T>
void rotaryBackward(const T* dy, const float* cos, const float* sin, T* dx, Index tokens, Index heads, Index headDim);

// Softmax cross-entropy over a vocabulary-parallel shard: this rank holds columns
// [vocabStart, vocabStart + shardVocab) of the logits. No fp32 copy of the logits is made.
// Step 1, per shard: the row's max over the shard, the sum of exp(logit - that max), and the target's
// logit (0 where the target is on another shard; a negative target is ignored: loss and gradient 0).
template <class T>
void crossEntropyShardStats(const T* logits, const Index* targets, Index vocabStart, float* rowMax, float* sumExp,
                            float* targetLogit, Index rows, Index shardVocab);
// Step 2, across the shards (an all-reduce of max, then of sums, in the executor):
// logSumExp = globalMax + log(sum over shards of sumExp * exp(rowMax - globalMax)), and
// loss = logSumExp - target logit. `crossEntropyCombine` does it for shards held in one process.
void crossEntropyCombine(std::span<const float* const> rowMax, std::span<const float* const> sumExp,
                         std::span<const float* const> targetLogit, const Index* targets, float* logSumExp, float* loss,
                         Index rows);
// Step 3, per shard: dlogits = (softmax - onehot(target)) * gradLoss[row], written as T.
template <class T>
void crossEntropyShardBackward(const T* logits, const Index* targets, Index vocabStart, const float* logSumExp,
                               const float* gradLoss, T* dlogits, Index rows, Index shardVocab);

// Optimizers over flat buffers: one entry per tensor (the multi-tensor apply of Apex and PyTorch's
// foreach/fused optimizers). Master weights and moments are fp32; gradients float or bf16, multiplied
// by `gradScale` first (1 / loss scale, times the clipping coefficient). `modelCopy`, when not null,
// receives the updated weights rounded to bf16 (the 16-bit copy the model computes with).
template <class G>
struct FlatTensor {
  float* param = nullptr;
  const G* grad = nullptr;
  float* expAvg = nullptr;
  float* expAvgSq = nullptr;
  bf16* modelCopy = nullptr;
  Index numel = 0;
};

/// Adds the sum of squares of x[0..n), accumulated in fp64, into *out: the global gradient norm's
/// reduction, one read of the gradients (Megatron's multi-tensor L2 norm reads them once too).
template <class T>
void addSumOfSquares(const T* x, Index n, double* out);

struct AdamWConfig {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weightDecay = 0.01f;
  Index step = 1;  ///< the step being taken, from 1 (bias correction)
};

/// AdamW (decoupled weight decay, as torch.optim.AdamW): p -= lr * (wd * p + mhat / (sqrt(vhat) + eps)).
template <class G>
void adamwStep(std::span<const FlatTensor<G>> tensors, const AdamWConfig& config, float gradScale);

struct LambConfig {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weightDecay = 0.01f;
  Index step = 1;
};

/// LAMB (You et al. 2020; Apex FusedLAMB): the Adam update plus weight decay, scaled per tensor by the
/// trust ratio ||p|| / ||update|| (1 where either norm is 0), on every tensor, as the executor's LAMB.
template <class G>
void lambStep(std::span<const FlatTensor<G>> tensors, const LambConfig& config, float gradScale);

}  // namespace colo::kernels::ref
