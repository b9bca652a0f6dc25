// colo.model/1 reading and writing, and the family presets it starts from.
#include "colo/core/model_spec.h"

#include "json_reader.h"

namespace colo {
namespace {

using detail::JsonReader;

PositionEmbedding parsePosition(const std::string& s) {
  if (s == "rope") return PositionEmbedding::kRope;
  if (s == "alibi") return PositionEmbedding::kAlibi;
  if (s == "none") return PositionEmbedding::kNone;
  return PositionEmbedding::kLearned;
}

Activation parseActivation(const std::string& s) {
  if (s == "relu") return Activation::kRelu;
  if (s == "silu") return Activation::kSilu;
  if (s == "swiglu") return Activation::kSwiGlu;
  if (s == "geglu") return Activation::kGeGlu;
  return Activation::kGelu;
}

}  // namespace

Result<ModelSpec> familyPreset(const std::string& family) {
  ModelSpec s;
  s.family = family;
  if (family == "gpt" || family == "gpt2" || family == "gpt_neox" || family == "opt" || family == "bloom") {
    s.dropout = 0.1;  // Megatron's and GPT-2's training default
    if (family == "gpt_neox") {
      s.positionEmbedding = PositionEmbedding::kRope;
      s.rotaryFraction = 0.25;
      s.tieWordEmbeddings = false;
      s.dropout = 0.0;
    } else if (family == "bloom") {
      s.positionEmbedding = PositionEmbedding::kAlibi;
      s.embeddingNorm = true;
      s.dropout = 0.0;
    } else if (family == "opt") {
      s.activation = Activation::kRelu;
    }
    return s;
  }
  if (family == "llama" || family == "mistral" || family == "mixtral" || family == "qwen2" || family == "qwen2_moe" ||
      family == "qwen3" || family == "qwen3_moe" || family == "deepseek_v2" || family == "deepseek_v3" ||
      family == "phi3" || family == "llama4" || family == "gemma2" || family == "gemma3" || family == "gpt_oss") {
    s.positionEmbedding = PositionEmbedding::kRope;
    s.norm = NormKind::kRmsNorm;
    s.activation = Activation::kSwiGlu;
    s.qkvBias = family == "qwen2" || family == "qwen2_moe";
    s.attentionOutputBias = false;
    s.mlpBias = false;
    s.tieWordEmbeddings = false;
    s.dropout = 0.0;
    if (family == "mixtral") {
      s.moe.numExperts = 8;
      s.moe.topK = 2;
    }
    // Qwen3 and Gemma 3 normalise each head's queries and keys; Gemma adds norms after attention and
    // the MLP, gates with GeLU and ties its embeddings; GPT-OSS has biases everywhere and sink logits.
    s.qkNorm = family == "qwen3" || family == "qwen3_moe" || family == "gemma3";
    if (family == "gemma2" || family == "gemma3") {
      s.activation = Activation::kGeGlu;
      s.sandwichNorm = true;
      s.tieWordEmbeddings = true;
    }
    if (family == "gpt_oss") {
      s.qkvBias = s.attentionOutputBias = s.mlpBias = true;
      s.attentionSinks = true;
    }
    s.qkL2Norm = family == "llama4";         // Llama4TextConfig's use_qk_norm default
    if (family == "gemma2") s.finalLogitSoftcap = 30.0;  // Gemma2Config's final_logit_softcapping default
    if (family == "gemma2") s.attentionLogitSoftcap = 50.0;  // and its attn_logit_softcapping default
    // The rotary base of each transformers config class (rope_theta's default).
    if (family == "mixtral" || family == "gemma3") s.ropeTheta = 1e6;
    if (family == "gpt_oss") s.ropeTheta = 150000;
    if (family == "llama4") s.ropeTheta = 500000;
    return s;
  }
  if (family == "bert") {
    s.architecture = Architecture::kEncoder;
    s.typeVocabSize = 2;
    s.embeddingNorm = true;
    s.finalNorm = false;  // post-LN: every sub-layer ends in its own norm
    s.pooler = true;
    s.dropout = 0.1;
    return s;
  }
  if (family == "vit") {
    s.architecture = Architecture::kEncoder;
    s.input = InputKind::kImagePatches;
    s.lmHead = false;
    s.tieWordEmbeddings = false;
    s.dropout = 0.0;
    return s;
  }
  return fail(Error::badInput("unknown family \"" + family +
                              "\" (expected one of: gpt, llama, mixtral, bert, vit, gpt2, gpt_neox, mistral, "
                              "qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2, deepseek_v3, phi3, llama4, gemma2, "
                              "gemma3, gpt_oss, opt, bloom)"));
}

Result<ModelSpec> modelSpecFromJson(const Json& document, const std::string& file) {
  auto spec = detail::catchLoad(file, [&]() -> ModelSpec {
    const JsonReader r(document, file);
    r.accept({"format"});
    const std::string family = r.string("family");
    auto preset = familyPreset(family);
    if (!preset) r.fail("family", preset.error().message);
    ModelSpec s = *preset;
    s.name = r.string("name");
    s.source = r.string("source", "");
    s.architecture = r.choice("architecture", {"decoder", "encoder"}, toString(s.architecture)) == "decoder"
                         ? Architecture::kDecoder
                         : Architecture::kEncoder;
    s.input = r.choice("input", {"tokens", "image_patches"}, toString(s.input)) == "tokens" ? InputKind::kTokens
                                                                                            : InputKind::kImagePatches;
    s.numLayers = r.positiveInteger("num_layers");
    s.hiddenSize = r.positiveInteger("hidden_size");
    s.numAttentionHeads = r.positiveInteger("num_attention_heads");
    s.numKvHeads = r.nonNegativeInteger("num_kv_heads", 0);
    s.headDim = r.nonNegativeInteger("head_dim", 0);
    s.ffnHiddenSize = r.positiveInteger("ffn_hidden_size");
    s.vocabSize = r.nonNegativeInteger("vocab_size", 0);
    s.maxPositionEmbeddings = r.nonNegativeInteger("max_position_embeddings", 0);
    s.embeddingSize = r.nonNegativeInteger("embedding_size", 0);
    s.typeVocabSize = r.nonNegativeInteger("type_vocab_size", s.typeVocabSize);
    s.slidingWindow = r.nonNegativeInteger("sliding_window", 0);
    s.attentionChunkSize = r.nonNegativeInteger("attention_chunk_size", 0);
    s.globalAttentionEvery = r.nonNegativeInteger("global_attention_every", 0);
    s.qkNorm = r.boolean("qk_norm", s.qkNorm);
    s.sandwichNorm = r.boolean("sandwich_norm", s.sandwichNorm);
    s.attentionSinks = r.boolean("attention_sinks", s.attentionSinks);
    s.qkL2Norm = r.boolean("qk_l2_norm", s.qkL2Norm);
    s.finalLogitSoftcap = r.has("final_logit_softcap") ? r.positiveNumber("final_logit_softcap", 30.0) : s.finalLogitSoftcap;
    s.attentionLogitSoftcap =
        r.has("attention_logit_softcap") ? r.positiveNumber("attention_logit_softcap", 50.0) : s.attentionLogitSoftcap;
    s.visionTowerParams = r.nonNegativeInteger("vision_tower_params", 0);
    s.mtpLayers = r.nonNegativeInteger("mtp_layers", 0);
    s.positionEmbedding =
        parsePosition(r.choice("position_embedding", {"learned", "rope", "alibi", "none"}, toString(s.positionEmbedding)));
    s.rotaryFraction = r.positiveNumber("rotary_fraction", s.rotaryFraction);
    s.ropeTheta = r.positiveNumber("rope_theta", s.ropeTheta);
    s.norm = r.choice("norm", {"layernorm", "rmsnorm"}, toString(s.norm)) == "layernorm" ? NormKind::kLayerNorm
                                                                                          : NormKind::kRmsNorm;
    s.activation = parseActivation(r.choice("activation", {"gelu", "relu", "silu", "swiglu", "geglu"}, toString(s.activation)));
    s.qkvBias = r.boolean("qkv_bias", s.qkvBias);
    s.attentionOutputBias = r.boolean("attention_output_bias", s.attentionOutputBias);
    s.mlpBias = r.boolean("mlp_bias", s.mlpBias);
    s.embeddingNorm = r.boolean("embedding_norm", s.embeddingNorm);
    s.finalNorm = r.boolean("final_norm", s.finalNorm);
    s.tieWordEmbeddings = r.boolean("tie_word_embeddings", s.tieWordEmbeddings);
    s.lmHead = r.boolean("lm_head", s.lmHead);
    s.pooler = r.boolean("pooler", s.pooler);
    s.dropout = r.nonNegativeNumber("dropout", s.dropout);
    s.seqLen = r.nonNegativeInteger("seq_len", 0);
    if (r.has("moe")) {
      const JsonReader m = r.object("moe");
      s.moe.numExperts = m.positiveInteger("num_experts");
      s.moe.topK = m.positiveInteger("top_k");
      s.moe.layerFrequency = m.positiveInteger("layer_frequency", 1);
      if (m.has("layer_phase")) s.moe.layerPhase = m.nonNegativeInteger("layer_phase");
      if (s.moe.layerPhase == s.moe.layerFrequency - 1) s.moe.layerPhase = -1;  // the default, one form
      s.moe.expertFfnHiddenSize = m.nonNegativeInteger("expert_ffn_hidden_size", 0);
      s.moe.firstDenseLayers = m.nonNegativeInteger("first_dense_layers", 0);
      s.moe.sharedExpertFfnHiddenSize = m.nonNegativeInteger("shared_expert_ffn_hidden_size", 0);
      s.moe.routingGroups = m.nonNegativeInteger("routing_groups", 0);
      s.moe.routingGroupTopK = m.nonNegativeInteger("routing_group_topk", 0);
      m.rejectUnknownKeys();
    } else {
      r.accept({"moe"});
    }
    if (r.has("mla")) {
      const JsonReader m = r.object("mla");
      s.mla.qLoraRank = m.nonNegativeInteger("q_lora_rank", 0);
      s.mla.kvLoraRank = m.positiveInteger("kv_lora_rank");
      s.mla.qkNopeHeadDim = m.nonNegativeInteger("qk_nope_head_dim", 0);
      s.mla.qkRopeHeadDim = m.nonNegativeInteger("qk_rope_head_dim", 0);
      s.mla.vHeadDim = m.positiveInteger("v_head_dim");
      m.rejectUnknownKeys();
    } else {
      r.accept({"mla"});
    }
    if (r.has("image")) {
      const JsonReader im = r.object("image");
      s.image.imageSize = im.positiveInteger("image_size");
      s.image.patchSize = im.positiveInteger("patch_size");
      s.image.numChannels = im.positiveInteger("num_channels", 3);
      s.image.numClasses = im.nonNegativeInteger("num_classes", 1000);
      im.rejectUnknownKeys();
    } else {
      r.accept({"image"});
      if (s.input == InputKind::kImagePatches) r.fail("image", "missing required field \"image\" for an image model");
    }
    r.rejectUnknownKeys();
    return s;
  });
  if (!spec) return spec;
  if (auto valid = validateModelSpec(*spec, file); !valid) return fail(valid.error());
  return spec;
}

Json modelSpecToJson(const ModelSpec& s) {
  Json j;
  j["format"] = "colo.model/1";
  j["name"] = s.name;
  j["family"] = s.family;
  if (!s.source.empty()) j["source"] = s.source;
  j["architecture"] = toString(s.architecture);
  j["input"] = toString(s.input);
  j["num_layers"] = s.numLayers;
  j["hidden_size"] = s.hiddenSize;
  j["num_attention_heads"] = s.numAttentionHeads;
  j["num_kv_heads"] = s.numKvHeads;
  j["head_dim"] = s.headDim;
  j["ffn_hidden_size"] = s.ffnHiddenSize;
  j["vocab_size"] = s.vocabSize;
  j["max_position_embeddings"] = s.maxPositionEmbeddings;
  j["embedding_size"] = s.embeddingSize;
  j["type_vocab_size"] = s.typeVocabSize;
  j["sliding_window"] = s.slidingWindow;
  j["position_embedding"] = toString(s.positionEmbedding);
  j["rotary_fraction"] = s.rotaryFraction;
  j["norm"] = toString(s.norm);
  j["activation"] = toString(s.activation);
  j["qkv_bias"] = s.qkvBias;
  j["attention_output_bias"] = s.attentionOutputBias;
  j["mlp_bias"] = s.mlpBias;
  j["embedding_norm"] = s.embeddingNorm;
  j["final_norm"] = s.finalNorm;
  j["tie_word_embeddings"] = s.tieWordEmbeddings;
  j["lm_head"] = s.lmHead;
  j["pooler"] = s.pooler;
  j["dropout"] = s.dropout;
  j["seq_len"] = s.seqLen;
  // Written only when set, so that older models keep their hash.
  if (auto preset = familyPreset(s.family); !preset || s.ropeTheta != preset->ropeTheta) j["rope_theta"] = s.ropeTheta;
  if (s.attentionChunkSize > 0) j["attention_chunk_size"] = s.attentionChunkSize;
  if (s.globalAttentionEvery > 0) j["global_attention_every"] = s.globalAttentionEvery;
  if (s.qkNorm) j["qk_norm"] = true;
  if (s.sandwichNorm) j["sandwich_norm"] = true;
  if (s.attentionSinks) j["attention_sinks"] = true;
  if (s.qkL2Norm) j["qk_l2_norm"] = true;
  if (s.finalLogitSoftcap > 0) j["final_logit_softcap"] = s.finalLogitSoftcap;
  if (s.attentionLogitSoftcap > 0) j["attention_logit_softcap"] = s.attentionLogitSoftcap;
  if (s.visionTowerParams > 0) j["vision_tower_params"] = s.visionTowerParams;
  if (s.mtpLayers > 0) j["mtp_layers"] = s.mtpLayers;
  if (s.moe.enabled()) {
    j["moe"] = {{"num_experts", s.moe.numExperts},
                {"top_k", s.moe.topK},
                {"layer_frequency", s.moe.layerFrequency},
                {"expert_ffn_hidden_size", s.moe.expertFfnHiddenSize},
                {"first_dense_layers", s.moe.firstDenseLayers}};
    // Written only when set, so a model without them keeps its hash.
    if (s.moe.layerPhase >= 0) j["moe"]["layer_phase"] = s.moe.layerPhase;
    if (s.moe.sharedExpertFfnHiddenSize > 0) j["moe"]["shared_expert_ffn_hidden_size"] = s.moe.sharedExpertFfnHiddenSize;
    if (s.moe.routingGroups > 0) {
      j["moe"]["routing_groups"] = s.moe.routingGroups;
      j["moe"]["routing_group_topk"] = s.moe.routingGroupTopK;
    }
  }
  if (s.mla.enabled()) {
    j["mla"] = {{"q_lora_rank", s.mla.qLoraRank},
                {"kv_lora_rank", s.mla.kvLoraRank},
                {"qk_nope_head_dim", s.mla.qkNopeHeadDim},
                {"qk_rope_head_dim", s.mla.qkRopeHeadDim},
                {"v_head_dim", s.mla.vHeadDim}};
  }
  if (s.input == InputKind::kImagePatches) {
    j["image"] = {{"image_size", s.image.imageSize},
                  {"patch_size", s.image.patchSize},
                  {"num_channels", s.image.numChannels},
                  {"num_classes", s.image.numClasses}};
  }
  return j;
}

}  // namespace colo
