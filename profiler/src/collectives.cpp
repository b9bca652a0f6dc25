// Collectives through c10d's Gloo process group across local processes. Every rank runs the same
// sequence; rank 0 records medians.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>

#include "colo/profiler/collectives.h"
#include "torch_util.h"

namespace colo::profiler {

Result<std::vector<costmodel::CollectiveMeasurement>> runCollectiveWorker(const CollectiveOptions& o, int rank,
                                                                         ProgressSink* progress) {
  if (o.world < 2 || rank < 0 || rank >= o.world) {
    return fail(Error::badInput("collectives need a world of at least 2 and a rank inside it"));
  }
  try {
    c10d::TCPStoreOptions storeOptions;
    storeOptions.port = static_cast<std::uint16_t>(o.port);
    storeOptions.isServer = rank == 0;
    storeOptions.numWorkers = o.world;
    storeOptions.timeout = std::chrono::milliseconds(o.timeoutSeconds * 1000);
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", storeOptions);
    auto pgOptions = c10d::ProcessGroupGloo::Options::create();
    pgOptions->timeout = std::chrono::milliseconds(o.timeoutSeconds * 1000);
    pgOptions->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, o.world, pgOptions);
    std::vector<costmodel::CollectiveMeasurement> out;
    // Time grows with the bytes moved plus a fixed cost per call; progress follows that.
    auto weight = [](std::int64_t bytes) { return static_cast<double>(bytes) + 1e5; };
    double total = 0;
    double done = 0;
    for (const auto bytes : o.sizes) total += 3 * weight(bytes);
    for (const auto bytes : o.sizes) {
      const std::int64_t elements = std::max<std::int64_t>(1, bytes / 4);
      for (const std::string op : {"all_reduce", "all_gather", "broadcast"}) {
        std::vector<double> samples;
        for (int i = 0; i < o.warmup + o.repetitions; ++i) {
          std::vector<at::Tensor> t{torch::ones({elements})};
          pg->barrier()->wait();
          const auto start = std::chrono::steady_clock::now();
          if (op == "all_reduce") {
            pg->allreduce(t)->wait();
          } else if (op == "broadcast") {
            pg->broadcast(t)->wait();
          } else {
            std::vector<std::vector<at::Tensor>> gathered(1);
            for (int r = 0; r < o.world; ++r) gathered[0].push_back(torch::empty({elements}));
            pg->allgather(gathered, t)->wait();
          }
          if (i >= o.warmup) samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        const Timing timing = detail::summarize(samples);
        // all_gather's "bytes" is the gathered output, as the cost model counts it.
        const std::int64_t counted = op == "all_gather" ? elements * 4 * o.world : elements * 4;
        out.push_back({op, "gloo", o.world, "loopback", counted, timing.median, timing.spread, timing.repetitions});
        done += weight(bytes);
        if (progress && rank == 0) progress->progress(done / total, op + " " + std::to_string(bytes >> 10) + " KiB");
      }
    }
    pg->barrier()->wait();
    if (rank != 0) out.clear();
    return out;
  } catch (const c10::Error& e) {
    return fail(Error::internal(std::string("c10d (rank ") + std::to_string(rank) + "): " + e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return fail(Error::internal(std::string("c10d (rank ") + std::to_string(rank) + "): " + e.what()));
  }
}

}  // namespace colo::profiler
