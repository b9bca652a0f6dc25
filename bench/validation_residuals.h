#pragma once
/// \file
/// The errors colo makes on validated runs, as the residual table that gives predictions their error
/// bands (costmodel/error_band.h; docs/costmodel.md, "Error bands").

#include <string>
#include <vector>

#include "colo/costmodel/error_band.h"
#include "validation_harness.h"

namespace colo::validation {

/// One residual per evaluated whole-step outcome (layer-only timings left out): measured / predicted - 1
/// of its step and, where measured, its memory, with the features of its plan.
[[nodiscard]] costmodel::ResidualTable residualsOf(const std::vector<Outcome>& outcomes);

/// Loads and evaluates the runs of every folder (as colo-validate does), skipping rows that cannot be
/// evaluated, and returns their residuals. Errors: kBadInput for an unreadable folder.
[[nodiscard]] Result<costmodel::ResidualTable> residualsOfFolders(const std::vector<std::string>& folders);

}  // namespace colo::validation
