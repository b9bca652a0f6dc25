#pragma once
// Turns the published runs of data/validation into colo plans and compares predictions with the
// measurements. Shared by bench/colo-validate (prints the table) and tests/costmodel (checks it).

#include <optional>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/plan.h"

namespace colo::validation {

struct Case {
  std::string id;
  std::string citation;
  Plan plan;
  bool layerOnly = false;                  // a single-layer timing (forward and backward)
  std::optional<double> measuredStepSeconds;
  std::optional<double> measuredForwardSeconds;
  std::optional<double> measuredBackwardSeconds;
  std::optional<double> measuredMemoryBytes;
  bool fullyPublished = true;              // false when assumptions filled gaps in the configuration
};

struct Outcome {
  const Case* source = nullptr;
  double predictedStepSeconds = 0;       // step, or forward + backward for a layer
  double measuredSeconds = 0;
  double stepError = 0;                  // relative, signed: (predicted - measured) / measured
  std::optional<double> predictedMemoryBytes;
  std::optional<double> memoryError;
};

/// Reads public_runs.json and assumptions.json from `folder` (data/validation). Errors: kBadInput.
[[nodiscard]] Result<std::vector<Case>> loadCases(const std::string& folder);

/// Evaluates one case. Errors: whatever validatePlan or the evaluator report.
[[nodiscard]] Result<Outcome> evaluateCase(const Case& c);

}  // namespace colo::validation
