#include "colo/costmodel/calibration.h"

#include <map>
#include <set>

#include "colo/costmodel/hardware.h"

namespace colo::costmodel {
namespace {

// Ring steps and per-member traffic of one collective, as collectiveSeconds() counts them.
bool ringTerms(const CollectiveMeasurement& r, double& steps, double& traffic) {
  const double n = static_cast<double>(r.world);
  const double b = static_cast<double>(r.bytes);
  if (r.op == "all_reduce" && n >= 2) {
    steps = 2 * (n - 1);
    traffic = 2 * (n - 1) / n * b;
  } else if ((r.op == "all_gather" || r.op == "reduce_scatter") && n >= 2) {
    steps = n - 1;
    traffic = (n - 1) / n * b;
  } else if (r.op == "send_recv") {
    steps = 1;
    traffic = b;
  } else {
    return false;  // broadcast and all-to-all are not on the ring model's path
  }
  return true;
}

}  // namespace

std::vector<LinkFit> fitLinkLevels(const std::vector<CollectiveMeasurement>& rows) {
  std::map<std::string, std::vector<const CollectiveMeasurement*>> byLevel;
  for (const auto& r : rows) {
    double s = 0, x = 0;
    if (r.seconds > 0 && ringTerms(r, s, x)) byLevel[r.linkLevel].push_back(&r);
  }
  std::vector<LinkFit> out;
  for (auto& [level, all] : byLevel) {
    // All-reduce carries most of the traffic (data-parallel gradients, tensor parallelism): when it was
    // measured at two sizes or more the level is fitted to it alone, since libraries implement the other
    // collectives less efficiently (Gloo's all-gather reaches a fraction of its all-reduce bandwidth).
    std::vector<const CollectiveMeasurement*> allReduce;
    std::set<std::int64_t> allReduceSizes;
    for (const auto* r : all) {
      if (r->op == "all_reduce") {
        allReduce.push_back(r);
        allReduceSizes.insert(r->bytes);
      }
    }
    const auto& list = allReduceSizes.size() >= 2 ? allReduce : all;
    std::set<std::int64_t> sizes;
    for (const auto* r : list) sizes.insert(r->bytes);
    if (sizes.size() < 2) continue;
    // Minimise sum ((steps a + traffic c - t) / t)^2 over a (latency) and c (1 / bandwidth).
    double sss = 0, ssx = 0, sxx = 0, sst = 0, sxt = 0;
    for (const auto* r : list) {
      double s = 0, x = 0;
      ringTerms(*r, s, x);
      const double w = 1.0 / (r->seconds * r->seconds);
      sss += w * s * s;
      ssx += w * s * x;
      sxx += w * x * x;
      sst += w * s * r->seconds;
      sxt += w * x * r->seconds;
    }
    double a = 0, c = 0;
    const double det = sss * sxx - ssx * ssx;
    if (det > 0) {
      a = (sst * sxx - sxt * ssx) / det;
      c = (sss * sxt - ssx * sst) / det;
    }
    // Latency below resolution (a < 0), or noise that makes the large messages no slower than the
    // latency predicts (c <= 0, seen on a loaded machine when a small message stalls): bandwidth alone.
    if (a < 0 || c <= 0 || det <= 0) {
      a = 0;
      c = sxt / sxx;
    }
    if (c <= 0) continue;  // no traffic term at all (zero-byte messages only)
    double sq = 0;
    for (const auto* r : list) {
      double s = 0, x = 0;
      ringTerms(*r, s, x);
      const double e = (s * a + x * c - r->seconds) / r->seconds;
      sq += e * e;
    }
    out.push_back({level, a, 1.0 / c, static_cast<std::int64_t>(list.size()), std::sqrt(sq / static_cast<double>(list.size()))});
  }
  return out;
}

std::vector<LinkFit> applyLinkFits(ClusterSpec& cluster, const std::vector<LinkFit>& fits) {
  std::vector<LinkFit> applied;
  for (auto& level : cluster.links) {
    for (const auto& f : fits) {
      if (f.level != level.name) continue;
      // The fit is already an achieved rate with its own per-step latency: efficiency 1, no separate
      // launch term.
      level.bytesPerSecond = f.bytesPerSecond;
      level.efficiency = 1.0;
      level.latencySeconds = f.latencySeconds;
      level.launchSeconds = 0;
      level.collectives.clear();  // the database's fit stands for every collective on the level
      applied.push_back(f);
    }
  }
  return applied;
}

std::optional<double> fitCopyBandwidth(const std::vector<CopyMeasurement>& rows) {
  double bytes = 0, seconds = 0;
  for (const auto& r : rows) {
    if (!r.pinned || r.bytes < (1 << 20) || r.seconds <= 0) continue;
    bytes += static_cast<double>(r.bytes);
    seconds += r.seconds;
  }
  if (seconds <= 0) return std::nullopt;
  return bytes / seconds;
}

}  // namespace colo::costmodel
