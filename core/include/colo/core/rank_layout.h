#pragma once
/// \file
/// Where each global rank sits under a plan's rank order (innermost dimension first): its tp, cp, dp
/// and pp coordinates, and back. The executor forms its process groups with it; the UI draws the mesh.

#include <cstdint>
#include <string>

#include "colo/core/plan.h"

namespace colo {

struct RankCoordinates {
  std::int64_t tp = 0, cp = 0, dp = 0, pp = 0;
  /// The coordinate along "tp", "cp", "dp" or "pp".
  [[nodiscard]] std::int64_t& along(const std::string& dim);
};

/// The degree of "tp", "cp", "dp" or "pp".
[[nodiscard]] std::int64_t parallelDegree(const Parallelism& p, const std::string& dim);
[[nodiscard]] RankCoordinates coordinatesOf(std::int64_t rank, const Parallelism& p);
[[nodiscard]] std::int64_t rankOf(RankCoordinates c, const Parallelism& p);
/// The rank order as written in plan files and reports: "tp-cp-dp-pp".
[[nodiscard]] std::string rankOrderText(const Parallelism& p);

}  // namespace colo
