#pragma once
// The facts `colo-plan inspect` reports, as one JSON object (the --json output); the text output is
// rendered from the same object, so both always agree.

#include <optional>

#include "colo/core/cluster.h"
#include "colo/core/json.h"
#include "colo/core/model.h"

namespace colo::app {

struct InspectOptions {
  std::int64_t seqLen = 0;  // 0: the model's default
  std::int64_t batch = 1;
  DType precision = DType::kBf16;
};

/// Builds the report. Errors: kBadInput when the model cannot be expanded at that length.
[[nodiscard]] Result<Json> buildInspectReport(const Model& model, const std::optional<ClusterSpec>& cluster,
                                              const InspectOptions& options);

/// Renders the report for a terminal.
[[nodiscard]] std::string renderInspectReport(const Json& report);

}  // namespace colo::app
