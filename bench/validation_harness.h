#pragma once
// Turns the published runs of data/validation into colo plans and compares predictions with the
// measurements. Shared by bench/colo-validate (prints the table) and tests/costmodel (checks it).

#include <optional>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/plan.h"
#include "colo/costmodel/evaluator.h"
#include "colo/costmodel/run_calibration.h"

namespace colo::validation {

/// What a published memory figure counts, read from its key's name: what nvidia-smi shows (the
/// device's used memory: context, NCCL buffers, everything the caching allocator holds), the caching
/// allocator's reserved memory (torch.cuda.max_memory_reserved), or the peak of live tensors
/// (torch.cuda.max_memory_allocated, Megatron's "max allocated").
enum class MemoryMeasure { kDevice, kReserved, kAllocated };

struct Case {
  std::string id;
  std::string citation;
  Plan plan;
  std::optional<double> measuredStepSeconds;
  std::optional<double> measuredForwardSeconds;
  std::optional<double> measuredBackwardSeconds;
  std::optional<double> measuredMemoryBytes;
  std::optional<double> measuredReservedBytes;  // a reserved figure beside an allocated one
  MemoryMeasure memoryMeasure = MemoryMeasure::kDevice;
  bool layerOnly = false;                  // a single-layer timing (forward and backward)
  bool fullyPublished = true;              // false when assumptions filled gaps in the configuration
  /// The `measured` key the figure came from. Last on purpose: a string leaves no tail padding, where
  /// libc++ 16's std::expected (Result<Case>) keeps its has-value flag and a copy of the value would
  /// overwrite it (LLVM issue 70494; found by the fuzz build).
  std::string memoryKey;
};

struct Outcome {
  double predictedStepSeconds = 0;       // step, or forward + backward for a layer
  std::optional<double> predictedForwardSeconds;   // a layer timing: its forward
  std::optional<double> predictedBackwardSeconds;  // a layer timing: its backward (with any recompute)
  double measuredSeconds = 0;
  double stepError = 0;                  // relative, signed: (predicted - measured) / measured
  std::optional<double> predictedMemoryBytes;
  std::optional<double> memoryError;
  std::optional<double> predictedReservedBytes;  // when the row also gives a reserved figure
  std::optional<double> reservedError;
  bool predictedToFit = true;  // the run happened on its GPUs: false is a wrong "does not fit"
  /// Last on purpose: an 8-byte member leaves no tail padding, where libc++ 16's std::expected
  /// (Result<Outcome>) keeps its has-value flag and a copy of the value would overwrite it (LLVM 70494).
  const Case* source = nullptr;
};

/// The largest stage's memory as `measure` counts it (the allocator's figures leave out the CUDA
/// context and NCCL buffers; live tensors also leave out the allocator's fragmentation).
[[nodiscard]] double predictedMemory(const costmodel::Evaluation& ev, MemoryMeasure measure);

/// A row that could not be turned into a plan, and why (file, field, value).
struct Skipped {
  std::string id;
  std::string reason;
};

/// One published run as a colo plan. Whatever the row leaves open comes from `assumptions` (the run's
/// own entry, else the first framework whose keywords the row mentions, else the defaults), else is
/// inferred from the row: the library cluster of its GPU, the network from `hardware.inter_node`, the
/// step time from a time, a throughput or TFLOP/s under its FLOP convention. Errors: kBadInput naming
/// the row and field.
[[nodiscard]] Result<Case> caseFromRow(const Json& row, const Json& assumptions);

/// Reads public_runs.json and assumptions.json (optional) from `folder` (data/validation). With
/// `skipped`, a row that cannot be evaluated is recorded there and the others still load; without it,
/// the first bad row is the error. Errors: kBadInput.
[[nodiscard]] Result<std::vector<Case>> loadCases(const std::string& folder, std::vector<Skipped>* skipped = nullptr);

/// The runs of `path`: a folder (as loadCases), a JSON array of rows, or a CSV of the user's own jobs
/// (rowsFromCsv). A file's folder may hold its assumptions.json; else the shipped one applies.
[[nodiscard]] Result<std::vector<Case>> loadRuns(const std::string& path, std::vector<Skipped>* skipped = nullptr);

/// A CSV of the user's jobs as validation rows. Header line, then one job a line; columns (any order):
/// model (a library name), gpu (as nvidia-smi names it, e.g. "H100 SXM 80GB"), gpus, tp, pp, dp, mbs,
/// gbs, seq_len, step_time_s required; cp, ep, vpp, zero, recompute, precision, gpus_per_node,
/// framework, peak_memory_gib, memory_kind (device | reserved | allocated), id optional. Errors:
/// kBadInput naming the file, line and column.
[[nodiscard]] Result<Json> rowsFromCsv(const std::string& file);

/// The case as a calibration observation: its predicted compute and other parts, the measured step, and
/// memory of the kind the row measured. Errors: kBadInput for a single-layer timing, else as evaluateCase.
[[nodiscard]] Result<costmodel::RunObservation> observationOf(const Case& c);

/// Evaluates one case. Errors: whatever validatePlan or the evaluator report.
[[nodiscard]] Result<Outcome> evaluateCase(const Case& c);

}  // namespace colo::validation
