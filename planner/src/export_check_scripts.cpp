// Checks of the Python and shell exports against their tools' schemas (export_check.h): a
// Colossal-AI HybridParallelPlugin call, and torchrun and sbatch launch scripts.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <sstream>

#include "colo/planner/export_check.h"

namespace colo::planner {

std::map<std::string, std::string> pythonKeywordArguments(const std::string& call) {
  std::map<std::string, std::string> out;
  std::string body;
  std::istringstream in(call);
  for (std::string line; std::getline(in, line);) body += line.substr(0, line.find('#')) + "\n";
  int depth = 0;
  std::string current;
  auto flush = [&] {
    const auto eq = current.find('=');
    if (eq != std::string::npos) {
      auto trim = [](std::string s) {
        s.erase(0, s.find_first_not_of(" \t\n"));
        s.erase(s.find_last_not_of(" \t\n") + 1);
        if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'')) s = s.substr(1, s.size() - 2);
        return s;
      };
      out[trim(current.substr(0, eq))] = trim(current.substr(eq + 1));
    }
    current.clear();
  };
  for (const char c : body) {
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0) flush();
    else current += c;
  }
  flush();
  return out;
}


std::vector<ExportProblem> checkColossalAiPlugin(const std::string& source, const Json& schema, std::int64_t worldSize) {
  std::vector<ExportProblem> problems;
  auto problem = [&](const std::string& rule, const std::string& message) { problems.push_back({rule, message}); };
  std::string plugin;
  std::size_t open = std::string::npos;
  for (const char* name : {"MoeHybridParallelPlugin(", "HybridParallelPlugin("}) {
    for (std::size_t at = source.find(name); at != std::string::npos; at = source.find(name, at + 1)) {
      // Not the tail of a longer name (HybridParallelPlugin inside MoeHybridParallelPlugin).
      if (at > 0 && (std::isalnum(static_cast<unsigned char>(source[at - 1])) || source[at - 1] == '_')) continue;
      open = at + std::string(name).size();
      plugin = std::string(name, std::string(name).size() - 1);
      break;
    }
    if (open != std::string::npos) break;
  }
  if (open == std::string::npos) return {{"syntax", "no HybridParallelPlugin(...) call"}};
  std::size_t close = open;
  for (int depth = 1; close < source.size() && depth > 0; ++close) {
    if (source[close] == '(') ++depth;
    if (source[close] == ')') --depth;
  }
  const auto kw = pythonKeywordArguments(source.substr(open, close - open - 1));
  const Json& spec = schema.at("plugins").at(plugin);
  const Json& params = spec.at("params");
  for (const auto& [key, value] : kw) {
    if (!params.contains(key)) problem(key == "ep_size" ? "no_ep_size" : "signature", plugin + " has no parameter " + key);
  }
  for (const auto& [name, entry] : params.items()) {
    if (entry.value("required", false) && !kw.contains(name)) problem("signature", plugin + " needs " + name);
  }
  auto integer = [&](const std::string& key, std::int64_t fallback) {
    if (!kw.contains(key)) return fallback;
    char* end = nullptr;
    const long long v = std::strtoll(kw.at(key).c_str(), &end, 10);
    if (*end != '\0' || kw.at(key).empty() || v < 0 || v > (1LL << 15)) {
      problem("signature", key + " = " + kw.at(key) + " is not an integer from 0 to 32768");
      return fallback;
    }
    return static_cast<std::int64_t>(v);
  };
  auto text = [&](const std::string& key, const std::string& fallback) { return kw.contains(key) ? kw.at(key) : fallback; };
  const Json& choices = spec.at("choices");
  for (const char* key : {"precision", "pp_style", "sequence_parallelism_mode"}) {
    if (!kw.contains(key) || !choices.contains(key)) continue;
    bool ok = false;
    for (const auto& v : choices[key]["values"]) ok |= v.get<std::string>() == kw.at(key);
    if (!ok) problem(std::string(key) + "_valid", std::string(key) + " = \"" + kw.at(key) + "\" is not one of " + choices[key]["values"].dump());
  }
  const std::int64_t tp = integer("tp_size", 1), pp = integer("pp_size", 1), sp = integer("sp_size", 1), ep = integer("ep_size", 1);
  const std::int64_t zero = integer("zero_stage", 0), chunks = integer("num_model_chunks", 1);
  const bool sequence = text("enable_sequence_parallelism", "False") == "True";
  const std::string mode = text("sequence_parallelism_mode", "all_to_all");
  const std::string style = text("pp_style", "1f1b");
  if (tp < 1 || pp < 1 || sp < 1 || ep < 1) {
    problem("signature", "sizes must be positive");
    return problems;
  }
  if (worldSize % (tp * pp) != 0) problem("world_divisible_by_tp_pp", "world " + std::to_string(worldSize) + " % (tp_size x pp_size)");
  if (sequence && (mode == "split_gather" || mode == "ring") && tp <= 1) problem("sp_split_gather_ring_need_tp", mode + " needs tp_size > 1");
  if (!sequence && sp > 1) problem("sp_disabled_no_sp_size", "sp_size without enable_sequence_parallelism");
  if (!sequence && kw.contains("sequence_parallelism_mode")) problem("sp_mode_supported", "a sequence mode without enable_sequence_parallelism");
  if (sequence && !kw.contains("sequence_parallelism_mode")) {
    problem("shardconfig_default_mode_mismatch", "enable_sequence_parallelism without sequence_parallelism_mode: the plugin and ShardConfig default differently");
  }
  if (zero < 0 || zero > 2) problem("zero_stage_range", "zero_stage " + std::to_string(zero) + " (0, 1 or 2)");
  if (pp > 1) {
    if (style == "1f1b" && chunks != 1) problem("1f1b_one_chunk", "1f1b with num_model_chunks " + std::to_string(chunks));
    if (style == "interleaved" && chunks <= 1) problem("interleaved_multi_chunk", "interleaved with one chunk");
    if (style == "zbv" && chunks != 2) problem("zbv_two_chunks", "zbv needs num_model_chunks 2");
    if (!kw.contains("num_microbatches") && !kw.contains("microbatch_size")) problem("pp_needs_microbatches", "pp_size > 1 without num_microbatches or microbatch_size");
    if (zero > 1) problem("pp_zero_le_1", "zero_stage " + std::to_string(zero) + " with pp_size > 1");
    const std::int64_t micro = integer("num_microbatches", pp);
    if (style == "1f1b" && micro < pp) problem("pp_mode_1f1b_microbatches_ge_stages", "num_microbatches below pp_size");
    if (style == "interleaved" && micro % pp != 0) problem("pp_interleaved_microbatches_multiple", "num_microbatches not a multiple of pp_size");
  }
  if (style == "zbv" && !kw.contains("scheduler_nodes")) problem("zbv_needs_scheduler_nodes", "zbv without scheduler_nodes");
  if (zero > 0 && text("precision", "fp16") == "fp32") problem("zero_needs_mixed_precision", "ZeRO with fp32");
  const std::int64_t spRanks = sequence && (mode == "all_to_all" || mode == "ring_attn") ? sp : 1;
  if (worldSize % (tp * pp * spRanks) != 0) problem("mesh_product_equals_world", "world % (tp x pp x sp)");
  if (plugin == "MoeHybridParallelPlugin") {
    if (sequence && mode == "ring_attn") problem("moe_ring_attn_unhandled", "MoeHybridParallelPlugin does not run ring_attn");
    const std::int64_t dp = worldSize / std::max<std::int64_t>(1, tp * pp * spRanks);
    if (dp % ep != 0) problem("dp_divisible_by_ep", "data-parallel size " + std::to_string(dp) + " % ep_size " + std::to_string(ep));
  }
  return problems;
}

std::vector<ExportProblem> checkLaunchScript(const std::string& script, const Json& torchrunSchema, const Json& sbatchSchema) {
  std::vector<ExportProblem> problems;
  const Json& sbatch = sbatchSchema.at("options");
  const Json& torchrun = torchrunSchema.at("options");
  // One torchrun option by its dash or underscore spelling.
  auto torchrunOption = [&](const std::string& flag) -> const Json* {
    if (torchrun.contains(flag)) return &torchrun[flag];
    for (const auto& [name, entry] : torchrun.items()) {
      for (const auto& alias : entry.value("aliases", Json::array())) {
        if (alias.get<std::string>() == flag) return &entry;
      }
    }
    return nullptr;
  };
  std::istringstream in(script);
  std::string joined;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("#SBATCH ", 0) == 0) {
      const std::string option = line.substr(8);
      const auto eq = option.find('=');
      const std::string name = option.substr(0, eq);
      if (!sbatch.contains(name)) {
        problems.push_back({"sbatch", "unknown #SBATCH option " + name});
        continue;
      }
      const Json takes = sbatch[name].value("takes_value", Json(true));
      if (takes.is_boolean() && takes.get<bool>() && eq == std::string::npos) problems.push_back({"sbatch", name + " needs a value"});
      if (takes.is_boolean() && !takes.get<bool>() && eq != std::string::npos) problems.push_back({"sbatch", name + " takes no value"});
      continue;
    }
    if (!line.empty() && line.front() == '#') continue;
    if (!line.empty() && line.back() == '\\') line.pop_back();
    joined += line + " ";
  }
  // The torchrun invocation: its options up to the program (--no-python, then the program).
  const auto at = joined.find("torchrun ");
  if (at == std::string::npos) {
    problems.push_back({"torchrun", "no torchrun invocation"});
    return problems;
  }
  std::istringstream words(joined.substr(at + 9));
  std::vector<std::string> tokens;
  for (std::string w; words >> w;) tokens.push_back(w);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if (t.rfind("--", 0) != 0) break;  // the program
    const std::string flag = t.substr(0, t.find('='));
    const Json* entry = torchrunOption(flag);
    if (!entry) {
      problems.push_back({"torchrun", "unknown torchrun option " + flag});
      continue;
    }
    const Json takes = entry->value("takes_value", Json(true));
    const bool needsValue = takes.is_boolean() ? takes.get<bool>() : false;
    if (needsValue && t.find('=') == std::string::npos) {
      if (i + 1 >= tokens.size() || tokens[i + 1].rfind("--", 0) == 0) problems.push_back({"torchrun", flag + " needs a value"});
      else ++i;
    }
    if (flag == "--no-python" || flag == "--no_python") break;  // the program follows
  }
  return problems;
}

}  // namespace colo::planner
