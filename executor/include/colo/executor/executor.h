#pragma once
/// \file
/// The executor: trains the model of a plan with the plan's parallelism on real processes joined by
/// c10d (Gloo on CPU, NCCL on GPU). One call of runRank() is one rank; `colo-run` starts the ranks (or
/// joins a job torchrun/SLURM started) and reports. No LibTorch type appears here.

#include <cstdint>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/plan.h"

namespace colo::executor {

/// Where this process sits in the job: torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
/// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
struct WorldInfo {
  int rank = 0;
  int world = 1;
  int localRank = 0;
  int localWorld = 1;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  /// Errors: kBadInput naming the variable for a malformed or inconsistent value; nullopt-like empty
  /// result is never returned: a missing WORLD_SIZE gives world 1 on rank 0.
  [[nodiscard]] static Result<WorldInfo> fromEnvironment();
  /// Whether RANK and WORLD_SIZE are set (a launcher started this process).
  [[nodiscard]] static bool launchedByLauncher();
};

/// The fused kernels (colo::kernels) in the model. auto: on CUDA devices those measured faster than
/// LibTorch's own operators (RMSNorm, rotary, the vocabulary-parallel cross-entropy, AdamW; LayerNorm and
/// SwiGLU were slower on an H200: docs/gpu.md), LibTorch's operators on the CPU (the references there run
/// single-threaded). on: every fused kernel the model has a use for. off: none.
enum class FusedKernels { kAuto, kOn, kOff };

struct RunOptions {
  Plan plan;
  std::string planFile;
  std::string dataFile;
  std::int64_t steps = 20;
  std::string backend = "gloo";     ///< gloo (CPU tensors) or nccl (CUDA tensors)
  std::string checkpointDir;        ///< empty: no checkpoints
  std::int64_t checkpointEvery = 0; ///< steps between checkpoints (0: only after the last step)
  bool resume = false;              ///< continue from the newest checkpoint in checkpointDir
  std::string costDbFile;           ///< predict with this cost database (e.g. this machine's, by colo-profile)
  std::uint64_t seed = 1234;
  double learningRate = 1e-3;
  double minLearningRate = 1e-4;
  std::int64_t warmupSteps = 5;
  double weightDecay = 0.1;
  double clipNorm = 1.0;
  double beta1 = 0.9, beta2 = 0.95, epsilon = 1e-8;  ///< AdamW and LAMB (the plan's optimizer)
  double momentum = 0.9, trustCoefficient = 0.001;    ///< LARS
  double moeAuxLossCoeff = 0.01;                      ///< MoE load-balancing loss (Switch Transformer's)
  std::int64_t bucketBytes = 25 << 20;  ///< data-parallel gradient buckets
  int timeoutSeconds = 120;             ///< a collective waiting this long on a missing rank fails
  bool progress = true;                 ///< a line per step on stderr (rank 0)
  /// ZeRO-2/3: prefetch the next unit's all-gather and keep gradient reduce-scatters in flight during the
  /// backward (off: each collective finishes where it starts; the losses are identical).
  bool overlap = true;
  int threads = 0;                      ///< intra-op threads per rank (0: cores / local ranks)
  FusedKernels fusedKernels = FusedKernels::kAuto;
  /// Rank 0 records its last `traceSteps` steps here as a Chrome trace (empty: no trace).
  std::string traceFile;
  std::int64_t traceSteps = 2;
};

/// What one run measured (identical on every rank after the run).
struct RunResult {
  std::string planName, planHash, model, device, backend;
  bool fusedKernels = false;            ///< the model ran at least one of colo's fused kernels
  std::vector<std::string> fusedKernelNames;  ///< which: rmsnorm, layernorm, swiglu, rotary, cross_entropy, adamw
  std::int64_t world = 1, tp = 1, pp = 1, dp = 1, vpp = 1;
  std::int64_t firstStep = 0;           ///< 0, or the step a resumed run started at
  std::int64_t tokensPerStep = 0;
  std::vector<double> losses;           ///< per step run (firstStep ..)
  std::vector<double> stepSeconds;
  std::vector<double> gradNorms;
  double stepTimeSeconds = 0;           ///< median over steps after the first (warm-up)
  double tokensPerSecond = 0;
  double peakMemoryBytes = 0;           ///< max over ranks (resident set on CPU, allocator peak on GPU)
  /// What training itself added, max over ranks: on CPU the peak resident set less the resident set
  /// before the model was built (LibTorch, Gloo and the process), the same kind as predictedTensorBytes.
  double tensorMemoryBytes = 0;
  double predictedStepTimeSeconds = 0;  ///< the cost model's, from the plan (evaluated when absent)
  double predictedPeakMemoryBytes = 0;
  /// Weights, master copies, gradients and optimizer states at most on a rank: counted from the buffers
  /// the executor holds (persistent ones plus the most gathered at once under ZeRO-3), and predicted.
  double modelStateBytes = 0, predictedModelStateBytes = 0;
  /// Optimizer offload: host memory held (max over ranks) and the seconds a step spends copying
  /// gradients out and weights back (rank 0, mean over steps), measured and predicted.
  double hostMemoryBytes = 0, predictedHostMemoryBytes = 0;
  double offloadCopySeconds = 0, predictedOffloadCopySeconds = 0;
  /// ZeRO-2/3: seconds a step waited for unit all-gathers and gradient reduce-scatters (rank 0, mean over
  /// steps): the communication the overlap did not hide.
  double zeroCommWaitSeconds = 0;
  double predictedTensorBytes = 0;      ///< weights, gradients, optimizer, activations and buffers of the peak stage
  /// On a GPU (0 elsewhere), the last step, max over ranks: what the allocator held when the step began
  /// (model states and whatever else lives across steps), and the most the step's forwards held above it
  /// right after a forward (saved activations and the outputs kept for the backward).
  double stepStartTensorBytes = 0, forwardHeldBytes = 0;
  double predictedComputeSeconds = 0;   ///< per step: forward, backward, recompute and optimizer kernels
  std::string predictionSource;         ///< where the predictions come from (the plan, or a cost database)
  double computeSeconds = 0;            ///< in LibTorch forward/backward/optimizer calls, rank 0, all steps
  double wallSeconds = 0;               ///< all steps, rank 0
  std::string checkpoint;               ///< the last checkpoint written, if any
  [[nodiscard]] Json toJson() const;
};

/// Checks that the executor can run the plan on `world` processes with `backend`, before any work:
/// world = tp*pp*dp*cp, a decoder model with a spec (GPT- or LLaMA-style), no context or expert
/// parallelism, a schedule it runs (gpipe, 1f1b, interleaved), ZeRO 0 or 1, no offload, vocabulary
/// and heads divisible by tp. Errors: kBadInput with the field and value.
[[nodiscard]] Result<void> checkExecutable(const Plan& plan, int world, const std::string& backend);

/// The newest checkpoint under `checkpointDir` (the folder its `latest` file names), as `--resume`
/// continues from it. Errors: kBadInput when the folder is empty or holds no `latest` file, naming the
/// folder and how a checkpoint is written.
[[nodiscard]] Result<std::string> latestCheckpoint(const std::string& checkpointDir);

/// Runs one rank to the end. Every rank of the job must call it. Errors: kBadInput (plan or data),
/// kIo (checkpoints), kInternal (a c10d failure: a rank died, a timeout), each naming the rank.
[[nodiscard]] Result<RunResult> runRank(const RunOptions& options, const WorldInfo& world);

/// The text table printed at the end of a run: predicted vs measured step time and peak memory.
[[nodiscard]] std::string renderResult(const RunResult& result);
/// Two runs side by side (colo-run --compare).
[[nodiscard]] std::string renderComparison(const RunResult& a, const RunResult& b);
[[nodiscard]] Result<RunResult> resultFromJson(const Json& j);

}  // namespace colo::executor
