// Ranking the costed configurations of the degree-level search and saying why: the reason each plan is
// slower than the best, the Pareto front of step time against memory, the closest rejected plans, and
// the binding constraint when nothing fits.
#include <algorithm>

#include "colo/core/units.h"
#include "colo/costmodel/collectives.h"
#include "colo/planner/baseline.h"
#include "search_parts.h"

namespace colo::planner::detail {
namespace {

// Why `c` ranks below `best`: its largest extra cost.
std::string compareReason(const Candidate& c, const Candidate& best, const ClusterSpec& cluster) {
  const auto& a = c.evaluation.time;
  const auto& b = best.evaluation.time;
  const std::vector<std::pair<std::string, double>> extra = {
      {"compute", a.compute - b.compute},     {"recompute", a.recompute - b.recompute},
      {"tensor-parallel comm", a.tpComm - b.tpComm}, {"context-parallel comm", a.cpComm - b.cpComm},
      {"expert all-to-all", a.epComm - b.epComm},    {"pipeline send/recv", a.ppComm - b.ppComm},
      {"data-parallel comm", a.dpComm - b.dpComm},   {"pipeline bubble", a.bubble - b.bubble},
      {"gradient accumulation", a.gradAccum - b.gradAccum}, {"optimizer", a.optimizer - b.optimizer}};
  std::string reason = slowerReason(c.evaluation.stepSeconds, best.evaluation.stepSeconds, extra);
  // A tie at the printed precision says what differs instead, so no two rows read the same.
  if (reason.empty()) {
    const double slower = c.evaluation.stepSeconds / best.evaluation.stepSeconds - 1;
    return "ties #1 within " + formatFixed(100 * std::max(slower, 0.0), 2) + "%: " + planDifferences(best.plan, c.plan);
  }
  const auto worst = std::max_element(extra.begin(), extra.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  if (worst->first == "tensor-parallel comm" &&
      costmodel::placeGroup(cluster, c.plan.parallel, costmodel::Dim::kTp).crossesNodes()) {
    reason += " (tp=" + std::to_string(c.plan.parallel.tp) + " crosses nodes)";
  }
  return reason;
}

}  // namespace

void rank(std::vector<Candidate>& all, const Space& space, const Enumeration& enumeration, SearchResult& result) {
  const auto& options = *space.options;
  const ClusterSpec& cluster = *space.cluster;
  const double budget = space.budget;
  const double leastStates = enumeration.leastStates;
  const std::string& leastStatesConfig = enumeration.leastStatesConfig;
  const SearchStats& st = result.stats;
  std::vector<Candidate*> fitting;
  std::vector<Candidate*> tooBig;
  for (auto& c : all) (c.fits ? fitting : tooBig).push_back(&c);
  std::sort(fitting.begin(), fitting.end(), [](const Candidate* a, const Candidate* b) {
    return a->evaluation.stepSeconds < b->evaluation.stepSeconds;
  });
  std::sort(tooBig.begin(), tooBig.end(), [](const Candidate* a, const Candidate* b) {
    return a->evaluation.peakMemoryBytes < b->evaluation.peakMemoryBytes;
  });
  for (std::size_t i = 0; i < fitting.size() && result.top.size() < options.topK; ++i) {
    Candidate c = *fitting[i];
    // The same settings reached twice (e.g. by two enumeration paths) are listed once.
    const bool repeated = std::any_of(result.top.begin(), result.top.end(), [&](const Candidate& listed) {
      return planDifferences(listed.plan, c.plan) == "identical";
    });
    if (repeated) continue;
    if (i == 0) {
      c.reason = "fastest that fits: " + formatFixed(100 * c.evaluation.mfu, 1) + "% MFU, bubble " +
                 formatFixed(100 * c.evaluation.bubbleFraction, 1) + "%, peak " + formatBytes(c.evaluation.peakMemoryBytes) +
                 " of a " + formatBytes(budget) + " budget";
    } else {
      c.reason = compareReason(c, *fitting[0], cluster);
    }
    result.top.push_back(std::move(c));
  }
  double lowest = std::numeric_limits<double>::max();
  for (const auto* c : fitting) {
    if (c->evaluation.peakMemoryBytes < lowest) {
      lowest = c->evaluation.peakMemoryBytes;
      Candidate p = *c;
      p.reason = "Pareto: no plan is both faster and smaller";
      result.pareto.push_back(std::move(p));
    }
  }
  for (std::size_t i = 0; i < tooBig.size() && i < options.topK; ++i) {
    Candidate c = *tooBig[i];
    const auto& stages = c.evaluation.stages;
    const auto worst = std::max_element(stages.begin(), stages.end(), [](const auto& a, const auto& b) {
      return a.memory.total() < b.memory.total();
    });
    const auto& m = worst->memory;
    c.reason = "needs " + formatBytes(m.total()) + " on stage " + std::to_string(worst->stage) + " > budget " +
               formatBytes(budget) + " (states " + formatBytes(m.weights + m.gradients + m.optimizer) + ", activations " +
               formatBytes(m.activations) + ")";
    result.rejected.push_back(std::move(c));
  }
  if (result.top.empty()) {
    if (!result.rejected.empty()) {
      const Candidate& closest = result.rejected.front();
      result.infeasibleReason = "no plan fits: the least memory any configuration needs is " +
                                formatBytes(closest.evaluation.peakMemoryBytes) + " per GPU (" + describe(closest.plan) +
                                ", recompute " + recomputeSummary(closest.plan) + "), against a budget of " +
                                formatBytes(budget) + " (" + formatFixed(100 * options.maxMemoryFraction, 0) + "% of " +
                                formatBytes(cluster.gpu.memoryBytes) + "); " + closest.reason;
    } else if (st.pruned.contains("memory lower bound: model states exceed the budget") && leastStates > 0) {
      result.infeasibleReason = "no plan fits: the model states alone need at least " + formatBytes(leastStates) +
                                " per GPU in the most sharded configuration (" + leastStatesConfig +
                                "), against a budget of " + formatBytes(budget) + " (" +
                                formatFixed(100 * options.maxMemoryFraction, 0) + "% of " +
                                formatBytes(cluster.gpu.memoryBytes) + "); add GPUs" +
                                (options.allowOffload ? "" : ", allow optimizer offload") + " or use GPUs with more memory";
    } else if (options.runnableOnly && st.pruned.contains(kNotRunnable)) {
      result.infeasibleReason = "no plan colo-run executes fits (" + std::to_string(st.pruned.at(kNotRunnable)) +
                                " configurations need what colo-run lacks, e.g. parameter offload, zero-bubble with ZeRO-2/3, "
                                "context parallelism with MoE or dropout); rank every plan with --any (colo-plan search) to plan for another tool";
    } else {
      std::string rules;
      for (const auto& [rule, count] : st.pruned) rules += (rules.empty() ? "" : "; ") + rule + ": " + std::to_string(count);
      result.infeasibleReason = "no configuration survived pruning (" + rules + ")";
    }
  }
}

}  // namespace colo::planner::detail

namespace colo::planner {

std::string slowerReason(double step, double bestStep, const std::vector<std::pair<std::string, double>>& extra) {
  if (extra.empty() || !(bestStep > 0)) return {};
  const auto* worst = &extra.front();
  for (const auto& d : extra) {
    if (d.second > worst->second) worst = &d;
  }
  const double slower = step / bestStep - 1;
  if (slower < 0.0005 || worst->second < 0.0005) return {};
  return "+" + formatFixed(100 * slower, 1) + "% step: " + worst->first + " +" + formatFixed(worst->second, 3) + " s";
}

}  // namespace colo::planner
