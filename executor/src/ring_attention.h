#pragma once
// Private: causal attention over a sequence split across the context-parallel group, by ring: each
// rank keeps its queries and passes its keys and values around the ring with send/recv, merging each
// block into an online softmax (Megatron-Core's p2p context parallelism, the load-balanced split).
#include <torch/torch.h>

#include "comm.h"

namespace colo::executor::detail {

/// The global positions of context-parallel rank `rank`'s tokens: of the sequence cut in 2 x cp equal
/// chunks it holds chunk `rank` and chunk 2cp - 1 - rank, so every rank has the same causal work.
[[nodiscard]] torch::Tensor contextParallelPositions(std::int64_t seqLen, int cp, int rank);

/// softmax(q k^T / sqrt(d), causal by global position) v for this rank's queries against every rank's
/// keys and values. q [b, heads, s, d]; k, v [b, kv heads, s, d] (heads a multiple of kv heads), s the
/// local length; returns [b, heads, s, d]. Differentiable: the backward passes keys, values and their
/// gradients around the ring once more. The softmax is computed in fp32.
[[nodiscard]] torch::Tensor ringAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, Comm* cp,
                                          std::int64_t seqLen);

}  // namespace colo::executor::detail
