#include "validation_harness.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <regex>

#include "colo/core/library.h"
#include "colo/core/limits.h"
#include "colo/core/model.h"
#include "colo/costmodel/evaluator.h"

namespace colo::validation {
namespace {

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
    {"hardware", "gpus_per_node", 1, limits::kMaxGpus},
    {"hardware", "num_gpus", 1, limits::kMaxGpus},
    {"hardware", "num_nodes", 1, limits::kMaxGpus},
    {"hardware", "nodes", 1, limits::kMaxGpus},
    {"parallel", "tp", 1, limits::kMaxGpus},
    {"parallel", "pp", 1, limits::kMaxGpus},
    {"parallel", "dp", 1, limits::kMaxGpus},
    {"parallel", "cp", 1, limits::kMaxGpus},
    {"parallel", "ep", 1, limits::kMaxGpus},
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
    if (key == "cluster" || key == "precision" || key == "recompute" || key == "schedule" || key == "attention") {
      if (!value.is_string()) return bad("must be a string");
      // A value the harness parses is checked here, so that its error names this file, not every row.
      const std::string& name = value.get_ref<const std::string&>();
      if (key == "precision") {
        if (auto parsed = parseDType(name); !parsed) return fail(Error::badInput(parsed.error().message, file, where));
      } else if (key == "recompute") {
        if (auto parsed = parseRecompute(name); !parsed) return fail(Error::badInput(parsed.error().message, file, where));
      }
    } else if (key == "sequence_parallel" || key == "overlap_grad_reduce" || key == "overlap_param_gather" ||
               key == "tp_comm_overlap" || key == "no_grad_accumulation") {
      if (!value.is_boolean()) return bad("must be true or false");
    } else if (key == "host_us_per_op") {
      if (!value.is_number() || !(value.get<double>() >= 0) || value.get<double>() > 1e6) {
        return bad("must be a number from 0 to 1e6");
      }
    } else if (key == "gpu_memory_GiB" || key == "network_GBps") {
      if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > 1e6) {
        return bad("must be a number above 0 and at most 1e6");
      }
    } else if (key == "micro_batch_size" || key == "virtual_stages" || key == "zero_stage") {
      const std::int64_t maximum = key == "micro_batch_size" ? limits::kMaxBatch : key == "virtual_stages" ? limits::kMaxLayers : 3;
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

// ---- measured step ------------------------------------------------------------------------------------
// What a `measured` (or `derived`) key gives, read from the words of its name, so that a row written
// with other names than this folder's (elapsed_time_per_iteration_ms, iter_time_s, steps_per_s,
// throughput_tokens_per_sec_per_gpu, model_tflops, aggregate_pflops, mfu_percent) still gives its step.
enum class Measure { kNone, kStepSeconds, kStepsPerSecond, kSamplesPerSecond, kTokensPerSecond, kTflops, kMfu };

struct MeasureKey {
  Measure measure = Measure::kNone;
  double scale = 1.0;   // to seconds, per second, TFLOP/s, or a fraction (MFU)
  bool perGpu = false;     // a rate or TFLOP/s per GPU rather than for the whole job
  bool aggregate = false;  // "aggregate_pflops", "cluster_tflops": the whole job's, whatever its size
};

std::vector<std::string> keyWords(const std::string& key) {
  std::vector<std::string> words;
  std::string word;
  for (const char ch : lower(key) + "_") {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      word += ch;
    } else if (!word.empty()) {
      words.push_back(word);
      word.clear();
    }
  }
  return words;
}

// Word lists of key names, each read once.
using Words = std::initializer_list<const char*>;
constexpr Words kIterationWords{"iteration", "iterations", "iter", "iters", "it", "step", "steps", "batch"};
constexpr Words kMillisecondWords{"ms", "msec", "millisecond", "milliseconds"};
constexpr Words kMinuteWords{"min", "mins", "minute", "minutes"};
constexpr Words kSecondWords{"s", "sec", "secs", "second", "seconds"};

bool oneOf(const std::string& word, Words options) {
  for (const char* o : options) {
    if (word == o) return true;
  }
  return false;
}

MeasureKey classifyMeasure(const std::string& key) {
  const auto words = keyWords(key);
  auto any = [&](Words options) {
    for (const auto& w : words) {
      if (oneOf(w, options)) return true;
    }
    return false;
  };
  auto prefixed = [&](const char* prefix) {
    for (const auto& w : words) {
      if (w.rfind(prefix, 0) == 0) return true;
    }
    return false;
  };
  MeasureKey m;
  // Not a step: memory, a layer's own timing, whole-training durations, energy.
  if (prefixed("mem") || any({"layer", "train", "training", "total", "epoch", "ttt", "energy", "power", "hfu", "peak",
                              "theoretical", "target", "hardware"})) {
    return m;  // hardware FLOP/s count recompute under a convention the row does not give
  }
  m.perGpu = any({"gpu", "gpus", "device", "accelerator", "chip"});
  m.aggregate = any({"aggregate", "cluster", "job", "overall"});
  const double timeUnit = any(kMillisecondWords) ? 1e-3 : any(kMinuteWords) ? 60.0 : any(kSecondWords) ? 1.0 : 0.0;
  if (any({"mfu"})) {
    m.measure = Measure::kMfu;
    m.scale = any({"pct", "percent"}) ? 0.01 : 1.0;  // a bare mfu above 1 is read as percent later
    return m;
  }
  if (prefixed("tflop")) {
    m.measure = Measure::kTflops;
    return m;
  }
  if (prefixed("pflop")) {
    m.measure = Measure::kTflops;
    m.scale = 1e3;
    return m;
  }
  // Rates: per second (or per minute).
  const double perUnit = timeUnit > 0 ? 1.0 / timeUnit : 1.0;
  if (any({"tokens", "token", "tok", "toks", "wps"})) {
    m.measure = Measure::kTokensPerSecond;
    m.scale = perUnit;
    return m;
  }
  if (any({"samples", "sample", "sequences", "sequence", "seqs", "seq"})) {
    m.measure = Measure::kSamplesPerSecond;
    m.scale = perUnit;
    return m;
  }
  if (!any(kIterationWords) || timeUnit == 0) return m;
  // "steps_per_s", "it_s", "iterations_per_second": a count before a time; otherwise a time per step.
  std::size_t firstIteration = words.size(), firstUnit = words.size();
  for (std::size_t i = 0; i < words.size(); ++i) {
    const auto& w = words[i];
    const bool isUnit = oneOf(w, kSecondWords) || oneOf(w, kMillisecondWords) || oneOf(w, kMinuteWords);
    if (oneOf(w, kIterationWords) && firstIteration == words.size()) firstIteration = i;
    if (isUnit && firstUnit == words.size()) firstUnit = i;
  }
  const bool rate = any({"per"}) && firstIteration < firstUnit && !any({"time", "elapsed", "latency", "duration"});
  m.measure = rate ? Measure::kStepsPerSecond : Measure::kStepSeconds;
  m.scale = rate ? perUnit : timeUnit;
  return m;
}

// ---- measured memory ----------------------------------------------------------------------------------
// A memory figure is any `measured` key naming memory and a unit: mib or mb (MiB: nvidia-smi's unit, and
// what Megatron's memory report calls MB), gib (GiB), gb (10^9 bytes, as written), bytes. The key's
// other words say what was measured: allocated (live tensors), reserved (the caching allocator's
// segments), else the device's used memory as nvidia-smi shows it.
double memoryKeyUnit(const std::string& key) {
  const std::string k = lower(key);
  if (!has(k, "mem") || has(k, "bandwidth") || has(k, "util") || has(k, "pct") || has(k, "percent") ||
      has(k, "fraction")) {
    return 0;
  }
  for (const auto& w : keyWords(k)) {
    if (w == "mib" || w == "mb") return 1024.0 * 1024.0;
    if (w == "gib") return 1024.0 * 1024.0 * 1024.0;
    if (w == "gb") return 1e9;
    if (w == "bytes") return 1.0;
  }
  return 0;
}

struct MeasuredMemory {
  double bytes = 0;
  MemoryMeasure measure = MemoryMeasure::kDevice;
  std::string key;
};

// The most specific figure a row gives: allocated, then reserved, then the device's.
std::optional<MeasuredMemory> measuredMemory(const Json& measured) {
  std::optional<MeasuredMemory> best;
  for (const auto& [key, value] : measured.items()) {
    const double unit = memoryKeyUnit(key);
    if (unit <= 0 || !value.is_number() || value.get<double>() <= 0) continue;
    const std::string k = lower(key);
    const MemoryMeasure measure = has(k, "alloc")      ? MemoryMeasure::kAllocated
                                  : has(k, "reserved") ? MemoryMeasure::kReserved
                                                       : MemoryMeasure::kDevice;
    if (!best || static_cast<int>(measure) > static_cast<int>(best->measure)) {
      best = MeasuredMemory{value.get<double>() * unit, measure, key};
    }
  }
  return best;
}

// The settings a row leaves open come from, in order: the run's own entry in assumptions.json, the
// first framework whose keywords the row's source, architecture or schedule mention, then the defaults.
struct Settings {
  Json run = Json::object();
  Json framework = Json::object();
  Json defaults = Json::object();
  Json pick(const char* key) const {
    for (const Json* j : {&run, &framework, &defaults}) {
      if (j->contains(key)) return (*j)[key];
    }
    return nullptr;
  }
};

// ---- hardware ---------------------------------------------------------------------------------------

// The library cluster whose GPU (and node design) a row's `hardware.gpu` names, and the one whose GPU
// specification matches it best (memory size, PCIe vs SXM).
struct ClusterChoice {
  std::string cluster;
  std::string gpuFrom;
};

std::optional<ClusterChoice> clusterForGpu(const std::string& gpuText, double memoryGb) {
  const std::string g = lower(gpuText);
  if (has(g, "v100")) return ClusterChoice{"dgx1-v100-x4", "dgx1-v100-x4"};
  if (has(g, "a100") || has(g, "a800")) {  // A800: the export A100 (400 GB/s NVLink)
    if (has(g, "pcie")) return ClusterChoice{"dgx-a100-80gb-x128", "a100-pcie-8x"};
    const bool small = has(g, "40gb") || (memoryGb > 0 && memoryGb <= 48);
    return ClusterChoice{"dgx-a100-80gb-x128", small ? "dgx-a100-40gb" : "dgx-a100-80gb-x128"};
  }
  if (has(g, "gb200")) return ClusterChoice{"gb200-nvl72-x8", "gb200-nvl72-x8"};  // before B200: GB200 names it
  if (has(g, "b200")) return ClusterChoice{"dgx-b200-x64", "dgx-b200-x64"};
  if (has(g, "h200") || has(g, "gh200")) return ClusterChoice{"hgx-h200-x16", "hgx-h200-x16"};  // GH200: HBM3e like H200
  if (has(g, "4090")) return ClusterChoice{"rtx4090-8x", "rtx4090-8x"};
  if (has(g, "h100") || has(g, "h800")) return ClusterChoice{"dgx-h100-x64", "dgx-h100-x64"};
  return std::nullopt;
}

struct Network {
  double bytesPerSecondPerGpu = 0;
  LinkKind kind = LinkKind::kInfiniBand;
};

// Per-GPU network bandwidth from a row's `hardware.inter_node` text, e.g. "8x Mellanox 200 Gb/s HDR
// InfiniBand per node", "1x InfiniBand EDR 100 Gb/s per node", "Omni-Path (OPA), 4 links per node",
// "InfiniBand NDR presumed". Link rates: a number in Gb/s, else the named generation (FDR 56, EDR and
// Omni-Path 100, HDR 200, NDR 400 Gb/s). Several links, or "per node", are shared by the node's GPUs;
// a single unqualified link is one per GPU (DGX SuperPOD rail design).
std::optional<Network> parseNetwork(const std::string& raw, std::int64_t gpusPerNode) {
  const std::string t = lower(raw);
  if (t.empty()) return std::nullopt;
  double gbits = 0;
  std::smatch m;
  static const std::regex rate(R"((\d+(?:\.\d+)?)\s*gb(?:it)?(?:/|p)s)");
  static const std::regex terabits(R"((\d+(?:\.\d+)?)\s*tb(?:it)?(?:/|p)s)");  // "3.2 Tb/s per node"
  static const std::regex shortRate(R"((\d+)\s*g(?:be)?\b)");                  // "400G NDR", "100GbE"
  if (std::regex_search(t, m, rate)) gbits = std::stod(m[1]);
  else if (std::regex_search(t, m, terabits)) gbits = std::stod(m[1]) * 1000.0;
  else if (std::regex_search(t, m, shortRate)) gbits = std::stod(m[1]);
  else if (has(t, "ndr")) gbits = 400;
  else if (has(t, "hdr")) gbits = 200;
  else if (has(t, "edr") || has(t, "omni-path") || has(t, "opa")) gbits = 100;
  else if (has(t, "fdr")) gbits = 56;
  if (gbits <= 0) return std::nullopt;
  double count = 0;
  static const std::regex times(R"((\d+)\s*x(?![a-z]))");  // "8x HDR", "8 x 200", "8x400G"
  static const std::regex links(R"((\d+)\s*(?:links|nics|hcas|ports|adapters|rails))");
  if (std::regex_search(t, m, times)) count = std::stod(m[1]);
  else if (std::regex_search(t, m, links)) count = std::stod(m[1]);
  const bool perNode = has(t, "per node") || count > 1;
  if (count <= 0) count = 1;
  Network n;
  const double bytes = count * gbits * 1e9 / 8.0;
  n.bytesPerSecondPerGpu = perNode ? bytes / static_cast<double>(std::max<std::int64_t>(1, gpusPerNode)) : bytes;
  if (has(t, "roce")) n.kind = LinkKind::kRoce;
  else if (has(t, "ethernet") || has(t, "gbe")) n.kind = LinkKind::kEthernet;
  return n;
}

Result<ClusterSpec> clusterOf(const Json& hw, const Settings& set, const std::string& id, bool* assumed) {
  const double memoryGb = number(hw, "gpu_memory_gb").value_or(0);
  std::string clusterName;
  std::string gpuFrom;
  if (set.run.contains("cluster")) {
    clusterName = gpuFrom = set.run["cluster"].get<std::string>();
  } else if (auto choice = clusterForGpu(text(hw, "gpu"), memoryGb)) {
    clusterName = choice->cluster;
    gpuFrom = choice->gpuFrom;
  } else {
    return fail(rowError(id, "hardware.gpu", "'" + text(hw, "gpu") + "' matches no GPU of the cluster library (V100, A100, H100, H200, B200, GB200)"));
  }
  auto load = [&](const std::string& name) -> Result<ClusterSpec> {
    auto file = resolveLibraryFile(LibraryKind::kClusters, name);
    if (!file) return fail(file.error());
    return loadCluster(*file);
  };
  auto cluster = load(clusterName);
  if (!cluster) {
    if (set.run.contains("cluster")) return fail(rowError(id, "cluster (assumptions)", cluster.error().toString()));
    return fail(cluster.error());
  }
  if (gpuFrom != clusterName) {
    auto other = load(gpuFrom);
    if (!other) return fail(other.error());
    cluster->gpu = other->gpu;
  }
  if (memoryGb > 0) cluster->gpu.memoryBytes = memoryGb * 1024.0 * 1024.0 * 1024.0;
  if (set.run.contains("gpu_memory_GiB")) cluster->gpu.memoryBytes = set.run["gpu_memory_GiB"].get<double>() * 1024 * 1024 * 1024;
  const auto gpn = number(hw, "gpus_per_node");
  if (gpn && *gpn >= 1 && static_cast<std::int64_t>(*gpn) != cluster->gpusPerNode) {
    cluster->gpusPerNode = static_cast<std::int64_t>(*gpn);
    for (auto& l : cluster->links) {
      if (!isNetwork(l.kind)) l.spanGpus = std::min(l.spanGpus, cluster->gpusPerNode);
    }
  }
  if (cluster->links.size() > 1) {
    LinkLevel& net = cluster->links.back();
    if (set.run.contains("network_GBps")) {
      net.bytesPerSecond = set.run["network_GBps"].get<double>() * 1e9;
    } else if (auto n = parseNetwork(text(hw, "inter_node"), cluster->gpusPerNode)) {
      net.bytesPerSecond = n->bytesPerSecondPerGpu;
      net.kind = n->kind;
    } else if (number(hw, "num_gpus").value_or(1) > static_cast<double>(cluster->gpusPerNode)) {
      *assumed = true;  // the network is the library cluster's
    }
  }
  const auto gpus = number(hw, "num_gpus");
  if (!gpus || *gpus < 1) return fail(rowError(id, "hardware.num_gpus", "missing or not positive"));
  if (*gpus > static_cast<double>(limits::kMaxGpus)) {
    return fail(rowError(id, "hardware.num_gpus", "must be at most " + std::to_string(limits::kMaxGpus) + ", got " +
                                                      std::to_string(*gpus)));
  }
  auto scaled = scaleCluster(*cluster, static_cast<std::int64_t>(*gpus));
  if (!scaled) return fail(rowError(id, "hardware.num_gpus", scaled.error().message));
  return *scaled;
}

// ---- model ------------------------------------------------------------------------------------------

// Letters and digits of a name, lowercased: "LLaMA-2 13B" and "llama2-13b" both give "llama213b".
std::string nameKey(const std::string& name) {
  std::string k;
  for (const auto& w : keyWords(name)) k += w;
  return k;
}

// The library model a row names ("Llama 2 13B", "GPT-3 175B", "Mixtral 8x7B"), for a row that gives its
// model by name rather than by its shape.
std::optional<ModelSpec> libraryModelNamed(const std::string& name) {
  const std::string key = nameKey(name);
  if (key.empty()) return std::nullopt;
  for (const auto& entry : libraryEntries(LibraryKind::kModels)) {
    if (nameKey(entry) != key) continue;
    auto file = resolveLibraryFile(LibraryKind::kModels, entry);
    if (!file) return std::nullopt;
    auto model = loadModel(*file);
    if (!model || !model->spec) return std::nullopt;
    return *model->spec;
  }
  return std::nullopt;
}

Result<ModelSpec> modelOf(const Json& m, const std::string& id, bool layerOnly, bool* assumed) {
  // A row that names a library model instead of giving its shape: that model, with whatever the row
  // does give (sequence length, vocabulary) on top.
  if (!number(m, "num_layers") || !number(m, "hidden_size") || !number(m, "num_attention_heads")) {
    if (auto named = libraryModelNamed(text(m, "name"))) {
      ModelSpec s = *named;
      if (auto v = number(m, "seq_len"); v && *v >= 1) s.seqLen = static_cast<std::int64_t>(*v);
      if (auto v = number(m, "vocab_size"); v && *v >= 1) s.vocabSize = static_cast<std::int64_t>(*v);
      if (s.maxPositionEmbeddings > 0 && s.seqLen > s.maxPositionEmbeddings && s.positionEmbedding != PositionEmbedding::kLearned) {
        s.maxPositionEmbeddings = s.seqLen;
      }
      *assumed = true;
      if (auto valid = validateModelSpec(s, id); !valid) return fail(valid.error());
      return s;
    }
  }
  const std::string arch = lower(text(m, "arch") + " " + text(m, "name"));
  // colo's graphs are decoder-only or encoder-only: an encoder-decoder is costed as a decoder of its
  // layers, an assumption the table marks.
  if (has(arch, "encoder-decoder") || has(arch, "t5") || has(arch, "bart")) *assumed = true;
  const bool bloom = has(arch, "alibi") || has(arch, "bloom");
  const bool llama = !bloom && (has(arch, "llama") || has(arch, "swiglu") || has(arch, "rmsnorm") || has(arch, "rope") ||
                                has(arch, "rotary") || has(arch, "mistral") || has(arch, "qwen") || has(arch, "deepseek"));
  auto preset = familyPreset(bloom ? "bloom" : llama ? "llama" : "gpt");
  if (!preset) return fail(preset.error());
  ModelSpec s = *preset;
  s.name = text(m, "name").empty() ? id : text(m, "name");
  auto need = [&](const char* key) -> Result<std::int64_t> {
    const auto v = number(m, key);
    if (!v || *v < 1) return fail(rowError(id, std::string("model.") + key, "missing or not positive"));
    return static_cast<std::int64_t>(*v);
  };
  for (auto [key, field] : {std::pair{"num_layers", &s.numLayers}, std::pair{"hidden_size", &s.hiddenSize},
                            std::pair{"num_attention_heads", &s.numAttentionHeads}, std::pair{"seq_len", &s.seqLen}}) {
    auto v = need(key);
    if (!v) return fail(v.error());
    *field = *v;
  }
  for (const char* key : {"num_query_groups", "num_key_value_heads", "num_kv_heads"}) {
    if (auto g = number(m, key)) s.numKvHeads = static_cast<std::int64_t>(*g);
  }
  if (auto f = number(m, "ffn_hidden_size")) {
    s.ffnHiddenSize = static_cast<std::int64_t>(*f);
  } else if (llama) {  // LLaMA's rule: 2/3 of 4h, rounded up to a multiple of 256
    s.ffnHiddenSize = (8 * s.hiddenSize / 3 + 255) / 256 * 256;
    *assumed = true;
  } else {
    s.ffnHiddenSize = 4 * s.hiddenSize;
  }
  if (auto e = number(m, "num_experts"); e && *e > 1) {
    s.moe.numExperts = static_cast<std::int64_t>(*e);
    s.moe.topK = static_cast<std::int64_t>(number(m, "top_k").value_or(number(m, "moe_top_k").value_or(2)));
    // Expert width (Megatron's --moe-ffn-hidden-size, Hugging Face's moe_intermediate_size) when the
    // dense layers' differs.
    for (const char* key : {"moe_ffn_hidden_size", "moe_intermediate_size", "expert_ffn_hidden_size"}) {
      if (auto w = number(m, key); w && *w >= 1) s.moe.expertFfnHiddenSize = static_cast<std::int64_t>(*w);
    }
    // Leading dense layers: Megatron's --moe-layer-freq "([0]*k+[1]*n)", Hugging Face's first_k_dense_replace.
    if (auto k = number(m, "first_k_dense_replace"); k && *k >= 0) s.moe.firstDenseLayers = static_cast<std::int64_t>(*k);
    static const std::regex leadingDense(R"(\[0\]\s*\*\s*(\d+)\s*\+\s*\[1\])");
    std::smatch dense;
    const std::string freq = text(m, "moe_layer_freq");
    if (std::regex_search(freq, dense, leadingDense)) s.moe.firstDenseLayers = std::stoll(dense[1]);
  }
  if (auto v = number(m, "vocab_size")) {
    s.vocabSize = static_cast<std::int64_t>(*v);
  } else if (layerOnly) {  // a single-layer measurement: no embedding table worth costing, no head
    s.vocabSize = 1;
    s.lmHead = false;
  } else {
    s.vocabSize = 51200;  // Megatron's padded GPT-2 vocabulary
    *assumed = true;
  }
  if (!bloom && !llama) s.maxPositionEmbeddings = s.seqLen;
  s.dropout = (bloom || llama) ? 0.0 : 0.1;
  if (auto valid = validateModelSpec(s, id); !valid) return fail(valid.error());
  return s;
}

// Layers over pipeline chunks: even when they divide; else the embedding and the head count as a layer
// each (DeepSpeed's 'type:transformer|embedding' partition, Llama 3's one layer fewer on the first and
// last stage), shared evenly, the remainder to the middle chunks.
std::vector<StagePlan> balancedStages(std::int64_t layers, std::int64_t chunks) {
  if (layers % chunks == 0) return uniformStages(layers, chunks, RecomputePolicy::kNone);
  auto spread = [&](std::int64_t units, std::int64_t trim) {
    std::vector<std::int64_t> n(static_cast<std::size_t>(chunks), units / chunks);
    for (std::int64_t r = 0; r < units % chunks; ++r) {
      n[static_cast<std::size_t>(chunks > 2 ? 1 + r % (chunks - 2) : r % chunks)] += 1;
    }
    n.front() -= trim;
    n.back() -= trim;
    return n;
  };
  auto n = spread(layers + 2, 1);
  if (*std::min_element(n.begin(), n.end()) < 1) n = spread(layers, 0);
  std::vector<StagePlan> stages;
  for (const auto count : n) {
    StagePlan st;
    st.layers = count;
    stages.push_back(st);
  }
  return stages;
}

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
  for (const char* part : {"model", "hardware", "parallel", "training", "measured"}) {
    if (!row.contains(part) || !row[part].is_object()) return fail(rowError(c.id, part, "missing or not an object"));
  }
  // A figure the harness reads must be a number (or null: not published); "8" or [8] is a typo that
  // would otherwise silently fall back to a default.
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
        return fail(rowError(c.id, std::string(part) + "." + key, "expected a number, got " + j[key].dump()));
      }
    }
  }
  for (const auto& [key, value] : row["measured"].items()) {
    if ((memoryKeyUnit(key) > 0 || classifyMeasure(key).measure != Measure::kNone) && !value.is_null() &&
        !value.is_number()) {
      return fail(rowError(c.id, "measured." + key, "expected a number, got " + value.dump()));
    }
  }
  if (auto ranges = checkRowRanges(row, c.id); !ranges) return fail(ranges.error());
  const Json& hw = row["hardware"];
  const Json& par = row["parallel"];
  const Json& tr = row["training"];
  const Json& me = row["measured"];
  const Json& de = row.contains("derived") && row["derived"].is_object() ? row["derived"] : empty;

  Settings set;
  if (assumptions.contains("defaults")) set.defaults = assumptions["defaults"];
  if (assumptions.contains("runs") && assumptions["runs"].contains(c.id)) set.run = assumptions["runs"][c.id];
  const std::string haystack = lower(c.citation + " " + text(row["model"], "arch") + " " + text(par, "schedule") + " " +
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
  bool assumed = false;
  c.layerOnly = number(me, "layer_forward_ms").has_value();
  auto spec = modelOf(row["model"], c.id, c.layerOnly, &assumed);
  if (!spec) return fail(spec.error());
  Plan& p = c.plan;
  p.model.source = ModelSource::kSpec;
  p.model.spec = *spec;
  // A row without its GPU count: nodes x GPUs per node, else the product of its parallel degrees.
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
  auto cluster = clusterOf(hardware, set, c.id, &assumed);
  if (!cluster) return fail(cluster.error());
  p.cluster = *cluster;

  auto degree = [&](const char* key) { return static_cast<std::int64_t>(number(par, key).value_or(1)); };
  p.parallel.tp = degree("tp");
  p.parallel.pp = degree("pp");
  p.parallel.cp = degree("cp");
  p.parallel.ep = degree("ep");
  const std::int64_t gpus = p.cluster.totalGpus();
  const std::int64_t model = std::max<std::int64_t>(1, p.parallel.tp * p.parallel.pp * p.parallel.cp);
  if (auto dp = number(par, "dp")) {
    p.parallel.dp = static_cast<std::int64_t>(*dp);
    // A data-parallel degree that disagrees with the GPUs (a source counting context parallelism into
    // it, say) gives way to the GPUs over the model-parallel degrees when they divide.
    if (model <= gpus && p.parallel.dp * model != gpus && gpus % model == 0) {
      p.parallel.dp = gpus / model;
      assumed = true;
    }
  } else {
    p.parallel.dp = gpus / model;
  }
  const Json sp = par.contains("sequence_parallel") && par["sequence_parallel"].is_boolean() ? par["sequence_parallel"]
                                                                                             : set.pick("sequence_parallel");
  p.parallel.sequenceParallel = sp.is_boolean() && sp.get<bool>() && p.parallel.tp > 1;
  const std::string schedule =
      lower(text(par, "schedule") + " " + (set.pick("schedule").is_string() ? set.pick("schedule").get<std::string>() : ""));
  Json vpp = number(par, "virtual_pipeline_stages") ? par["virtual_pipeline_stages"] : set.pick("virtual_stages");
  p.parallel.virtualStages = vpp.is_number() ? vpp.get<std::int64_t>() : 1;
  const bool vppOpen = p.parallel.pp > 1 && has(schedule, "interleaved") && !vpp.is_number() && !set.run.contains("stages");
  p.schedule = p.parallel.virtualStages > 1 ? Schedule::kInterleaved : Schedule::kOneFOneB;
  if (has(schedule, "gpipe")) p.schedule = Schedule::kGpipe;
  if (has(schedule, "zero bubble") || has(schedule, "zero-bubble")) p.schedule = Schedule::kZeroBubble;

  Json mbs = number(tr, "micro_batch_size") ? tr["micro_batch_size"] : set.pick("micro_batch_size");
  if (!number(tr, "micro_batch_size")) assumed = true;
  p.microBatchSize = mbs.is_number() ? mbs.get<std::int64_t>() : 1;
  if (auto gbs = number(tr, "global_batch_size")) {
    p.globalBatchSize = static_cast<std::int64_t>(*gbs);
  } else if (auto tokens = number(tr, "global_batch_tokens")) {
    p.globalBatchSize = static_cast<std::int64_t>(std::llround(*tokens / static_cast<double>(spec->seqLen)));
  } else {
    p.globalBatchSize = p.microBatchSize * p.parallel.dp;
  }
  // A framework without gradient accumulation runs each replica's whole batch as one micro-batch.
  const Json noAccumulation = set.pick("no_grad_accumulation");
  if (!number(tr, "micro_batch_size") && noAccumulation.is_boolean() && noAccumulation.get<bool>() &&
      p.parallel.dp > 0 && p.parallel.pp == 1 && p.globalBatchSize % p.parallel.dp == 0) {
    p.microBatchSize = std::max<std::int64_t>(1, p.globalBatchSize / p.parallel.dp);
  }
  p.seqLen = spec->seqLen;
  // A global batch the micro-batch and data parallelism do not divide: the largest micro-batch below the
  // stated one that does (frameworks refuse the rest).
  if (p.parallel.dp > 0 && p.globalBatchSize % (p.microBatchSize * p.parallel.dp) != 0) {
    std::int64_t b = p.microBatchSize;
    while (b > 1 && p.globalBatchSize % (b * p.parallel.dp) != 0) --b;
    if (p.globalBatchSize % (b * p.parallel.dp) == 0) {
      p.microBatchSize = b;
      assumed = true;
    }
  }
  // PyTorch FSDP sharding strategies: FULL_SHARD / HYBRID_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2.
  Json fsdpZero = nullptr;
  const std::string fsdp = lower(text(par, "fsdp") + " " + text(par, "sharding_strategy") + " " + text(par, "sharding"));
  if (has(fsdp, "shard_grad_op")) fsdpZero = 2;
  else if (has(fsdp, "full_shard") || has(fsdp, "hybrid_shard") || (par.contains("fsdp") && par["fsdp"].is_boolean() && par["fsdp"].get<bool>())) fsdpZero = 3;
  const Json zero = number(par, "zero_stage") ? par["zero_stage"] : !fsdpZero.is_null() ? fsdpZero : set.pick("zero_stage");
  if (!number(par, "zero_stage") && p.parallel.dp > 1) assumed = assumed || set.run.contains("zero_stage");
  p.zeroStage = zero.is_number() ? zero.get<int>() : 0;

  // "recompute": a policy name, free text ("full (--checkpoint-activations)", "activation checkpointing":
  // full, as Megatron's flag was), or a boolean.
  std::string recomputeText = lower(text(tr, "recompute"));
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
    // --recompute-activations is Megatron's selective recompute; checkpointing by any name is full.
    if (has(recomputeText, "selective") || has(recomputeText, "recompute-activations")) recomputeText = "selective";
    else if (has(recomputeText, "full") || has(recomputeText, "checkpoint") || has(recomputeText, "recompute-granularity") ||
             recomputeText == "true" || recomputeText == "yes" || recomputeText == "on")
      recomputeText = "full";
    else if (recomputeText == "no" || recomputeText == "false" || recomputeText == "off" ||
             has(recomputeText, "no recomput") || has(recomputeText, "disabled"))
      recomputeText = "none";
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
  } else if (recomputeText.rfind("none", 0) != 0 && set.pick("recompute").is_string()) {
    auto parsed = parseRecompute(set.pick("recompute").get<std::string>());
    if (!parsed) return fail(rowError(c.id, "recompute (assumptions)", parsed.error().message));
    policy = *parsed;
    assumed = true;
  }
  const std::int64_t chunks = p.parallel.pp * p.parallel.virtualStages;
  if (set.run.contains("stages")) {
    std::int64_t held = 0;
    for (const auto& n : set.run["stages"]) {
      StagePlan st;
      st.layers = n.get<std::int64_t>();
      held += st.layers;
      p.stages.push_back(st);
    }
    if (held != spec->numLayers) {
      return fail(rowError(c.id, "stages (assumptions)", "hold " + std::to_string(held) + " layers but the model has " +
                                                             std::to_string(spec->numLayers)));
    }
  } else {
    if (spec->numLayers < chunks) {
      return fail(rowError(c.id, "model.num_layers", std::to_string(spec->numLayers) + " layers for pp x virtual stages = " +
                                                         std::to_string(chunks)));
    }
    p.stages = balancedStages(spec->numLayers, chunks);
    if (spec->numLayers % chunks != 0) assumed = true;
  }
  for (auto& st : p.stages) {
    st.recompute = policy;
    st.recomputeLayers = policy == RecomputePolicy::kNone ? 0 : st.layers;
    if (policy == RecomputePolicy::kFull && recomputeLayers) st.recomputeLayers = std::min(*recomputeLayers, st.layers);
  }
  const std::string precisionText = lower(text(tr, "precision"));
  const bool volta = has(lower(p.cluster.gpu.name), "v100");
  if (set.pick("precision").is_string()) {
    auto parsed = parseDType(set.pick("precision").get<std::string>());
    if (!parsed) return fail(rowError(c.id, "precision (assumptions)", parsed.error().message));
    p.precision = *parsed;
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
  if (!p.cluster.gpu.hasPeak(p.precision)) p.precision = DType::kFp16;
  auto flag = [&](const char* key) { return set.pick(key).is_boolean() && set.pick(key).get<bool>(); };
  p.execution.flashAttention = set.pick("attention").is_string() && set.pick("attention").get<std::string>() == "flash";
  // Overlaps the row states (Megatron's flags in `parallel.overlap`) win over assumed ones.
  const std::string overlap = lower(text(par, "overlap"));
  p.execution.overlapGradReduce = flag("overlap_grad_reduce") || has(overlap, "overlap-grad-reduce");
  p.execution.overlapParamGather = flag("overlap_param_gather") || has(overlap, "overlap-param-gather");
  p.execution.tpCommOverlap = flag("tp_comm_overlap") || has(overlap, "tp-comm-overlap");
  if (set.pick("host_us_per_op").is_number()) p.execution.hostMicrosecondsPerOp = set.pick("host_us_per_op").get<double>();
  // How micro-batch gradients are summed: one mode, or one per precision ({"bf16": ..., "fp16": ...}),
  // as DeepSpeed's BF16 and FP16 optimizers differ.
  if (Json mode = set.pick("grad_accumulation"); !mode.is_null()) {
    if (mode.is_object()) mode = mode.contains(toString(p.precision)) ? mode[toString(p.precision)] : Json();
    if (mode.is_string()) {
      auto parsed = parseGradAccumulation(mode.get<std::string>());
      if (!parsed) return fail(rowError(c.id, "grad_accumulation (assumptions)", parsed.error().message));
      p.execution.gradAccumulation = *parsed;
    } else if (!mode.is_null()) {
      return fail(rowError(c.id, "grad_accumulation (assumptions)", "expected a mode or an object of modes by precision, got " + mode.dump()));
    }
  }
  // Knobs the row and the assumptions leave open that decide whether the run fits: the run happened, so
  // it fitted. Recompute: none, else selective, else full, the first with which the plan fits; the
  // interleaved schedule's virtual stages (1 to 8 chunks per stage): the fastest that fits, as a
  // published benchmark run is tuned.
  if (recomputeOpen || vppOpen) {
    // (policy, layers recomputed per chunk; 0: all of them)
    std::vector<std::pair<RecomputePolicy, std::int64_t>> policies{{policy, 0}};
    if (recomputeOpen) {
      policies = {{RecomputePolicy::kNone, 0}, {RecomputePolicy::kSelective, 0}};
      // Megatron's --recompute-num-layers: full recompute of the first k layers of every chunk.
      for (std::int64_t k = 1; k <= spec->numLayers / p.parallel.pp; ++k) policies.emplace_back(RecomputePolicy::kFull, k);
    }
    std::vector<std::int64_t> chunkCounts{p.parallel.virtualStages};
    if (vppOpen) {
      chunkCounts.clear();
      for (std::int64_t v = 1; v <= 8 && p.parallel.pp * v <= spec->numLayers; ++v) chunkCounts.push_back(v);
    }
    // Candidates differ only in schedule and recompute: one evaluator (model, cluster, sequence) serves all.
    auto evaluator = costmodel::Evaluator::create(p.model, p.cluster, p.seqLen);
    if (!evaluator) return fail(rowError(c.id, "model", evaluator.error().message));
    std::optional<Plan> best;
    double bestSeconds = 0;
    for (std::size_t i = 0; i < policies.size(); ++i) {
      const auto [candidatePolicy, recomputeCount] = policies[i];
      for (const std::int64_t v : chunkCounts) {
        Plan q = p;
        q.parallel.virtualStages = v;
        if (vppOpen) {
          q.schedule = v > 1 ? Schedule::kInterleaved : Schedule::kOneFOneB;
          q.stages = balancedStages(spec->numLayers, p.parallel.pp * v);
        }
        for (auto& st : q.stages) {
          st.recompute = candidatePolicy;
          st.recomputeLayers = candidatePolicy == RecomputePolicy::kNone ? 0
                               : recomputeCount > 0                    ? std::min(recomputeCount, st.layers)
                                                                       : st.layers;
        }
        if (!validatePlan(q, c.id)) continue;
        auto ev = evaluator->evaluate(q);
        if (!ev || !ev->fits) continue;
        if (!best || ev->stepSeconds < bestSeconds) {
          best = std::move(q);
          bestSeconds = ev->stepSeconds;
        }
      }
      // The cheapest policy that fits wins; partial full recompute counts as one policy (fastest k).
      const bool nextIsMorePartialRecompute = i + 1 < policies.size() && policies[i + 1].second > 0 && recomputeCount > 0;
      if (best && !nextIsMorePartialRecompute) break;
    }
    if (best) p = std::move(*best);
    assumed = true;
  }
  c.fullyPublished = !assumed && !set.run.contains("micro_batch_size") && !set.run.contains("virtual_stages") &&
                     !set.run.contains("zero_stage") && !set.run.contains("recompute");

  // The step time: measured, else derived by the source, else from a throughput, else from TFLOP/s
  // under the row's FLOP convention.
  const double samples = static_cast<double>(p.globalBatchSize);
  const double tokens = samples * static_cast<double>(spec->seqLen);
  if (auto f = number(me, "layer_forward_ms")) {
    c.measuredForwardSeconds = *f / 1e3;
    const auto b = number(me, "layer_backward_ms");
    if (!b) return fail(rowError(c.id, "measured.layer_backward_ms", "missing beside layer_forward_ms"));
    c.measuredBackwardSeconds = *b / 1e3;
    c.measuredStepSeconds = *c.measuredForwardSeconds + *c.measuredBackwardSeconds;
  } else {
    // In order: a step time (measured, then derived by the source), a throughput, TFLOP/s under the
    // row's FLOP convention, MFU against the peak the source used.
    const double flops = conventionFlops(text(row, "flop_convention"), *spec, samples);
    const double peakOfPrecision = [&] {
      const auto peak = p.cluster.gpu.peakFlopsPerSecond.find(p.precision);
      double peakFlops = peak != p.cluster.gpu.peakFlopsPerSecond.end() ? peak->second : 0.0;
      if (auto used = number(row, "peak_tflops_per_gpu_used_by_source")) peakFlops = *used * 1e12;
      return peakFlops;
    }();
    const double gpuCount = static_cast<double>(gpus);
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
  }
  if (auto valid = validatePlan(p, c.id); !valid) return fail(valid.error());
  return c;
}

}  // namespace

Result<std::vector<Case>> loadCases(const std::string& folder, std::vector<Skipped>* skipped) {
  auto runs = readJsonFile(folder + "/public_runs.json");
  if (!runs) return fail(runs.error());
  if (!runs->is_array()) {
    return fail(Error::badInput("expected an array of runs, got " + describeJsonValue(*runs), folder + "/public_runs.json"));
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
  const std::string runsFile = folder + "/public_runs.json";
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

Result<Outcome> evaluateCase(const Case& c) {
  auto ev = costmodel::evaluatePlan(c.plan);
  if (!ev) return fail(ev.error());
  Outcome o;
  o.source = &c;
  if (c.layerOnly) {
    // One layer's forward and backward, as the source timed them: the first stage with one more layer,
    // less the first stage as it is. The difference leaves out the embedding, the final norm and
    // anything else around the layers (at tp 8 and 2048 tokens they are 6% of a 22B layer).
    Plan more = c.plan;
    if (!more.model.spec) return fail(Error::badInput(c.id + ": a layer timing needs the model's shape"));
    more.model.spec->numLayers += 1;
    StagePlan& first = more.stages.front();
    if (first.recomputeLayers == first.layers) first.recomputeLayers += 1;
    first.layers += 1;
    auto ev2 = costmodel::evaluatePlan(more);
    if (!ev2) return fail(ev2.error());
    o.predictedForwardSeconds = ev2->stages.front().forwardSeconds - ev->stages.front().forwardSeconds;
    o.predictedBackwardSeconds = ev2->stages.front().backwardSeconds - ev->stages.front().backwardSeconds;
    o.predictedStepSeconds = *o.predictedForwardSeconds + *o.predictedBackwardSeconds;
  } else {
    o.predictedStepSeconds = ev->stepSeconds;
  }
  o.measuredSeconds = c.measuredStepSeconds.value_or(0);
  o.stepError = o.measuredSeconds > 0 ? (o.predictedStepSeconds - o.measuredSeconds) / o.measuredSeconds : 0;
  if (c.measuredMemoryBytes) {
    // Compare like with like: the allocator's figures leave out what lives outside it (the CUDA
    // context, cuBLAS and NCCL buffers), and live tensors also leave out its fragmentation.
    double predicted = 0;
    for (const auto& st : ev->stages) {
      const auto& m = st.memory;
      double here = m.total();
      if (c.memoryMeasure != MemoryMeasure::kDevice) here -= m.context;
      if (c.memoryMeasure == MemoryMeasure::kAllocated) here -= m.allocator;
      predicted = std::max(predicted, here);
    }
    o.predictedMemoryBytes = predicted;
    o.memoryError = (predicted - *c.measuredMemoryBytes) / *c.measuredMemoryBytes;
  }
  return o;
}

}  // namespace colo::validation
