#include "colo/core/model_spec.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "colo/core/limits.h"

namespace colo {
namespace {

std::int64_t normParams(NormKind norm, std::int64_t width) { return norm == NormKind::kLayerNorm ? 2 * width : width; }

std::int64_t mlpParams(const ModelSpec& s, std::int64_t ffn) {
  const std::int64_t h = s.hiddenSize;
  if (s.gatedMlp()) return 3 * h * ffn + (s.mlpBias ? 2 * ffn + h : 0);
  return 2 * h * ffn + (s.mlpBias ? ffn + h : 0);
}

std::int64_t attentionParams(const ModelSpec& s) {
  const std::int64_t h = s.hiddenSize;
  if (s.mla.enabled()) {
    const MlaSpec& m = s.mla;
    const std::int64_t a = s.numAttentionHeads;
    const std::int64_t qWidth = a * m.qkHeadDim();
    std::int64_t p = 0;
    if (m.qLoraRank > 0) {
      p += h * m.qLoraRank + normParams(s.norm, m.qLoraRank) + m.qLoraRank * qWidth + (s.qkvBias ? m.qLoraRank : 0);
    } else {
      p += h * qWidth + (s.qkvBias ? qWidth : 0);
    }
    p += h * (m.kvLoraRank + m.qkRopeHeadDim) + (s.qkvBias ? m.kvLoraRank + m.qkRopeHeadDim : 0);
    p += normParams(s.norm, m.kvLoraRank) + m.kvLoraRank * a * (m.qkNopeHeadDim + m.vHeadDim);
    p += a * m.vHeadDim * h + (s.attentionOutputBias ? h : 0);
    return p;
  }
  const std::int64_t qWidth = s.numAttentionHeads * s.headSize();
  const std::int64_t kvWidth = s.kvHeads() * s.headSize();
  std::int64_t p = h * (qWidth + 2 * kvWidth) + qWidth * h;
  if (s.qkvBias) p += qWidth + 2 * kvWidth;
  if (s.attentionOutputBias) p += h;
  if (s.qkNorm) p += 2 * normParams(s.norm, s.headSize());  // one weight over head_dim for q, one for k
  if (s.attentionSinks) p += s.numAttentionHeads;
  return p;
}

template <typename Bad>
Result<void> validateMla(const ModelSpec& s, const Bad& bad) {
  const MlaSpec& m = s.mla;
  for (const auto& [value, field] : {std::pair{m.qLoraRank, "q_lora_rank"}, std::pair{m.kvLoraRank, "kv_lora_rank"},
                                     std::pair{m.qkNopeHeadDim, "qk_nope_head_dim"},
                                     std::pair{m.qkRopeHeadDim, "qk_rope_head_dim"}, std::pair{m.vHeadDim, "v_head_dim"}}) {
    if (value < 0) return bad(std::string("/mla/") + field, "must not be negative, got " + std::to_string(value));
  }
  if (!m.enabled()) {
    if (m.qLoraRank > 0 || m.qkNopeHeadDim > 0 || m.qkRopeHeadDim > 0 || m.vHeadDim > 0) {
      return bad("/mla/kv_lora_rank", "multi-head latent attention needs a positive kv_lora_rank, got 0");
    }
    return {};
  }
  if (m.qkHeadDim() <= 0) return bad("/mla/qk_nope_head_dim", "qk_nope_head_dim + qk_rope_head_dim must be positive");
  if (m.vHeadDim <= 0) return bad("/mla/v_head_dim", "must be a positive integer, got " + std::to_string(m.vHeadDim));
  // As for plain attention: all heads' widths stay within 4 x the widest width (and products in 64 bits).
  if (s.numAttentionHeads * (m.qkNopeHeadDim + std::max(m.qkRopeHeadDim, m.vHeadDim)) > 4 * limits::kMaxWidth) {
    return bad("/mla/qk_nope_head_dim", "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim or v_head_dim) is more than " +
                                            std::to_string(4 * limits::kMaxWidth));
  }
  if (s.numKvHeads > 0 && s.numKvHeads != s.numAttentionHeads) {
    return bad("/num_kv_heads", "multi-head latent attention gives every head its own keys and values: num_kv_heads must be "
                                "0 or num_attention_heads " + std::to_string(s.numAttentionHeads) + ", got " +
                                std::to_string(s.numKvHeads));
  }
  if (s.positionEmbedding != PositionEmbedding::kRope && m.qkRopeHeadDim > 0) {
    return bad("/mla/qk_rope_head_dim", "needs rotary position embeddings (position_embedding \"rope\")");
  }
  return {};
}

// Upper bounds first: every product in the checks below (and in the cost model) stays inside 64 bits.
template <typename Bad>
Result<void> validateBounds(const ModelSpec& s, const Bad& bad) {
  for (const auto& [value, field, maximum] :
       {std::tuple{s.numLayers, "num_layers", limits::kMaxLayers}, std::tuple{s.hiddenSize, "hidden_size", limits::kMaxWidth},
        std::tuple{s.numAttentionHeads, "num_attention_heads", limits::kMaxHeads},
        std::tuple{s.numKvHeads, "num_kv_heads", limits::kMaxHeads}, std::tuple{s.headDim, "head_dim", limits::kMaxWidth},
        std::tuple{s.ffnHiddenSize, "ffn_hidden_size", limits::kMaxWidth},
        std::tuple{s.vocabSize, "vocab_size", limits::kMaxVocab},
        std::tuple{s.maxPositionEmbeddings, "max_position_embeddings", limits::kMaxSeqLen},
        std::tuple{s.embeddingSize, "embedding_size", limits::kMaxWidth},
        std::tuple{s.typeVocabSize, "type_vocab_size", limits::kMaxVocab},
        std::tuple{s.slidingWindow, "sliding_window", limits::kMaxSeqLen}, std::tuple{s.seqLen, "seq_len", limits::kMaxSeqLen},
        std::tuple{s.attentionChunkSize, "attention_chunk_size", limits::kMaxSeqLen},
        std::tuple{s.globalAttentionEvery, "global_attention_every", limits::kMaxLayers},
        std::tuple{s.visionTowerParams, "vision_tower_params", limits::kMaxParameters},
        std::tuple{s.mtpLayers, "mtp_layers", std::int64_t{8}},
        std::tuple{s.moe.numExperts, "moe/num_experts", limits::kMaxExperts},
        std::tuple{s.moe.topK, "moe/top_k", limits::kMaxExperts},
        std::tuple{s.moe.layerFrequency, "moe/layer_frequency", limits::kMaxLayers},
        std::tuple{s.moe.expertFfnHiddenSize, "moe/expert_ffn_hidden_size", limits::kMaxWidth},
        std::tuple{s.moe.firstDenseLayers, "moe/first_dense_layers", limits::kMaxLayers},
        std::tuple{s.moe.sharedExpertFfnHiddenSize, "moe/shared_expert_ffn_hidden_size", limits::kMaxWidth},
        std::tuple{s.moe.routingGroups, "moe/routing_groups", limits::kMaxExperts},
        std::tuple{s.moe.routingGroupTopK, "moe/routing_group_topk", limits::kMaxExperts},
        std::tuple{s.mla.qLoraRank, "mla/q_lora_rank", limits::kMaxWidth},
        std::tuple{s.mla.kvLoraRank, "mla/kv_lora_rank", limits::kMaxWidth},
        std::tuple{s.mla.qkNopeHeadDim, "mla/qk_nope_head_dim", limits::kMaxWidth},
        std::tuple{s.mla.qkRopeHeadDim, "mla/qk_rope_head_dim", limits::kMaxWidth},
        std::tuple{s.mla.vHeadDim, "mla/v_head_dim", limits::kMaxWidth},
        std::tuple{s.image.imageSize, "image/image_size", limits::kMaxImageSize},
        std::tuple{s.image.patchSize, "image/patch_size", limits::kMaxImageSize},
        std::tuple{s.image.numChannels, "image/num_channels", limits::kMaxChannels},
        std::tuple{s.image.numClasses, "image/num_classes", limits::kMaxVocab}}) {
    if (value > maximum) {
      return bad("/" + std::string(field), "must be at most " + std::to_string(maximum) + ", got " + std::to_string(value));
    }
  }
  return {};
}

template <typename Bad>
Result<void> requirePositive(std::int64_t value, const std::string& field, const Bad& bad) {
  if (value <= 0) return bad("/" + field, "must be a positive integer, got " + std::to_string(value));
  return {};
}

// The transformer's widths and heads.
template <typename Bad>
Result<void> validateShape(const ModelSpec& s, const Bad& bad) {
  auto positive = [&](std::int64_t value, const std::string& field) { return requirePositive(value, field, bad); };
  if (auto r = positive(s.numLayers, "num_layers"); !r) return r;
  if (auto r = positive(s.hiddenSize, "hidden_size"); !r) return r;
  if (auto r = positive(s.numAttentionHeads, "num_attention_heads"); !r) return r;
  if (auto r = positive(s.ffnHiddenSize, "ffn_hidden_size"); !r) return r;
  if (s.headDim == 0 && s.hiddenSize % s.numAttentionHeads != 0) {
    return bad("/num_attention_heads", "hidden_size " + std::to_string(s.hiddenSize) +
                                           " is not divisible by num_attention_heads " +
                                           std::to_string(s.numAttentionHeads) + " (set head_dim explicitly if intended)");
  }
  if (s.headDim < 0) return bad("/head_dim", "must not be negative, got " + std::to_string(s.headDim));
  if (s.numAttentionHeads * s.headSize() > 4 * limits::kMaxWidth) {
    return bad("/head_dim", "num_attention_heads x head_dim = " + std::to_string(s.numAttentionHeads) + " x " +
                                std::to_string(s.headSize()) + " is more than " + std::to_string(4 * limits::kMaxWidth));
  }
  if (s.numKvHeads < 0 || (s.numKvHeads > 0 && s.numAttentionHeads % s.numKvHeads != 0)) {
    return bad("/num_kv_heads", "num_attention_heads " + std::to_string(s.numAttentionHeads) +
                                    " is not a multiple of num_kv_heads " + std::to_string(s.numKvHeads));
  }
  return {};
}

// What the model reads: tokens (a vocabulary and a sequence length) or images (patches of a square).
template <typename Bad>
Result<void> validateInput(const ModelSpec& s, const Bad& bad) {
  auto positive = [&](std::int64_t value, const std::string& field) { return requirePositive(value, field, bad); };
  if (s.input == InputKind::kTokens) {
    if (auto r = positive(s.vocabSize, "vocab_size"); !r) return r;
    if (s.positionEmbedding == PositionEmbedding::kLearned) {
      if (auto r = positive(s.maxPositionEmbeddings, "max_position_embeddings"); !r) return r;
    }
    if (s.seqLen < 0) return bad("/seq_len", "must not be negative, got " + std::to_string(s.seqLen));
    if (s.defaultSeqLen() <= 0) {
      return bad("/seq_len", "no sequence length: set seq_len or max_position_embeddings");
    }
  } else {
    if (s.image.patchSize <= 0 || s.image.imageSize <= 0 || s.image.imageSize % s.image.patchSize != 0) {
      return bad("/image/patch_size", "image_size " + std::to_string(s.image.imageSize) +
                                          " must be a positive multiple of patch_size " +
                                          std::to_string(s.image.patchSize));
    }
    if (s.image.numChannels <= 0) {
      return bad("/image/num_channels", "must be a positive integer, got " + std::to_string(s.image.numChannels));
    }
    if (s.image.numClasses < 0) {
      return bad("/image/num_classes", "must not be negative, got " + std::to_string(s.image.numClasses));
    }
    if (s.architecture != Architecture::kEncoder) return bad("/architecture", "image models must be encoders");
  }
  return {};
}

// Embedding widths, local attention, multi-token prediction, the vision tower, rotary and dropout.
template <typename Bad>
Result<void> validateVariants(const ModelSpec& s, const Bad& bad) {
  if (s.embeddingSize < 0) return bad("/embedding_size", "must not be negative, got " + std::to_string(s.embeddingSize));
  if (s.typeVocabSize < 0) return bad("/type_vocab_size", "must not be negative, got " + std::to_string(s.typeVocabSize));
  if (s.slidingWindow < 0) return bad("/sliding_window", "must not be negative, got " + std::to_string(s.slidingWindow));
  if (s.attentionChunkSize < 0) {
    return bad("/attention_chunk_size", "must not be negative, got " + std::to_string(s.attentionChunkSize));
  }
  if (s.slidingWindow > 0 && s.attentionChunkSize > 0) {
    return bad("/attention_chunk_size", "a layer attends either a sliding window or its chunk: set sliding_window or "
                                        "attention_chunk_size, not both");
  }
  if (s.globalAttentionEvery < 0) {
    return bad("/global_attention_every", "must not be negative, got " + std::to_string(s.globalAttentionEvery));
  }
  if (s.globalAttentionEvery > 0 && s.slidingWindow == 0 && s.attentionChunkSize == 0) {
    return bad("/global_attention_every", "needs local attention (sliding_window or attention_chunk_size), got " +
                                              std::to_string(s.globalAttentionEvery) + " without either");
  }
  if (s.mtpLayers < 0) return bad("/mtp_layers", "must not be negative, got " + std::to_string(s.mtpLayers));
  if (s.mtpLayers > 0 && (s.architecture != Architecture::kDecoder || s.input != InputKind::kTokens || !s.lmHead)) {
    return bad("/mtp_layers", "multi-token prediction needs a decoder language model with an output head");
  }
  if (s.visionTowerParams < 0) {
    return bad("/vision_tower_params", "must not be negative, got " + std::to_string(s.visionTowerParams));
  }
  if (!(s.rotaryFraction > 0.0 && s.rotaryFraction <= 1.0)) {
    return bad("/rotary_fraction", "must be in (0, 1], got " + std::to_string(s.rotaryFraction));
  }
  if (!(s.ropeTheta > 0.0 && s.ropeTheta <= 1e12)) {
    return bad("/rope_theta", "must be in (0, 1e12], got " + std::to_string(s.ropeTheta));
  }
  if (!(s.dropout >= 0.0 && s.dropout < 1.0)) {
    return bad("/dropout", "must be in [0, 1), got " + std::to_string(s.dropout));
  }
  return {};
}

// Mixture of experts: routing, the dense and MoE layer pattern, expert widths.
template <typename Bad>
Result<void> validateMoe(const ModelSpec& s, const Bad& bad) {
  if (s.moe.numExperts < 0) return bad("/moe/num_experts", "must not be negative, got " + std::to_string(s.moe.numExperts));
  if (s.moe.enabled()) {
    if (s.moe.topK < 1 || s.moe.topK > s.moe.numExperts) {
      return bad("/moe/top_k", "must be between 1 and num_experts " + std::to_string(s.moe.numExperts) + ", got " +
                                   std::to_string(s.moe.topK));
    }
    if (s.moe.layerFrequency < 1 || s.moe.layerFrequency > s.numLayers) {
      return bad("/moe/layer_frequency", "must be between 1 and num_layers " + std::to_string(s.numLayers) +
                                             ", got " + std::to_string(s.moe.layerFrequency));
    }
    if (s.moe.layerPhase < -1 || s.moe.layerPhase >= s.moe.layerFrequency) {
      return bad("/moe/layer_phase", "must be from 0 to layer_frequency - 1 = " + std::to_string(s.moe.layerFrequency - 1) +
                                         ", got " + std::to_string(s.moe.layerPhase));
    }
    if (s.moe.firstDenseLayers < 0 || s.moe.firstDenseLayers >= s.numLayers) {
      return bad("/moe/first_dense_layers", "must be from 0 to num_layers - 1 = " + std::to_string(s.numLayers - 1) +
                                                ", got " + std::to_string(s.moe.firstDenseLayers));
    }
    if (s.moe.expertFfnHiddenSize < 0) {
      return bad("/moe/expert_ffn_hidden_size", "must not be negative, got " + std::to_string(s.moe.expertFfnHiddenSize));
    }
    if (s.moe.sharedExpertFfnHiddenSize < 0) {
      return bad("/moe/shared_expert_ffn_hidden_size",
                 "must not be negative, got " + std::to_string(s.moe.sharedExpertFfnHiddenSize));
    }
    if (s.moe.routingGroups < 0 || s.moe.routingGroups == 1 || (s.moe.routingGroups > 0 && s.moe.numExperts % s.moe.routingGroups != 0)) {
      return bad("/moe/routing_groups", "must be 0 (no group-limited routing) or a divisor of num_experts " +
                                            std::to_string(s.moe.numExperts) + " above 1, got " + std::to_string(s.moe.routingGroups));
    }
    if ((s.moe.routingGroups > 0) != (s.moe.routingGroupTopK > 0) || s.moe.routingGroupTopK > s.moe.routingGroups) {
      return bad("/moe/routing_group_topk", "must be from 1 to routing_groups " + std::to_string(s.moe.routingGroups) +
                                                " with routing_groups, 0 without, got " + std::to_string(s.moe.routingGroupTopK));
    }
  }
  return {};
}

}  // namespace

std::int64_t ModelSpec::defaultSeqLen() const {
  if (input == InputKind::kImagePatches) return image.numPatches() + 1;
  if (seqLen > 0) return seqLen;
  return maxPositionEmbeddings;
}

ParamCount countParameters(const ModelSpec& s) {
  const std::int64_t h = s.hiddenSize;
  const std::int64_t e = s.embedSize();
  ParamCount count;

  // Input embeddings.
  std::int64_t embedding = 0;
  if (s.input == InputKind::kTokens) {
    embedding += s.vocabSize * e;
    if (s.positionEmbedding == PositionEmbedding::kLearned) embedding += s.maxPositionEmbeddings * h;  // OPT: h, not e
    embedding += s.typeVocabSize * h;
  } else {
    const std::int64_t patchInputs = s.image.numChannels * s.image.patchSize * s.image.patchSize;
    embedding += patchInputs * h + h;                  // patch projection (a strided conv) with bias
    embedding += h;                                    // class token
    embedding += (s.image.numPatches() + 1) * h;       // learned positions
  }
  count.embedding = embedding;
  std::int64_t total = embedding;
  if (e != h) total += 2 * e * h;  // OPT project_in / project_out, no bias
  if (s.embeddingNorm) total += normParams(s.norm, h);

  // Transformer layers; a multi-token prediction module adds its two norms, its 2h x h projection, one
  // layer like the last one and a final norm (the embedding and output head are shared).
  std::int64_t inactive = 0;
  const std::int64_t expertFfn = s.expertFfnSize();
  auto layerParams = [&](std::int64_t layer) {
    std::int64_t p = (s.sandwichNorm ? 4 : 2) * normParams(s.norm, h) + attentionParams(s);
    if (s.moe.isMoeLayer(layer)) {
      const std::int64_t expert = mlpParams(s, expertFfn);
      // The router has a bias when the MLPs do (GPT-OSS).
      p += h * s.moe.numExperts + (s.mlpBias ? s.moe.numExperts : 0) + s.moe.numExperts * expert;
      if (s.moe.sharedExpertFfnHiddenSize > 0) p += mlpParams(s, s.moe.sharedExpertFfnHiddenSize);
      inactive += (s.moe.numExperts - s.moe.topK) * expert;
    } else {
      p += mlpParams(s, s.ffnHiddenSize);
    }
    return p;
  };
  for (std::int64_t layer = 0; layer < s.numLayers; ++layer) total += layerParams(layer);
  for (std::int64_t m = 0; m < s.mtpLayers; ++m) {
    const std::int64_t module = 3 * normParams(s.norm, h) + 2 * h * h + layerParams(s.numLayers - 1);
    total += module;
    count.mtp += module;
  }
  if (s.finalNorm) total += normParams(s.norm, h);

  // Heads.
  if (s.pooler) total += h * h + h;
  if (s.input == InputKind::kImagePatches) {
    if (s.image.numClasses > 0) total += h * s.image.numClasses + s.image.numClasses;
  } else if (s.lmHead) {
    if (s.architecture == Architecture::kEncoder) {
      total += h * h + h + normParams(s.norm, h) + s.vocabSize;  // MLM transform, its norm, decoder bias
    }
    if (!s.tieWordEmbeddings) total += s.vocabSize * e;
  }
  count.total = total;
  count.active = total - inactive;
  count.vision = s.visionTowerParams;
  return count;
}

Result<void> validateModelSpec(const ModelSpec& s, const std::string& file) {
  auto bad = [&](const std::string& path, const std::string& message) {
    return fail(Error::badInput(message, file, path));
  };
  if (auto r = validateBounds(s, bad); !r) return r;
  if (auto r = validateShape(s, bad); !r) return r;
  if (auto r = validateInput(s, bad); !r) return r;
  if (auto r = validateVariants(s, bad); !r) return r;
  if (auto r = validateMoe(s, bad); !r) return r;
  if (auto r = validateMla(s, bad); !r) return r;
  // The bounds above keep this count inside 64 bits; this one keeps everything that scales with it sane.
  if (const auto params = countParameters(s).total; params > limits::kMaxParameters) {
    return bad("", "the model has " + std::to_string(params) + " parameters, more than the " +
                       std::to_string(limits::kMaxParameters) + " colo plans for");
  }
  return {};
}

std::string toString(Architecture value) { return value == Architecture::kDecoder ? "decoder" : "encoder"; }

std::string toString(PositionEmbedding value) {
  switch (value) {
    case PositionEmbedding::kLearned:
      return "learned";
    case PositionEmbedding::kRope:
      return "rope";
    case PositionEmbedding::kAlibi:
      return "alibi";
    case PositionEmbedding::kNone:
      return "none";
  }
  return "none";
}

std::string toString(NormKind value) { return value == NormKind::kLayerNorm ? "layernorm" : "rmsnorm"; }

std::string toString(Activation value) {
  switch (value) {
    case Activation::kGelu:
      return "gelu";
    case Activation::kRelu:
      return "relu";
    case Activation::kSilu:
      return "silu";
    case Activation::kSwiGlu:
      return "swiglu";
    case Activation::kGeGlu:
      return "geglu";
  }
  return "gelu";
}

std::string toString(InputKind value) { return value == InputKind::kTokens ? "tokens" : "image_patches"; }

}  // namespace colo
