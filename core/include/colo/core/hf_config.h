#pragma once
/// \file
/// Reads a Hugging Face `config.json` as-is into a ModelSpec. Supported `model_type`s:
/// supportedHfModelTypes() (GPT-2, GPT-NeoX, LLaMA, Mistral, Mixtral, Qwen2/3 and their MoE, DeepSeek
/// V2/V3, Phi-3, Gemma 2/3, GPT-OSS, Llama 4, OPT, BLOOM, BERT, ViT); multimodal wrappers (gemma3,
/// llama4) plan their `text_config` and count the `vision_config` tower apart. Keys are mapped per type (e.g.
/// `n_embd`/`hidden_size`, `n_layer`/`num_hidden_layers`, `num_key_value_heads`,
/// `intermediate_size`, `tie_word_embeddings`) with the defaults of the transformers library's config
/// classes where a key is absent; unknown keys are ignored (HF configs carry many).

#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/model_spec.h"

namespace colo {

/// The model types fromHfConfig understands.
[[nodiscard]] const std::vector<std::string>& supportedHfModelTypes();

/// Maps an HF config to a spec. `file` labels errors and names the model when the config has no
/// `_name_or_path`. Errors: kBadInput for an unknown model_type or a missing/invalid key, naming it.
[[nodiscard]] Result<ModelSpec> modelSpecFromHfConfig(const Json& config, const std::string& file);

}  // namespace colo
