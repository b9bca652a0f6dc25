#pragma once
// Private: the parts of the degree-level search that search() composes, each in its own file: the space
// of configurations and its pruning rules (search_space.cpp), costing one configuration with its stage,
// recompute and offload decisions (search_costing.cpp), and ranking with explanations
// (search_ranking.cpp). planner/README.md, "How a search runs".

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "colo/core/cluster.h"
#include "colo/core/model.h"
#include "colo/core/plan.h"
#include "colo/costmodel/evaluator.h"
#include "colo/planner/search.h"

namespace colo::planner::detail {

inline constexpr const char* kNotRunnable = "colo-run cannot execute it (--runnable)";
/// The settings --fix may hold.
extern const std::vector<std::string> kFixedKeys;
/// Rank layouts, innermost first.
extern const std::vector<std::vector<std::string>> kLayouts;

/// One point of the space.
struct Config {
  std::int64_t tp, cp, pp, dp, ep, mbs, vpp;
  int zero;
  Schedule schedule;
  int layout;            // index into kLayouts
  std::int64_t etp = 0;  // expert tensor parallelism (0: tp)
};


/// "tp8 pp16 dp8 mbs1 zero1", with what else differs from the defaults.
[[nodiscard]] std::string describe(const Plan& p);

/// What enumeration, costing and ranking need to know about the model, the cluster and the options.
struct Space {
  const Model* model = nullptr;
  const ClusterSpec* cluster = nullptr;
  const SearchOptions* options = nullptr;
  std::int64_t gpus = 0, layers = 0, heads = 0, kvHeads = 0, experts = 0, seq = 0, gbs = 0;
  double budget = 0;
  // For the memory lower bound: parameters and bytes per parameter of each model state.
  double params = 0, weightBytes = 0, gradBytes = 0, optimizerBytes = 0;
  /// The value --fix gives `key`, if any.
  [[nodiscard]] std::optional<std::int64_t> fixed(const char* key) const;
};

/// Checks the options against the model and cluster. Errors: kBadInput naming the option.
[[nodiscard]] Result<Space> makeSpace(const Model& model, const ClusterSpec& cluster, const SearchOptions& options);

/// Every configuration the pruning rules let through, each pruned one counted by its rule.
struct Enumeration {
  std::vector<Config> survivors;
  double leastStates = std::numeric_limits<double>::max();  // the least model states any configuration needs
  std::string leastStatesConfig;
};
[[nodiscard]] Enumeration enumerate(const Space& space, SearchStats& stats);
/// The rule that prunes `c` (its name, as --explain counts it), or null when `c` survives; `zb`: the
/// enumeration asked for the zero-bubble schedule; `states` receives its model states per GPU when the
/// memory lower bound is reached.
[[nodiscard]] const char* pruneRule(const Space& space, const Config& c, bool zb, double& states);

/// The plan a configuration describes, with uniform stages and no recompute.
[[nodiscard]] Plan planOf(const Space& space, const Config& c, const Plan& base);

/// One configuration costed: layers balanced over stages, then per stage the cheapest recompute that
/// fits, then offload as a last resort. Nullopt when the evaluator refuses it.
using EvaluateFn = std::function<Result<costmodel::Evaluation>(const Plan&)>;
[[nodiscard]] std::optional<Candidate> costConfig(const Space& space, const Config& c, const Plan& base, const EvaluateFn& evaluate);

/// The candidates ranked into `result`: the fastest that fit with reasons, the Pareto front, the closest
/// rejected, and why nothing fits when nothing does.
void rank(std::vector<Candidate>& all, const Space& space, const Enumeration& enumeration, SearchResult& result);

}  // namespace colo::planner::detail
