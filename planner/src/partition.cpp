#include "colo/planner/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace colo::planner {

std::optional<std::vector<std::int64_t>> partitionLayers(std::int64_t layers, double layerSeconds,
                                                         const std::vector<double>& extraSeconds,
                                                         const std::vector<std::int64_t>& maxLayers) {
  const std::size_t stages = extraSeconds.size();
  if (stages == 0 || maxLayers.size() != stages || layers < static_cast<std::int64_t>(stages) || layerSeconds <= 0) {
    return std::nullopt;
  }
  std::int64_t capacity = 0;
  for (const auto m : maxLayers) {
    if (m < 1) return std::nullopt;
    capacity += m;
  }
  if (capacity < layers) return std::nullopt;
  // How many layers each stage can take under a bottleneck T.
  auto fitsUnder = [&](double t, std::vector<std::int64_t>* counts) {
    std::int64_t total = 0;
    for (std::size_t s = 0; s < stages; ++s) {
      const auto byTime = static_cast<std::int64_t>(std::floor((t - extraSeconds[s]) / layerSeconds + 1e-9));
      const std::int64_t n = std::min(byTime, maxLayers[s]);
      if (n < 1) return false;
      if (counts) (*counts)[s] = n;
      total += n;
    }
    return total >= layers;
  };
  double lo = 0;
  double hi = *std::max_element(extraSeconds.begin(), extraSeconds.end()) + static_cast<double>(layers) * layerSeconds;
  if (!fitsUnder(hi, nullptr)) return std::nullopt;
  for (int i = 0; i < 100 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = (lo + hi) / 2;
    (fitsUnder(mid, nullptr) ? hi : lo) = mid;
  }
  std::vector<std::int64_t> counts(stages);
  fitsUnder(hi, &counts);
  // Take back the surplus from the stages that are slowest with it.
  std::int64_t surplus = -layers;
  for (const auto n : counts) surplus += n;
  while (surplus > 0) {
    std::size_t worst = stages;
    double worstTime = -1;
    for (std::size_t s = 0; s < stages; ++s) {
      const double t = extraSeconds[s] + static_cast<double>(counts[s]) * layerSeconds;
      if (counts[s] > 1 && t > worstTime) {
        worstTime = t;
        worst = s;
      }
    }
    if (worst == stages) return std::nullopt;
    --counts[worst];
    --surplus;
  }
  return counts;
}

std::optional<RecomputeChoice> chooseRecompute(std::int64_t layers, double bytes, double budget,
                                               const std::vector<RecomputeOption>& options) {
  if (bytes <= budget) return RecomputeChoice{RecomputePolicy::kNone, 0, 0.0, bytes};
  std::optional<RecomputeChoice> best;
  for (const auto& o : options) {
    if (o.policy == RecomputePolicy::kNone || o.bytesPerLayer <= 0) continue;
    for (std::int64_t r = 1; r <= layers; ++r) {
      const double b = bytes + o.fixedBytes - static_cast<double>(r) * o.bytesPerLayer;
      if (b > budget) continue;
      const double t = static_cast<double>(r) * o.secondsPerLayer;
      if (!best || t < best->seconds) best = RecomputeChoice{o.policy, r, t, b};
      break;  // more layers only cost more time
    }
  }
  return best;
}

std::optional<std::vector<int>> solveCheckpointChain(const std::vector<std::vector<double>>& seconds,
                                                     const std::vector<std::vector<double>>& bytes, double budget,
                                                     double quantumBytes) {
  const std::size_t n = seconds.size();
  if (n == 0 || bytes.size() != n || quantumBytes <= 0 || budget < 0) return std::nullopt;
  const auto units = static_cast<std::size_t>(std::floor(budget / quantumBytes));
  const double inf = std::numeric_limits<double>::infinity();
  // best[i][u]: least time for layers 0..i-1 using at most u memory units; choice kept for the way back.
  std::vector<std::vector<double>> best(n + 1, std::vector<double>(units + 1, inf));
  std::vector<std::vector<int>> pick(n + 1, std::vector<int>(units + 1, -1));
  std::fill(best[0].begin(), best[0].end(), 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t u = 0; u <= units; ++u) {
      for (std::size_t j = 0; j < seconds[i].size(); ++j) {
        const auto cost = static_cast<std::size_t>(std::ceil(bytes[i][j] / quantumBytes - 1e-12));
        if (cost > u || best[i][u - cost] == inf) continue;
        const double t = best[i][u - cost] + seconds[i][j];
        if (t < best[i + 1][u]) {
          best[i + 1][u] = t;
          pick[i + 1][u] = static_cast<int>(j);
        }
      }
    }
  }
  if (best[n][units] == inf) return std::nullopt;
  std::vector<int> out(n);
  std::size_t u = units;
  for (std::size_t i = n; i > 0; --i) {
    const int j = pick[i][u];
    out[i - 1] = j;
    u -= static_cast<std::size_t>(std::ceil(bytes[i - 1][static_cast<std::size_t>(j)] / quantumBytes - 1e-12));
  }
  return out;
}

}  // namespace colo::planner
