#pragma once
// Private: what the operator-level search (autoparallel.cpp), its step assembly
// (autoparallel_assembly.cpp) and its plan files (autoparallel_plan_file.cpp) share: the solvers of one
// mesh and micro-batch, a solution (every block solved at one interface layout), the search context,
// an assembled step, and the Search itself.

#include <cstdint>
#include <limits>
#include <array>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "autoparallel_detail.h"
#include "colo/planner/space.h"
#include "colo/costmodel/hardware.h"

namespace colo::planner::detail {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Everything solved for one stage mesh, micro-batch and number of replicas of the mesh.
struct MeshSolvers {
  // Shared by the solvers of every micro-batch and replica count on the same mesh shape: conversions
  // depend on the mesh and the tensor alone.
  std::shared_ptr<DeviceMesh> mesh;
  std::shared_ptr<LayoutConverter> converter;
  std::vector<std::unique_ptr<BlockSolver>> layers;  // per layer class
  std::unique_ptr<BlockSolver> embedding, head;
  std::int64_t samples = 1;
  std::int64_t replicas = 1;
  /// NCCL's buffers for the mesh axes' groups and the replicas' group (the evaluator's communicators).
  double communicatorBytes = 0;
  /// An average layer's kernels and in-unit collectives at each unit's fastest strategy, per micro-batch:
  /// no plan on this mesh runs a layer quicker (layout conversions, recompute and the host floor only add).
  double leastLayerSeconds = 0;
  // Memos of what assembling a step asks again for every chunk count and offload fraction of the same
  // solution: the activation hop between stages per pipeline degree, and the last gradient reductions
  // costed (one per stage kind). A MeshSolvers belongs to one Search, run on one thread.
  mutable std::map<std::int64_t, double> hopSeconds;
  struct SyncMemo {
    std::array<double, 4> key{-1.0, -1.0, -1.0, -1.0};  // bytes over each axis, held bytes (with replicas)
    double seconds = 0;
  };
  mutable std::array<SyncMemo, 4> lastSync;
};

// One way to run every block, at one interface layout.
struct Solution {
  std::vector<BlockPlan> layers;  // per class, exit converted back to the entry
  std::vector<double> backConversion;  // per class: exit -> entry, forward and backward
  BlockPlan embedding, head;
  double embeddingConversion = 0;
  SolveWeights weights;
  std::string recompute;
  bool megatron = false;
  // Buffers outside the kept activations, per micro-batch, as the evaluator counts them
  // (measureBuffers): the sequence gathered for feature-split operators (two of them), the largest
  // layer's weights gathered where they are sharded (two), the 16-bit logits and their gradient beside
  // the loss's fp32 upcast (last stage).
  double gatherBuffers = 0, gatheredWeights = 0, logitCopies = 0;
  // A tied head: the share of the head's states, parameters and gradient reductions that is its copy
  // of the embedding's weight, where the embedding splits that weight alike; a stage holding both keeps
  // one (Megatron on one stage). 0 where the layouts differ (the head keeps its own copy) or untied.
  double tiedShare = 0;
  bool dataParallel = false;  // the layers' input is split by batch over a mesh axis (gradient buckets)
};

struct Context {
  const ClusterSpec* cluster = nullptr;
  costmodel::DeviceModel device;
  AutoParallelOptions options;
  std::int64_t seqLen = 0, hidden = 0, numLayers = 0;
  double budget = 0;
  double stepBytesPerParam = 0;  // optimizer step HBM traffic per parameter
  double gradientBytes = 2;      // a gradient element as the reductions move it (the training precision's width)
  double weightBytes = 2;        // a weight element as the kernels read it (the 16-bit copy; what weight offload moves)
  double gradBufferBytes = 0;    // the main-gradient buffer's bytes per held parameter, zeroed and scaled each step
  double flopsPerSample = 0;     // GEMM FLOPs of one sample, forward and backward
  double peakRate = 0;           // FLOP/s a large GEMM reaches
  double hostSecondsPerOp = 0;   // the host floor (0 on a CPU, whose ops are its own kernels)
  std::vector<LayerClass> classes;
  const Model* model = nullptr;  // outlives the search (the caller's)
  /// classesBefore[k][l]: layers of class k among the model's first l (a stage's mix of classes).
  std::vector<std::vector<std::int64_t>> classesBefore;
  Block embedding, head;
};

// The best plan with the layers of `solution` for (pp, micro-batches), with the offload fractions.
struct Assembly {
  double step = kInf, memory = kInf;
  double deviceMemory = kInf;  // the fullest stage on the GPU, whether or not the host holds what it offloads
  double compute = 0, comm = 0, recompute = 0, bubble = 0, sync = 0, optimizer = 0, offload = 0;
  double states = 0, activations = 0, buffers = 0;
  double alpha = 0, beta = 0, gamma = 0;  // offloaded: activations, optimizer states, layers' weights
  std::vector<std::int64_t> stageLayers;  ///< layers of each model chunk, stage by stage (chunk v of stage i at v*pp + i)
};

/// Sets `sol`'s buffers from the strategies its blocks chose (docs/autoparallel.md, "Memory").
void measureBuffers(const Context& c, const MeshSolvers& ms, Solution& sol);
/// NCCL's buffers for `ms`'s mesh axes and replicas (set once per MeshSolvers).
[[nodiscard]] double meshCommunicatorBytes(const Context& c, const MeshSolvers& ms);
/// NCCL's buffers for the pipeline's group of `pp` stages of `ms`.
[[nodiscard]] double pipelineCommunicatorBytes(const Context& c, const MeshSolvers& ms, std::int64_t pp);

/// The step of `solution` with `pp` stages of `vpp` model chunks each (1: 1F1B, more: Megatron's
/// interleaved 1F1B) and `microBatches` per replica (`ms.replicas` data-parallel copies of the mesh in
/// each stage), offloading `alpha` of each layer's kept activations, `beta` of the optimizer states and
/// `gamma` of the layers' weights (docs/autoparallel.md, "Assembly", "Offload" and "Replicas").
/// `fixedStages` (layers of each chunk, as stageLayers) costs that split instead of choosing one.
[[nodiscard]] Assembly assemble(const Context& c, const MeshSolvers& ms, const Solution& sol, std::int64_t pp,
                                std::int64_t microBatches, double alpha, double beta, std::int64_t vpp = 1,
                                const std::vector<std::int64_t>* fixedStages = nullptr, double gamma = 0.0);
/// assemble(), for a caller that assembles one solution (same mesh, stages, micro-batches, chunks and
/// fixed split) at several offload shares: the pipeline of the last activations' and weights' shares is
/// kept, and only the stages' ends (gradient reduction, optimizer, what they hold) are formed again for
/// another share of the optimizer states. The same figures as assemble(), bit for bit.
class AssemblyMemo {
 public:
  AssemblyMemo();
  ~AssemblyMemo();
  AssemblyMemo(const AssemblyMemo&) = delete;
  AssemblyMemo& operator=(const AssemblyMemo&) = delete;
  [[nodiscard]] Assembly operator()(const Context& c, const MeshSolvers& ms, const Solution& sol, std::int64_t pp,
                                    std::int64_t microBatches, double alpha, double beta, std::int64_t vpp,
                                    const std::vector<std::int64_t>* fixedStages, double gamma);
  struct Frame;

 private:
  std::unique_ptr<Frame> m_frame;
};
/// Layers of each of the pp x vpp model chunks (chunk v of stage i at v*pp + i). Under 1F1B the first and
/// last stages give layers up to their embedding (`firstSeconds` a micro-batch) and head (`lastSeconds`)
/// so the slowest stage is as fast as it can be (docs/autoparallel.md, "Assembly"); the interleaved
/// schedule keeps equal chunks.
[[nodiscard]] std::vector<std::int64_t> stageLayerCounts(std::int64_t layers, std::int64_t pp, std::int64_t vpp,
                                                         double layerSeconds, double firstSeconds, double lastSeconds);

/// The degree-level plan (tp, cp, dp, ep, pp, schedule, ZeRO, recompute, stages, micro-batch; the
/// optimizer's offload share) of an operator plan's degree fields, as a plan file stores it beside the
/// operator plan. Errors: kBadInput when that plan is not valid.
[[nodiscard]] Result<Plan> degreeForm(const Model& model, const ClusterSpec& cluster, const AutoParallelOptions& options,
                                      const OperatorPlan& degrees);

/// The model expanded and checked for a search. Errors: kBadInput naming the option.
[[nodiscard]] Result<Context> makeContext(const Model& model, const ClusterSpec& cluster, const AutoParallelOptions& options);

class Search {
 public:
  Search(Context context) : m_c(std::move(context)) {}

  Result<AutoParallelResult> run();
  /// Re-costs a stored operator plan: its blocks solved with each unit's strategy and recompute choice
  /// forced, at its price of memory, assembled with its offload fractions.
  Result<OperatorPlan> reproduce(const Json& stored, const std::string& file);
  /// The blocks solved at one interface layout with the weights' filters (a stored plan's strategies).
  Result<Solution> solveFixed(const MeshSolvers& ms, const SolveWeights& w, Layout entry);
  /// Megatron's split on one mesh with one rule and layer-level recompute mode, assembled as is (with
  /// `stages`, the layers of each chunk, when given).
  Result<OperatorPlan> megatronAt(const std::vector<std::int64_t>& shape, const MegatronRule& rule, RecomputeMode mode,
                                  std::int64_t pp, std::int64_t samples, std::int64_t vpp = 1,
                                  const std::vector<std::int64_t>& stages = {}, std::int64_t replicas = 1);

 private:
  struct Best {
    Assembly assembly;
    const MeshSolvers* solvers = nullptr;
    Solution solution;
    std::int64_t pp = 1, microBatches = 1, vpp = 1, replicas = 1;
  };
  struct Combo {
    std::int64_t pp = 1;
    std::vector<std::int64_t> shape;
    std::int64_t samples = 1, microBatches = 1;  // micro-batches per replica
    double bound = 0;  // seconds no plan of this combination beats
    double slots = 0;  // layer-times per stage the pipeline takes: micro-batches + bubble
    std::int64_t replicas = 1;
  };
  /// Every layout worth solving, best bound first; what is left out is counted in m_stats by rule.
  [[nodiscard]] std::vector<Combo> combos();
  /// The data-parallel replica counts tried with `pp` stages (options.replicas, or the default rule).
  [[nodiscard]] std::vector<std::int64_t> replicaCounts(std::int64_t pp) const;
  /// False when no price of memory fits (larger micro-batches on the layout need not be tried); true
  /// also when the layout was left because it cannot beat the best plan. `fitted` says whether a plan fits.
  bool solveJoint(const Combo& k, MeshSolvers& ms, bool& fitted);
  /// The residual stream's layouts a block may be entered in on `ms`'s mesh.
  std::vector<Layout> entryLayouts(const MeshSolvers& ms) const;
  /// Solves and assembles `k` at one price of memory: whether a plan fits with the layers' weights on
  /// the GPU (plans that fit only by offloading weights are kept too, and set m_weightsOffloadedFit).
  bool probeJoint(const Combo& k, MeshSolvers& ms, double lambda, Best& mine, double* fastest);
  void refineBest();
  void laterAtHigherPrices(const Combo& k, const Best& mine, std::size_t from, double quickest);
  void offloadAtHigherPrices();
  /// Whether one of Megatron's plans on `k` fits.
  bool solveMegatron(const Combo& k, MeshSolvers& ms);
  MeshSolvers& solversFor(const std::vector<std::int64_t>& shape, std::int64_t samples, std::int64_t replicas = 1);
  std::vector<Solution> solve(const MeshSolvers& ms, const SolveWeights& weights, const std::string& recompute, bool megatron);
  bool consider(const MeshSolvers& ms, const Solution& sol, const Combo& k, Best& best, Best& leanest, double* fastest = nullptr);
  struct Assembler;
  /// The offload fractions for a solution that does not fit without them: the activations' and optimizer
  /// states', and where those do not fit the least quarter of the layers' weights. Whether a plan fits
  /// with the weights on the GPU; sets m_weightsOffloadedFit when one fits only with some of them off.
  bool offloadShares(const Assembler& at, const Assembly& plain, Best& best);
  OperatorPlan report(const Best& best, const std::string& method) const;
  /// Seconds to turn a block's `exit` layout into `entry` forward and the gradient back backward.
  [[nodiscard]] double boundarySeconds(const MeshSolvers& ms, Layout exit, Layout entry, const TensorDims& dims) const;
  /// A layer class's exit cost for BlockSolver::solve: converting its exit back to its entry (layers
  /// follow layers), so that the solve describes only the plan each entry uses.
  [[nodiscard]] BlockSolver::ExitCost backToEntry(const MeshSolvers& ms, std::size_t k) const {
    return [this, &ms, k](Layout entry, Layout exit) { return boundarySeconds(ms, exit, entry, m_c.classes[k].block.input); };
  }
  /// Any exit at no cost (the head, whose output is the loss).
  static double anyExit(Layout, Layout) { return 0.0; }
  /// Of the embedding's `plans`, the cheapest once its output is converted to `entry`, into `sol`.
  void chooseEmbedding(const std::vector<BlockPlan>& plans, const MeshSolvers& ms, Layout entry, Solution& sol) const;

  Context m_c;
  std::map<std::tuple<std::vector<std::int64_t>, std::int64_t, std::int64_t>, std::unique_ptr<MeshSolvers>> m_solvers;
  std::int64_t m_blockSolves = 0, m_candidates = 0;
  SearchStats m_stats;
  std::vector<double> m_lambdas;
  const std::vector<MegatronRule>* m_onlyRules = nullptr;  // megatronAt: the one rule and mode to solve
  RecomputeMode m_onlyMode = RecomputeMode::kNone;
  std::vector<std::int64_t> m_onlyChunks;  // megatronAt: the one chunk count to assemble
  std::vector<std::int64_t> m_fixedStages;  // megatronAt, reproduce: the plan's own layers per chunk (empty: choose)
  Best m_joint, m_jointLean, m_megatron, m_megatronLean;
  // A combination whose budget lies between two prices of the grid, and its best fitting step.
  struct Bracket {
    Combo combo;
    double fails = 0, fits = 0;
    double step = 0;
  };
  std::vector<Bracket> m_brackets;
  // A combination whose best plan offloads, the first price of the grid above those tried for it, and
  // its quickest plan without offload at the price below.
  std::vector<std::tuple<Combo, std::size_t, double>> m_offloaded;
  bool m_weightsOffloadedFit = false;  // the last probe fitted a plan only by offloading weights
  bool m_askWeightsFit = false;        // the probe must learn whether any weight share fits, however slow
};


}  // namespace colo::planner::detail
