#pragma once
/// \file
/// Pipeline stage partitioning and per-stage activation-checkpoint choice: the two decisions the planner
/// makes inside one parallel configuration.

#include <cstdint>
#include <optional>
#include <vector>

#include "colo/core/plan.h"

namespace colo::planner {

/// Layer counts per stage that minimise the slowest stage's time, where stage s costs
/// `extraSeconds[s] + layers * layerSeconds` and may hold at most `maxLayers[s]` layers (memory).
/// Every stage gets at least one layer. Exact for identical layers (binary search on the bottleneck,
/// then the layers placed where they raise the bottleneck least). Nullopt when the layers cannot fit.
[[nodiscard]] std::optional<std::vector<std::int64_t>> partitionLayers(std::int64_t layers, double layerSeconds,
                                                                       const std::vector<double>& extraSeconds,
                                                                       const std::vector<std::int64_t>& maxLayers);

/// The cost of one recompute option for the layers of one stage, per layer.
struct RecomputeOption {
  RecomputePolicy policy = RecomputePolicy::kNone;
  double secondsPerLayer = 0;  ///< extra time per recomputed layer (per step)
  double bytesPerLayer = 0;    ///< memory saved per recomputed layer
  double fixedBytes = 0;       ///< memory added once any layer recomputes (the recompute working set)
};

/// The cheapest (policy, count) for a stage of `layers` identical layers that brings its memory from
/// `bytes` under `budget`; nullopt when no option fits. Exact: every count of every option is weighed.
struct RecomputeChoice {
  RecomputePolicy policy = RecomputePolicy::kNone;
  std::int64_t layers = 0;
  double seconds = 0;
  double bytes = 0;
};
[[nodiscard]] std::optional<RecomputeChoice> chooseRecompute(std::int64_t layers, double bytes, double budget,
                                                             const std::vector<RecomputeOption>& options);

/// The general chain problem behind chooseRecompute: each layer i picks one option j with time t[i][j]
/// and memory m[i][j]; minimise total time with total memory <= budget. Dynamic programming over layers
/// with memory in `quantumBytes` steps (memory rounded up, so a returned plan always fits). Returns the
/// option per layer, or nullopt when nothing fits. Tested against brute force.
[[nodiscard]] std::optional<std::vector<int>> solveCheckpointChain(const std::vector<std::vector<double>>& seconds,
                                                                   const std::vector<std::vector<double>>& bytes,
                                                                   double budget, double quantumBytes);

}  // namespace colo::planner
