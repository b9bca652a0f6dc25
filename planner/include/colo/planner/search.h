#pragma once
/// \file
/// The plan search: every hybrid-parallel configuration of a model on a cluster for a given global batch
/// and sequence length, pruned by divisibility, memory lower bounds and dominance, costed by the cost
/// model, ranked by step time among those that fit, with a Pareto front of step time against memory.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "colo/core/cluster.h"
#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/model.h"
#include "colo/core/plan.h"
#include "colo/core/progress.h"
#include "colo/costmodel/cost_db.h"
#include "colo/costmodel/run_calibration.h"
#include "colo/costmodel/evaluator.h"

namespace colo::planner {

/// The training precision a user gets when they name none: bf16 where the GPU has a bf16 peak, else
/// fp16 (V100, T4: mixed precision with loss scaling, as Megatron-LM ran on them), else fp32.
[[nodiscard]] DType defaultPrecision(const GpuSpec& gpu);

struct SearchOptions {
  std::int64_t globalBatchSize = 0;   ///< samples per step (required)
  std::int64_t seqLen = 0;            ///< 0: the model's default
  /// Degrees or settings held fixed: keys tp, pp, dp, cp, ep, vpp, mbs, zero.
  std::map<std::string, std::int64_t> fixed;
  double maxMemoryFraction = 0.95;    ///< a plan fits when its peak is at most this share of GPU memory
  std::size_t topK = 10;
  DType precision = DType::kBf16;
  Optimizer optimizer = Optimizer::kAdamW;
  bool flashAttention = true;
  Execution execution;                ///< overlaps etc. for every candidate (flashAttention overrides its attention; its flashAttention2 names the fused kernels)
  /// execution.recomputeModules is the user's (--recompute-modules): selective recompute re-runs exactly
  /// those. Otherwise, when they are the default, the search's selective recompute of an MoE or
  /// latent-attention model adds Megatron-Core's output-discarding modules (layernorm, moe_act,
  /// mla_up_proj; not under runnableOnly).
  bool recomputeModulesChosen = false;
  bool allowZeroBubble = false;       ///< consider the zb schedule (not all frameworks run it)
  bool allowOffload = true;           ///< consider optimizer offload when nothing else fits
  /// fp8/fp4 plans under ZeRO 1/2 keep Transformer Engine's weights quantized (--fp8-param-gather), which
  /// holds and gathers no more than 16-bit weights; false: as execution.quantized_params says.
  bool proposeQuantizedWeights = true;
  /// Only plans colo-run executes (colo/core/runnable.h): no cp, ep, zero-bubble or offload. Errors
  /// with kBadInput when colo-run cannot train the model at all.
  bool runnableOnly = false;
  const costmodel::CostDatabase* costDb = nullptr;
  /// Scales fitted on the user's own runs of this cluster (colo-profile calibrate), applied to every
  /// candidate before it is ranked and checked against memory.
  const costmodel::RunCalibration* calibration = nullptr;
};

/// One costed configuration.
struct Candidate {
  Plan plan;
  costmodel::Evaluation evaluation;
  bool fits = false;
  std::string reason;  ///< why it ranks where it does, or why it was rejected
};

/// Why a plan of `step` seconds ranks below one of `bestStep`, as both searches word it: "+4.2% step:
/// recompute +0.512 s", the largest of `extra` (each part of the step: its seconds beyond the best plan's).
/// Empty when it is not slower by 0.05% or no part is 0.5 ms longer (a tie: say what differs instead).
[[nodiscard]] std::string slowerReason(double step, double bestStep, const std::vector<std::pair<std::string, double>>& extra);

/// What a search enumerated, pruned (by rule) and costed: the degree-level search's configurations, or
/// the operator-level search's layouts (stages, copies, mesh, micro-batch). Both print it alike.
struct SearchStats {
  std::int64_t generated = 0;                  ///< configurations enumerated
  std::map<std::string, std::int64_t> pruned;  ///< by rule
  std::int64_t evaluated = 0;                  ///< cost-model evaluations (several per configuration)
  std::int64_t costed = 0;                     ///< configurations costed
  std::int64_t feasible = 0;                   ///< of those, fitting the memory budget
  double seconds = 0;
  [[nodiscard]] std::int64_t prunedTotal() const;
  /// "pruned by rule" and a line per rule ("  12  more stages than layers"), as `--explain` prints it.
  [[nodiscard]] std::string prunedText() const;
  /// {generated, pruned, pruned_by_rule, evaluated, costed, feasible, search_time_s}
  [[nodiscard]] Json toJson() const;
};

struct SearchResult {
  std::vector<Candidate> top;     ///< best first; all fit
  std::vector<Candidate> pareto;  ///< fitting plans no other beats on both step time and peak memory
  std::vector<Candidate> rejected;  ///< the closest configurations that did not fit (for explanations)
  SearchStats stats;
  std::string infeasibleReason;   ///< set when nothing fits: the binding constraint
  [[nodiscard]] bool feasible() const { return !top.empty(); }
  [[nodiscard]] Json toJson() const;
};

/// Searches. Errors: kBadInput for impossible requests (a fixed degree that does not divide the GPUs,
/// unknown fixed keys, a global batch that no data-parallel degree divides). No fitting plan is not an
/// error: the result says why. Cancellation returns what was found so far.
[[nodiscard]] Result<SearchResult> search(const Model& model, const ClusterSpec& cluster, const SearchOptions& options,
                                          ProgressSink* progress = nullptr, const CancellationToken* cancel = nullptr);

/// Fills a plan's predictions and provenance from its evaluation, ready to save.
void annotate(Plan& plan, const costmodel::Evaluation& evaluation, const std::string& command,
              const std::string& costDbHash);

/// Parses "tp=8,pp=4,zero=1" into fixed settings. Errors: kBadInput naming the bad item.
[[nodiscard]] Result<std::map<std::string, std::int64_t>> parseFixed(const std::string& text);

}  // namespace colo::planner
