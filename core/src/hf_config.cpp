#include "colo/core/hf_config.h"

#include <algorithm>
#include <filesystem>

#include "colo/core/limits.h"

#include "hf_families.h"
#include "json_reader.h"

namespace colo {
namespace {

using detail::JsonReader;

// Reads the first present key of `keys` (HF renamed several over time); names the first if none is.
std::int64_t positiveOf(const JsonReader& r, std::initializer_list<std::string_view> keys) {
  for (const auto k : keys) {
    if (r.has(k)) return r.positiveInteger(k);
  }
  return r.positiveInteger(*keys.begin());  // throws "missing required field"
}

std::string modelName(const JsonReader& r, const std::string& file) {
  std::string name = r.string("_name_or_path", "");
  if (!name.empty()) return name;
  std::filesystem::path p(file);
  if (p.filename() == "config.json" && p.has_parent_path() && !p.parent_path().filename().empty()) {
    return p.parent_path().filename().string();
  }
  return p.stem().string();
}

Activation plainActivation(const JsonReader& r, std::string_view key, const std::string& fallback) {
  const std::string act = r.string(key, fallback);
  if (act.rfind("gelu", 0) == 0 || act == "quick_gelu") return Activation::kGelu;
  if (act == "relu") return Activation::kRelu;
  if (act == "silu" || act == "swish") return Activation::kSilu;
  r.fail(key, "unsupported activation \"" + act + "\" (expected gelu*, relu, silu)");
}

Activation gatedActivation(const JsonReader& r) {
  const std::string act = r.string("hidden_act", "silu");
  if (act == "silu" || act == "swish") return Activation::kSwiGlu;
  if (act.rfind("gelu", 0) == 0) return Activation::kGeGlu;
  r.fail("hidden_act", "unsupported gated activation \"" + act + "\" (expected silu or gelu)");
}

ModelSpec preset(const std::string& family) { return *familyPreset(family); }

ModelSpec gpt2(const JsonReader& r) {
  ModelSpec s = preset("gpt2");
  s.hiddenSize = positiveOf(r, {"n_embd", "hidden_size"});
  s.numLayers = positiveOf(r, {"n_layer", "num_hidden_layers"});
  s.numAttentionHeads = positiveOf(r, {"n_head", "num_attention_heads"});
  s.ffnHiddenSize = r.positiveInteger("n_inner", 4 * s.hiddenSize);
  s.vocabSize = r.positiveInteger("vocab_size", 50257);
  s.maxPositionEmbeddings = r.has("n_positions") ? r.positiveInteger("n_positions") : r.positiveInteger("n_ctx", 1024);
  s.activation = plainActivation(r, "activation_function", "gelu_new");
  s.tieWordEmbeddings = r.boolean("tie_word_embeddings", true);
  s.dropout = r.fraction("resid_pdrop", 0.1);
  return s;
}

ModelSpec gptNeox(const JsonReader& r) {
  ModelSpec s = preset("gpt_neox");
  s.hiddenSize = r.positiveInteger("hidden_size");
  s.numLayers = r.positiveInteger("num_hidden_layers");
  s.numAttentionHeads = r.positiveInteger("num_attention_heads");
  s.ffnHiddenSize = r.positiveInteger("intermediate_size", 4 * s.hiddenSize);
  s.vocabSize = r.positiveInteger("vocab_size");
  s.maxPositionEmbeddings = r.positiveInteger("max_position_embeddings", 2048);
  s.rotaryFraction = r.fraction("rotary_pct", 0.25);
  if (s.rotaryFraction == 0.0) r.fail("rotary_pct", "must be above 0");
  s.activation = plainActivation(r, "hidden_act", "gelu");
  s.tieWordEmbeddings = r.boolean("tie_word_embeddings", false);
  s.qkvBias = s.attentionOutputBias = r.boolean("attention_bias", true);
  s.dropout = r.fraction("hidden_dropout", 0.0);
  return s;
}

// llama, mistral, mixtral and qwen2 share their keys.
ModelSpec llamaLike(const JsonReader& r, const std::string& type) {
  ModelSpec s = preset(type);
  s.hiddenSize = r.positiveInteger("hidden_size");
  s.numLayers = r.positiveInteger("num_hidden_layers");
  s.numAttentionHeads = r.positiveInteger("num_attention_heads");
  s.numKvHeads = r.positiveInteger("num_key_value_heads", s.numAttentionHeads);
  s.headDim = r.has("head_dim") ? r.positiveInteger("head_dim") : 0;
  // The implied value: keep it implied (compared by division: the product of two unchecked values may overflow).
  if (s.hiddenSize % s.numAttentionHeads == 0 && s.headDim == s.hiddenSize / s.numAttentionHeads) s.headDim = 0;
  s.ffnHiddenSize = r.positiveInteger("intermediate_size");
  s.vocabSize = r.positiveInteger("vocab_size");
  s.maxPositionEmbeddings = r.positiveInteger("max_position_embeddings", 4096);
  s.activation = gatedActivation(r);
  s.tieWordEmbeddings = r.boolean("tie_word_embeddings", false);
  if (type == "qwen2" || type == "qwen2_moe") {
    s.qkvBias = true;  // Qwen2 always has q/k/v biases and no output bias
    if (r.boolean("use_sliding_window", false)) s.slidingWindow = r.positiveInteger("sliding_window", 4096);
  } else {
    s.qkvBias = s.attentionOutputBias = r.boolean("attention_bias", false);
    s.mlpBias = r.boolean("mlp_bias", false);
    if (type == "mistral" || type == "mixtral") s.slidingWindow = r.has("sliding_window") ? r.positiveInteger("sliding_window") : 0;
  }
  if (type == "mixtral") {
    s.moe.numExperts = r.positiveInteger("num_local_experts", 8);
    s.moe.topK = r.positiveInteger("num_experts_per_tok", 2);
  }
  s.dropout = r.fraction("attention_dropout", 0.0);
  return s;
}

// Qwen's MoE layers: layer i is MoE when (i + 1) % decoder_sparse_step == 0 and i is not in
// mlp_only_layers (colo represents leading dense layers only).
void qwenMoe(const JsonReader& r, ModelSpec& s, bool sharedExpert) {
  s.moe.numExperts = r.positiveInteger("num_experts");
  s.moe.topK = r.positiveInteger("num_experts_per_tok");
  s.moe.expertFfnHiddenSize = r.positiveInteger("moe_intermediate_size");
  s.moe.layerFrequency = r.positiveInteger("decoder_sparse_step", 1);
  if (sharedExpert) s.moe.sharedExpertFfnHiddenSize = r.nonNegativeInteger("shared_expert_intermediate_size", 0);
  if (r.has("mlp_only_layers")) {
    const Json& dense = r.json().at("mlp_only_layers");
    if (!dense.is_array()) r.fail("mlp_only_layers", "expected a list of layer indices, got " + dense.dump());
    for (std::size_t i = 0; i < dense.size(); ++i) {
      if (!dense[i].is_number_integer() || dense[i].get<std::int64_t>() != static_cast<std::int64_t>(i)) {
        r.fail("mlp_only_layers", "colo models leading dense layers only (0, 1, ...), got " + dense.dump());
      }
    }
    s.moe.firstDenseLayers = static_cast<std::int64_t>(dense.size());
  }
}

// DeepSeek-V2/V3: multi-head latent attention, routed plus shared experts after the first dense layers.
ModelSpec deepseek(const JsonReader& r, const std::string& type) {
  ModelSpec s = preset(type);
  s.hiddenSize = r.positiveInteger("hidden_size");
  s.numLayers = r.positiveInteger("num_hidden_layers");
  s.numAttentionHeads = r.positiveInteger("num_attention_heads");
  s.ffnHiddenSize = r.positiveInteger("intermediate_size");
  s.vocabSize = r.positiveInteger("vocab_size");
  s.maxPositionEmbeddings = r.positiveInteger("max_position_embeddings", 4096);
  s.activation = gatedActivation(r);
  s.tieWordEmbeddings = r.boolean("tie_word_embeddings", false);
  s.qkvBias = s.attentionOutputBias = r.boolean("attention_bias", false);
  s.mla.qLoraRank = r.nonNegativeInteger("q_lora_rank", 0);  // null in the Lite models: one plain projection
  s.mla.kvLoraRank = r.positiveInteger("kv_lora_rank");
  s.mla.qkNopeHeadDim = r.positiveInteger("qk_nope_head_dim");
  s.mla.qkRopeHeadDim = r.nonNegativeInteger("qk_rope_head_dim", 0);
  s.mla.vHeadDim = r.positiveInteger("v_head_dim");
  if (r.has("n_routed_experts")) {
    s.moe.numExperts = r.positiveInteger("n_routed_experts");
    s.moe.topK = r.positiveInteger("num_experts_per_tok");
    s.moe.expertFfnHiddenSize = r.positiveInteger("moe_intermediate_size");
    s.moe.firstDenseLayers = r.nonNegativeInteger("first_k_dense_replace", 0);
    // DeepSeek's rule: layer % moe_layer_freq == 0 after the dense ones (every released model uses 1).
    if (const auto freq = r.positiveInteger("moe_layer_freq", 1); freq != 1) {
      s.moe.layerFrequency = freq;
      s.moe.layerPhase = 0;
    }
    s.moe.sharedExpertFfnHiddenSize = r.nonNegativeInteger("n_shared_experts", 0) * s.moe.expertFfnHiddenSize;
    // Group-limited routing: V2's "group_limited_greedy" and V3's "noaux_tc" pick topk_group of
    // n_group groups first; "greedy" (V2-Lite) routes over all experts.
    const std::int64_t groups = r.nonNegativeInteger("n_group", 0);
    const std::string method = r.has("topk_method") && r.json().at("topk_method").is_string()
                                   ? r.json().at("topk_method").get<std::string>() : "greedy";
    if (groups > 1 && method != "greedy") {
      s.moe.routingGroups = groups;
      s.moe.routingGroupTopK = r.positiveInteger("topk_group");
    }
  }
  s.mtpLayers = r.nonNegativeInteger("num_nextn_predict_layers", 0);
  s.dropout = r.fraction("attention_dropout", 0.0);
  return s;
}

ModelSpec opt(const JsonReader& r) {
  ModelSpec s = preset("opt");
  s.hiddenSize = r.positiveInteger("hidden_size");
  s.numLayers = r.positiveInteger("num_hidden_layers");
  s.numAttentionHeads = r.positiveInteger("num_attention_heads");
  s.ffnHiddenSize = r.positiveInteger("ffn_dim");
  s.vocabSize = r.positiveInteger("vocab_size");
  // OPT's learned position table has 2 extra rows (the positions are offset by 2).
  s.maxPositionEmbeddings = r.positiveInteger("max_position_embeddings", 2048) + 2;
  s.seqLen = s.maxPositionEmbeddings - 2;
  s.embeddingSize = r.positiveInteger("word_embed_proj_dim", s.hiddenSize);
  if (s.embeddingSize == s.hiddenSize) s.embeddingSize = 0;
  s.finalNorm = r.boolean("do_layer_norm_before", true) && !r.boolean("_remove_final_layer_norm", false);
  s.activation = plainActivation(r, "activation_function", "relu");
  s.qkvBias = s.attentionOutputBias = s.mlpBias = r.boolean("enable_bias", true);
  s.tieWordEmbeddings = r.boolean("tie_word_embeddings", true);
  s.dropout = r.fraction("dropout", 0.1);
  return s;
}

ModelSpec bloom(const JsonReader& r) {
  ModelSpec s = preset("bloom");
  s.hiddenSize = positiveOf(r, {"hidden_size", "n_embed"});
  s.numLayers = positiveOf(r, {"n_layer", "num_hidden_layers"});
  s.numAttentionHeads = positiveOf(r, {"n_head", "num_attention_heads"});
  s.ffnHiddenSize = 4 * s.hiddenSize;
  s.vocabSize = r.positiveInteger("vocab_size");
  // ALiBi has no position table; BLOOM was trained at 2048 tokens.
  s.seqLen = r.positiveInteger("seq_length", 2048);
  s.tieWordEmbeddings = r.boolean("tie_word_embeddings", true);
  s.dropout = r.fraction("hidden_dropout", 0.0);
  return s;
}

ModelSpec bert(const JsonReader& r) {
  ModelSpec s = preset("bert");
  s.hiddenSize = r.positiveInteger("hidden_size");
  s.numLayers = r.positiveInteger("num_hidden_layers");
  s.numAttentionHeads = r.positiveInteger("num_attention_heads");
  s.ffnHiddenSize = r.positiveInteger("intermediate_size");
  s.vocabSize = r.positiveInteger("vocab_size");
  s.maxPositionEmbeddings = r.positiveInteger("max_position_embeddings", 512);
  s.typeVocabSize = r.nonNegativeInteger("type_vocab_size", 2);
  s.activation = plainActivation(r, "hidden_act", "gelu");
  s.tieWordEmbeddings = r.boolean("tie_word_embeddings", true);
  s.dropout = r.fraction("hidden_dropout_prob", 0.1);
  return s;
}

ModelSpec vit(const JsonReader& r) {
  ModelSpec s = preset("vit");
  s.hiddenSize = r.positiveInteger("hidden_size", 768);
  s.numLayers = r.positiveInteger("num_hidden_layers", 12);
  s.numAttentionHeads = r.positiveInteger("num_attention_heads", 12);
  s.ffnHiddenSize = r.positiveInteger("intermediate_size", 3072);
  s.image.imageSize = r.positiveInteger("image_size", 224);
  s.image.patchSize = r.positiveInteger("patch_size", 16);
  s.image.numChannels = r.positiveInteger("num_channels", 3);
  // The classifier's size comes from the label map; a bare ViTModel config has none.
  s.image.numClasses = 0;
  if (r.has("id2label")) {
    const JsonReader labels = r.object("id2label");
    s.image.numClasses = static_cast<std::int64_t>(labels.json().size());
  }
  s.qkvBias = r.boolean("qkv_bias", true);
  s.activation = plainActivation(r, "hidden_act", "gelu");
  s.dropout = r.fraction("hidden_dropout_prob", 0.0);
  return s;
}

}  // namespace

const std::vector<std::string>& supportedHfModelTypes() {
  static const std::vector<std::string> types{"gpt2",      "gpt_neox", "llama",       "mistral",     "mixtral",
                                              "qwen2",     "qwen2_moe", "qwen3",      "qwen3_moe",   "deepseek_v2",
                                              "deepseek_v3", "phi3",    "gemma2",      "gemma3",      "gemma3_text",
                                              "gpt_oss",   "llama4",   "llama4_text", "opt",        "bloom",
                                              "bert",      "vit"};
  return types;
}

Result<ModelSpec> modelSpecFromHfConfig(const Json& config, const std::string& file) {
  auto spec = detail::catchLoad(file, [&]() -> ModelSpec {
    const JsonReader r(config, file);
    const std::string type = r.string("model_type");
    const Json noText = Json::object();
    const JsonReader textReader = r.has("text_config") ? r.object("text_config") : JsonReader(noText, file);
    ModelSpec s;
    if (type == "gpt2") {
      s = gpt2(r);
    } else if (type == "gpt_neox") {
      s = gptNeox(r);
    } else if (type == "llama" || type == "mistral" || type == "mixtral" || type == "qwen2" || type == "qwen3") {
      s = llamaLike(r, type);
    } else if (type == "qwen2_moe" || type == "qwen3_moe") {
      s = llamaLike(r, type);
      qwenMoe(r, s, type == "qwen2_moe");
    } else if (type == "deepseek_v2" || type == "deepseek_v3") {
      s = deepseek(r, type);
    } else if (type == "phi3") {
      s = detail::readPhi3(r);
    } else if (type == "gemma2" || type == "gemma3_text") {
      s = detail::readGemma(r, type);
    } else if (type == "gpt_oss") {
      s = detail::readGptOss(r);
    } else if (type == "llama4_text") {
      s = detail::readLlama4Text(r);
    } else if (type == "gemma3" || type == "llama4") {
      // Multimodal wrappers: a text-only config of the same family has no text_config.
      s = r.has("text_config") ? detail::readMultimodal(r, type)
                               : (type == "gemma3" ? detail::readGemma(r, "gemma3_text") : detail::readLlama4Text(r));
    } else if (type == "opt") {
      s = opt(r);
    } else if (type == "bloom") {
      s = bloom(r);
    } else if (type == "bert") {
      s = bert(r);
    } else if (type == "vit") {
      s = vit(r);
    } else {
      std::string list;
      for (const auto& t : supportedHfModelTypes()) list += (list.empty() ? "" : ", ") + t;
      r.fail("model_type", "unsupported model_type \"" + type + "\" (supported: " + list + ")");
    }
    // The rotary base, else the config class's default (the family preset: 10000, Mixtral and Gemma 3
    // 1e6, GPT-OSS 150000, Llama 4 500000); Gemma 3's local layers use rope_local_base_freq.
    const JsonReader& text = r.has("text_config") ? textReader : r;
    if (s.positionEmbedding == PositionEmbedding::kRope) {
      s.ropeTheta = text.positiveNumber(type == "gpt_neox" ? "rotary_emb_base" : "rope_theta", s.ropeTheta);
    }
    // A rotary model's max_position_embeddings is only its context limit (Llama 4: 10M tokens); colo
    // plans sequences up to its own limit.
    if (s.positionEmbedding != PositionEmbedding::kLearned) s.maxPositionEmbeddings = std::min(s.maxPositionEmbeddings, limits::kMaxSeqLen);
    s.name = modelName(r, file);
    s.source = "Hugging Face config " + file;
    return s;
  });
  if (!spec) return spec;
  if (auto valid = validateModelSpec(*spec, file); !valid) {
    // The spec's field names differ from the config's; say which config value is at fault.
    Error e = valid.error();
    e.message += " (from the Hugging Face config)";
    return fail(e);
  }
  return spec;
}

}  // namespace colo
