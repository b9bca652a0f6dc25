#include "colo/planner/baseline.h"

#include <algorithm>

#include "colo/core/rank_layout.h"
#include "colo/planner/space.h"

namespace colo::planner {
std::string recomputeSummary(const Plan& p) {
  std::int64_t recomputed = 0, total = 0;
  RecomputePolicy policy = RecomputePolicy::kNone;
  for (const auto& s : p.stages) {
    recomputed += s.recomputeLayers;
    total += s.layers;
    if (s.recompute != RecomputePolicy::kNone) policy = s.recompute;
  }
  // Activation offload replaces recompute (validatePlan refuses both): the offloaded share instead.
  if (p.offload.activationLayers > 0) return "offload " + std::to_string(p.offload.activationLayers) + "/" + std::to_string(total);
  if (recomputed == 0) return "none";
  // Selective recompute of other modules than the attention core names them: "selective(mla_up_proj+mlp)".
  std::string name = toString(policy);
  if (policy == RecomputePolicy::kSelective && !p.execution.recomputeModules.isDefault()) {
    name += "(" + recomputeModulesLabel(p.execution.recomputeModules) + ")";
  }
  return name + (recomputed == total ? "" : " " + std::to_string(recomputed) + "/" + std::to_string(total));
}

std::string stagesSummary(const std::vector<std::int64_t>& layers) {
  std::string out;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t run = 1;
    while (i + run < layers.size() && layers[i + run] == layers[i]) ++run;
    out += (out.empty() ? "" : ",") + std::to_string(layers[i]) + (run > 2 ? "x" + std::to_string(run) : "");
    if (run == 2) out += "," + std::to_string(layers[i]);
    i += run;
  }
  return out;
}

std::string stagesSummary(const Plan& p) {
  std::vector<std::int64_t> layers;
  for (const auto& s : p.stages) layers.push_back(s.layers);
  return stagesSummary(layers);
}

Result<Baseline> parseBaseline(const std::string& name) {
  if (name == "megatron") return Baseline::kMegatron;
  if (name == "zero3") return Baseline::kZero3;
  if (name == "ddp") return Baseline::kDdp;
  return fail(Error::badInput("unknown baseline \"" + name + "\" (expected megatron, zero3 or ddp)"));
}

std::string toString(Baseline b) {
  switch (b) {
    case Baseline::kMegatron: return "megatron";
    case Baseline::kZero3: return "zero3";
    case Baseline::kDdp: return "ddp";
  }
  return "megatron";
}

Result<BaselinePlan> baselinePlan(Baseline baseline, const Model& model, const ClusterSpec& cluster,
                                  std::int64_t gbs, std::int64_t seqLen, DType precision, double maxMemoryFraction,
                                  const Execution& kernels) {
  const std::int64_t gpus = cluster.totalGpus();
  const std::int64_t layers = model.numLayers();
  const std::int64_t seq = seqLen > 0 ? seqLen : model.defaultSeqLen();
  const double budget = maxMemoryFraction * cluster.gpu.memoryBytes;
  Plan base;
  base.model = model;
  base.cluster = cluster;
  base.seqLen = seq;
  base.globalBatchSize = gbs;
  base.precision = precision;
  base.execution.flashAttention = kernels.flashAttention;
  base.execution.flashAttention2 = kernels.flashAttention2;
  base.execution.unfused = kernels.unfused;
  base.execution.torchCrossEntropy = kernels.torchCrossEntropy;
  base.execution.fusedCrossEntropy = kernels.fusedCrossEntropy;
  base.execution.crossEntropyInPlace = kernels.crossEntropyInPlace;
  base.execution.nativeFusedCrossEntropy = kernels.nativeFusedCrossEntropy;
  BaselinePlan out;
  auto finish = [&](Plan p, std::string rules) -> Result<BaselinePlan> {
    if (auto valid = validatePlan(p); !valid) return fail(valid.error());
    auto ev = costmodel::evaluatePlan(p);
    if (!ev) return fail(ev.error());
    ev->fits = ev->peakMemoryBytes <= budget && ev->fitsHost;
    return BaselinePlan{std::move(p), *ev, std::move(rules)};
  };
  if (baseline != Baseline::kMegatron) {
    Plan p = base;
    p.parallel.dp = gpus;
    p.zeroStage = baseline == Baseline::kZero3 ? 3 : 0;
    p.stages = uniformStages(layers, 1, RecomputePolicy::kFull);
    if (gbs % gpus != 0) {
      return fail(Error::badInput("--gbs: global batch " + std::to_string(gbs) + " does not divide over " +
                                  std::to_string(gpus) + " data-parallel ranks for the " + toString(baseline) + " baseline"));
    }
    return finish(p, baseline == Baseline::kZero3 ? "all GPUs data-parallel, ZeRO-3, full recompute, micro-batch 1"
                                                  : "all GPUs data-parallel (DDP), full recompute, micro-batch 1");
  }
  const std::int64_t heads = model.spec ? model.spec->numAttentionHeads : model.graph->info().numAttentionHeads;
  const std::int64_t kv = model.spec ? model.spec->kvHeads() : model.graph->info().numKvHeads;
  std::int64_t tp = 1;
  while (tp * 2 <= std::min<std::int64_t>(8, cluster.gpusPerNode) && !headsRule(heads, kv, tp * 2) && gpus % (tp * 2) == 0) {
    tp *= 2;
  }
  std::optional<BaselinePlan> last;
  for (std::int64_t pp = 1; pp <= std::min<std::int64_t>(layers, gpus / tp); ++pp) {
    if (gpus % (tp * pp) != 0) continue;
    const std::int64_t dp = gpus / (tp * pp);
    if (gbs % dp != 0) continue;
    const std::int64_t m = gbs / dp;
    // The most chunks per stage the searches try that keep two layers a chunk.
    std::int64_t vpp = 1;
    for (const std::int64_t v : chunkCounts({}, layers, pp, m)) {
      if (layers / (pp * v) >= 2) vpp = v;
    }
    if (pp > 1 && vpp == 1 && layers % pp != 0) continue;
    Plan p = base;
    p.parallel.tp = tp;
    p.parallel.pp = pp;
    p.parallel.dp = dp;
    p.parallel.sequenceParallel = tp > 1;
    p.parallel.virtualStages = vpp;
    p.schedule = vpp > 1 ? Schedule::kInterleaved : Schedule::kOneFOneB;
    p.zeroStage = dp > 1 ? 1 : 0;
    p.stages = uniformStages(layers, pp * vpp, RecomputePolicy::kSelective);
    auto r = finish(p, "tp " + std::to_string(tp) + " inside a node, the smallest pp that fits (" + std::to_string(pp) +
                           "), dp for the rest, interleaved schedule, selective recompute + sequence parallel, "
                           "distributed optimizer, micro-batch 1");
    if (!r) continue;
    if (r->evaluation.fits) return r;
    last = std::move(*r);
  }
  if (last) {
    // Nothing fits: the rules say so rather than "the smallest pp that fits".
    const std::string fitted = "the smallest pp that fits (" + std::to_string(last->plan.parallel.pp) + ")";
    if (const auto at = last->rules.find(fitted); at != std::string::npos) {
      last->rules.replace(at, fitted.size(), "no pp that fits (the largest tried, " + std::to_string(last->plan.parallel.pp) + ", is shown)");
    }
    return *last;
  }
  return fail(Error::badInput("no Megatron-style configuration divides the global batch " + std::to_string(gbs) + " over " +
                              std::to_string(gpus) + " GPUs"));
}

std::string planDifferences(const Plan& a, const Plan& b) {
  std::string out;
  auto diff = [&](const std::string& name, const std::string& x, const std::string& y) {
    if (x != y) out += (out.empty() ? "" : "; ") + name + " " + x + " -> " + y;
  };
  const auto n = [](std::int64_t v) { return std::to_string(v); };
  diff("GPUs", n(a.cluster.totalGpus()), n(b.cluster.totalGpus()));
  diff("global batch", n(a.globalBatchSize), n(b.globalBatchSize));
  diff("sequence", n(a.seqLen), n(b.seqLen));
  diff("precision", toString(a.precision), toString(b.precision));
  diff("attention", attentionName(a.execution), attentionName(b.execution));
  diff("eager kernels", unfusedKernelsLabel(a.execution.unfused), unfusedKernelsLabel(b.execution.unfused));
  auto loss = [](const Execution& x) -> std::string {
    if (x.torchCrossEntropy) return "torch";
    if (x.fusedCrossEntropy) return x.crossEntropyInPlace ? "fused-in-place" : "fused";
    if (x.nativeFusedCrossEntropy) return "vocab-parallel, fused";
    return "vocab-parallel";
  };
  diff("loss", loss(a.execution), loss(b.execution));
  diff("tp", n(a.parallel.tp), n(b.parallel.tp));
  diff("pp", n(a.parallel.pp), n(b.parallel.pp));
  diff("dp", n(a.parallel.dp), n(b.parallel.dp));
  diff("cp", n(a.parallel.cp), n(b.parallel.cp));
  diff("cp exchange", cpExchangeLabel(a.execution.cpCommType, a.execution.hierarchicalCpSizes),
       cpExchangeLabel(b.execution.cpCommType, b.execution.hierarchicalCpSizes));
  diff("ep", n(a.parallel.ep), n(b.parallel.ep));
  diff("vpp", n(a.parallel.virtualStages), n(b.parallel.virtualStages));
  diff("sequence parallel", a.parallel.sequenceParallel ? "on" : "off", b.parallel.sequenceParallel ? "on" : "off");
  diff("schedule", toString(a.schedule), toString(b.schedule));
  auto order = [](const Parallelism& q) { return rankOrderText(q); };
  diff("rank layout", order(a.parallel), order(b.parallel));
  diff("micro-batch", n(a.microBatchSize), n(b.microBatchSize));
  diff("ZeRO", n(a.zeroStage), n(b.zeroStage));
  diff("recompute", recomputeSummary(a), recomputeSummary(b));
  diff("optimizer offload", std::to_string(a.offload.optimizerFraction), std::to_string(b.offload.optimizerFraction));
  if (a.parallel.pp == b.parallel.pp && a.parallel.virtualStages == b.parallel.virtualStages) {
    diff("layers per stage", stagesSummary(a), stagesSummary(b));
  }
  return out.empty() ? "identical" : out;
}

}  // namespace colo::planner
