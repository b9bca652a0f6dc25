#pragma once
/// \file
/// Calibration of the cost model's analytic parts from a cost database: link latency and bandwidth
/// fitted from measured collectives, the host-device copy bandwidth from measured copies, and the GEMM
/// roofline's efficiency from measured GEMMs. What a database does not cover keeps the datasheet figures.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "colo/core/cluster.h"
#include "colo/costmodel/cost_db.h"

namespace colo::costmodel {

/// A link level's latency and bandwidth fitted to measured collectives.
struct LinkFit {
  std::string level;          ///< the cluster link level's name the measurements were taken on
  double latencySeconds = 0;  ///< per ring step
  double bytesPerSecond = 0;  ///< achieved per-GPU bandwidth (already what the collective reaches)
  std::int64_t points = 0;    ///< measurements used
  double rmsRelativeError = 0;  ///< of the fitted model over those measurements
};

/// Fits every link level that has all_reduce, all_gather, reduce_scatter or send_recv measurements to
/// the same ring model collectiveSeconds() uses: time = steps x latency + traffic / bandwidth, where
/// an all-reduce of B bytes over n members takes 2(n-1) steps and moves 2(n-1)/n B per member, an
/// all-gather or reduce-scatter (n-1) steps and (n-1)/n B, a send/recv 1 step and B. Least squares on
/// the relative error, so small and large messages weigh alike. A level with all-reduce measurements at
/// two sizes or more is fitted to those alone (the collective that carries most traffic; libraries run
/// the others less efficiently). Levels with fewer than two distinct message sizes are left out.
[[nodiscard]] std::vector<LinkFit> fitLinkLevels(const std::vector<CollectiveMeasurement>& rows);

/// Replaces the latency and bandwidth of the cluster's levels that have a fit (matched by name), so the
/// collective model reproduces the measurements. Returns the fits that matched a level.
std::vector<LinkFit> applyLinkFits(ClusterSpec& cluster, const std::vector<LinkFit>& fits);

/// Host-device bandwidth from pinned copies of at least 1 MiB (the offload path): total bytes over
/// total time, both directions. Nullopt without such measurements.
[[nodiscard]] std::optional<double> fitCopyBandwidth(const std::vector<CopyMeasurement>& rows);

/// The geometric mean of measured / roofline over a database's GEMMs (the roofline's efficiency error
/// on this device), clamped to [0.2, 5]; 1 without measurements. `roofline(m, n, k)` is the model's
/// estimate of one GEMM.
template <class Roofline>
[[nodiscard]] double gemmRooflineScale(const std::vector<GemmMeasurement>& rows, DType dtype, Roofline&& roofline);

}  // namespace colo::costmodel

#include <algorithm>
#include <cmath>

template <class Roofline>
double colo::costmodel::gemmRooflineScale(const std::vector<GemmMeasurement>& rows, DType dtype, Roofline&& roofline) {
  double sumLog = 0;
  std::int64_t n = 0;
  for (const auto& r : rows) {
    if (r.dtype != dtype || r.seconds <= 0) continue;
    const double estimate = roofline(static_cast<double>(r.m), static_cast<double>(r.n), static_cast<double>(r.k));
    if (estimate <= 0) continue;
    sumLog += std::log(r.seconds / estimate);
    ++n;
  }
  if (n == 0) return 1.0;
  return std::clamp(std::exp(sumLog / static_cast<double>(n)), 0.2, 5.0);
}
