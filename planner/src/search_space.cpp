// The space of the degree-level search: every (tp, cp, pp, ep, expert tp, micro-batch, virtual stages,
// ZeRO stage, schedule, rank layout) and the rules that prune it, each counted (`--explain`).
#include <algorithm>
#include <limits>

#include "colo/core/rank_layout.h"
#include "colo/core/units.h"
#include "colo/planner/space.h"
#include "search_parts.h"

namespace colo::planner::detail {
namespace {

std::vector<std::int64_t> divisorsUpTo(std::int64_t n, std::int64_t limit) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= std::min(n, limit); ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

}  // namespace

const std::vector<std::string> kFixedKeys = {"tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "zero"};

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
    s += " layout " + rankOrderText(q);
  }
  return s;
}

std::optional<std::int64_t> Space::fixed(const char* key) const {
  if (options->fixed.empty()) return std::nullopt;  // (the usual search: asked per configuration)
  const auto it = options->fixed.find(key);
  if (it == options->fixed.end()) return std::nullopt;
  return it->second;
}

Result<Space> makeSpace(const Model& model, const ClusterSpec& cluster, const SearchOptions& options) {
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
  Space sp;
  sp.model = &model;
  sp.cluster = &cluster;
  sp.options = &options;
  sp.seq = options.seqLen > 0 ? options.seqLen : model.defaultSeqLen();
  sp.gpus = cluster.totalGpus();
  sp.layers = model.numLayers();
  sp.heads = model.spec ? model.spec->numAttentionHeads : model.graph->info().numAttentionHeads;
  sp.kvHeads = model.spec ? model.spec->kvHeads() : model.graph->info().numKvHeads;
  sp.experts = model.spec ? model.spec->moe.numExperts : 0;
  sp.budget = options.maxMemoryFraction * cluster.gpu.memoryBytes;
  sp.gbs = options.globalBatchSize;
  // The fixed degrees together: their product must divide the GPUs (and make them when all four are fixed).
  std::int64_t product = 1;
  std::string named;
  for (const char* key : {"tp", "pp", "dp", "cp"}) {
    if (auto v = sp.fixed(key); v && sp.gpus % *v != 0) {
      return fail(Error::badInput(std::string("--fix: ") + key + "=" + std::to_string(*v) + " does not divide the cluster's " +
                                  std::to_string(sp.gpus) + " GPUs"));
    }
    if (auto v = sp.fixed(key)) {
      // (Each value divides the GPUs, so a product that still divides them never overflows.)
      if (product <= sp.gpus / *v) product *= *v;
      else product = sp.gpus + 1;
      named += (named.empty() ? "" : "*") + std::string(key) + "=" + std::to_string(*v);
    }
  }
  const bool allFixed = sp.fixed("tp") && sp.fixed("pp") && sp.fixed("dp") && sp.fixed("cp");
  if (product > sp.gpus) {
    return fail(Error::badInput("--fix: " + named + " is more than the cluster's " + std::to_string(sp.gpus) + " GPUs"));
  }
  if (sp.gpus % product != 0 || (allFixed && product != sp.gpus)) {
    return fail(Error::badInput("--fix: " + named + " = " + std::to_string(product) + (allFixed ? " does not make" : " does not divide") +
                                " the cluster's " + std::to_string(sp.gpus) + " GPUs"));
  }
  sp.params = model.spec ? static_cast<double>(countParameters(*model.spec).total) : static_cast<double>(model.graph->totals().params);
  // Lower bounds of the bytes a parameter holds: quantized weights take 1 B (per-tensor fp8 on
  // Blackwell), a bf16 gradient buffer 2 B.
  sp.weightBytes = options.precision == DType::kFp32 ? 4.0 : quantizedGemms(options.precision) ? 1.0 : 2.0;
  sp.gradBytes = options.precision == DType::kFp16 ? 6.0 : options.execution.gradReduceBf16 ? 2.0 : 4.0;
  sp.optimizerBytes = 4.0 * optimizerMoments(options.optimizer) + (options.precision == DType::kFp32 ? 0.0 : 4.0);
  return sp;
}

const char* pruneRule(const Space& space, const Config& c, bool zb, double& states) {
  // The rules read these names.
  const auto& options = *space.options;
  const std::int64_t layers = space.layers, heads = space.heads, kvHeads = space.kvHeads;
  const std::int64_t experts = space.experts, seq = space.seq, gbs = space.gbs;
  const double budget = space.budget, params = space.params;
  const double weightBytes = space.weightBytes, gradBytes = space.gradBytes, optimizerBytes = space.optimizerBytes;
  auto fixedOr = [&](const char* key) { return space.fixed(key); };
  const bool allowOffload = options.allowOffload;
  const std::int64_t tp = c.tp, cp = c.cp, pp = c.pp, dp = c.dp, ep = c.ep, etp = c.etp, mbs = c.mbs, vpp = c.vpp;
  const int zero = c.zero, layout = c.layout;
  if ((fixedOr("tp") && *fixedOr("tp") != tp) || (fixedOr("cp") && *fixedOr("cp") != cp) ||
      (fixedOr("pp") && *fixedOr("pp") != pp) || (fixedOr("ep") && *fixedOr("ep") != ep) ||
      (fixedOr("mbs") && *fixedOr("mbs") != mbs) || (fixedOr("vpp") && *fixedOr("vpp") != vpp) ||
      (fixedOr("zero") && *fixedOr("zero") != zero) || (fixedOr("dp") && *fixedOr("dp") != dp)) {
    return "fixed by --fix";
  }
  if (dp == 0) return "tp*cp*pp does not divide the GPUs";
  if (etp > 0 && (experts == 0 || tp == 1)) return "expert tensor parallelism: only for MoE under tp";
  if (fixedOr("etp") && *fixedOr("etp") != (etp > 0 ? etp : tp)) return "fixed by --fix";
  if (zb && (vpp > 1 || pp == 1 || !options.allowZeroBubble)) return "schedule not applicable";
  if (layout > 0 && (pp == 1 || dp == 1)) return "rank layout: nothing to reorder";
  if (const char* rule = headsRule(heads, kvHeads, tp)) return rule;
  if (cp > 1 && (seq % (2 * cp) != 0 || seq < 8192)) {
    return "context parallel only for sequences >= 8192 that split into 2*cp chunks";
  }
  if (const char* rule = chunksRule(layers, pp, vpp)) return rule;
  if (const char* rule = stagesRule(layers, pp)) return rule;
  if (ep > 1 && ((tp * cp * dp) % ((etp > 0 ? etp : tp) * ep) != 0)) {
    return "expert_tp*ep does not divide tp*cp*dp";
  }
  if (gbs % (mbs * dp) != 0) return "global batch not divisible by mbs*dp";
  const std::int64_t m = gbs / (mbs * dp);
  if (const char* rule = interleavedBatchRule(m, pp, vpp)) return rule;
  // Valid and costed (FSDP2 under PyTorch pipelining, and colo-run), but Megatron-LM and
  // DeepSpeed do not run it. Searched when asked for (--fix zero=2|3).
  if (pp > 1 && zero > 1 && !options.fixed.contains("zero")) {
    return "ZeRO-2/3 with pipeline parallelism (FSDP2 pipelines only; --fix zero=3 searches it)";
  }
  // Dominance: with one data-parallel rank ZeRO shards nothing; otherwise ZeRO-1 (with
  // pp) and ZeRO-2 (without) cost the same time as ZeRO-0 and hold less memory.
  // A ZeRO stage the user fixed is kept (an engine may not run the dominating one).
  const bool zeroFixed = options.fixed.contains("zero");
  // ZeRO-3 on one data-parallel rank is kept where only offloading its parameters can fit
  // (ZeRO-Infinity on one GPU); otherwise it is ZeRO-0.
  // ZeRO-3 keeps 16-bit weights (quantized ones need ZeRO 1 or 2).
  const double replicaStates = params / static_cast<double>(tp * pp) * (std::max(weightBytes, 2.0) + gradBytes + optimizerBytes);
  const bool offloadOnly = zero == 3 && allowOffload && replicaStates > budget;
  if (dp == 1 && zero > 0 && !zeroFixed && !offloadOnly) return "dominated: ZeRO with dp 1";
  if (dp > 1 && pp > 1 && zero == 0 && !zeroFixed) return "dominated: ZeRO-0 by ZeRO-1";
  if (dp > 1 && pp == 1 && zero < 2 && !zeroFixed) return "dominated: ZeRO-0/1 by ZeRO-2";
  // Memory lower bound: the average stage's model states, before any activation.
  const double perGpu = params / static_cast<double>(tp * pp);
  const double d = static_cast<double>(dp);
  // What offload may move to the host is not counted: the optimizer states (ZeRO >= 1), with
  // them the gradients (ZeRO >= 2, ZeRO-Offload) and the parameters (ZeRO-3).
  const bool offload = allowOffload;
  double stateBytes = 0;
  if (!(offload && zero >= 3)) stateBytes += perGpu * weightBytes / (zero >= 3 ? d : 1.0);
  if (!(offload && zero >= 2)) stateBytes += perGpu * gradBytes / (zero >= 2 ? d : 1.0);
  if (!(offload && zero >= 1)) stateBytes += perGpu * optimizerBytes / (zero >= 1 ? d : 1.0);
  states = stateBytes;
  if (experts == 0 && stateBytes > budget) return "memory lower bound: model states exceed the budget";
  return nullptr;
}

Enumeration enumerate(const Space& space, SearchStats& st) {
  const std::int64_t gpus = space.gpus, layers = space.layers, experts = space.experts;
  Enumeration out;
  const std::vector<std::int64_t> tpList{1, 2, 4, 8, 16, 32, 64};
  const std::vector<std::int64_t> cpList{1, 2, 4, 8, 16};
  const std::vector<std::int64_t> ppList = divisorsUpTo(gpus, std::min<std::int64_t>(layers, 128));
  const std::vector<std::int64_t> epList = experts > 0 ? divisorsUpTo(experts, experts) : std::vector<std::int64_t>{1};
  const std::vector<std::int64_t> mbsList{1, 2, 4, 8, 16};
  for (const auto tp : tpList) {
    for (const auto cp : cpList) {
      for (const auto pp : ppList) {
        for (const auto ep : epList) {
         // Expert tensor parallelism: tp's (0) or, for a MoE model under tp, 1 (MoE parallel folding).
         for (const std::int64_t etp : {std::int64_t{0}, std::int64_t{1}}) {
          for (const auto mbs : mbsList) {
            for (const auto vpp : kChunkCounts) {
              for (int zero = 0; zero <= 3; ++zero) {
                for (int zb = 0; zb <= 1; ++zb) {
                 for (int layout = 0; layout < static_cast<int>(kLayouts.size()); ++layout) {
                  ++st.generated;
                  const std::int64_t modelParallel = tp * cp * pp;
                  const std::int64_t dp = space.gpus % modelParallel == 0 ? space.gpus / modelParallel : 0;
                  const Config c{tp, cp, pp, dp, ep, mbs, vpp, zero,
                                 vpp > 1 ? Schedule::kInterleaved : zb ? Schedule::kZeroBubble : Schedule::kOneFOneB,
                                 layout, etp};
                  double states = std::numeric_limits<double>::max();
                  if (const char* rule = pruneRule(space, c, zb != 0, states)) {
                    ++st.pruned[rule];
                  } else {
                    out.survivors.push_back(c);
                  }
                  // The least model states any configuration that got as far as the bound needs.
                  if (states < out.leastStates) {
                    out.leastStates = states;
                    out.leastStatesConfig = "tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " dp" + std::to_string(dp) +
                                            " zero" + std::to_string(zero);
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
  }

  return out;
}

}  // namespace colo::planner::detail
