#pragma once
/// \file
/// ModelSpec: a transformer architecture described by the choices that decide its size and cost.
/// It covers decoder transformers (GPT-2/3: learned positions, LayerNorm, GeLU; LLaMA: RoPE, RMSNorm,
/// SwiGLU, grouped-query attention; Mixtral-style mixture of experts) and encoder transformers (BERT,
/// ViT). Files: `colo.model/1` (see docs/formats.md) or a Hugging Face config.json (hf_config.h).

#include <cstdint>
#include <optional>
#include <string>

#include "colo/core/error.h"
#include "colo/core/json.h"

namespace colo {

enum class Architecture { kDecoder, kEncoder };
enum class PositionEmbedding { kLearned, kRope, kAlibi, kNone };
enum class NormKind { kLayerNorm, kRmsNorm };
/// kSwiGlu and kGeGlu are gated: the MLP has three matrices (gate, up, down).
enum class Activation { kGelu, kRelu, kSilu, kSwiGlu, kGeGlu };
/// What the input tokens are: text tokens through a vocabulary, or image patches (ViT).
enum class InputKind { kTokens, kImagePatches };

/// Mixture-of-experts MLP (Mixtral/Switch style): `num_experts` expert MLPs per MoE layer, each token
/// routed to `top_k` of them by a linear router.
struct MoeSpec {
  std::int64_t numExperts = 0;      ///< experts per MoE layer (0: dense model)
  std::int64_t topK = 0;            ///< experts each token is routed to
  /// Layer i (from firstDenseLayers on) is MoE when i % layerFrequency == the phase: the last layer of
  /// each period by default (Hugging Face's decoder_sparse_step, Llama 4's interleave_moe_layer_step),
  /// the first with layerPhase 0 (Megatron-LM's integer --moe-layer-freq, DeepSeek's moe_layer_freq).
  std::int64_t layerFrequency = 1;
  std::int64_t layerPhase = -1;  ///< 0..layerFrequency-1; -1: layerFrequency - 1
  std::int64_t expertFfnHiddenSize = 0;  ///< 0: same as the model's ffn_hidden_size
  std::int64_t firstDenseLayers = 0;  ///< the first layers stay dense (DeepSeek's first_k_dense_replace)
  /// Inner size of the shared experts' MLP that every token also runs beside its routed experts
  /// (DeepSeek: n_shared_experts x moe_intermediate_size; Qwen2-MoE: shared_expert_intermediate_size);
  /// 0: no shared experts.
  std::int64_t sharedExpertFfnHiddenSize = 0;
  /// Group-limited routing (DeepSeek-V2's device-limited, V3's node-limited): the experts form
  /// `routingGroups` equal groups and each token picks its experts from its best `routingGroupTopK`
  /// groups (HF n_group / topk_group; Megatron's --moe-router-num-groups / --moe-router-group-topk).
  /// With the groups laid on the expert-parallel group's nodes, a token reaches at most that many
  /// nodes, which a deduplicating dispatcher (DeepEP) turns into less network traffic. 0: none.
  std::int64_t routingGroups = 0;
  std::int64_t routingGroupTopK = 0;
  [[nodiscard]] bool enabled() const { return numExperts > 0; }
  [[nodiscard]] bool isMoeLayer(std::int64_t layer) const {
    return enabled() && layer >= firstDenseLayers && layer % layerFrequency == (layerPhase < 0 ? layerFrequency - 1 : layerPhase);
  }
  friend bool operator==(const MoeSpec&, const MoeSpec&) = default;
};

/// Multi-head latent attention (DeepSeek-V2/V3): queries through an optional low-rank down/up pair,
/// keys and values up-projected per head from one shared latent of `kvLoraRank` (plus a shared rotary
/// key of `qkRopeHeadDim`); every head then attends with queries and keys of qkNopeHeadDim +
/// qkRopeHeadDim and values of vHeadDim.
struct MlaSpec {
  std::int64_t qLoraRank = 0;      ///< rank of the query down-projection (0: one plain query projection)
  std::int64_t kvLoraRank = 0;     ///< rank of the shared key/value latent (0: no MLA)
  std::int64_t qkNopeHeadDim = 0;  ///< per-head query/key width without rotary embedding
  std::int64_t qkRopeHeadDim = 0;  ///< per-head query/key width with rotary embedding (the key's is shared)
  std::int64_t vHeadDim = 0;       ///< per-head value width
  [[nodiscard]] bool enabled() const { return kvLoraRank > 0; }
  [[nodiscard]] std::int64_t qkHeadDim() const { return qkNopeHeadDim + qkRopeHeadDim; }
  friend bool operator==(const MlaSpec&, const MlaSpec&) = default;
};

/// ViT input: an image cut into patches, plus a class token.
struct ImageSpec {
  std::int64_t imageSize = 224;
  std::int64_t patchSize = 16;
  std::int64_t numChannels = 3;
  std::int64_t numClasses = 1000;  ///< classifier head size; 0 for no head
  [[nodiscard]] std::int64_t numPatches() const { return (imageSize / patchSize) * (imageSize / patchSize); }
  friend bool operator==(const ImageSpec&, const ImageSpec&) = default;
};

/// A transformer model. All sizes are counts (not bytes). Defaults describe a GPT-style decoder.
struct ModelSpec {
  std::string name;                ///< e.g. "llama2-7b"
  std::string family = "gpt";      ///< preset: gpt, llama, mixtral, bert, vit, or an HF model_type
  std::string source;              ///< where the figures come from (free text, optional)
  Architecture architecture = Architecture::kDecoder;
  InputKind input = InputKind::kTokens;

  std::int64_t numLayers = 0;
  std::int64_t hiddenSize = 0;
  std::int64_t numAttentionHeads = 0;
  std::int64_t numKvHeads = 0;        ///< grouped-query attention; 0 means numAttentionHeads
  std::int64_t headDim = 0;           ///< 0 means hiddenSize / numAttentionHeads
  std::int64_t ffnHiddenSize = 0;     ///< MLP inner size (per matrix for gated MLPs)
  std::int64_t vocabSize = 0;         ///< 0 for image models
  std::int64_t maxPositionEmbeddings = 0;  ///< table size of learned positions; context limit otherwise
  std::int64_t embeddingSize = 0;     ///< OPT's word_embed_proj_dim; 0 means hiddenSize
  std::int64_t typeVocabSize = 0;     ///< BERT token types (segment embeddings); 0 for none
  std::int64_t slidingWindow = 0;     ///< attention window (Mistral, Gemma, GPT-OSS); 0 means full attention
  /// Chunked local attention (Llama 4): a query sees only the keys of its own chunk; 0: none.
  std::int64_t attentionChunkSize = 0;
  /// With a window or chunks: layer i attends the whole sequence when i % N == N - 1 (Gemma 2: 2,
  /// Gemma 3: 6, Llama 4: 4, GPT-OSS: 2); 0: every layer is local (Mistral).
  std::int64_t globalAttentionEvery = 0;
  bool qkNorm = false;                ///< per-head RMSNorm of queries and keys (Qwen3, Gemma 3)
  bool sandwichNorm = false;          ///< a norm after attention and after the MLP too (Gemma 2/3)
  bool attentionSinks = false;        ///< a learned sink logit per head in the softmax (GPT-OSS)
  /// Llama 4: each head's query and key L2-normalised, with no weight, on the layers with rotary
  /// positions (not the NoPE layers that attend the whole sequence).
  bool qkL2Norm = false;
  /// Gemma 2: logits capped as c * tanh(logits / c) before the loss (final_logit_softcapping); an
  /// elementwise pass over the whole logits tensor whose output the backward keeps. 0: none.
  double finalLogitSoftcap = 0;
  /// Gemma 2: attention scores capped as c * tanh(scores / c) before the softmax
  /// (attn_logit_softcapping, 50). FlashAttention applies it inside the kernel (flash-attn 2.6's
  /// softcap); unfused attention runs it as an elementwise pass over the scores whose output the
  /// backward keeps. 0: none.
  double attentionLogitSoftcap = 0;
  /// A multimodal model's vision encoder and projector, counted apart: colo plans the text model.
  std::int64_t visionTowerParams = 0;
  /// Multi-token prediction modules trained beside the main model (DeepSeek-V3's num_nextn_predict_layers,
  /// Megatron's --mtp-num-layers): each joins the last hidden state with the next token's embedding
  /// through a 2h x h projection, runs one more transformer layer and the shared output head and loss.
  std::int64_t mtpLayers = 0;

  PositionEmbedding positionEmbedding = PositionEmbedding::kLearned;
  double rotaryFraction = 1.0;        ///< GPT-NeoX rotary_pct: share of head_dim that is rotated
  double ropeTheta = 10000.0;         ///< rotary base (HF rope_theta; Llama 3: 500000; Megatron --rotary-base)
  NormKind norm = NormKind::kLayerNorm;
  Activation activation = Activation::kGelu;
  bool qkvBias = true;                ///< bias on the query/key/value projections
  bool attentionOutputBias = true;    ///< bias on the attention output projection
  bool mlpBias = true;                ///< bias on the MLP matrices
  bool embeddingNorm = false;         ///< a norm right after the embedding (BLOOM, BERT)
  bool finalNorm = true;              ///< a norm after the last layer (pre-LN models)
  bool tieWordEmbeddings = true;      ///< LM head shares the input embedding matrix
  bool lmHead = true;                 ///< output projection to the vocabulary (BERT: the MLM head)
  bool pooler = false;                ///< BERT pooler (dense h x h + tanh)
  double dropout = 0.0;               ///< hidden/attention dropout probability used in training

  MoeSpec moe;
  MlaSpec mla;                        ///< multi-head latent attention instead of q/k/v projections
  ImageSpec image;                    ///< used when input == kImagePatches

  std::int64_t seqLen = 0;            ///< default training sequence length; 0: maxPositionEmbeddings

  // Derived values (valid after validate()).
  [[nodiscard]] std::int64_t kvHeads() const { return numKvHeads > 0 ? numKvHeads : numAttentionHeads; }
  [[nodiscard]] std::int64_t headSize() const { return headDim > 0 ? headDim : hiddenSize / numAttentionHeads; }
  [[nodiscard]] std::int64_t embedSize() const { return embeddingSize > 0 ? embeddingSize : hiddenSize; }
  [[nodiscard]] std::int64_t expertFfnSize() const {
    return moe.expertFfnHiddenSize > 0 ? moe.expertFfnHiddenSize : ffnHiddenSize;
  }
  [[nodiscard]] bool gatedMlp() const { return activation == Activation::kSwiGlu || activation == Activation::kGeGlu; }
  [[nodiscard]] bool causal() const { return architecture == Architecture::kDecoder; }
  /// Width of all heads' values (what attention saves for V and the output projection reads).
  [[nodiscard]] std::int64_t valueWidth() const {
    return mla.enabled() ? numAttentionHeads * mla.vHeadDim : kvHeads() * headSize();
  }
  /// Whether a layer's attention is local (a sliding window or chunks) rather than over the sequence.
  [[nodiscard]] bool localAttention(std::int64_t layer) const {
    if (slidingWindow <= 0 && attentionChunkSize <= 0) return false;
    return globalAttentionEvery <= 0 || layer % globalAttentionEvery != globalAttentionEvery - 1;
  }
  /// The training sequence length: seqLen, else the context size; for ViT, patches + class token.
  [[nodiscard]] std::int64_t defaultSeqLen() const;

  /// Field-by-field equality (round-trip tests, plan re-evaluation).
  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

/// Parameter counts of a model, as published counts are quoted.
struct ParamCount {
  std::int64_t total = 0;   ///< every parameter
  std::int64_t active = 0;  ///< parameters touched by one token (MoE: top_k experts, not all)
  std::int64_t embedding = 0;  ///< input embeddings (tokens, positions, types, patches)
  std::int64_t vision = 0;     ///< a multimodal model's vision tower, not in total (ModelSpec::visionTowerParams)
  std::int64_t mtp = 0;        ///< of total, the multi-token prediction modules (published counts leave them out)
};

/// Checks a spec for inconsistencies (heads not dividing hidden, kv heads not dividing heads, top_k
/// above num_experts, ...). `file` labels errors; paths use the colo.model/1 field names.
[[nodiscard]] Result<void> validateModelSpec(const ModelSpec& spec, const std::string& file = {});

/// Closed-form parameter count. The op graph's sum of parameters must equal it (tested).
[[nodiscard]] ParamCount countParameters(const ModelSpec& spec);

/// The defaults a family implies (gpt: learned positions, LayerNorm, GeLU, biases, tied; llama and
/// mistral: RoPE, RMSNorm, SwiGLU, no biases, untied; mixtral: llama plus 8 experts top-2; bert:
/// post-LN encoder with token types, MLM head and pooler; vit: image encoder). Errors: unknown family.
[[nodiscard]] Result<ModelSpec> familyPreset(const std::string& family);

/// Reads a `colo.model/1` document: the family preset, then every field given overrides it; unknown
/// fields are rejected. Errors name file, pointer, value.
[[nodiscard]] Result<ModelSpec> modelSpecFromJson(const Json& document, const std::string& file);

/// Writes a spec as a complete `colo.model/1` document (every field explicit), which reads back equal.
[[nodiscard]] Json modelSpecToJson(const ModelSpec& spec);

/// Names used in files, e.g. "rope", "rmsnorm", "swiglu".
[[nodiscard]] std::string toString(Architecture value);
[[nodiscard]] std::string toString(PositionEmbedding value);
[[nodiscard]] std::string toString(NormKind value);
[[nodiscard]] std::string toString(Activation value);
[[nodiscard]] std::string toString(InputKind value);

}  // namespace colo
