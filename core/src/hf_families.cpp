// Hugging Face config families of 2024-26: Phi-3, Gemma 2/3, GPT-OSS, Llama 4 and the multimodal
// wrappers around a text model. Defaults are those of the transformers library's config classes
// (Phi3Config, Gemma2Config, Gemma3TextConfig, GptOssConfig, Llama4TextConfig, Llama4VisionConfig,
// SiglipVisionConfig) where a published config leaves a key out.
#include "hf_families.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "colo/core/model_spec.h"

namespace colo::detail {
namespace {

Activation gated(const JsonReader& r, std::string_view key, const std::string& fallback) {
  const std::string act = r.string(key, fallback);
  if (act == "silu" || act == "swish") return Activation::kSwiGlu;
  if (act.rfind("gelu", 0) == 0) return Activation::kGeGlu;
  r.fail(key, "unsupported gated activation \"" + act + "\" (expected silu or gelu*)");
}

// The keys every decoder family shares (LLaMA's names).
void readDecoderShape(const JsonReader& r, ModelSpec& s, std::int64_t defaultVocab) {
  s.hiddenSize = r.positiveInteger("hidden_size");
  s.numLayers = r.positiveInteger("num_hidden_layers");
  s.numAttentionHeads = r.positiveInteger("num_attention_heads");
  s.numKvHeads = r.positiveInteger("num_key_value_heads", s.numAttentionHeads);
  s.headDim = r.has("head_dim") ? r.positiveInteger("head_dim") : 0;
  if (s.hiddenSize % s.numAttentionHeads == 0 && s.headDim == s.hiddenSize / s.numAttentionHeads) s.headDim = 0;
  s.ffnHiddenSize = r.positiveInteger("intermediate_size");
  s.vocabSize = defaultVocab > 0 ? r.positiveInteger("vocab_size", defaultVocab) : r.positiveInteger("vocab_size");
  s.dropout = r.fraction("attention_dropout", 0.0);
}

// The period of a `layer_types` list ("sliding_attention"/"chunked_attention" or "full_attention"
// per layer) in colo's rule: layer i attends the whole sequence when i % N == N - 1. 0: every layer
// is local; nullopt: none is.
std::optional<std::int64_t> periodOfLayerTypes(const JsonReader& r, std::string_view key, std::int64_t layers) {
  const Json& types = r.json().at(std::string(key));
  if (!types.is_array() || static_cast<std::int64_t>(types.size()) != layers) {
    r.fail(key, "expected one attention type per layer (" + std::to_string(layers) + "), got " + types.dump());
  }
  std::vector<bool> full;
  for (const auto& t : types) {
    if (!t.is_string()) r.fail(key, "expected attention type names, got " + t.dump());
    const std::string name = t.get<std::string>();
    if (name != "full_attention" && name != "sliding_attention" && name != "chunked_attention") {
      r.fail(key, "unknown attention type \"" + name + "\" (expected full_attention, sliding_attention, chunked_attention)");
    }
    full.push_back(name == "full_attention");
  }
  const auto fullCount = std::count(full.begin(), full.end(), true);
  if (fullCount == 0) return 0;                                        // every layer local
  if (fullCount == static_cast<std::int64_t>(full.size())) return std::nullopt;  // plain attention
  const auto period = static_cast<std::int64_t>(std::find(full.begin(), full.end(), true) - full.begin()) + 1;
  for (std::size_t i = 0; i < full.size(); ++i) {
    if (full[i] != (static_cast<std::int64_t>(i) % period == period - 1)) {
      r.fail(key, "colo models one full-attention layer at the end of each period of local layers, got " + types.dump());
    }
  }
  return period;
}

// Sets the window and its pattern: `layer_types` when the config lists them, else `fallbackPeriod`.
void slidingLayers(const JsonReader& r, ModelSpec& s, std::int64_t window, std::int64_t fallbackPeriod) {
  std::optional<std::int64_t> period = fallbackPeriod;
  if (r.has("layer_types")) period = periodOfLayerTypes(r, "layer_types", s.numLayers);
  if (!period || window <= 0) return;
  s.slidingWindow = window;
  s.globalAttentionEvery = *period;
}

// A ViT-style vision encoder's parameters (biased attention and MLP, LayerNorms, patch projection,
// learned positions), as countParameters counts a ViT without its classifier.
std::int64_t visionEncoderParams(const JsonReader& v, std::int64_t hidden, std::int64_t layers, std::int64_t ffn,
                                 std::int64_t heads, std::int64_t imageSize, std::int64_t patchSize) {
  ModelSpec vit = hfPreset("vit");
  vit.hiddenSize = hidden;
  vit.numLayers = layers;
  vit.numAttentionHeads = heads;
  vit.ffnHiddenSize = ffn;
  vit.image.imageSize = imageSize;
  vit.image.patchSize = patchSize;
  vit.image.numChannels = v.positiveInteger("num_channels", 3);
  vit.image.numClasses = 0;
  if (imageSize % patchSize != 0) v.fail("image_size", "must be a multiple of patch_size " + std::to_string(patchSize));
  if (auto valid = validateModelSpec(vit, v.file()); !valid) v.fail("hidden_size", valid.error().message);
  return countParameters(vit).total;
}

}  // namespace

ModelSpec hfPreset(const std::string& family) { return *familyPreset(family); }

ModelSpec readPhi3(const JsonReader& r) {
  ModelSpec s = hfPreset("phi3");
  readDecoderShape(r, s, 32064);
  s.maxPositionEmbeddings = r.positiveInteger("max_position_embeddings", 4096);
  s.activation = gated(r, "hidden_act", "silu");
  s.tieWordEmbeddings = r.boolean("tie_word_embeddings", false);
  s.rotaryFraction = r.fraction("partial_rotary_factor", 1.0);
  if (s.rotaryFraction == 0.0) r.fail("partial_rotary_factor", "must be above 0");
  // Phi-3-mini-4k slides a 2047-token window on every layer; the long-context variants set none.
  s.slidingWindow = r.has("sliding_window") ? r.positiveInteger("sliding_window") : 0;
  s.qkvBias = s.attentionOutputBias = r.boolean("attention_bias", false);
  return s;
}

ModelSpec readGemma(const JsonReader& r, const std::string& type) {
  const bool gemma3 = type != "gemma2";
  ModelSpec s = hfPreset(gemma3 ? "gemma3" : "gemma2");
  readDecoderShape(r, s, gemma3 ? 262208 : 256000);
  if (!r.has("head_dim")) s.headDim = 256;  // both config classes default to 256
  if (s.hiddenSize % s.numAttentionHeads == 0 && s.headDim == s.hiddenSize / s.numAttentionHeads) s.headDim = 0;
  s.maxPositionEmbeddings = r.positiveInteger("max_position_embeddings", gemma3 ? 131072 : 8192);
  s.activation = gated(r, r.has("hidden_activation") ? "hidden_activation" : "hidden_act", "gelu_pytorch_tanh");
  s.tieWordEmbeddings = r.boolean("tie_word_embeddings", true);
  s.qkvBias = s.attentionOutputBias = r.boolean("attention_bias", false);
  // Gemma 2: every other layer slides a window (layer 0 first); Gemma 3: five local layers, then one
  // global (sliding_window_pattern), or the per-layer list of newer configs.
  const std::int64_t window = r.has("sliding_window") ? r.positiveInteger("sliding_window") : 4096;
  const std::int64_t period = gemma3 ? r.positiveInteger("sliding_window_pattern", 6) : 2;
  // Gemma 2 caps its logits (30 by default); Gemma 3 configs set null (it normalises q and k instead).
  const bool capNull = !r.has("final_logit_softcapping") || r.json().at("final_logit_softcapping").is_null();
  s.finalLogitSoftcap = capNull ? (r.has("final_logit_softcapping") ? 0.0 : s.finalLogitSoftcap)
                                : r.positiveNumber("final_logit_softcapping");
  // Gemma 2 also caps its attention scores (50 by default); Gemma 3 sets null.
  const bool attnCapNull = !r.has("attn_logit_softcapping") || r.json().at("attn_logit_softcapping").is_null();
  s.attentionLogitSoftcap = attnCapNull ? (r.has("attn_logit_softcapping") ? 0.0 : s.attentionLogitSoftcap)
                                        : r.positiveNumber("attn_logit_softcapping");
  slidingLayers(r, s, window, period);
  return s;
}

ModelSpec readGptOss(const JsonReader& r) {
  ModelSpec s = hfPreset("gpt_oss");
  readDecoderShape(r, s, 201088);
  s.maxPositionEmbeddings = r.positiveInteger("max_position_embeddings", 131072);
  s.activation = gated(r, "hidden_act", "silu");
  s.tieWordEmbeddings = r.boolean("tie_word_embeddings", false);
  s.qkvBias = s.attentionOutputBias = r.boolean("attention_bias", true);
  // Every layer is a mixture of experts of intermediate_size, each token routed to top-k.
  s.moe.numExperts = r.has("num_local_experts") ? r.positiveInteger("num_local_experts") : r.positiveInteger("num_experts");
  s.moe.topK = r.has("num_experts_per_tok") ? r.positiveInteger("num_experts_per_tok") : r.positiveInteger("experts_per_token");
  s.moe.expertFfnHiddenSize = s.ffnHiddenSize;
  // Sliding-window and full attention alternate, the sliding layer first.
  slidingLayers(r, s, r.positiveInteger("sliding_window", 128), 2);
  return s;
}

ModelSpec readLlama4Text(const JsonReader& r) {
  ModelSpec s = hfPreset("llama4");
  readDecoderShape(r, s, 202048);
  s.qkL2Norm = r.boolean("use_qk_norm", true);
  s.maxPositionEmbeddings = r.positiveInteger("max_position_embeddings", 131072);
  s.activation = gated(r, "hidden_act", "silu");
  s.tieWordEmbeddings = r.boolean("tie_word_embeddings", false);
  s.qkvBias = s.attentionOutputBias = r.boolean("attention_bias", false);
  // Dense layers use intermediate_size_mlp; experts and the one shared expert intermediate_size.
  const std::int64_t expertFfn = s.ffnHiddenSize;
  s.ffnHiddenSize = r.positiveInteger("intermediate_size_mlp", 2 * expertFfn);
  s.moe.numExperts = r.positiveInteger("num_local_experts", 16);
  s.moe.topK = r.positiveInteger("num_experts_per_tok", 1);
  s.moe.expertFfnHiddenSize = expertFfn;
  s.moe.sharedExpertFfnHiddenSize = expertFfn;
  s.moe.layerFrequency = r.positiveInteger("interleave_moe_layer_step", 1);
  if (s.moe.layerFrequency > s.numLayers) {
    r.fail("interleave_moe_layer_step", "must be at most num_hidden_layers " + std::to_string(s.numLayers));
  }
  // Chunked attention on the RoPE layers; every no_rope_layer_interval-th layer (NoPE) attends the
  // whole sequence. no_rope_layers lists 1 for a RoPE (chunked) layer, 0 for a NoPE one.
  if (r.has("attention_chunk_size")) {
    std::int64_t period = r.positiveInteger("no_rope_layer_interval", 4);
    if (r.has("no_rope_layers") && !r.json().at("no_rope_layers").empty()) {
      const Json& flags = r.json().at("no_rope_layers");
      if (!flags.is_array() || static_cast<std::int64_t>(flags.size()) != s.numLayers) {
        r.fail("no_rope_layers", "expected a 0/1 flag per layer (" + std::to_string(s.numLayers) + "), got " + flags.dump());
      }
      Json types = Json::array();
      for (const auto& f : flags) {
        if (!f.is_number_integer() || (f.get<int>() != 0 && f.get<int>() != 1)) {
          r.fail("no_rope_layers", "expected 0 or 1 per layer, got " + flags.dump());
        }
        types.push_back(f.get<int>() == 1 ? "chunked_attention" : "full_attention");
      }
      const Json listedJson{{"no_rope_layers", types}};
      const JsonReader listed(listedJson, r.file(), r.path());
      const auto found = periodOfLayerTypes(listed, "no_rope_layers", s.numLayers);
      period = found ? *found : -1;
    }
    if (period >= 0) {
      s.attentionChunkSize = r.positiveInteger("attention_chunk_size");
      s.globalAttentionEvery = period;
    }
  }
  return s;
}

ModelSpec readMultimodal(const JsonReader& r, const std::string& type) {
  const JsonReader text = r.object("text_config");
  ModelSpec s = type == "gemma3" ? readGemma(text, "gemma3_text") : readLlama4Text(text);
  if (!r.has("vision_config")) return s;
  const JsonReader v = r.object("vision_config");
  const std::int64_t textHidden = s.hiddenSize;
  if (type == "gemma3") {
    // SigLIP (SiglipVisionConfig defaults; Gemma 3 sets 896-pixel images), then the projector: an
    // RMSNorm over the vision width and one matrix into the text width.
    const std::int64_t h = v.positiveInteger("hidden_size", 768);
    const std::int64_t encoder = visionEncoderParams(v, h, v.positiveInteger("num_hidden_layers", 12),
                                                     v.positiveInteger("intermediate_size", 3072),
                                                     v.positiveInteger("num_attention_heads", 12),
                                                     v.positiveInteger("image_size", 224), v.positiveInteger("patch_size", 16));
    s.visionTowerParams = encoder + h + h * textHidden;
  } else {
    // Llama 4's vision encoder, its pixel-shuffle adapter MLP (fc1 from hidden / ratio^2 to the
    // projector input, fc2 to the projector output) and the projector into the text width.
    const std::int64_t h = v.positiveInteger("hidden_size", 768);
    const std::int64_t encoder = visionEncoderParams(v, h, v.positiveInteger("num_hidden_layers", 34),
                                                     v.positiveInteger("intermediate_size", 5632),
                                                     v.positiveInteger("num_attention_heads", 16),
                                                     v.positiveInteger("image_size", 448), v.positiveInteger("patch_size", 14));
    const double ratio = v.positiveNumber("pixel_shuffle_ratio", 0.5);
    const auto shuffled = static_cast<std::int64_t>(static_cast<double>(h) / (ratio * ratio));
    const std::int64_t in = v.positiveInteger("projector_input_dim", 4096);
    const std::int64_t out = v.positiveInteger("projector_output_dim", 4096);
    const std::int64_t visionOut = v.positiveInteger("vision_output_dim", 7680);
    s.visionTowerParams = encoder + shuffled * in + in * out + visionOut * textHidden;
  }
  return s;
}

}  // namespace colo::detail
