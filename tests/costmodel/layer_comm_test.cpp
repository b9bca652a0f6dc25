// A layer's communication along each parallel dimension (costmodel/src/layer_comm.cpp), each checked
// against the collectives it is made of (docs/costmodel.md, "Communication"). Private code: these tests
// include the module's own header.
#include <gtest/gtest.h>

#include "colo/costmodel/collectives.h"
#include "colo/costmodel/hardware.h"
#include "core/test_support.h"
#include "layer_comm.h"

namespace colo::costmodel::detail {
namespace {

struct Node {
  ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json"));
  DeviceModel device = deviceModel(cluster.gpu, DType::kBf16);
};

// Llama-3-8B-like widths: 32 query heads and 8 key/value heads of 128.
LayerConfig config(std::int64_t tp, std::int64_t cp) {
  LayerConfig c;
  c.microBatch = 2;
  c.tp = tp;
  c.cp = cp;
  c.seqLen = 8192;
  c.hidden = 4096;
  c.qWidth = 4096;
  c.kvWidth = 1024;
  c.activationBytes = 2;
  return c;
}

TEST(LayerComm, ContextParallelAllGatherIsOneGatherForwardAndAGatherAndAScatterBackward) {
  const Node node;
  LayerConfig c = config(1, 4);
  c.cpCommType = CpCommType::kAllGather;
  const GroupPlacement group = placeRanks(node.cluster, 4, 1);
  LayerCost out;
  contextParallelComm(c, node.device, group, out);
  // The whole sequence's keys and values: 2 x 8192 tokens x (1024 + 1024) x 2 bytes.
  const double kvAll = 2.0 * 8192 * 2048 * 2;
  const double gather = collectiveSeconds(Collective::kAllGather, kvAll, group);
  EXPECT_DOUBLE_EQ(out.cpCommFwd, gather);
  EXPECT_DOUBLE_EQ(out.cpCommBwd, gather + collectiveSeconds(Collective::kReduceScatter, kvAll, group));
  EXPECT_EQ(out.opsFwd, 1);
  EXPECT_EQ(out.opsBwd, 2);
  // Without context parallelism nothing is exchanged.
  LayerCost none;
  contextParallelComm(config(1, 1), node.device, placeRanks(node.cluster, 1, 1), none);
  EXPECT_EQ(none.cpCommFwd + none.cpCommBwd + none.opsFwd + none.opsBwd, 0);
}

TEST(LayerComm, TheRingHidesItsStepsBehindTheAttentionOfTheChunkAtHand) {
  const Node node;
  const LayerConfig c = config(2, 4);  // kP2p by default
  const GroupPlacement group = placeRanks(node.cluster, 4, 2);
  // One step sends this rank's keys and values: 2 x 2048 tokens x 2048 / tp x 2 bytes.
  const double step = collectiveSeconds(Collective::kSendRecv, 2.0 * 2048 * 1024 * 2, group);
  LayerCost exposed;  // no attention to hide behind: three steps forward, three of two messages backward
  contextParallelComm(c, node.device, group, exposed);
  EXPECT_DOUBLE_EQ(exposed.cpCommFwd, 3 * step);
  EXPECT_DOUBLE_EQ(exposed.cpCommBwd, 3 * 2 * step);
  EXPECT_EQ(exposed.opsFwd, 9);
  EXPECT_EQ(exposed.opsBwd, 12);
  LayerCost hidden;  // an attention far longer than a step: only the slowdown of the hidden sends
  hidden.attnCoreFwd = 1.0;
  contextParallelComm(c, node.device, group, hidden);
  EXPECT_DOUBLE_EQ(hidden.cpCommFwd, 3 * node.device.overlapSlowdown * step);
  EXPECT_DOUBLE_EQ(hidden.cpCommBwd, 3 * node.device.overlapSlowdown * 2 * step);
  EXPECT_LT(hidden.cpCommFwd, exposed.cpCommFwd);
}

TEST(LayerComm, HierarchicalContextParallelismIsItsAllToAllLevelThenItsRing) {
  const Node node;
  LayerConfig c = config(1, 8);
  c.cpA2aGroup = placeRanks(node.cluster, 2, 1);
  c.cpRingGroup = placeRanks(node.cluster, 4, 2);
  LayerCost a2a, ring, both;
  c.cpCommType = CpCommType::kAllToAll;
  contextParallelComm(c, node.device, c.cpA2aGroup, a2a);
  c.cpCommType = CpCommType::kP2p;
  contextParallelComm(c, node.device, c.cpRingGroup, ring);
  c.cpCommType = CpCommType::kA2aP2p;
  contextParallelComm(c, node.device, placeRanks(node.cluster, 8, 1), both);
  EXPECT_GT(a2a.cpCommFwd, 0);
  EXPECT_GT(ring.cpCommFwd, 0);
  EXPECT_DOUBLE_EQ(both.cpCommFwd, a2a.cpCommFwd + ring.cpCommFwd);
  EXPECT_DOUBLE_EQ(both.cpCommBwd, a2a.cpCommBwd + ring.cpCommBwd);
  EXPECT_EQ(both.opsFwd, a2a.opsFwd + ring.opsFwd);
}

TEST(LayerComm, ExpertAllToAllsRunOnMoeLayersUnderExpertParallelismOnly) {
  const Node node;
  LayerConfig c = config(1, 1);
  c.ep = 8;
  c.topK = 2;
  const GroupPlacement group = placeRanks(node.cluster, 8, 1);
  LayerTemplate moe;
  moe.moe = true;
  LayerCost out;
  expertParallelComm(moe, c, node.device, group, out);
  // Dispatch and combine, each way: every token's two copies of its hidden state.
  const double a2a = expertDispatchSeconds(2.0 * 8192 * 2 * 4096 * 2, c, group);
  EXPECT_DOUBLE_EQ(out.epCommFwd, 2 * a2a);
  EXPECT_DOUBLE_EQ(out.epCommBwd, 2 * a2a);
  EXPECT_EQ(out.opsFwd, 2);
  // Megatron-Core's batch-level overlap behind ample compute leaves only the slowdown.
  c.epCommOverlap = true;
  LayerCost overlapped;
  overlapped.fwd = overlapped.bwd = 10.0;
  expertParallelComm(moe, c, node.device, group, overlapped);
  EXPECT_NEAR(overlapped.epCommFwd + overlapped.epCommBwd, node.device.overlapSlowdown * 4 * a2a, 1e-15);
  // A dense layer, or one expert-parallel rank, exchanges nothing.
  LayerCost dense, single;
  expertParallelComm(LayerTemplate{}, c, node.device, group, dense);
  c.ep = 1;
  expertParallelComm(moe, c, node.device, placeRanks(node.cluster, 1, 1), single);
  EXPECT_EQ(dense.epCommFwd + dense.opsFwd + single.epCommFwd + single.opsFwd, 0);
}

TEST(LayerComm, SequenceParallelismTurnsEachAllReduceIntoAScatterAndAGather) {
  const Node node;
  LayerConfig c = config(8, 1);
  const GroupPlacement group = placeRanks(node.cluster, 8, 1);
  LayerTemplate layer;
  layer.rowOps = 2;
  layer.columnOps = 2;
  const double bytes = 2.0 * 8192 * 4096 * 2;  // one micro-batch's activation
  LayerCost plain;
  tensorParallelComm(layer, c, node.device, group, plain);
  const double allReduce = collectiveSeconds(Collective::kAllReduce, bytes, group);
  EXPECT_DOUBLE_EQ(plain.tpCommFwd, 2 * allReduce);
  EXPECT_DOUBLE_EQ(plain.tpCommBwd, 2 * allReduce);
  EXPECT_EQ(plain.opsFwd, 2);
  c.sequenceParallel = true;
  LayerCost sp;
  tensorParallelComm(layer, c, node.device, group, sp);
  const double scatter = collectiveSeconds(Collective::kReduceScatter, bytes, group);
  const double gather = collectiveSeconds(Collective::kAllGather, bytes, group);
  EXPECT_DOUBLE_EQ(sp.tpCommFwd, 2 * (scatter + gather));
  EXPECT_DOUBLE_EQ(sp.tpCommBwd, 2 * scatter + 2 * gather);
  EXPECT_EQ(sp.opsFwd, 4);
  EXPECT_DOUBLE_EQ(tensorParallelGather(c, group), gather);
  // Transformer Engine's fp8 linears gather their fp8 cast: half the bytes.
  c.dtypeBytes = 1;
  LayerCost fp8;
  tensorParallelComm(layer, c, node.device, group, fp8);
  const double halfGather = collectiveSeconds(Collective::kAllGather, bytes / 2, group);
  EXPECT_DOUBLE_EQ(fp8.tpCommFwd, 2 * (scatter + halfGather));
  EXPECT_DOUBLE_EQ(tensorParallelGather(c, group), halfGather);
}

// The blocks outside the layers, split along the vocabulary: an embedding lookup (and a learned position
// table, split by nothing), the output layer's GEMM and the loss.
LayerTemplate vocabBlock(bool embedding, bool positions, bool head, bool loss) {
  LayerTemplate t;
  auto add = [&](OpKind kind, Shard shard) {
    OpTemplate op;
    op.kind = kind;
    op.shard = shard;
    t.ops.push_back(op);
  };
  if (embedding) add(OpKind::kEmbedding, Shard::kVocab);
  if (positions) add(OpKind::kEmbedding, Shard::kSequence);
  if (head) add(OpKind::kMatMul, Shard::kVocab);
  if (loss) add(OpKind::kCrossEntropy, Shard::kVocab);
  return t;
}

TEST(LayerComm, TheEmbeddingTheOutputLayerAndTheLossTalkOverTheTensorParallelGroup) {
  const Node node;
  const GroupPlacement group = placeRanks(node.cluster, 4, 1);
  // The collectives of one block (embedding, positions, output layer, loss: which of them it has).
  auto comm = [&](bool embedding, bool positions, bool head, bool loss, const LayerConfig& settings) {
    LayerCost cost;
    vocabParallelComm(vocabBlock(embedding, positions, head, loss), settings, group, cost);
    return cost;
  };
  LayerConfig c = config(4, 1);
  c.sequenceParallel = true;
  // [b, s, h] = 2 x 8192 x 4096 at 2 bytes; the loss reduces one fp32 per token (2 x 8192).
  const double bytes = 2.0 * 8192 * 4096 * 2;
  const double rows = 2.0 * 8192;
  const double gather = collectiveSeconds(Collective::kAllGather, bytes, group);
  const double scatter = collectiveSeconds(Collective::kReduceScatter, bytes, group);
  const double allReduce = collectiveSeconds(Collective::kAllReduce, bytes, group);
  // Under sequence parallelism the lookup's partial sums are reduce-scattered into sequence shards
  // (backward: the gradient all-gathered).
  const LayerCost embedding = comm(true, false, false, false, c);
  EXPECT_DOUBLE_EQ(embedding.tpCommFwd, scatter);
  EXPECT_DOUBLE_EQ(embedding.tpCommBwd, gather);
  EXPECT_EQ(embedding.opsFwd, 1);
  EXPECT_EQ(embedding.opsBwd, 1);
  // With learned positions Megatron all-reduces the sum and splits it.
  const LayerCost positions = comm(true, true, false, false, c);
  EXPECT_DOUBLE_EQ(positions.tpCommFwd, allReduce);
  EXPECT_DOUBLE_EQ(positions.tpCommBwd, gather);
  // The output layer gathers its input and reduce-scatters its input gradient; Megatron's unfused loss
  // all-reduces three fp32 values per token.
  const LayerCost head = comm(false, false, true, true, c);
  const double tokenReduce = collectiveSeconds(Collective::kAllReduce, rows * 4, group);
  EXPECT_DOUBLE_EQ(head.tpCommFwd, gather + 3 * tokenReduce);
  EXPECT_DOUBLE_EQ(head.tpCommBwd, scatter);
  EXPECT_EQ(head.opsFwd, 1 + 3);
  EXPECT_EQ(head.opsBwd, 1);
  // The fused loss reduces the maximum, then the target logit and the sum together; Transformer
  // Engine's gathers each rank's three values once.
  c.fusedCrossEntropy = true;
  const LayerCost fused = comm(false, false, false, true, c);
  EXPECT_DOUBLE_EQ(fused.tpCommFwd, tokenReduce + collectiveSeconds(Collective::kAllReduce, rows * 8, group));
  EXPECT_EQ(fused.opsFwd, 2);
  // Megatron's native loss fusion reduces the same way.
  LayerConfig native = c;
  native.fusedCrossEntropy = false;
  native.nativeFusedLoss = true;
  const LayerCost nativeLoss = comm(false, false, false, true, native);
  EXPECT_DOUBLE_EQ(nativeLoss.tpCommFwd, fused.tpCommFwd);
  c.crossEntropyInPlace = true;
  const LayerCost te = comm(false, false, false, true, c);
  EXPECT_DOUBLE_EQ(te.tpCommFwd, collectiveSeconds(Collective::kAllGather, rows * 12 * 4, group));
  EXPECT_EQ(te.opsFwd, 1);
  // Without sequence parallelism: the lookup all-reduced, the output layer's input gradient too.
  c = config(4, 1);
  const LayerCost plain = comm(true, false, true, false, c);
  EXPECT_DOUBLE_EQ(plain.tpCommFwd, allReduce);
  EXPECT_DOUBLE_EQ(plain.tpCommBwd, allReduce);
  EXPECT_EQ(plain.opsFwd, 1);
  EXPECT_EQ(plain.opsBwd, 1);
  // ... with learned positions too (nothing to split), and the backward's all-reduce is nothing.
  const LayerCost plainPositions = comm(true, true, false, false, c);
  EXPECT_DOUBLE_EQ(plainPositions.tpCommFwd, allReduce);
  EXPECT_DOUBLE_EQ(plainPositions.tpCommBwd, 0.0);
  // A transformer layer has no such block.
  const LayerCost layer = comm(false, false, false, false, c);
  EXPECT_EQ(layer.tpCommFwd + layer.tpCommBwd + layer.opsFwd + layer.opsBwd, 0);
}

}  // namespace
}  // namespace colo::costmodel::detail
