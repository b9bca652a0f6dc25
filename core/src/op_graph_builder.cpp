// Expands a ModelSpec into its op graph. The per-op saved-activation bytes follow Korthikanti et al.
// 2022 ("Reducing Activation Recomputation in Large Transformer Models", section 4.1): for a GPT layer
// with dropout they sum to s*b*h*(34 + 5*a*s/h) bytes at 16 bits. docs/formats.md states how this is
// generalised to gated MLPs, grouped-query attention, no dropout and MoE.
#include <algorithm>
#include <optional>

#include "colo/core/op_graph.h"

namespace colo {
namespace {

class Builder {
 public:
  Builder(const ModelSpec& spec, std::int64_t seqLen, std::int64_t batch, std::int64_t dtypeBytes)
      : m_spec(spec), m_s(seqLen), m_b(batch), m_tokens(seqLen * batch), m_dt(dtypeBytes) {
    GraphInfo info;
    info.name = spec.name;
    info.seqLen = seqLen;
    info.batch = batch;
    info.dtypeBytes = dtypeBytes;
    info.numLayers = spec.numLayers;
    info.hiddenSize = spec.hiddenSize;
    info.numAttentionHeads = spec.numAttentionHeads;
    info.numKvHeads = spec.kvHeads();
    info.vocabSize = spec.vocabSize;
    m_graph = OpGraph(info);
  }

  OpGraph build() {
    embeddings();
    for (std::int64_t layer = 0; layer < m_spec.numLayers; ++layer) transformerLayer(layer);
    heads();
    return std::move(m_graph);
  }

 private:
  // Appends an op fed by the current cursor (and any extra inputs) and moves the cursor to it.
  std::size_t chain(Op op, std::initializer_list<std::size_t> extraInputs = {}) {
    op.layer = m_layer;
    op.block = m_block;
    if (op.activeParams == 0) op.activeParams = op.params;
    const std::size_t id = m_graph.addOp(std::move(op));
    if (m_cursor) m_graph.addEdge(*m_cursor, id);
    for (const auto input : extraInputs) m_graph.addEdge(input, id);
    m_cursor = id;
    return id;
  }

  std::string name(const std::string& leaf) const {
    if (m_layer < 0) return "embed." + leaf;
    if (m_layer >= m_spec.numLayers) return "head." + m_prefix + leaf;
    return "layers." + std::to_string(m_layer) + "." + leaf;
  }

  // A GEMM of an [m, k] activation with a [k, n] weight; saves its input for the weight gradient.
  std::size_t matmul(const std::string& leaf, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t params,
                     Shard shard) {
    Op op;
    op.name = name(leaf);
    op.kind = OpKind::kMatMul;
    op.shard = shard;
    op.dims = {{"m", m}, {"n", n}, {"k", k}};
    op.params = params;
    const double f = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    op.flopsFwd = f;
    op.flopsBwd = 2.0 * f;  // input gradient + weight gradient
    op.bytesRead = (m * k + k * n) * m_dt;
    op.bytesWritten = m * n * m_dt;
    op.savedBytes = m * k * m_dt;
    return chain(std::move(op));
  }

  std::size_t elementwise(const std::string& leaf, OpKind kind, Shard shard, std::int64_t elements,
                          double flopsPerElement, std::int64_t savedBytes, std::int64_t params = 0,
                          std::int64_t inputsPerElement = 1) {
    Op op;
    op.name = name(leaf);
    op.kind = kind;
    op.shard = shard;
    op.dims = {{"elements", elements}};
    op.params = params;
    op.flopsFwd = flopsPerElement * static_cast<double>(elements);
    op.flopsBwd = 2.0 * op.flopsFwd;
    op.bytesRead = inputsPerElement * elements * m_dt + params * m_dt;
    op.bytesWritten = elements * m_dt;
    op.savedBytes = savedBytes;
    return chain(std::move(op));
  }

  std::size_t norm(const std::string& leaf, std::int64_t width) {
    const bool layerNorm = m_spec.norm == NormKind::kLayerNorm;
    const std::int64_t elements = m_tokens * width;
    // Saves its input (the statistics are per row and negligible).
    return elementwise(leaf, layerNorm ? OpKind::kLayerNorm : OpKind::kRmsNorm, Shard::kSequence, elements,
                       layerNorm ? 8.0 : 5.0, elements * m_dt, layerNorm ? 2 * width : width);
  }

  void dropout(const std::string& leaf, std::int64_t elements, Shard shard) {
    if (m_spec.dropout <= 0.0) return;
    elementwise(leaf, OpKind::kDropout, shard, elements, 2.0, elements /* 1-byte mask */);
  }

  void embeddings() {
    m_layer = -1;
    m_block = "embedding";
    const std::int64_t h = m_spec.hiddenSize;
    if (m_spec.input == InputKind::kImagePatches) {
      const auto& im = m_spec.image;
      const std::int64_t patchInputs = im.numChannels * im.patchSize * im.patchSize;
      matmul("patch_projection", m_b * im.numPatches(), h, patchInputs, patchInputs * h + h, Shard::kReplicated);
      Op positions;
      positions.name = name("class_token_and_positions");
      positions.kind = OpKind::kAdd;
      positions.shard = Shard::kSequence;
      positions.dims = {{"elements", m_tokens * h}};
      positions.params = h + (im.numPatches() + 1) * h;
      positions.flopsFwd = static_cast<double>(m_tokens * h);
      positions.bytesRead = 2 * m_tokens * h * m_dt;
      positions.bytesWritten = m_tokens * h * m_dt;
      chain(std::move(positions));
      dropout("dropout", m_tokens * h, Shard::kSequence);
      return;
    }
    const std::int64_t e = m_spec.embedSize();
    auto lookup = [&](const std::string& leaf, std::int64_t rows, std::int64_t width, Shard shard) {
      Op op;
      op.name = name(leaf);
      op.kind = OpKind::kEmbedding;
      op.layer = m_layer;
      op.block = m_block;
      op.shard = shard;
      op.dims = {{"tokens", m_tokens}, {"rows", rows}, {"width", width}};
      op.params = rows * width;
      op.activeParams = op.params;
      op.bytesRead = m_tokens * 4 + m_tokens * width * m_dt;  // int32 ids + gathered rows
      op.bytesWritten = m_tokens * width * m_dt;
      op.savedBytes = m_tokens * 4;                           // the ids, for the sparse gradient
      return m_graph.addOp(std::move(op));
    };
    const std::size_t tokens = lookup("tokens", m_spec.vocabSize, e, Shard::kVocab);
    m_tokenEmbedding = tokens;
    m_cursor = tokens;
    // OPT projects narrow token embeddings up to the hidden size before positions are added.
    if (e != h) matmul("project_in", m_tokens, h, e, e * h, Shard::kReplicated);
    std::vector<std::size_t> parts{*m_cursor};
    if (m_spec.positionEmbedding == PositionEmbedding::kLearned) {
      parts.push_back(lookup("positions", m_spec.maxPositionEmbeddings, h, Shard::kSequence));
    }
    if (m_spec.typeVocabSize > 0) parts.push_back(lookup("token_types", m_spec.typeVocabSize, h, Shard::kSequence));
    if (parts.size() > 1) {
      Op sum;
      sum.name = name("sum");
      sum.kind = OpKind::kAdd;
      sum.shard = Shard::kSequence;
      sum.dims = {{"elements", m_tokens * h}};
      sum.flopsFwd = static_cast<double>(static_cast<std::int64_t>(parts.size() - 1) * m_tokens * h);
      sum.bytesRead = static_cast<std::int64_t>(parts.size()) * m_tokens * h * m_dt;
      sum.bytesWritten = m_tokens * h * m_dt;
      m_cursor.reset();
      const std::size_t id = chain(std::move(sum));
      for (const auto part : parts) m_graph.addEdge(part, id);
    }
    if (m_spec.embeddingNorm) norm("norm", h);
    dropout("dropout", m_tokens * h, Shard::kSequence);
  }

  // Q.K^T over `qkWidth` per head, then the probabilities times V over `vWidth` per head; `qkSaved` and
  // `vSaved` are what the two products keep for backward (Q and K; V).
  void attentionCore(std::int64_t qkWidth, std::int64_t vWidth, std::int64_t qkSaved, std::int64_t vSaved) {
    const std::int64_t a = m_spec.numAttentionHeads;
    // A local layer's query sees the last `window` keys, or the keys of its own chunk; a chunk of c
    // causal keys costs what a causal sequence of c does, a window of w keys s*w - w*(w-1)/2 pairs
    // (the "window" dim tells the cost model which).
    const bool local = m_spec.localAttention(m_layer);
    const std::int64_t span = m_spec.slidingWindow > 0 ? m_spec.slidingWindow : m_spec.attentionChunkSize;
    const std::int64_t keys = local ? std::min(m_s, span) : m_s;
    const bool windowed = local && m_spec.slidingWindow > 0 && keys < m_s;
    const std::int64_t scores = m_b * a * m_s * keys;
    auto bmm = [&](const std::string& leaf, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t saved) {
      Op op;
      op.name = name(leaf);
      op.kind = OpKind::kBatchedMatMul;
      op.shard = Shard::kHeads;
      op.dims = {{"batch", m_b * a}, {"m", m}, {"n", n}, {"k", k}};
      if (windowed) op.dims.emplace_back("window", keys);
      const double f = 2.0 * static_cast<double>(m_b * a) * static_cast<double>(m) * static_cast<double>(n) *
                       static_cast<double>(k);
      op.flopsFwd = f;
      op.flopsBwd = 2.0 * f;
      op.bytesRead = m_b * a * (m * k + k * n) * m_dt;
      op.bytesWritten = m_b * a * m * n * m_dt;
      op.savedBytes = saved;
      op.causal = m_spec.causal();
      chain(std::move(op));
    };
    bmm("attn.scores", m_s, keys, qkWidth, qkSaved);
    // Gemma 2's cap: c * tanh(s / c) over the scores; its backward needs its output (1 - (y/c)^2).
    if (m_spec.attentionLogitSoftcap > 0) {
      elementwise("attn.softcap", OpKind::kActivation, Shard::kHeads, scores, 3.0, scores * m_dt);
    }
    // GPT-OSS's sinks: one learned logit per head joins each row's softmax (a parameter per head).
    elementwise("attn.softmax", OpKind::kSoftmax, Shard::kHeads, scores, 5.0, scores * m_dt,
                m_spec.attentionSinks ? a : 0);
    const bool hasDropout = m_spec.dropout > 0.0;
    if (hasDropout) elementwise("attn.dropout", OpKind::kDropout, Shard::kHeads, scores, 2.0, scores);
    // The probabilities (the dropout output; without dropout, the softmax output already saved) and V.
    bmm("attn.context", m_s, vWidth, keys, (hasDropout ? scores * m_dt : 0) + vSaved);
  }

  // DeepSeek's multi-head latent attention: queries through a low-rank pair (or one projection), keys
  // and values up-projected per head from one latent; the down projections are replicated across
  // tensor-parallel ranks, the up projections split by heads.
  void latentAttention() {
    const MlaSpec& mla = m_spec.mla;
    const std::int64_t h = m_spec.hiddenSize;
    const std::int64_t a = m_spec.numAttentionHeads;
    const std::int64_t qWidth = a * mla.qkHeadDim();
    const std::int64_t vWidth = a * mla.vHeadDim;
    const bool bias = m_spec.qkvBias;
    const std::size_t input = *m_cursor;
    if (mla.qLoraRank > 0) {
      matmul("attn.q_down", m_tokens, mla.qLoraRank, h, h * mla.qLoraRank + (bias ? mla.qLoraRank : 0), Shard::kReplicated);
      norm("attn.q_norm", mla.qLoraRank);
      matmul("attn.q_up", m_tokens, qWidth, mla.qLoraRank, mla.qLoraRank * qWidth, Shard::kHeads);
    } else {
      matmul("attn.q", m_tokens, qWidth, h, h * qWidth + (bias ? qWidth : 0), Shard::kHeads);
    }
    const std::size_t query = *m_cursor;
    m_cursor = input;
    const std::int64_t latent = mla.kvLoraRank + mla.qkRopeHeadDim;
    matmul("attn.kv_down", m_tokens, latent, h, h * latent + (bias ? latent : 0), Shard::kReplicated);
    norm("attn.kv_norm", mla.kvLoraRank);
    matmul("attn.kv_up", m_tokens, a * (mla.qkNopeHeadDim + mla.vHeadDim), mla.kvLoraRank,
           mla.kvLoraRank * a * (mla.qkNopeHeadDim + mla.vHeadDim), Shard::kHeads);
    m_graph.addEdge(query, *m_cursor);
    if (mla.qkRopeHeadDim > 0) {
      // Each head's query rotary part and the one shared rotary key.
      elementwise("attn.rotary", OpKind::kRotary, Shard::kHeads, m_tokens * (a + 1) * mla.qkRopeHeadDim, 3.0, 0);
    }
    attentionCore(mla.qkHeadDim(), mla.vHeadDim, 2 * m_tokens * qWidth * m_dt, m_tokens * vWidth * m_dt);
    matmul("attn.out", m_tokens, h, vWidth, vWidth * h + (m_spec.attentionOutputBias ? h : 0), Shard::kRow);
    dropout("attn.out_dropout", m_tokens * h, Shard::kSequence);
  }

  void attention() {
    m_block = "attention";
    if (m_spec.mla.enabled()) {
      latentAttention();
      return;
    }
    const std::int64_t h = m_spec.hiddenSize;
    const std::int64_t a = m_spec.numAttentionHeads;
    const std::int64_t g = m_spec.kvHeads();
    const std::int64_t d = m_spec.headSize();
    const std::int64_t qWidth = a * d;
    const std::int64_t kvWidth = g * d;

    const std::int64_t qkvParams = h * (qWidth + 2 * kvWidth) + (m_spec.qkvBias ? qWidth + 2 * kvWidth : 0);
    matmul("attn.qkv", m_tokens, qWidth + 2 * kvWidth, h, qkvParams, Shard::kColumn);
    if (m_spec.qkNorm) {
      // Qwen3 and Gemma 3 normalise each head's query and key over head_dim (one weight each); the
      // norm saves its input.
      const bool layerNorm = m_spec.norm == NormKind::kLayerNorm;
      const OpKind kind = layerNorm ? OpKind::kLayerNorm : OpKind::kRmsNorm;
      const std::int64_t params = layerNorm ? 2 * d : d;
      elementwise("attn.qk_norm", kind, Shard::kHeads, m_tokens * (qWidth + kvWidth), layerNorm ? 8.0 : 5.0,
                  m_tokens * (qWidth + kvWidth) * m_dt, 2 * params);
    }
    // Llama 4: a weightless L2 norm of each head's query and key on its RoPE layers (the local, chunked
    // ones when some layers attend the whole sequence without positions); the norm saves its input.
    const bool ropeLayer = (m_spec.slidingWindow <= 0 && m_spec.attentionChunkSize <= 0) || m_spec.localAttention(m_layer);
    if (m_spec.qkL2Norm && ropeLayer) {
      elementwise("attn.qk_l2_norm", OpKind::kRmsNorm, Shard::kHeads, m_tokens * (qWidth + kvWidth), 4.0,
                  m_tokens * (qWidth + kvWidth) * m_dt);
    }
    if (m_spec.positionEmbedding == PositionEmbedding::kRope) {
      const auto rotated = static_cast<std::int64_t>(static_cast<double>(m_tokens * (qWidth + kvWidth)) * m_spec.rotaryFraction);
      // Linear in q and k: backward needs only the cos/sin tables, nothing saved per token.
      elementwise("attn.rotary", OpKind::kRotary, Shard::kHeads, rotated, 3.0, 0);
    }
    // Q and K (K is narrower under grouped-query attention), then V.
    attentionCore(d, d, m_tokens * (qWidth + kvWidth) * m_dt, m_tokens * kvWidth * m_dt);
    matmul("attn.out", m_tokens, h, qWidth, qWidth * h + (m_spec.attentionOutputBias ? h : 0), Shard::kRow);
    dropout("attn.out_dropout", m_tokens * h, Shard::kSequence);
  }

  void denseMlp(std::int64_t ffn) {
    m_block = "mlp";
    const std::int64_t h = m_spec.hiddenSize;
    const bool bias = m_spec.mlpBias;
    if (m_spec.gatedMlp()) {
      matmul("mlp.gate_up", m_tokens, 2 * ffn, h, 2 * h * ffn + (bias ? 2 * ffn : 0), Shard::kColumn);
      // Saves gate and up for act(gate) * up.
      elementwise("mlp." + toString(m_spec.activation), OpKind::kGatedActivation, Shard::kInner, m_tokens * ffn, 6.0,
                  2 * m_tokens * ffn * m_dt, 0, 2);
    } else {
      matmul("mlp.up", m_tokens, ffn, h, h * ffn + (bias ? ffn : 0), Shard::kColumn);
      elementwise("mlp." + toString(m_spec.activation), OpKind::kActivation, Shard::kInner, m_tokens * ffn,
                  m_spec.activation == Activation::kRelu ? 1.0 : 8.0, m_tokens * ffn * m_dt);
    }
    matmul("mlp.down", m_tokens, h, ffn, ffn * h + (bias ? h : 0), Shard::kRow);
  }

  void moeMlp() {
    m_block = "moe";
    const std::int64_t h = m_spec.hiddenSize;
    const std::int64_t experts = m_spec.moe.numExperts;
    const std::int64_t k = m_spec.moe.topK;
    const std::int64_t ffn = m_spec.expertFfnSize();
    const std::int64_t routed = m_tokens * k;  // rows across all experts
    const bool gated = m_spec.gatedMlp();
    const bool bias = m_spec.mlpBias;

    const std::size_t input = *m_cursor;
    matmul("moe.router", m_tokens, experts, h, h * experts + (bias ? experts : 0), Shard::kReplicated);
    Op topk;
    topk.name = name("moe.topk");
    topk.kind = OpKind::kTopK;
    topk.shard = Shard::kReplicated;
    topk.dims = {{"elements", m_tokens * experts}, {"k", k}};
    topk.flopsFwd = static_cast<double>(m_tokens * experts * 3);  // softmax + selection
    topk.flopsBwd = 2.0 * topk.flopsFwd;
    topk.bytesRead = m_tokens * experts * m_dt;
    topk.bytesWritten = m_tokens * k * (m_dt + 4);
    topk.savedBytes = m_tokens * experts * m_dt;  // routing probabilities
    const std::size_t routing = chain(std::move(topk));

    auto grouped = [&](const std::string& leaf, std::int64_t n, std::int64_t kk, std::int64_t paramsPerExpert,
                       std::initializer_list<std::size_t> extra) {
      Op op;
      op.name = name(leaf);
      op.kind = OpKind::kGroupedMatMul;
      op.shard = Shard::kExpert;
      op.dims = {{"groups", experts}, {"m", routed}, {"n", n}, {"k", kk}};
      op.params = experts * paramsPerExpert;
      op.activeParams = k * paramsPerExpert;
      const double f = 2.0 * static_cast<double>(routed) * static_cast<double>(n) * static_cast<double>(kk);
      op.flopsFwd = f;
      op.flopsBwd = 2.0 * f;
      op.bytesRead = (routed * kk + experts * kk * n) * m_dt;
      op.bytesWritten = routed * n * m_dt;
      op.savedBytes = routed * kk * m_dt;
      chain(std::move(op), extra);
    };
    // The token dispatch (Megatron-Core's alltoall dispatcher, token_dispatcher.py): each token's k copies
    // are permuted into expert order before the expert-parallel all-to-all ("permutation 1"), and the
    // received chunks sorted by local expert after it ("permutation 2", sort_chunks_by_idxs, when a GPU
    // holds several experts). Each reads and writes the routed rows; the combine mirrors both.
    m_cursor = input;  // experts read the normalised hidden state, dispatched by the router
    permute("moe.permute", routed * h, 0, {routing});
    permute("moe.sort", routed * h, experts, {});
    if (gated) {
      grouped("moe.experts.gate_up", 2 * ffn, h, 2 * h * ffn + (bias ? 2 * ffn : 0), {});
      elementwise("moe.experts." + toString(m_spec.activation), OpKind::kGatedActivation, Shard::kExpert, routed * ffn,
                  6.0, 2 * routed * ffn * m_dt, 0, 2);
    } else {
      grouped("moe.experts.up", ffn, h, h * ffn + (bias ? ffn : 0), {});
      elementwise("moe.experts." + toString(m_spec.activation), OpKind::kActivation, Shard::kExpert, routed * ffn, 8.0,
                  routed * ffn * m_dt);
    }
    grouped("moe.experts.down", h, ffn, ffn * h + (bias ? h : 0), {});
    permute("moe.unsort", routed * h, experts, {});
    const std::size_t routedOut = *m_cursor;
    std::optional<std::size_t> shared;
    if (m_spec.moe.sharedExpertFfnHiddenSize > 0) {
      // Shared experts: one dense MLP every token runs beside its routed experts, split like the
      // dense MLP by tensor parallelism and replicated across expert-parallel ranks.
      m_cursor = input;
      const std::int64_t sf = m_spec.moe.sharedExpertFfnHiddenSize;
      if (gated) {
        matmul("moe.shared.gate_up", m_tokens, 2 * sf, h, 2 * h * sf + (bias ? 2 * sf : 0), Shard::kColumn);
        elementwise("moe.shared." + toString(m_spec.activation), OpKind::kGatedActivation, Shard::kInner, m_tokens * sf,
                    6.0, 2 * m_tokens * sf * m_dt, 0, 2);
      } else {
        matmul("moe.shared.up", m_tokens, sf, h, h * sf + (bias ? sf : 0), Shard::kColumn);
        elementwise("moe.shared." + toString(m_spec.activation), OpKind::kActivation, Shard::kInner, m_tokens * sf, 8.0,
                    m_tokens * sf * m_dt);
      }
      matmul("moe.shared.down", m_tokens, h, sf, sf * h + (bias ? h : 0), Shard::kRow);
      shared = *m_cursor;
      m_cursor = routedOut;
    }
    // Weighted sum of each token's k expert outputs (and the shared experts' output).
    Op combine;
    combine.name = name("moe.combine");
    combine.kind = OpKind::kElementwise;
    combine.shard = Shard::kSequence;
    combine.dims = {{"elements", routed * h}};
    combine.flopsFwd = 2.0 * static_cast<double>(routed * h);
    combine.flopsBwd = 2.0 * combine.flopsFwd;
    combine.bytesRead = routed * h * m_dt;
    combine.bytesWritten = m_tokens * h * m_dt;
    combine.savedBytes = routed * h * m_dt;  // expert outputs, for the gradient of the routing weights
    const std::size_t combined = chain(std::move(combine), {routing});
    if (shared) m_graph.addEdge(*shared, combined);
  }

  // Rows copied into another order by an index: `elements` in, the same out. With `groups`, a sort of the
  // rows by local expert (nothing to move when a GPU holds one group).
  void permute(const std::string& leaf, std::int64_t elements, std::int64_t groups, std::initializer_list<std::size_t> extra) {
    Op op;
    op.name = name(leaf);
    op.kind = OpKind::kPermute;
    op.shard = Shard::kSequence;
    op.dims = {{"elements", elements}};
    if (groups > 0) op.dims.emplace_back("groups", groups);
    op.bytesRead = elements * m_dt;
    op.bytesWritten = elements * m_dt;
    chain(std::move(op), extra);
  }

  void residual(const std::string& leaf, std::size_t skip) {
    const std::int64_t elements = m_tokens * m_spec.hiddenSize;
    Op op;
    op.name = name(leaf);
    op.kind = OpKind::kAdd;
    op.shard = Shard::kSequence;
    op.dims = {{"elements", elements}};
    op.flopsFwd = static_cast<double>(elements);
    op.bytesRead = 2 * elements * m_dt;
    op.bytesWritten = elements * m_dt;
    chain(std::move(op), {skip});
  }

  // Pre-norm layer order for every family; post-norm models (BERT) have the same ops and costs, only
  // the norms sit after the residual sums.
  void transformerLayer(std::int64_t layer) {
    m_layer = layer;
    layerBody(layer);
  }

  // A multi-token prediction module's layer: built like layer `like`, named under the head.
  void transformerLayerNamed(const std::string& prefix, std::int64_t like) {
    m_prefix = prefix;
    layerBody(like);
    m_prefix.clear();
  }

  void layerBody(std::int64_t layer) {
    const std::size_t layerInput = *m_cursor;
    m_block = "norm";
    norm("attn_norm", m_spec.hiddenSize);
    attention();
    m_block = "attention";
    if (m_spec.sandwichNorm) norm("attn_post_norm", m_spec.hiddenSize);
    residual("attn_residual", layerInput);
    const std::size_t mlpInput = *m_cursor;
    m_block = "norm";
    norm("mlp_norm", m_spec.hiddenSize);
    if (m_spec.moe.isMoeLayer(layer)) {
      moeMlp();
    } else {
      denseMlp(m_spec.ffnHiddenSize);
    }
    dropout("mlp.dropout", m_tokens * m_spec.hiddenSize, Shard::kSequence);
    if (m_spec.sandwichNorm) {
      m_block = "norm";
      norm("mlp_post_norm", m_spec.hiddenSize);
    }
    residual("mlp_residual", mlpInput);
  }

  void crossEntropy(std::int64_t rows, std::int64_t classes, Shard shard) {
    m_block = "loss";
    Op op;
    op.name = name("cross_entropy");
    op.kind = OpKind::kCrossEntropy;
    op.shard = shard;
    op.dims = {{"rows", rows}, {"classes", classes}};
    op.flopsFwd = 5.0 * static_cast<double>(rows * classes);
    op.flopsBwd = 2.0 * static_cast<double>(rows * classes);
    // Unfused, as Megatron's vocab-parallel cross-entropy runs: upcast the logits to fp32, then max,
    // subtract, exp, sum and divide passes: about 36 bytes of traffic per logit.
    op.bytesRead = rows * classes * (m_dt + 16);
    op.bytesWritten = rows * classes * (4 + 12) + rows * 4;
    op.savedBytes = rows * classes * 4;  // logits upcast to fp32 for a stable softmax
    chain(std::move(op));
  }

  void heads() {
    m_layer = m_spec.numLayers;
    const std::int64_t h = m_spec.hiddenSize;
    const std::int64_t e = m_spec.embedSize();
    const std::size_t lastHidden = *m_cursor;
    m_block = "norm";
    if (m_spec.finalNorm) norm("final_norm", h);
    m_block = "head";
    if (m_spec.input == InputKind::kImagePatches) {
      if (m_spec.image.numClasses > 0) {
        const std::int64_t classes = m_spec.image.numClasses;
        matmul("classifier", m_b, classes, h, h * classes + classes, Shard::kReplicated);
        crossEntropy(m_b, classes, Shard::kReplicated);
      }
      return;
    }
    if (m_spec.pooler) {
      const std::size_t before = *m_cursor;
      matmul("pooler", m_b, h, h, h * h + h, Shard::kReplicated);
      m_cursor = before;  // the pooler feeds the sentence-level head, not the token head
    }
    if (!m_spec.lmHead) return;
    if (e != h) matmul("project_out", m_tokens, e, h, h * e, Shard::kReplicated);
    const bool encoder = m_spec.architecture == Architecture::kEncoder;
    if (encoder) {  // BERT's MLM head: dense + activation + norm before the decoder
      matmul("mlm.transform", m_tokens, h, h, h * h + h, Shard::kReplicated);
      elementwise("mlm.gelu", OpKind::kActivation, Shard::kSequence, m_tokens * h, 8.0, m_tokens * h * m_dt);
      norm("mlm.norm", h);
      m_block = "head";
    }
    const std::int64_t v = m_spec.vocabSize;
    const std::int64_t headParams = (m_spec.tieWordEmbeddings ? 0 : v * e) + (encoder ? v : 0);
    const std::size_t head = matmul("lm_head", m_tokens, v, e, headParams, Shard::kVocab);
    if (m_spec.tieWordEmbeddings && m_tokenEmbedding) m_graph.addEdge(*m_tokenEmbedding, head);  // shared weight
    if (m_spec.finalLogitSoftcap > 0) {
      // Gemma 2: c * tanh(logits / c) over the whole logits tensor; the backward reads the tanh.
      elementwise("logit_softcap", OpKind::kActivation, Shard::kVocab, m_tokens * v, 3.0, m_tokens * v * m_dt);
    }
    crossEntropy(m_tokens, v, Shard::kVocab);
    multiTokenPrediction(lastHidden, head);
  }

  // DeepSeek-V3's MTP modules, on the last pipeline stage with the head: the previous depth's hidden state
  // and the next token's (shared) embedding, each normalised, projected from 2h to h, one transformer
  // layer, a norm, the shared output head and its own loss.
  void multiTokenPrediction(std::size_t lastHidden, std::size_t sharedHead) {
    const std::int64_t h = m_spec.hiddenSize;
    const std::int64_t v = m_spec.vocabSize;
    std::size_t previous = lastHidden;
    for (std::int64_t d = 0; d < m_spec.mtpLayers; ++d) {
      m_layer = m_spec.numLayers;  // named "head.": the stage of the output head holds them
      const std::string prefix = "mtp" + std::to_string(d) + ".";
      m_cursor = previous;
      m_block = "norm";
      norm(prefix + "hnorm", h);
      const std::size_t hidden = *m_cursor;
      if (m_tokenEmbedding) m_cursor = *m_tokenEmbedding;
      norm(prefix + "enorm", h);
      m_graph.addEdge(hidden, *m_cursor);
      m_block = "mtp";
      matmul(prefix + "eh_proj", m_tokens, h, 2 * h, 2 * h * h, Shard::kReplicated);
      transformerLayerNamed(prefix, m_spec.numLayers - 1);
      previous = *m_cursor;
      m_block = "norm";
      norm(prefix + "final_norm", h);
      m_block = "head";
      const std::size_t logits = matmul(prefix + "lm_head", m_tokens, v, h, 0, Shard::kVocab);
      m_graph.addEdge(sharedHead, logits);  // the output head's weight
      crossEntropy(m_tokens, v, Shard::kVocab);
    }
  }

  const ModelSpec& m_spec;
  std::int64_t m_s;
  std::int64_t m_b;
  std::int64_t m_tokens;
  std::int64_t m_dt;
  OpGraph m_graph;
  std::optional<std::size_t> m_cursor;
  std::optional<std::size_t> m_tokenEmbedding;
  std::int64_t m_layer = -1;
  std::string m_prefix;  // within the head: the multi-token prediction module an op belongs to
  std::string m_block;
};

}  // namespace

Result<OpGraph> buildOpGraph(const ModelSpec& spec, const GraphOptions& options) {
  auto seqLen = checkGraphOptions(spec, options);
  if (!seqLen) return fail(seqLen.error());
  return Builder(spec, *seqLen, options.batch, options.dtypeBytes).build();
}

Result<std::int64_t> checkGraphOptions(const ModelSpec& spec, const GraphOptions& options) {
  if (auto valid = validateModelSpec(spec); !valid) return fail(valid.error());
  if (options.batch <= 0) return fail(Error::badInput("batch must be positive, got " + std::to_string(options.batch)));
  if (options.dtypeBytes <= 0) {
    return fail(Error::badInput("dtype bytes must be positive, got " + std::to_string(options.dtypeBytes)));
  }
  std::int64_t seqLen = options.seqLen > 0 ? options.seqLen : spec.defaultSeqLen();
  if (options.seqLen < 0) return fail(Error::badInput("--seq-len must be positive, got " + std::to_string(options.seqLen)));
  if (spec.input == InputKind::kImagePatches) {
    if (options.seqLen > 0 && options.seqLen != spec.defaultSeqLen()) {
      return fail(Error::badInput("sequence length of " + spec.name + " is fixed by image_size/patch_size at " +
                                  std::to_string(spec.defaultSeqLen()) + " (patches + class token), got " +
                                  std::to_string(options.seqLen)));
    }
    seqLen = spec.defaultSeqLen();
  } else if (spec.positionEmbedding == PositionEmbedding::kLearned && seqLen > spec.maxPositionEmbeddings) {
    return fail(Error::badInput("sequence length " + std::to_string(seqLen) + " exceeds the learned position table of " +
                                spec.name + " (max_position_embeddings " +
                                std::to_string(spec.maxPositionEmbeddings) + ")"));
  }
  // Byte counts are 64-bit integers; the largest tensor (attention scores, logits or the MLP inner
  // activation) must stay far from overflow.
  const double tokens = static_cast<double>(seqLen) * static_cast<double>(options.batch);
  const double widest = std::max({static_cast<double>(spec.numAttentionHeads) * static_cast<double>(seqLen),
                                  static_cast<double>(spec.vocabSize),
                                  2.0 * static_cast<double>(std::max(spec.ffnHiddenSize, spec.expertFfnSize())) *
                                      static_cast<double>(std::max<std::int64_t>(1, spec.moe.topK)),
                                  static_cast<double>(spec.hiddenSize) * 4,
                                  2.0 * static_cast<double>(spec.moe.sharedExpertFfnHiddenSize),
                                  static_cast<double>(spec.numAttentionHeads) *
                                      static_cast<double>(spec.mla.qkHeadDim() + spec.mla.vHeadDim)});
  if (tokens * widest * static_cast<double>(options.dtypeBytes) * 4 > 9.0e18) {
    return fail(Error::badInput("batch " + std::to_string(options.batch) + " x sequence " + std::to_string(seqLen) +
                                " is too large to describe (tensors beyond 2^61 bytes)"));
  }
  return seqLen;
}

}  // namespace colo
