#include "layer_comm.h"

#include <algorithm>
#include <cmath>

namespace colo::costmodel::detail {
namespace {

// One micro-batch's full activation [b, s/cp, h], the buffer every tensor-parallel collective moves.
double activationBytes(const LayerConfig& c) {
  return static_cast<double>(c.microBatch) * (static_cast<double>(c.seqLen) / static_cast<double>(c.cp)) *
         static_cast<double>(c.hidden) * static_cast<double>(c.activationBytes);
}

}  // namespace

// All-gather of one sequence-parallel activation over the tensor-parallel group, as the input of a
// column-parallel linear's backward: 16 bits, or the saved fp8 copy under Transformer Engine.
double tensorParallelGather(const LayerConfig& c, const GroupPlacement& tpGroup) {
  const double bytes = activationBytes(c);
  return collectiveSeconds(Collective::kAllGather, transformerEngineFp8(c) ? bytes / 2.0 : bytes, tpGroup);
}

double outputLayerGather(const LayerConfig& c, const GroupPlacement& tpGroup) {
  return collectiveSeconds(Collective::kAllGather, activationBytes(c), tpGroup);
}

// Tensor-parallel collectives on the full activation: an all-reduce after each row-parallel linear
// (forward) and on the input gradient of each column-parallel one (backward). Sequence parallelism
// replaces each by a reduce-scatter and an all-gather, two collectives that each pay their launch.
// (A column-parallel linear under sequence parallelism saves only its shard of the input, so its
// backward gathers the input again for the weight gradient, beside the input-gradient GEMM: costLayer
// adds what of that gather outlasts the GEMM, and the slowdown of the part hidden.)
void tensorParallelComm(const LayerTemplate& layer, const LayerConfig& c, const DeviceModel& device,
                        const GroupPlacement& tpGroup, LayerCost& out) {
  const double bytes = activationBytes(c);
  // Each pair as the reduce-scatter's part and the all-gather's (without sequence parallelism the
  // all-reduce, counted as the scatter: it is the one collective after a matmul).
  double scatter = collectiveSeconds(Collective::kAllReduce, bytes, tpGroup);
  double gather = 0.0;
  double moeGather = 0.0;
  if (c.sequenceParallel) {
    // torchtitan's float8 tensorwise layouts, and Transformer Engine's fp8 linears, all-gather in fp8
    // (the forward input, and the output gradient backward): each pair moves 1.5 bytes per element
    // instead of 2 x 2. The reduce-scatters carry the GEMMs' 16-bit outputs.
    const bool fp8Gather = c.float8Recipe == Float8Recipe::kTensorwise || transformerEngineFp8(c);
    scatter = collectiveSeconds(Collective::kReduceScatter, bytes, tpGroup);
    gather = collectiveSeconds(Collective::kAllGather, fp8Gather ? bytes / 2.0 : bytes, tpGroup);
    // Megatron's MoE token dispatcher gathers the 16-bit hidden states itself, outside TE's linears.
    moeGather = transformerEngineFp8(c) ? collectiveSeconds(Collective::kAllGather, bytes, tpGroup) : gather;
  }
  const double rows = static_cast<double>(layer.rowOps);
  const double columns = static_cast<double>(layer.columnOps);
  const double moe = layer.moe ? 1.0 : 0.0;  // the expert block ends in a reduction too
  // Overlapped, 15% of a collective stays exposed; the hidden 85% still slows the GEMMs beside it.
  // PyTorch's async TP (micro-pipelining) fuses an all-gather with the matmuls that read its output and
  // a reduce-scatter with the one matmul that writes its input; without sequence parallelism there is
  // no such pair to fuse. Backward, a column-parallel block's input gradient sums its linears' (q, k
  // and v apart, the MLP's gate and up apart, as torchtitan's models run them), so that reduce-scatter
  // stays exposed; the all-gathers of output gradients feed matmuls and are fused.
  const bool overlap = c.tpCommOverlap && (c.sequenceParallel || !c.tpMicroPipeline);
  const double hiddenShare = 0.15 + 0.85 * device.overlapSlowdown;
  const double exposed = overlap ? hiddenShare : 1.0;
  const double scatterBwd = overlap && !c.tpMicroPipeline ? hiddenShare : 1.0;
  out.tpCommFwd = (rows * (scatter + gather) + moe * (scatter + moeGather)) * exposed;
  out.tpCommBwd = (columns + moe) * scatter * scatterBwd + (columns * gather + moe * moeGather) * exposed;
  const double perCollective = c.sequenceParallel ? 2.0 : 1.0;  // a reduce-scatter and an all-gather
  out.opsFwd += (rows + moe) * perCollective;
  out.opsBwd += (columns + moe) * perCollective;
}

// Megatron-Core's vocabulary-split blocks, and torchtitan's (a RowwiseParallel embedding, a ColwiseParallel
// output and loss_parallel), talk over the tensor-parallel group outside the layers:
// - the embedding lookup leaves each rank a partial [b, s, h] (rows of other ranks' vocabulary are
//   zero): reduce-scattered into sequence shards under sequence parallelism, all-reduced without it
//   (VocabParallelEmbedding.forward); with another table beside the vocabulary's (learned absolute
//   positions, token types) Megatron all-reduces and then splits the sum (LanguageModelEmbedding:
//   reduce_scatter_embeddings needs no position table and no token types). The
//   backward of a reduce-scatter or a split all-gathers the gradient; an all-reduce's is nothing.
// - the output layer is a column-parallel linear: under sequence parallelism it all-gathers its input
//   forward and reduce-scatters its input gradient backward, without it all-reduces that gradient
//   (Megatron's ColumnParallelLinear); its weight gradient's re-gather is costed with its GEMM.
// - the loss reduces per token: Megatron's vocab_parallel_cross_entropy all-reduces the logits' maximum,
//   the target logit and the sum of exponentials (three), its fused version the last two together
//   (two), Transformer Engine's parallel cross-entropy all-gathers each rank's (max, sum, target) triple
//   once (one).
void vocabParallelComm(const LayerTemplate& block, const LayerConfig& c, const GroupPlacement& tpGroup, LayerCost& out) {
  double embeddings = 0, otherTables = 0, heads = 0, losses = 0;
  for (const auto& op : block.ops) {
    if (op.kind == OpKind::kEmbedding) (op.shard == Shard::kVocab ? embeddings : otherTables) += 1;
    if (op.kind == OpKind::kMatMul && op.shard == Shard::kVocab) heads += 1;
    if (op.kind == OpKind::kCrossEntropy && op.shard == Shard::kVocab) losses += 1;
  }
  if (embeddings + heads + losses == 0) return;
  const double bytes = activationBytes(c);
  const double allReduce = collectiveSeconds(Collective::kAllReduce, bytes, tpGroup);
  const double gather = collectiveSeconds(Collective::kAllGather, bytes, tpGroup);
  const double scatter = collectiveSeconds(Collective::kReduceScatter, bytes, tpGroup);
  const bool sp = c.sequenceParallel;
  const bool summedThenSplit = sp && otherTables > 0;
  out.tpCommFwd += embeddings * (sp && !summedThenSplit ? scatter : allReduce) + heads * (sp ? gather : 0.0);
  out.tpCommBwd += embeddings * (sp ? gather : 0.0) + heads * (sp ? scatter : allReduce);
  out.opsFwd += embeddings + (sp ? heads : 0.0);
  out.opsBwd += (sp ? embeddings : 0.0) + heads;
  if (losses > 0) {
    const double rows = static_cast<double>(c.microBatch) * static_cast<double>(c.seqLen) / static_cast<double>(c.cp);
    const double fp32 = 4.0;
    double loss = 0;
    double calls = 0;
    if (c.crossEntropyInPlace) {
      loss = collectiveSeconds(Collective::kAllGather, rows * 3.0 * fp32 * static_cast<double>(c.tp), tpGroup);
      calls = 1;
    } else if (c.fusedCrossEntropy || c.nativeFusedLoss) {
      loss = collectiveSeconds(Collective::kAllReduce, rows * fp32, tpGroup) +
             collectiveSeconds(Collective::kAllReduce, rows * 2.0 * fp32, tpGroup);
      calls = 2;
    } else {
      loss = 3.0 * collectiveSeconds(Collective::kAllReduce, rows * fp32, tpGroup);
      calls = 3;
    }
    out.tpCommFwd += losses * loss;
    out.opsFwd += losses * calls;
  }
}

double expertDispatchSeconds(double bytes, const LayerConfig& c, const GroupPlacement& ep) {
  const double n = static_cast<double>(ep.size);
  const double perNode = static_cast<double>(ep.perNode);
  if (!c.dedupDispatch || !ep.outer || ep.perNode >= ep.size || c.topK < 1) {
    return collectiveSeconds(Collective::kAllToAll, bytes, ep);
  }
  // DeepEP sends each token once to every other node holding one of its k experts, then forwards it
  // over NVLink to those experts' GPUs. With experts spread evenly over the group's N nodes a token
  // reaches N(1 - (1 - 1/N)^k) nodes; group-limited routing caps that: g of G groups, G/N groups to a
  // node (DeepSeek-V3: G = N = 8, g = 4) or N/G nodes to a group.
  const double nodes = n / perNode;
  const double k = static_cast<double>(c.topK);
  double reached = nodes * (1.0 - std::pow(1.0 - 1.0 / nodes, k));
  if (c.routingGroups > 0 && c.routingGroupTopK > 0) {
    const double groups = static_cast<double>(c.routingGroups);
    const double picked = static_cast<double>(c.routingGroupTopK);
    if (c.routingGroups % static_cast<std::int64_t>(nodes) == 0) {
      // P(a node holds none of the picked groups) = C(G - G/N, g) / C(G, g).
      const double perNodeGroups = groups / nodes;
      double none = 1.0;
      for (double i = 0; i < picked; ++i) none *= std::max(0.0, (groups - perNodeGroups - i) / (groups - i));
      reached = std::min(reached, nodes * (1.0 - none));
    } else if (static_cast<std::int64_t>(nodes) % c.routingGroups == 0) {
      reached = std::min(reached, picked * nodes / groups);
    }
  }
  const double remote = reached * (nodes - 1.0) / nodes;  // the token's own node is one of N
  const double offNode = remote / k;                     // of the k copies' bytes
  // Inside the node: the copies for its own GPUs, and the forwarding of what arrived from other nodes.
  const double onNode = (perNode - 1.0) / n + (nodes - 1.0) / nodes * (perNode - 1.0) / perNode;
  return allToAllSeconds(bytes, ep, offNode, onNode);
}

// Expert parallelism: dispatch and combine all-to-alls, each way.
void expertParallelComm(const LayerTemplate& layer, const LayerConfig& c, const DeviceModel& device,
                        const GroupPlacement& epGroup, LayerCost& out) {
  if (!layer.moe || c.ep <= 1) return;
  const double b = static_cast<double>(c.microBatch);
  const double cp = static_cast<double>(c.cp);
  const double seqSplit = c.sequenceParallel ? static_cast<double>(c.tp) : 1.0;
  const double bytes = b * (static_cast<double>(c.seqLen) / cp) * static_cast<double>(c.topK) *
                       static_cast<double>(c.hidden) * static_cast<double>(c.activationBytes) / seqSplit;
  const double a2a = expertDispatchSeconds(bytes, c, epGroup);
  out.epCommFwd = 2 * a2a;
  out.epCommBwd = 2 * a2a;
  // Megatron-Core's batch-level overlap: one micro-batch's forward runs beside another's backward,
  // so the all-to-alls of each hide behind the other's compute; what is hidden still slows it.
  if (c.epCommOverlap) {
    const double comm = out.epCommFwd + out.epCommBwd;
    const double cover = out.fwd + out.bwd;
    const double exposed = std::max(0.0, comm - cover) + device.overlapSlowdown * std::min(comm, cover);
    out.epCommFwd *= exposed / comm;
    out.epCommBwd *= exposed / comm;
  }
  out.opsFwd += 2;
  out.opsBwd += 2;
}

// Context parallelism: ring exchange of K and V chunks, overlapped with the attention of the chunk
// already present (p2p); or exchanges that are not overlapped: one all-gather of K and V forward and a
// reduce-scatter of their gradients backward (all_gather), or all-to-alls re-splitting Q, K and V from
// sequence chunks to heads before attention and the output back after it, and the gradients the same
// way backward (a2a; Transformer Engine 2.8 on moves only dO on the output side backward); or both
// (a2a+p2p, hierarchical): the all-to-alls inside groups of consecutive cp ranks, then the ring across
// the groups, each rank holding the group's sequence for its share of the heads.
void contextParallelComm(const LayerConfig& c, const DeviceModel& device, const GroupPlacement& cpGroup, LayerCost& out) {
  if (c.cp <= 1) return;
  const double tp = static_cast<double>(c.tp);
  const double cp = static_cast<double>(c.cp);
  const double b = static_cast<double>(c.microBatch);
  const std::int64_t keyWidth = c.keyWidth > 0 ? c.keyWidth : c.kvWidth;
  const double tokens = b * (static_cast<double>(c.seqLen) / cp);
  const double act = static_cast<double>(c.activationBytes);
  const double kvWidth = static_cast<double>(c.kvWidth + keyWidth) / tp;  // a key and a value
  // The all-to-alls of Q, K and V forward and of the output back, over `group` (the gradients mirror them).
  auto allToAlls = [&](const GroupPlacement& group) {
    if (group.size <= 1) return;
    const double qWidth = static_cast<double>(c.qWidth) / tp;
    const double outWidth = static_cast<double>(c.outWidth > 0 ? c.outWidth : c.qWidth) / tp;
    const double qkv = collectiveSeconds(Collective::kAllToAll, tokens * (qWidth + kvWidth) * act, group);
    const double o = collectiveSeconds(Collective::kAllToAll, tokens * outWidth * act, group);
    out.cpCommFwd += qkv + o;
    out.cpCommBwd += o + qkv;
    out.opsFwd += 2;
    out.opsBwd += 2;
  };
  // The ring over `group`: each step sends this rank's K and V chunk (after an all-to-all level: the
  // group's sequence for 1/a of the heads, the same bytes) beside the attention of the chunk at hand.
  auto ring = [&](const GroupPlacement& group) {
    if (group.size <= 1) return;
    const double step = collectiveSeconds(Collective::kSendRecv, tokens * kvWidth * act, group);
    const double steps = static_cast<double>(group.size) - 1;
    const double attnPerStepFwd = out.attnCoreFwd / static_cast<double>(group.size);
    // What the attention hides still slows it (overlapSlowdown).
    const double attnPerStepBwd = 2.5 * attnPerStepFwd;
    out.cpCommFwd += steps * (std::max(0.0, step - attnPerStepFwd) + device.overlapSlowdown * std::min(step, attnPerStepFwd));
    out.cpCommBwd += steps * (std::max(0.0, 2 * step - attnPerStepBwd) +
                              device.overlapSlowdown * std::min(2 * step, attnPerStepBwd));
    // Each ring step: a send, a receive and one attention kernel on the chunk (two receives backward).
    out.opsFwd += 3 * steps;
    out.opsBwd += 4 * steps;
  };
  switch (c.cpCommType) {
    case CpCommType::kAllGather: {
      const double kvAll = tokens * cp * kvWidth * act;  // the whole sequence's K and V
      out.cpCommFwd = collectiveSeconds(Collective::kAllGather, kvAll, cpGroup);
      out.cpCommBwd = out.cpCommFwd + collectiveSeconds(Collective::kReduceScatter, kvAll, cpGroup);
      out.opsFwd += 1;
      out.opsBwd += 2;
      break;
    }
    case CpCommType::kAllToAll:
      allToAlls(cpGroup);
      break;
    case CpCommType::kA2aP2p:
      allToAlls(c.cpA2aGroup);
      ring(c.cpRingGroup);
      break;
    case CpCommType::kP2p:
      ring(cpGroup);
      break;
  }
}

}  // namespace colo::costmodel::detail
