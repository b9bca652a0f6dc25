// Enumeration, pruning, per-configuration stage and recompute decisions, ranking.
#include "colo/planner/search.h"
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

namespace colo::planner {
namespace {
constexpr const char* kNotRunnable = "colo-run cannot execute it (--runnable)";

const std::vector<std::string> kFixedKeys = {"tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "zero"};

std::vector<std::int64_t> divisorsUpTo(std::int64_t n, std::int64_t limit) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= std::min(n, limit); ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

struct Config {
  std::int64_t tp, cp, pp, dp, ep, mbs, vpp;
  int zero;
  Schedule schedule;
  int layout;            // index into kLayouts
  std::int64_t etp = 0;  // expert tensor parallelism (0: tp)
};

// Rank layouts, innermost first: Megatron's (data-parallel groups inside pipeline groups) and the one
// that keeps pipeline neighbours closer. Tensor parallelism stays innermost: its traffic is the largest.
const std::vector<std::vector<std::string>> kLayouts = {{"tp", "cp", "dp", "pp"}, {"tp", "cp", "pp", "dp"}};

std::string describe(const Plan& p) {
  const auto& q = p.parallel;
  std::string s = "tp" + std::to_string(q.tp) + " pp" + std::to_string(q.pp) + " dp" + std::to_string(q.dp);
  if (q.cp > 1) s += " cp" + std::to_string(q.cp);
  if (q.ep > 1) s += " ep" + std::to_string(q.ep);
  if (q.etp > 0) s += " etp" + std::to_string(q.etp);
  if (q.virtualStages > 1) s += " vpp" + std::to_string(q.virtualStages);
  s += " mbs" + std::to_string(p.microBatchSize) + " zero" + std::to_string(p.zeroStage);
  if (q.rankOrder != kLayouts.front()) {
    std::string order;
    for (const auto& d : q.rankOrder) order += (order.empty() ? "" : "-") + d;
    s += " layout " + order;
  }
  return s;
}

// Why `c` ranks below `best`: its largest extra cost.
std::string compareReason(const Candidate& c, const Candidate& best, const ClusterSpec& cluster) {
  const auto& a = c.evaluation.time;
  const auto& b = best.evaluation.time;
  const std::pair<const char*, double> deltas[] = {
      {"compute", a.compute - b.compute},     {"recompute", a.recompute - b.recompute},
      {"tensor-parallel comm", a.tpComm - b.tpComm}, {"context-parallel comm", a.cpComm - b.cpComm},
      {"expert all-to-all", a.epComm - b.epComm},    {"pipeline send/recv", a.ppComm - b.ppComm},
      {"data-parallel comm", a.dpComm - b.dpComm},   {"pipeline bubble", a.bubble - b.bubble},
      {"gradient accumulation", a.gradAccum - b.gradAccum}, {"optimizer", a.optimizer - b.optimizer}};
  const auto* worst = &deltas[0];
  for (const auto& d : deltas) {
    if (d.second > worst->second) worst = &d;
  }
  const double slower = c.evaluation.stepSeconds / best.evaluation.stepSeconds - 1;
  // A tie at the printed precision says what differs instead, so no two rows read the same.
  if (slower < 0.0005 || worst->second < 0.0005) {
    return "ties #1 within " + formatFixed(100 * std::max(slower, 0.0), 2) + "%: " + planDifferences(best.plan, c.plan);
  }
  std::string reason = "+" + formatFixed(100 * slower, 1) + "% step: " + worst->first + " +" + formatFixed(worst->second, 3) + " s";
  if (std::string(worst->first) == "tensor-parallel comm" &&
      costmodel::placeGroup(cluster, c.plan.parallel, costmodel::Dim::kTp).crossesNodes()) {
    reason += " (tp=" + std::to_string(c.plan.parallel.tp) + " crosses nodes)";
  }
  return reason;
}

}  // namespace

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
  if (options.globalBatchSize < 1) return fail(Error::badInput("--gbs: a global batch size is required"));
  if (!(options.maxMemoryFraction > 0 && options.maxMemoryFraction <= 1)) {
    return fail(Error::badInput("--max-memory-fraction: must be in (0, 1], got " + formatFixed(options.maxMemoryFraction, 3)));
  }
  for (const auto& [key, value] : options.fixed) {
    if (std::find(kFixedKeys.begin(), kFixedKeys.end(), key) == kFixedKeys.end()) {
      return fail(Error::badInput("--fix: unknown setting \"" + key + "\""));
    }
  }
  if (!cluster.gpu.hasPeak(options.precision)) {
    return fail(Error::badInput("--precision: " + cluster.gpu.name + " has no " + toString(options.precision) + " peak"));
  }
  const std::int64_t seq = options.seqLen > 0 ? options.seqLen : model.defaultSeqLen();
  auto evaluator = options.costDb ? costmodel::Evaluator::create(model, cluster, seq, *options.costDb)
                                  : costmodel::Evaluator::create(model, cluster, seq);
  if (!evaluator) return fail(evaluator.error());

  const std::int64_t gpus = cluster.totalGpus();
  const std::int64_t layers = model.numLayers();
  const std::int64_t heads = model.spec ? model.spec->numAttentionHeads : model.graph->info().numAttentionHeads;
  const std::int64_t kvHeads = model.spec ? model.spec->kvHeads() : model.graph->info().numKvHeads;
  const std::int64_t experts = model.spec ? model.spec->moe.numExperts : 0;
  const double budget = options.maxMemoryFraction * cluster.gpu.memoryBytes;
  const std::int64_t gbs = options.globalBatchSize;
  auto fixedOr = [&](const char* key) -> std::optional<std::int64_t> {
    const auto it = options.fixed.find(key);
    if (it == options.fixed.end()) return std::nullopt;
    return it->second;
  };
  for (const char* key : {"tp", "pp", "dp", "cp"}) {
    if (auto v = fixedOr(key); v && gpus % *v != 0) {
      return fail(Error::badInput(std::string("--fix: ") + key + "=" + std::to_string(*v) + " does not divide the cluster's " +
                                  std::to_string(gpus) + " GPUs"));
    }
  }

  // Parameters for the memory lower bound.
  const double params = model.spec ? static_cast<double>(countParameters(*model.spec).total)
                                   : static_cast<double>(model.graph->totals().params);
  const double weightBytes = options.precision == DType::kFp32 ? 4.0 : 2.0;
  const double gradBytes = options.precision == DType::kFp16 ? 6.0 : 4.0;
  const double optimizerBytes = 4.0 * optimizerMoments(options.optimizer) + (options.precision == DType::kFp32 ? 0.0 : 4.0);

  SearchResult result;
  SearchStats& st = result.stats;
  std::vector<Config> survivors;
  auto prune = [&](const char* rule) { ++st.pruned[rule]; };
  const bool allowOffload = options.allowOffload;
  double leastStates = std::numeric_limits<double>::max();  // the binding constraint when nothing fits
  std::string leastStatesConfig;

  const std::vector<std::int64_t> tpList{1, 2, 4, 8, 16, 32, 64};
  const std::vector<std::int64_t> cpList{1, 2, 4, 8, 16};
  const std::vector<std::int64_t> ppList = divisorsUpTo(gpus, std::min<std::int64_t>(layers, 128));
  const std::vector<std::int64_t> epList = experts > 0 ? divisorsUpTo(experts, experts) : std::vector<std::int64_t>{1};
  const std::vector<std::int64_t> mbsList{1, 2, 4, 8, 16};
  const std::vector<std::int64_t> vppList{1, 2, 3, 4, 6, 8};
  for (const auto tp : tpList) {
    for (const auto cp : cpList) {
      for (const auto pp : ppList) {
        for (const auto ep : epList) {
         // Expert tensor parallelism: tp's (0) or, for a MoE model under tp, 1 (MoE parallel folding).
         for (const std::int64_t etp : {std::int64_t{0}, std::int64_t{1}}) {
          for (const auto mbs : mbsList) {
            for (const auto vpp : vppList) {
              for (int zero = 0; zero <= 3; ++zero) {
                for (int zb = 0; zb <= 1; ++zb) {
                 for (int layout = 0; layout < static_cast<int>(kLayouts.size()); ++layout) {
                  ++st.generated;
                  const std::int64_t modelParallel = tp * cp * pp;
                  const std::int64_t dp = gpus % modelParallel == 0 ? gpus / modelParallel : 0;
                  const Config c{tp, cp, pp, dp, ep, mbs, vpp, zero,
                                 vpp > 1 ? Schedule::kInterleaved : zb ? Schedule::kZeroBubble : Schedule::kOneFOneB,
                                 layout, etp};
                  if ((fixedOr("tp") && *fixedOr("tp") != tp) || (fixedOr("cp") && *fixedOr("cp") != cp) ||
                      (fixedOr("pp") && *fixedOr("pp") != pp) || (fixedOr("ep") && *fixedOr("ep") != ep) ||
                      (fixedOr("mbs") && *fixedOr("mbs") != mbs) || (fixedOr("vpp") && *fixedOr("vpp") != vpp) ||
                      (fixedOr("zero") && *fixedOr("zero") != zero) || (fixedOr("dp") && *fixedOr("dp") != dp)) {
                    prune("fixed by --fix");
                    continue;
                  }
                  if (dp == 0) { prune("tp*cp*pp does not divide the GPUs"); continue; }
                  if (etp > 0 && (experts == 0 || tp == 1)) { prune("expert tensor parallelism: only for MoE under tp"); continue; }
                  if (fixedOr("etp") && *fixedOr("etp") != (etp > 0 ? etp : tp)) { prune("fixed by --fix"); continue; }
                  if (zb && (vpp > 1 || pp == 1 || !options.allowZeroBubble)) { prune("schedule not applicable"); continue; }
                  if (layout > 0 && (pp == 1 || dp == 1)) { prune("rank layout: nothing to reorder"); continue; }
                  if (heads > 0 && (heads % tp != 0 || (kvHeads > 0 && kvHeads % tp != 0))) {
                    prune("heads or kv heads not divisible by tp");
                    continue;
                  }
                  if (cp > 1 && (seq % (2 * cp) != 0 || seq < 8192)) {
                    prune("context parallel only for sequences >= 8192 that split into 2*cp chunks");
                    continue;
                  }
                  if (vpp > 1 && (pp == 1 || layers % (pp * vpp) != 0)) { prune("virtual stages need pp > 1 and layers divisible by pp*vpp"); continue; }
                  if (layers < pp) { prune("more stages than layers"); continue; }
                  if (ep > 1 && ((tp * cp * dp) % ((etp > 0 ? etp : tp) * ep) != 0)) {
                    prune("expert_tp*ep does not divide tp*cp*dp");
                    continue;
                  }
                  if (gbs % (mbs * dp) != 0) { prune("global batch not divisible by mbs*dp"); continue; }
                  const std::int64_t m = gbs / (mbs * dp);
                  if (vpp > 1 && m % pp != 0) { prune("interleaving needs micro-batches divisible by pp"); continue; }
                  // Valid and costed (FSDP2 under PyTorch pipelining, and colo-run), but Megatron-LM and
                  // DeepSpeed do not run it. Searched when asked for (--fix zero=2|3).
                  if (pp > 1 && zero > 1 && !options.fixed.contains("zero")) {
                    prune("ZeRO-2/3 with pipeline parallelism (FSDP2 pipelines only; --fix zero=3 searches it)");
                    continue;
                  }
                  // Dominance: with one data-parallel rank ZeRO shards nothing; otherwise ZeRO-1 (with
                  // pp) and ZeRO-2 (without) cost the same time as ZeRO-0 and hold less memory.
                  // A ZeRO stage the user fixed is kept (an engine may not run the dominating one).
                  const bool zeroFixed = options.fixed.contains("zero");
                  // ZeRO-3 on one data-parallel rank is kept where only offloading its parameters can fit
                  // (ZeRO-Infinity on one GPU); otherwise it is ZeRO-0.
                  const double replicaStates = params / static_cast<double>(tp * pp) * (weightBytes + gradBytes + optimizerBytes);
                  const bool offloadOnly = zero == 3 && allowOffload && replicaStates > budget;
                  if (dp == 1 && zero > 0 && !zeroFixed && !offloadOnly) { prune("dominated: ZeRO with dp 1"); continue; }
                  if (dp > 1 && pp > 1 && zero == 0 && !zeroFixed) { prune("dominated: ZeRO-0 by ZeRO-1"); continue; }
                  if (dp > 1 && pp == 1 && zero < 2 && !zeroFixed) { prune("dominated: ZeRO-0/1 by ZeRO-2"); continue; }
                  // Memory lower bound: the average stage's model states, before any activation.
                  const double perGpu = params / static_cast<double>(tp * pp);
                  const double d = static_cast<double>(dp);
                  // What offload may move to the host is not counted: the optimizer states (ZeRO >= 1), with
                  // them the gradients (ZeRO >= 2, ZeRO-Offload) and the parameters (ZeRO-3).
                  const bool offload = allowOffload;
                  double states = 0;
                  if (!(offload && zero >= 3)) states += perGpu * weightBytes / (zero >= 3 ? d : 1.0);
                  if (!(offload && zero >= 2)) states += perGpu * gradBytes / (zero >= 2 ? d : 1.0);
                  if (!(offload && zero >= 1)) states += perGpu * optimizerBytes / (zero >= 1 ? d : 1.0);
                  if (states < leastStates) {
                    leastStates = states;
                    leastStatesConfig = "tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " dp" + std::to_string(dp) +
                                        " zero" + std::to_string(zero);
                  }
                  if (experts == 0 && states > budget) { prune("memory lower bound: model states exceed the budget"); continue; }
                  survivors.push_back(c);
                 }
                }
              }
            }
          }
         }
        }
      }
    }
  }

  // Cost every survivor.
  Plan base;
  base.model = model;
  base.cluster = cluster;
  if (options.runnableOnly) {
    // The model itself: colo-run's list names it before any layout question.
    if (auto ok = checkRunnableModel(model); !ok) return fail(Error::badInput("--runnable: " + ok.error().message));
  }
  base.seqLen = seq;
  base.globalBatchSize = gbs;
  base.precision = options.precision;
  base.optimizer = options.optimizer;
  base.execution = options.execution;
  base.execution.flashAttention = options.flashAttention;
  std::vector<Candidate> all;
  all.reserve(survivors.size());
  auto evaluate = [&](const Plan& p) {
    ++st.evaluated;
    auto ev = evaluator->evaluate(p);
    if (ev && options.calibration) options.calibration->apply(*ev);
    return ev;
  };
  for (std::size_t i = 0; i < survivors.size(); ++i) {
    if (cancel && cancel->cancelled()) break;
    if (progress && i % 64 == 0) {
      progress->progress(static_cast<double>(i) / static_cast<double>(survivors.size()), "costing configurations");
    }
    const Config& c = survivors[i];
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
    auto e0 = evaluate(p);
    if (!e0) continue;

    // Non-uniform stages: balance per-stage time (the first holds the embedding, the last the head).
    if (c.vpp == 1 && c.pp > 2) {
      const auto& stages = e0->stages;
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
        const double room = budget - m.buffers - m.allocator - m.context;
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
        if (auto e = evaluate(q); e && e->stepSeconds < e0->stepSeconds) {
          p = q;
          e0 = std::move(e);
        }
      }
    }

    // Recompute: per stage, the cheapest policy and layer count that fits.
    costmodel::Evaluation final = *e0;
    if (e0->peakMemoryBytes > budget) {
      auto tryRecompute = [&](Plan& q, costmodel::Evaluation& out) {
        Plan sel = q, full = q;
        for (auto& s : sel.stages) s = StagePlan{s.layers, RecomputePolicy::kSelective, s.layers};
        for (auto& s : full.stages) s = StagePlan{s.layers, RecomputePolicy::kFull, s.layers};
        auto none = evaluate(q);
        auto es = evaluate(sel);
        auto ef = evaluate(full);
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
              sp.recomputeLayers = std::min(sp.layers, sp.recomputeLayers + std::max<std::int64_t>(1, sp.layers / 4));
              changed = true;
            } else if (sp.recompute == RecomputePolicy::kSelective) {
              sp.recompute = RecomputePolicy::kFull;
              changed = true;
            }
          }
          if (!changed) return false;
        }
        return false;
      };
      Plan q = p;
      bool fits = tryRecompute(q, final);
      // Offload as the last resort, the least first: half the optimizer states, all of them, then (ZeRO-3)
      // half and all of the parameters.
      if (!fits && allowOffload && c.zero >= 1) {
        std::vector<std::pair<double, double>> steps{{0.5, 0.0}, {1.0, 0.0}};
        if (c.zero == 3) {
          steps.push_back({1.0, 0.5});
          steps.push_back({1.0, 1.0});
        }
        for (const auto& [optimizer, parameters] : steps) {
          Plan offloaded = p;
          offloaded.offload.optimizerFraction = optimizer;
          offloaded.offload.paramsFraction = parameters;
          costmodel::Evaluation e;
          const bool ok = tryRecompute(offloaded, e);
          if (ok || e.peakMemoryBytes < final.peakMemoryBytes) {
            q = offloaded;
            final = e;
          }
          if (ok) break;
        }
      }
      p = q;
    }
    if (options.runnableOnly && !runnable(p)) {
      prune(kNotRunnable);
      continue;
    }
    p.name = model.name() + " " + describe(p);
    Candidate cand;
    cand.plan = std::move(p);
    cand.evaluation = final;
    cand.fits = final.peakMemoryBytes <= budget;
    ++st.costed;
    if (cand.fits) ++st.feasible;
    all.push_back(std::move(cand));
  }
  if (progress) progress->progress(1.0, "ranking");

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
    } else if (st.pruned.contains("memory lower bound: model states exceed the budget")) {
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
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

Json SearchResult::toJson() const {
  auto summary = [](const Candidate& c) {
    const auto& p = c.plan;
    std::int64_t recomputed = 0;
    for (const auto& s : p.stages) recomputed += s.recomputeLayers;
    std::string order;
    for (const auto& d : p.parallel.rankOrder) order += (order.empty() ? "" : "-") + d;
    return Json{{"tp", p.parallel.tp},
                {"rank_order", order},
                {"pp", p.parallel.pp},
                {"dp", p.parallel.dp},
                {"cp", p.parallel.cp},
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
  std::int64_t pruned = 0;
  Json rules = Json::object();
  for (const auto& [rule, count] : stats.pruned) {
    rules[rule] = count;
    pruned += count;
  }
  out["stats"] = {{"generated", stats.generated}, {"pruned", pruned},         {"pruned_by_rule", rules},
                  {"evaluated", stats.evaluated}, {"costed", stats.costed},   {"feasible", stats.feasible},
                  {"search_time_s", stats.seconds}};
  return out;
}

}  // namespace colo::planner
