// The parts of the executor that need no LibTorch: the launcher environment, the pre-flight check of a
// plan, and the result as JSON and as tables.
#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <thread>

#include "colo/core/units.h"
#include "colo/core/runnable.h"
#include "colo/executor/executor.h"

namespace colo::executor {
namespace {

Result<int> envInt(const char* name, int fallback, int minimum) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < minimum || x > 1 << 24) {
    return fail(Error::badInput(std::string("environment variable ") + name + "=\"" + v + "\" is not a valid number"));
  }
  return static_cast<int>(x);
}

std::string fixed(double v, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

std::string formatSeconds(double s) {
  if (s <= 0) return "-";
  if (s < 1.0) return fixed(s * 1e3, 1) + " ms";
  return fixed(s, 3) + " s";
}

// Why measured and predicted step times differ: which side of the step the gap is in, and where the
// prediction came from.
std::string explainDifference(const RunResult& r, double measuredCompute) {
  if (r.stepTimeSeconds <= 0 || r.predictedStepTimeSeconds <= 0) return {};
  std::ostringstream o;
  const double other = std::max(0.0, r.stepTimeSeconds - measuredCompute);
  o << "why        measured " << formatSeconds(r.stepTimeSeconds) << " a step: " << formatSeconds(measuredCompute)
    << " in LibTorch calls, " << formatSeconds(other) << " outside them (collectives, send/recv waits, the data and the\n"
    << "           executor's own work); predicted " << formatSeconds(r.predictedStepTimeSeconds) << " by "
    << (r.predictionSource.empty() ? "the plan" : r.predictionSource) << "\n";
  if (r.backend == "gloo" && r.predictedTensorBytes > 0 && r.tensorMemoryBytes > 1.5 * r.predictedTensorBytes) {
    o << "           resident growth is an upper bound on live tensors: it also holds what glibc and LibTorch's CPU\n"
      << "           allocator keep after tensors are freed, autograd's graph and per-thread workspaces\n";
  }
  const unsigned cores = std::thread::hardware_concurrency();
  if (r.backend == "gloo" && cores > 0 && r.world > static_cast<std::int64_t>(cores)) {
    o << "           " << r.world << " ranks share this machine's " << cores << " cores: each rank's kernels get "
      << fixed(static_cast<double>(cores) / static_cast<double>(r.world), 2)
      << " of a core, which a cost database measured in one process does not see\n";
  }
  if (r.predictedComputeSeconds > 0 && measuredCompute > 2 * r.predictedComputeSeconds) {
    o << "           the kernels ran " << fixed(measuredCompute / r.predictedComputeSeconds, 1) << "x slower than predicted"
      << (r.predictionSource.rfind("cost database", 0) == 0 ? "" : ": the plan's cluster is not this machine")
      << "; other load on the machine slows them too\n";
  }
  return o.str();
}

}  // namespace

bool WorldInfo::launchedByLauncher() { return std::getenv("RANK") && std::getenv("WORLD_SIZE"); }

Result<WorldInfo> WorldInfo::fromEnvironment() {
  WorldInfo w;
  auto world = envInt("WORLD_SIZE", 1, 1);
  if (!world) return fail(world.error());
  auto rank = envInt("RANK", 0, 0);
  if (!rank) return fail(rank.error());
  auto local = envInt("LOCAL_RANK", *rank, 0);
  if (!local) return fail(local.error());
  auto localWorld = envInt("LOCAL_WORLD_SIZE", *world, 1);
  if (!localWorld) return fail(localWorld.error());
  auto port = envInt("MASTER_PORT", 29500, 1);
  if (!port) return fail(port.error());
  if (*rank >= *world) {
    return fail(Error::badInput("RANK=" + std::to_string(*rank) + " is not below WORLD_SIZE=" + std::to_string(*world)));
  }
  if (*port > 65535) return fail(Error::badInput("MASTER_PORT=" + std::to_string(*port) + " is not a port"));
  w.world = *world;
  w.rank = *rank;
  w.localRank = *local;
  w.localWorld = *localWorld;
  w.masterPort = *port;
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) w.masterAddr = addr;
  return w;
}

Result<void> checkExecutable(const Plan& plan, int world, const std::string& backend) {
  auto bad = [](const std::string& why) { return fail(Error::badInput(why)); };
  if (backend != "gloo" && backend != "nccl") return bad("--backend: expected gloo or nccl, got \"" + backend + "\"");
  const auto& p = plan.parallel;
  const std::int64_t planWorld = p.tp * p.pp * p.dp * p.cp;
  if (planWorld != world) {
    return bad("the plan needs tp*pp*dp*cp = " + std::to_string(p.tp) + "*" + std::to_string(p.pp) + "*" +
               std::to_string(p.dp) + "*" + std::to_string(p.cp) + " = " + std::to_string(planWorld) +
               " processes, the job has " + std::to_string(world) + " (WORLD_SIZE or --nproc-per-node)");
  }
  return checkRunnable(plan);
}

Json RunResult::toJson() const {
  return {{"plan", planName},
          {"plan_hash", planHash},
          {"model", model},
          {"device", device},
          {"backend", backend},
          {"fused_kernels", fusedKernels},
          {"fused_kernel_names", fusedKernelNames},
          {"world", world},
          {"parallel", {{"tp", tp}, {"pp", pp}, {"dp", dp}, {"vpp", vpp}}},
          {"first_step", firstStep},
          {"tokens_per_step", tokensPerStep},
          {"losses", losses},
          {"step_seconds", stepSeconds},
          {"grad_norms", gradNorms},
          {"step_time_s", stepTimeSeconds},
          {"tokens_per_s", tokensPerSecond},
          {"peak_memory_bytes", peakMemoryBytes},
          {"predicted_step_time_s", predictedStepTimeSeconds},
          {"predicted_peak_memory_bytes", predictedPeakMemoryBytes},
          {"tensor_memory_bytes", tensorMemoryBytes},
          {"predicted_tensor_bytes", predictedTensorBytes},
          {"step_start_tensor_bytes", stepStartTensorBytes},
          {"forward_held_bytes", forwardHeldBytes},
          {"model_state_bytes", modelStateBytes},
          {"predicted_model_state_bytes", predictedModelStateBytes},
          {"host_memory_bytes", hostMemoryBytes},
          {"predicted_host_memory_bytes", predictedHostMemoryBytes},
          {"offload_copy_s", offloadCopySeconds},
          {"predicted_offload_copy_s", predictedOffloadCopySeconds},
          {"zero_comm_wait_s", zeroCommWaitSeconds},
          {"predicted_compute_s", predictedComputeSeconds},
          {"prediction_source", predictionSource},
          {"compute_s", computeSeconds},
          {"wall_s", wallSeconds},
          {"checkpoint", checkpoint}};
}

Result<RunResult> resultFromJson(const Json& j) {
  try {
    RunResult r;
    r.planName = j.at("plan").get<std::string>();
    r.planHash = j.at("plan_hash").get<std::string>();
    r.model = j.at("model").get<std::string>();
    r.device = j.at("device").get<std::string>();
    r.backend = j.at("backend").get<std::string>();
    r.fusedKernels = j.value("fused_kernels", false);
    r.fusedKernelNames = j.value("fused_kernel_names", std::vector<std::string>{});
    r.world = j.at("world").get<std::int64_t>();
    r.tp = j.at("parallel").at("tp").get<std::int64_t>();
    r.pp = j.at("parallel").at("pp").get<std::int64_t>();
    r.dp = j.at("parallel").at("dp").get<std::int64_t>();
    r.vpp = j.at("parallel").at("vpp").get<std::int64_t>();
    r.firstStep = j.at("first_step").get<std::int64_t>();
    r.tokensPerStep = j.at("tokens_per_step").get<std::int64_t>();
    r.losses = j.at("losses").get<std::vector<double>>();
    r.stepSeconds = j.at("step_seconds").get<std::vector<double>>();
    r.gradNorms = j.at("grad_norms").get<std::vector<double>>();
    r.stepTimeSeconds = j.at("step_time_s").get<double>();
    r.tokensPerSecond = j.at("tokens_per_s").get<double>();
    r.peakMemoryBytes = j.at("peak_memory_bytes").get<double>();
    r.predictedStepTimeSeconds = j.at("predicted_step_time_s").get<double>();
    r.predictedPeakMemoryBytes = j.at("predicted_peak_memory_bytes").get<double>();
    // Added later: results written before them read as unknown.
    r.tensorMemoryBytes = j.value("tensor_memory_bytes", 0.0);
    r.predictedTensorBytes = j.value("predicted_tensor_bytes", 0.0);
    r.stepStartTensorBytes = j.value("step_start_tensor_bytes", 0.0);
    r.forwardHeldBytes = j.value("forward_held_bytes", 0.0);
    r.modelStateBytes = j.value("model_state_bytes", 0.0);
    r.predictedModelStateBytes = j.value("predicted_model_state_bytes", 0.0);
    r.hostMemoryBytes = j.value("host_memory_bytes", 0.0);
    r.predictedHostMemoryBytes = j.value("predicted_host_memory_bytes", 0.0);
    r.offloadCopySeconds = j.value("offload_copy_s", 0.0);
    r.predictedOffloadCopySeconds = j.value("predicted_offload_copy_s", 0.0);
    r.zeroCommWaitSeconds = j.value("zero_comm_wait_s", 0.0);
    r.predictedComputeSeconds = j.value("predicted_compute_s", 0.0);
    r.predictionSource = j.value("prediction_source", std::string());
    r.computeSeconds = j.at("compute_s").get<double>();
    r.wallSeconds = j.at("wall_s").get<double>();
    r.checkpoint = j.at("checkpoint").get<std::string>();
    return r;
  } catch (const std::exception& e) {
    return fail(Error::badInput(std::string("not a colo-run result: ") + e.what()));
  }
}

std::string renderResult(const RunResult& r) {
  std::ostringstream o;
  auto pct = [](double measured, double predicted) {
    if (predicted <= 0) return std::string("-");
    return (measured >= predicted ? "+" : "") + fixed(100.0 * (measured - predicted) / predicted, 1) + "%";
  };
  o << "run       " << r.planName << " (" << r.model << "): tp " << r.tp << " pp " << r.pp << " dp " << r.dp
    << (r.vpp > 1 ? " vpp " + std::to_string(r.vpp) : "") << " on " << r.world << " x " << r.device << " (" << r.backend << ")\n";
  if (!r.losses.empty()) {
    // Steps counted from 1, as the progress lines count them ("step 3/3").
    o << "loss      " << fixed(r.losses.front(), 4) << " at step " << r.firstStep + 1 << " -> " << fixed(r.losses.back(), 4)
      << " at step " << r.firstStep + static_cast<std::int64_t>(r.losses.size()) << "\n";
  }
  if (!r.fusedKernelNames.empty()) {
    o << "kernels   colo's fused";
    for (std::size_t i = 0; i < r.fusedKernelNames.size(); ++i) o << (i ? ", " : " ") << r.fusedKernelNames[i];
    o << "; LibTorch's operators for the rest\n";
  }
  o << "                   predicted     measured   measured vs predicted\n";
  o << "step time    " << std::setw(12) << formatSeconds(r.predictedStepTimeSeconds) << " " << std::setw(12)
    << formatSeconds(r.stepTimeSeconds) << "   " << pct(r.stepTimeSeconds, r.predictedStepTimeSeconds) << "\n";
  // Rank 0's share of the run spent in LibTorch calls, applied to the steady step (the first step,
  // excluded from the step time, warms caches and allocators).
  const double measuredCompute = r.wallSeconds > 0 ? r.stepTimeSeconds * std::min(1.0, r.computeSeconds / r.wallSeconds) : 0.0;
  if (r.predictedComputeSeconds > 0 && measuredCompute > 0) {
    o << "  compute    " << std::setw(12) << formatSeconds(r.predictedComputeSeconds) << " " << std::setw(12)
      << formatSeconds(measuredCompute) << "   " << pct(measuredCompute, r.predictedComputeSeconds)
      << "  (rank 0's time in LibTorch calls)\n";
  }
  const bool cpu = r.backend == "gloo";
  if (cpu && r.tensorMemoryBytes > 0 && r.predictedTensorBytes > 0) {
    // Like with like: what training added to the process against what the model says training holds.
    o << "tensors      " << std::setw(12) << formatBytes(r.predictedTensorBytes) << " " << std::setw(12)
      << formatBytes(r.tensorMemoryBytes) << "   " << pct(r.tensorMemoryBytes, r.predictedTensorBytes)
      << "  (measured: peak resident set less the " << formatBytes(r.peakMemoryBytes - r.tensorMemoryBytes)
      << " resident before the model was built)\n";
  } else if (!cpu && r.tensorMemoryBytes > 0) {
    // On a GPU the planner's peak is live tensors: LibTorch's peak allocated, with the allocator's
    // reserved peak (what nvidia-smi sees, less the CUDA context) beside it.
    o << "peak memory  " << std::setw(12) << formatBytes(r.predictedPeakMemoryBytes) << " " << std::setw(12)
      << formatBytes(r.tensorMemoryBytes) << "   " << pct(r.tensorMemoryBytes, r.predictedPeakMemoryBytes)
      << "  (measured: peak allocated; reserved " << formatBytes(r.peakMemoryBytes) << ")\n";
  } else {
    o << "peak memory  " << std::setw(12) << formatBytes(r.predictedPeakMemoryBytes) << " " << std::setw(12)
      << formatBytes(r.peakMemoryBytes) << "   " << pct(r.peakMemoryBytes, r.predictedPeakMemoryBytes)
      << (cpu ? "  (measured: process resident set)" : "") << "\n";
  }
  if (r.modelStateBytes > 0 && r.predictedModelStateBytes > 0) {
    o << "model states " << std::setw(12) << formatBytes(r.predictedModelStateBytes) << " " << std::setw(12)
      << formatBytes(r.modelStateBytes) << "   " << pct(r.modelStateBytes, r.predictedModelStateBytes)
      << "  (weights, master copies, gradients, optimizer states; measured: the buffers held, gathered ZeRO-3 units included)\n";
  }
  if (r.hostMemoryBytes > 0 || r.predictedHostMemoryBytes > 0) {
    o << "host memory  " << std::setw(12) << formatBytes(r.predictedHostMemoryBytes) << " " << std::setw(12)
      << formatBytes(r.hostMemoryBytes) << "   " << pct(r.hostMemoryBytes, r.predictedHostMemoryBytes)
      << "  (offloaded optimizer states, per rank)\n";
    o << "offload copy " << std::setw(12) << formatSeconds(r.predictedOffloadCopySeconds) << " " << std::setw(12)
      << formatSeconds(r.offloadCopySeconds) << "   " << pct(r.offloadCopySeconds, r.predictedOffloadCopySeconds)
      << "  (per step: gradients to the host, weights back" << (cpu ? "; on a CPU both sides are host memory" : "") << ")\n";
  }
  if (r.zeroCommWaitSeconds > 0) {
    o << "ZeRO waits   " << std::setw(25) << formatSeconds(r.zeroCommWaitSeconds)
      << "        (per step, rank 0: waiting for unit all-gathers and gradient reduce-scatters the overlap did not hide)\n";
  }
  o << "throughput   " << fixed(r.tokensPerSecond, 0) << " tokens/s; " << fixed(r.wallSeconds > 0 ? 100.0 * r.computeSeconds / r.wallSeconds : 0, 1)
    << "% of rank 0's time in LibTorch calls\n";
  o << explainDifference(r, measuredCompute);
  if (!r.checkpoint.empty()) o << "checkpoint " << r.checkpoint << "\n";
  return o.str();
}

std::string renderComparison(const RunResult& a, const RunResult& b) {
  std::ostringstream o;
  auto layout = [](const RunResult& r) {
    return "tp" + std::to_string(r.tp) + " pp" + std::to_string(r.pp) + " dp" + std::to_string(r.dp) +
           (r.vpp > 1 ? " vpp" + std::to_string(r.vpp) : "");
  };
  const int w = static_cast<int>(std::max<std::size_t>({22, a.planName.size() + 2, b.planName.size() + 2}));
  o << std::left << std::setw(24) << "" << std::setw(w) << a.planName << std::setw(w) << b.planName << "\n";
  o << std::setw(24) << "layout" << std::setw(w) << layout(a) << std::setw(w) << layout(b) << "\n";
  o << std::setw(24) << "predicted step time" << std::setw(w) << formatSeconds(a.predictedStepTimeSeconds) << std::setw(w)
    << formatSeconds(b.predictedStepTimeSeconds) << "\n";
  o << std::setw(24) << "measured step time" << std::setw(w) << formatSeconds(a.stepTimeSeconds) << std::setw(w)
    << formatSeconds(b.stepTimeSeconds) << "\n";
  o << std::setw(24) << "tokens/s" << std::setw(w) << fixed(a.tokensPerSecond, 0) << std::setw(w) << fixed(b.tokensPerSecond, 0) << "\n";
  o << std::setw(24) << "predicted peak memory" << std::setw(w) << formatBytes(a.predictedPeakMemoryBytes) << std::setw(w)
    << formatBytes(b.predictedPeakMemoryBytes) << "\n";
  o << std::setw(24) << "measured peak memory" << std::setw(w) << formatBytes(a.peakMemoryBytes) << std::setw(w)
    << formatBytes(b.peakMemoryBytes) << "\n";
  o << std::setw(24) << "final loss" << std::setw(w) << (a.losses.empty() ? "-" : fixed(a.losses.back(), 4)) << std::setw(w)
    << (b.losses.empty() ? "-" : fixed(b.losses.back(), 4)) << "\n";
  if (a.stepTimeSeconds > 0 && b.stepTimeSeconds > 0) {
    o << "measured: " << a.planName << " is " << fixed(b.stepTimeSeconds / a.stepTimeSeconds, 2) << "x the speed of "
      << b.planName << " (predicted " << fixed(b.predictedStepTimeSeconds / std::max(1e-12, a.predictedStepTimeSeconds), 2)
      << "x)\n";
  }
  return o.str();
}

}  // namespace colo::executor
