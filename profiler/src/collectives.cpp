// Collectives through c10d across local processes: Gloo on CPU tensors, NCCL on each rank's GPU.
// Every rank runs the same sequence; rank 0 records medians.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if __has_include(<gloo/algorithm.h>)
#define COLO_HAS_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

#include <algorithm>
#include <chrono>

#if defined(COLO_TORCH_CUDA) && __has_include(<nccl.h>)
#define COLO_HAS_NCCL 1
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL  // PyTorch's CUDA builds have the NCCL process group; its header asks for this
#endif
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "colo/profiler/collectives.h"
#include "torch_util.h"

namespace colo::profiler {

namespace {

// The measurement loop on one process group: `device` holds the tensors (CPU for Gloo, the rank's GPU
// for NCCL); the Stopwatch times on that device's clock.
template <class PG>
std::vector<costmodel::CollectiveMeasurement> measure(PG& pg, const CollectiveOptions& o, int rank, const torch::Device& device,
                                                      const std::string& link, ProgressSink* progress, const CancellationToken* cancel) {
  std::vector<costmodel::CollectiveMeasurement> out;
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  // Time grows with the bytes moved plus a fixed cost per call; progress follows that.
  auto weight = [](std::int64_t bytes) { return static_cast<double>(bytes) + 1e5; };
  double total = 0;
  double done = 0;
  for (const auto bytes : o.sizes) total += 3 * weight(bytes);
  detail::Stopwatch watch(device);
  for (const auto bytes : o.sizes) {
    // Rank 0 says whether to go on (it alone hears Ctrl-C: the others ignore SIGINT), so all stop together.
    std::vector<at::Tensor> goOn{torch::full({1}, rank == 0 && cancel && cancel->cancelled() ? 0 : 1, options)};
    pg.broadcast(goOn)->wait();
    if (goOn[0].to(torch::kCPU).item<float>() < 0.5f) break;
    const std::int64_t elements = std::max<std::int64_t>(1, bytes / 4);
    for (const std::string op : {"all_reduce", "all_gather", "broadcast"}) {
      std::vector<double> samples;
      for (int i = 0; i < o.warmup + o.repetitions; ++i) {
        std::vector<at::Tensor> t{torch::ones({elements}, options)};
        std::vector<std::vector<at::Tensor>> gathered(1);
        if (op == "all_gather") {
          for (int r = 0; r < o.world; ++r) gathered[0].push_back(torch::empty({elements}, options));
        }
        pg.barrier()->wait();
        detail::synchronize(device);
        watch.start();
        if (op == "all_reduce") pg.allreduce(t)->wait();
        else if (op == "broadcast") pg.broadcast(t)->wait();
        else pg.allgather(gathered, t)->wait();
        const double seconds = watch.seconds();
        if (i >= o.warmup) samples.push_back(seconds);
      }
      const Timing timing = detail::summarize(samples);
      // all_gather's "bytes" is the gathered output, as the cost model counts it.
      const std::int64_t counted = op == "all_gather" ? elements * 4 * o.world : elements * 4;
      out.push_back({op, o.backend, o.world, link, counted, timing.median, timing.spread, timing.repetitions});
      done += weight(bytes);
      if (progress && rank == 0) progress->progress(done / total, op + " " + std::to_string(bytes >> 10) + " KiB");
    }
  }
  pg.barrier()->wait();
  if (rank != 0) out.clear();
  return out;
}

}  // namespace

std::string collectiveLinkLevel(const CollectiveOptions& o) {
  if (o.backend != "nccl") return "loopback";
  return o.world == 1 ? "self" : "nvlink";
}

std::vector<std::int64_t> collectiveSizesMissing(const CollectiveOptions& o, const std::vector<costmodel::CollectiveMeasurement>& have) {
  const std::string link = collectiveLinkLevel(o);
  std::vector<std::int64_t> missing;
  for (const auto bytes : o.sizes) {
    const std::int64_t perRank = std::max<std::int64_t>(1, bytes / 4) * 4;
    int found = 0;
    for (const std::string op : {"all_reduce", "all_gather", "broadcast"}) {
      const std::int64_t counted = op == "all_gather" ? perRank * o.world : perRank;
      found += std::any_of(have.begin(), have.end(), [&](const costmodel::CollectiveMeasurement& m) {
        return m.op == op && m.backend == o.backend && m.world == o.world && m.linkLevel == link && m.bytes == counted;
      });
    }
    if (found < 3) missing.push_back(bytes);
  }
  return missing;
}

Result<std::vector<costmodel::CollectiveMeasurement>> runCollectiveWorker(const CollectiveOptions& o, int rank,
                                                                         ProgressSink* progress, const CancellationToken* cancel) {
  const bool nccl = o.backend == "nccl";
  if (!nccl && o.backend != "gloo") return fail(Error::badInput("--backend: expected gloo or nccl, got \"" + o.backend + "\""));
  if (o.world < (nccl ? 1 : 2) || rank < 0 || rank >= o.world) {
    return fail(Error::badInput(nccl ? "NCCL collectives need a world of at least 1 and a rank inside it"
                                     : "collectives need a world of at least 2 and a rank inside it"));
  }
#if !defined(COLO_HAS_NCCL)
  if (nccl) return fail(Error::badInput("--backend nccl: this build has no NCCL (a CUDA LibTorch and nccl.h are needed)"));
#endif
#if !defined(COLO_HAS_GLOO)
  if (!nccl) return fail(Error::badInput("--backend gloo: this LibTorch ships no Gloo headers (gloo/algorithm.h); use --backend nccl"));
#endif
  try {
    c10d::TCPStoreOptions storeOptions;
    storeOptions.port = static_cast<std::uint16_t>(o.port);
    storeOptions.isServer = rank == 0;
    storeOptions.numWorkers = o.world;
    storeOptions.timeout = std::chrono::milliseconds(o.timeoutSeconds * 1000);
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", storeOptions);
#if defined(COLO_HAS_NCCL)
    if (nccl) {
      if (!torch::cuda::is_available() || static_cast<int>(torch::cuda::device_count()) < o.world) {
        return fail(Error::badInput("--backend nccl --world " + std::to_string(o.world) + ": needs that many CUDA devices, this machine has " +
                                    std::to_string(torch::cuda::is_available() ? torch::cuda::device_count() : 0)));
      }
      const auto index = static_cast<c10::DeviceIndex>(rank);
      c10::cuda::set_device(index);
      auto pgOptions = c10d::ProcessGroupNCCL::Options::create();
      pgOptions->timeout = std::chrono::milliseconds(o.timeoutSeconds * 1000);
      auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, o.world, pgOptions);
      return measure(*pg, o, rank, torch::Device(torch::kCUDA, index), collectiveLinkLevel(o), progress, cancel);
    }
#endif
#if defined(COLO_HAS_GLOO)
    auto pgOptions = c10d::ProcessGroupGloo::Options::create();
    pgOptions->timeout = std::chrono::milliseconds(o.timeoutSeconds * 1000);
    pgOptions->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, o.world, pgOptions);
    return measure(*pg, o, rank, torch::Device(torch::kCPU), collectiveLinkLevel(o), progress, cancel);
#else
    return fail(Error::internal("no process group"));
#endif
  } catch (const c10::Error& e) {
    return fail(Error::internal(std::string("c10d (rank ") + std::to_string(rank) + "): " + e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return fail(Error::internal(std::string("c10d (rank ") + std::to_string(rank) + "): " + e.what()));
  }
}

}  // namespace colo::profiler
