// The words of measured keys: what a `measured` figure gives (a step, a rate, TFLOP/s, MFU, memory)
// and in which unit, read from its name.
#include <cctype>

#include "validation_rows_detail.h"

namespace colo::validation::detail {

// ---- measured step ------------------------------------------------------------------------------------
// What a `measured` (or `derived`) key gives, read from the words of its name, so that a row written
// with other names than this folder's (elapsed_time_per_iteration_ms, iter_time_s, steps_per_s,
// throughput_tokens_per_sec_per_gpu, model_tflops, aggregate_pflops, mfu_percent) still gives its step.


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


namespace {

// Every memory figure of a row's `measured`, with what it counts.
std::vector<MeasuredMemory> memoryFigures(const Json& measured) {
  std::vector<MeasuredMemory> figures;
  for (const auto& [key, value] : measured.items()) {
    const double unit = memoryKeyUnit(key);
    if (unit <= 0 || !value.is_number() || value.get<double>() <= 0) continue;
    const std::string k = lower(key);
    const MemoryMeasure measure = has(k, "alloc")      ? MemoryMeasure::kAllocated
                                  : has(k, "reserved") ? MemoryMeasure::kReserved
                                                       : MemoryMeasure::kDevice;
    figures.push_back(MeasuredMemory{value.get<double>() * unit, measure, key});
  }
  return figures;
}

}  // namespace

// The most specific figure a row gives: allocated, then reserved, then the device's.
std::optional<MeasuredMemory> measuredMemory(const Json& measured) {
  std::optional<MeasuredMemory> best;
  for (const auto& f : memoryFigures(measured)) {
    if (!best || static_cast<int>(f.measure) > static_cast<int>(best->measure)) best = f;
  }
  return best;
}

std::optional<MeasuredMemory> measuredMemoryOfKind(const Json& measured, MemoryMeasure kind) {
  for (const auto& f : memoryFigures(measured)) {
    if (f.measure == kind) return f;
  }
  return std::nullopt;
}

}  // namespace colo::validation::detail
