// Plan consistency rules. Each rule names the plan field at fault, so a CLI user or a plan file author
// sees which value to change.
#include <algorithm>
#include <numeric>

#include "colo/core/plan.h"

#include "colo/core/limits.h"

namespace colo {

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

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// One rule's verdict: the error names the plan file and the field at fault.
struct Rules {
  const Plan& plan;
  const std::string& file;
  std::unexpected<Error> bad(const std::string& path, const std::string& message) const {
    return fail(Error::badInput(message, file, path));
  }
};

// Every degree at least 1 and at most colo's limits; their product the cluster's GPUs; a rank order.
Result<void> checkDegrees(const Rules& r) {
  const auto& p = r.plan.parallel;
  for (const auto& [value, key] : {std::pair{p.dp, "dp"}, std::pair{p.tp, "tp"}, std::pair{p.pp, "pp"},
                                   std::pair{p.cp, "cp"}, std::pair{p.ep, "ep"}, std::pair{p.virtualStages, "virtual_stages"}}) {
    if (value < 1) return r.bad(std::string("/parallel/") + key, "must be at least 1, got " + str(value));
  }
  for (const auto& [value, key] : {std::pair{p.dp, "dp"}, std::pair{p.tp, "tp"}, std::pair{p.pp, "pp"},
                                   std::pair{p.cp, "cp"}, std::pair{p.ep, "ep"}}) {
    if (value > limits::kMaxGpus) {
      return r.bad(std::string("/parallel/") + key, "must be at most " + str(limits::kMaxGpus) + ", got " + str(value));
    }
  }
  if (p.virtualStages > limits::kMaxLayers) {
    return r.bad("/parallel/virtual_stages", "must be at most " + str(limits::kMaxLayers) + ", got " + str(p.virtualStages));
  }
  const std::int64_t gpus = r.plan.cluster.totalGpus();
  const std::string product = str(p.dp) + "*" + str(p.tp) + "*" + str(p.pp) + "*" + str(p.cp);
  // Each factor is at most 2^20, so the products are formed two at a time and checked before the next.
  if (p.dp * p.tp > limits::kMaxGpus || p.dp * p.tp * p.pp > limits::kMaxGpus ||
      p.dp * p.tp * p.pp * p.cp > limits::kMaxGpus) {
    return r.bad("/parallel", "dp*tp*pp*cp = " + product + " is more than the " + str(limits::kMaxGpus) + " GPUs colo plans for");
  }
  if (p.dp * p.tp * p.pp * p.cp != gpus) {
    return r.bad("/parallel", "dp*tp*pp*cp = " + product + " = " + str(p.dp * p.tp * p.pp * p.cp) +
                                  " does not match the cluster's " + str(gpus) + " GPUs");
  }
  std::vector<std::string> order = p.rankOrder;
  std::sort(order.begin(), order.end());
  if (order != std::vector<std::string>{"cp", "dp", "pp", "tp"}) {
    return r.bad("/parallel/rank_order", "must name tp, cp, dp and pp once each, innermost first");
  }
  return {};
}

// Heads divide over tp (and over cp for all-to-all context parallelism); experts over ep, and the
// expert mesh folds over the stage's ranks. A raw op graph may not state heads; then only what it
// states is checked.
Result<void> checkModelShape(const Rules& r) {
  const Plan& plan = r.plan;
  const auto& p = plan.parallel;
  const std::int64_t heads = plan.model.spec ? plan.model.spec->numAttentionHeads : plan.model.graph->info().numAttentionHeads;
  const std::int64_t kvHeads = plan.model.spec ? plan.model.spec->kvHeads() : plan.model.graph->info().numKvHeads;
  if (heads > 0 && heads % p.tp != 0) {
    return r.bad("/parallel/tp", "num_attention_heads " + str(heads) + " is not divisible by tp " + str(p.tp));
  }
  if (kvHeads > 0 && kvHeads % p.tp != 0) {
    return r.bad("/parallel/tp", "num_kv_heads " + str(kvHeads) + " is not divisible by tp " + str(p.tp) +
                                     " (Megatron shards key/value groups across tensor-parallel ranks)");
  }
  if (p.sequenceParallel && p.tp == 1) return r.bad("/parallel/sequence_parallel", "needs tp > 1, got tp 1");
  // All-to-all context parallelism re-splits each tensor-parallel rank's heads over the cp ranks.
  if (p.cp > 1 && plan.execution.cpCommType == CpCommType::kAllToAll && heads > 0 &&
      ((heads / p.tp) % p.cp != 0 || (kvHeads > 0 && (kvHeads / p.tp) % p.cp != 0))) {
    return r.bad("/execution/cp_comm_type", "a2a splits each tensor-parallel rank's heads over cp " + str(p.cp) + ": " +
                                                str(heads / p.tp) + " heads and " + str(kvHeads / p.tp) +
                                                " key/value heads per rank must divide by it (use p2p or all_gather)");
  }
  // Hierarchical context parallelism: an all-to-all level of consecutive cp ranks times a ring level.
  const auto& levels = plan.execution.hierarchicalCpSizes;
  if (plan.execution.cpCommType == CpCommType::kA2aP2p) {
    // (By division: the sizes are read up to 2^53 each, and their product must not overflow.)
    if (levels.size() != 2 || levels[0] < 1 || levels[1] < 1 || p.cp % levels[0] != 0 || p.cp / levels[0] != levels[1]) {
      std::string got = "[";
      for (std::size_t i = 0; i < levels.size(); ++i) got += (i ? ", " : "") + str(levels[i]);
      return r.bad("/execution/hierarchical_cp_sizes", "a2a+p2p needs [all-to-all size, ring size] with a product of cp " +
                                                           str(p.cp) + ", got " + got + "]");
    }
    if (heads > 0 && ((heads / p.tp) % levels[0] != 0 || (kvHeads > 0 && (kvHeads / p.tp) % levels[0] != 0))) {
      return r.bad("/execution/hierarchical_cp_sizes", "the all-to-all level splits each tensor-parallel rank's heads over " +
                                                           str(levels[0]) + ": " + str(heads / p.tp) + " heads and " +
                                                           str(kvHeads / p.tp) + " key/value heads per rank must divide by it");
    }
  } else if (!levels.empty()) {
    return r.bad("/execution/hierarchical_cp_sizes", "only with cp_comm_type a2a+p2p, got cp_comm_type " +
                                                         toString(plan.execution.cpCommType));
  }
  const bool moe = plan.model.spec && plan.model.spec->moe.enabled();
  if (p.etp < 0 || p.etp > limits::kMaxGpus) {
    return r.bad("/parallel/expert_tp", "must be from 1 to " + str(limits::kMaxGpus) + " (0 or absent: tp), got " + str(p.etp));
  }
  if (p.etp > 0 && !moe) return r.bad("/parallel/expert_tp", "expert tensor parallelism needs a mixture-of-experts model");
  if (p.ep > 1 || p.etp > 0) {
    if (!moe) return r.bad("/parallel/ep", "expert parallelism needs a mixture-of-experts model, got ep " + str(p.ep));
    // The expert layers' etp x ep x edp mesh folds over the stage's tp x cp x dp ranks.
    if ((p.tp * p.cp * p.dp) % (p.expertTp() * p.ep) != 0) {
      return r.bad("/parallel/ep", "expert_tp*ep = " + str(p.expertTp()) + "*" + str(p.ep) + " must divide tp*cp*dp = " +
                                       str(p.tp * p.cp * p.dp) + " (with expert_tp = tp, the default: ep must divide dp*cp " +
                                       str(p.dp * p.cp) + ")");
    }
    if (plan.model.spec->moe.numExperts % p.ep != 0) {
      return r.bad("/parallel/ep", "num_experts " + str(plan.model.spec->moe.numExperts) + " is not divisible by ep " +
                                       str(p.ep));
    }
  }
  return {};
}

// Batch sizes and the sequence: within limits, the global batch a whole number of micro-batches per
// data-parallel rank, the sequence divisible as context and sequence parallelism cut it, and the model
// expandable at that length.
Result<void> checkBatch(const Rules& r) {
  const Plan& plan = r.plan;
  const auto& p = plan.parallel;
  if (plan.seqLen < 1) return r.bad("/batch/seq_len", "must be at least 1, got " + str(plan.seqLen));
  if (plan.seqLen > limits::kMaxSeqLen) {
    return r.bad("/batch/seq_len", "must be at most " + str(limits::kMaxSeqLen) + ", got " + str(plan.seqLen));
  }
  for (const auto& [value, key] : {std::pair{plan.microBatchSize, "micro_batch_size"},
                                   std::pair{plan.globalBatchSize, "global_batch_size"}}) {
    if (value > limits::kMaxBatch) {
      return r.bad(std::string("/batch/") + key, "must be at most " + str(limits::kMaxBatch) + ", got " + str(value));
    }
  }
  if (plan.microBatchSize > 0 && plan.microBatchSize * plan.seqLen > limits::kMaxMicroBatchTokens) {
    return r.bad("/batch/micro_batch_size", "micro_batch_size x seq_len = " + str(plan.microBatchSize) + " x " +
                                                str(plan.seqLen) + " tokens, more than the " +
                                                str(limits::kMaxMicroBatchTokens) + " colo plans for");
  }
  if (plan.microBatchSize < 1) return r.bad("/batch/micro_batch_size", "must be at least 1, got " + str(plan.microBatchSize));
  if (plan.globalBatchSize < 1) return r.bad("/batch/global_batch_size", "must be at least 1, got " + str(plan.globalBatchSize));
  if (plan.globalBatchSize % (plan.microBatchSize * p.dp) != 0) {
    return r.bad("/batch/global_batch_size", "global batch " + str(plan.globalBatchSize) +
                                                 " is not divisible by micro_batch_size*dp = " + str(plan.microBatchSize) +
                                                 "*" + str(p.dp) + " = " + str(plan.microBatchSize * p.dp));
  }
  if (p.cp > 1 && plan.seqLen % (2 * p.cp) != 0) {
    return r.bad("/parallel/cp", "seq_len " + str(plan.seqLen) + " must be divisible by 2*cp = " + str(2 * p.cp) +
                                     " (load-balanced causal context parallelism cuts it into 2*cp chunks)");
  }
  if (p.sequenceParallel && plan.seqLen % (p.tp * p.cp) != 0) {
    return r.bad("/parallel/sequence_parallel", "seq_len " + str(plan.seqLen) + " is not divisible by tp*cp " +
                                                    str(p.tp * p.cp));
  }
  // Whether the graph can be built at this length, without building it (a search validates many plans).
  if (auto graph = plan.model.checkExpand(GraphOptions{plan.seqLen, 1, bytesPerElement(plan.precision)}); !graph) {
    Error e = graph.error();
    e.file = r.file;
    e.path = "/batch/seq_len";
    return fail(e);
  }
  return {};
}

// One stage entry per pipeline chunk, each with a layer or more, together the model's layers; the
// interleaved schedule exactly when there are virtual stages.
Result<void> checkPipeline(const Rules& r) {
  const Plan& plan = r.plan;
  const auto& p = plan.parallel;
  const std::int64_t chunks = p.pp * p.virtualStages;
  if (static_cast<std::int64_t>(plan.stages.size()) != chunks) {
    return r.bad("/stages", "needs pp*virtual_stages = " + str(chunks) + " entries, got " +
                                str(static_cast<std::int64_t>(plan.stages.size())));
  }
  std::int64_t assigned = 0;
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const auto& s = plan.stages[i];
    const std::string at = "/stages/" + std::to_string(i);
    // The first chunk may hold only the embedding and the last only the output layer and loss
    // (Megatron's --account-for-embedding/loss-in-pipeline-split, a layout's "E|" and "|L").
    const bool end = i == 0 || i + 1 == plan.stages.size();
    if (s.layers < (end && chunks > 1 ? 0 : 1)) {
      return r.bad(at + "/layers", std::string(end && chunks > 1 ? "must not be negative" : "every pipeline chunk between the first and the last needs at least one layer") +
                                       ", got " + str(s.layers));
    }
    if (s.layers > limits::kMaxLayers) {
      return r.bad(at + "/layers", "must be at most " + str(limits::kMaxLayers) + ", got " + str(s.layers));
    }
    if (s.recomputeLayers < 0 || s.recomputeLayers > s.layers) {
      return r.bad(at + "/recompute_layers", "must be between 0 and the chunk's " + str(s.layers) + " layers, got " +
                                                 str(s.recomputeLayers));
    }
    if (s.recompute == RecomputePolicy::kNone && s.recomputeLayers != 0) {
      return r.bad(at + "/recompute_layers", "is " + str(s.recomputeLayers) + " but recompute is \"none\"");
    }
    assigned += s.layers;
  }
  if (assigned != plan.model.numLayers()) {
    return r.bad("/stages", "the stages hold " + str(assigned) + " layers but the model has " + str(plan.model.numLayers()));
  }
  if (p.virtualStages > 1 && plan.schedule != Schedule::kInterleaved) {
    return r.bad("/schedule", "virtual_stages " + str(p.virtualStages) + " needs the \"interleaved\" schedule, got \"" +
                                  toString(plan.schedule) + "\"");
  }
  if (plan.schedule == Schedule::kInterleaved) {
    if (p.pp == 1 || p.virtualStages == 1) {
      return r.bad("/schedule", "the interleaved schedule needs pp > 1 and virtual_stages > 1, got pp " + str(p.pp) +
                                    ", virtual_stages " + str(p.virtualStages));
    }
    if (plan.numMicroBatches() % p.pp != 0) {
      return r.bad("/batch/global_batch_size", "the interleaved schedule needs the micro-batch count (" +
                                                   str(plan.numMicroBatches()) + ") to be a multiple of pp " + str(p.pp));
    }
  }
  return {};
}

// Execution settings that only make sense together with others.
Result<void> checkExecution(const Rules& r) {
  const Plan& plan = r.plan;
  const auto& p = plan.parallel;
  const auto& x = plan.execution;
  // Megatron-Core's conditions for overlapping the expert all-to-alls (transformer_config.py).
  if (x.epCommOverlap) {
    if (p.ep < 2) return r.bad("/execution/ep_comm_overlap", "needs expert parallelism (ep > 1), got ep " + str(p.ep));
    if (p.pp > 1 && p.virtualStages < 2) {
      return r.bad("/execution/ep_comm_overlap", "with pp " + str(p.pp) + " needs virtual stages (the interleaved schedule)");
    }
    for (const auto& s : plan.stages) {
      if (s.recompute == RecomputePolicy::kFull && s.recomputeLayers > 0) {
        return r.bad("/execution/ep_comm_overlap", "cannot be combined with full recompute");
      }
    }
  }
  // Megatron-Core's rules for recompute_modules (TransformerConfig.__post_init__): moe_act needs the
  // grouped-GEMM experts (colo's MoE layers are), mla_up_proj latent attention, and the whole-MoE
  // module cannot be re-run while its all-to-alls hide behind another micro-batch.
  const RecomputeModules modules = recomputesSelectively(plan) ? x.recomputeModules : RecomputeModules{};
  if (modules.moeAct && (!plan.model.spec || !plan.model.spec->moe.enabled())) {
    return r.bad("/execution/recompute_modules", "moe_act re-runs the experts' activation and needs a mixture-of-experts model");
  }
  if (modules.mlaUpProj && (!plan.model.spec || !plan.model.spec->mla.enabled())) {
    return r.bad("/execution/recompute_modules", "mla_up_proj re-runs latent attention's up-projections and needs a model with "
                                                 "multi-head latent attention");
  }
  if (modules.moe && x.epCommOverlap) {
    return r.bad("/execution/recompute_modules", "moe cannot be combined with ep_comm_overlap (Megatron-Core refuses it)");
  }
  // Transformer Engine hands autograd a placeholder only when the weight-gradient GEMM accumulates
  // into main_grad itself (fuse_wgrad_accumulation, Megatron's gradient accumulation fusion).
  if (x.teDummyWgrads && x.gradAccumulation != GradAccumulation::kFused) {
    return r.bad("/execution/te_dummy_wgrads", "needs grad_accumulation fused (the weight-gradient GEMM accumulating into "
                                               "main_grad), got " + toString(x.gradAccumulation));
  }
  if (x.gradReduceBf16) {
    const bool bf16 = plan.precision == DType::kBf16 || quantizedGemms(plan.precision);
    const bool buffer = x.gradAccumulation == GradAccumulation::kFused || x.gradAccumulation == GradAccumulation::kMainGrad;
    if (!bf16 || !buffer || x.fp32Params) {
      return r.bad("/execution/grad_reduce_in_bf16", "is Megatron's bf16 gradient buffer: it needs bf16, fp8 or fp4 precision, grad_accumulation "
                                                     "fused or main_grad and no fp32 parameters, got " + toString(plan.precision) + ", " +
                                                     toString(x.gradAccumulation) + (x.fp32Params ? ", fp32 parameters" : ""));
    }
  }
  if (x.flashAttention2 && !x.flashAttention) {
    return r.bad("/execution/attention", "FlashAttention-2 kernels are fused attention: flash2 with unfused attention is contradictory");
  }
  if (x.torchCrossEntropy && x.fusedCrossEntropy) {
    return r.bad("/execution/torch_cross_entropy", "is PyTorch's unfused loss, and fused_cross_entropy is set too: choose one");
  }
  if (x.nativeFusedCrossEntropy && (x.fusedCrossEntropy || x.torchCrossEntropy)) {
    return r.bad("/execution/native_fused_cross_entropy", std::string("is Megatron's native fusion of its own loss, and ") +
                                                             (x.fusedCrossEntropy ? "fused_cross_entropy" : "torch_cross_entropy") +
                                                             " is set too: choose one");
  }
  if (x.crossEntropyInPlace && !x.fusedCrossEntropy) {
    return r.bad("/execution/cross_entropy_in_place", "describes a fused cross-entropy: set fused_cross_entropy too");
  }
  if (x.float8Recipe != Float8Recipe::kTransformerEngine && plan.precision != DType::kFp8) {
    return r.bad("/execution/float8_recipe", "\"" + toString(x.float8Recipe) +
                                                 "\" casts to float8 and needs precision fp8, got " + toString(plan.precision));
  }
  // Transformer Engine supports MXFP8 from compute capability 10.0 (Blackwell), the generation whose
  // tensor cores also run fp4: colo's mark of it.
  if (x.float8Recipe == Float8Recipe::kMxfp8 && !plan.cluster.gpu.hasPeak(DType::kFp4)) {
    return r.bad("/execution/float8_recipe", "\"mxfp8\" needs a Blackwell GPU (Transformer Engine's MXFP8 needs compute "
                                             "capability 10.0 or later), got " + plan.cluster.gpu.name);
  }
  if (x.quantizedParams) {
    if (auto why = quantizedWeightsRefusal(plan)) return r.bad("/execution/quantized_params", *why);
  }
  if (x.fp8OutputProj) {
    if (auto why = fp8OutputProjRefusal(plan)) return r.bad("/execution/fp8_output_proj", *why);
  }
  return {};
}

// ZeRO stage and offload fractions, the offload target the cluster has, the precision its GPU has.
Result<void> checkMemoryManagement(const Rules& r) {
  const Plan& plan = r.plan;
  if (plan.zeroStage < 0 || plan.zeroStage > 3) return r.bad("/zero_stage", "must be 0, 1, 2 or 3, got " + str(plan.zeroStage));
  const auto& o = plan.offload;
  if (!(o.optimizerFraction >= 0 && o.optimizerFraction <= 1)) {
    return r.bad("/offload/optimizer_fraction", "must be between 0 and 1, got " + std::to_string(o.optimizerFraction));
  }
  if (!(o.paramsFraction >= 0 && o.paramsFraction <= 1)) {
    return r.bad("/offload/params_fraction", "must be between 0 and 1, got " + std::to_string(o.paramsFraction));
  }
  if (o.optimizerFraction > 0 && plan.zeroStage < 1) {
    return r.bad("/offload/optimizer_fraction", "optimizer offload needs zero_stage >= 1, got zero_stage 0");
  }
  if (o.paramsFraction > 0 && plan.zeroStage != 3) {
    return r.bad("/offload/params_fraction", "parameter offload needs zero_stage 3, got zero_stage " + str(plan.zeroStage));
  }
  if (o.target == OffloadTarget::kNvme && (o.optimizerFraction > 0 || o.paramsFraction > 0) &&
      plan.cluster.nvmeBytesPerSecond <= 0) {
    return r.bad("/offload/target", "offload to nvme, but the cluster " + plan.cluster.name + " has no NVMe bandwidth");
  }
  if (o.activationLayers > 0) {
    // Megatron-Core's TransformerConfig refuses CPU offloading with pipeline parallelism, with
    // activation recomputation, and for as many layers as the model has.
    const std::string n = "offloads the activations of " + str(o.activationLayers) + " layers";
    if (plan.parallel.pp > 1 || plan.parallel.virtualStages > 1) {
      return r.bad("/offload/activation_layers", n + ", which needs pp 1 without virtual stages, got pp " + str(plan.parallel.pp) +
                                                     " x " + str(plan.parallel.virtualStages));
    }
    // Megatron runs one micro-batch's forward and backward at a time at pp 1 (forward_backward_no_pipelining).
    if (plan.schedule == Schedule::kGpipe) {
      return r.bad("/offload/activation_layers", n + ", which runs one micro-batch's forward and backward at a time, not gpipe");
    }
    std::int64_t layers = 0;
    for (const auto& st : plan.stages) {
      layers += st.layers;
      if (st.recompute != RecomputePolicy::kNone && st.recomputeLayers > 0) {
        return r.bad("/offload/activation_layers", n + ", which cannot be combined with recompute (" + toString(st.recompute) + ")");
      }
    }
    if (o.activationLayers >= layers) {
      return r.bad("/offload/activation_layers", n + ", but the model has " + str(layers) + ": at most " + str(layers - 1));
    }
  }
  if (!plan.cluster.gpu.hasPeak(plan.precision)) {
    return r.bad("/precision", plan.cluster.gpu.name + " has no " + toString(plan.precision) +
                                   " peak in the cluster file (it lacks that precision)");
  }
  return {};
}

}  // namespace

bool recomputesSelectively(const Plan& plan) {
  return std::any_of(plan.stages.begin(), plan.stages.end(), [](const StagePlan& st) {
    return st.recompute == RecomputePolicy::kSelective && st.recomputeLayers > 0;
  });
}

// Megatron's --fp8-param-gather needs the distributed optimizer (arguments.py); colo's FSDP (ZeRO-3)
// runs 16-bit parameters.
std::optional<std::string> quantizedWeightsRefusal(const Plan& plan) {
  const Execution& x = plan.execution;
  if (!quantizedGemms(plan.precision) || !transformerEngineRecipe(x.float8Recipe)) {
    return "keeps Transformer Engine's weights quantized: it needs precision fp8 or fp4 with a Transformer Engine recipe, got " +
           toString(plan.precision) + (plan.precision == DType::kFp8 ? " with " + toString(x.float8Recipe) : "");
  }
  if (x.fp32Params) return "keeps the weights quantized, and fp32_params keeps them in fp32: choose one";
  if (plan.zeroStage != 1 && plan.zeroStage != 2) {
    return "needs the distributed optimizer (zero_stage 1 or 2), as Megatron's --fp8-param-gather does, got zero_stage " +
           std::to_string(plan.zeroStage);
  }
  return std::nullopt;
}

// Why Megatron-Core cannot run the output layer as a TE linear under MXFP8 (fp8_output_proj), or nothing.
std::optional<std::string> fp8OutputProjRefusal(const Plan& plan) {
  const Execution& x = plan.execution;
  // TransformerConfig.__post_init__ raises without fp8 and the MXFP8 recipe.
  if (plan.precision != DType::kFp8 || x.float8Recipe != Float8Recipe::kMxfp8) {
    return "runs the output layer under MXFP8 and needs precision fp8 with float8_recipe mxfp8, got " + toString(plan.precision) +
           (plan.precision == DType::kFp8 ? " with " + toString(x.float8Recipe) : "");
  }
  // Only GPTModel builds TELMHeadColumnParallelLinear; BERT's head stays Megatron's own linear.
  if (plan.model.spec && !plan.model.spec->causal()) return std::string("is a GPT model's option: an encoder's head stays at 16 bits");
  // TELMHeadColumnParallelLinear refuses a weight it does not allocate (skip_weight_param_allocation), which a
  // tied head on the embedding's own stage is.
  if (plan.model.spec && plan.model.spec->tieWordEmbeddings && plan.parallel.pp == 1) {
    return std::string("cannot tie the output layer to the embedding on one stage (Megatron-Core's TE head allocates its own weight): "
                       "untie the embeddings or use pp > 1");
  }
  // The TE head is built without a userbuffers name, which Transformer Engine's tp_comm_overlap needs.
  if (x.tpCommOverlap && x.tpOverlap == TpOverlap::kUserbuffers && plan.parallel.tp > 1) {
    return std::string("cannot run with Transformer Engine's userbuffers (tp_comm_overlap) at tp > 1: the TE head has no buffer of its own");
  }
  return std::nullopt;
}

// The rules in a fixed order (degrees, model shape, batch, pipeline, execution, memory): a plan that breaks
// several is told the first, the same one every time.
Result<void> validatePlan(const Plan& plan, const std::string& file) {
  const Rules rules{plan, file};
  for (const auto check : {checkDegrees, checkModelShape, checkBatch, checkPipeline, checkExecution, checkMemoryManagement}) {
    if (auto ok = check(rules); !ok) return ok;
  }
  return {};
}

}  // namespace colo
