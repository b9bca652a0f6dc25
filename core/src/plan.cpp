// Plan consistency rules. Each rule names the plan field at fault, so a CLI user or a plan file author
// sees which value to change.
#include <algorithm>
#include <numeric>

#include "colo/core/plan.h"

#include "colo/core/limits.h"

namespace colo {

std::string toString(Schedule value) {
  switch (value) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::kOneFOneB: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZeroBubble: return "zb";
  }
  return "1f1b";
}

std::string toString(RecomputePolicy value) {
  switch (value) {
    case RecomputePolicy::kNone: return "none";
    case RecomputePolicy::kSelective: return "selective";
    case RecomputePolicy::kFull: return "full";
    case RecomputePolicy::kOp: return "op";
  }
  return "none";
}

std::string toString(OffloadTarget value) { return value == OffloadTarget::kCpu ? "cpu" : "nvme"; }

std::string toString(CpCommType value) {
  switch (value) {
    case CpCommType::kP2p:
      return "p2p";
    case CpCommType::kAllGather:
      return "all_gather";
    case CpCommType::kAllToAll:
      return "a2a";
  }
  return "p2p";
}

Result<CpCommType> parseCpCommType(const std::string& name) {
  if (name == "p2p") return CpCommType::kP2p;
  if (name == "all_gather" || name == "allgather") return CpCommType::kAllGather;
  if (name == "a2a" || name == "all_to_all" || name == "alltoall") return CpCommType::kAllToAll;
  return fail(Error::badInput("unknown context-parallel exchange \"" + name + "\" (expected p2p, all_gather or a2a)"));
}

std::string toString(TpOverlap value) { return value == TpOverlap::kUserbuffers ? "userbuffers" : "micro_pipeline"; }

Result<TpOverlap> parseTpOverlap(const std::string& name) {
  if (name == "userbuffers") return TpOverlap::kUserbuffers;
  if (name == "micro_pipeline") return TpOverlap::kMicroPipeline;
  return fail(Error::badInput("unknown tensor-parallel overlap \"" + name + "\" (expected userbuffers or micro_pipeline)"));
}

std::string toString(GradAccumulation value) {
  switch (value) {
    case GradAccumulation::kFused: return "fused";
    case GradAccumulation::kMainGrad: return "main_grad";
    case GradAccumulation::kAutograd: return "autograd";
    case GradAccumulation::kFp32Copy: return "fp32_copy";
  }
  return "fused";
}

Result<GradAccumulation> parseGradAccumulation(const std::string& name) {
  for (const GradAccumulation g :
       {GradAccumulation::kFused, GradAccumulation::kMainGrad, GradAccumulation::kAutograd, GradAccumulation::kFp32Copy}) {
    if (toString(g) == name) return g;
  }
  return fail(Error::badInput("unknown gradient accumulation \"" + name +
                              "\" (expected one of: fused, main_grad, autograd, fp32_copy)"));
}

std::string toString(GradSync value) { return value == GradSync::kStep ? "step" : "micro_batch"; }

Result<GradSync> parseGradSync(const std::string& name) {
  if (name == "micro_batch") return GradSync::kMicroBatch;
  if (name == "step") return GradSync::kStep;
  return fail(Error::badInput("unknown gradient sync \"" + name + "\" (expected micro_batch or step)"));
}

std::string toString(MoeDispatcher value) { return value == MoeDispatcher::kDeepEp ? "deepep" : "alltoall"; }

Result<MoeDispatcher> parseMoeDispatcher(const std::string& name) {
  if (name == "alltoall") return MoeDispatcher::kAllToAll;
  if (name == "deepep") return MoeDispatcher::kDeepEp;
  return fail(Error::badInput("unknown MoE dispatcher \"" + name + "\" (expected alltoall or deepep)"));
}

std::string toString(Float8Recipe value) {
  switch (value) {
    case Float8Recipe::kTensorwise: return "tensorwise";
    case Float8Recipe::kRowwise: return "rowwise";
    case Float8Recipe::kRowwiseGwHp: return "rowwise_with_gw_hp";
    case Float8Recipe::kTransformerEngine: break;
  }
  return "transformer_engine";
}

Result<Float8Recipe> parseFloat8Recipe(const std::string& name) {
  for (const Float8Recipe r :
       {Float8Recipe::kTransformerEngine, Float8Recipe::kTensorwise, Float8Recipe::kRowwise, Float8Recipe::kRowwiseGwHp}) {
    if (toString(r) == name) return r;
  }
  return fail(Error::badInput("unknown float8 recipe \"" + name +
                              "\" (expected one of: transformer_engine, tensorwise, rowwise, rowwise_with_gw_hp)"));
}

std::string toString(Optimizer value) {
  switch (value) {
    case Optimizer::kAdamW: return "adamw";
    case Optimizer::kLamb: return "lamb";
    case Optimizer::kLars: return "lars";
  }
  return "adamw";
}

Result<Optimizer> parseOptimizer(const std::string& name) {
  for (const Optimizer o : {Optimizer::kAdamW, Optimizer::kLamb, Optimizer::kLars}) {
    if (toString(o) == name) return o;
  }
  return fail(Error::badInput("unknown optimizer \"" + name + "\" (expected one of: adamw, lamb, lars)"));
}

int optimizerMoments(Optimizer value) { return value == Optimizer::kLars ? 1 : 2; }

Result<Schedule> parseSchedule(const std::string& name) {
  for (const Schedule s : {Schedule::kGpipe, Schedule::kOneFOneB, Schedule::kInterleaved, Schedule::kZeroBubble}) {
    if (toString(s) == name) return s;
  }
  return fail(Error::badInput("unknown schedule \"" + name + "\" (expected one of: gpipe, 1f1b, interleaved, zb)"));
}

Result<RecomputePolicy> parseRecompute(const std::string& name) {
  for (const RecomputePolicy p :
       {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull, RecomputePolicy::kOp}) {
    if (toString(p) == name) return p;
  }
  return fail(Error::badInput("unknown recompute policy \"" + name + "\" (expected one of: none, selective, full, op)"));
}

std::int64_t Plan::numMicroBatches() const {
  const std::int64_t perStep = microBatchSize * parallel.dp;
  return perStep > 0 ? globalBatchSize / perStep : 0;
}

std::vector<std::int64_t> Plan::layerToStage() const {
  std::vector<std::int64_t> out;
  const std::int64_t pp = std::max<std::int64_t>(1, parallel.pp);
  for (std::size_t chunk = 0; chunk < stages.size(); ++chunk) {
    for (std::int64_t i = 0; i < stages[chunk].layers; ++i) out.push_back(static_cast<std::int64_t>(chunk) % pp);
  }
  return out;
}

std::vector<StagePlan> uniformStages(std::int64_t layers, std::int64_t chunks, RecomputePolicy policy) {
  std::vector<StagePlan> out;
  if (chunks <= 0) return out;
  for (std::int64_t c = 0; c < chunks; ++c) {
    StagePlan s;
    s.layers = layers / chunks + (c < layers % chunks ? 1 : 0);
    s.recompute = policy;
    s.recomputeLayers = policy == RecomputePolicy::kNone ? 0 : s.layers;
    out.push_back(s);
  }
  return out;
}

Result<void> validatePlan(const Plan& plan, const std::string& file) {
  auto bad = [&](const std::string& path, const std::string& message) {
    return fail(Error::badInput(message, file, path));
  };
  const auto& p = plan.parallel;
  const auto str = [](std::int64_t v) { return std::to_string(v); };
  for (const auto& [value, key] : {std::pair{p.dp, "dp"}, std::pair{p.tp, "tp"}, std::pair{p.pp, "pp"},
                                   std::pair{p.cp, "cp"}, std::pair{p.ep, "ep"}, std::pair{p.virtualStages, "virtual_stages"}}) {
    if (value < 1) return bad(std::string("/parallel/") + key, "must be at least 1, got " + str(value));
  }
  for (const auto& [value, key] : {std::pair{p.dp, "dp"}, std::pair{p.tp, "tp"}, std::pair{p.pp, "pp"},
                                   std::pair{p.cp, "cp"}, std::pair{p.ep, "ep"}}) {
    if (value > limits::kMaxGpus) {
      return bad(std::string("/parallel/") + key, "must be at most " + str(limits::kMaxGpus) + ", got " + str(value));
    }
  }
  if (p.virtualStages > limits::kMaxLayers) {
    return bad("/parallel/virtual_stages", "must be at most " + str(limits::kMaxLayers) + ", got " + str(p.virtualStages));
  }
  const std::int64_t gpus = plan.cluster.totalGpus();
  // Each factor is at most 2^20, so the products are formed two at a time and checked before the next.
  if (p.dp * p.tp > limits::kMaxGpus || p.dp * p.tp * p.pp > limits::kMaxGpus ||
      p.dp * p.tp * p.pp * p.cp > limits::kMaxGpus) {
    return bad("/parallel", "dp*tp*pp*cp = " + str(p.dp) + "*" + str(p.tp) + "*" + str(p.pp) + "*" + str(p.cp) +
                                " is more than the " + str(limits::kMaxGpus) + " GPUs colo plans for");
  }
  if (p.dp * p.tp * p.pp * p.cp != gpus) {
    return bad("/parallel", "dp*tp*pp*cp = " + str(p.dp) + "*" + str(p.tp) + "*" + str(p.pp) + "*" + str(p.cp) + " = " +
                                str(p.dp * p.tp * p.pp * p.cp) + " does not match the cluster's " + str(gpus) + " GPUs");
  }
  {
    std::vector<std::string> order = p.rankOrder;
    std::sort(order.begin(), order.end());
    if (order != std::vector<std::string>{"cp", "dp", "pp", "tp"}) {
      return bad("/parallel/rank_order", "must name tp, cp, dp and pp once each, innermost first");
    }
  }

  // Model-shape rules. A raw op graph may not state heads; then only what it states is checked.
  const std::int64_t heads = plan.model.spec ? plan.model.spec->numAttentionHeads : plan.model.graph->info().numAttentionHeads;
  const std::int64_t kvHeads = plan.model.spec ? plan.model.spec->kvHeads() : plan.model.graph->info().numKvHeads;
  const std::int64_t layers = plan.model.numLayers();
  if (heads > 0 && heads % p.tp != 0) {
    return bad("/parallel/tp", "num_attention_heads " + str(heads) + " is not divisible by tp " + str(p.tp));
  }
  if (kvHeads > 0 && kvHeads % p.tp != 0) {
    return bad("/parallel/tp", "num_kv_heads " + str(kvHeads) + " is not divisible by tp " + str(p.tp) +
                                   " (Megatron shards key/value groups across tensor-parallel ranks)");
  }
  if (p.sequenceParallel && p.tp == 1) return bad("/parallel/sequence_parallel", "needs tp > 1, got tp 1");
  // All-to-all context parallelism re-splits each tensor-parallel rank's heads over the cp ranks.
  if (p.cp > 1 && plan.execution.cpCommType == CpCommType::kAllToAll && heads > 0 &&
      ((heads / p.tp) % p.cp != 0 || (kvHeads > 0 && (kvHeads / p.tp) % p.cp != 0))) {
    return bad("/execution/cp_comm_type", "a2a splits each tensor-parallel rank's heads over cp " + str(p.cp) + ": " +
                                              str(heads / p.tp) + " heads and " + str(kvHeads / p.tp) +
                                              " key/value heads per rank must divide by it (use p2p or all_gather)");
  }
  const bool moe = plan.model.spec && plan.model.spec->moe.enabled();
  if (p.etp < 0 || p.etp > limits::kMaxGpus) {
    return bad("/parallel/expert_tp", "must be from 1 to " + str(limits::kMaxGpus) + " (0 or absent: tp), got " + str(p.etp));
  }
  if (p.etp > 0 && !moe) return bad("/parallel/expert_tp", "expert tensor parallelism needs a mixture-of-experts model");
  if (p.ep > 1 || p.etp > 0) {
    if (!moe) return bad("/parallel/ep", "expert parallelism needs a mixture-of-experts model, got ep " + str(p.ep));
    // The expert layers' etp x ep x edp mesh folds over the stage's tp x cp x dp ranks.
    if ((p.tp * p.cp * p.dp) % (p.expertTp() * p.ep) != 0) {
      return bad("/parallel/ep", "expert_tp*ep = " + str(p.expertTp()) + "*" + str(p.ep) + " must divide tp*cp*dp = " +
                                     str(p.tp * p.cp * p.dp) + " (with expert_tp = tp, the default: ep must divide dp*cp " +
                                     str(p.dp * p.cp) + ")");
    }
    if (plan.model.spec->moe.numExperts % p.ep != 0) {
      return bad("/parallel/ep", "num_experts " + str(plan.model.spec->moe.numExperts) + " is not divisible by ep " +
                                     str(p.ep));
    }
  }

  // Batch and sequence.
  if (plan.seqLen < 1) return bad("/batch/seq_len", "must be at least 1, got " + str(plan.seqLen));
  if (plan.seqLen > limits::kMaxSeqLen) {
    return bad("/batch/seq_len", "must be at most " + str(limits::kMaxSeqLen) + ", got " + str(plan.seqLen));
  }
  for (const auto& [value, key] : {std::pair{plan.microBatchSize, "micro_batch_size"},
                                   std::pair{plan.globalBatchSize, "global_batch_size"}}) {
    if (value > limits::kMaxBatch) {
      return bad(std::string("/batch/") + key, "must be at most " + str(limits::kMaxBatch) + ", got " + str(value));
    }
  }
  if (plan.microBatchSize > 0 && plan.microBatchSize * plan.seqLen > limits::kMaxMicroBatchTokens) {
    return bad("/batch/micro_batch_size", "micro_batch_size x seq_len = " + str(plan.microBatchSize) + " x " +
                                              str(plan.seqLen) + " tokens, more than the " +
                                              str(limits::kMaxMicroBatchTokens) + " colo plans for");
  }
  if (plan.microBatchSize < 1) return bad("/batch/micro_batch_size", "must be at least 1, got " + str(plan.microBatchSize));
  if (plan.globalBatchSize < 1) return bad("/batch/global_batch_size", "must be at least 1, got " + str(plan.globalBatchSize));
  if (plan.globalBatchSize % (plan.microBatchSize * p.dp) != 0) {
    return bad("/batch/global_batch_size", "global batch " + str(plan.globalBatchSize) +
                                               " is not divisible by micro_batch_size*dp = " + str(plan.microBatchSize) +
                                               "*" + str(p.dp) + " = " + str(plan.microBatchSize * p.dp));
  }
  if (p.cp > 1 && plan.seqLen % (2 * p.cp) != 0) {
    return bad("/parallel/cp", "seq_len " + str(plan.seqLen) + " must be divisible by 2*cp = " + str(2 * p.cp) +
                                   " (load-balanced causal context parallelism cuts it into 2*cp chunks)");
  }
  if (p.sequenceParallel && plan.seqLen % (p.tp * p.cp) != 0) {
    return bad("/parallel/sequence_parallel", "seq_len " + str(plan.seqLen) + " is not divisible by tp*cp " +
                                                  str(p.tp * p.cp));
  }
  if (auto graph = plan.model.expand(GraphOptions{plan.seqLen, 1, bytesPerElement(plan.precision)}); !graph) {
    Error e = graph.error();
    e.file = file;
    e.path = "/batch/seq_len";
    return fail(e);
  }

  // Pipeline.
  const std::int64_t chunks = p.pp * p.virtualStages;
  if (static_cast<std::int64_t>(plan.stages.size()) != chunks) {
    return bad("/stages", "needs pp*virtual_stages = " + str(chunks) + " entries, got " + str(static_cast<std::int64_t>(plan.stages.size())));
  }
  std::int64_t assigned = 0;
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const auto& s = plan.stages[i];
    const std::string at = "/stages/" + std::to_string(i);
    if (s.layers < 1) return bad(at + "/layers", "every pipeline chunk needs at least one layer, got " + str(s.layers));
    if (s.layers > limits::kMaxLayers) return bad(at + "/layers", "must be at most " + str(limits::kMaxLayers) + ", got " + str(s.layers));
    if (s.recomputeLayers < 0 || s.recomputeLayers > s.layers) {
      return bad(at + "/recompute_layers", "must be between 0 and the chunk's " + str(s.layers) + " layers, got " +
                                               str(s.recomputeLayers));
    }
    if (s.recompute == RecomputePolicy::kNone && s.recomputeLayers != 0) {
      return bad(at + "/recompute_layers", "is " + str(s.recomputeLayers) + " but recompute is \"none\"");
    }
    assigned += s.layers;
  }
  if (assigned != layers) {
    return bad("/stages", "the stages hold " + str(assigned) + " layers but the model has " + str(layers));
  }
  if (p.virtualStages > 1 && plan.schedule != Schedule::kInterleaved) {
    return bad("/schedule", "virtual_stages " + str(p.virtualStages) + " needs the \"interleaved\" schedule, got \"" +
                                toString(plan.schedule) + "\"");
  }
  if (plan.schedule == Schedule::kInterleaved) {
    if (p.pp == 1 || p.virtualStages == 1) {
      return bad("/schedule", "the interleaved schedule needs pp > 1 and virtual_stages > 1, got pp " + str(p.pp) +
                                  ", virtual_stages " + str(p.virtualStages));
    }
    if (plan.numMicroBatches() % p.pp != 0) {
      return bad("/batch/global_batch_size", "the interleaved schedule needs the micro-batch count (" +
                                                 str(plan.numMicroBatches()) + ") to be a multiple of pp " + str(p.pp));
    }
  }

  // Megatron-Core's conditions for overlapping the expert all-to-alls (transformer_config.py).
  if (plan.execution.epCommOverlap) {
    if (p.ep < 2) return bad("/execution/ep_comm_overlap", "needs expert parallelism (ep > 1), got ep " + str(p.ep));
    if (p.pp > 1 && p.virtualStages < 2) {
      return bad("/execution/ep_comm_overlap", "with pp " + str(p.pp) + " needs virtual stages (the interleaved schedule)");
    }
    for (const auto& s : plan.stages) {
      if (s.recompute == RecomputePolicy::kFull && s.recomputeLayers > 0) {
        return bad("/execution/ep_comm_overlap", "cannot be combined with full recompute");
      }
    }
  }

  // Transformer Engine hands autograd a placeholder only when the weight-gradient GEMM accumulates
  // into main_grad itself (fuse_wgrad_accumulation, Megatron's gradient accumulation fusion).
  if (plan.execution.teDummyWgrads && plan.execution.gradAccumulation != GradAccumulation::kFused) {
    return bad("/execution/te_dummy_wgrads", "needs grad_accumulation fused (the weight-gradient GEMM accumulating into "
                                             "main_grad), got " + toString(plan.execution.gradAccumulation));
  }

  if (plan.execution.crossEntropyInPlace && !plan.execution.fusedCrossEntropy) {
    return bad("/execution/cross_entropy_in_place", "describes a fused cross-entropy: set fused_cross_entropy too");
  }

  if (plan.execution.float8Recipe != Float8Recipe::kTransformerEngine && plan.precision != DType::kFp8) {
    return bad("/execution/float8_recipe", "\"" + toString(plan.execution.float8Recipe) +
                                               "\" casts to float8 and needs precision fp8, got " + toString(plan.precision));
  }

  // Memory management.
  if (plan.zeroStage < 0 || plan.zeroStage > 3) return bad("/zero_stage", "must be 0, 1, 2 or 3, got " + str(plan.zeroStage));
  const auto& o = plan.offload;
  if (!(o.optimizerFraction >= 0 && o.optimizerFraction <= 1)) {
    return bad("/offload/optimizer_fraction", "must be between 0 and 1, got " + std::to_string(o.optimizerFraction));
  }
  if (!(o.paramsFraction >= 0 && o.paramsFraction <= 1)) {
    return bad("/offload/params_fraction", "must be between 0 and 1, got " + std::to_string(o.paramsFraction));
  }
  if (o.optimizerFraction > 0 && plan.zeroStage < 1) {
    return bad("/offload/optimizer_fraction", "optimizer offload needs zero_stage >= 1, got zero_stage 0");
  }
  if (o.paramsFraction > 0 && plan.zeroStage != 3) {
    return bad("/offload/params_fraction", "parameter offload needs zero_stage 3, got zero_stage " + str(plan.zeroStage));
  }
  if (o.target == OffloadTarget::kNvme && (o.optimizerFraction > 0 || o.paramsFraction > 0) &&
      plan.cluster.nvmeBytesPerSecond <= 0) {
    return bad("/offload/target", "offload to nvme, but the cluster " + plan.cluster.name + " has no NVMe bandwidth");
  }
  if (!plan.cluster.gpu.hasPeak(plan.precision)) {
    return bad("/precision", plan.cluster.gpu.name + " has no " + toString(plan.precision) +
                                 " peak in the cluster file (it lacks that precision)");
  }
  return {};
}

}  // namespace colo
