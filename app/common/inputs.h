#pragma once
// The --model / --cluster / --gpus options every planning command takes, loaded one way.

#include <utility>

#include "args.h"
#include "colo/core/cluster.h"
#include "colo/core/model.h"

namespace colo::app {

/// Loads --model and --cluster (library names or files) and applies --gpus (unless `applyGpus` is false:
/// a caller that reads several sizes scales the cluster itself). Errors: kBadInput for a missing option,
/// plus whatever loading reports (file, field, value).
[[nodiscard]] Result<std::pair<Model, ClusterSpec>> loadModelAndCluster(const Args& args, bool applyGpus = true);

/// Checks before a long job that `option`'s file (when given) can be written: its folder exists and is
/// writable. Errors: kBadInput naming the option and the path.
[[nodiscard]] Result<void> checkOutputPath(const Args& args, const std::string& option);

}  // namespace colo::app
