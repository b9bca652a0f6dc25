#pragma once
/// \file
/// Collective measurement through c10d across local processes (one per rank) on this machine: Gloo on
/// CPU tensors, or NCCL on CUDA device `rank` (a CUDA LibTorch; world 1 too: NCCL's own overhead).
/// costmodel::fitLinkLevels() turns the measurements into a link level's latency and bandwidth.

#include <cstdint>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/progress.h"
#include "colo/costmodel/cost_db.h"

namespace colo::profiler {

struct CollectiveOptions {
  int world = 2;
  std::string backend = "gloo";     ///< gloo, or nccl (CUDA LibTorch builds with a GPU per rank)
  int port = 29631;                 ///< TCPStore port on 127.0.0.1
  /// Bytes per rank: 1 KiB to 64 MiB, enough for the ring fit's latency and bandwidth terms (Gloo on a
  /// CPU reaches its bandwidth well below 64 MiB; 256 MiB took four times as long and changed no fit).
  std::vector<std::int64_t> sizes{1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26};
  int warmup = 2;
  int repetitions = 5;
  int timeoutSeconds = 60;          ///< a missing rank fails the group after this long
};

/// Runs the measurement as `rank`; every rank must call it (in its own process). Rank 0 returns the
/// medians (all_reduce, all_gather with the gathered bytes, broadcast); the others return nothing.
/// `progress` (rank 0; may be null) hears after each collective and size, weighted by the bytes moved.
/// `cancel` (rank 0; may be null): before each size rank 0 tells every rank whether to go on, so a
/// cancelled run stops together after the size in flight and rank 0 returns the sizes completed.
/// Errors: kInternal with the c10d message (a rank that died, a port in use, a timeout).
[[nodiscard]] Result<std::vector<costmodel::CollectiveMeasurement>> runCollectiveWorker(const CollectiveOptions& options,
                                                                                      int rank, ProgressSink* progress = nullptr,
                                                                                      const CancellationToken* cancel = nullptr);

/// The link level the measurements are stored under: loopback (Gloo), self (NCCL, one rank), nvlink.
[[nodiscard]] std::string collectiveLinkLevel(const CollectiveOptions& options);

/// The sizes of `options` not yet measured in `have` (a device's rows) for its backend, world and link
/// level: those missing any of the three collectives (--resume).
[[nodiscard]] std::vector<std::int64_t> collectiveSizesMissing(const CollectiveOptions& options,
                                                               const std::vector<costmodel::CollectiveMeasurement>& have);

}  // namespace colo::profiler
