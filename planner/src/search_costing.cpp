// Costing one configuration of the degree-level search: the evaluator's prediction, layers rebalanced
// over stages, per stage the cheapest recompute that fits (or, at pp 1, activation offload where it is
// faster), and offload as the last resort.
#include <algorithm>

#include "colo/costmodel/collectives.h"
#include "colo/planner/partition.h"
#include "search_parts.h"

namespace colo::planner::detail {

Plan planOf(const Space& space, const Config& c, const Plan& base) {
  const std::int64_t layers = space.layers;
  Plan p = base;
  p.parallel.tp = c.tp;
  p.parallel.cp = c.cp;
  p.parallel.pp = c.pp;
  p.parallel.dp = c.dp;
  p.parallel.ep = c.ep;
  p.parallel.etp = c.etp;
  p.parallel.sequenceParallel = c.tp > 1;  // dominance: SP never costs time and saves memory
  p.parallel.virtualStages = c.vpp;
  p.parallel.rankOrder = kLayouts[static_cast<std::size_t>(c.layout)];
  p.schedule = c.schedule;
  p.microBatchSize = c.mbs;
  p.zeroStage = c.zero;
  p.stages = uniformStages(layers, c.pp * c.vpp, RecomputePolicy::kNone);
  // The base's context-parallel exchange (a plan of the user's, --from-plan) where it holds at these
  // degrees, else the ring: a2a needs each rank's heads to divide over cp, a2a+p2p sizes that multiply
  // to it.
  const auto& sizes = p.execution.hierarchicalCpSizes;
  const std::int64_t tpHeads = space.heads / std::max<std::int64_t>(1, c.tp), tpKv = space.kvHeads / std::max<std::int64_t>(1, c.tp);
  auto headsSplit = [&](std::int64_t n) { return n >= 1 && tpHeads % n == 0 && (tpKv <= 0 || tpKv % n == 0); };
  bool holds = c.cp > 1;
  if (p.execution.cpCommType == CpCommType::kAllToAll) holds = holds && headsSplit(c.cp);
  if (p.execution.cpCommType == CpCommType::kA2aP2p) {
    holds = holds && sizes.size() == 2 && sizes[0] >= 1 && c.cp % sizes[0] == 0 && c.cp / sizes[0] == sizes[1] && headsSplit(sizes[0]);
  }
  if (!holds) {
    p.execution.cpCommType = CpCommType::kP2p;
    p.execution.hierarchicalCpSizes.clear();
  }
  // Transformer Engine's quantized weights (Megatron's --fp8-param-gather) hold fewer bytes and gather
  // fewer than 16-bit weights with TE's cached copy, wherever Megatron allows them: fp8 or fp4 through
  // TE under the distributed optimizer (docs/costmodel.md, "Transformer Engine's quantized weights").
  const bool wanted = p.execution.quantizedParams || space.options->proposeQuantizedWeights;
  p.execution.quantizedParams = wanted && !quantizedWeightsRefusal(p);
  return p;
}

namespace {

// Under context parallelism, the exchange of the frameworks that run it (Megatron-Core's
// --cp-comm-type): the p2p ring (the default), all-to-alls when each rank's heads divide over cp, and
// a2a+p2p with the all-to-alls inside a node when the cp group spans nodes. `p` and `e0` replaced by the
// fastest that fits as well (or takes no more memory) and is at least 1% faster than the ring: the ring
// is the frameworks' default and what colo-run executes, so another exchange must pay for the change.
void chooseCpExchange(const Space& space, Plan& p, costmodel::Evaluation& e0, const EvaluateFn& evaluate) {
  // Only from the ring, and not where the plans must run on colo-run (whose cp is the ring) or where
  // the user's own plan (--from-plan) named its exchange.
  if (p.execution.cpCommType != CpCommType::kP2p || space.options->runnableOnly) return;
  const auto group = costmodel::placeGroup(p.cluster, p.parallel, costmodel::Dim::kCp);
  std::vector<std::pair<CpCommType, std::vector<std::int64_t>>> variants{{CpCommType::kAllToAll, {}}};
  if (group.perNode > 1 && group.perNode < p.parallel.cp && p.parallel.cp % group.perNode == 0) {
    variants.push_back({CpCommType::kA2aP2p, {group.perNode, p.parallel.cp / group.perNode}});
  }
  // Each variant differs from the ring in the exchange alone: it is tried on `p` itself (no copy of the
  // plan per variant) and `p` ends with the exchange chosen.
  CpCommType chosen = p.execution.cpCommType;
  std::vector<std::int64_t> chosenSizes = p.execution.hierarchicalCpSizes;
  for (const auto& [type, sizes] : variants) {
    p.execution.cpCommType = type;
    p.execution.hierarchicalCpSizes = sizes;
    if (!validatePlan(p)) continue;
    auto e = evaluate(p);
    if (!e || !(e->stepSeconds < 0.99 * e0.stepSeconds)) continue;
    if (e->peakMemoryBytes > space.budget && e->peakMemoryBytes > e0.peakMemoryBytes) continue;
    chosen = type;
    chosenSizes = sizes;
    e0 = std::move(*e);
  }
  p.execution.cpCommType = chosen;
  p.execution.hierarchicalCpSizes = std::move(chosenSizes);
}

// Non-uniform stages: per-stage time balanced (the first holds the embedding, the last the head) within
// each stage's memory cap; `p` and `e0` replaced when that is faster.
void balanceStages(const Space& space, Plan& p, costmodel::Evaluation& e0, const EvaluateFn& evaluate) {
  const std::int64_t layers = space.layers;
  const auto& stages = e0.stages;
  const std::size_t mid = stages.size() / 2;
  const double perLayer = (stages[mid].forwardSeconds + stages[mid].backwardSeconds) / static_cast<double>(stages[mid].layers);
  std::vector<double> extra;
  std::vector<std::int64_t> maxLayers;
  // Memory caps: a stage's per-layer share of its states and activations (embedding and head counted
  // in, so the caps are conservative) against what the budget leaves after buffers and context.
  for (const auto& s : stages) {
    extra.push_back(std::max(0.0, s.forwardSeconds + s.backwardSeconds - perLayer * static_cast<double>(s.layers)));
    const auto& m = s.memory;
    const double perLayerBytes = (m.weights + m.gradients + m.optimizer + m.activations) / static_cast<double>(s.layers);
    const double room = space.budget - m.buffers - m.allocator - m.context;
    maxLayers.push_back(perLayerBytes > 0 ? std::max<std::int64_t>(1, static_cast<std::int64_t>(room / perLayerBytes)) : layers);
  }
  std::int64_t capacity = 0;
  for (const auto n : maxLayers) capacity += n;
  if (capacity < layers) std::fill(maxLayers.begin(), maxLayers.end(), layers);  // recompute will have to make room
  if (auto counts = partitionLayers(layers, perLayer, extra, maxLayers)) {
    std::vector<StagePlan> balanced;
    for (const auto n : *counts) balanced.push_back(StagePlan{n, RecomputePolicy::kNone, 0});
    Plan q = p;
    q.stages = balanced;
    if (auto e = evaluate(q); e && e->stepSeconds < e0.stepSeconds) {
      p = q;
      e0 = std::move(*e);
    }
  }
}

// Megatron-Core's selective recompute is one setting for every layer (it takes no layer count): once a
// stage recomputes selectively, every layer that is not fully recomputed does.
void selectiveEverywhere(Plan& q) {
  if (!recomputesSelectively(q)) return;
  for (auto& st : q.stages) {
    if (st.recompute != RecomputePolicy::kFull || st.recomputeLayers == 0) st = StagePlan{st.layers, RecomputePolicy::kSelective, st.layers};
  }
}

// Per stage, the cheapest recompute policy and layer count that fits (from three evaluations), then
// layers added until the plan fits. False when it does not fit; `out` holds the last evaluation.
// `known`, when given, is q's own evaluation (the evaluator is a pure function of the plan, so it is
// not formed again).
bool recomputeToFit(Plan& q, costmodel::Evaluation& out, double budget, const EvaluateFn& evaluate,
                    const costmodel::Evaluation* known = nullptr) {
  // Every stage selective, then every stage full: q's own stages changed and put back (no copy of the
  // plan for each).
  auto none = known ? Result<costmodel::Evaluation>(*known) : evaluate(q);
  // With modules other than the attention core, which only Megatron-Core runs, selective recompute
  // covers every layer not fully recomputed, as there (selectiveEverywhere).
  const bool wholeSelective = !q.execution.recomputeModules.isDefault();
  const std::vector<StagePlan> own = q.stages;
  for (auto& s : q.stages) s = StagePlan{s.layers, RecomputePolicy::kSelective, s.layers};
  auto es = evaluate(q);
  for (auto& s : q.stages) s = StagePlan{s.layers, RecomputePolicy::kFull, s.layers};
  auto ef = evaluate(q);
  q.stages = own;
  if (!none || !es || !ef) return false;
  const double m = static_cast<double>(none->microBatches);
  for (std::size_t s = 0; s < q.stages.size(); ++s) {
    const auto stage = static_cast<std::size_t>(static_cast<std::int64_t>(s) % q.parallel.pp);
    const double n = static_cast<double>(q.stages[s].layers);
    const double chunks = static_cast<double>(q.parallel.virtualStages);
    auto option = [&](const costmodel::Evaluation& e, RecomputePolicy policy) {
      const double saved = (none->stages[stage].memory.total() - e.stages[stage].memory.total()) / (n * chunks);
      const double seconds = (e.stages[stage].backwardSeconds - none->stages[stage].backwardSeconds) * m / (n * chunks);
      return RecomputeOption{policy, seconds, saved, 0.0};
    };
    // A physical stage holds `chunks` model chunks: each chunk frees its share of the stage's excess
    // (asking one chunk to free all of it recomputed up to vpp times more than needed).
    const double excess = std::max(0.0, none->stages[stage].memory.total() - budget);
    const auto choice = chooseRecompute(q.stages[s].layers, budget + excess / chunks, budget,
                                        {option(*es, RecomputePolicy::kSelective), option(*ef, RecomputePolicy::kFull)});
    q.stages[s] = choice ? StagePlan{q.stages[s].layers, choice->policy, choice->layers}
                         : StagePlan{q.stages[s].layers, RecomputePolicy::kFull, q.stages[s].layers};
  }
  if (wholeSelective) selectiveEverywhere(q);
  // The per-layer estimate ignores the recompute working set: add layers until it fits.
  for (int round = 0; round < 8; ++round) {
    auto e = evaluate(q);
    if (!e) return false;
    out = *e;
    if (e->peakMemoryBytes <= budget) return true;
    bool changed = false;
    for (std::size_t s = 0; s < q.stages.size(); ++s) {
      const auto stage = static_cast<std::size_t>(static_cast<std::int64_t>(s) % q.parallel.pp);
      if (e->stages[stage].memory.total() <= budget) continue;
      auto& sp = q.stages[s];
      if (sp.recompute == RecomputePolicy::kNone) sp.recompute = RecomputePolicy::kSelective;
      if (sp.recomputeLayers < sp.layers) {
        sp.recomputeLayers = wholeSelective && sp.recompute == RecomputePolicy::kSelective
                                 ? sp.layers
                                 : std::min(sp.layers, sp.recomputeLayers + std::max<std::int64_t>(1, sp.layers / 4));
        changed = true;
      } else if (sp.recompute == RecomputePolicy::kSelective) {
        sp.recompute = RecomputePolicy::kFull;
        changed = true;
      }
    }
    if (!changed) return false;
    if (wholeSelective) selectiveEverywhere(q);
  }
  return false;
}

// Activation offload (Megatron-Core's --cpu-offloading-num-layers: pp 1, no recompute): the fewest
// layers whose activations, kept in host memory, make `p` (no recompute, evaluated as `e0`) fit. Every
// offloaded layer but the last frees one layer's activations: from `p` and the most that may be offloaded
// (all layers but one) the count that fits is estimated, then raised until it fits.
std::optional<std::pair<Plan, costmodel::Evaluation>> offloadActivationsToFit(const Plan& p, const costmodel::Evaluation& e0,
                                                                              double budget, const EvaluateFn& evaluate) {
  const std::int64_t layers = p.stages.empty() ? 0 : p.stages.front().layers;
  if (p.parallel.pp != 1 || p.parallel.virtualStages != 1 || layers < 2 || p.cluster.pcieBytesPerSecond <= 0) return std::nullopt;
  Plan q = p;
  for (auto& st : q.stages) st = StagePlan{st.layers, RecomputePolicy::kNone, 0};
  q.offload.activationLayers = layers - 1;
  auto most = evaluate(q);
  if (!most || most->peakMemoryBytes > budget) return std::nullopt;
  const double perLayer = layers > 2 ? (e0.peakMemoryBytes - most->peakMemoryBytes) / static_cast<double>(layers - 2) : 0.0;
  std::int64_t n = layers - 1;
  if (perLayer > 0) {
    const double needed = std::ceil((e0.peakMemoryBytes - budget) / perLayer) + 1.0;
    n = std::clamp<std::int64_t>(static_cast<std::int64_t>(needed), 1, layers - 1);
  }
  for (int round = 0; round < 8 && n < layers - 1; ++round) {
    q.offload.activationLayers = n;
    auto e = evaluate(q);
    if (!e) return std::nullopt;
    if (!e->fitsHost) return std::nullopt;  // more layers need more host memory
    if (e->peakMemoryBytes <= budget) return std::make_pair(q, *e);
    n = std::min(layers - 1, n + std::max<std::int64_t>(1, layers / 16));
  }
  if (!most->fitsHost) return std::nullopt;
  q.offload.activationLayers = layers - 1;
  return std::make_pair(q, *most);
}

// What the search's selective recompute re-runs: the modules the user named (--recompute-modules, or
// their plan's), else, beside the attention core, the output-discarding modules of Megatron-Core that
// the model has (layernorm and moe_act for MoE layers, mla_up_proj and layernorm for latent attention:
// Megatron-Bridge's MoE recipes recompute with these, docs/costmodel.md "Recompute modules"). Not under
// --runnable: colo-run re-runs the attention core only.
RecomputeModules searchModules(const Space& space, const Plan& base) {
  const RecomputeModules& named = base.execution.recomputeModules;
  if (space.options->recomputeModulesChosen || !named.isDefault() || space.options->runnableOnly || !space.model->spec) return named;
  const ModelSpec& spec = *space.model->spec;
  RecomputeModules m;  // core_attn
  if (spec.moe.enabled()) m.moeAct = m.layernorm = true;
  if (spec.mla.enabled()) m.mlaUpProj = m.layernorm = true;
  return m;
}

}  // namespace

std::optional<Candidate> costConfig(const Space& space, const Config& c, const Plan& base, const EvaluateFn& evaluate) {
  const double budget = space.budget;
  Plan p = planOf(space, c, base);
  auto e0 = evaluate(p);
  if (!e0) return std::nullopt;
  if (c.cp > 1) chooseCpExchange(space, p, *e0, evaluate);
  if (c.vpp == 1 && c.pp > 2) balanceStages(space, p, *e0, evaluate);
  costmodel::Evaluation final = *e0;
  if (e0->peakMemoryBytes > budget) {
    p.execution.recomputeModules = searchModules(space, base);
    Plan q = p;
    bool fits = recomputeToFit(q, final, budget, evaluate, &*e0);  // (e0 is p's evaluation: see above)
    // At pp 1, keeping some layers' activations in host memory may fit faster than recomputing them
    // (not under --runnable: colo-run does not offload activations).
    if (space.options->allowOffload && !space.options->runnableOnly) {
      auto offloaded = offloadActivationsToFit(p, *e0, budget, evaluate);
      if (offloaded && (!fits || offloaded->second.stepSeconds < final.stepSeconds)) {
        q = std::move(offloaded->first);
        final = std::move(offloaded->second);
        fits = true;
      }
    }
    // Offload as the last resort, the least first: half the optimizer states, all of them, then (ZeRO-3)
    // half and all of the parameters.
    if (!fits && space.options->allowOffload && c.zero >= 1) {
      std::vector<std::pair<double, double>> steps{{0.5, 0.0}, {1.0, 0.0}};
      if (c.zero == 3) {
        steps.push_back({1.0, 0.5});
        steps.push_back({1.0, 1.0});
      }
      for (const auto& [optimizer, parameters] : steps) {
        Plan offloaded = p;
        // Megatron-LM refuses optimizer CPU offload with --fp8-param-gather unless the recipe is delayed
        // scaling (arguments.py), which MXFP8 is not: those offload with 16-bit weights.
        if (offloaded.execution.float8Recipe == Float8Recipe::kMxfp8) offloaded.execution.quantizedParams = false;
        offloaded.offload.optimizerFraction = optimizer;
        offloaded.offload.paramsFraction = parameters;
        costmodel::Evaluation e;
        bool ok = recomputeToFit(offloaded, e, budget, evaluate) && e.fitsHost;
        // States the node's host memory cannot hold go to its NVMe (ZeRO-Infinity), where it has one.
        if (!e.fitsHost && offloaded.cluster.nvmeCapacityBytes > 0 && offloaded.cluster.nvmeBytesPerSecond > 0) {
          offloaded.offload.target = OffloadTarget::kNvme;
          ok = recomputeToFit(offloaded, e, budget, evaluate) && e.fitsHost;
        }
        if (ok || e.peakMemoryBytes < final.peakMemoryBytes) {
          q = offloaded;
          final = e;
        }
        if (ok) break;
      }
    }
    p = q;
  }
  // The modules are the plan's only where a stage recomputes selectively.
  if (!recomputesSelectively(p)) p.execution.recomputeModules = base.execution.recomputeModules;
  Candidate cand;
  cand.plan = std::move(p);
  cand.evaluation = final;
  cand.fits = final.peakMemoryBytes <= budget && final.fitsHost;
  return cand;
}

}  // namespace colo::planner::detail
