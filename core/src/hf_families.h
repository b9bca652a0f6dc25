#pragma once
// Readers of the Hugging Face config families of 2024-26 (hf_families.cpp), called by
// modelSpecFromHfConfig (hf_config.cpp): each maps one model_type's keys to a ModelSpec, with the
// defaults of the transformers library's config class where a key is absent.
#include <string>

#include "colo/core/model_spec.h"
#include "json_reader.h"

namespace colo::detail {

/// The family's preset (familyPreset), which exists for every type read here.
[[nodiscard]] ModelSpec hfPreset(const std::string& family);

/// phi3: LLaMA's keys, an optional sliding window on every layer, a partial rotary factor.
[[nodiscard]] ModelSpec readPhi3(const JsonReader& r);
/// gemma2 and gemma3_text: GeGLU, tied vocabulary, norms around both sub-layers, sliding-window layers
/// with a full-attention layer every 2 (Gemma 2) or 6 (Gemma 3) layers, QK-norm (Gemma 3).
[[nodiscard]] ModelSpec readGemma(const JsonReader& r, const std::string& type);
/// gpt_oss: alternating sliding-window and full attention, attention sinks, biased experts and router.
[[nodiscard]] ModelSpec readGptOss(const JsonReader& r);
/// llama4_text: chunked attention with a global (NoPE) layer every 4, routed + shared experts every
/// interleave_moe_layer_step layers, dense layers of intermediate_size_mlp.
[[nodiscard]] ModelSpec readLlama4Text(const JsonReader& r);

/// A multimodal wrapper (gemma3, llama4): the text model from `text_config`, the vision tower's
/// parameters from `vision_config` counted apart (ModelSpec::visionTowerParams).
[[nodiscard]] ModelSpec readMultimodal(const JsonReader& r, const std::string& type);

}  // namespace colo::detail
