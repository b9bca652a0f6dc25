// Input checks of published rows and of assumptions.json: every value the harness turns into a count, a
// degree or a size, against the bounds of colo/core/limits.h.
#include <string>

#include "colo/core/limits.h"
#include "validation_rows_detail.h"

namespace colo::validation::detail {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool has(const std::string& haystack, const char* needle) { return haystack.find(needle) != std::string::npos; }

std::optional<double> number(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

std::string text(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

Error rowError(const std::string& id, const std::string& field, const std::string& why) {
  return Error::badInput(id + ": " + field + ": " + why);
}

// ---- input checks -------------------------------------------------------------------------------------
// Every value the harness turns into a count, a degree or a size is checked here first, against the
// bounds of colo/core/limits.h, so that no cast overflows, nothing divides by zero and no loop runs for
// minutes. (JSON numbers are finite already: parseJson refuses 1e999.)
struct IntegerField {
  const char* part;
  const char* key;
  std::int64_t minimum;
  std::int64_t maximum;
};

const IntegerField kRowIntegers[] = {
    {"model", "num_layers", 1, limits::kMaxLayers},
    {"model", "hidden_size", 1, limits::kMaxWidth},
    {"model", "num_attention_heads", 1, limits::kMaxHeads},
    {"model", "num_query_groups", 0, limits::kMaxHeads},
    {"model", "num_key_value_heads", 0, limits::kMaxHeads},
    {"model", "num_kv_heads", 0, limits::kMaxHeads},
    {"model", "ffn_hidden_size", 1, limits::kMaxWidth},
    {"model", "seq_len", 1, limits::kMaxSeqLen},
    {"model", "vocab_size", 1, limits::kMaxVocab},
    {"model", "num_experts", 0, limits::kMaxExperts},
    {"model", "top_k", 0, limits::kMaxExperts},
    {"model", "moe_top_k", 0, limits::kMaxExperts},
    {"model", "n_shared_experts", 0, limits::kMaxExperts},
    {"model", "n_group", 0, limits::kMaxExperts},
    {"model", "topk_group", 0, limits::kMaxExperts},
    {"model", "moe_router_num_groups", 0, limits::kMaxExperts},
    {"model", "moe_router_group_topk", 0, limits::kMaxExperts},
    {"model", "shared_expert_intermediate_size", 0, limits::kMaxWidth},
    {"model", "moe_shared_expert_intermediate_size", 0, limits::kMaxWidth},
    {"model", "q_lora_rank", 0, limits::kMaxWidth},
    {"model", "kv_lora_rank", 0, limits::kMaxWidth},
    {"model", "qk_nope_head_dim", 0, limits::kMaxWidth},
    {"model", "qk_rope_head_dim", 0, limits::kMaxWidth},
    {"model", "qk_head_dim", 0, limits::kMaxWidth},
    {"model", "qk_pos_emb_head_dim", 0, limits::kMaxWidth},
    {"model", "v_head_dim", 0, limits::kMaxWidth},
    {"model", "head_dim", 0, limits::kMaxWidth},
    {"model", "kv_channels", 0, limits::kMaxWidth},
    {"model", "sliding_window", 0, limits::kMaxSeqLen},
    {"model", "sliding_window_pattern", 0, limits::kMaxLayers},
    {"model", "window_attn_skip_freq", 0, limits::kMaxLayers},
    {"model", "decoder_sparse_step", 1, limits::kMaxLayers},
    {"model", "interleave_moe_layer_step", 1, limits::kMaxLayers},
    {"hardware", "gpus_per_node", 1, limits::kMaxGpus},
    {"hardware", "num_gpus", 1, limits::kMaxGpus},
    {"hardware", "num_nodes", 1, limits::kMaxGpus},
    {"hardware", "nodes", 1, limits::kMaxGpus},
    {"parallel", "tp", 1, limits::kMaxGpus},
    {"parallel", "pp", 1, limits::kMaxGpus},
    {"parallel", "dp", 1, limits::kMaxGpus},
    {"parallel", "cp", 1, limits::kMaxGpus},
    {"parallel", "ep", 1, limits::kMaxGpus},
    {"parallel", "etp", 1, limits::kMaxGpus},
    {"parallel", "virtual_pipeline_stages", 1, limits::kMaxLayers},
    {"parallel", "num_layers_per_virtual_pipeline_stage", 1, limits::kMaxLayers},
    {"parallel", "zero_stage", 0, 3},
    {"training", "micro_batch_size", 1, limits::kMaxBatch},
    {"training", "global_batch_size", 1, limits::kMaxBatch},
    {"training", "recompute_num_layers", 0, limits::kMaxLayers},
    {"training", "recompute_layers", 0, limits::kMaxLayers},
    {"training", "checkpoint_num_layers", 0, limits::kMaxLayers},
};

// A whole number in [minimum, maximum], or the reason it is not.
std::optional<std::string> integerProblem(const Json& value, std::int64_t minimum, std::int64_t maximum) {
  if (!value.is_number()) return "expected a whole number, got " + describeJsonValue(value);
  const double d = value.get<double>();
  if (d != std::floor(d)) return "expected a whole number, got " + describeJsonValue(value);
  if (d < static_cast<double>(minimum) || d > static_cast<double>(maximum)) {
    return "must be between " + std::to_string(minimum) + " and " + std::to_string(maximum) + ", got " +
           describeJsonValue(value);
  }
  return std::nullopt;
}

// Numbers a row may give that are not counts: finite already, but bounded so that products stay finite.
Result<void> checkRowRanges(const Json& row, const std::string& id) {
  for (const auto& f : kRowIntegers) {
    const Json& part = row[f.part];
    const auto it = part.find(f.key);
    if (it == part.end() || it->is_null()) continue;
    if (auto problem = integerProblem(*it, f.minimum, f.maximum)) {
      return fail(rowError(id, std::string(f.part) + "." + f.key, *problem));
    }
  }
  for (const char* part : {"model", "hardware", "parallel", "training", "measured"}) {
    for (const auto& [key, value] : row[part].items()) {
      if (value.is_number() && std::fabs(value.get<double>()) > 1e18) {
        return fail(rowError(id, std::string(part) + "." + key, "out of range, got " + describeJsonValue(value)));
      }
      // Texts go through std::regex, whose matcher recurses per character.
      if (value.is_string() && value.get_ref<const std::string&>().size() > 1024) {
        return fail(rowError(id, std::string(part) + "." + key, "text longer than 1024 characters"));
      }
    }
  }
  return {};
}

// The settings of assumptions.json ("defaults", each framework's "settings", each run's entry): the
// types the harness reads them as, and the same bounds as a row's fields.
Result<void> checkSettings(const Json& settings, const std::string& file, const std::string& at) {
  if (!settings.is_object()) return fail(Error::badInput("must be an object, got " + describeJsonValue(settings), file, at));
  for (const auto& [key, value] : settings.items()) {
    const std::string where = at + "/" + key;
    auto bad = [&](const std::string& why) { return fail(Error::badInput(why + ", got " + describeJsonValue(value), file, where)); };
    if (key == "cp_comm_type") {
      if (!value.is_string() || !parseCpCommType(value.get<std::string>())) return bad("must be p2p, all_gather, a2a or a2a+p2p");
    } else if (key == "cluster" || key == "precision" || key == "recompute" || key == "schedule" || key == "attention" ||
        key == "selective_recompute") {
      if (!value.is_string()) return bad("must be a string");
      // A value the harness parses is checked here, so that its error names this file, not every row.
      const std::string& name = value.get_ref<const std::string&>();
      if (key == "precision") {
        if (auto parsed = parseDType(name); !parsed) return fail(Error::badInput(parsed.error().message, file, where));
      } else if (key == "recompute" || key == "selective_recompute") {
        if (auto parsed = parseRecompute(name); !parsed) return fail(Error::badInput(parsed.error().message, file, where));
      } else if (key == "attention") {
        Execution named;
        if (!setAttention(named, name)) return bad("must be flash, flash2 or unfused");
      }
    } else if (key == "sequence_parallel" || key == "overlap_grad_reduce" || key == "overlap_param_gather" ||
               key == "tp_comm_overlap" || key == "no_grad_accumulation" || key == "fp32_params" ||
               key == "fused_cross_entropy" || key == "te_dummy_wgrads" || key == "fused_bias_grad" || key == "te_grouped_gemm" ||
               key == "cross_entropy_in_place" || key == "per_parameter_gathers" || key == "grad_nan_check" || key == "torch_cross_entropy" || key == "native_fused_cross_entropy" ||
               key == "overlap_p2p_comm" || key == "activation_offload" || key == "grad_reduce_in_bf16" || key == "quantized_params") {
      if (!value.is_boolean()) return bad("must be true or false");
    } else if (key == "selective_recompute_modules") {
      if (!value.is_string()) return bad("must be a string: a comma list of core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts");
      if (auto parsed = parseRecomputeModules(value.get<std::string>()); !parsed) {
        return fail(Error::badInput(parsed.error().message, file, where));
      }
    } else if (key == "unfused_kernels" || key == "compiled_unfused_kernels") {
      if (!value.is_string()) return bad("must be a string: all, none, or a comma list of rmsnorm, final_rmsnorm, rotary, gated_activation");
      if (auto parsed = parseUnfusedKernels(value.get<std::string>()); !parsed) {
        return fail(Error::badInput(parsed.error().message, file, where));
      }
    } else if (key == "host_us_per_op") {
      if (!value.is_number() || !(value.get<double>() >= 0) || value.get<double>() > 1e6) {
        return bad("must be a number from 0 to 1e6");
      }
    } else if (key == "gpu_memory_GiB" || key == "network_GBps") {
      if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > 1e6) {
        return bad("must be a number above 0 and at most 1e6");
      }
    } else if (key == "micro_batch_size" || key == "virtual_stages" || key == "interleaved_virtual_stages" || key == "zero_stage") {
      const std::int64_t maximum = key == "micro_batch_size" ? limits::kMaxBatch : key == "zero_stage" ? 3 : limits::kMaxLayers;
      if (auto problem = integerProblem(value, key == "zero_stage" ? 0 : 1, maximum)) {
        return fail(Error::badInput(*problem, file, where));
      }
    } else if (key == "stages") {
      if (!value.is_array() || value.empty() || static_cast<std::int64_t>(value.size()) > limits::kMaxLayers) {
        return bad("must be an array of 1 to " + std::to_string(limits::kMaxLayers) + " layer counts");
      }
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (auto problem = integerProblem(value[i], 1, limits::kMaxLayers)) {
          return fail(Error::badInput(*problem, file, where + "/" + std::to_string(i)));
        }
      }
    } else if (key == "grad_accumulation") {
      if (value.is_object()) {
        for (const auto& [precision, mode] : value.items()) {
          if (!mode.is_string()) {
            return fail(Error::badInput("must be a string, got " + describeJsonValue(mode), file, where + "/" + precision));
          }
          if (auto parsed = parseGradAccumulation(mode.get<std::string>()); !parsed) {
            return fail(Error::badInput(parsed.error().message, file, where + "/" + precision));
          }
        }
      } else if (!value.is_string()) {
        return bad("must be a mode or an object of modes by precision");
      } else if (auto parsed = parseGradAccumulation(value.get<std::string>()); !parsed) {
        return fail(Error::badInput(parsed.error().message, file, where));
      }
    }
  }
  return {};
}

std::string pointerSegment(const std::string& key) {
  std::string out;
  for (const char c : key) out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  return out;
}

Result<void> checkAssumptions(const Json& a, const std::string& file) {
  if (!a.is_object()) return fail(Error::badInput("expected a JSON object at the top level, got " + describeJsonValue(a), file));
  if (auto it = a.find("defaults"); it != a.end()) {
    if (auto r = checkSettings(*it, file, "/defaults"); !r) return r;
  }
  if (auto it = a.find("frameworks"); it != a.end()) {
    if (!it->is_array()) return fail(Error::badInput("must be an array, got " + describeJsonValue(*it), file, "/frameworks"));
    for (std::size_t i = 0; i < it->size(); ++i) {
      const Json& f = (*it)[i];
      const std::string at = "/frameworks/" + std::to_string(i);
      if (!f.is_object()) return fail(Error::badInput("must be an object, got " + describeJsonValue(f), file, at));
      const auto match = f.find("match");
      if (match == f.end() || !match->is_array()) {
        return fail(Error::badInput("must be an array of keywords", file, at + "/match"));
      }
      for (std::size_t k = 0; k < match->size(); ++k) {
        if (!(*match)[k].is_string()) {
          return fail(Error::badInput("must be a string, got " + describeJsonValue((*match)[k]), file,
                                      at + "/match/" + std::to_string(k)));
        }
      }
      const auto settings = f.find("settings");
      if (settings == f.end()) return fail(Error::badInput("missing field \"settings\"", file, at + "/settings"));
      if (auto r = checkSettings(*settings, file, at + "/settings"); !r) return r;
    }
  }
  if (auto it = a.find("runs"); it != a.end()) {
    if (!it->is_object()) return fail(Error::badInput("must be an object, got " + describeJsonValue(*it), file, "/runs"));
    for (const auto& [id, settings] : it->items()) {
      if (auto r = checkSettings(settings, file, "/runs/" + pointerSegment(id)); !r) return r;
    }
  }
  return {};
}

}  // namespace colo::validation::detail
