#pragma once
// The --model / --cluster / --gpus options every planning command takes, loaded one way.

#include <utility>

#include "args.h"
#include "colo/core/cluster.h"
#include "colo/core/model.h"

namespace colo::app {

/// Loads --model and --cluster (library names or files) and applies --gpus. Errors: kBadInput for a
/// missing option, plus whatever loading reports (file, field, value).
[[nodiscard]] Result<std::pair<Model, ClusterSpec>> loadModelAndCluster(const Args& args);

}  // namespace colo::app
