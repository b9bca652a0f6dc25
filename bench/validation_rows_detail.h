#pragma once
// Private to the validation harness: the pieces that read a published row (input checks, the words of
// measured keys, small JSON accessors), shared by validation_rows.cpp, validation_checks.cpp and
// validation_keys.cpp. The harness's public API is validation_harness.h.

#include <optional>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/cluster.h"
#include "colo/core/json.h"
#include "colo/core/model_spec.h"
#include "colo/core/plan.h"
#include "validation_harness.h"

namespace colo::validation::detail {

/// ASCII lower case.
[[nodiscard]] std::string lower(std::string s);
/// Whether `needle` occurs in `haystack`.
[[nodiscard]] bool has(const std::string& haystack, const char* needle);
/// `j[key]` when it is a number.
[[nodiscard]] std::optional<double> number(const Json& j, const char* key);
/// `j[key]` when it is a string, else "".
[[nodiscard]] std::string text(const Json& j, const char* key);
/// "id: field: why", a bad-input error of a row.
[[nodiscard]] Error rowError(const std::string& id, const std::string& field, const std::string& why);

/// Every number a row gives within the bounds colo/core/limits.h sets (counts whole and in range).
[[nodiscard]] Result<void> checkRowRanges(const Json& row, const std::string& id);
/// assumptions.json's types and bounds (defaults, frameworks, runs), errors naming `file` and the entry.
[[nodiscard]] Result<void> checkAssumptions(const Json& assumptions, const std::string& file);
/// A JSON pointer segment for `key` (~ and / escaped).
[[nodiscard]] std::string pointerSegment(const std::string& key);

/// What a `measured` (or `derived`) key gives, read from the words of its name.
enum class Measure { kNone, kStepSeconds, kStepsPerSecond, kSamplesPerSecond, kTokensPerSecond, kTflops, kMfu };

struct MeasureKey {
  Measure measure = Measure::kNone;
  double scale = 1.0;   // to seconds, per second, TFLOP/s, or a fraction (MFU)
  bool perGpu = false;     // a rate or TFLOP/s per GPU rather than for the whole job
  bool aggregate = false;  // "aggregate_pflops", "cluster_tflops": the whole job's, whatever its size
};

/// The lower-case alphanumeric words of a key name ("iter_time_ms" -> iter, time, ms).
[[nodiscard]] std::vector<std::string> keyWords(const std::string& key);
/// The measure and unit of a key name.
[[nodiscard]] MeasureKey classifyMeasure(const std::string& key);
/// Bytes per unit of a memory key (mib, mb, gib, gb, bytes), 0 when the key is not a memory figure.
[[nodiscard]] double memoryKeyUnit(const std::string& key);

struct MeasuredMemory {
  double bytes = 0;
  MemoryMeasure measure = MemoryMeasure::kDevice;
  std::string key;
};

/// The most specific memory figure a row's `measured` gives: allocated, then reserved, then the device's.
[[nodiscard]] std::optional<MeasuredMemory> measuredMemory(const Json& measured);
/// The figure of one kind, if the row gives it.
[[nodiscard]] std::optional<MeasuredMemory> measuredMemoryOfKind(const Json& measured, MemoryMeasure kind);


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

/// The library cluster of the row's GPU with the row's memory, GPUs per node and network (`hardware`).
/// Errors: kBadInput naming the row's field.
[[nodiscard]] Result<ClusterSpec> clusterOf(const Json& hw, const Settings& set, const std::string& id, bool* assumed);
/// The row's model: its shape, else the library model it names. Errors: kBadInput naming the field.
[[nodiscard]] Result<ModelSpec> modelOf(const Json& m, const std::string& id, bool layerOnly, bool* assumed);
/// The library model a row names, by its letters and digits ("Llama 2 13B", "llama2-13b"), if any.
[[nodiscard]] std::optional<ModelSpec> libraryModelNamed(const std::string& name);
/// Layers over pipeline chunks: even when they divide, else the embedding and head count as a layer each.
[[nodiscard]] std::vector<StagePlan> balancedStages(std::int64_t layers, std::int64_t chunks);

/// A row that states no parallel layout at all (no tp, pp, cp or dp) but a GPU count above one: colo's
/// own best plan for the row's model, cluster, batch, sequence, precision and framework settings
/// (`p.execution`, ZeRO stage), with the micro-batch and chunks per stage the row states, as a
/// published benchmark runs a tuned layout (validation_layout.cpp). Errors: kBadInput naming the row
/// when nothing fits.
[[nodiscard]] Result<void> chooseOpenLayout(const std::string& id, std::optional<std::int64_t> microBatch,
                                            std::optional<std::int64_t> virtualStages, Plan& p);

}  // namespace colo::validation::detail
