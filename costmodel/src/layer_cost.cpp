#include "layer_cost.h"

#include "colo/costmodel/op_cost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <sstream>
#include <string_view>

namespace colo::costmodel::detail {
namespace {

bool splitByTp(Shard s) {
  return s == Shard::kColumn || s == Shard::kRow || s == Shard::kHeads || s == Shard::kInner || s == Shard::kVocab;
}

std::string signature(const OpGraph& graph, std::int64_t layer) {
  std::ostringstream sig;
  for (const auto id : graph.layerOps(layer)) {
    const Op& op = graph.op(id);
    sig << static_cast<int>(op.kind) << ',' << static_cast<int>(op.shard) << ',' << op.params << ',' << op.flopsFwd << ','
        << op.savedBytes << ';';
  }
  return sig.str();
}

LayerTemplate makeTemplate(const OpGraph& graph, std::int64_t layer, std::int64_t kvWidth) {
  LayerTemplate t;
  const std::int64_t s = graph.info().seqLen;
  const std::int64_t dt = graph.info().dtypeBytes;
  int bmmIndex = 0;
  for (const auto id : graph.layerOps(layer)) {
    const Op& op = graph.op(id);
    OpTemplate o;
    o.name = op.name;
    if (o.name.rfind("layers.", 0) == 0) o.name = o.name.substr(o.name.find('.', 7) + 1);
    o.kind = op.kind;
    o.shard = op.shard;
    o.m = op.dim("m");
    o.n = op.dim("n");
    o.k = op.dim("k");
    o.batch = std::max<std::int64_t>(1, op.dim("batch", 1));
    o.groups = std::max<std::int64_t>(1, op.dim("groups", 1));
    o.flopsFwd = op.flopsFwd;
    o.bytes = static_cast<double>(op.bytesRead + op.bytesWritten);
    o.savedBytes = static_cast<double>(op.savedBytes);
    o.params = static_cast<double>(op.params);
    // The graph counts a linear's bias in its parameters: more than its weights, or, for a head tied to
    // the embedding (BERT's decoder), exactly one per output column.
    if (op.kind == OpKind::kMatMul || op.kind == OpKind::kGroupedMatMul) {
      const double weights = static_cast<double>(o.k) * static_cast<double>(o.n) * static_cast<double>(o.groups);
      o.bias = o.params > weights + 0.5 || (o.params > 0 && o.params == static_cast<double>(o.n) * static_cast<double>(o.groups));
      // Megatron-Core adds only the attention input projection's bias in its GEMM (linear_qkv); the
      // others go to a fused bias-GeLU or bias-dropout-add (skip_bias_add).
      o.biasInGemm = o.bias && op.kind == OpKind::kMatMul && op.shard != Shard::kRow && o.name.starts_with("attn.");
    }
    o.causal = op.causal;
    o.window = op.dim("window", 0);
    switch (op.kind) {
      case OpKind::kActivation:
      case OpKind::kGatedActivation:
        o.kernel = op.name.substr(op.name.rfind('.') + 1);  // gelu, relu, silu, swiglu, geglu
        break;
      case OpKind::kMatMul:
      case OpKind::kBatchedMatMul:
      case OpKind::kGroupedMatMul:
        break;
      default:
        o.kernel = toString(op.kind);
    }
    o.elements = static_cast<double>(op.dim("elements", op.dim("rows", op.dim("tokens")) *
                                                          std::max<std::int64_t>(1, op.dim("classes", op.dim("width", 1)))));
    if (op.kind == OpKind::kLayerNorm || op.kind == OpKind::kRmsNorm || op.kind == OpKind::kPermute) o.width = graph.info().hiddenSize;
    // A permutation with a `groups` dim sorts rows by local expert (0: a plain permutation).
    if (op.kind == OpKind::kPermute) o.groups = op.dim("groups", 0);
    if (op.kind == OpKind::kSoftmax) o.width = op.dim("elements") / std::max<std::int64_t>(1, op.dim("elements") / s);
    if (op.kind == OpKind::kCrossEntropy) o.width = op.dim("classes");
    // A lookup moves its tokens' rows, whatever the table's size: the kernel colo-profile times as
    // "embedding" is tokens x width (its `rows` dimension is the vocabulary, the table).
    if (op.kind == OpKind::kEmbedding) {
      o.width = op.dim("width");
      o.elements = static_cast<double>(op.dim("tokens") * std::max<std::int64_t>(1, o.width));
    }
    if (op.kind == OpKind::kBatchedMatMul) {
      o.attentionCore = true;
      if (bmmIndex == 0) {
        t.qkvSavedPerSample += o.savedBytes + static_cast<double>(s * kvWidth * dt);  // Q, K (+ V)
        t.lsePerSample = static_cast<double>(o.batch * o.m * 4);
      } else {
        o.savedQuadratic = std::max(0.0, o.savedBytes - static_cast<double>(s * kvWidth * dt));
        t.attentionOutputPerSample = static_cast<double>(o.batch * o.m * o.n * dt);
      }
      ++bmmIndex;
    }
    // Everything over the scores between the two products (the softmax, a cap, dropout) is the
    // attention core: FlashAttention fuses it, and its saved tensors are quadratic in the sequence.
    const bool overScores = bmmIndex == 1 && op.kind != OpKind::kBatchedMatMul && op.shard == Shard::kHeads;
    if ((op.kind == OpKind::kSoftmax || op.kind == OpKind::kDropout || overScores) && op.shard == Shard::kHeads) {
      o.attentionCore = true;
      o.savedQuadratic = o.savedBytes;
    }
    // DeepSpeed's stage3_param_persistence_threshold (default 1e5 elements of the whole tensor): smaller
    // tensors (biases, norms) stay gathered. A grouped GEMM holds one weight per expert; a matmul whose
    // weight is another op's (a tied head: no parameters of its own) gathers nothing.
    constexpr double kPersistenceThreshold = 1e5;
    if (op.kind == OpKind::kMatMul || op.kind == OpKind::kGroupedMatMul) {
      const double perGroup = static_cast<double>(o.k) * static_cast<double>(o.n);
      if (perGroup >= kPersistenceThreshold && o.params >= perGroup * static_cast<double>(o.groups)) {
        (op.kind == OpKind::kGroupedMatMul ? t.gatheredExpertTensors : t.gatheredTensors) += static_cast<double>(o.groups);
      }
    } else if (o.params >= kPersistenceThreshold) {
      t.gatheredTensors += 1;
    }
    if (op.shard == Shard::kRow) ++t.rowOps;
    if (op.shard == Shard::kColumn) ++t.columnOps;
    if (op.kind == OpKind::kGroupedMatMul) {
      t.moe = true;
      t.expertParams += o.params;
    } else if (splitByTp(op.shard)) {
      t.tpSplittableParams += o.params;
    }
    t.params += o.params;
    t.ops.push_back(o);
  }
  return t;
}

}  // namespace

ModelTemplates digest(const OpGraph& graph, std::int64_t topK, std::int64_t kvWidth, bool tiedHead) {
  ModelTemplates m;
  const GraphInfo& info = graph.info();
  m.seqLen = info.seqLen;
  m.hidden = info.hiddenSize;
  m.dtypeBytes = info.dtypeBytes;
  m.kvWidth = kvWidth;
  m.topK = topK;
  m.tiedHead = tiedHead;
  std::map<std::string, std::size_t> bySignature;
  for (std::int64_t layer = 0; layer < info.numLayers; ++layer) {
    const std::string sig = signature(graph, layer);
    auto it = bySignature.find(sig);
    if (it == bySignature.end()) {
      it = bySignature.emplace(sig, m.classes.size()).first;
      m.classes.push_back(makeTemplate(graph, layer, kvWidth));
    }
    m.layerClass.push_back(it->second);
  }
  m.embedding = makeTemplate(graph, -1, kvWidth);
  m.head = makeTemplate(graph, info.numLayers, kvWidth);
  for (const auto& op : m.embedding.ops) {
    if (op.kind == OpKind::kEmbedding && op.shard == Shard::kVocab) m.tiedParams = op.params;
  }
  const OpTotals totals = graph.totals();
  m.modelFlopsPerSample = (totals.gemmFlopsFwd + totals.gemmFlopsBwd) / static_cast<double>(info.batch);
  return m;
}

std::optional<ScaledGemm> scaledGemm(const OpTemplate& op, const LayerConfig& c) {
  const double b = static_cast<double>(c.microBatch);
  const double tp = static_cast<double>(c.tp);
  const double cp = static_cast<double>(c.cp);
  const double ep = static_cast<double>(c.ep);
  const double tokenScale = b / cp;
  switch (op.kind) {
    case OpKind::kMatMul: {
      double n = static_cast<double>(op.n);
      double k = static_cast<double>(op.k);
      // The vocabulary padded to a multiple of 128 x tp, as Megatron-LM (--make-vocab-size-divisible-by,
      // default 128) and colo-run lay out the head: 50,257 runs as 50,304. The padding is physics for
      // the GEMM's speed, not only its flops: cuBLAS has no Hopper kernel for an odd row length and
      // falls back to one that is 5x slower (measured on an H200, docs/gpu.md).
      if (op.shard == Shard::kVocab) n = std::ceil(n / (128.0 * tp)) * 128.0 * tp;
      // Split by output columns: column-parallel linears, the vocabulary and per-head projections.
      if (op.shard == Shard::kColumn || op.shard == Shard::kVocab || op.shard == Shard::kHeads) n /= tp;
      if (op.shard == Shard::kRow) k /= tp;
      return ScaledGemm{std::max(1.0, static_cast<double>(op.m) * tokenScale), n, k, 1};
    }
    case OpKind::kGroupedMatMul: {
      const double localExperts = std::max(1.0, static_cast<double>(op.groups) / ep);
      // Balanced routing: the T*topK rows of a tensor-parallel group's tokens, shared by its expert_tp
      // ranks: each of tp/expert_tp expert-TP groups routes its own share (Megatron runs MoE under tp
      // with sequence parallelism, each rank holding T/tp tokens).
      const double etp = static_cast<double>(c.etp);
      const double rows = static_cast<double>(op.m) * tokenScale * etp / tp;
      double n = static_cast<double>(op.n);
      double k = static_cast<double>(op.k);
      if (n >= k) n /= etp; else k /= etp;  // the ffn dimension is split by the experts' tensor parallelism
      return ScaledGemm{std::max(1.0, rows / localExperts), n, k, localExperts};
    }
    case OpKind::kBatchedMatMul:
      if (c.flash) return std::nullopt;
      return ScaledGemm{static_cast<double>(op.m) / cp, static_cast<double>(op.n), static_cast<double>(op.k),
                        static_cast<double>(op.batch) * b / tp};
    default:
      return std::nullopt;
  }
}

std::optional<ScaledKernel> flashKernel(const LayerTemplate& layer, const LayerConfig& c) {
  if (!c.flash) return std::nullopt;
  const OpTemplate* scores = nullptr;
  const OpTemplate* context = nullptr;
  bool dropout = false;  // of the attention probabilities: the fused kernel draws the mask inside
  for (const auto& op : layer.ops) {
    dropout = dropout || (op.kind == OpKind::kDropout && op.attentionCore);
    if (op.kind != OpKind::kBatchedMatMul) continue;
    if (!scores) scores = &op;
    else if (!context) context = &op;
  }
  if (!scores || scores->window > 0 || scores->batch <= 0) return std::nullopt;
  // Per head: scores->k is the query/key head dim, the context product's n the value head dim.
  const std::int64_t keyDim = scores->k, valueDim = context ? context->n : scores->k;
  std::string key = std::string("flash_attention") + (scores->causal ? ".causal" : "") + ".d" + std::to_string(keyDim);
  if (valueDim != keyDim) key += ".v" + std::to_string(valueDim);
  if (dropout) key += ".dropout";
  const double count = static_cast<double>(scores->batch) * static_cast<double>(c.microBatch) / static_cast<double>(c.tp);
  return ScaledKernel{key, std::round(count * static_cast<double>(scores->m) / static_cast<double>(c.cp)), scores->n};
}

namespace {
// The sort of the received rows by local expert runs after the expert-tensor-parallel all-gather
// (Megatron-Core's dispatch_postprocess), on the rows the grouped GEMMs take: tp/expert_tp of all.
bool sortsByExpert(const OpTemplate& op) { return op.kind == OpKind::kPermute && op.groups > 0; }
double permutedRowsSplit(const LayerConfig& c) { return static_cast<double>(c.tp) / static_cast<double>(std::max<std::int64_t>(1, c.etp)); }

// How many ways an elementwise op's rows are split across the tensor-parallel group: the expert sorts
// by tp/expert_tp; sequence-sharded ops by tp under sequence parallelism; other sharded ops by tp.
double elementSplit(const OpTemplate& op, const LayerConfig& c) {
  const double tp = static_cast<double>(c.tp);
  if (sortsByExpert(op)) return permutedRowsSplit(c);
  if (op.shard == Shard::kSequence) return c.sequenceParallel ? tp : 1.0;
  if (op.kind != OpKind::kEmbedding && op.shard != Shard::kReplicated) return tp;
  return 1.0;
}
}  // namespace

std::optional<ScaledKernel> scaledKernel(const OpTemplate& op, const LayerConfig& c) {
  if (op.kernel.empty() || (c.flash && op.attentionCore)) return std::nullopt;
  const double tp = static_cast<double>(c.tp);
  const double split = elementSplit(op, c);
  std::int64_t width = op.width;
  if (op.kind == OpKind::kCrossEntropy) width = static_cast<std::int64_t>(static_cast<double>(width) / tp);
  return ScaledKernel{op.kernel, std::round(op.elements * static_cast<double>(c.microBatch) / static_cast<double>(c.cp) / split),
                      width};
}

double gemmSeconds(double m, double n, double k, double count, std::int64_t dtypeBytes, const DeviceModel& device) {
  if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return 0.0;
  // Output tiles of 128 x 128 fill waves of one tile per SM; partial tiles and the last partial wave
  // are wasted work. A short reduction dimension does not amortise the tile's prologue.
  constexpr double kTile = 128.0;
  const double tilesM = std::ceil(m / kTile);
  const double tilesN = std::ceil(n / kTile);
  const double tiles = tilesM * tilesN * count;
  const double sms = static_cast<double>(device.streamingProcessors);
  const double waves = std::ceil(tiles / sms);
  const double waveUse = tiles / (waves * sms);
  const double padUse = (m * n) / (tilesM * kTile * tilesN * kTile);
  const double depthUse = k / (k + 32.0);
  const double efficiency = device.gemmEfficiency * device.sustainedClock * waveUse * padUse * depthUse;
  const double flops = 2.0 * m * n * k * count;
  const double compute = flops / (device.peakFlopsPerSecond * efficiency);
  const double memory = (m * k + k * n + m * n) * count * static_cast<double>(dtypeBytes) / device.memoryBytesPerSecond;
  return std::max({compute, memory, device.kernelFloorSeconds});
}

double groupedGemmSeconds(double m, double n, double k, double count, int streams, std::int64_t dtypeBytes,
                          const DeviceModel& device) {
  if (streams <= 0 || count <= 1) return detail::gemmSeconds(m, n, k, count, dtypeBytes, device);
  // Transformer Engine's GroupedLinear (Megatron-Core's --moe-grouped-gemm) hands every local expert's
  // GEMM to cuBLAS on its own, round-robin over its compute streams (num_compute_streams = 4,
  // transformer_engine/common/util/multi_stream.h): at most `streams` experts' tiles share the SMs at a
  // time, so each such batch fills its waves apart; and each GEMM is a kernel the host launches in turn,
  // so the whole takes at least a kernel floor per expert.
  const double s = static_cast<double>(streams);
  const double batches = std::floor(count / s);
  const double rest = count - batches * s;
  double seconds = batches * detail::gemmSeconds(m, n, k, s, dtypeBytes, device);
  if (rest > 0) seconds += detail::gemmSeconds(m, n, k, rest, dtypeBytes, device);
  return std::max(seconds, std::ceil(count) * device.kernelFloorSeconds);
}

namespace {

// The separate matrix products a GEMM of colo's graph stands for, as shares of its output width: the
// builder fuses q, k and v into "qkv" and gate and up into "gate_up" (core/src/op_graph_builder.cpp);
// eager frameworks run them as separate products, which is what per-op recompute counts.
// (On the evaluator's hot path: no allocation.)
struct ProductShares {
  std::array<double, 3> share{1.0, 0.0, 0.0};
  std::size_t count = 1;
};
ProductShares productShares(const OpTemplate& op, const LayerConfig& c) {
  auto endsWith = [&](std::string_view suffix) { return std::string_view(op.name).ends_with(suffix); };
  const double n = static_cast<double>(op.n);
  const double kv = static_cast<double>(c.kvWidth);
  if (endsWith("qkv") && kv > 0 && n > 2 * kv) return {{(n - 2 * kv) / n, kv / n, kv / n}, 3};
  if (endsWith("gate_up")) return {{0.5, 0.5, 0.0}, 2};
  return {};
}

}  // namespace

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

namespace {

// Measured times of a kernel on this device (colo-profile on a GPU) replace the estimate, each way
// on its own. `kernelOf` names the kernel and its scaled shape; it is only called when the config has
// measured kernels (it builds a key string, which the search's hot path does without).
template <class KernelOf>
bool applyMeasured(const LayerConfig& c, KernelOf&& kernelOf, double& fwd, double& bwd, LookupCounts* counts) {
  if (!c.kernels || c.kernels->empty()) return false;
  const std::optional<ScaledKernel> kernel = kernelOf();
  if (!kernel) return false;
  const auto f = c.kernels->lookup(kernel->key + ".fwd", kernel->elements, kernel->width);
  const auto g = c.kernels->lookup(kernel->key + ".bwd", kernel->elements, kernel->width);
  if (f) fwd = f->first;
  if (g) bwd = g->first;
  if (counts) ++(f ? counts->kernelsMeasured : counts->kernelsRoofline);
  return g.has_value();  // whether the backward is measured
}

// What a fused cross-entropy reads forward and keeps for backward, per sample: the 16-bit logits and a
// log-sum-exp per row (flash-attn's CrossEntropyLoss, LLM Foundry's `fused_crossentropy`).
double fusedLossSavedBytes(const OpTemplate& op, const LayerConfig& c) {
  const double rows = op.elements / static_cast<double>(std::max<std::int64_t>(1, op.width));
  return op.elements * static_cast<double>(c.activationBytes) + 4.0 * rows;
}

// PyTorch's eager decomposition of an op the graph holds as one fused kernel (execution.unfused_kernels;
// docs/costmodel.md, "Eager elementwise kernels"): bytes moved per element of the op and kernels
// launched, each way, and bytes kept for backward per element. kernelsFwd 0: the op runs fused. `a` is
// the activations' bytes; .float() and .type_as() are no-ops on fp32 activations.
struct EagerOp {
  double fwdBytes = 0, bwdBytes = 0, kernelsFwd = 0, kernelsBwd = 0, savedBytes = 0;
};

EagerOp eagerDecomposition(const OpTemplate& op, const LayerConfig& c) {
  const double a = static_cast<double>(c.activationBytes);
  const bool casts = a < 4;
  const double castPair = casts ? 2 * (a + 4) : 0;  // to fp32 and back, each reading one and writing the other
  EagerOp e;
  if (op.kind == OpKind::kRmsNorm && (c.unfused.rmsNorm || (c.unfused.finalNorm && op.name == "head.final_norm"))) {
    // A weightless norm (Llama 4's query/key L2 norm) stops at type_as: no product by a weight, no
    // weight gradient, nothing kept for one.
    const double weighted = op.params > 0 ? 1 : 0;
    // x.float(); pow(2) 8; mean 4; + eps and rsqrt per row; x * r 8; type_as; * weight 2a.
    e.fwdBytes = castPair + 20 + weighted * 2 * a;
    e.kernelsFwd = (casts ? 7 : 5) + weighted;
    // * weight: the input's gradient 2a, the weight's a product and a row sum 4a; type_as's gradient
    // to fp32; x * r: g * r 8, (g * x) summed over the row 16; rsqrt and add per row (three small
    // kernels); mean's gradient expanded and divided 4; pow's grad * (2 * x.pow(1)), a copy 8, a scale
    // 8 and a product 12; x's two gradients added 12; .float()'s gradient back to 16 bits.
    e.bwdBytes = weighted * 6 * a + castPair + 68;
    e.kernelsBwd = (casts ? 13 : 11) + weighted * 3;
    // x in fp32 (pow and the scale), the normalized rows (the weight's gradient)
    e.savedBytes = (casts ? 4 : a) + weighted * a;
  } else if (op.kind == OpKind::kRotary && c.unfused.rotary) {
    // Per query and key: .float(), the complex multiply by the frequencies 8, type_as; backward the
    // three in reverse (the frequencies need no gradient, nothing is kept per token).
    e.fwdBytes = e.bwdBytes = castPair + 8;
    e.kernelsFwd = e.kernelsBwd = 2 * (casts ? 3 : 1);
  } else if (op.kind == OpKind::kGatedActivation && c.unfused.gatedActivation) {
    // act(gate) 2a, then * up 3a; backward the product's two gradients 3a each and act's 3a.
    e.fwdBytes = 5 * a;
    e.kernelsFwd = 2;
    e.bwdBytes = 9 * a;
    e.kernelsBwd = 3;
    e.savedBytes = 3 * a;  // gate, up and act(gate)
  }
  return e;
}

// One micro-batch's full activation [b, s/cp, h], the buffer every tensor-parallel collective moves.
double activationBytes(const LayerConfig& c) {
  return static_cast<double>(c.microBatch) * (static_cast<double>(c.seqLen) / static_cast<double>(c.cp)) *
         static_cast<double>(c.hidden) * static_cast<double>(c.activationBytes);
}

// Whether Transformer Engine runs this layer's linears in fp8: its sequence-parallel all-gathers then
// move the fp8 cast (docs/costmodel.md, "fp8 all-gathers").
bool transformerEngineFp8(const LayerConfig& c) {
  return c.dtypeBytes == 1 && c.float8Recipe == Float8Recipe::kTransformerEngine;
}

// All-gather of one sequence-parallel activation over the tensor-parallel group, as the input of a
// column-parallel linear's backward: 16 bits, or the saved fp8 copy under Transformer Engine.
double tensorParallelGather(const LayerConfig& c, const GroupPlacement& tpGroup) {
  const double bytes = activationBytes(c);
  return collectiveSeconds(Collective::kAllGather, transformerEngineFp8(c) ? bytes / 2.0 : bytes, tpGroup);
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

}  // namespace

LayerCost costLayer(const LayerTemplate& layer, const LayerConfig& c, const DeviceModel& device,
                    const GroupPlacement& tpGroup, const GroupPlacement& cpGroup, const GroupPlacement& epGroup,
                    LookupCounts* counts, std::vector<OpCost>* opCosts) {
  LayerCost out;
  // Attention's products keep 16 bits under fp8 (hardware.h).
  DeviceModel attentionDevice = device;
  attentionDevice.peakFlopsPerSecond = device.attentionPeakFlopsPerSecond;
  attentionDevice.gemmEfficiency = device.attentionGemmEfficiency;
  // A measured time when the cost database has this shape or a near one, else the roofline.
  auto gemmOn = [&](const DeviceModel& dev, double m, double n, double k, double count, int streams = 0) {
    const std::int64_t bytes = &dev == &attentionDevice ? c.activationBytes : c.dtypeBytes;
    if (c.measured && !c.measured->empty()) {
      auto roofline = [&](double mm, double nn, double kk) { return detail::gemmSeconds(mm, nn, kk, 1, bytes, dev); };
      if (auto hit = c.measured->lookup(m, n, k, roofline)) {
        if (counts) ++(hit->second == LookupSource::kExact ? counts->exact : counts->interpolated);
        return hit->first * count;
      }
    }
    if (counts) ++counts->roofline;
    return detail::groupedGemmSeconds(m, n, k, count, streams, bytes, dev) * c.gemmScale;
  };
  const double b = static_cast<double>(c.microBatch);
  const double tp = static_cast<double>(c.tp);
  const double cp = static_cast<double>(c.cp);
  const double ep = static_cast<double>(c.ep);
  const double tokenScale = b / cp;
  const double seqSplit = c.sequenceParallel ? tp : 1.0;  // full-width activations under SP
  const double bw = device.memoryBytesPerSecond;
  const double floor = device.kernelFloorSeconds;

  double attnSaved = 0;
  double quadraticSaved = 0;
  // Per-op selective recompute keeps the output of every other matrix product, counted in the order
  // the layer runs them (the 1st, 3rd, ...); a fused projection counts as the GEMMs eager frameworks
  // run apart (QKV as q, k and v; gate_up as gate and up).
  std::int64_t products = 0;
  double opKeptOutputs = 0;
  const OpTemplate* scores = nullptr;
  const OpTemplate* context = nullptr;
  const OpTemplate* previous = nullptr;
  // Under sequence parallelism each column-parallel linear's backward gathers its saved input shard
  // again beside its input-gradient GEMM (tensorParallelComm): what that costs, summed here.
  const double regather = c.tp > 1 && c.sequenceParallel ? tensorParallelGather(c, tpGroup) : 0.0;
  double regatherExposed = 0;
  for (const auto& op : layer.ops) {
    // Compute.
    double fwd = 0;
    double bwd = 0;
    const bool fused = c.flash && op.attentionCore;
    switch (op.kind) {
      case OpKind::kMatMul:
      case OpKind::kGroupedMatMul:
      case OpKind::kBatchedMatMul: {
        const auto g = scaledGemm(op, c);
        const double flops = 2 * g.value_or(ScaledGemm{0, 0, 0, 0}).m * (g ? g->n * g->k * g->count : 0);
        if (op.kind == OpKind::kBatchedMatMul) {
          if (!scores) scores = &op;
          else if (!context) context = &op;
          const double full = 2 * static_cast<double>(op.batch) * b / tp * static_cast<double>(op.m) / cp *
                              static_cast<double>(op.n) * static_cast<double>(op.k);
          out.gemmFlopsFwdPerGpu += full;
          out.attnFlopsFwdPerGpu += full;
        } else {
          out.gemmFlopsFwdPerGpu += flops;
        }
        if (!g) break;
        // torchao's recipes convert nn.Linear only, and torchtitan leaves the output head out
        // (filter_fqns "output"): the head and grouped expert GEMMs stay at 16 bits.
        const bool torchao = c.float8Recipe != Float8Recipe::kTransformerEngine;
        const bool sixteenBit = op.kind == OpKind::kBatchedMatMul ||
                                (torchao && (op.kind == OpKind::kGroupedMatMul || op.shard == Shard::kVocab));
        const DeviceModel& dev = sixteenBit ? attentionDevice : device;
        // PyTorch's async TP runs a matmul fused with a collective as tp matmuls of m/tp rows, one per
        // rank's shard (_fused_all_gather_matmul, _fused_matmul_reduce_scatter), which fill the GPU's
        // waves less well: forward, the column-parallel linears (input gathered) and the row-parallel
        // ones (output reduce-scattered); backward, the row-parallel linears' input gradient (output
        // gradient gathered). The weight gradients and the column-parallel input gradients are whole.
        // (An MoE block's shared expert adds its partial output to the routed one before the reduction:
        // torchtitan's shared_experts.w2 keeps a Partial output, so nothing of the block is fused.)
        const bool decomposed = c.tpMicroPipeline && c.sequenceParallel && c.tp > 1 && op.kind == OpKind::kMatMul &&
                                (op.shard == Shard::kColumn || op.shard == Shard::kRow) && !op.name.starts_with("moe.");
        // (The host issues the fused op as one op of the compiled graph: its inner launches are counted
        // as one.)
        const int streams = op.kind == OpKind::kGroupedMatMul ? c.groupedGemmStreams : 0;
        auto fusedGemm = [&](double m, double n, double k) {
          return decomposed ? tp * gemmOn(dev, m / tp, n, k, g->count) : gemmOn(dev, m, n, k, g->count, streams);
        };
        fwd = fusedGemm(g->m, g->n, g->k);
        // The fused matmul-reduce-scatter exchanges the unreduced [m, n] partial products and sums the
        // tp received [m/tp, n] blocks in a kernel of its own (reduce_fn over the stacked partials).
        if (decomposed && op.shard == Shard::kRow) {
          fwd += std::max(floor, g->m * g->n * g->count * static_cast<double>(c.activationBytes) * (1.0 + 1.0 / tp) / bw);
          out.opsFwd += 1;
        }
        // Backward: the input gradient [m, n] x [n, k] and the weight gradient [k, m] x [m, n], each at
        // its own shape (measured where the database has it, else the roofline).
        const bool wgradHp = c.float8Recipe == Float8Recipe::kRowwiseGwHp;
        double wgrad = gemmOn(wgradHp ? attentionDevice : dev, g->k, g->n, g->m, g->count, streams);
        // Megatron's gradient-accumulation fusion (and Transformer Engine's fused wgrad accumulation)
        // has the weight-gradient GEMM add into the fp32 main_grad: it reads and writes the [k, n]
        // weight in fp32, which bounds short products (an expert's few hundred tokens) by memory.
        if (c.wgradIntoFp32 && op.kind != OpKind::kBatchedMatMul) {
          const double io = (g->m * g->k + g->m * g->n) * static_cast<double>(c.dtypeBytes) + g->k * g->n * 8.0;
          wgrad = std::max(wgrad, g->count * io / dev.memoryBytesPerSecond);
        }
        const double dgrad = op.shard == Shard::kRow ? fusedGemm(g->m, g->k, g->n) : gemmOn(dev, g->m, g->k, g->n, g->count, streams);
        if (regather > 0 && op.shard == Shard::kColumn && op.kind == OpKind::kMatMul) {
          const double hidden = c.tpCommOverlap ? regather : std::min(regather, dgrad);
          regatherExposed += std::max(0.0, regather - hidden) + device.overlapSlowdown * hidden;
          out.opsBwd += 1;
        }
        bwd = dgrad + wgrad;
        // A biased linear's bias gradient sums its output gradient over the rows (Megatron-LM's
        // linears: grad_output.sum(dim=0); PyTorch's autograd reduces a broadcast bias the same way):
        // a read of that gradient. Transformer Engine fuses it into the GEMM for the linears that add
        // their own bias (OpTemplate::biasInGemm). A row-parallel linear's bias is added after the
        // reduction, on the sequence shard under sequence parallelism.
        if (op.bias && !(c.fusedBiasGrad && op.biasInGemm)) {
          const double rows = op.shard == Shard::kRow && c.sequenceParallel ? tp : 1.0;
          bwd += std::max(floor, g->m * g->n * g->count * static_cast<double>(c.activationBytes) / rows / bw);
          out.opsBwd += 1;
        }
        if (torchao && !sixteenBit) {
          // Under tensor parallelism torchtitan's float8 layouts (tensorwise only) cast the operand a
          // sequence-parallel all-gather brings before gathering it: on the shard, and gathered in fp8.
          const bool castShard = c.float8Recipe == Float8Recipe::kTensorwise && c.sequenceParallel;
          const double input = g->m * g->k * g->count / (castShard && op.shard == Shard::kColumn ? tp : 1.0);
          const double gradOutput = g->m * g->n * g->count / (castShard && op.shard == Shard::kRow ? tp : 1.0);
          // torchtitan's linears are separate modules (wq, wk, wv; w1, w3): one set of per-linear kernels
          // each for the products a fused GEMM of colo's graph stands for.
          const double linears = static_cast<double>(productShares(op, c).count) * g->count;
          const Float8CastSeconds cast =
              float8CastSeconds(c.float8Recipe, input, g->k * g->n * g->count, gradOutput, linears, device);
          fwd += cast.forward;
          bwd += cast.backward;
          out.opsFwd += cast.kernelsForward;
          out.opsBwd += cast.kernelsBackward;
        }
        break;
      }
      default: {
        if (fused) break;
        // A sort of the routed rows by local expert moves nothing when a GPU holds one expert; DeepEP's
        // dispatch lays the rows out by expert itself (Megatron-Core's flex dispatcher has no sort).
        if (sortsByExpert(op) && (static_cast<double>(op.groups) <= static_cast<double>(c.ep) || c.dedupDispatch)) break;
        const double split = elementSplit(op, c);
        // Dropout also writes its 1-byte mask (its saved bytes) forward and reads it backward. A residual
        // add right after a hidden-state dropout is fused with it (Megatron's bias-dropout-add): the pair
        // reads x and the residual and writes the sum and the mask, so the add only adds its residual read.
        const bool fusedAdd = op.kind == OpKind::kAdd && previous && previous->kind == OpKind::kDropout &&
                              previous->shard == Shard::kSequence;
        double traffic = op.bytes;
        if (op.kind == OpKind::kDropout) traffic += op.savedBytes;
        // A fused cross-entropy reads the 16-bit logits once and writes a statistic per row; its
        // backward reads them again and writes their 16-bit gradient (twice the forward's traffic).
        // In place (Transformer Engine's), the forward reads them twice (the row statistics, then the
        // loss) and writes the gradient over them; the backward scales it, a read and a write.
        const bool fusedLoss = op.kind == OpKind::kCrossEntropy && c.fusedCrossEntropy;
        if (fusedLoss) traffic = fusedLossSavedBytes(op, c) + (c.crossEntropyInPlace ? 2.0 * op.elements * static_cast<double>(c.activationBytes) : 0.0);
        double lossBackward = c.crossEntropyInPlace ? 2.0 / 3.0 : 2.0;
        // Megatron's native fusion runs the unfused loss's passes as three compiled kernels forward: the
        // upcast with the row max (16-bit in, fp32 out), the shift, exp and sum in place (fp32 in and
        // out) and the division in place (fp32 in and out); backward one: the saved softmax in, updated
        // in place, and the 16-bit gradient out (megatron/core/fusions/fused_cross_entropy.py).
        const bool nativeLoss = op.kind == OpKind::kCrossEntropy && c.nativeFusedLoss && !fusedLoss;
        if (nativeLoss) {
          const double dt = static_cast<double>(c.activationBytes);
          traffic = op.elements * (dt + 4.0 + 8.0 + 8.0);
          lossBackward = (8.0 + dt) / (dt + 20.0);
        }
        if (fusedAdd) traffic = op.bytes / 3.0;
        const double bytes = traffic * tokenScale / split;
        fwd = fusedAdd ? bytes / bw : std::max(floor, bytes / bw);
        // Backward reads the saved input and the incoming gradient and writes one gradient (1.5 passes
        // of the forward's traffic); dropout's backward is one masked pass (gradient and mask in, gradient out: the forward's traffic); a residual's gradient is
        // passed through to both inputs without a kernel of its own.
        if (op.kind == OpKind::kAdd) bwd = 0.0;
        else if (op.kind == OpKind::kDropout || op.kind == OpKind::kPermute) bwd = fwd;  // one pass (a permutation's backward: the inverse copy)
        else bwd = std::max(floor, (fusedLoss || nativeLoss ? lossBackward : 1.5) * bytes / bw);
        // Eager: the decomposition's kernels at HBM speed (a measured kernel is the fused one). The host
        // issues each of its aten ops; the host floor's time per op covers about three of them.
        const EagerOp eager = eagerDecomposition(op, c);
        if (eager.kernelsFwd > 0) {
          const double elements = op.elements * tokenScale / split;
          fwd = std::max(eager.kernelsFwd * floor, eager.fwdBytes * elements / bw);
          bwd = std::max(eager.kernelsBwd * floor, eager.bwdBytes * elements / bw);
          out.opsFwd += (eager.kernelsFwd - 1) / 3.0;
          out.opsBwd += (eager.kernelsBwd - 1) / 3.0;
          if (counts && c.kernels && !c.kernels->empty()) ++counts->kernelsRoofline;
        }
        const bool measuredBwd = eager.kernelsFwd == 0 && applyMeasured(c, [&] { return scaledKernel(op, c); }, fwd, bwd, counts);
        // PyTorch's embedding backward returns a dense gradient of the whole table: it zero-fills it
        // (at::zeros in embedding_dense_backward) before adding the tokens' rows, every micro-batch
        // (Megatron's VocabParallelEmbedding runs F.embedding on its vocabulary shard). colo-profile's
        // `embedding` kernel looks up as many rows as tokens in a table of as many rows, so a measured
        // backward holds the zero-fill of that many rows already. Under gradient-accumulation fusion
        // Megatron's backward hook then adds the gradient into the fp32 main_grad
        // (param.main_grad.add_(param.grad.data)): read both, write main_grad.
        if (op.kind == OpKind::kEmbedding && op.params > 0) {
          const double table = op.params / (op.shard == Shard::kVocab ? tp : 1.0);  // elements
          const double looked = op.elements * tokenScale / split;                    // the tokens' rows, elements
          const double zeroed = measuredBwd ? std::max(0.0, table - looked) : table;
          bwd += (zeroed * static_cast<double>(c.activationBytes) + table * c.embeddingGradAddBytes) / bw;
        }
        break;
      }
    }
    out.fwd += fwd;
    out.bwd += bwd;
    if (fwd > 0) out.opsFwd += 1;
    // A GEMM's backward is two GEMMs (input and weight gradient); other ops one kernel, if any.
    if (bwd > 0) out.opsBwd += (op.kind == OpKind::kMatMul || op.kind == OpKind::kGroupedMatMul ||
                                op.kind == OpKind::kBatchedMatMul) ? 2 : 1;
    if (opCosts) opCosts->push_back({op.name, toString(op.kind), fwd, bwd});
    previous = &op;
    if ((op.kind == OpKind::kMatMul || op.kind == OpKind::kGroupedMatMul) && !fused) {
      double kept = 0;
      const ProductShares parts = productShares(op, c);
      for (std::size_t i = 0; i < parts.count; ++i) kept += (++products % 2 == 1) ? parts.share[i] : 0.0;
      if (const auto g = scaledGemm(op, c)) {
        const double split = op.shard == Shard::kRow ? seqSplit : 1.0;  // reduce-scattered under SP
        opKeptOutputs += kept * g->m * g->n * g->count * static_cast<double>(c.activationBytes) / split;
        out.recomputeOpFlops += (1.0 - kept) * 2.0 * g->m * g->n * g->k * g->count;
      }
      out.recomputeOpFwd += (1.0 - kept) * fwd;
    } else if (!op.attentionCore) {
      out.recomputeOpFwd += fwd;  // norms, rotary, activations, residuals: cheap, recomputed
    }
    if (op.attentionCore) out.attnCoreFwd += fwd;

    // Saved activations: a linear saves its input (full width unless SP splits it); everything
    // downstream of a column-parallel linear is split by TP.
    double savedSplit = 1.0;
    switch (op.shard) {
      case Shard::kColumn:
      case Shard::kSequence:
        savedSplit = seqSplit;
        break;
      case Shard::kVocab:
        savedSplit = op.kind == OpKind::kMatMul ? seqSplit : tp;
        break;
      case Shard::kRow:
      case Shard::kHeads:
      case Shard::kInner:
        savedSplit = tp;
        break;
      case Shard::kReplicated:
        savedSplit = 1.0;
        break;
      case Shard::kExpert:  // each expert-TP group keeps its own tokens' share (see scaledGemm)
        savedSplit = tp / static_cast<double>(c.etp);
        break;
    }
    // Transformer Engine keeps a linear layer's input for the weight gradient in its fp8 copy (Linear,
    // LayerNormLinear, LayerNormMLP and GroupedLinear save the quantized input when the recipe runs the
    // weight gradient in fp8, its default): 1 byte per element instead of the template's 2. Megatron's
    // output layer is not a Transformer Engine module and torchao's recipes save the 16-bit input.
    const bool fp8Input = transformerEngineFp8(c) &&
                          (op.kind == OpKind::kMatMul || op.kind == OpKind::kGroupedMatMul) && op.shard != Shard::kVocab;
    // A fused cross-entropy keeps the 16-bit logits and a statistic per row, not an fp32 copy.
    // Templates hold 16-bit bytes, which the stage rescales to the plan's activations: bytes counted
    // at the plan's own width go back to template units first.
    const double toTemplate = 2.0 / static_cast<double>(c.activationBytes);
    const EagerOp eagerSaved = eagerDecomposition(op, c);
    const double opSaved = op.kind == OpKind::kCrossEntropy && c.fusedCrossEntropy ? fusedLossSavedBytes(op, c) * toTemplate
                           : eagerSaved.kernelsFwd > 0 && !fused ? eagerSaved.savedBytes * op.elements * toTemplate
                                                                 : op.savedBytes;
    const double saved = opSaved * tokenScale / savedSplit * (fp8Input ? 0.5 : 1.0);
    out.savedFull += saved;
    if (op.attentionCore) attnSaved += saved;
    quadraticSaved += op.savedQuadratic * tokenScale / savedSplit;
  }

  // FlashAttention: one fused kernel each way; a causal mask lets it skip half the blocks.
  if (c.flash && scores) {
    const double count = static_cast<double>(scores->batch) * b / tp;
    // Q.K^T over the query/key width, then P.V over the value width (the same width but for latent
    // attention, whose values are narrower).
    const double valueWidth = static_cast<double>(context ? context->n : scores->k);
    const double flops = 2.0 * count * (static_cast<double>(scores->m) / cp) * static_cast<double>(scores->n) *
                         (static_cast<double>(scores->k) + valueWidth);
    // The share of query-key pairs a causal mask leaves: half of a full (or chunked) sequence, and
    // s*w - w*(w-1)/2 of the s*w pairs a sliding window of w keys spans.
    const double m = static_cast<double>(scores->m);
    const double density = !scores->causal       ? 1.0
                           : scores->window > 0 ? 1.0 - (static_cast<double>(scores->window) - 1.0) / (2.0 * m)
                                                : 0.5;
    const double work = density * flops;
    const auto t = fusedAttentionSeconds(work, device, static_cast<double>(scores->k));
    double fwd = t.forward;
    double bwd = t.backward;
    applyMeasured(c, [&] { return flashKernel(layer, c); }, fwd, bwd, counts);
    out.fwd += fwd;
    out.bwd += bwd;
    out.opsFwd += 1;
    out.opsBwd += 1;
    if (opCosts) opCosts->push_back({"attn.flash", "flash_attention", fwd, bwd});
    out.attnCoreFwd += fwd;
    // Saves Q, K, V, the output and the softmax statistics instead of anything quadratic.
    const double flashSaved = (layer.qkvSavedPerSample + layer.attentionOutputPerSample + layer.lsePerSample) * tokenScale / tp;
    out.savedFull += flashSaved - attnSaved;
    out.savedSelective = out.savedFull;
  } else {
    out.savedSelective = out.savedFull - quadraticSaved;
  }
  out.savedInput = b * (static_cast<double>(c.seqLen) / cp) * static_cast<double>(c.hidden) *
                   static_cast<double>(c.activationBytes) / seqSplit;
  // The attention kernel's saved tensors stay (torchtitan's save list holds SDPA; unfused, the core's).
  const double attentionKept = (c.flash && scores)
                                   ? (layer.attentionOutputPerSample + layer.lsePerSample) * tokenScale / tp
                                   : attnSaved;
  out.savedOp = std::min(out.savedFull, out.savedInput + attentionKept + opKeptOutputs);

  if (c.tp > 1) tensorParallelComm(layer, c, device, tpGroup, out);
  out.tpCommBwd += regatherExposed;
  // Expert parallelism: dispatch and combine all-to-alls, each way.
  if (layer.moe && c.ep > 1) {
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
  if (c.cp > 1) {
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
  // Host floor: the GPU cannot run a kernel before the host has issued it. When the layer's kernels
  // and exposed collectives take less than the host's time to issue them, the GPU waits for the rest.
  if (c.hostSecondsPerOp > 0) {
    const double deviceFwd = out.fwd + out.tpCommFwd + out.cpCommFwd + out.epCommFwd;
    const double deviceBwd = out.bwd + out.tpCommBwd + out.cpCommBwd + out.epCommBwd;
    out.hostWaitFwd = std::max(0.0, out.opsFwd * c.hostSecondsPerOp - deviceFwd);
    out.hostWaitBwd = std::max(0.0, out.opsBwd * c.hostSecondsPerOp - deviceBwd);
    out.fwd += out.hostWaitFwd;
    out.bwd += out.hostWaitBwd;
    if (opCosts && out.hostWaitFwd + out.hostWaitBwd > 0) {
      opCosts->push_back({"host.wait", "host", out.hostWaitFwd, out.hostWaitBwd});
    }
  }
  out.paramsPerGpu = (layer.params - layer.tpSplittableParams - layer.expertParams) + layer.tpSplittableParams / tp +
                     layer.expertParams / (static_cast<double>(c.etp) * ep);
  out.expertParamsPerGpu = layer.expertParams / (static_cast<double>(c.etp) * ep);
  out.gatheredTensors = layer.gatheredTensors + layer.gatheredExpertTensors / ep;
  return out;
}

}  // namespace colo::costmodel::detail
