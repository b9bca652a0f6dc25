#include "colo/planner/export.h"

#include <algorithm>
#include <sstream>

#include "colo/core/json.h"
#include "colo/core/rank_layout.h"

namespace colo::planner {
namespace {

// Whether Megatron's plain flags say the plan's split: equal chunks with virtual stages, or equal middle
// stages (uneven first and last through --decoder-first/last-pipeline-num-layers).
bool flagsExpressSplit(const Plan& p) {
  const auto& st = p.stages;
  // A chunk without a transformer layer (the embedding or the loss alone): Megatron refuses a first or
  // last stage of 0 layers, so the layout says it.
  if (std::any_of(st.begin(), st.end(), [](const StagePlan& c) { return c.layers == 0; })) return false;
  if (p.parallel.virtualStages > 1) {
    return std::all_of(st.begin(), st.end(), [&](const StagePlan& c) { return c.layers == st.front().layers; });
  }
  for (std::size_t s = 2; s + 1 < st.size(); ++s) {
    if (st[s].layers != st[1].layers) return false;
  }
  return true;
}

// Megatron-Core's --pipeline-model-parallel-layout: one "|"-separated entry per chunk, in colo's chunk
// order (chunk c*pp + p on stage p, Megatron's round-robin), E the embedding, t*N N layers, L the loss.
std::string megatronLayout(const Plan& p) {
  std::string out;
  for (std::size_t c = 0; c < p.stages.size(); ++c) {
    if (c > 0) out += "|";
    if (c == 0) out += "E";
    const auto n = p.stages[c].layers;
    if (n > 0) out += n == 1 ? "t" : "t*" + std::to_string(n);
    if (c + 1 == p.stages.size()) out += "L";
  }
  return out;
}

// A number as a command line takes it: 500000, 0.25, 1e+06 -> 1000000.
std::string formatNumber(double v) {
  std::ostringstream o;
  if (v == static_cast<double>(static_cast<std::int64_t>(v))) o << static_cast<std::int64_t>(v);
  else o << v;
  return o.str();
}

struct RecomputeSummary {
  RecomputePolicy policy = RecomputePolicy::kNone;
  std::int64_t maxLayersPerChunk = 0;
  bool uniform = true;
};

// Whether the plan's rank layout is Megatron-LM's --use-tp-pp-dp-mapping (order tp-cp-ep-pp-dp), which
// Megatron-Core accepts with pipelining only when the experts' data-parallel size equals the dense one:
// etp x ep = tp x cp (megatron/core/parallel_state.py, initialize_model_parallel; a dense model has
// etp = tp and ep = 1).
bool megatronPpDpMapping(const Plan& p) {
  const auto& q = p.parallel;
  if (q.rankOrder != std::vector<std::string>{"tp", "cp", "pp", "dp"}) return false;
  const std::int64_t etp = q.etp > 0 ? q.etp : q.tp;
  return q.pp == 1 || etp * q.ep == q.tp * q.cp;
}

RecomputeSummary summarize(const Plan& p) {
  RecomputeSummary r;
  for (const auto& s : p.stages) {
    if (s.recompute != RecomputePolicy::kNone) r.policy = s.recompute;
    r.maxLayersPerChunk = std::max(r.maxLayersPerChunk, s.recomputeLayers);
    if (s.recomputeLayers != s.layers && s.recomputeLayers != 0) r.uniform = false;
  }
  return r;
}

// Megatron-LM's parallel layout: degrees, expert dispatch, pipeline split, sequence parallelism.
void megatronParallelArgs(const Plan& p, std::ostream& a) {
  const auto& q = p.parallel;
  a << "--tensor-model-parallel-size " << q.tp << " \\\n--pipeline-model-parallel-size " << q.pp << " \\\n";
  if (q.cp > 1) a << "--context-parallel-size " << q.cp << " \\\n";
  if (q.cp > 1 && p.execution.cpCommType != CpCommType::kP2p) a << "--cp-comm-type " << toString(p.execution.cpCommType) << " \\\n";
  if (q.cp > 1 && p.execution.hierarchicalCpSizes.size() == 2) {
    a << "--hierarchical-context-parallel-sizes " << p.execution.hierarchicalCpSizes[0] << " " << p.execution.hierarchicalCpSizes[1] << " \\\n";
  }
  if (q.ep > 1) {
    // colo costs all-to-all dispatch (Megatron's default is allgather), or DeepEP's or HybridEP's through flex.
    a << "--expert-model-parallel-size " << q.ep << " \\\n";
    if (deduplicatesAcrossNodes(p.execution.moeDispatcher)) {
      a << "--moe-token-dispatcher-type flex \\\n--moe-flex-dispatcher-backend " << toString(p.execution.moeDispatcher) << " \\\n";
    } else {
      a << "--moe-token-dispatcher-type alltoall \\\n";
    }
    if (p.execution.epCommOverlap) a << "--overlap-moe-expert-parallel-comm \\\n";
  }
  if (q.etp > 0) a << "--expert-tensor-parallel-size " << q.etp << " \\\n";
  const bool layout = !flagsExpressSplit(p);
  if (layout) a << "--pipeline-model-parallel-layout \"" << megatronLayout(p) << "\" \\\n";
  if (q.virtualStages > 1 && !layout) a << "--num-layers-per-virtual-pipeline-stage " << p.stages.front().layers << " \\\n";
  if (q.sequenceParallel) a << "--sequence-parallel \\\n";
  // Megatron-LM lays ranks out tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping
  // (megatron/training/initialize.py); colo's tp-cp-pp-dp is the second (megatronPpDpMapping).
  if (megatronPpDpMapping(p)) a << "--use-tp-pp-dp-mapping \\\n";
  if (q.pp > 1 && q.virtualStages == 1 && !layout) {
    const auto first = p.stages.front().layers;
    const auto last = p.stages.back().layers;
    const auto middle = p.stages[p.stages.size() / 2].layers;
    if (first != middle) a << "--decoder-first-pipeline-num-layers " << first << " \\\n";
    if (last != middle) a << "--decoder-last-pipeline-num-layers " << last << " \\\n";
  }
}

// The batch and the dense architecture (shape, attention variants, norms, embeddings).
void megatronModelArgs(const Plan& p, std::ostream& a) {
  const ModelSpec& s = *p.model.spec;
  a << "--micro-batch-size " << p.microBatchSize << " \\\n--global-batch-size " << p.globalBatchSize << " \\\n";
  a << "--seq-length " << p.seqLen << " \\\n--max-position-embeddings "
    << std::max(p.seqLen, s.maxPositionEmbeddings) << " \\\n";
  a << "--num-layers " << s.numLayers << " \\\n--hidden-size " << s.hiddenSize << " \\\n--num-attention-heads "
    << s.numAttentionHeads << " \\\n--ffn-hidden-size " << s.ffnHiddenSize << " \\\n";
  if (s.kvHeads() != s.numAttentionHeads) a << "--group-query-attention \\\n--num-query-groups " << s.kvHeads() << " \\\n";
  if (s.headDim > 0) a << "--kv-channels " << s.headDim << " \\\n";
  if (s.norm == NormKind::kRmsNorm) a << "--normalization RMSNorm \\\n";
  if (s.activation == Activation::kSwiGlu) a << "--swiglu \\\n";
  if (s.positionEmbedding == PositionEmbedding::kRope) {
    a << "--position-embedding-type rope \\\n--rotary-base " << formatNumber(s.ropeTheta) << " \\\n";
    if (s.rotaryFraction < 1.0) a << "--rotary-percent " << formatNumber(s.rotaryFraction) << " \\\n";
  }
  if (!s.tieWordEmbeddings) a << "--untie-embeddings-and-output-weights \\\n";
  if (!s.qkvBias && !s.mlpBias) a << "--disable-bias-linear \\\n";
  // Megatron-Core's sliding window: (window - 1, 0), window keys with the query's own; --window-attn-skip-freq N makes every Nth layer
  // full attention, colo's global_attention_every. Per-head query/key norms; GPT-OSS's sinks.
  if (s.slidingWindow > 0) {
    a << "--window-size " << s.slidingWindow - 1 << ",0 \\\n";  // (left, right): left keys before the query and itself
    if (s.globalAttentionEvery > 0) a << "--window-attn-skip-freq " << s.globalAttentionEvery << " \\\n";
  }
  if (s.qkNorm) a << "--qk-layernorm \\\n";
  if (s.attentionSinks) a << "--softmax-type learnable \\\n";
  if (s.dropout == 0) a << "--attention-dropout 0.0 \\\n--hidden-dropout 0.0 \\\n";
}

// Mixture of experts, multi-token prediction and multi-latent attention.
void megatronExpertAndLatentArgs(const ModelSpec& s, std::ostream& a) {
  if (s.moe.enabled()) {
    a << "--num-experts " << s.moe.numExperts << " \\\n--moe-router-topk " << s.moe.topK << " \\\n";
    // Transformer Engine's GroupedLinear for the experts (one GEMM per local expert over four streams):
    // without the flag Megatron-Core runs its SequentialMLP, one expert after another. The job the export
    // describes is the grouped one, so its import says so (execution.te_grouped_gemm).
    a << "--moe-grouped-gemm \\\n";
    // Top-1 routing with softmax scores is refused unless the softmax comes before the selection.
    if (s.moe.topK == 1) a << "--moe-router-pre-softmax \\\n";
    if (s.moe.expertFfnHiddenSize > 0) a << "--moe-ffn-hidden-size " << s.moe.expertFfnHiddenSize << " \\\n";
    if (s.moe.sharedExpertFfnHiddenSize > 0) {
      a << "--moe-shared-expert-intermediate-size " << s.moe.sharedExpertFfnHiddenSize << " \\\n";
    }
    if (s.moe.routingGroups > 0) {
      a << "--moe-router-num-groups " << s.moe.routingGroups << " \\\n--moe-router-group-topk " << s.moe.routingGroupTopK << " \\\n";
    }
    if (s.moe.firstDenseLayers > 0 || s.moe.layerFrequency > 1) {
      // Megatron's per-layer pattern: 1 marks an MoE layer.
      std::string pattern = "[";
      for (std::int64_t l = 0; l < s.numLayers; ++l) pattern += std::string(l ? "," : "") + (s.moe.isMoeLayer(l) ? "1" : "0");
      a << "--moe-layer-freq \"" << pattern << "]\" \\\n";
    }
  }
  if (s.mtpLayers > 0) a << "--mtp-num-layers " << s.mtpLayers << " \\\n";
  if (s.mla.enabled()) {
    a << "--multi-latent-attention \\\n";
    if (s.mla.qLoraRank > 0) a << "--q-lora-rank " << s.mla.qLoraRank << " \\\n";
    a << "--kv-lora-rank " << s.mla.kvLoraRank << " \\\n--qk-head-dim " << s.mla.qkNopeHeadDim
      << " \\\n--qk-pos-emb-head-dim " << s.mla.qkRopeHeadDim << " \\\n--v-head-dim " << s.mla.vHeadDim << " \\\n";
  }
}

// Precision, attention kernels, recompute, the optimizer's sharding and offload, overlaps and the
// switches where the plan differs from Megatron-LM's defaults.
void megatronTrainingArgs(const Plan& p, const RecomputeSummary& r, std::ostream& a) {
  const auto& q = p.parallel;
  if (p.precision == DType::kFp16) a << "--fp16 \\\n";
  if (p.precision == DType::kBf16 || quantizedGemms(p.precision)) a << "--bf16 \\\n";
  if (p.precision == DType::kFp8 && p.execution.float8Recipe == Float8Recipe::kMxfp8) {
    // MXFP8 as Megatron-Bridge's bf16_with_mxfp8_mixed runs it: e4m3 throughout.
    a << "--fp8-format e4m3 \\\n--fp8-recipe mxfp8 \\\n";
    // The output layer in MXFP8 too (TransformerConfig.fp8_output_proj, an argument since 2026-05).
    if (p.execution.fp8OutputProj) a << "--fp8-output-proj \\\n";
  } else if (p.precision == DType::kFp8) {
    a << "--fp8-format hybrid \\\n";
    // Megatron-Core refuses moe_act and layernorm recompute under its default delayed scaling: current
    // (per-tensor) scaling, which colo's Transformer Engine fp8 stands for as well.
    const RecomputeModules& m = p.execution.recomputeModules;
    if (r.policy == RecomputePolicy::kSelective && (m.moeAct || m.layernorm)) a << "--fp8-recipe tensorwise \\\n";
  }
  if (p.precision == DType::kFp4) a << "--fp4-format e2m1 \\\n";
  if (p.execution.quantizedParams) a << (p.precision == DType::kFp4 ? "--fp4-param-gather" : "--fp8-param-gather") << " \\\n";
  // MXFP8 weights are all-gathered in bf16 through the gradient buffer (what colo costs); without it
  // Megatron would remap them into its parameter buffer, which Transformer Engine refuses for MXFP8.
  if (p.execution.quantizedParams && p.precision == DType::kFp8 && p.execution.float8Recipe == Float8Recipe::kMxfp8) {
    a << "--reuse-grad-buf-for-mxfp8-param-ag \\\n";
  }
  // --use-flash-attn is still parsed but nothing reads it; the backend is chosen by --attention-backend:
  // auto lets Transformer Engine take the GPU's fastest fused kernel (colo's flash), flash is the
  // flash-attn package (FlashAttention-2 as pip installs it: colo's flash2).
  const char* backend = !p.execution.flashAttention ? "unfused" : p.execution.flashAttention2 ? "flash" : "auto";
  a << "--attention-backend " << backend << " \\\n";
  // Selective recompute of no module (Bridge's recompute_modules: []) recomputes nothing: no flag, as
  // Megatron's --recompute-modules takes at least one name.
  if (r.policy == RecomputePolicy::kSelective && p.execution.recomputeModules.any()) {
    a << "--recompute-activations \\\n";
    // What it re-runs, when not the attention core alone (Megatron's default).
    if (!p.execution.recomputeModules.isDefault()) {
      a << "--recompute-modules";
      for (const auto& name : recomputeModuleNames(p.execution.recomputeModules)) a << " " << name;
      a << " \\\n";
    }
  }
  if (r.policy == RecomputePolicy::kFull) {
    a << "--recompute-granularity full \\\n--recompute-method block \\\n--recompute-num-layers " << r.maxLayersPerChunk
      << " \\\n";
  }
  if (p.offload.activationLayers > 0) a << "--cpu-offloading-num-layers " << p.offload.activationLayers << " \\\n";
  if (p.zeroStage >= 1) a << "--use-distributed-optimizer \\\n";
  if (p.execution.overlapGradReduce && q.dp > 1) a << "--overlap-grad-reduce \\\n";
  if (p.execution.overlapParamGather && p.execution.overlapGradReduce && p.zeroStage >= 1 && q.dp > 1) {
    a << "--overlap-param-gather \\\n";
  }
  if (p.offload.optimizerFraction > 0 && p.zeroStage >= 1) {
    a << "--optimizer-cpu-offload \\\n--use-precision-aware-optimizer \\\n--optimizer-offload-fraction "
      << formatNumber(p.offload.optimizerFraction) << " \\\n";
  }
  if (p.execution.tpCommOverlap && q.tp > 1) a << "--tp-comm-overlap \\\n";
  // Megatron-LM refuses the interleaved schedule without p2p overlap at pp 2 (validate_args).
  if (!p.execution.overlapP2pComm && q.pp > 2 && q.virtualStages > 1) a << "--no-overlap-p2p-communication \\\n";
  if (p.execution.gradAccumulation != GradAccumulation::kFused) a << "--no-gradient-accumulation-fusion \\\n";
  // The plan's step holds no NaN check unless it says so; Megatron-LM's is on by default.
  if (!p.execution.gradNanCheck) a << "--no-check-for-nan-in-loss-and-grad \\\n";
  if (p.execution.gradReduceBf16) a << "--grad-reduce-in-bf16 \\\n";
  if (p.execution.unfused.rotary) a << "--no-rope-fusion \\\n";
  if (p.execution.unfused.gatedActivation) a << "--no-bias-swiglu-fusion \\\n";
  // Megatron-Core's native loss fusion (cross_entropy_fusion_impl native, the default implementation).
  if (p.execution.nativeFusedCrossEntropy) a << "--cross-entropy-loss-fusion \\\n";
}

// What the job does differently from the plan, or what the plan says that pretrain_gpt.py cannot.
std::string megatronNotes(const Plan& p, const RecomputeSummary& r) {
  const ModelSpec& s = *p.model.spec;
  const auto& q = p.parallel;
  std::string header;
  if (p.zeroStage > 1) header += "# note: Megatron-LM shards optimizer states only (ZeRO-1); the plan's ZeRO-" + std::to_string(p.zeroStage) + " has no Megatron flag\n";
  if (q.rankOrder != std::vector<std::string>{"tp", "cp", "dp", "pp"} && !megatronPpDpMapping(p)) {
    const std::string order = rankOrderText(q);
    header += "# note: Megatron-LM lays ranks out tp-cp-dp-pp, or tp-cp-pp-dp with --use-tp-pp-dp-mapping when pp is 1 or the experts' "
              "data-parallel size equals the dense one (megatron/core/parallel_state.py); the plan's " + order + " is neither\n";
  }
  if (p.execution.fusedCrossEntropy) {
    header += p.execution.crossEntropyInPlace
                  ? "# note: the plan's loss is Transformer Engine's in-place fusion (--cross-entropy-loss-fusion --cross-entropy-fusion-impl te), which this Megatron-LM refuses (validate_args); its native fusion keeps an fp32 softmax\n"
                  : "# note: the plan's fused loss keeps no fp32 logits; Megatron-LM's native fusion (--cross-entropy-loss-fusion) keeps an fp32 softmax\n";
  }
  if (!p.execution.gradNanCheck) {
    header += "# note: the plan was costed without Megatron-LM's check of the gradients for NaN (execution.grad_nan_check), "
              "so the job turns it off; drop --no-check-for-nan-in-loss-and-grad to keep it (one more read of the gradient buffer a step)\n";
  }
  if (p.precision == DType::kFp16 && p.execution.gradNanCheck) {
    header += "# note: the plan checks its gradients for NaN, which Megatron-LM turns off under fp16 with a dynamic loss scale "
              "(validate_args); add --loss-scale to keep the check\n";
  }
  if (!p.execution.overlapP2pComm && q.pp == 2 && q.virtualStages > 1) {
    header += "# note: the plan waits for its pipeline sends; Megatron-LM overlaps them at pp 2 with virtual stages (it refuses "
              "--no-overlap-p2p-communication there), so the job may run faster than the plan's prediction\n";
  }
  if (s.norm == NormKind::kRmsNorm && (p.execution.unfused.rmsNorm || (p.execution.unfused.eagerFinalNorm() && s.finalNorm))) {
    header += std::string("# note: the plan was costed with PyTorch's eager RMSNorm") + (p.execution.unfused.rmsNorm ? "" : " after the last block") +
              "; Megatron-LM runs Transformer Engine's fused one, so the job may run faster than the plan's prediction\n";
  }
  if (!r.uniform) header += "# note: colo recomputes a different number of layers per stage; Megatron takes one count (the largest)\n";
  if (s.activation == Activation::kGeGlu) {
    header += "# note: pretrain_gpt.py has no flag for a GeLU-gated MLP (--quick-geglu is another activation); as written the MLP is "
              "plain GeLU: use Megatron-Bridge's model provider for this family\n";
  }
  if (s.sandwichNorm) header += "# note: the norms after attention and the MLP (Gemma) have no pretrain_gpt.py flag either\n";
  if (s.qkL2Norm) header += "# note: Llama 4's weightless query/key L2 norm has no pretrain_gpt.py flag (Megatron-Core's qk_l2_norm)\n";
  if (s.finalLogitSoftcap > 0) header += "# note: Gemma 2's final logit soft-capping has no pretrain_gpt.py flag\n";
  if (p.precision == DType::kFp8 && !transformerEngineRecipe(p.execution.float8Recipe)) {
    header += "# note: the plan was costed with torchao's " + toString(p.execution.float8Recipe) +
              " float8 recipe (torchtitan); Megatron-LM casts through Transformer Engine (--fp8-format), whose casts are fused and cost less\n";
  }
  if (s.attentionLogitSoftcap > 0) header += "# note: Gemma 2's attention logit soft-capping has no pretrain_gpt.py flag\n";
  if (p.execution.tpCommOverlap && q.tp > 1 && p.execution.tpOverlap == TpOverlap::kMicroPipeline) {
    header += "# note: the plan was costed with PyTorch's async TP (torchtitan); --tp-comm-overlap is Transformer Engine's userbuffers, which also hide the backward's reduce-scatters\n";
  }
  return header;
}

std::string megatron(const Plan& p) {
  const RecomputeSummary r = summarize(p);
  std::ostringstream a;
  megatronParallelArgs(p, a);
  megatronModelArgs(p, a);
  megatronExpertAndLatentArgs(*p.model.spec, a);
  megatronTrainingArgs(p, r, a);
  // What pretrain_gpt.py needs to start and a plan does not say: placeholders the shell refuses to run
  // without (${NAME:?why} stops with the message while NAME is unset).
  a << "--train-iters \"${TRAIN_ITERS:?set TRAIN_ITERS: optimizer steps to train}\" \\\n"
    << "--lr \"${LR:?set LR: the peak learning rate}\" \\\n"
    << "--tokenizer-type HuggingFaceTokenizer \\\n"
    << "--tokenizer-model \"${TOKENIZER_MODEL:?set TOKENIZER_MODEL: a Hugging Face tokenizer name or path}\" \\\n"
    << "--data-path \"${DATA_PATH:?set DATA_PATH: the prefix of a Megatron indexed dataset}\" \\\n";
  std::string text = a.str();
  text.erase(text.find_last_of('\\') - 1);  // no continuation after the last argument
  return "# Megatron-LM pretrain_gpt.py arguments for " + p.name +
         " (checked against data/export-schemas/megatron-lm.json)\n"
         "# set TRAIN_ITERS, LR, TOKENIZER_MODEL and DATA_PATH before launching: the plan does not say them\n" +
         megatronNotes(p, r) + text + "\n";
}

std::string deepspeed(const Plan& p) {
  Json j;
  j["train_batch_size"] = p.globalBatchSize;
  j["train_micro_batch_size_per_gpu"] = p.microBatchSize;
  j["gradient_accumulation_steps"] = p.numMicroBatches();
  j["gradient_clipping"] = 1.0;
  const bool lowBits = quantizedGemms(p.precision);
  j["bf16"] = {{"enabled", p.precision == DType::kBf16 || lowBits}};
  j["fp16"] = {{"enabled", p.precision == DType::kFp16}};
  Json zero = {{"stage", p.zeroStage}, {"overlap_comm", p.execution.overlapGradReduce}, {"contiguous_gradients", true}};
  if (p.offload.optimizerFraction > 0) {
    zero["offload_optimizer"] = {{"device", p.offload.target == OffloadTarget::kCpu ? "cpu" : "nvme"}, {"pin_memory", true}};
    if (p.offload.optimizerFraction < 1) zero["offload_optimizer"]["ratio"] = p.offload.optimizerFraction;
  }
  if (p.offload.paramsFraction > 0) zero["offload_param"] = {{"device", p.offload.target == OffloadTarget::kCpu ? "cpu" : "nvme"}};
  j["zero_optimization"] = zero;
  const auto r = summarize(p);
  if (r.policy != RecomputePolicy::kNone) {
    j["activation_checkpointing"] = {{"partition_activations", p.parallel.tp > 1},
                                     {"number_checkpoints", r.maxLayersPerChunk},
                                     {"contiguous_memory_optimization", false}};
  }
  // Stages and their partition come from Megatron-DeepSpeed's PipelineModule (its arguments), not this file.
  std::string comment = "tensor parallel " + std::to_string(p.parallel.tp) + " and pipeline " + std::to_string(p.parallel.pp) +
                        " are set in Megatron-DeepSpeed's arguments (--tensor-model-parallel-size, --pipeline-model-parallel-size";
  if (p.parallel.cp > 1) comment += ", --ds-sequence-parallel-size " + std::to_string(p.parallel.cp);
  if (p.parallel.pp == 1) comment += ", --no-pipeline-parallel";
  comment += ")";
  if (p.zeroStage == 3 && p.execution.perParameterGathers) {
    comment += "; the plan was costed with ZeRO-3 gathering one parameter at a time (DeepSpeed v0.3.13 to v0.5.4): "
               "DeepSpeed from v0.5.5 batches its gathers and runs faster than predicted";
  }
  if (lowBits) {
    comment += "; the plan runs its linear layers' GEMMs in " + toString(p.precision) +
               " (Transformer Engine), which a DeepSpeed config cannot say: bf16 here, the " + toString(p.precision) +
               " GEMMs only where the model's code uses Transformer Engine's layers";
  }
  if (r.policy == RecomputePolicy::kSelective && !p.execution.recomputeModules.isDefault()) {
    comment += "; the plan recomputes Megatron-Core's modules " + recomputeModulesLabel(p.execution.recomputeModules) +
               " (--recompute-modules), which DeepSpeed's activation checkpointing does not: it checkpoints whole layers, "
               "slower and with less memory than colo predicts";
  }
  if (p.offload.activationLayers > 0) {
    comment += "; the plan offloads the activations of its first " + std::to_string(p.offload.activationLayers) +
               " layers to host memory (Megatron-Core's --cpu-offloading-num-layers), which DeepSpeed does not: this job keeps "
               "them on the GPU and needs more memory than colo predicts";
  }
  j["comment"] = comment;
  return j.dump(2) + "\n";
}

std::string colossalai(const Plan& p) {
  std::ostringstream o;
  const auto& q = p.parallel;
  const auto r = summarize(p);
  // Expert parallelism exists only in the MoE plugin (HybridParallelPlugin takes no ep_size).
  const std::string plugin = q.ep > 1 ? "MoeHybridParallelPlugin" : "HybridParallelPlugin";
  o << "# Colossal-AI " << plugin << " for " << p.name << " (checked against data/export-schemas/colossalai.json)\n";
  std::string unevenStages;  // "8, 9, 10, ..." when the stages do not all hold as many layers
  const bool uneven = std::any_of(p.stages.begin(), p.stages.end(),
                                  [&](const StagePlan& st) { return st.layers != p.stages.front().layers; });
  if (uneven) {
    for (const auto& st : p.stages) unevenStages += (unevenStages.empty() ? "" : ", ") + std::to_string(st.layers);
    if (q.virtualStages > 1) {
      o << "# note: Colossal-AI takes one layer count per stage, not per model chunk: the plan's uneven chunks ("
        << unevenStages << " layers) run here as its default split, which colo costs otherwise\n";
    }
  }
  if (quantizedGemms(p.precision)) {
    o << "# note: the plan runs its linear layers' GEMMs in " << toString(p.precision)
      << " (Transformer Engine); the plugin's precision is bf16 (its fp8_communication casts collectives only), so this job "
         "runs them at 16 bits, slower than colo's prediction\n";
  }
  if (p.offload.activationLayers > 0) {
    o << "# note: the plan offloads the activations of its first " << p.offload.activationLayers
      << " layers to host memory (Megatron-Core's --cpu-offloading-num-layers), which the plugin does not: this job keeps them "
         "on the GPU and needs more memory than colo predicts\n";
  }
  if (q.cp > 1 && (p.execution.cpCommType == CpCommType::kA2aP2p || p.execution.cpCommType == CpCommType::kAllGather)) {
    o << "# note: Colossal-AI's sequence modes are ring_attn and all_to_all; the plan's " << toString(p.execution.cpCommType)
      << " exchange runs here as ring_attn (the p2p ring), which colo costs otherwise\n";
  }
  o
    << "from colossalai.booster import Booster\n"
    << (q.ep > 1 ? "from colossalai.booster.plugin.moe_hybrid_parallel_plugin import MoeHybridParallelPlugin\n\n"
                 : "from colossalai.booster.plugin import HybridParallelPlugin\n\n")
    << "plugin = " << plugin << "(\n"
    << "    tp_size=" << q.tp << ",\n"
    << "    pp_size=" << q.pp << ",\n";
  if (q.ep > 1) o << "    ep_size=" << q.ep << ",\n";
  // Context parallelism is the ring-attention (or all-to-all) sequence mode over sp_size ranks;
  // Megatron's sequence parallelism is split_gather over the tensor-parallel group.
  const bool sequence = q.sequenceParallel || q.cp > 1;
  o << "    enable_sequence_parallelism=" << (sequence ? "True" : "False") << ",\n";
  if (q.cp > 1) {
    o << "    sp_size=" << q.cp << ",\n    sequence_parallelism_mode=\""
      << (p.execution.cpCommType == CpCommType::kAllToAll ? "all_to_all" : "ring_attn") << "\",\n";
  } else if (q.sequenceParallel) {
    o << "    sequence_parallelism_mode=\"split_gather\",\n";
  }
  if (q.pp > 1) {
    o << "    num_microbatches=" << p.numMicroBatches() << ",\n";
    if (q.virtualStages > 1) o << "    pp_style=\"interleaved\",\n    num_model_chunks=" << q.virtualStages << ",\n";
    // Colossal-AI's PipelineStageManager takes one layer count per stage (it asserts the length is
    // pp_size and the sum the layers; colossalai/pipeline/stage_manager.py): uneven 1F1B splits go out
    // as it; an uneven interleaved split has no such list (the note at the top says so).
    if (q.virtualStages == 1 && !unevenStages.empty()) o << "    num_layers_per_stage=[" << unevenStages << "],\n";
  } else {
    o << "    microbatch_size=" << p.microBatchSize << ",\n";
  }
  o << "    zero_stage=" << p.zeroStage << ",\n"
    << "    precision=\"" << (p.precision == DType::kFp16 ? "fp16" : p.precision == DType::kFp32 ? "fp32" : "bf16") << "\",\n"
    << "    enable_flash_attention=" << (p.execution.flashAttention ? "True" : "False") << ",\n";
  if (p.offload.optimizerFraction > 0) o << "    cpu_offload=True,\n";
  if (r.policy != RecomputePolicy::kNone) {
    o << "    # gradient checkpointing: " << toString(r.policy) << " on up to " << r.maxLayersPerChunk
      << " layers per stage (enable it on the model: model.gradient_checkpointing_enable())\n";
  }
  if (r.policy == RecomputePolicy::kSelective && !p.execution.recomputeModules.isDefault()) {
    o << "    # the plan recomputes Megatron-Core's modules " << recomputeModulesLabel(p.execution.recomputeModules)
      << "; the model's gradient checkpointing re-runs whole layers: slower, with less memory than colo predicts\n";
  }
  o << "    max_norm=1.0,\n)\n"
    << "booster = Booster(plugin=plugin)\n"
    << "# micro-batch " << p.microBatchSize << ", global batch " << p.globalBatchSize << ", sequence " << p.seqLen << "\n";
  return o.str();
}

std::string launcher(const Plan& p, bool slurm, const std::string& planFile) {
  std::ostringstream o;
  const auto& c = p.cluster;
  // torchrun and SLURM count hosts, which on an NVLink domain of several hosts (NVL72) are its trays.
  const std::int64_t perHost = c.hostGpus();
  const std::int64_t hosts = c.totalGpus() / perHost;
  o << "#!/usr/bin/env bash\n";
  if (slurm) {
    o << "#SBATCH --job-name=colo-run\n#SBATCH --nodes=" << hosts << "\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node="
      << perHost << "\n#SBATCH --exclusive\n";
    if (perHost < c.gpusPerNode) {
      o << "# The plan costs NVLink domains of " << c.gpusPerNode << " GPUs (" << c.gpusPerNode / perHost
        << " hosts each): have the scheduler keep each domain's hosts in one NVLink rack (e.g. SLURM's topology/block plugin, "
           "--segment=" << c.gpusPerNode / perHost << ").\n";
    }
  }
  o << "# Launches colo-run on " << c.totalGpus() << " GPUs (" << hosts << " nodes x " << perHost
    << ") for the plan " << planFile << ".\n"
    << "# colo-run reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT as torchrun sets them.\n"
    << "set -euo pipefail\n";
  if (slurm) {
    o << "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
      << "MASTER_PORT=${MASTER_PORT:-29500}\n"
      << "srun torchrun --nnodes " << hosts << " --nproc-per-node " << perHost
      << " --rdzv-backend c10d --rdzv-endpoint \"$MASTER_ADDR:$MASTER_PORT\" --rdzv-id \"$SLURM_JOB_ID\" \\\n"
      << "  --no-python colo-run \"" << planFile << "\" \"$@\"\n";
  } else {
    o << ": \"${MASTER_ADDR:?set MASTER_ADDR to the first node's address}\"\n"
      << "MASTER_PORT=${MASTER_PORT:-29500}\n"
      << "NODE_RANK=${NODE_RANK:?set NODE_RANK on each node (0.." << hosts - 1 << ")}\n"
      << "torchrun --nnodes " << hosts << " --nproc-per-node " << perHost
      << " --node-rank \"$NODE_RANK\" --master-addr \"$MASTER_ADDR\" --master-port \"$MASTER_PORT\" \\\n"
      << "  --no-python colo-run \"" << planFile << "\" \"$@\"\n";
  }
  return o.str();
}

}  // namespace

Result<ExportFormat> parseExportFormat(const std::string& name) {
  if (name == "megatron") return ExportFormat::kMegatron;
  if (name == "deepspeed") return ExportFormat::kDeepSpeed;
  if (name == "colossalai") return ExportFormat::kColossalAi;
  if (name == "torchrun") return ExportFormat::kTorchrun;
  if (name == "slurm") return ExportFormat::kSlurm;
  return fail(Error::badInput("unknown export format \"" + name + "\" (expected megatron, deepspeed, colossalai, torchrun or slurm)"));
}

Result<std::string> exportPlan(const Plan& plan, ExportFormat format, const std::string& planFile) {
  switch (format) {
    case ExportFormat::kMegatron:
      if (!plan.model.spec) {
        return fail(Error::badInput("a Megatron-LM export needs the model's architecture; this plan holds a raw op graph"));
      }
      return megatron(plan);
    case ExportFormat::kDeepSpeed:
      if (plan.parallel.virtualStages > 1) {
        return fail(Error::badInput("parallel.virtual_stages " + std::to_string(plan.parallel.virtualStages) +
                                    ": DeepSpeed's pipeline engine runs one contiguous range of layers per stage (no "
                                    "interleaved schedule); export to Megatron-LM, or plan with --vpp 1"));
      }
      if (plan.parallel.cp > 1 && (plan.parallel.tp > 1 || plan.parallel.pp > 1)) {
        return fail(Error::badInput("parallel.cp " + std::to_string(plan.parallel.cp) + " with tp " + std::to_string(plan.parallel.tp) +
                                    " and pp " + std::to_string(plan.parallel.pp) +
                                    ": Megatron-DeepSpeed's sequence parallelism (Ulysses) runs with tp 1 and pp 1 only"));
      }
      if (plan.offload.optimizerFraction > 0 && plan.offload.optimizerFraction < 1 && plan.zeroStage != 3) {
        return fail(Error::badInput("offload.optimizer_fraction " + std::to_string(plan.offload.optimizerFraction) +
                                    " with zero_stage " + std::to_string(plan.zeroStage) +
                                    ": DeepSpeed offloads a fraction of the optimizer (offload_optimizer.ratio) under ZeRO-3 only"));
      }
      if (plan.parallel.pp > 1 && plan.zeroStage > 1) {
        return fail(Error::badInput("zero_stage " + std::to_string(plan.zeroStage) + " with pp " + std::to_string(plan.parallel.pp) +
                                    ": DeepSpeed's pipeline engine accepts ZeRO 0 or 1 only (FSDP2 with pipelining, as "
                                    "torchtitan runs it, has no DeepSpeed config)"));
      }
      return deepspeed(plan);
    case ExportFormat::kColossalAi: {
      // What the plugins' constructors refuse (data/export-schemas/colossalai.json).
      const auto& q = plan.parallel;
      auto refuse = [](const std::string& why) { return fail(Error::badInput(why)); };
      if (plan.zeroStage > 2) return refuse("zero_stage 3: Colossal-AI's hybrid-parallel plugins take ZeRO 0-2 (GeminiPlugin shards parameters, without tp or pp)");
      if (q.pp > 1 && plan.zeroStage > 1) return refuse("zero_stage 2 with pp " + std::to_string(q.pp) + ": the hybrid-parallel plugins take ZeRO 0 or 1 with pipeline parallelism");
      if (plan.zeroStage > 0 && plan.precision == DType::kFp32) return refuse("zero_stage with fp32: the plugins' ZeRO needs fp16 or bf16");
      if (plan.schedule == Schedule::kZeroBubble) return refuse("schedule zb: Colossal-AI's zero-bubble (zbv) is a V-schedule of two chunks per stage with its own scheduler nodes, not colo's ZB-H1");
      if (q.ep > 1 && q.cp > 1) return refuse("parallel.cp " + std::to_string(q.cp) + " with ep: MoeHybridParallelPlugin does not run ring attention");
      if (q.ep > 1 && q.dp % q.ep != 0) return refuse("parallel.ep " + std::to_string(q.ep) + ": MoeHybridParallelPlugin needs the data-parallel size " + std::to_string(q.dp) + " divisible by ep_size");
      if (plan.offload.paramsFraction > 0) return refuse("offload.params_fraction: the hybrid-parallel plugins offload optimizer states only (cpu_offload)");
      return colossalai(plan);
    }
    case ExportFormat::kTorchrun:
      return launcher(plan, false, planFile);
    case ExportFormat::kSlurm:
      return launcher(plan, true, planFile);
  }
  return fail(Error::internal("unknown export format"));
}

}  // namespace colo::planner
