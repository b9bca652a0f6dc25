// The degree-level search: its parts (space and pruning, costing, ranking) composed, the --fix parser,
// plan annotation and the result's JSON.
#include "colo/planner/search.h"
#include "colo/core/rank_layout.h"
#include "colo/core/runnable.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>

#include "colo/core/units.h"
#include "colo/core/version.h"
#include "colo/costmodel/collectives.h"
#include "colo/costmodel/error_band.h"
#include "colo/planner/baseline.h"
#include "colo/planner/partition.h"
#include "search_parts.h"

namespace colo::planner {

using detail::kFixedKeys;
using detail::kLayouts;
DType defaultPrecision(const GpuSpec& gpu) {
  for (const DType d : {DType::kBf16, DType::kFp16}) {
    if (gpu.hasPeak(d)) return d;
  }
  return DType::kFp32;
}

Result<std::map<std::string, std::int64_t>> parseFixed(const std::string& text) {
  std::map<std::string, std::int64_t> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto eq = item.find('=');
    if (eq == std::string::npos) return fail(Error::badInput("--fix: expected key=value, got \"" + item + "\""));
    const std::string key = item.substr(0, eq);
    if (std::find(kFixedKeys.begin(), kFixedKeys.end(), key) == kFixedKeys.end()) {
      return fail(Error::badInput("--fix: unknown setting \"" + key + "\" (one of tp, pp, dp, cp, ep, etp, vpp, mbs, zero)"));
    }
    const std::string value = item.substr(eq + 1);
    char* end = nullptr;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < (key == "zero" ? 0 : 1) || (key == "zero" && v > 3)) {
      return fail(Error::badInput("--fix: " + key + " must be " + (key == "zero" ? "0-3" : "a positive integer") +
                                  ", got \"" + value + "\""));
    }
    if (out.contains(key)) return fail(Error::badInput("--fix: " + key + " is given twice in \"" + text + "\""));
    out[key] = v;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void annotate(Plan& plan, const costmodel::Evaluation& ev, const std::string& command, const std::string& costDbHash) {
  plan.predictions.stepTimeSeconds = ev.stepSeconds;
  plan.predictions.tokensPerSecond = ev.tokensPerSecond;
  plan.predictions.modelTflopsPerGpu = ev.modelTflopsPerGpu;
  plan.predictions.hardwareTflopsPerGpu = ev.hardwareTflopsPerGpu;
  plan.predictions.mfu = ev.mfu;
  plan.predictions.peakMemoryBytes = ev.peakMemoryBytes;
  plan.predictions.fits = ev.fits;
  plan.predictions.bubbleFraction = ev.bubbleFraction;
  plan.predictions.breakdown = ev.toJson()["breakdown"];
  plan.provenance.toolVersion = kVersion;
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  plan.provenance.createdAt = stamp;
  plan.provenance.modelHash = contentHash(plan.model.toJson());
  plan.provenance.clusterHash = contentHash(clusterToJson(plan.cluster));
  plan.provenance.costDbHash = costDbHash;
  plan.provenance.command = command;
}

Result<SearchResult> search(const Model& model, const ClusterSpec& cluster, const SearchOptions& options,
                            ProgressSink* progress, const CancellationToken* cancel) {
  const auto started = std::chrono::steady_clock::now();
  auto space = detail::makeSpace(model, cluster, options);
  if (!space) return fail(space.error());
  auto evaluator = options.costDb ? costmodel::Evaluator::create(model, cluster, space->seq, *options.costDb)
                                  : costmodel::Evaluator::create(model, cluster, space->seq);
  if (!evaluator) return fail(evaluator.error());
  if (options.runnableOnly) {
    // The model itself: colo-run's list names it before any layout question.
    if (auto ok = checkRunnableModel(model); !ok) return fail(Error::badInput("--runnable: " + ok.error().message));
  }
  SearchResult result;
  SearchStats& st = result.stats;
  const detail::Enumeration enumeration = detail::enumerate(*space, st);

  // Cost every survivor.
  Plan base;
  base.model = model;
  base.cluster = cluster;
  base.seqLen = space->seq;
  base.globalBatchSize = space->gbs;
  base.precision = options.precision;
  base.optimizer = options.optimizer;
  base.execution = options.execution;
  base.execution.flashAttention = options.flashAttention;
  base.execution.flashAttention2 = options.flashAttention && options.execution.flashAttention2;
  // A plan's bf16 gradient buffer (--from-plan) exists only where its rules hold (plan.cpp): searched
  // at another precision, the gradients are the precision's own.
  const auto& x = base.execution;
  if (x.gradReduceBf16 && ((base.precision != DType::kBf16 && !quantizedGemms(base.precision)) || x.fp32Params ||
                           (x.gradAccumulation != GradAccumulation::kFused && x.gradAccumulation != GradAccumulation::kMainGrad))) {
    base.execution.gradReduceBf16 = false;
  }
  const detail::EvaluateFn evaluate = [&](const Plan& p) {
    ++st.evaluated;
    auto ev = evaluator->evaluate(p);
    if (ev && options.calibration) options.calibration->apply(*ev);
    return ev;
  };
  const auto& survivors = enumeration.survivors;
  std::vector<Candidate> all;
  all.reserve(survivors.size());
  for (std::size_t i = 0; i < survivors.size(); ++i) {
    if (cancel && cancel->cancelled()) break;
    if (progress && i % 64 == 0) {
      progress->progress(static_cast<double>(i) / static_cast<double>(survivors.size()), "costing configurations");
    }
    auto cand = detail::costConfig(*space, survivors[i], base, evaluate);
    if (!cand) continue;
    if (options.runnableOnly && !runnable(cand->plan)) {
      ++st.pruned[detail::kNotRunnable];
      continue;
    }
    cand->plan.name = model.name() + " " + detail::describe(cand->plan);
    ++st.costed;
    if (cand->fits) ++st.feasible;
    all.push_back(std::move(*cand));
  }
  if (progress) progress->progress(1.0, "ranking");
  detail::rank(all, *space, enumeration, result);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

Json SearchResult::toJson() const {
  auto summary = [](const Candidate& c) {
    const auto& p = c.plan;
    std::int64_t recomputed = 0;
    for (const auto& s : p.stages) recomputed += s.recomputeLayers;
    return Json{{"tp", p.parallel.tp},
                {"rank_order", rankOrderText(p.parallel)},
                {"pp", p.parallel.pp},
                {"dp", p.parallel.dp},
                {"cp", p.parallel.cp},
                {"cp_exchange", cpExchangeLabel(p.execution.cpCommType, p.execution.hierarchicalCpSizes)},
                {"ep", p.parallel.ep},
                {"expert_tp", p.parallel.expertTp()},
                {"vpp", p.parallel.virtualStages},
                {"sequence_parallel", p.parallel.sequenceParallel},
                {"mbs", p.microBatchSize},
                {"zero", p.zeroStage},
                {"schedule", toString(p.schedule)},
                {"recompute", recomputeSummary(p)},
                {"recomputed_layers", recomputed},
                {"optimizer_offload", p.offload.optimizerFraction},
                {"activation_offload_layers", p.offload.activationLayers},
                {"stage_layers", [&] {
                   Json a = Json::array();
                   for (const auto& s : p.stages) a.push_back(s.layers);
                   return a;
                 }()},
                {"step_time_s", c.evaluation.stepSeconds},
                {"tokens_per_s", c.evaluation.tokensPerSecond},
                {"mfu", c.evaluation.mfu},
                {"peak_memory_bytes", c.evaluation.peakMemoryBytes},
                {"fits", c.fits},
                {"error_band", costmodel::bandsToJson(costmodel::bandsOf(p, c.evaluation), c.evaluation)},
                {"reason", c.reason}};
  };
  Json out;
  if (!top.empty()) {
    Json best = top.front().evaluation.toJson();
    best["error_band"] = costmodel::bandsToJson(costmodel::bandsOf(top.front().plan, top.front().evaluation),
                                                top.front().evaluation);
    best["plan"] = planToJson(top.front().plan);
    out["best"] = best;
  } else {
    out["best"] = nullptr;
    out["infeasible_reason"] = infeasibleReason;
  }
  Json candidates = Json::array();
  for (const auto& c : top) candidates.push_back(summary(c));
  out["candidates"] = candidates;
  Json pf = Json::array();
  for (const auto& c : pareto) pf.push_back(summary(c));
  out["pareto"] = pf;
  Json rej = Json::array();
  for (const auto& c : rejected) rej.push_back(summary(c));
  out["rejected"] = rej;
  out["stats"] = stats.toJson();
  return out;
}

std::int64_t SearchStats::prunedTotal() const {
  std::int64_t n = 0;
  for (const auto& [rule, count] : pruned) n += count;
  return n;
}

std::string SearchStats::prunedText() const {
  std::string out = "pruned by rule\n";
  for (const auto& [rule, count] : pruned) out += "  " + std::to_string(count) + "  " + rule + "\n";
  return out;
}

Json SearchStats::toJson() const {
  Json rules = Json::object();
  for (const auto& [rule, count] : pruned) rules[rule] = count;
  return {{"generated", generated}, {"pruned", prunedTotal()}, {"pruned_by_rule", rules}, {"evaluated", evaluated},
          {"costed", costed},       {"feasible", feasible},    {"search_time_s", seconds}};
}

}  // namespace colo::planner
