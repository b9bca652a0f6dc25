// colo-run's capability list: what the executor trains, in one place that the executor enforces and the
// planner filters by (search --runnable, colo-studio's "runs" column).
#include "colo/core/runnable.h"

namespace colo {

Result<void> checkRunnableModel(const Model& model) {
  auto bad = [](const std::string& why) { return fail(Error::badInput(why)); };
  if (!model.spec) return bad("model " + model.name() + ": the executor builds models from a colo.model/1 spec or HF config, not a raw op graph");
  const ModelSpec& m = *model.spec;
  if (m.architecture != Architecture::kDecoder || m.input != InputKind::kTokens) {
    return bad("model " + m.name + ": the executor trains decoder language models (GPT- and LLaMA-style)");
  }

  if (m.mla.enabled()) return bad("model " + m.name + ": multi-head latent attention is not implemented by the executor");
  if (m.positionEmbedding == PositionEmbedding::kAlibi) return bad("model " + m.name + ": ALiBi positions are not implemented by the executor");
  if (m.slidingWindow > 0 || m.attentionChunkSize > 0) {
    return bad("model " + m.name + ": sliding-window and chunked attention are not implemented by the executor");
  }
  if (m.mtpLayers > 0) return bad("model " + m.name + ": multi-token prediction modules are not implemented by the executor");
  if (m.qkNorm || m.sandwichNorm || m.attentionSinks) {
    return bad("model " + m.name + ": query/key norms, post-norms and attention sinks are not implemented by the executor");
  }
  if (m.embeddingNorm || m.pooler || m.typeVocabSize > 0 || m.embeddingSize > 0 || !m.lmHead) {
    return bad("model " + m.name + ": embedding norms, poolers, token types and projected embeddings are not implemented by the executor");
  }
  return {};
}

Result<void> checkRunnable(const Plan& plan) {
  auto bad = [](const std::string& why) { return fail(Error::badInput(why)); };
  const auto& p = plan.parallel;
  // A per-operator plan runs only where it equals its degree-level fields (autoparallel marks it).
  if (plan.operatorPlan.is_object() && !plan.operatorPlan.value("runnable", false)) {
    return bad("operator_plan: " + plan.operatorPlan.value("expressed_as", std::string("simulation-only")) +
               " (the executor runs tensor, sequence, data and pipeline parallelism as the degree fields give them)");
  }
  if (auto ok = checkRunnableModel(plan.model); !ok) return ok;
  const ModelSpec& m = *plan.model.spec;
  if (plan.precision == DType::kFp16 || quantizedGemms(plan.precision)) {
    return bad("precision " + toString(plan.precision) + ": the executor trains in fp32 or bf16 mixed precision (fp16 needs loss "
               "scaling, fp8 and fp4 a scaling recipe; neither is implemented)");
  }
  if (m.moe.enabled()) {
    if (p.cp > 1) return bad("parallel.cp = " + std::to_string(p.cp) + ": the executor's MoE layers run without context parallelism");
    if (p.etp > 0 && p.etp != p.tp) {
      return bad("parallel.expert_tp = " + std::to_string(p.etp) + ": the executor splits experts over tp (expert_tp = tp)");
    }
    if (m.moe.numExperts % p.ep != 0) {
      return bad("parallel.ep = " + std::to_string(p.ep) + " must divide the " + std::to_string(m.moe.numExperts) + " experts");
    }
  }
  if (p.cp > 1) {
    if (plan.execution.cpCommType != CpCommType::kP2p) {
      return bad("execution.cp_comm_type = " + toString(plan.execution.cpCommType) + ": the executor's context parallelism is the p2p ring");
    }
    if (m.dropout > 0) return bad("model " + m.name + ": dropout with context parallelism (cp " + std::to_string(p.cp) + ") is not implemented by the executor");
    if (p.sequenceParallel && (plan.seqLen / p.cp) % p.tp != 0) {
      return bad("batch.seq_len = " + std::to_string(plan.seqLen) + ": with cp " + std::to_string(p.cp) + " and sequence parallelism each rank's " +
                 std::to_string(plan.seqLen / p.cp) + " tokens must divide by tp " + std::to_string(p.tp));
    }
  }
  if (plan.offload.activationLayers > 0) {
    return bad("offload.activation_layers = " + std::to_string(plan.offload.activationLayers) +
               ": the executor keeps every layer's activations where it computes them (no activation offload)");
  }
  if (plan.offload.paramsFraction > 0) {
    return bad("offload.params_fraction: the executor offloads optimizer states (ZeRO-Offload), not parameters");
  }
  if (plan.offload.optimizerFraction > 0 && plan.offload.target != OffloadTarget::kCpu) {
    return bad("offload.target = nvme: the executor offloads to host memory only");
  }
  if (plan.offload.optimizerFraction > 0 && plan.optimizer != Optimizer::kAdamW) {
    return bad("offload with optimizer " + toString(plan.optimizer) + ": the executor's host step is AdamW (LAMB and LARS need "
               "whole-parameter norms across the host and device parts)");
  }
  if (plan.execution.moeDispatcher != MoeDispatcher::kAllToAll || plan.execution.epCommOverlap) {
    return bad("execution.moe_dispatcher / ep_comm_overlap: the executor dispatches tokens with plain all-to-alls, not overlapped");
  }
  if (plan.zeroStage >= 2 && plan.execution.gradSync == GradSync::kStep) {
    return bad("execution.grad_sync = step: the executor reduce-scatters sharded gradients every micro-batch (micro_batch)");
  }
  // ZeRO-3 holds exactly FSDP's layout (fp32 shards, 16-bit copies only while a unit is gathered).
  if (plan.execution.fp32Params && plan.precision != DType::kFp32 && plan.zeroStage != 3) {
    return bad("execution.fp32_params with zero_stage " + std::to_string(plan.zeroStage) + ": below ZeRO-3 the executor keeps "
               "16-bit weights beside fp32 master copies (Megatron's layout), not fp32 parameters as FSDP does");
  }
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    if (plan.stages[s].recompute == RecomputePolicy::kOp && plan.stages[s].recomputeLayers > 0) {
      return bad("stages[" + std::to_string(s) + "].recompute = op: per-op selective recompute is not implemented by the "
                 "executor (it runs none, selective and full)");
    }
  }
  if (recomputesSelectively(plan) && !plan.execution.recomputeModules.isDefault()) {
    return bad("execution.recompute_modules = " + recomputeModulesLabel(plan.execution.recomputeModules) +
               ": the executor's selective recompute re-runs the attention core only (core_attn)");
  }
  if (m.numAttentionHeads % p.tp != 0 || m.kvHeads() % p.tp != 0) {
    return bad("model " + m.name + ": " + std::to_string(m.numAttentionHeads) + " heads and " + std::to_string(m.kvHeads()) +
               " key/value heads must divide by tp = " + std::to_string(p.tp));
  }
  if (m.ffnHiddenSize % p.tp != 0) return bad("model " + m.name + ": ffn_hidden_size " + std::to_string(m.ffnHiddenSize) + " must divide by tp");
  if (m.positionEmbedding == PositionEmbedding::kLearned && plan.seqLen > m.maxPositionEmbeddings) {
    return bad("batch.seq_len = " + std::to_string(plan.seqLen) + " exceeds the model's " + std::to_string(m.maxPositionEmbeddings) + " learned positions");
  }
  if (p.sequenceParallel && plan.seqLen % p.tp != 0) return bad("sequence parallelism needs seq_len divisible by tp");
  return {};
}

bool runnable(const Plan& plan) { return checkRunnable(plan).has_value(); }

Result<void> checkStartedByHand(const Plan& plan) {
  const ClusterSpec& c = plan.cluster;
  if (c.nodes <= 1 || c.gpusPerNode <= 1) return {};
  const auto& q = plan.parallel;
  return fail(Error::badInput("the plan spans " + std::to_string(c.nodes) + " nodes of " + std::to_string(c.gpusPerNode) + " GPUs (" +
                              std::to_string(q.tp * q.pp * q.dp * q.cp) + " ranks): start it on each node with torchrun or SLURM "
                              "(colo-plan export --format torchrun|slurm)"));
}

}  // namespace colo
