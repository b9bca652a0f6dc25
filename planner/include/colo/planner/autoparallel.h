#pragma once
/// \file
/// Operator-level auto-parallelism: every operator of the model gets its own sharding strategy on a
/// logical device mesh (Colossal-AI's sharding specs), the collectives between consecutive layouts are
/// costed by the cost model on the cluster's link levels, and which activations each operator keeps,
/// recomputes or offloads, and what share of the optimizer states goes to host memory, are chosen in
/// the same solve under the per-GPU memory budget (Mist-style), not after it.
///
/// The solve is exact on a block (one transformer layer, the embedding, the head) for a given price of
/// memory (a dynamic programme over the block's operators whose state is the layout of every live
/// tensor); identical layers reuse one solve (the layer's interface layout is the same at entry and
/// exit), and the price of memory is swept so that the budget is met. docs/autoparallel.md states every
/// approximation. Megatron-LM's hand split (column- then row-parallel GEMMs, heads, vocabulary, data
/// parallel on the other axis, layer-level recompute) is one point of the space; it is solved beside the
/// joint plan on the same meshes and printed with it.

#include <cstdint>
#include <string>
#include <vector>

#include "colo/core/cluster.h"
#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/model.h"
#include "colo/core/plan.h"
#include "colo/core/progress.h"
#include "colo/planner/search.h"

namespace colo::planner {

struct AutoParallelOptions {
  std::int64_t globalBatchSize = 0;           ///< samples per step (required)
  std::int64_t seqLen = 0;                    ///< 0: the model's default
  DType precision = DType::kBf16;
  double maxMemoryFraction = 0.95;            ///< budget as a share of GPU memory
  double memoryBudgetBytes = 0;               ///< an explicit per-GPU budget (overrides the fraction)
  /// Mesh shapes of one pipeline stage to try ({8}, {2, 8}); empty: the 1-D mesh and every 2-D mesh
  /// whose inner axis divides a node, for every pipeline degree.
  std::vector<std::vector<std::int64_t>> meshes;
  std::vector<std::int64_t> pipelineDegrees;  ///< empty: 1, 2, 4, ... while stages keep a layer
  /// Data-parallel replicas of each stage's mesh to try (the third axis: every operator runs alike on
  /// each replica, the replicas' gradients are reduced after the backward and the optimizer states are
  /// split over them); empty: 1, and, for 2-D meshes of whole nodes, 2, 4, ... (docs/autoparallel.md).
  std::vector<std::int64_t> replicas;
  /// Model chunks per pipeline stage tried (Megatron's interleaved 1F1B when > 1; empty:
  /// kChunkCounts of colo/planner/space.h, where chunksRule and interleavedBatchRule let them).
  std::vector<std::int64_t> virtualStages;
  bool allowOffload = true;                   ///< activations, optimizer states and weights to host memory
  bool allowWeightOffload = true;             ///< with allowOffload: the layers' weights too
  /// Host time to issue one kernel or collective (the evaluator's host floor, docs/costmodel.md): a
  /// block whose kernels finish sooner waits for the host. 0: the host keeps ahead (CUDA graphs).
  double hostMicrosecondsPerOp = kEagerHostMicrosecondsPerOp;
  bool flashAttention = true;                 ///< fused attention kernels (false: unfused, as the plan's execution says)
  bool flashAttention2 = false;               ///< with flashAttention: FlashAttention-2's kernels (Execution::flashAttention2)
  /// Megatron's own split (solved beside) joins the joint solve's candidates, so that the joint plan is
  /// never slower than it even where the sweep of memory prices misses the budget's exact point; false
  /// measures the per-operator sweep alone (what tests of the solver use).
  bool seedWithMegatron = true;
  ProgressSink* progress = nullptr;
  const CancellationToken* cancel = nullptr;
};

/// One operator (unit) of a block in a solved plan.
struct UnitAssignment {
  std::string unit;          ///< "attn.qkv", "attn.core" (fused attention), "moe" (a whole MoE block)
  std::string kind;          ///< gemm, norm, pointwise, attention, moe, embedding, loss
  std::string roles;         ///< what each mesh axis splits: "0:batch 1:out"
  std::string input;         ///< the layout it reads, Colossal-AI notation: "[S0, R, R]"
  std::string output;        ///< the layout it produces: "[S0, R, S1]", "[S0, R, R] P1"
  std::string collectives;   ///< forward conversions of its inputs and its own collectives ("-" when none)
  double seconds = 0;        ///< per micro-batch: forward + backward kernels, collectives, recompute
  double activationBytes = 0;  ///< kept for backward per micro-batch (0 when recomputed)
  double stateBytes = 0;     ///< weights, gradients and optimizer states on one GPU
  std::string activation;    ///< kept, kept before conversion, recomputed, offloaded, none
  std::vector<std::string> axisRoles;  ///< per mesh axis: none, batch, seq, out, in, expert, inner
  bool recompute = false;    ///< its forward runs again before its backward
  std::vector<std::string> ops;  ///< the op graph's operators it stands for
  [[nodiscard]] Json toJson() const;
};

/// A distinct block of the model and the strategies of its operators.
struct BlockAssignment {
  std::string name;          ///< "layers 0-95", "embedding", "head"
  std::int64_t count = 1;    ///< blocks solved alike
  std::vector<UnitAssignment> units;
  [[nodiscard]] Json toJson() const;
};

/// One solved plan: a mesh per pipeline stage, a micro-batch, and per-operator strategies.
struct OperatorPlan {
  std::string method;                 ///< "joint" or "megatron"
  std::string mesh;                   ///< "2x8"
  std::int64_t replicas = 1;          ///< data-parallel copies of the mesh in each stage (the outermost axis)
  std::int64_t pipelineStages = 1;
  std::int64_t virtualStages = 1;     ///< model chunks per stage: > 1 is the interleaved 1F1B schedule
  /// Layers of each model chunk (chunk v of stage i at v*pipelineStages + i): under 1F1B the end stages
  /// give layers up to the embedding and the head.
  std::vector<std::int64_t> stageLayers;
  std::int64_t microBatchSize = 1;    ///< samples per micro-batch over one stage's mesh
  std::int64_t microBatches = 1;      ///< per replica: the global batch is replicas x microBatches x microBatchSize
  double stepSeconds = 0;
  double peakMemoryBytes = 0;         ///< per GPU, the fullest stage
  double budgetBytes = 0;
  bool fits = false;
  double activationOffloadFraction = 0;  ///< of the activations each layer keeps, to host memory
  double optimizerOffloadFraction = 0;   ///< of the optimizer states, to host memory (updated there)
  double weightOffloadFraction = 0;      ///< of the layers' 16-bit weights, in host memory (fetched for each use)
  std::string recompute;              ///< "per operator", or the layer-level policy
  /// Step breakdown (seconds): kernels, collectives between and inside operators, recompute, pipeline
  /// bubble, exposed gradient reduction, optimizer step, exposed host transfers.
  double compute = 0, communication = 0, recomputeSeconds = 0, bubble = 0, gradientSync = 0, optimizer = 0,
         offload = 0;
  /// Memory breakdown of the fullest stage (bytes per GPU).
  double stateBytes = 0, activationBytes = 0, contextBytes = 0;
  double bufferBytes = 0;  ///< gathers, logit copies, gradient buckets and NCCL's communicators (as the evaluator's buffers)
  std::vector<BlockAssignment> blocks;
  /// "8 stages x mesh 4x8", with " x 2 replicas" when there are several.
  [[nodiscard]] std::string layoutText() const;
  /// The degree-level plan it equals (tp, dp, sp, pp, recompute), when colo-run can execute it.
  bool runnable = false;
  std::string expressedAs;            ///< "tp=8 dp=2 pp=1 sp, recompute none" or the reason it is simulation-only
  std::int64_t tp = 1, dp = 1;        ///< that plan's degrees (when runnable)
  std::int64_t cp = 1;                ///< its context parallelism (every operator splits the sequence over one axis)
  std::int64_t ep = 1;                ///< its expert parallelism (MoE experts split over the data-parallel axes)
  int zeroStage = 1;                  ///< 3 when its data-parallel axis shards the weights (FSDP)
  bool sequenceParallel = false;
  std::string recomputePolicy = "none";  ///< its layer-level recompute: none, selective, full
  /// What reproduces it: the mesh shape, the price of memory the blocks were solved at, the residual
  /// stream's layout between layers (a layout index and its notation).
  std::vector<std::int64_t> meshShape;
  double memoryPrice = 0;
  int interfaceIndex = 0;
  std::string interfaceLayout;
  [[nodiscard]] Json toJson() const;
};

struct AutoParallelResult {
  OperatorPlan joint;                 ///< the joint solve
  OperatorPlan megatron;              ///< Megatron's split with layer-level recompute, same meshes and budget
  bool megatronFits = false;
  double solveSeconds = 0;            ///< wall time of the whole search
  std::int64_t blockSolves = 0;       ///< per-block dynamic programmes run
  std::int64_t conversionsCached = 0; ///< distinct layout conversions costed
  std::int64_t candidates = 0;        ///< (mesh, micro-batch, pipeline, price of memory, offload) combinations assembled
  /// Layouts (stages, copies, mesh, micro-batch) enumerated, pruned by rule (`colo-plan autoparallel
  /// --explain`, printed as the degree-level search prints its own), solved, and fitting the budget.
  SearchStats stats;
  [[nodiscard]] Json toJson() const;
};

/// Why `plan` is slower than `best`, worded as the degree-level search words its ranking ("+9.1% step:
/// collectives +0.412 s"; slowerReason in search.h) over the operator plans' step breakdowns; empty when
/// it is not slower.
[[nodiscard]] std::string slowerReason(const OperatorPlan& plan, const OperatorPlan& best);

/// A `colo.plan/1` holding a solved operator plan (`colo-plan autoparallel --out`): `operator_plan` is the
/// per-operator plan and what reproduces it; the degree fields are its Megatron-style equivalent when it
/// has one (then colo-run runs it), else Megatron's split from the same solve (colo-run refuses the file,
/// naming why). Predictions are the operator plan's. Errors: kBadInput when no degree form is valid.
[[nodiscard]] Result<Plan> operatorPlanFile(const Model& model, const ClusterSpec& cluster, const AutoParallelOptions& options,
                                            const AutoParallelResult& result);

/// Re-costs the operator plan a plan file holds, with every operator's strategy and recompute choice as
/// stored (edited or not): for an unedited file, the figures autoparallel printed. Errors: kBadInput
/// naming /operator_plan/... when a block, operator, role or layout does not fit the plan's model and
/// cluster.
[[nodiscard]] Result<OperatorPlan> evaluateOperatorPlan(const Plan& plan, const std::string& file = {});

/// A degree-level plan seen operator by operator: Megatron's split of its tp (inner axis), dp (outer), cp,
/// ep (MoE experts over the data-parallel ranks), sp, pp, micro-batch and first stage's recompute policy,
/// costed by the operator-level model (what colo-studio's Operators tab shows for a selected plan).
/// Errors: kBadInput for what the operator view does not hold (GPipe and zero-bubble schedules, ZeRO-2,
/// ZeRO-3 beside pp, cp or ep, experts over cp, folded over other ranks or not dividing dp, interleaved
/// chunks of unequal layers, parameter offload).
[[nodiscard]] Result<OperatorPlan> operatorView(const Plan& plan, double maxMemoryFraction = 0.95);

/// Whether the operator-level search tries, by default, `replicas` copies of a mesh of `shape` in each of
/// `pp` stages on `cluster` (docs/autoparallel.md, "Replicas"): always for one copy; for more, on clusters
/// of 32 nodes or more, a power of two of copies of a 2-D mesh of 2 to 8 whole nodes with a node on its
/// inner axis. `--replicas` tries what it is given instead.
[[nodiscard]] bool searchesReplicas(const ClusterSpec& cluster, std::int64_t pp, const std::vector<std::int64_t>& shape,
                                    std::int64_t replicas);

/// Solves the model on the cluster. Errors: kBadInput naming the option (no batch, a mesh that does not
/// fit the cluster, a precision the GPU lacks, a model with no transformer layer); kInfeasible when no
/// plan fits the budget (the message gives the least memory any plan needs); kCancelled.
[[nodiscard]] Result<AutoParallelResult> autoParallel(const Model& model, const ClusterSpec& cluster,
                                                      const AutoParallelOptions& options);

}  // namespace colo::planner
