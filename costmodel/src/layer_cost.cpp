#include "layer_cost.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

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

// Which recompute group keeps an op's saved tensors and which repeats its forward, by the op's name in
// the graph (core/src/op_graph_builder.cpp) and the layer's kind: Megatron-Core's Transformer Engine
// layer fuses the input norm into the QKV linear and a dense layer's pre-MLP norm into fc1, so only a
// latent-attention layer's input norm and an MoE layer's pre-MLP norm are modules of their own.
void assignRecomputeGroups(LayerTemplate& t) {
  for (auto& o : t.ops) {
    const std::string_view n = o.name;
    const bool activation = o.kind == OpKind::kActivation || o.kind == OpKind::kGatedActivation;
    if (n == "attn_norm") {
      if (t.mla) o.timeGroup = kAttnNormOut;
    } else if (t.mla && (n == "attn.q_down" || n == "attn.kv_down")) {
      o.savedGroup = kAttnNormOut;
    } else if (t.mla && n == "attn.q") {  // no query down-projection: the query's projection is the up one
      o.savedGroup = kAttnNormOut;
      o.timeGroup = kMlaQkv;
    } else if (t.mla && (n == "attn.q_up" || n == "attn.kv_up")) {
      // The up-projections (Transformer Engine fuses the latents' norms into them) keep the normed
      // latents, which the checkpoint drops with Q, K and V (those the attention core keeps:
      // fusedAttention counts them); it keeps the latents before their norms.
      o.savedGroup = o.timeGroup = kMlaQkv;
    } else if (t.mla && (n == "attn.q_norm" || n == "attn.kv_norm" || n == "attn.rotary")) {
      o.timeGroup = kMlaQkv;
    } else if (n == "mlp_norm") {
      o.timeGroup = t.moe ? kMlpNormOut : kDenseMlp;
    } else if (!t.moe && n.starts_with("mlp.") && n != "mlp.dropout") {
      o.savedGroup = o.timeGroup = kDenseMlp;
    } else if (n == "moe.router") {
      o.savedGroup = kMlpNormOut;
      o.timeGroup = kMoeRest;
    } else if (n == "moe.shared.gate_up" || n == "moe.shared.up") {
      o.savedGroup = kMlpNormOut;
      o.timeGroup = kSharedInner;
    } else if (n.starts_with("moe.shared.")) {
      o.savedGroup = o.timeGroup = kSharedInner;
    } else if (n.starts_with("moe.experts.") && activation) {
      o.savedGroup = kMoeRest;  // its input, fc1's output, is what moe_act keeps
      o.timeGroup = kExpertAct;
    } else if (n == "moe.experts.down") {
      o.savedGroup = kExpertAct;
      o.timeGroup = kMoeRest;
    } else if (n.starts_with("moe.")) {
      o.savedGroup = o.timeGroup = kMoeRest;
    }
  }
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
    if (o.name == "attn.kv_down") t.mla = true;
  }
  assignRecomputeGroups(t);
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
double permutedRowsSplit(const LayerConfig& c) { return static_cast<double>(c.tp) / static_cast<double>(std::max<std::int64_t>(1, c.etp)); }
}  // namespace

// How many ways an elementwise op's rows are split across the tensor-parallel group: the expert sorts
// by tp/expert_tp; sequence-sharded ops by tp under sequence parallelism; other sharded ops by tp.
double elementSplit(const OpTemplate& op, const LayerConfig& c) {
  const double tp = static_cast<double>(c.tp);
  if (sortsByExpert(op)) return permutedRowsSplit(c);
  if (op.shard == Shard::kSequence) return c.sequenceParallel ? tp : 1.0;
  if (op.kind != OpKind::kEmbedding && op.shard != Shard::kReplicated) return tp;
  return 1.0;
}

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

}  // namespace colo::costmodel::detail
