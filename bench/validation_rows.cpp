// Published rows to colo plans (data/validation/README.md, "Reading a row colo has never seen").
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <regex>

#include "colo/core/library.h"
#include "colo/core/limits.h"
#include "colo/core/model.h"
#include "colo/costmodel/evaluator.h"
#include "validation_harness.h"
#include "validation_rows_detail.h"

namespace colo::validation {

using namespace detail;

namespace {

// ---- measurement ------------------------------------------------------------------------------------

// FLOPs per iteration under the convention a row's TFLOP/s uses (docs: VALIDATION.md).
double conventionFlops(const std::string& convention, const ModelSpec& s, double samples) {
  const std::string c = lower(convention);
  const double B = samples, S = static_cast<double>(s.seqLen), L = static_cast<double>(s.numLayers);
  const double h = static_cast<double>(s.hiddenSize), V = static_cast<double>(s.vocabSize);
  if (has(c, "96")) return 96.0 * B * S * L * h * h * (1.0 + S / (6.0 * h) + V / (16.0 * L * h));
  if (has(c, "s/3h") || has(c, "s/(3h)")) return 72.0 * B * S * L * h * h * (1.0 + S / (3.0 * h) + V / (12.0 * L * h));  // Korthikanti HFU, selective
  if (has(c, "6n") || has(c, "palm")) {
    const double n = static_cast<double>(countParameters(s).total - countParameters(s).embedding);
    const double tokens = B * S;
    return tokens * (6.0 * n + 12.0 * L * h * S);
  }
  // Megatron-Core: 12·B·s·l·h²·[(1 + g/a + s/h)·(q/h) + (ffn/h)·gated + V/(2lh)], q = a·head_dim.
  const double a = static_cast<double>(s.numAttentionHeads), g = static_cast<double>(s.kvHeads());
  const double q = a * static_cast<double>(s.headSize());
  const double gated = s.gatedMlp() ? 1.5 : 1.0;
  return 12.0 * B * S * L * h * h *
         ((1.0 + g / a + S / h) * (q / h) + (static_cast<double>(s.ffnHiddenSize) / h) * gated + V / (2.0 * L * h));
}


// Other names sources and frameworks use for the fields the harness reads (Megatron's argument names,
// Hugging Face config names, short forms): each is read as its canonical field when that is absent.
Json withCanonicalNames(const Json& row) {
  static const std::vector<std::pair<const char*, std::vector<std::pair<const char*, std::vector<const char*>>>>> aliases{
      {"model",
       {{"num_layers", {"n_layers", "n_layer", "num_hidden_layers", "layers"}},
        {"hidden_size", {"d_model", "n_embd", "hidden", "hidden_dim"}},
        {"num_attention_heads", {"n_heads", "n_head", "num_heads", "heads", "attention_heads"}},
        {"ffn_hidden_size", {"intermediate_size", "ffn_hidden", "d_ff", "ffn_size", "ffn_dim"}},
        {"seq_len", {"seq_length", "sequence_length", "max_seq_len", "context_length", "seqlen"}},
        {"vocab_size", {"vocab", "padded_vocab_size"}},
        {"num_key_value_heads", {"n_kv_heads", "kv_heads"}}}},
      {"parallel",
       {{"tp", {"tensor_parallel", "tensor_parallel_size", "tensor_model_parallel_size", "tp_size"}},
        {"pp", {"pipeline_parallel", "pipeline_parallel_size", "pipeline_model_parallel_size", "pp_size"}},
        {"dp", {"data_parallel", "data_parallel_size", "dp_size"}},
        {"cp", {"context_parallel", "context_parallel_size", "cp_size"}},
        {"ep", {"expert_parallel", "expert_parallel_size", "expert_model_parallel_size", "ep_size"}},
        {"etp", {"expert_tp", "expert_tensor_parallel_size", "expert_tensor_parallel", "etp_size"}},
        {"virtual_pipeline_stages", {"virtual_pipeline_model_parallel_size", "vpp", "virtual_stages"}},
        {"zero_stage", {"zero", "zero_optimization_stage"}},
        {"sequence_parallel", {"sp"}}}},
      {"training",
       {{"micro_batch_size", {"mbs", "micro_batch", "train_micro_batch_size_per_gpu"}},
        {"global_batch_size", {"gbs", "global_batch", "train_batch_size"}}}},
      {"hardware", {{"num_gpus", {"gpus", "n_gpus", "world_size", "total_gpus"}}}}};
  Json out = row;
  for (const auto& [part, fields] : aliases) {
    if (!out.contains(part) || !out[part].is_object()) continue;
    Json& j = out[part];
    for (const auto& [canonical, names] : fields) {
      if (j.contains(canonical) && !j[canonical].is_null()) continue;
      for (const char* name : names) {
        if (j.contains(name) && (j[name].is_number() || j[name].is_boolean())) {
          j[canonical] = j[name];
          break;
        }
      }
    }
  }
  // Megatron's --num-layers-per-virtual-pipeline-stage gives the chunks per stage through the layers.
  if (out.contains("parallel") && out["parallel"].is_object() && out.contains("model") && out["model"].is_object()) {
    Json& par = out["parallel"];
    const auto perChunk = number(par, "num_layers_per_virtual_pipeline_stage");
    const auto layers = number(out["model"], "num_layers");
    const double pp = number(par, "pp").value_or(1);
    if (perChunk && layers && *perChunk >= 1 && (!par.contains("virtual_pipeline_stages") || par["virtual_pipeline_stages"].is_null())) {
      const double v = *layers / (pp * *perChunk);
      if (v >= 1 && v <= static_cast<double>(limits::kMaxLayers) && v == std::floor(v)) par["virtual_pipeline_stages"] = static_cast<std::int64_t>(v);
    }
    // The distributed optimizer is ZeRO-1.
    if ((!par.contains("zero_stage") || par["zero_stage"].is_null()) &&
        ((par.contains("distributed_optimizer") && par["distributed_optimizer"].is_boolean() && par["distributed_optimizer"].get<bool>()) ||
         has(lower(text(par, "overlap") + " " + text(par, "optimizer")), "distributed"))) {
      par["zero_stage"] = 1;
    }
  }
  return out;
}

Result<Case> caseFromRowChecked(const Json& rawRow, const Json& assumptions);


}  // namespace

Result<Case> caseFromRow(const Json& rawRow, const Json& assumptions) {
  if (auto valid = checkAssumptions(assumptions, "assumptions.json"); !valid) return fail(valid.error());
  try {
    return caseFromRowChecked(rawRow, assumptions);
  } catch (const std::exception& e) {
    // A value of a type no check above foresaw (nlohmann's type errors, std::stod out of range on a
    // 400-digit rate): the row's fault, never a crash.
    const std::string id = rawRow.is_object() && rawRow.contains("id") && rawRow["id"].is_string()
                               ? rawRow["id"].get<std::string>()
                               : std::string("?");
    return fail(rowError(id, "row", std::string("unexpected value: ") + e.what()));
  }
}

namespace {

// The row's parts are objects, and every figure the harness reads is a number (or null: not published)
// within limits.h's bounds: "8" or [8] is a typo that would otherwise silently fall back to a default.
Result<void> checkRowShape(const Json& row, const std::string& id) {
  for (const char* part : {"model", "hardware", "parallel", "training", "measured"}) {
    if (!row.contains(part) || !row[part].is_object()) return fail(rowError(id, part, "missing or not an object"));
  }
  static const std::vector<std::pair<const char*, std::vector<const char*>>> numeric{
      {"model", {"num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "num_key_value_heads", "num_kv_heads",
                 "ffn_hidden_size", "seq_len", "vocab_size", "num_experts", "top_k"}},
      {"hardware", {"gpu_memory_gb", "gpus_per_node", "num_gpus"}},
      {"parallel", {"tp", "pp", "dp", "cp", "ep", "virtual_pipeline_stages", "zero_stage"}},
      {"training", {"micro_batch_size", "global_batch_size", "global_batch_tokens", "recompute_num_layers", "recompute_layers"}},
      {"measured", {"layer_forward_ms", "layer_backward_ms", "iteration_time_s", "iteration_time_ms", "step_time_s", "step_time_ms",
                    "samples_per_s", "sequences_per_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu",
                    "iteration_time_sec", "step_time_sec", "seconds_per_iteration", "time_per_iteration_s",
                    "time_per_iteration_ms", "mfu_pct", "mfu"}}};
  for (const auto& [part, keys] : numeric) {
    for (const char* key : keys) {
      const Json& j = row[part];
      if (j.contains(key) && !j[key].is_null() && !j[key].is_number()) {
        return fail(rowError(id, std::string(part) + "." + key, "expected a number, got " + j[key].dump()));
      }
    }
  }
  for (const auto& [key, value] : row["measured"].items()) {
    if ((memoryKeyUnit(key) > 0 || classifyMeasure(key).measure != Measure::kNone) && !value.is_null() &&
        !value.is_number()) {
      return fail(rowError(id, "measured." + key, "expected a number, got " + value.dump()));
    }
  }
  return checkRowRanges(row, id);
}

// The settings the row leaves open: the run's own entry in assumptions.json, the first framework whose
// keywords the row's citation, architecture, schedule, precision or framework mention, the defaults.
Settings settingsFor(const Json& row, const Json& assumptions, const std::string& id, const std::string& citation) {
  const Json& par = row["parallel"];
  const Json& tr = row["training"];
  Settings set;
  if (assumptions.contains("defaults")) set.defaults = assumptions["defaults"];
  if (assumptions.contains("runs") && assumptions["runs"].contains(id)) set.run = assumptions["runs"][id];
  const std::string haystack = lower(citation + " " + text(row["model"], "arch") + " " + text(par, "schedule") + " " +
                                     text(tr, "precision") + " " + text(par, "framework") + " " + text(tr, "framework"));
  if (assumptions.contains("frameworks")) {
    for (const Json& f : assumptions["frameworks"]) {
      bool match = false;
      for (const auto& k : f["match"]) match = match || has(haystack, lower(k.get<std::string>()).c_str());
      if (match) {
        set.framework = f["settings"];
        break;
      }
    }
  }
  return set;
}

// The row's hardware with its GPU count: as stated, else nodes x GPUs per node, else the product of
// its parallel degrees.
Json hardwareWithGpuCount(const Json& hw, const Json& par) {
  Json hardware = hw;
  if (!number(hw, "num_gpus")) {
    const auto nodes = number(hw, "num_nodes") ? number(hw, "num_nodes") : number(hw, "nodes");
    const auto perNode = number(hw, "gpus_per_node");
    if (nodes && perNode && *nodes >= 1 && *perNode >= 1) {
      hardware["num_gpus"] = *nodes * *perNode;
    } else if (auto dp = number(par, "dp"); dp && *dp >= 1) {
      double product = *dp;
      for (const char* key : {"tp", "pp", "cp"}) product *= std::max(1.0, number(par, key).value_or(1.0));
      hardware["num_gpus"] = product;
    }
  }
  return hardware;
}

// Degrees (a dp that disagrees with the GPUs gives way to them), sequence parallelism, schedule and
// virtual stages. Returns whether the virtual stages are left open (interleaved without a count).
bool readParallel(const Json& par, const Settings& set, Plan& p, bool* assumed) {
  auto degree = [&](const char* key) { return static_cast<std::int64_t>(number(par, key).value_or(1)); };
  p.parallel.tp = degree("tp");
  p.parallel.pp = degree("pp");
  p.parallel.cp = degree("cp");
  p.parallel.ep = degree("ep");
  // Expert tensor parallelism (Megatron-Core's --expert-tensor-parallel-size; absent: tp).
  if (auto etp = number(par, "etp"); etp && *etp >= 1) p.parallel.etp = static_cast<std::int64_t>(*etp);
  const std::int64_t gpus = p.cluster.totalGpus();
  const std::int64_t model = std::max<std::int64_t>(1, p.parallel.tp * p.parallel.pp * p.parallel.cp);
  if (auto dp = number(par, "dp")) {
    p.parallel.dp = static_cast<std::int64_t>(*dp);
    // A data-parallel degree that disagrees with the GPUs (a source counting context parallelism into
    // it, say) gives way to the GPUs over the model-parallel degrees when they divide.
    if (model <= gpus && p.parallel.dp * model != gpus && gpus % model == 0) {
      p.parallel.dp = gpus / model;
      *assumed = true;
    }
  } else {
    p.parallel.dp = gpus / model;
  }
  const Json sp = par.contains("sequence_parallel") && par["sequence_parallel"].is_boolean() ? par["sequence_parallel"]
                                                                                             : set.pick("sequence_parallel");
  p.parallel.sequenceParallel = sp.is_boolean() && sp.get<bool>() && p.parallel.tp > 1;
  // The row's own schedule wins over its framework's usual one; "non-interleaved" is plain 1F1B.
  std::string schedule = lower(text(par, "schedule"));
  if (schedule.empty() && set.pick("schedule").is_string()) schedule = lower(set.pick("schedule").get<std::string>());
  if (has(schedule, "non-interleaved") || has(schedule, "non interleaved")) schedule = "1f1b";
  Json vpp = number(par, "virtual_pipeline_stages") ? par["virtual_pipeline_stages"] : set.pick("virtual_stages");
  // A framework's own chunk count when the row says "interleaved" without one (torchtitan: two).
  if (!vpp.is_number() && p.parallel.pp > 1 && has(schedule, "interleaved") && !set.run.contains("stages")) {
    if (const Json chunks = set.pick("interleaved_virtual_stages"); chunks.is_number()) {
      vpp = chunks;
      *assumed = true;
    }
  }
  p.parallel.virtualStages = vpp.is_number() ? vpp.get<std::int64_t>() : 1;
  const bool vppOpen = p.parallel.pp > 1 && has(schedule, "interleaved") && !vpp.is_number() && !set.run.contains("stages");
  p.schedule = p.parallel.virtualStages > 1 ? Schedule::kInterleaved : Schedule::kOneFOneB;
  if (has(schedule, "gpipe")) p.schedule = Schedule::kGpipe;
  if (has(schedule, "zero bubble") || has(schedule, "zero-bubble")) p.schedule = Schedule::kZeroBubble;

  return vppOpen;
}

// Micro and global batch (a micro-batch the batch does not divide shrinks to one that does), and the
// ZeRO stage (FSDP's sharding strategies read as ZeRO stages).
void readBatchAndZero(const Json& tr, const Json& par, const Settings& set, std::int64_t seqLen, Plan& p, bool* assumed) {
  Json mbs = number(tr, "micro_batch_size") ? tr["micro_batch_size"] : set.pick("micro_batch_size");
  if (!number(tr, "micro_batch_size")) *assumed = true;
  p.microBatchSize = mbs.is_number() ? mbs.get<std::int64_t>() : 1;
  if (auto gbs = number(tr, "global_batch_size")) {
    p.globalBatchSize = static_cast<std::int64_t>(*gbs);
  } else if (auto tokens = number(tr, "global_batch_tokens")) {
    p.globalBatchSize = static_cast<std::int64_t>(std::llround(*tokens / static_cast<double>(seqLen)));
  } else {
    p.globalBatchSize = p.microBatchSize * p.parallel.dp;
  }
  // A framework without gradient accumulation runs each replica's whole batch as one micro-batch.
  const Json noAccumulation = set.pick("no_grad_accumulation");
  if (!number(tr, "micro_batch_size") && noAccumulation.is_boolean() && noAccumulation.get<bool>() &&
      p.parallel.dp > 0 && p.parallel.pp == 1 && p.globalBatchSize % p.parallel.dp == 0) {
    p.microBatchSize = std::max<std::int64_t>(1, p.globalBatchSize / p.parallel.dp);
  }
  p.seqLen = seqLen;
  // A global batch the micro-batch and data parallelism do not divide: the largest micro-batch below the
  // stated one that does (frameworks refuse the rest).
  if (p.parallel.dp > 0 && p.globalBatchSize % (p.microBatchSize * p.parallel.dp) != 0) {
    std::int64_t b = p.microBatchSize;
    while (b > 1 && p.globalBatchSize % (b * p.parallel.dp) != 0) --b;
    if (p.globalBatchSize % (b * p.parallel.dp) == 0) {
      p.microBatchSize = b;
      *assumed = true;
    }
  }
  // PyTorch FSDP sharding strategies: FULL_SHARD / HYBRID_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2, and so
  // is parameters not resharded after forward (FSDP2's reshard_after_forward=False), in any text of the
  // row's parallel section that speaks of sharding.
  Json fsdpZero = nullptr;
  std::string fsdp = lower(text(par, "fsdp"));
  for (const auto& [key, value] : par.items()) {
    if (value.is_string() && has(lower(key), "shard")) fsdp += " " + lower(value.get<std::string>());
  }
  if (has(fsdp, "shard_grad_op") || has(fsdp, "not resharded after forward") || has(fsdp, "reshard_after_forward=false") ||
      has(fsdp, "reshard_after_forward: false")) {
    fsdpZero = 2;
  }
  else if (has(fsdp, "full_shard") || has(fsdp, "hybrid_shard") || (par.contains("fsdp") && par["fsdp"].is_boolean() && par["fsdp"].get<bool>())) fsdpZero = 3;
  const Json zero = number(par, "zero_stage") ? par["zero_stage"] : !fsdpZero.is_null() ? fsdpZero : set.pick("zero_stage");
  if (!number(par, "zero_stage") && p.parallel.dp > 1) *assumed = *assumed || set.run.contains("zero_stage");
  p.zeroStage = zero.is_number() ? zero.get<int>() : 0;
  // FSDP under pipeline parallelism: PyTorch's pipelining turns gradient sync off for every micro-batch
  // but the last (its stage's backward_maybe_with_nosync), so gradients are reduce-scattered once;
  // unless the row says its gradients stay sharded (then they were reduce-scattered every micro-batch).
  const bool shardedGrads = has(fsdp, "gradients sharded") || has(fsdp, "grads sharded");
  if (!fsdpZero.is_null() && p.zeroStage >= 2 && p.parallel.pp > 1 && !shardedGrads) p.execution.gradSync = GradSync::kStep;
}

// Megatron-Core's MoE token dispatcher and expert-parallel overlap as the row states them (its
// moe_token_dispatcher_type / moe_enable_deepep / overlap_moe_expert_parallel_comm fields, or the
// flags in any text of its parallel section). The overlap is kept only where the plan's validation
// (Megatron-Core's conditions) allows it.
void readMoeExecution(const Json& par, Plan& p) {
  if (!p.model.spec || !p.model.spec->moe.enabled() || p.parallel.ep < 2) return;
  std::string words, values;
  for (const auto& [key, value] : par.items()) {
    const std::string k = lower(key);
    if (value.is_string()) {
      words += " " + k + " " + lower(value.get<std::string>());
      values += " " + lower(value.get<std::string>());
    }
    if (value.is_boolean() && value.get<bool>()) words += " " + k;
  }
  // The dispatcher from what the row says (its values, and a true moe_enable_deepep), not from key names
  // (moe_flex_dispatcher_backend names "flex" whatever its backend): ncclep runs plain all-to-alls.
  if (has(values, "ncclep")) {
    p.execution.moeDispatcher = MoeDispatcher::kAllToAll;
  } else if (has(values, "hybridep")) {
    p.execution.moeDispatcher = MoeDispatcher::kHybridEp;
  } else if (has(values, "deepep") || has(values, "flex") || has(words, "moe_enable_deepep")) {
    p.execution.moeDispatcher = MoeDispatcher::kDeepEp;
  }
  const bool overlap = has(words, "overlap-moe-expert-parallel-comm") || has(words, "overlap_moe_expert_parallel_comm") ||
                       has(words, "ep a2a overlap") || has(words, "a2a overlap");
  p.execution.epCommOverlap = overlap;
  if (overlap && !validatePlan(p)) p.execution.epCommOverlap = false;
}

// What the row says of recompute.
struct RecomputeReading {
  RecomputePolicy policy = RecomputePolicy::kNone;
  std::optional<std::int64_t> layers;  // Megatron's --recompute-num-layers N
  bool open = false;                   // nothing said: the cheapest policy that fits is chosen
  std::optional<double> share;         // checkpointing every n-th block: 1/n of each chunk's layers
  bool offloadOpen = false;            // open, and the framework may offload activations instead (pp 1)
  std::optional<RecomputeModules> modules;  // what selective recompute re-runs, where the row names it
  // Open: what the framework's selective recompute re-runs when the row does not say
  // (selective_recompute_modules), of which the modules the model has.
  std::optional<RecomputeModules> openModules;
};

// Of a list of recompute modules, those the model has (Megatron refuses moe_act without MoE layers and
// mla_up_proj without latent attention; the others do nothing where they have nothing to re-run).
RecomputeModules applicableModules(RecomputeModules m, const ModelSpec& spec) {
  if (!spec.moe.enabled()) m.moeAct = m.moe = m.sharedExperts = false;
  if (!spec.mla.enabled()) m.mlaUpProj = false;
  return m;
}

// Megatron-Core's recompute modules the row names: a "recompute_modules" list (or text) in its training
// section, or the module names after "modules" in its recompute text ("selective (recompute_modules:
// mla_up_proj, mlp)"). Nullopt when it names none.
std::optional<RecomputeModules> readRecomputeModules(const Json& tr, const std::string& recomputeText) {
  std::string words;
  const bool keyed = tr.contains("recompute_modules");
  if (keyed) {
    const Json& m = tr["recompute_modules"];
    if (m.is_string()) words = lower(m.get<std::string>());
    if (m.is_array()) {
      for (const auto& item : m) {
        if (item.is_string()) words += " " + lower(item.get<std::string>());
      }
    }
  } else if (const auto at = recomputeText.find("modules"); at != std::string::npos) {
    words = recomputeText.substr(at + 7);
    words = words.substr(0, std::min(words.find(')'), words.find(';')));  // the list, not what follows it
  } else {
    return std::nullopt;
  }
  RecomputeModules modules = RecomputeModules::none();
  bool named = false;
  std::string word;
  for (const char ch : words + " ") {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') {
      word += ch;
    } else if (!word.empty()) {
      named = addRecomputeModule(modules, word) || named;
      word.clear();
    }
  }
  // An empty list names none; words that name no module (a keyed "not stated") say nothing.
  const bool emptyList = keyed && tr["recompute_modules"].is_array() && tr["recompute_modules"].empty();
  if (!named && !emptyList) return std::nullopt;
  return modules;
}

// "recompute": a policy name, free text ("full (--checkpoint-activations)", "activation checkpointing":
// full, as Megatron's flag was; "per-op SAC": torchtitan's per-op policy), a boolean, else assumed.
Result<RecomputeReading> readRecompute(const Json& tr, const Settings& set, const std::string& id, bool* assumed) {
  std::string recomputeText = lower(text(tr, "recompute"));
  const std::string statedText = recomputeText;
  if (tr.contains("recompute") && tr["recompute"].is_boolean()) recomputeText = tr["recompute"].get<bool>() ? "full" : "none";
  // Megatron's --recompute-num-layers N (or a recompute_num_layers figure): full recompute of N layers
  // per chunk.
  std::optional<std::int64_t> recomputeLayers;
  for (const char* key : {"recompute_num_layers", "recompute_layers", "checkpoint_num_layers"}) {
    if (auto n = number(tr, key); n && *n >= 0 && !recomputeLayers) recomputeLayers = static_cast<std::int64_t>(*n);
  }
  {
    static const std::regex count(R"(recompute[-_ ]num[-_ ]layers[= :]*(\d+))");
    std::smatch m;
    if (!recomputeLayers && std::regex_search(recomputeText, m, count)) recomputeLayers = std::stoll(m[1]);
  }
  // torchtitan's per-op selective activation checkpointing (mode "selective", selective_ac_option "op").
  if (has(recomputeText, "per-op") || has(recomputeText, "op sac") || has(recomputeText, "op-level") ||
      has(recomputeText, "selective_ac_option op") || has(recomputeText, "selective op") ||
      has(recomputeText, "(op)")) {
    recomputeText = "op";
  }
  if (recomputeText.rfind("full", 0) != 0 && recomputeText.rfind("selective", 0) != 0 && recomputeText.rfind("none", 0) != 0 &&
      recomputeText != "op") {
    // --recompute-activations is Megatron's selective recompute; checkpointing by any name is full, and
    // so is "activation recomputation" without "selective": the only kind until selective recompute
    // (Korthikanti et al. 2022), which named the two.
    const bool negated = recomputeText == "no" || recomputeText == "false" || recomputeText == "off" ||
                         has(recomputeText, "no recomput") || has(recomputeText, "no activation") ||
                         has(recomputeText, "without") || has(recomputeText, "disabled");
    if (has(recomputeText, "selective") || has(recomputeText, "recompute-activations")) recomputeText = "selective";
    else if (negated) recomputeText = "none";
    else if (has(recomputeText, "full") || has(recomputeText, "checkpoint") || has(recomputeText, "recompute-granularity") ||
             has(recomputeText, "activation recomputation") ||
             recomputeText == "true" || recomputeText == "yes" || recomputeText == "on")
      recomputeText = "full";
  }
  const bool recomputeOpen = recomputeText.rfind("full", 0) != 0 && recomputeText.rfind("selective", 0) != 0 &&
                             recomputeText.rfind("none", 0) != 0 && recomputeText != "op" &&
                             !set.pick("recompute").is_string();
  RecomputePolicy policy = RecomputePolicy::kNone;
  if (recomputeText == "op") {
    policy = RecomputePolicy::kOp;
  } else if (recomputeText.rfind("full", 0) == 0) {
    policy = RecomputePolicy::kFull;
  } else if (recomputeText.rfind("selective", 0) == 0) {
    policy = RecomputePolicy::kSelective;
    // What the framework's "selective" is (torchtitan's: per-op checkpointing).
    if (set.pick("selective_recompute").is_string()) {
      auto parsed = parseRecompute(set.pick("selective_recompute").get<std::string>());
      if (!parsed) return fail(rowError(id, "selective_recompute (assumptions)", parsed.error().message));
      policy = *parsed;
    }
  } else if (recomputeText.rfind("none", 0) != 0 && set.pick("recompute").is_string()) {
    auto parsed = parseRecompute(set.pick("recompute").get<std::string>());
    if (!parsed) return fail(rowError(id, "recompute (assumptions)", parsed.error().message));
    policy = *parsed;
    *assumed = true;
  }
  // A framework whose tuned runs offload activations (assumptions' activation_offload: Megatron-Bridge's
  // performance recipes set cpu_offloading_num_layers) may have done so where the row says nothing.
  const bool offloadOpen = recomputeOpen && set.pick("activation_offload").is_boolean() && set.pick("activation_offload").get<bool>();
  RecomputeReading reading{
      .policy = policy, .layers = recomputeLayers, .open = recomputeOpen, .share = std::nullopt, .offloadOpen = offloadOpen, .modules = std::nullopt, .openModules = std::nullopt};
  // Named modules are what selective recompute re-runs (a row that names them and no policy recomputes
  // selectively, the only granularity they belong to; with full or none they do nothing).
  if (const Json& open = set.pick("selective_recompute_modules"); recomputeOpen && open.is_string()) {
    auto parsed = parseRecomputeModules(open.get<std::string>());
    if (!parsed) return fail(rowError(id, "selective_recompute_modules (assumptions)", parsed.error().message));
    reading.openModules = *parsed;
  }
  if (auto modules = readRecomputeModules(tr, statedText);
      modules && (policy == RecomputePolicy::kSelective || recomputeOpen)) {
    reading.policy = RecomputePolicy::kSelective;
    reading.open = reading.offloadOpen = false;
    reading.modules = modules;
  }
  return reading;
}

// Checkpointing every n-th block ("selective (checkpoint every n blocks)": IBM's fms-fsdp wraps every
// x-th LLaMABlock, `apply_fsdp_checkpointing(model, every_xth_item)`) is full recompute of 1/n of the
// layers. n from the words ("every 3 blocks", "every other block"), else from the row's own published
// HFU against MFU: HFU counts the recomputed forward, a third of a layer's training FLOPs (forward and
// both backward products, attention included), so HFU / MFU = 1 + share / 3.
void readBlockCheckpointing(const Json& tr, const Json& measured, RecomputeReading& r, bool* assumed) {
  const std::string words = lower(text(tr, "recompute"));
  static const std::regex everyBlocks(R"(every[ -](\d+|n|x|other|second)[-a-z]*[ -](blocks?|layers?))");
  std::smatch m;
  if (!std::regex_search(words, m, everyBlocks)) return;
  std::optional<double> share;
  const std::string n = m[1];
  if (n == "other" || n == "second") share = 0.5;
  else if (std::isdigit(static_cast<unsigned char>(n[0])) && std::stoll(n) > 0) share = 1.0 / static_cast<double>(std::stoll(n));
  const auto hfu = number(measured, "hfu");
  const auto mfu = number(measured, "mfu");
  if (!share && hfu && mfu && *mfu > 0 && *hfu >= *mfu) {
    share = std::clamp(3.0 * (*hfu / *mfu - 1.0), 0.0, 1.0);
    *assumed = true;
  }
  if (!share) return;
  r.policy = RecomputePolicy::kFull;
  r.share = share;
  r.layers.reset();
  r.open = false;
}

// The layers of each chunk (from the run's assumptions entry, else balanced) and their recompute.
Result<void> assignStages(const Settings& set, const ModelSpec& spec, const RecomputeReading& r, const std::string& id,
                          Plan& p, bool* assumed) {
  const std::int64_t chunks = p.parallel.pp * p.parallel.virtualStages;
  if (set.run.contains("stages")) {
    std::int64_t held = 0;
    for (const auto& n : set.run["stages"]) {
      StagePlan st;
      st.layers = n.get<std::int64_t>();
      held += st.layers;
      p.stages.push_back(st);
    }
    if (held != spec.numLayers) {
      return fail(rowError(id, "stages (assumptions)", "hold " + std::to_string(held) + " layers but the model has " +
                                                             std::to_string(spec.numLayers)));
    }
  } else {
    if (spec.numLayers + 2 < chunks) {  // the embedding and the loss may hold a chunk each
      return fail(rowError(id, "model.num_layers", std::to_string(spec.numLayers) + " layers for pp x virtual stages = " +
                                                         std::to_string(chunks)));
    }
    p.stages = balancedStages(spec.numLayers, chunks);
    if (spec.numLayers % chunks != 0) *assumed = true;
  }
  for (auto& st : p.stages) {
    st.recompute = r.policy;
    st.recomputeLayers = r.policy == RecomputePolicy::kNone ? 0 : st.layers;
    if (r.policy == RecomputePolicy::kFull && r.layers) st.recomputeLayers = std::min(*r.layers, st.layers);
    if (r.policy == RecomputePolicy::kFull && r.share) {
      st.recomputeLayers = std::llround(*r.share * static_cast<double>(st.layers));
    }
  }
  return {};
}

// Precision (its spellings; "16-bit" or unstated: what the GPU runs fastest) and the execution switches
// (attention kernel, overlaps, host time per op, gradient accumulation) the row and assumptions give.
Result<void> readPrecisionAndExecution(const Json& tr, const Json& par, const Settings& set, const std::string& id, Plan& p) {
  const std::string precisionText = lower(text(tr, "precision"));
  const bool volta = has(lower(p.cluster.gpu.name), "v100");
  if (set.pick("precision").is_string()) {
    auto parsed = parseDType(set.pick("precision").get<std::string>());
    if (!parsed) return fail(rowError(id, "precision (assumptions)", parsed.error().message));
    p.precision = *parsed;
  } else if (has(precisionText, "fp4") || has(precisionText, "e2m1")) {
    p.precision = DType::kFp4;  // NVFP4, MXFP4
  } else if (has(precisionText, "fp8") || has(precisionText, "float8") || has(precisionText, "e4m3")) {
    p.precision = DType::kFp8;
  } else if (has(precisionText, "bf16") || has(precisionText, "bfloat16")) {
    p.precision = DType::kBf16;
  } else if (has(precisionText, "fp16") || has(precisionText, "float16") || has(precisionText, "half")) {
    p.precision = DType::kFp16;
  } else if (has(precisionText, "tf32")) {
    p.precision = DType::kTf32;
  } else if (has(precisionText, "fp32") || has(precisionText, "float32") || has(precisionText, "single")) {
    p.precision = DType::kFp32;
  } else {
    p.precision = volta ? DType::kFp16 : DType::kBf16;  // "16-bit" or not stated: what the GPU runs fastest
  }
  if (!p.cluster.gpu.hasPeak(p.precision) && p.precision == DType::kFp4) p.precision = DType::kFp8;
  if (!p.cluster.gpu.hasPeak(p.precision)) p.precision = DType::kFp16;
  // torchao's float8 recipes (torchtitan's float8 converter) as the row names them; its default is
  // tensorwise. Without "torchao" an fp8 row is Transformer Engine's, whose casts are fused.
  if (p.precision == DType::kFp8 && has(precisionText, "torchao")) {
    p.execution.float8Recipe = !has(precisionText, "rowwise")                                ? Float8Recipe::kTensorwise
                               : has(precisionText, "gw_hp") || has(precisionText, "gw hp") ? Float8Recipe::kRowwiseGwHp
                                                                                             : Float8Recipe::kRowwise;
  }
  // Transformer Engine's MXFP8 block scaling ("MXFP8", "FP8-MX", "fp8_mx"), which it runs on Blackwell only.
  if (p.precision == DType::kFp8 && p.cluster.gpu.hasPeak(DType::kFp4) && !has(precisionText, "torchao") &&
      (has(precisionText, "mxfp8") || has(precisionText, "fp8-mx") || has(precisionText, "fp8_mx") || has(precisionText, "mx block"))) {
    p.execution.float8Recipe = Float8Recipe::kMxfp8;
  }
  auto flag = [&](const char* key) { return set.pick(key).is_boolean() && set.pick(key).get<bool>(); };
  // The framework keeps Transformer Engine's weights quantized (Megatron-Bridge's fp8 presets), where
  // the plan can: a TE recipe under the distributed optimizer; not with sub-channel (blockwise) scaling,
  // whose preset leaves them at 16 bits.
  const bool subChannel = has(precisionText, "fp8-sc") || has(precisionText, "fp8_sc") || has(precisionText, "sub-channel") ||
                          has(precisionText, "subchannel") || has(precisionText, "blockwise");
  p.execution.fp32Params = flag("fp32_params");
  p.execution.quantizedParams = flag("quantized_params") && !subChannel && !quantizedWeightsRefusal(p);
  const Json& attention = set.pick("attention");
  if (!attention.is_string() || !setAttention(p.execution, attention.get<std::string>())) (void)setAttention(p.execution, "unfused");
  // Overlaps the row states (Megatron's flags in `parallel.overlap`) win over assumed ones.
  const std::string overlap = lower(text(par, "overlap"));
  p.execution.overlapGradReduce = flag("overlap_grad_reduce") || has(overlap, "overlap-grad-reduce");
  p.execution.overlapParamGather = flag("overlap_param_gather") || has(overlap, "overlap-param-gather");
  p.execution.overlapP2pComm = flag("overlap_p2p_comm");
  // torchtitan's async TP (and a row saying so) overlaps tensor-parallel collectives with the matmuls.
  const bool asyncTp = (par.contains("async_tp") && par["async_tp"].is_boolean() && par["async_tp"].get<bool>()) ||
                       has(overlap, "async tp") || has(overlap, "async-tp");
  p.execution.tpCommOverlap = flag("tp_comm_overlap") || has(overlap, "tp-comm-overlap") || asyncTp;
  if (asyncTp) p.execution.tpOverlap = TpOverlap::kMicroPipeline;
  // Megatron's --cp-comm-type as the row states it, else the framework's default (assumptions.json:
  // torchtitan all-gathers the key and value shards), else p2p (Megatron's default).
  std::string cpComm = lower(text(par, "cp_comm_type"));
  if (cpComm.empty() && set.pick("cp_comm_type").is_string()) cpComm = lower(set.pick("cp_comm_type").get<std::string>());
  if (has(cpComm, "a2a+p2p")) {
    // Hierarchical: the row gives the sizes (Megatron's hierarchical_context_parallel_sizes).
    p.execution.cpCommType = CpCommType::kA2aP2p;
    if (par.contains("hierarchical_context_parallel_sizes") && par["hierarchical_context_parallel_sizes"].is_array()) {
      for (const auto& v : par["hierarchical_context_parallel_sizes"]) {
        if (v.is_number_integer()) p.execution.hierarchicalCpSizes.push_back(v.get<std::int64_t>());
      }
    }
  } else if (has(cpComm, "a2a") || has(cpComm, "all_to_all") || has(cpComm, "ulysses")) p.execution.cpCommType = CpCommType::kAllToAll;
  else if (has(cpComm, "all_gather") || has(cpComm, "allgather")) p.execution.cpCommType = CpCommType::kAllGather;
  p.execution.fusedCrossEntropy = flag("fused_cross_entropy");
  p.execution.fusedBiasGrad = flag("fused_bias_grad");
  p.execution.teGroupedGemm = flag("te_grouped_gemm");
  p.execution.gradNanCheck = flag("grad_nan_check");

  // The ops the framework runs as eager decompositions (the assumptions' unfused_kernels: "all", "none"
  // or a list), unless the row says it ran under torch.compile, which fuses them but for what the
  // framework's compiled_unfused_kernels names (caseFromRow).
  if (const Json& unfused = set.pick("unfused_kernels"); unfused.is_string()) {
    auto parsed = parseUnfusedKernels(unfused.get<std::string>());
    if (!parsed) return fail(rowError(id, "unfused_kernels (assumptions)", parsed.error().message));
    p.execution.unfused = *parsed;
  }
  p.execution.teDummyWgrads = flag("te_dummy_wgrads");
  p.execution.perParameterGathers = flag("per_parameter_gathers");
  p.execution.crossEntropyInPlace = flag("cross_entropy_in_place");
  p.execution.torchCrossEntropy = flag("torch_cross_entropy") && !p.execution.fusedCrossEntropy;
  p.execution.nativeFusedCrossEntropy =
      flag("native_fused_cross_entropy") && !p.execution.fusedCrossEntropy && !p.execution.torchCrossEntropy;
  if (set.pick("host_us_per_op").is_number()) p.execution.hostMicrosecondsPerOp = set.pick("host_us_per_op").get<double>();
  // How micro-batch gradients are summed: one mode, or one per precision ({"bf16": ..., "fp16": ...}),
  // as DeepSpeed's BF16 and FP16 optimizers differ.
  if (Json mode = set.pick("grad_accumulation"); !mode.is_null()) {
    if (mode.is_object()) mode = mode.contains(toString(p.precision)) ? mode[toString(p.precision)] : Json();
    if (mode.is_string()) {
      auto parsed = parseGradAccumulation(mode.get<std::string>());
      if (!parsed) return fail(rowError(id, "grad_accumulation (assumptions)", parsed.error().message));
      p.execution.gradAccumulation = *parsed;
    } else if (!mode.is_null()) {
      return fail(rowError(id, "grad_accumulation (assumptions)", "expected a mode or an object of modes by precision, got " + mode.dump()));
    }
  }
  // Megatron's bf16 gradient buffer, where the framework runs one and the plan can hold it (bf16, or
  // lower-bit GEMMs on bf16 weights, in Megatron's buffer): validatePlan's conditions.
  const bool bf16 = p.precision == DType::kBf16 || quantizedGemms(p.precision);
  const bool buffer = p.execution.gradAccumulation == GradAccumulation::kFused || p.execution.gradAccumulation == GradAccumulation::kMainGrad;
  p.execution.gradReduceBf16 = flag("grad_reduce_in_bf16") && bf16 && buffer && !p.execution.fp32Params;
  return {};
}

// Whether the row says it ran under torch.compile, which fuses the norms, rotary embedding and SwiGLU:
// training.torch_compile or training.compile as a boolean, else "torch.compile" (or "torch_compile") in
// its citation or its training section's words, not negated ("without torch.compile", "no torch.compile").
// The row's shape is checked (training is an object); its source may be missing.
bool ranCompiled(const Json& row) {
  const Json& tr = row["training"];
  for (const char* key : {"torch_compile", "compile"}) {
    if (tr.contains(key) && tr[key].is_boolean()) return tr[key].get<bool>();
  }
  std::string words = row.contains("source") && row["source"].is_object() ? lower(text(row["source"], "citation")) : "";
  for (const auto& [key, value] : tr.items()) {
    if (value.is_string()) words += " " + lower(value.get<std::string>());
  }
  for (const char* negation : {"without torch.compile", "no torch.compile", "without torch_compile", "no torch_compile"}) {
    if (has(words, negation)) return false;
  }
  return has(words, "torch.compile") || has(words, "torch_compile");
}

// Knobs the row and the assumptions leave open that decide whether the run fits: the run happened, so
// it fitted. Recompute: none, else selective, else full of k layers per chunk or (where the framework
// offers it, pp 1) activation offload of k layers, the first with which the plan fits (of the last
// group, the fastest k); the interleaved schedule's virtual stages (1 to 8 chunks per stage): the
// fastest that fits, as a published benchmark run is tuned.
Result<void> chooseOpenKnobs(const RecomputeReading& r, bool vppOpen, const ModelSpec& spec, const std::string& id, Plan& p) {
  if (r.open || vppOpen) {
    struct Candidate {
      RecomputePolicy policy;
      std::int64_t layers;         // recomputed per chunk (0: all of them), or offloaded
      bool offload;                // activation offload of `layers` layers instead of recompute
      int group;                   // the first group with a plan that fits wins
    };
    std::vector<Candidate> policies{{r.policy, 0, false, 0}};
    if (r.open) {
      policies = {{RecomputePolicy::kNone, 0, false, 0}, {RecomputePolicy::kSelective, 0, false, 1}};
      // Megatron's --recompute-num-layers: full recompute of the first k layers of every chunk.
      for (std::int64_t k = 1; k <= spec.numLayers / p.parallel.pp; ++k) policies.push_back({RecomputePolicy::kFull, k, false, 2});
      // Megatron-Core's --cpu-offloading-num-layers (pp 1 only; validatePlan refuses the rest).
      if (r.offloadOpen && p.parallel.pp == 1 && !vppOpen) {
        for (std::int64_t k = 1; k < spec.numLayers; ++k) policies.push_back({RecomputePolicy::kNone, k, true, 2});
      }
    }
    std::vector<std::int64_t> chunkCounts{p.parallel.virtualStages};
    if (vppOpen) {
      chunkCounts.clear();
      for (std::int64_t v = 1; v <= 8 && p.parallel.pp * v <= spec.numLayers; ++v) chunkCounts.push_back(v);
    }
    // Candidates differ only in schedule and recompute: one evaluator (model, cluster, sequence) serves all.
    auto evaluator = costmodel::Evaluator::create(p.model, p.cluster, p.seqLen);
    if (!evaluator) return fail(rowError(id, "model", evaluator.error().message));
    std::optional<Plan> best;
    double bestSeconds = 0;
    for (std::size_t i = 0; i < policies.size(); ++i) {
      const auto [candidatePolicy, recomputeCount, offload, group] = policies[i];
      for (const std::int64_t v : chunkCounts) {
        Plan q = p;
        q.parallel.virtualStages = v;
        if (vppOpen) {
          q.schedule = v > 1 ? Schedule::kInterleaved : Schedule::kOneFOneB;
          q.stages = balancedStages(spec.numLayers, p.parallel.pp * v);
        }
        for (auto& st : q.stages) {
          st.recompute = candidatePolicy;
          st.recomputeLayers = candidatePolicy == RecomputePolicy::kNone ? 0
                               : recomputeCount > 0                    ? std::min(recomputeCount, st.layers)
                                                                       : st.layers;
        }
        q.offload.activationLayers = offload ? recomputeCount : 0;
        // The framework's selective recompute, where it says what that re-runs.
        if (candidatePolicy == RecomputePolicy::kSelective && r.openModules) {
          q.execution.recomputeModules = applicableModules(*r.openModules, spec);
        }
        if (!validatePlan(q, id)) continue;
        auto ev = evaluator->evaluate(q);
        if (!ev || !ev->fits) continue;
        if (!best || ev->stepSeconds < bestSeconds) {
          best = std::move(q);
          bestSeconds = ev->stepSeconds;
        }
      }
      // The cheapest policy that fits wins; partial full recompute and activation offload count as one
      // policy (the fastest k of either).
      const bool nextInGroup = i + 1 < policies.size() && policies[i + 1].group == group;
      if (best && !nextInGroup) break;
    }
    if (best) p = std::move(*best);
  }
  return {};
}

// The step time: measured, else derived by the source, else from a throughput, else from TFLOP/s under
// the row's FLOP convention, else MFU against the peak the source used; and the memory figure.
Result<void> readMeasured(const Json& row, const ModelSpec& spec, Case& c) {
  const Plan& p = c.plan;
  const Json empty = Json::object();
  const Json& me = row["measured"];
  const Json& de = row.contains("derived") && row["derived"].is_object() ? row["derived"] : empty;
  const double gpus = static_cast<double>(p.cluster.totalGpus());
  const double samples = static_cast<double>(p.globalBatchSize);
  const double tokens = samples * static_cast<double>(spec.seqLen);
  if (auto f = number(me, "layer_forward_ms")) {
    c.measuredForwardSeconds = *f / 1e3;
    const auto b = number(me, "layer_backward_ms");
    if (!b) return fail(rowError(c.id, "measured.layer_backward_ms", "missing beside layer_forward_ms"));
    c.measuredBackwardSeconds = *b / 1e3;
    c.measuredStepSeconds = *c.measuredForwardSeconds + *c.measuredBackwardSeconds;
  } else {
    // In order: a step time (measured, then derived by the source), a throughput, TFLOP/s under the
    // row's FLOP convention, MFU against the peak the source used.
    const double flops = conventionFlops(text(row, "flop_convention"), spec, samples);
    const double peakOfPrecision = [&] {
      const auto peak = p.cluster.gpu.peakFlopsPerSecond.find(p.precision);
      double peakFlops = peak != p.cluster.gpu.peakFlopsPerSecond.end() ? peak->second : 0.0;
      if (auto used = number(row, "peak_tflops_per_gpu_used_by_source")) peakFlops = *used * 1e12;
      return peakFlops;
    }();
    const double gpuCount = gpus;
    auto stepFrom = [&](Measure measure, const Json& j) -> std::optional<double> {
      for (const auto& [key, value] : j.items()) {
        const MeasureKey k = classifyMeasure(key);
        if (k.measure != measure || !value.is_number() || value.get<double>() <= 0) continue;
        const double v = value.get<double>() * k.scale;
        const double jobRate = k.perGpu ? v * gpuCount : v;
        switch (measure) {
          case Measure::kStepSeconds: return v;
          case Measure::kStepsPerSecond: return 1.0 / v;
          case Measure::kSamplesPerSecond: return samples / jobRate;
          case Measure::kTokensPerSecond: return tokens / jobRate;
          case Measure::kTflops: {
            // Without "gpu" in the name a TFLOP/s figure is per GPU when it is below the GPU's peak
            // (sources say "TFLOP/s" for per-GPU figures), else the job's aggregate.
            const bool perGpu = !k.aggregate && (k.perGpu || peakOfPrecision <= 0 || v * 1e12 <= 1.5 * peakOfPrecision);
            return flops / (v * 1e12 * (perGpu ? gpuCount : 1.0));
          }
          case Measure::kMfu: {
            const double mfu = v > 1.0 ? v / 100.0 : v;
            if (peakOfPrecision <= 0) return std::nullopt;
            return flops / (mfu * peakOfPrecision * gpuCount);
          }
          case Measure::kNone: break;
        }
      }
      return std::nullopt;
    };
    for (const Measure measure : {Measure::kStepSeconds, Measure::kStepsPerSecond, Measure::kSamplesPerSecond,
                                  Measure::kTokensPerSecond}) {
      for (const Json* j : {&me, &de}) {
        if (!c.measuredStepSeconds) c.measuredStepSeconds = stepFrom(measure, *j);
      }
    }
    for (const Measure measure : {Measure::kTflops, Measure::kMfu}) {
      if (!c.measuredStepSeconds) c.measuredStepSeconds = stepFrom(measure, me);
    }
    if (!c.measuredStepSeconds) {
      return fail(rowError(c.id, "measured", "no iteration time, throughput or TFLOP/s to compare with"));
    }
  }
  if (auto memory = measuredMemory(me)) {
    c.measuredMemoryBytes = memory->bytes;
    c.memoryMeasure = memory->measure;
    c.memoryKey = memory->key;
    if (memory->measure == MemoryMeasure::kAllocated) {
      if (auto reserved = measuredMemoryOfKind(me, MemoryMeasure::kReserved)) c.measuredReservedBytes = reserved->bytes;
    }
  }
  return {};
}

Result<Case> caseFromRowChecked(const Json& rawRow, const Json& assumptions) {
  Case c;
  if (!rawRow.is_object() || !rawRow.contains("id") || !rawRow["id"].is_string()) {
    return fail(Error::badInput("a row without a string 'id'"));
  }
  const Json row = withCanonicalNames(rawRow);
  c.id = row["id"].get<std::string>();
  const Json empty = Json::object();
  const Json& source = row.contains("source") && row["source"].is_object() ? row["source"] : empty;
  c.citation = text(source, "citation") + ", " + text(source, "location");
  if (auto shape = checkRowShape(row, c.id); !shape) return fail(shape.error());
  const Json& par = row["parallel"];
  const Json& tr = row["training"];
  const Settings set = settingsFor(row, assumptions, c.id, c.citation);

  bool assumed = false;
  c.layerOnly = number(row["measured"], "layer_forward_ms").has_value();
  auto spec = modelOf(row["model"], c.id, c.layerOnly, &assumed);
  if (!spec) return fail(spec.error());
  Plan& p = c.plan;
  p.model.source = ModelSource::kSpec;
  p.model.spec = *spec;
  auto cluster = clusterOf(hardwareWithGpuCount(row["hardware"], par), set, c.id, &assumed);
  if (!cluster) return fail(cluster.error());
  p.cluster = *cluster;
  const bool vppOpen = readParallel(par, set, p, &assumed);
  readBatchAndZero(tr, par, set, spec->seqLen, p, &assumed);
  auto recompute = readRecompute(tr, set, c.id, &assumed);
  if (!recompute) return fail(recompute.error());
  readBlockCheckpointing(tr, row["measured"], *recompute, &assumed);
  if (auto st = assignStages(set, *spec, *recompute, c.id, p, &assumed); !st) return fail(st.error());
  if (auto ex = readPrecisionAndExecution(tr, par, set, c.id, p); !ex) return fail(ex.error());
  if (recompute->modules) p.execution.recomputeModules = *recompute->modules;
  if (ranCompiled(row)) {
    // What the framework's compile leaves eager (torchtitan compiles each block, not the final norm).
    p.execution.unfused = {};
    if (const Json& left = set.pick("compiled_unfused_kernels"); left.is_string()) {
      auto parsed = parseUnfusedKernels(left.get<std::string>());
      if (!parsed) return fail(rowError(c.id, "compiled_unfused_kernels (assumptions)", parsed.error().message));
      p.execution.unfused = *parsed;
    }
  }
  const bool layoutOpen = p.cluster.totalGpus() > 1 && !number(par, "tp") && !number(par, "pp") && !number(par, "cp") &&
                          !number(par, "dp");
  if (layoutOpen) {
    // What the row does state holds: its micro-batch, its chunks per stage, its recompute policy.
    const auto statedMbs = number(tr, "micro_batch_size");
    const auto mbs = statedMbs ? std::optional<std::int64_t>(static_cast<std::int64_t>(*statedMbs)) : std::nullopt;
    const auto vpp = number(par, "virtual_pipeline_stages") ? std::optional<std::int64_t>(p.parallel.virtualStages) : std::nullopt;
    readMoeExecution(par, p);  // the candidates are ranked with the row's token dispatch
    if (auto chosen = chooseOpenLayout(c.id, mbs, vpp, p); !chosen) return fail(chosen.error());
    if (!recompute->open) {
      p.stages.clear();
      if (auto st = assignStages(set, *spec, *recompute, c.id, p, &assumed); !st) return fail(st.error());
    }
    assumed = true;
  } else if (recompute->open || vppOpen) {
    if (auto chosen = chooseOpenKnobs(*recompute, vppOpen, *spec, c.id, p); !chosen) return fail(chosen.error());
    assumed = true;
  }
  readMoeExecution(par, p);
  c.fullyPublished = !assumed && !set.run.contains("micro_batch_size") && !set.run.contains("virtual_stages") &&
                     !set.run.contains("zero_stage") && !set.run.contains("recompute");
  if (auto measured = readMeasured(row, *spec, c); !measured) return fail(measured.error());
  if (auto valid = validatePlan(p, c.id); !valid) {
    // Without a published global batch the harness runs one micro-batch per replica, which a pipeline
    // schedule may refuse: say what is missing, not only what the fallback broke.
    if (!number(tr, "global_batch_size") && !number(tr, "global_batch_tokens") && valid.error().path.starts_with("/batch")) {
      return fail(rowError(c.id, "training.global_batch_size", "not published, and one micro-batch per data-parallel replica (the fallback) is refused: " +
                                                                   valid.error().message));
    }
    return fail(valid.error());
  }
  return c;
}

}  // namespace

namespace {

// The rows of `runsFile` (an array) as cases, with the assumptions of `folder` (else the shipped ones).
Result<std::vector<Case>> casesOfRows(const Json& rows, const std::string& runsFile, const std::string& folder,
                                      std::vector<Skipped>* skipped) {
  const Json* runs = &rows;
  if (!runs->is_array()) {
    return fail(Error::badInput("expected an array of runs, got " + describeJsonValue(*runs), runsFile));
  }
  Json assumptions = Json::object();
  // A folder without its own assumptions (a new set of rows) uses the repository's framework entries
  // and defaults; a folder's assumptions.json that is present but broken is an error.
  std::string file = folder + "/assumptions.json";
  if (!std::filesystem::exists(file)) file = dataDirectory() + "/validation/assumptions.json";
  if (std::filesystem::exists(file)) {
    auto doc = readJsonFile(file);
    if (!doc) return fail(doc.error());
    if (auto valid = checkAssumptions(*doc, file); !valid) return fail(valid.error());
    assumptions = *doc;
  }
  std::vector<Case> cases;
  for (std::size_t i = 0; i < runs->size(); ++i) {
    const Json& row = (*runs)[i];
    auto c = caseFromRow(row, assumptions);
    if (c) {
      cases.push_back(std::move(*c));
      continue;
    }
    // Name the file and the row beside what the row's check said (its id, field and value).
    const std::string said = c.error().toString();
    const auto id = row.is_object() ? row.find("id") : row.end();
    const std::string name = row.is_object() && id != row.end() && id->is_string() ? id->get<std::string>() : "?";
    // A setting taken from assumptions.json that does not fit the row is that file's entry's fault too;
    // so is any inconsistency of a plan that the run's own entry helped make (e.g. its virtual_stages
    // with the row's pp), which the plan's checks report without knowing where each setting came from.
    const auto runsEntry = assumptions.find("runs");
    const bool ownEntry = runsEntry != assumptions.end() && runsEntry->is_object() && runsEntry->contains(name);
    const bool fromAssumptions = ownEntry || said.find("(assumptions)") != std::string::npos;
    const std::string where = runsFile + ", row /" + std::to_string(i) +
                              (fromAssumptions ? "; " + file + " /runs/" + pointerSegment(name) : std::string());
    if (skipped) {
      skipped->push_back({name, said + " (" + where + ")"});
    } else {
      return fail(Error{c.error().code, runsFile, "/" + std::to_string(i), said + (fromAssumptions ? " (" + where + ")" : "")});
    }
  }
  return cases;
}

}  // namespace

Result<std::vector<Case>> loadCases(const std::string& folder, std::vector<Skipped>* skipped) {
  const std::string runsFile = folder + "/public_runs.json";
  auto runs = readJsonFile(runsFile);
  if (!runs) return fail(runs.error());
  return casesOfRows(*runs, runsFile, folder, skipped);
}

Result<std::vector<Case>> loadRuns(const std::string& path, std::vector<Skipped>* skipped) {
  if (std::filesystem::is_directory(path)) return loadCases(path, skipped);
  const std::string folder = std::filesystem::path(path).parent_path().string();
  if (path.size() >= 4 && lower(path.substr(path.size() - 4)) == ".csv") {
    auto rows = rowsFromCsv(path);
    if (!rows) return fail(rows.error());
    return casesOfRows(*rows, path, folder.empty() ? "." : folder, skipped);
  }
  auto rows = readJsonFile(path);
  if (!rows) return fail(rows.error());
  return casesOfRows(*rows, path, folder.empty() ? "." : folder, skipped);
}

}  // namespace colo::validation
