// Megatron-Bridge's job YAML (its ConfigContainer as `to_yaml` writes it, or an override file with the
// older `model_config:`/`train_config:` names) read as the Megatron-LM arguments it stands for, then by
// the Megatron-LM reader (import.h).
#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <vector>

#include "colo/planner/import.h"

namespace colo::planner {
namespace {

std::string trimmed(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const auto b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

// A value without its trailing comment and quotes.
std::string scalar(std::string v) {
  if (!v.empty() && (v.front() == '"' || v.front() == '\'')) {
    const auto close = v.find(v.front(), 1);
    return close == std::string::npos ? v.substr(1) : v.substr(1, close - 1);
  }
  const auto hash = v.find(" #");
  if (hash != std::string::npos) v = v.substr(0, hash);
  return trimmed(v);
}

// The block-style YAML these files use (nested mappings by indentation, `- item` lists, flow lists
// `[a, b]`), flattened: "section.key" -> the scalar, a list as "[a,b,...]". Anchors, multi-line
// strings and flow mappings do not occur in them and are refused.
Result<std::map<std::string, std::string>> flattenYaml(const std::string& text) {
  std::map<std::string, std::string> out;
  std::vector<std::pair<std::size_t, std::string>> path;  // (indent, key) of the open mappings
  std::string listKey;                                     // the key whose `- item` lines follow
  std::size_t listIndent = 0;
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const auto indent = line.find_first_not_of(' ');
    if (indent == std::string::npos) continue;
    const std::string body = trimmed(line.substr(indent));
    if (body.empty() || body.front() == '#' || body == "---") continue;
    auto bad = [&](const std::string& why) {
      return fail(Error::badInput("line " + std::to_string(number) + ": " + why + ": \"" + body + "\""));
    };
    if (line[indent] == '\t') return bad("tabs are not YAML indentation");
    if (body.rfind("- ", 0) == 0 || body == "-") {
      if (listKey.empty() || indent < listIndent) return bad("a list item without its key");
      std::string& list = out[listKey];
      list.insert(list.size() - 1, (list.size() > 2 ? "," : "") + scalar(body.substr(1)));
      continue;
    }
    const auto colon = body.find(": ") != std::string::npos ? body.find(": ") : (body.back() == ':' ? body.size() - 1 : std::string::npos);
    if (colon == std::string::npos || colon == 0) return bad("expected \"key: value\"");
    if (body.front() == '&' || body.front() == '*' || body.find(": |") != std::string::npos || body.find(": >") != std::string::npos) {
      return bad("anchors and block strings are not read");
    }
    while (!path.empty() && path.back().first >= indent) path.pop_back();
    const std::string key = scalar(body.substr(0, colon));
    std::string full;
    for (const auto& [i, k] : path) full += k + ".";
    full += key;
    const std::string value = colon + 1 < body.size() ? trimmed(body.substr(colon + 1)) : "";
    listKey.clear();
    if (value.empty()) {  // a nested mapping, or a list, follows
      path.emplace_back(indent, key);
      out[full] = "[]";
      listKey = full;
      listIndent = indent;
      continue;
    }
    if (value.front() == '{') return bad("flow mappings are not read");
    if (value.front() == '[') {
      std::string items = value.substr(1, value.find(']') == std::string::npos ? std::string::npos : value.find(']') - 1);
      items.erase(std::remove(items.begin(), items.end(), ' '), items.end());
      out[full] = "[" + items + "]";
      continue;
    }
    out[full] = scalar(value);
  }
  return out;
}

std::string dashed(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return "--" + key;
}

bool isTrue(const std::optional<std::string>& value) { return value && (*value == "true" || *value == "True"); }
bool isFalse(const std::optional<std::string>& value) { return value && (*value == "false" || *value == "False"); }

// The flattened config, read by section: each ConfigContainer section under its current and its older
// name; "null", "~" and empty values read as unset.
class BridgeConfig {
 public:
  explicit BridgeConfig(std::map<std::string, std::string> flat) : flat_(std::move(flat)) {}

  std::optional<std::string> get(std::initializer_list<const char*> sections, const std::string& key) const {
    for (const char* section : sections) {
      if (auto v = raw(std::string(section) + "." + key)) return v;
    }
    return std::nullopt;
  }
  std::optional<std::string> model(const std::string& key) const { return get({"model", "model_config"}, key); }
  std::optional<std::string> raw(const std::string& key) const {
    const auto it = flat_.find(key);
    if (it == flat_.end() || it->second == "null" || it->second == "~" || it->second.empty()) return std::nullopt;
    return it->second;
  }
  bool hasSection(const std::string& name) const {
    return std::any_of(flat_.begin(), flat_.end(), [&](const auto& kv) {
      return kv.first.rfind(name + ".", 0) == 0 || (kv.first == name && kv.second != "null" && kv.second != "~");
    });
  }
  // mixed_precision is a section, or a preset's name ("bf16_mixed") in override files; Megatron-Bridge
  // looks presets up with '-' read as '_' (bf16-with-fp8-delayed-scaling-mixed).
  std::string presetName() const {
    const auto it = flat_.find("mixed_precision");
    std::string name = it != flat_.end() && it->second != "[]" ? it->second : "";
    std::replace(name.begin(), name.end(), '-', '_');
    return name;
  }

 private:
  std::map<std::string, std::string> flat_;
};

// Knowledge distillation (Bridge's DistillationProvider: model.teacher and model.kd_config) runs a
// teacher model's forward beside the student every micro-batch and keeps its weights: a job colo
// does not cost. Refused by name rather than costed as the student alone.
Result<void> refuseDistillation(const BridgeConfig& c) {
  for (const char* section : {"model.teacher", "model_config.teacher", "model.kd_config", "model_config.kd_config"}) {
    if (c.raw(section)) {
      return fail(Error::badInput(std::string(section) + ": knowledge distillation (a teacher model's forward beside the "
                                  "student's training) is not costed by colo; import the student's job without it"));
    }
  }
  return {};
}

// A list value ("[a,b]") as Megatron's space-separated words.
std::string words(const std::string& list) {
  std::string out;
  for (const char ch : list) out += (ch == '[' || ch == ']' || ch == ',' || ch == '\'' || ch == '"') ? ' ' : ch;
  return out;
}

// The model section: TransformerConfig's fields are Megatron-LM's argument names with underscores.
void modelArguments(const BridgeConfig& c, std::ostream& args) {
  auto flag = [&](const std::string& name, const std::optional<std::string>& value) {
    if (value) args << name << " " << *value << "\n";
  };
  for (const char* key : {"num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_channels", "seq_length",
                          "max_position_embeddings", "vocab_size", "position_embedding_type", "rotary_base", "rotary_percent",
                          "normalization", "hidden_dropout", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                          "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size", "cp_comm_type",
                          "pipeline_model_parallel_layout", "recompute_granularity", "recompute_method", "recompute_num_layers",
                          "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_layer_freq",
                          "mtp_num_layers", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
                          "window_size", "softmax_type", "moe_router_num_groups", "moe_router_group_topk",
                          "moe_token_dispatcher_type", "moe_flex_dispatcher_backend"}) {
    if (std::string_view(key) == "recompute_granularity" && c.model("recompute_modules") == std::optional<std::string>("[]")) continue;
    flag(dashed(key), c.model(key));
  }
  // Hierarchical context parallelism's sizes, a list: Megatron's argument takes them as words.
  if (auto sizes = c.model("hierarchical_context_parallel_sizes")) args << "--hierarchical-context-parallel-sizes " << words(*sizes) << "\n";
  // recompute_modules, a list: Megatron's argument takes the names as words. An empty list is selective
  // recompute of nothing (Bridge's recipes set [] to turn it off): no recompute.
  if (auto modules = c.model("recompute_modules")) {
    const std::string names = words(*modules);
    if (names.find_first_not_of(' ') != std::string::npos) args << "--recompute-modules " << names << "\n";
  }
  if (isTrue(c.model("moe_layer_recompute"))) args << "--moe-layer-recompute\n";
  flag("--num-virtual-stages-per-pipeline-rank", c.model("virtual_pipeline_model_parallel_size"));
  // Transformer Engine unless the config says otherwise; Megatron's gradient-accumulation fusion unless
  // it is switched off (ModelParallelConfig.gradient_accumulation_fusion).
  flag("--transformer-impl", c.model("transformer_impl"));
  if (isFalse(c.model("gradient_accumulation_fusion"))) args << "--no-gradient-accumulation-fusion\n";
  flag("--num-experts", c.model("num_moe_experts"));
  flag("--decoder-first-pipeline-num-layers", c.model("num_layers_in_first_pipeline_stage"));
  flag("--decoder-last-pipeline-num-layers", c.model("num_layers_in_last_pipeline_stage"));
  if (const auto groups = c.model("num_query_groups"); groups && groups != c.model("num_attention_heads")) {
    args << "--group-query-attention\n--num-query-groups " << *groups << "\n";
  }
  // Gated linear units with SiLU are SwiGLU (the activation is a `_target_` of torch's functions).
  const auto activation = c.model("activation_func._target_").value_or("");
  if (isTrue(c.model("gated_linear_unit")) && (activation.empty() || activation.find("silu") != std::string::npos)) args << "--swiglu\n";
  if (c.model("share_embeddings_and_output_weights") == std::optional<std::string>("false")) args << "--untie-embeddings-and-output-weights\n";
  if (c.model("add_bias_linear") == std::optional<std::string>("false")) args << "--disable-bias-linear\n";
  for (const auto& [key, name] : std::vector<std::pair<const char*, const char*>>{
           {"sequence_parallel", "--sequence-parallel"}, {"multi_latent_attention", "--multi-latent-attention"},
           {"qk_layernorm", "--qk-layernorm"}, {"tp_comm_overlap", "--tp-comm-overlap"}, {"moe_enable_deepep", "--moe-enable-deepep"},
           {"account_for_embedding_in_pipeline_split", "--account-for-embedding-in-pipeline-split"},
           {"account_for_loss_in_pipeline_split", "--account-for-loss-in-pipeline-split"}}) {
    if (isTrue(c.model(key))) args << name << "\n";
  }
  // Megatron-Bridge's MoE model providers set moe_grouped_gemm (Transformer Engine's GroupedLinear); a
  // config that leaves the key out keeps its provider's default, one that says false runs SequentialMLP.
  if (c.model("num_moe_experts") && !isFalse(c.model("moe_grouped_gemm"))) args << "--moe-grouped-gemm\n";
  // Megatron-Bridge's comm_overlap section names the expert all-to-all overlap too.
  if (isTrue(c.model("overlap_moe_expert_parallel_comm")) || isTrue(c.get({"comm_overlap"}, "overlap_moe_expert_parallel_comm"))) {
    args << "--overlap-moe-expert-parallel-comm\n";
  }
  // The model providers fuse rotary embedding and the bias-activation (apply_rope_fusion and
  // bias_activation_fusion default True in Bridge's GPTModelProvider); a config may turn them off.
  if (isFalse(c.model("apply_rope_fusion"))) args << "--no-rope-fusion\n";
  if (isFalse(c.model("bias_activation_fusion"))) args << "--no-bias-swiglu-fusion\n";
  // GPTModelProvider fuses the loss (cross_entropy_loss_fusion = True), with Megatron-Core's native
  // implementation unless cross_entropy_fusion_impl says te.
  if (!isFalse(c.model("cross_entropy_loss_fusion"))) {
    args << "--cross-entropy-loss-fusion\n";
    if (const auto impl = c.model("cross_entropy_fusion_impl"); impl && *impl == "te") args << "--cross-entropy-fusion-impl te\n";
  }
}

// Batch, sequence, data parallelism and offload: the train, dataset, ddp, comm_overlap and optimizer
// sections, and the model's activation offload.
void trainingArguments(const BridgeConfig& c, std::ostream& args) {
  auto flag = [&](const std::string& name, const std::optional<std::string>& value) {
    if (value) args << name << " " << *value << "\n";
  };
  flag("--global-batch-size", c.get({"train", "train_config"}, "global_batch_size"));
  flag("--micro-batch-size", c.get({"train", "train_config"}, "micro_batch_size"));
  if (!c.model("seq_length")) flag("--seq-length", c.get({"dataset", "dataset_config"}, "sequence_length"));
  if (isTrue(c.get({"ddp", "ddp_config"}, "use_distributed_optimizer"))) args << "--use-distributed-optimizer\n";
  if (isTrue(c.get({"ddp", "ddp_config", "comm_overlap"}, "overlap_grad_reduce"))) args << "--overlap-grad-reduce\n";
  if (isTrue(c.get({"ddp", "ddp_config", "comm_overlap"}, "overlap_param_gather"))) args << "--overlap-param-gather\n";
  if (isTrue(c.get({"comm_overlap"}, "tp_comm_overlap"))) args << "--tp-comm-overlap\n";
  // Activation offload: cpu_offloading is Megatron-Core's switch (the layer count does nothing without
  // it), and it moves activations unless cpu_offloading_activations is false.
  if (isTrue(c.model("cpu_offloading")) && !isFalse(c.model("cpu_offloading_activations"))) {
    flag("--cpu-offloading-num-layers", c.model("cpu_offloading_num_layers"));
  }
  if (isTrue(c.get({"optimizer", "optimizer_config"}, "optimizer_cpu_offload"))) {
    args << "--optimizer-cpu-offload\n";
    flag("--optimizer-offload-fraction", c.get({"optimizer", "optimizer_config"}, "optimizer_offload_fraction"));
  }
}

// A stated value that is not one of the words for "off".
bool stated(const std::optional<std::string>& v) {
  if (!v) return false;
  std::string t = *v;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return t != "false" && t != "null" && t != "none" && t != "~" && !t.empty();
}

// Precision: the mixed_precision section, or the preset it names.
void precisionArguments(const BridgeConfig& c, std::ostream& args) {
  const std::string preset = c.presetName();
  const auto mp = [&](const char* key) { return c.get({"mixed_precision"}, key); };
  if (isTrue(mp("bf16")) || isTrue(c.model("bf16")) || preset.find("bf16") != std::string::npos) args << "--bf16\n";
  else if (isTrue(mp("fp16")) || isTrue(c.model("fp16")) || preset.find("fp16") != std::string::npos) args << "--fp16\n";
  // fp8 and fp4 as the section says, or as the preset named: bf16_with_fp8_delayed_scaling_mixed,
  // ..._current_scaling_mixed and ..._subchannel_scaling_mixed set fp8 "hybrid", bf16_with_mxfp8_mixed
  // "e4m3", bf16_with_nvfp4_mixed fp4 "e2m1" (src/megatron/bridge/training/mixed_precision.py).
  if (const auto fp8 = mp("fp8"); stated(fp8)) args << "--fp8-format " << *fp8 << "\n";
  else if (preset.find("mxfp8") != std::string::npos) args << "--fp8-format e4m3\n";
  else if (preset.find("fp8") != std::string::npos) args << "--fp8-format hybrid\n";
  if (const auto fp4 = mp("fp4"); stated(fp4)) args << "--fp4-format " << *fp4 << "\n";
  else if (preset.find("fp4") != std::string::npos) args << "--fp4-format e2m1\n";
  // The recipe, and whether the weights are TE's quantized tensors: the section's fp8_recipe and
  // fp8_param_gather (or fp8_param; fp4_param_gather), else the preset's. The delayed, current-scaling
  // and MXFP8 presets turn fp8_param_gather on, the sub-channel (blockwise) one leaves it off, the
  // NVFP4 one sets fp4_param_gather (src/megatron/bridge/training/mixed_precision.py).
  if (const auto recipe = mp("fp8_recipe"); stated(recipe)) args << "--fp8-recipe " << *recipe << "\n";
  else if (preset.find("mxfp8") != std::string::npos) args << "--fp8-recipe mxfp8\n";
  auto said = [&](const char* key) -> std::optional<bool> {
    const auto v = mp(key);
    if (!v || *v == "None") return std::nullopt;
    return isTrue(v);
  };
  const bool presetGathers = preset.find("delayed_scaling") != std::string::npos ||
                             preset.find("current_scaling") != std::string::npos || preset.find("mxfp8") != std::string::npos;
  // Megatron-Core keeps them quantized only under the distributed optimizer (or FSDP, which colo's import
  // reads from Megatron-LM launches only): without it a preset's setting has no effect here.
  const bool distributed = isTrue(c.get({"ddp", "ddp_config"}, "use_distributed_optimizer"));
  if (distributed && said("fp8_param_gather").value_or(said("fp8_param").value_or(presetGathers))) args << "--fp8-param-gather\n";
  if (distributed && said("fp4_param_gather").value_or(preset.find("nvfp4") != std::string::npos)) args << "--fp4-param-gather\n";
}

// What Megatron-Bridge sets that Megatron-LM's arguments do not say, on the imported plan.
Result<void> applyBridgeSettings(const BridgeConfig& c, Plan& plan) {
  // Megatron-Bridge's recipes check the gradients for NaN (ddp.check_for_nan_in_grad = True in every
  // pretrain config, src/megatron/bridge/recipes), precision aside (Bridge does not run Megatron-LM's
  // validate_args): on unless the config turns it off.
  plan.execution.gradNanCheck = !isFalse(c.get({"ddp", "ddp_config"}, "check_for_nan_in_grad"));
  // model.fp8_output_proj (Megatron-Core, May 2026 on): the output layer is a Transformer Engine linear
  // under MXFP8; what Megatron-Core refuses with it, fp8OutputProjRefusal names.
  if (isTrue(c.model("fp8_output_proj"))) {
    plan.execution.fp8OutputProj = true;
    if (auto why = fp8OutputProjRefusal(plan)) return fail(Error::badInput("model.fp8_output_proj: true " + *why));
  }
  // ddp.grad_reduce_in_fp32: false keeps Megatron's gradient buffer in bf16 (the recipes set it true).
  if (isFalse(c.get({"ddp", "ddp_config"}, "grad_reduce_in_fp32")) &&
      (plan.precision == DType::kBf16 || quantizedGemms(plan.precision)) &&
      (plan.execution.gradAccumulation == GradAccumulation::kFused || plan.execution.gradAccumulation == GradAccumulation::kMainGrad)) {
    plan.execution.gradReduceBf16 = true;
  }
  // Pipeline sends beside compute: the comm_overlap section's own value; else, with that section,
  // CommOverlapConfig's rule (on with virtual stages, _get_model_comm_overlap_cfgs); else Megatron-Core's
  // ModelParallelConfig as written (overlap_p2p_comm, default False).
  if (const auto set = c.get({"comm_overlap"}, "overlap_p2p_comm")) {
    plan.execution.overlapP2pComm = isTrue(set);
  } else if (!c.hasSection("comm_overlap")) {
    plan.execution.overlapP2pComm = isTrue(c.model("overlap_p2p_comm"));
  }
  return {};
}

}  // namespace

Result<Plan> importMegatronBridge(const std::string& yaml, const ImportContext& context) {
  auto flat = flattenYaml(yaml);
  if (!flat) return fail(flat.error());
  const BridgeConfig config(std::move(*flat));
  if (auto refused = refuseDistillation(config); !refused) return fail(refused.error());
  std::ostringstream args;
  modelArguments(config, args);
  trainingArguments(config, args);
  precisionArguments(config, args);
  auto plan = importMegatron(args.str(), context);
  if (!plan) {
    // The arguments are colo's translation: name the config's own words where they were the cause.
    Error e = plan.error();
    const std::string source =
        config.get({"mixed_precision"}, "fp8_recipe") ? "mixed_precision.fp8_recipe" : "mixed_precision: " + config.presetName();
    if (e.message.rfind("--fp8-recipe mxfp8", 0) == 0) e.message = source + " (" + e.message + ")";
    return fail(e);
  }
  if (auto applied = applyBridgeSettings(config, *plan); !applied) return fail(applied.error());
  plan->name = plan->model.name() + " (imported from a Megatron-Bridge config)";
  return plan;
}

}  // namespace colo::planner
