// Checks exports against the tools' schemas in data/export-schemas/ (export_check.h). Each check
// names the schema rule it enforces; the rule texts, sources and versions live in the data files.
#include "colo/planner/export_check.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <sstream>

#include "colo/core/library.h"

namespace colo::planner {
namespace {

bool isPlaceholder(const std::string& v) { return v.rfind("${", 0) == 0; }

std::optional<std::int64_t> integerOf(const std::string& v) {
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (*end != '\0') return std::nullopt;
  return n;
}

bool isNumber(const std::string& v) {
  if (v.empty()) return false;
  char* end = nullptr;
  (void)std::strtod(v.c_str(), &end);
  return *end == '\0';
}

// The type check of one argument's values against its schema entry; empty when they fit.
std::string typeProblem(const std::string& flag, const std::vector<std::string>& values, const Json& entry) {
  const std::string type = entry.value("type", "str");
  if (type == "flag") return values.empty() ? "" : flag + " takes no value, got \"" + values.front() + "\"";
  if (values.empty()) return flag + " needs a value";
  if (type != "list" && values.size() > 1) return flag + " takes one value, got " + std::to_string(values.size());
  for (const auto& v : values) {
    if (isPlaceholder(v)) continue;  // the user fills it
    if (type == "int" && !integerOf(v)) return flag + " expects an integer, got \"" + v + "\"";
    if (type == "float" && !isNumber(v)) return flag + " expects a number, got \"" + v + "\"";
    if (type == "tuple" && !std::regex_match(v, std::regex(R"(-?\d+,-?\d+)"))) {
      return flag + " expects two comma-separated integers, got \"" + v + "\"";
    }
    if (type == "freq" && !integerOf(v) && !std::regex_match(v, std::regex(R"(\[[0-9, *+()\[\]]*\])"))) {
      return flag + " expects an integer or a Python list expression, got \"" + v + "\"";
    }
    if (entry.contains("choices") && entry["choices"].is_array()) {
      bool ok = false;
      for (const auto& c : entry["choices"]) ok |= (c.is_string() ? c.get<std::string>() : c.dump()) == v;
      if (!ok) return flag + ": \"" + v + "\" is not one of " + entry["choices"].dump();
    }
  }
  return "";
}

}  // namespace

Result<Json> loadExportSchema(const std::string& name) {
  const std::string file = (std::filesystem::path(dataDirectory()) / "export-schemas" / (name + ".json")).string();
  auto j = readJsonFile(file);
  if (!j) return fail(j.error());
  if (!j->is_object() || j->value("format", "") != "colo.export-schema/1") {
    return fail(Error::badInput("not a colo.export-schema/1 file", file, "/format"));
  }
  return j;
}

const std::vector<std::string>* ParsedArguments::find(const std::string& flag) const {
  // argparse keeps the last value of a flag given twice (an override appended to a launch).
  for (auto it = flags.rbegin(); it != flags.rend(); ++it) {
    if (it->first == flag) return &it->second;
  }
  return nullptr;
}

std::vector<std::string> shellWords(const std::string& text, bool* unterminated) {
  // Drop comment lines, join continuations, then split as a shell does (quotes group, `${...}` stays).
  std::string joined;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    if (!line.empty() && line.back() == '\\') line.pop_back();
    joined += line + " ";
  }
  std::vector<std::string> words;
  std::string current;
  bool inWord = false;
  char quote = 0;
  for (std::size_t i = 0; i < joined.size(); ++i) {
    const char c = joined[i];
    // A backslash escapes the next character outside quotes, and ", \, $ and ` inside double quotes
    // (ssh ... "test -f \"$f\""); inside single quotes it is itself.
    if (c == '\\' && quote != '\'' && i + 1 < joined.size()) {
      const char next = joined[i + 1];
      if (quote == 0 || next == '"' || next == '\\' || next == '$' || next == '`') {
        current += next;
        inWord = true;
        ++i;
        continue;
      }
    }
    if (quote) {
      if (c == quote) quote = 0;
      else current += c;
    } else if (c == '"' || c == '\'') {
      quote = c;
      inWord = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (inWord) words.push_back(current);
      current.clear();
      inWord = false;
    } else {
      current += c;
      inWord = true;
    }
  }
  if (inWord) words.push_back(current);
  if (unterminated) *unterminated = quote != 0;
  return words;
}

Result<ParsedArguments> parseArgumentList(const std::string& text) {
  bool unterminated = false;
  const std::vector<std::string> words = shellWords(text, &unterminated);
  if (unterminated) return fail(Error::badInput("unterminated quote in the argument list"));
  // A quoted "--flag value" is one element of a bash array that the launch expands unquoted
  // (${ARGS[@]}: word splitting gives argparse "--flag" and "value"; NVIDIA's Megatron-LM examples
  // write their arrays so). No argparse flag holds a space, so such a word is always split.
  std::vector<std::string> tokens;
  for (const auto& w : words) {
    // (--flag="a b" is one argument with its value: argparse reads the value after '='.)
    const std::size_t space = w.find_first_of(" \t");
    if (w.rfind("--", 0) != 0 || space == std::string::npos || w.find('=') < space) {
      tokens.push_back(w);
      continue;
    }
    std::istringstream split(w);
    for (std::string part; split >> part;) tokens.push_back(part);
  }
  ParsedArguments out;
  for (const auto& t : tokens) {
    if (t.rfind("--", 0) == 0) {
      // argparse reads --flag=value as --flag value.
      const auto eq = t.find('=');
      out.flags.push_back({t.substr(0, eq), {}});
      if (eq != std::string::npos) out.flags.back().second.push_back(t.substr(eq + 1));
    } else if (out.flags.empty()) {
      return fail(Error::badInput("argument list starts with a value, not a flag: \"" + t + "\""));
    } else {
      out.flags.back().second.push_back(t);
    }
  }
  return out;
}

namespace {

// The rules of Megatron-LM's argument parser and validate_args, one group per method, over one parsed
// argument list. Degrees are read once (degrees()) and shared by the later groups.
class MegatronCheck {
 public:
  MegatronCheck(const ParsedArguments& a, const Json& arguments) : a_(a), arguments_(arguments) {}

  std::vector<ExportProblem> run(std::int64_t worldSize) {
    argparse();
    startRequirements();
    if (!degrees(worldSize)) return problems_;
    pipelineLayout();
    modelShape();
    experts(worldSize);
    optimizerRecomputePrecision();
    return problems_;
  }

 private:
  void problem(const std::string& rule, const std::string& message) { problems_.push_back({rule, message}); }
  bool has(const char* flag) const { return a_.has(flag); }

  // An integer argument, or the fallback. Sizes beyond any cluster are refused before they are
  // multiplied (products stay inside 64 bits).
  std::int64_t num(const char* flag, std::int64_t fallback) {
    const auto* v = a_.find(flag);
    if (!v || v->empty()) return fallback;
    const auto n = integerOf(v->front()).value_or(fallback);
    if (n < 0 || n > (std::int64_t{1} << 24)) {
      problem("argparse", std::string(flag) + " " + v->front() + " is out of range");
      return fallback;
    }
    return n;
  }

  // Every argument known, of its type, among its choices; none given twice.
  void argparse() {
    std::map<std::string, int> seen;
    for (const auto& [flag, values] : a_.flags) {
      if (++seen[flag] == 2) problem("argparse", flag + " is given twice");
      if (!arguments_.contains(flag)) {
        problem("argparse", "unknown argument " + flag);
        continue;
      }
      if (auto why = typeProblem(flag, values, arguments_[flag]); !why.empty()) problem("argparse", why);
    }
  }

  // What pretrain_gpt.py needs to start: required arguments, a training length, data, a tokenizer.
  void startRequirements() {
    for (const auto& [flag, entry] : arguments_.items()) {
      if (entry.value("required", false) && !a_.has(flag)) problem(flag == "--lr" ? "req_lr" : "req_core", "missing " + flag);
    }
    for (const char* group : {"--train-iters", "--data-path"}) {
      const Json& entry = arguments_.at(group);
      bool any = false;
      for (const auto& alt : entry.at("required_one_of")) {
        std::string name = "--" + alt.get<std::string>();
        if (name.ends_with("..")) name.resize(name.size() - 2);
        for (const auto& [flag, values] : a_.flags) any |= flag.rfind(name, 0) == 0;
      }
      if (!any) problem(group == std::string("--train-iters") ? "req_train_len" : "req_data", "missing one of " + entry["required_one_of"].dump());
    }
    const auto* tokenizer = a_.find("--tokenizer-type");
    const std::string type = tokenizer && !tokenizer->empty() ? tokenizer->front() : "GPT2BPETokenizer";
    if (type == "GPT2BPETokenizer" && !(has("--vocab-file") && has("--merge-file"))) {
      problem("req_tokenizer", "the default GPT2BPETokenizer needs --vocab-file and --merge-file");
    } else if (type == "NullTokenizer" && !has("--vocab-size")) {
      problem("req_tokenizer", "NullTokenizer needs --vocab-size");
    } else if (type != "GPT2BPETokenizer" && type != "NullTokenizer" && !has("--tokenizer-model")) {
      problem("req_tokenizer", type + " needs --tokenizer-model");
    }
  }

  // validate_args's arithmetic of the degrees and the batch; false when the rest cannot be checked.
  bool degrees(std::int64_t worldSize) {
    tp_ = num("--tensor-model-parallel-size", 1);
    pp_ = num("--pipeline-model-parallel-size", 1);
    cp_ = num("--context-parallel-size", 1);
    ep_ = num("--expert-model-parallel-size", 1);
    etp_ = num("--expert-tensor-parallel-size", tp_);
    layers_ = num("--num-layers", 0);
    heads_ = num("--num-attention-heads", 0);
    hidden_ = num("--hidden-size", 0);
    seq_ = num("--seq-length", 0);
    const std::int64_t mbs = num("--micro-batch-size", 1), gbs = num("--global-batch-size", 0);
    constexpr std::int64_t kMaxDegree = 1 << 15;
    for (const std::int64_t d : {tp_, pp_, cp_, ep_, etp_}) {
      if (d < 1 || d > kMaxDegree) {
        problem("world_div_model", "parallel sizes must be from 1 to " + std::to_string(kMaxDegree));
        return false;
      }
    }
    if (worldSize % (tp_ * pp_ * cp_) != 0) {
      problem("world_div_model", "world size " + std::to_string(worldSize) + " is not divisible by tp*pp*cp = " +
                                     std::to_string(tp_ * pp_ * cp_));
      return false;
    }
    const std::int64_t dp = worldSize / (tp_ * pp_ * cp_);
    if (mbs < 1) problem("req_micro_batch", "--micro-batch-size must be positive");
    if (gbs > 0 && mbs >= 1 && gbs % (mbs * dp) != 0) {
      problem("gbs_div", "global batch " + std::to_string(gbs) + " is not divisible by micro-batch x data-parallel = " +
                             std::to_string(mbs) + " x " + std::to_string(dp));
    }
    return true;
  }

  // How the layers split over stages: an explicit layout, virtual stages, uneven first/last stages, or
  // an even split.
  void pipelineLayout() {
    // Any form of virtual stages (a layout of more chunks than stages, chunks per stage, layers per chunk)
    // without p2p overlap needs pp > 2 (validate_args).
    const auto* layoutArg = a_.find("--pipeline-model-parallel-layout");
    const bool layoutInterleaves = layoutArg && !layoutArg->empty() &&
                                   static_cast<std::int64_t>(std::count(layoutArg->front().begin(), layoutArg->front().end(), '|')) + 1 > pp_;
    const bool virtualStages = layoutInterleaves || num("--num-virtual-stages-per-pipeline-rank", 1) > 1 ||
                               num("--num-layers-per-virtual-pipeline-stage", 0) > 0;
    if (virtualStages && pp_ < 3 && has("--no-overlap-p2p-communication")) {
      problem("vpp_pp_size", "virtual pipeline stages without p2p overlap (--no-overlap-p2p-communication) need pp > 2");
    }
    const std::int64_t first = num("--decoder-first-pipeline-num-layers", 0), last = num("--decoder-last-pipeline-num-layers", 0);
    const std::int64_t perVirtual = num("--num-layers-per-virtual-pipeline-stage", 0);
    if (const auto* layout = a_.find("--pipeline-model-parallel-layout"); layout && !layout->empty()) {
      if (perVirtual > 0 || has("--num-virtual-stages-per-pipeline-rank")) {
        problem("vpp_exclusive", "--pipeline-model-parallel-layout with another virtual-stage argument");
      }
      if (first > 0 || last > 0) problem("layout_vs_others", "--pipeline-model-parallel-layout with first/last-stage layer counts");
      layoutCounts(layout->front());
    } else if (perVirtual > 0) {
      if (first > 0 || last > 0) problem("vpp_layers_per_stage", "virtual stages cannot be combined with first/last-stage layer counts");
      if (pp_ < 2) problem("vpp_pp_size", "virtual pipeline stages need pp > 1");
      if (layers_ % pp_ != 0 || (layers_ / pp_) % perVirtual != 0) {
        problem("vpp_layers_per_stage", "num_layers/pp = " + std::to_string(layers_) + "/" + std::to_string(pp_) +
                                            " must be a multiple of --num-layers-per-virtual-pipeline-stage " + std::to_string(perVirtual));
      }
    } else if (first > 0 || last > 0) {
      const std::int64_t stagesLeft = pp_ - (first > 0 ? 1 : 0) - (last > 0 ? 1 : 0);
      const std::int64_t layersLeft = layers_ - first - last;
      if (layersLeft < 0 || (layersLeft > 0) != (stagesLeft > 0) || (stagesLeft > 0 && layersLeft % stagesLeft != 0)) {
        problem("uneven_pp", "the " + std::to_string(layersLeft) + " layers left after the first/last stages do not split over " +
                                 std::to_string(stagesLeft) + " stages");
      }
    } else if (layers_ % pp_ != 0) {
      problem("pp_layers_div", "num_layers " + std::to_string(layers_) + " is not divisible by pp " + std::to_string(pp_));
    }
  }

  // Chunks and layers a --pipeline-model-parallel-layout names (t, t*N; groups "(...)*N" are not
  // written by colo).
  void layoutCounts(const std::string& pattern) {
    std::int64_t chunks = 1, counted = 0;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] == '|') ++chunks;
      if (pattern[i] != 't') continue;
      std::int64_t n = 1;
      if (i + 1 < pattern.size() && pattern[i + 1] == '*') n = std::strtoll(pattern.c_str() + i + 2, nullptr, 10);
      if (n < 0 || n > (std::int64_t{1} << 24)) {
        problem("layout_vs_others", "a layout repeat of " + std::to_string(n) + " layers");
        break;
      }
      counted += n;
    }
    if (chunks % pp_ != 0) problem("layout_vs_others", "the layout's " + std::to_string(chunks) + " chunks are not a multiple of pp " + std::to_string(pp_));
    if (counted != layers_) problem("layout_vs_others", "the layout places " + std::to_string(counted) + " layers of " + std::to_string(layers_));
  }

  // Heads, query groups, widths, sequence length against the degrees.
  void modelShape() {
    if (heads_ > 0 && heads_ % tp_ != 0) problem("heads_div_tp", "num_attention_heads " + std::to_string(heads_) + " % tp " + std::to_string(tp_));
    if (has("--num-query-groups")) {
      const std::int64_t groups = num("--num-query-groups", 1);
      if (!has("--group-query-attention")) problem("gqa_flag_needed", "--num-query-groups has no effect without --group-query-attention");
      if (groups < 1) problem("groups_vs_tp", "--num-query-groups must be positive");
      else if (groups % tp_ != 0 && tp_ % groups != 0) problem("groups_vs_tp", "num_query_groups " + std::to_string(groups) + " and tp " + std::to_string(tp_));
    }
    if (!has("--kv-channels") && heads_ > 0 && hidden_ % heads_ != 0) problem("hidden_div_heads", "hidden_size % num_attention_heads != 0 without --kv-channels");
    if (has("--multi-latent-attention") && has("--group-query-attention")) problem("mla_vs_gqa", "MLA with GQA");
    if (num("--max-position-embeddings", seq_) < seq_) problem("seq_len_max_pos", "--max-position-embeddings below --seq-length");
    if (cp_ > 1 && seq_ % (2 * cp_) != 0) problem("cp_seq_div", "seq_length " + std::to_string(seq_) + " % (2 x cp " + std::to_string(cp_) + ")");
    // a2a+p2p needs the hierarchical sizes, whose product is cp.
    const auto* commType = a_.find("--cp-comm-type");
    const bool hierarchical = commType && std::find(commType->begin(), commType->end(), "a2a+p2p") != commType->end();
    if (const auto* sizes = a_.find("--hierarchical-context-parallel-sizes"); sizes && !sizes->empty()) {
      std::int64_t product = 1;
      for (const auto& s : *sizes) product *= std::max<std::int64_t>(1, std::strtoll(s.c_str(), nullptr, 10));
      if (product != cp_) problem("cp_a2ap2p", "--hierarchical-context-parallel-sizes multiply to " + std::to_string(product) + ", not cp " + std::to_string(cp_));
    } else if (hierarchical) {
      problem("cp_a2ap2p", "--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes");
    }
    if (has("--tp-comm-overlap") && !has("--sequence-parallel")) problem("tp_overlap_needs_sp", "--tp-comm-overlap without --sequence-parallel");
    if (has("--sequence-parallel") && tp_ == 1) problem("sp_auto_disable", "--sequence-parallel with tp 1 is switched off");
  }

  // Experts against their degrees and the layers.
  void experts(std::int64_t worldSize) {
    if (ep_ > 1 || has("--num-experts")) {
      const std::int64_t experts = num("--num-experts", 0);
      if (experts <= 0) problem("ep_needs_experts", "expert parallelism without --num-experts");
      else if (experts % ep_ != 0) problem("experts_div_ep", "num_experts " + std::to_string(experts) + " % ep " + std::to_string(ep_));
      if (worldSize % (etp_ * ep_ * pp_) != 0) problem("expert_grid", "world % (expert tp x ep x pp) != 0");
      if (num("--moe-router-topk", 2) == 1 && !has("--moe-router-pre-softmax")) problem("moe_topk1", "top-1 routing with softmax scores needs --moe-router-pre-softmax");
    }
    const std::int64_t groups = num("--moe-router-num-groups", 0);
    if (groups > 0 && (!has("--moe-router-group-topk") || num("--num-experts", 0) % groups != 0)) {
      problem("router_groups", "--moe-router-num-groups " + std::to_string(groups) + " needs --moe-router-group-topk and a divisor of --num-experts");
    }
    const auto* type = a_.find("--moe-token-dispatcher-type");
    const std::string dispatcher = type && !type->empty() ? type->front() : "allgather";
    if (has("--moe-enable-deepep") && dispatcher != "flex") problem("deepep_flex", "--moe-enable-deepep needs --moe-token-dispatcher-type flex");
    if (const auto* backend = a_.find("--moe-flex-dispatcher-backend");
        has("--moe-enable-deepep") && backend && !backend->empty() && backend->front() == "hybridep") {
      problem("deepep_flex", "--moe-enable-deepep sets the flex backend to deepep; Megatron-Core refuses it beside --moe-flex-dispatcher-backend hybridep");
    }
    if (has("--delay-wgrad-compute") && !has("--overlap-moe-expert-parallel-comm")) {
      problem("ep_overlap", "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm");
    }
    if (has("--overlap-moe-expert-parallel-comm")) {
      const auto* g = a_.find("--recompute-granularity");
      const bool vpp = has("--num-layers-per-virtual-pipeline-stage") || has("--num-virtual-stages-per-pipeline-rank") ||
                       has("--pipeline-model-parallel-layout");
      if (ep_ < 2) problem("ep_overlap", "--overlap-moe-expert-parallel-comm needs expert parallelism");
      if (dispatcher != "alltoall" && dispatcher != "flex") problem("ep_overlap", "--overlap-moe-expert-parallel-comm needs the alltoall or flex dispatcher");
      if (pp_ > 1 && !vpp) problem("ep_overlap", "--overlap-moe-expert-parallel-comm with pp > 1 needs virtual pipeline stages");
      if (g && !g->empty() && g->front() == "full") problem("ep_overlap", "--overlap-moe-expert-parallel-comm with full recompute");
    }
    if (const auto* freq = a_.find("--moe-layer-freq"); freq && !freq->empty() && freq->front().front() == '[') {
      const auto entries = static_cast<std::int64_t>(std::count(freq->front().begin(), freq->front().end(), ',')) + 1;
      if (entries != layers_) problem("moe_layer_freq_len", "--moe-layer-freq lists " + std::to_string(entries) + " layers of " + std::to_string(layers_));
    }
  }

  // Flags that need other flags: overlaps, offload, recompute, precision.
  void optimizerRecomputePrecision() {
    if (has("--overlap-param-gather") && !(has("--use-distributed-optimizer") && has("--overlap-grad-reduce"))) {
      problem("opg_needs_distopt", "--overlap-param-gather needs --use-distributed-optimizer and --overlap-grad-reduce");
    }
    if (has("--fp8-param-gather") && !(has("--use-distributed-optimizer") || has("--use-torch-fsdp2") || has("--use-megatron-fsdp"))) {
      problem("fp8_param_gather", "--fp8-param-gather needs --use-distributed-optimizer (or FSDP)");
    }
    if (has("--fp4-param-gather") && !has("--fp4-format")) problem("fp4_param_gather", "--fp4-param-gather needs --fp4-format");
    const auto* fp8Recipe = a_.find("--fp8-recipe");
    const std::string recipeName = fp8Recipe && !fp8Recipe->empty() ? fp8Recipe->front() : "delayed";
    // TransformerConfig.__post_init__: fp8_output_proj needs fp8 and the MXFP8 recipe.
    if (has("--fp8-output-proj") && !(has("--fp8-format") && recipeName == "mxfp8")) {
      problem("fp8_output_proj", "--fp8-output-proj needs --fp8-format with --fp8-recipe mxfp8");
    }
    if (has("--fp8-param-gather") && recipeName == "mxfp8" && !has("--reuse-grad-buf-for-mxfp8-param-ag")) {
      problem("mxfp8_param_gather_reuse", "--fp8-param-gather with --fp8-recipe mxfp8 needs --reuse-grad-buf-for-mxfp8-param-ag");
    }
    if (has("--optimizer-cpu-offload") && has("--fp8-param-gather") && recipeName != "delayed") {
      problem("cpu_offload_fp8_param_gather", "--optimizer-cpu-offload with --fp8-param-gather needs --fp8-recipe delayed, got " + recipeName);
    }
    if (has("--optimizer-cpu-offload") && !has("--use-precision-aware-optimizer")) {
      problem("cpu_offload_chain", "--optimizer-cpu-offload needs --use-precision-aware-optimizer");
    }
    const auto* granularity = a_.find("--recompute-granularity");
    const std::string g = granularity && !granularity->empty() ? granularity->front() : "";
    if (g == "full" && !(has("--recompute-method") && has("--recompute-num-layers"))) {
      problem("recompute_full", "full recompute needs --recompute-method and --recompute-num-layers");
    }
    if ((g == "selective" || has("--recompute-activations")) && (has("--recompute-method") || has("--recompute-num-layers"))) {
      problem("recompute_selective", "selective recompute takes no --recompute-method or --recompute-num-layers");
    }
    if (const auto* modules = a_.find("--recompute-modules"); modules && (g == "selective" || has("--recompute-activations"))) {
      for (const auto& m : *modules) {
        if (m == "moe_act" && !has("--moe-grouped-gemm")) problem("recompute_modules", "moe_act recompute needs --moe-grouped-gemm");
        if (m == "mla_up_proj" && !has("--multi-latent-attention")) {
          problem("recompute_modules", "mla_up_proj recompute needs --multi-latent-attention");
        }
        if (m == "moe" && has("--overlap-moe-expert-parallel-comm")) {
          problem("recompute_modules", "moe recompute with --overlap-moe-expert-parallel-comm");
        }
        const auto* recipe = a_.find("--fp8-recipe");
        const bool delayed = !recipe || recipe->empty() || recipe->front() == "delayed";
        if ((m == "moe_act" || m == "layernorm") && has("--fp8-format") && delayed) {
          problem("recompute_modules", m + " recompute under fp8 needs an --fp8-recipe other than delayed (the default)");
        }
      }
    }
    if (has("--fp16") && has("--bf16")) problem("fp16_xor_bf16", "--fp16 with --bf16");
    if (const std::int64_t offloaded = num("--cpu-offloading-num-layers", 0); offloaded > 0) {
      if (pp_ > 1) problem("activation_offload", "--cpu-offloading-num-layers with pipeline parallelism");
      if (!g.empty() || has("--recompute-activations")) problem("activation_offload", "--cpu-offloading-num-layers with recompute");
      if (layers_ > 0 && offloaded >= layers_) problem("activation_offload", "--cpu-offloading-num-layers must be below --num-layers");
    }
  }

  const ParsedArguments& a_;
  const Json& arguments_;
  std::vector<ExportProblem> problems_;
  std::int64_t tp_ = 1, pp_ = 1, cp_ = 1, ep_ = 1, etp_ = 1, layers_ = 0, heads_ = 0, hidden_ = 0, seq_ = 0;
};

}  // namespace

std::vector<ExportProblem> checkMegatronArguments(const std::string& text, const Json& schema, std::int64_t worldSize) {
  auto parsed = parseArgumentList(text);
  if (!parsed) return {{"syntax", parsed.error().message}};
  return MegatronCheck(*parsed, schema.at("arguments")).run(worldSize);
}

std::vector<ExportProblem> checkDeepSpeedConfig(const Json& config, const Json& schema, const Plan& plan) {
  std::vector<ExportProblem> problems;
  auto problem = [&](const std::string& rule, const std::string& message) { problems.push_back({rule, message}); };
  const Json& keys = schema.at("keys");
  for (const auto& [key, value] : config.items()) {
    if (key == "comment") continue;  // DeepSpeed ignores top-level keys it does not know; colo's note
    if (!keys.contains(key)) {
      problem("unknown_key", "unknown key \"" + key + "\"");
      continue;
    }
    // Sections that reject unknown keys (pydantic extra=forbid).
    const Json& entry = keys[key];
    if (entry.value("strict_keys", false) && value.is_object() && entry.contains("keys")) {
      for (const auto& [sub, subValue] : value.items()) {
        if (!entry["keys"].contains(sub)) {
          problem("zero_extra_forbid", key + "." + sub + " is not a key DeepSpeed accepts");
        } else if (entry["keys"][sub].value("strict_keys", false) && subValue.is_object()) {
          for (const auto& [leaf, unused] : subValue.items()) {
            if (!entry["keys"][sub].contains("keys") || !entry["keys"][sub]["keys"].contains(leaf)) {
              problem("zero_extra_forbid", key + "." + sub + "." + leaf + " is not a key DeepSpeed accepts");
            }
          }
        }
      }
    }
  }
  // The batch identity with Megatron-DeepSpeed's data-parallel size (the sequence-parallel ranks excluded).
  const std::int64_t tb = config.value("train_batch_size", 0), micro = config.value("train_micro_batch_size_per_gpu", 0);
  const std::int64_t gas = config.value("gradient_accumulation_steps", 0);
  const auto& q = plan.parallel;
  const std::int64_t world = plan.cluster.totalGpus();
  const std::int64_t sp = q.cp;
  if (world % (q.tp * q.pp * sp) != 0) {
    problem("mds_sp_dp", "world % (tp x pp x sequence-parallel) != 0");
  } else {
    const std::int64_t dp = world / (q.tp * q.pp * sp);
    if (tb <= 0 || micro <= 0 || gas <= 0) problem("batch_positive", "batch sizes must be positive");
    else if (tb != micro * gas * dp) {
      problem("batch_identity", "train_batch_size " + std::to_string(tb) + " != micro " + std::to_string(micro) + " x steps " +
                                    std::to_string(gas) + " x data-parallel " + std::to_string(dp));
    }
  }
  const int stage = config.contains("zero_optimization") ? config["zero_optimization"].value("stage", 0) : 0;
  if (q.pp > 1 && stage >= 2) problem("pipe_zero", "DeepSpeed's pipeline engine takes ZeRO stage 0 or 1");
  if (q.virtualStages > 1) problem("pipe_no_interleave", "DeepSpeed's pipeline engine has no virtual stages");
  if (sp > 1 && (q.tp > 1 || q.pp > 1)) problem("mds_sp_constraints", "Megatron-DeepSpeed's sequence parallelism needs tp 1 and pp 1");
  if (config.contains("zero_optimization") && config["zero_optimization"].contains("offload_optimizer")) {
    const Json& off = config["zero_optimization"]["offload_optimizer"];
    if (off.value("ratio", 1.0) < 1.0 && stage != 3) problem("partial_offload_stage3", "offload_optimizer.ratio below 1 needs ZeRO stage 3");
  }
  if (config.contains("fp16") && config.contains("bf16") && config["fp16"].value("enabled", false) && config["bf16"].value("enabled", false)) {
    problem("fp16_bf16_exclusive", "fp16 and bf16 both enabled");
  }
  return problems;
}


Result<std::vector<ExportProblem>> checkExport(const Plan& plan, ExportFormat format, const std::string& text) {
  auto schema = [](const char* name) { return loadExportSchema(name); };
  switch (format) {
    case ExportFormat::kMegatron: {
      auto s = schema("megatron-lm");
      if (!s) return fail(s.error());
      return checkMegatronArguments(text, *s, plan.cluster.totalGpus());
    }
    case ExportFormat::kDeepSpeed: {
      auto s = schema("deepspeed");
      if (!s) return fail(s.error());
      auto parsed = parseJson(text, "deepspeed.json");
      if (!parsed) return std::vector<ExportProblem>{{"syntax", parsed.error().message}};
      return checkDeepSpeedConfig(*parsed, *s, plan);
    }
    case ExportFormat::kColossalAi: {
      auto s = schema("colossalai");
      if (!s) return fail(s.error());
      return checkColossalAiPlugin(text, *s, plan.cluster.totalGpus());
    }
    case ExportFormat::kTorchrun:
    case ExportFormat::kSlurm: {
      auto t = schema("torchrun");
      if (!t) return fail(t.error());
      auto b = schema("sbatch");
      if (!b) return fail(b.error());
      return checkLaunchScript(text, *t, *b);
    }
  }
  return std::vector<ExportProblem>{};
}

}  // namespace colo::planner
