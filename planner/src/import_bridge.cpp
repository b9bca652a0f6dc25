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

}  // namespace

Result<Plan> importMegatronBridge(const std::string& yaml, const ImportContext& context) {
  auto flat = flattenYaml(yaml);
  if (!flat) return fail(flat.error());
  // Each ConfigContainer section under its current and its older name.
  auto get = [&](std::initializer_list<const char*> sections, const std::string& key) -> std::optional<std::string> {
    for (const char* section : sections) {
      const auto it = flat->find(std::string(section) + "." + key);
      if (it != flat->end() && it->second != "null" && it->second != "~" && !it->second.empty()) return it->second;
    }
    return std::nullopt;
  };
  auto model = [&](const std::string& key) { return get({"model", "model_config"}, key); };
  // Knowledge distillation (Bridge's DistillationProvider: model.teacher and model.kd_config) runs a
  // teacher model's forward beside the student every micro-batch and keeps its weights: a job colo
  // does not cost. Refused by name rather than costed as the student alone.
  for (const char* section : {"model.teacher", "model_config.teacher", "model.kd_config", "model_config.kd_config"}) {
    if (const auto it = flat->find(section); it != flat->end() && it->second != "null" && it->second != "~" && !it->second.empty()) {
      return fail(Error::badInput(std::string(section) + ": knowledge distillation (a teacher model's forward beside the "
                                  "student's training) is not costed by colo; import the student's job without it"));
    }
  }
  std::ostringstream args;
  auto flag = [&](const std::string& name, const std::optional<std::string>& value) {
    if (value) args << name << " " << *value << "\n";
  };
  auto on = [&](const std::optional<std::string>& value) { return value && (*value == "true" || *value == "True"); };
  // The model: TransformerConfig's fields are Megatron-LM's argument names with underscores.
  for (const char* key : {"num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_channels", "seq_length",
                          "max_position_embeddings", "vocab_size", "position_embedding_type", "rotary_base", "rotary_percent",
                          "normalization", "hidden_dropout", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                          "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size", "cp_comm_type",
                          "pipeline_model_parallel_layout", "recompute_granularity", "recompute_method", "recompute_num_layers",
                          "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_layer_freq",
                          "mtp_num_layers", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
                          "window_size", "softmax_type", "moe_router_num_groups", "moe_router_group_topk",
                          "moe_token_dispatcher_type", "moe_flex_dispatcher_backend"}) {
    if (std::string_view(key) == "recompute_granularity" && model("recompute_modules") == std::optional<std::string>("[]")) continue;
    flag(dashed(key), model(key));
  }
  // Hierarchical context parallelism's sizes, a list: Megatron's argument takes them as words.
  if (auto sizes = model("hierarchical_context_parallel_sizes")) {
    std::string words;
    for (const char ch : *sizes) words += (ch == '[' || ch == ']' || ch == ',') ? ' ' : ch;
    args << "--hierarchical-context-parallel-sizes " << words << "\n";
  }
  // recompute_modules, a list: Megatron's argument takes the names as words. An empty list is selective
  // recompute of nothing (Bridge's recipes set [] to turn it off): no recompute.
  if (auto modules = model("recompute_modules")) {
    std::string words;
    for (const char ch : *modules) words += (ch == '[' || ch == ']' || ch == ',' || ch == '\'' || ch == '"') ? ' ' : ch;
    if (words.find_first_not_of(' ') != std::string::npos) args << "--recompute-modules " << words << "\n";
  }
  if (on(model("moe_layer_recompute"))) args << "--moe-layer-recompute\n";
  flag("--num-virtual-stages-per-pipeline-rank", model("virtual_pipeline_model_parallel_size"));
  // Transformer Engine unless the config says otherwise; Megatron's gradient-accumulation fusion unless
  // it is switched off (ModelParallelConfig.gradient_accumulation_fusion).
  flag("--transformer-impl", model("transformer_impl"));
  if (const auto fusion = model("gradient_accumulation_fusion"); fusion && (*fusion == "false" || *fusion == "False")) {
    args << "--no-gradient-accumulation-fusion\n";
  }
  flag("--num-experts", model("num_moe_experts"));
  flag("--decoder-first-pipeline-num-layers", model("num_layers_in_first_pipeline_stage"));
  flag("--decoder-last-pipeline-num-layers", model("num_layers_in_last_pipeline_stage"));
  if (const auto groups = model("num_query_groups"); groups && groups != model("num_attention_heads")) {
    args << "--group-query-attention\n--num-query-groups " << *groups << "\n";
  }
  // Gated linear units with SiLU are SwiGLU (the activation is a `_target_` of torch's functions).
  const auto activation = model("activation_func._target_").value_or("");
  if (on(model("gated_linear_unit")) && (activation.empty() || activation.find("silu") != std::string::npos)) args << "--swiglu\n";
  if (model("share_embeddings_and_output_weights") == std::optional<std::string>("false")) args << "--untie-embeddings-and-output-weights\n";
  if (model("add_bias_linear") == std::optional<std::string>("false")) args << "--disable-bias-linear\n";
  for (const auto& [key, name] : std::vector<std::pair<const char*, const char*>>{
           {"sequence_parallel", "--sequence-parallel"}, {"multi_latent_attention", "--multi-latent-attention"},
           {"qk_layernorm", "--qk-layernorm"}, {"tp_comm_overlap", "--tp-comm-overlap"}, {"moe_enable_deepep", "--moe-enable-deepep"},
           {"account_for_embedding_in_pipeline_split", "--account-for-embedding-in-pipeline-split"},
           {"account_for_loss_in_pipeline_split", "--account-for-loss-in-pipeline-split"}}) {
    if (on(model(key))) args << name << "\n";
  }
  // Megatron-Bridge's MoE model providers set moe_grouped_gemm (Transformer Engine's GroupedLinear); a
  // config that leaves the key out keeps its provider's default, one that says false runs SequentialMLP.
  const auto grouped = model("moe_grouped_gemm");
  if (model("num_moe_experts") && !(grouped && (*grouped == "false" || *grouped == "False"))) args << "--moe-grouped-gemm\n";
  // Megatron-Bridge's comm_overlap section names the expert all-to-all overlap too.
  if (on(model("overlap_moe_expert_parallel_comm")) || on(get({"comm_overlap"}, "overlap_moe_expert_parallel_comm"))) {
    args << "--overlap-moe-expert-parallel-comm\n";
  }
  // Batch, sequence, data parallelism, precision, offload.
  flag("--global-batch-size", get({"train", "train_config"}, "global_batch_size"));
  flag("--micro-batch-size", get({"train", "train_config"}, "micro_batch_size"));
  if (!model("seq_length")) flag("--seq-length", get({"dataset", "dataset_config"}, "sequence_length"));
  if (on(get({"ddp", "ddp_config"}, "use_distributed_optimizer"))) args << "--use-distributed-optimizer\n";
  if (on(get({"ddp", "ddp_config", "comm_overlap"}, "overlap_grad_reduce"))) args << "--overlap-grad-reduce\n";
  if (on(get({"ddp", "ddp_config", "comm_overlap"}, "overlap_param_gather"))) args << "--overlap-param-gather\n";
  if (on(get({"comm_overlap"}, "tp_comm_overlap"))) args << "--tp-comm-overlap\n";
  // mixed_precision is a section, or a preset's name ("bf16_mixed") in override files.
  const auto precision = flat->find("mixed_precision");
  // Megatron-Bridge looks presets up with '-' read as '_' (bf16-with-fp8-delayed-scaling-mixed).
  std::string presetName = precision != flat->end() && precision->second != "[]" ? precision->second : "";
  std::replace(presetName.begin(), presetName.end(), '-', '_');
  if (on(get({"mixed_precision"}, "bf16")) || on(model("bf16")) || presetName.find("bf16") != std::string::npos) args << "--bf16\n";
  else if (on(get({"mixed_precision"}, "fp16")) || on(model("fp16")) || presetName.find("fp16") != std::string::npos) args << "--fp16\n";
  // fp8 and fp4 as the section says, or as the preset named: bf16_with_fp8_delayed_scaling_mixed,
  // ..._current_scaling_mixed and ..._subchannel_scaling_mixed set fp8 "hybrid", bf16_with_mxfp8_mixed
  // "e4m3", bf16_with_nvfp4_mixed fp4 "e2m1" (src/megatron/bridge/training/mixed_precision.py).
  const auto fp8 = get({"mixed_precision"}, "fp8");
  const auto fp4 = get({"mixed_precision"}, "fp4");
  auto stated = [](const std::optional<std::string>& v) {
    if (!v) return false;
    std::string t = *v;
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return t != "false" && t != "null" && t != "none" && t != "~" && !t.empty();
  };
  if (stated(fp8)) args << "--fp8-format " << *fp8 << "\n";
  else if (presetName.find("mxfp8") != std::string::npos) args << "--fp8-format e4m3\n";
  else if (presetName.find("fp8") != std::string::npos) args << "--fp8-format hybrid\n";
  if (stated(fp4)) args << "--fp4-format " << *fp4 << "\n";
  else if (presetName.find("fp4") != std::string::npos) args << "--fp4-format e2m1\n";
  // The recipe, and whether the weights are TE's quantized tensors: the section's fp8_recipe and
  // fp8_param_gather (or fp8_param; fp4_param_gather), else the preset's. The delayed, current-scaling
  // and MXFP8 presets turn fp8_param_gather on, the sub-channel (blockwise) one leaves it off, the
  // NVFP4 one sets fp4_param_gather (src/megatron/bridge/training/mixed_precision.py).
  if (const auto recipe = get({"mixed_precision"}, "fp8_recipe"); stated(recipe)) args << "--fp8-recipe " << *recipe << "\n";
  else if (presetName.find("mxfp8") != std::string::npos) args << "--fp8-recipe mxfp8\n";
  auto said = [&](const char* key) -> std::optional<bool> {
    const auto v = get({"mixed_precision"}, key);
    if (!v || *v == "null" || *v == "None" || *v == "~") return std::nullopt;
    return on(v);
  };
  const bool presetGathers = presetName.find("delayed_scaling") != std::string::npos ||
                             presetName.find("current_scaling") != std::string::npos ||
                             presetName.find("mxfp8") != std::string::npos;
  // Megatron-Core keeps them quantized only under the distributed optimizer (or FSDP, which colo's import
  // reads from Megatron-LM launches only): without it a preset's setting has no effect here.
  const bool distributed = on(get({"ddp", "ddp_config"}, "use_distributed_optimizer"));
  if (distributed && said("fp8_param_gather").value_or(said("fp8_param").value_or(presetGathers))) args << "--fp8-param-gather\n";
  if (distributed && said("fp4_param_gather").value_or(presetName.find("nvfp4") != std::string::npos)) args << "--fp4-param-gather\n";
  auto off = [](const std::optional<std::string>& value) { return value && (*value == "false" || *value == "False"); };
  // Activation offload: cpu_offloading is Megatron-Core's switch (the layer count does nothing without
  // it), and it moves activations unless cpu_offloading_activations is false.
  if (on(model("cpu_offloading")) && !off(model("cpu_offloading_activations"))) {
    flag("--cpu-offloading-num-layers", model("cpu_offloading_num_layers"));
  }
  if (on(get({"optimizer", "optimizer_config"}, "optimizer_cpu_offload"))) {
    args << "--optimizer-cpu-offload\n";
    flag("--optimizer-offload-fraction", get({"optimizer", "optimizer_config"}, "optimizer_offload_fraction"));
  }
  // The model providers fuse rotary embedding and the bias-activation (apply_rope_fusion and
  // bias_activation_fusion default True in Bridge's GPTModelProvider); a config may turn them off.
  if (off(model("apply_rope_fusion"))) args << "--no-rope-fusion\n";
  if (off(model("bias_activation_fusion"))) args << "--no-bias-swiglu-fusion\n";
  // GPTModelProvider fuses the loss (cross_entropy_loss_fusion = True), with Megatron-Core's native
  // implementation unless cross_entropy_fusion_impl says te.
  if (!off(model("cross_entropy_loss_fusion"))) {
    args << "--cross-entropy-loss-fusion\n";
    if (const auto impl = model("cross_entropy_fusion_impl"); impl && *impl == "te") args << "--cross-entropy-fusion-impl te\n";
  }
  auto plan = importMegatron(args.str(), context);
  if (!plan) {
    // The arguments are colo's translation: name the config's own words where they were the cause.
    Error e = plan.error();
    const std::string source = get({"mixed_precision"}, "fp8_recipe") ? "mixed_precision.fp8_recipe" : "mixed_precision: " + presetName;
    if (e.message.rfind("--fp8-recipe mxfp8", 0) == 0) e.message = source + " (" + e.message + ")";
    return fail(e);
  }
  // Megatron-Bridge's recipes check the gradients for NaN (ddp.check_for_nan_in_grad = True in every
  // pretrain config, src/megatron/bridge/recipes), precision aside (Bridge does not run Megatron-LM's
  // validate_args): on unless the config turns it off.
  plan->execution.gradNanCheck = !off(get({"ddp", "ddp_config"}, "check_for_nan_in_grad"));
  // model.fp8_output_proj (Megatron-Core, May 2026 on): the output layer is a Transformer Engine linear
  // under MXFP8; what Megatron-Core refuses with it, fp8OutputProjRefusal names.
  if (on(model("fp8_output_proj"))) {
    plan->execution.fp8OutputProj = true;
    if (auto why = fp8OutputProjRefusal(*plan)) return fail(Error::badInput("model.fp8_output_proj: true " + *why));
  }
  // ddp.grad_reduce_in_fp32: false keeps Megatron's gradient buffer in bf16 (the recipes set it true).
  if (off(get({"ddp", "ddp_config"}, "grad_reduce_in_fp32")) &&
      (plan->precision == DType::kBf16 || quantizedGemms(plan->precision)) &&
      (plan->execution.gradAccumulation == GradAccumulation::kFused || plan->execution.gradAccumulation == GradAccumulation::kMainGrad)) {
    plan->execution.gradReduceBf16 = true;
  }
  // Pipeline sends beside compute: the comm_overlap section's own value; else, with that section,
  // CommOverlapConfig's rule (on with virtual stages, _get_model_comm_overlap_cfgs); else Megatron-Core's
  // ModelParallelConfig as written (overlap_p2p_comm, default False).
  const bool commOverlapSection = std::any_of(flat->begin(), flat->end(), [](const auto& kv) {
    return kv.first.rfind("comm_overlap.", 0) == 0 || (kv.first == "comm_overlap" && kv.second != "null" && kv.second != "~");
  });
  if (const auto set = get({"comm_overlap"}, "overlap_p2p_comm")) {
    plan->execution.overlapP2pComm = on(set);
  } else if (!commOverlapSection) {
    plan->execution.overlapP2pComm = on(model("overlap_p2p_comm"));
  }
  plan->name = plan->model.name() + " (imported from a Megatron-Bridge config)";
  return plan;
}

}  // namespace colo::planner
