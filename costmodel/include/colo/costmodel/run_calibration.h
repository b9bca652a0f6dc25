#pragma once
/// \file
/// Calibration from the user's own runs (docs/costmodel.md, "Calibration from your runs"): how far the
/// runs a user measured on a cluster (step time, peak memory) are from colo's predictions for them,
/// split into the compute part of the step and the rest (communication, bubble, optimizer), and the
/// scales that bring predictions for that cluster in line. `colo-profile calibrate` fits them,
/// `evaluate`/`search --calibration` apply them, `colo-validate --calibrate` checks them on runs the fit
/// did not see.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/costmodel/evaluator.h"

namespace colo::costmodel {

/// One measured run against its prediction.
struct RunObservation {
  double predictedComputeSeconds = 0;  ///< compute + recompute of the predicted step
  double predictedOtherSeconds = 0;    ///< the rest of the predicted step
  double measuredStepSeconds = 0;
  std::optional<double> predictedMemoryBytes;  ///< of the kind the measurement counts
  std::optional<double> measuredMemoryBytes;
  /// Last on purpose: a string leaves no tail padding, where libc++ 16's std::expected
  /// (Result<RunObservation>) keeps its has-value flag (LLVM 70494).
  std::string id;
};

/// The observation of `evaluation` against a measured step (and memory of the same kind).
[[nodiscard]] RunObservation observe(const std::string& id, const Evaluation& evaluation, double measuredStepSeconds);

/// Scales fitted on a user's runs of one cluster.
struct RunCalibration {
  std::string gpu;             ///< the GPU the runs ran on (the calibration applies to plans on it)
  double computeScale = 1;     ///< measured / predicted for the compute part
  double otherScale = 1;       ///< ... for communication, bubble and the optimizer
  double memoryScale = 1;      ///< measured / predicted peak memory
  std::size_t runs = 0;        ///< runs the time scales were fitted on
  std::size_t memoryRuns = 0;  ///< runs the memory scale was fitted on

  /// The step time a calibrated prediction gives for an observation's predicted parts.
  [[nodiscard]] double step(const RunObservation& o) const {
    return computeScale * o.predictedComputeSeconds + otherScale * o.predictedOtherSeconds;
  }
  /// Rescales `evaluation` in place: each part of the time breakdown by its scale (the step stays their
  /// sum), throughput and FLOP/s per GPU with it, every stage's memory by the memory scale.
  void apply(Evaluation& evaluation) const;

  [[nodiscard]] Json toJson() const;
  /// Reads `colo.calibration/1`. Errors: kBadInput naming `file` and the field.
  [[nodiscard]] static Result<RunCalibration> fromJson(const Json& document, const std::string& file);
  /// Reads `file`. Errors: kIo, kBadInput.
  [[nodiscard]] static Result<RunCalibration> load(const std::string& file);
};

/// Least squares on the relative error: the compute and other scales that make
/// a·compute + b·other closest to every measured step; a single common scale when the runs cannot tell
/// the two apart (fewer than 3 runs, or their mixes too alike, or a scale would leave [0.2, 5]). Memory:
/// the mean measured / predicted of the runs that measured it. Errors: kBadInput without any run.
[[nodiscard]] Result<RunCalibration> fitRunCalibration(const std::vector<RunObservation>& runs, const std::string& gpu);

/// Leave-one-out check: each run predicted by a calibration fitted on the others.
struct CrossValidation {
  std::vector<double> before;  ///< |relative error| of each run's step, uncalibrated
  std::vector<double> after;   ///< ... calibrated without that run
};
[[nodiscard]] CrossValidation leaveOneOut(const std::vector<RunObservation>& runs);

}  // namespace colo::costmodel
