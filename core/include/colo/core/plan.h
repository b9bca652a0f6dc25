#pragma once
/// \file
/// Plan: one hybrid-parallel training configuration, self-contained (it embeds the model and the
/// cluster), with the predictions made for it and where it came from. File format `colo.plan/1`.
/// validatePlan() rejects the option combinations that would otherwise fail only at run time.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "colo/core/cluster.h"
#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/model.h"

namespace colo {

enum class Schedule { kGpipe, kOneFOneB, kInterleaved, kZeroBubble };
/// What a recomputed layer keeps between its forward and backward (docs/costmodel.md, "Recompute").
/// kSelective: Megatron's (drops the attention core's quadratic activations; nothing under
/// FlashAttention). kOp: torchtitan's per-op selective checkpointing (selective_ac_option "op"): keeps
/// the layer input, the attention kernel's output and every other matrix product, recomputes the rest.
/// kFull: keeps the layer input only.
enum class RecomputePolicy { kNone, kSelective, kFull, kOp };
enum class OffloadTarget { kCpu, kNvme };
/// How the gradients of successive micro-batches are summed before the data-parallel reduction: the
/// framework decides, and it costs a pass over every local parameter per micro-batch unless fused.
enum class GradAccumulation {
  kFused,     ///< the weight-gradient GEMM accumulates into fp32 main_grad (Megatron's gradient-accumulation fusion)
  kMainGrad,  ///< a backward hook adds each 16-bit gradient into main_grad (Megatron-LM 2021)
  kAutograd,  ///< PyTorch's AccumulateGrad adds into the 16-bit .grad in place, from the second micro-batch
  kFp32Copy,  ///< DeepSpeed's BF16 optimizer: upcast and add into fp32 copies, all-reduced whole
};

/// When sharded gradients (ZeRO >= 2) leave a micro-batch: reduce-scattered into the shard during each
/// micro-batch's backward (DeepSpeed ZeRO-2/3, colo-run, FSDP with gradient sync on), or summed
/// unsharded and reduce-scattered once after the last one (FSDP/FSDP2 with gradient sync off until the
/// last backward, which PyTorch's pipelining does for every FSDP stage; torchtitan then also keeps each
/// stage's layers gathered from its first forward to its last backward).
enum class GradSync {
  kMicroBatch,  ///< "micro_batch": every micro-batch, gradient memory sharded
  kStep,        ///< "step": once per step, gradient memory whole until then
};
[[nodiscard]] std::string toString(GradSync value);  ///< micro_batch, step
[[nodiscard]] Result<GradSync> parseGradSync(const std::string& name);

/// How an MoE layer's tokens reach their experts' ranks and come back: all-to-alls that send every
/// (token, expert) copy apart (Megatron-Core's alltoall dispatcher, colo-run), or the flex
/// dispatcher's hierarchical kernels, DeepEP's or NVIDIA's HybridEP (Megatron-Core's
/// --moe-flex-dispatcher-backend deepep / hybridep), that send a token once to each node holding any
/// of its experts and forward it inside the node over NVLink. colo costs the two backends alike
/// (docs/costmodel.md, "Expert parallelism").
enum class MoeDispatcher { kAllToAll, kDeepEp, kHybridEp };
[[nodiscard]] std::string toString(MoeDispatcher value);  ///< alltoall, deepep, hybridep
/// Whether the dispatcher sends a token across nodes once per destination node (DeepEP, HybridEP).
[[nodiscard]] inline bool deduplicatesAcrossNodes(MoeDispatcher value) { return value != MoeDispatcher::kAllToAll; }
[[nodiscard]] Result<MoeDispatcher> parseMoeDispatcher(const std::string& name);

/// How an fp8 run casts the linear layers' operands to float8 (docs/costmodel.md, "FP8").
/// kTransformerEngine: Transformer Engine's delayed or current scaling; each cast is fused into the
/// kernel before the GEMM (LayerNorm, activation) and not costed apart. The others are torchao's
/// dynamic-scaling recipes (torchtitan's float8.recipe_name), whose casts are kernels of their own:
/// kTensorwise (one scale per tensor; torchtitan then runs tensor parallelism's all-gathers in fp8),
/// kRowwise (one scale per row; every operand cast along both axes), kRowwiseGwHp (rowwise, with the
/// weight-gradient GEMM kept in bf16). kMxfp8: Transformer Engine's MXFP8 block scaling (one scale per 32
/// elements, Blackwell only), its casts fused as kTransformerEngine's; it keeps separate row- and
/// column-wise copies of a quantized weight where per-tensor scaling on Blackwell keeps one.
enum class Float8Recipe { kTransformerEngine, kTensorwise, kRowwise, kRowwiseGwHp, kMxfp8 };
[[nodiscard]] std::string toString(Float8Recipe value);  ///< transformer_engine, tensorwise, rowwise, rowwise_with_gw_hp, mxfp8
[[nodiscard]] Result<Float8Recipe> parseFloat8Recipe(const std::string& name);
/// Whether the recipe is Transformer Engine's (per-tensor or MXFP8): casts fused into the kernels
/// before the GEMMs, not torchao's kernels of their own.
[[nodiscard]] inline bool transformerEngineRecipe(Float8Recipe r) {
  return r == Float8Recipe::kTransformerEngine || r == Float8Recipe::kMxfp8;
}

/// The optimizer: its states per parameter decide the optimizer memory (docs/costmodel.md).
/// kAdamW: two fp32 moments. kLamb: Adam's moments with a per-parameter trust ratio (You et al. 2019,
/// for batches of 32k-64k). kLars: one momentum buffer with a per-parameter trust ratio (You et al. 2017).
enum class Optimizer { kAdamW, kLamb, kLars };
[[nodiscard]] std::string toString(Optimizer value);  ///< adamw, lamb, lars
[[nodiscard]] Result<Optimizer> parseOptimizer(const std::string& name);
/// fp32 states per parameter besides the master weights: 2 (AdamW, LAMB) or 1 (LARS).
[[nodiscard]] int optimizerMoments(Optimizer value);

[[nodiscard]] std::string toString(Schedule value);     ///< gpipe, 1f1b, interleaved, zb
[[nodiscard]] std::string toString(RecomputePolicy value);  ///< none, selective, full
[[nodiscard]] std::string toString(OffloadTarget value);    ///< cpu, nvme
[[nodiscard]] std::string toString(GradAccumulation value); ///< fused, main_grad, autograd, fp32_copy

/// How context-parallel ranks exchange keys and values (Megatron-Core's --cp-comm-type, Transformer
/// Engine's cp_comm_type): a ring of point-to-point sends overlapped with the attention of the chunk in
/// hand, one all-gather of K and V, or all-to-alls that re-split Q, K, V and the output from sequence
/// chunks to heads (DeepSpeed-Ulysses style).
/// kA2aP2p: hierarchical (Megatron's a2a+p2p): all-to-all inside groups of consecutive cp ranks, the p2p
/// ring across those groups (Execution::hierarchicalCpSizes).
enum class CpCommType { kP2p, kAllGather, kAllToAll, kA2aP2p };
[[nodiscard]] std::string toString(CpCommType value);  ///< p2p, all_gather, a2a, a2a+p2p
[[nodiscard]] Result<CpCommType> parseCpCommType(const std::string& name);
/// The exchange as tables show it: p2p, a2a, all_gather, or a2a+p2p with its sizes ("a2a+p2p 8x2").
[[nodiscard]] std::string cpExchangeLabel(CpCommType type, const std::vector<std::int64_t>& hierarchicalSizes);

/// How tensor-parallel collectives are overlapped with the GEMMs (Execution::tpCommOverlap).
/// kUserbuffers: Transformer Engine's userbuffers (Megatron's --tp-comm-overlap), which overlap the
/// forward's and the backward's all-gathers and reduce-scatters alike. kMicroPipeline: PyTorch's async
/// tensor parallelism (torchtitan's enable_async_tensor_parallel), a compiler pass that fuses an
/// all-gather with the matmuls reading it and a reduce-scatter with the one matmul writing its input;
/// a backward reduce-scatter of input gradients summed over several linears stays exposed.
/// See docs/costmodel.md, "Async tensor parallelism".
enum class TpOverlap { kUserbuffers, kMicroPipeline };
[[nodiscard]] std::string toString(TpOverlap value);  ///< userbuffers, micro_pipeline
[[nodiscard]] Result<TpOverlap> parseTpOverlap(const std::string& name);
[[nodiscard]] Result<GradAccumulation> parseGradAccumulation(const std::string& name);
[[nodiscard]] Result<Schedule> parseSchedule(const std::string& name);
[[nodiscard]] Result<RecomputePolicy> parseRecompute(const std::string& name);

/// Parallel degrees. dp * tp * pp * cp must equal the cluster's GPU count; ep splits the experts
/// inside the data-parallel group (ep divides dp * cp).
struct Parallelism {
  std::int64_t dp = 1;
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::int64_t cp = 1;   ///< context parallel: the sequence split across GPUs for attention
  std::int64_t ep = 1;   ///< expert parallel (MoE only)
  /// Tensor parallelism of the expert layers (Megatron-Core's --expert-tensor-parallel-size); 0: tp, its
  /// default. The expert layers fold their own etp x ep x edp mesh over the tp x cp x dp ranks of a
  /// stage ("MoE parallel folding"), so ep may exceed dp*cp when etp < tp.
  std::int64_t etp = 0;
  [[nodiscard]] std::int64_t expertTp() const { return etp > 0 ? etp : tp; }
  /// Ranks of a stage holding the same experts: tp*cp*dp / (etp*ep).
  [[nodiscard]] std::int64_t expertDp() const { return tp * cp * dp / (expertTp() * ep); }
  bool sequenceParallel = false;  ///< Megatron SP: norms/dropout split along the sequence (needs tp > 1)
  std::int64_t virtualStages = 1; ///< model chunks per pipeline rank (interleaved schedule)
  /// Placement of the dimensions on ranks, innermost (fastest-varying, closest GPUs) first.
  std::vector<std::string> rankOrder{"tp", "cp", "dp", "pp"};
  friend bool operator==(const Parallelism&, const Parallelism&) = default;
};

/// One pipeline chunk (a physical stage, or a virtual one when virtualStages > 1).
struct StagePlan {
  std::int64_t layers = 0;                       ///< transformer layers in this chunk
  RecomputePolicy recompute = RecomputePolicy::kNone;
  std::int64_t recomputeLayers = 0;              ///< how many of them recompute (the rest keep activations)
  friend bool operator==(const StagePlan&, const StagePlan&) = default;
};

/// What fraction of each model state lives off the GPU (ZeRO-Offload / ZeRO-Infinity).
struct Offload {
  double optimizerFraction = 0;  ///< optimizer states (needs zero_stage >= 1)
  double paramsFraction = 0;     ///< parameters (needs zero_stage 3)
  OffloadTarget target = OffloadTarget::kCpu;
  /// Activation offload (Megatron-Core's --cpu-offloading-num-layers through Transformer Engine's
  /// offload handler): the saved activations of the model's first `activationLayers` transformer layers
  /// are copied to pinned host memory during the forward and back before their backward, each copy
  /// spread over its share of the other layers' compute. Needs pp 1, no recompute, fewer than all layers.
  /// Always host memory, whatever `target` says. See docs/costmodel.md, "Activation offload".
  std::int64_t activationLayers = 0;
  friend bool operator==(const Offload&, const Offload&) = default;
};

/// Host microseconds per op of an eager PyTorch training framework (docs/costmodel.md, "Host floor").
inline constexpr double kEagerHostMicrosecondsPerOp = 60;

/// The small ops a framework runs as PyTorch's eager decompositions (several elementwise kernels with
/// fp32 intermediates) instead of one fused kernel each: Megatron and Transformer Engine fuse all three,
/// as does torch.compile within what it compiles (torchtitan: each block, not the final norm);
/// torchtitan without compile, Hugging Face models and plain PyTorch run them eager. LayerNorm and GeLU
/// are one kernel either way (PyTorch's own CUDA kernels). JSON: execution.unfused_kernels, a list of
/// "rmsnorm" (or "final_rmsnorm"), "rotary", "gated_activation". See docs/costmodel.md, "Eager
/// elementwise kernels".
struct UnfusedKernels {
  bool rmsNorm = false;          ///< upcast, square, mean, eps, rsqrt, scale, downcast, weight: 8 kernels
  bool rotary = false;           ///< per query and key: upcast, complex multiply, downcast
  bool gatedActivation = false;  ///< act(gate), then * up: two kernels, act's output kept for backward
  /// The norm after the last block only (the op "head.final_norm"; implied by rmsNorm): torchtitan
  /// compiles each transformer block, not the model, so a compiled run keeps this one eager.
  bool finalNorm = false;
  /// Whether the norm after the last block runs eager (rmsNorm says so of every norm).
  [[nodiscard]] bool eagerFinalNorm() const { return rmsNorm || finalNorm; }
  [[nodiscard]] bool any() const { return rmsNorm || rotary || gatedActivation || finalNorm; }
  [[nodiscard]] static UnfusedKernels all() { return {true, true, true, true}; }
  /// rmsNorm alone and rmsNorm with finalNorm are the same choice (every norm eager).
  friend bool operator==(const UnfusedKernels& a, const UnfusedKernels& b) {
    return a.rmsNorm == b.rmsNorm && a.rotary == b.rotary && a.gatedActivation == b.gatedActivation &&
           a.eagerFinalNorm() == b.eagerFinalNorm();
  }
};
/// The plan file's names of the unfused ops, in a fixed order ("rmsnorm" or "final_rmsnorm", "rotary",
/// "gated_activation").
[[nodiscard]] std::vector<std::string> unfusedKernelNames(const UnfusedKernels& u);
/// Adds one op by its plan-file name ("rmsnorm" sets the final norm too); false for an unknown name.
[[nodiscard]] bool addUnfusedKernel(UnfusedKernels& u, std::string_view name);
/// Those names joined with "/" for a headline ("rmsnorm/rotary"), or "none".
[[nodiscard]] std::string unfusedKernelsLabel(const UnfusedKernels& u);
/// Reads a comma-separated list of those names, or "all" or "none" (the command line's form).
[[nodiscard]] Result<UnfusedKernels> parseUnfusedKernels(std::string_view list);

/// What selective recompute re-runs in each layer it covers (Megatron-Core's --recompute-modules,
/// TransformerConfig.recompute_modules; ["core_attn"] when unset). Each module's activations are dropped
/// after its forward and rebuilt before its backward. The default, core_attn alone, is
/// RecomputePolicy::kSelective as it always was. JSON: execution.recompute_modules, a list of the names
/// below, written only when it is not the default. No effect on a stage that does not recompute
/// selectively. See docs/costmodel.md, "Recompute modules".
struct RecomputeModules {
  bool coreAttn = true;        ///< "core_attn": scores, softmax, dropout (nothing to drop under fused attention)
  bool moeAct = false;         ///< "moe_act": the routed experts' activation; its output, fc2's input, is dropped
  /// "layernorm": the norms that are modules of their own in Transformer Engine's layer (an MoE layer's
  /// pre-MLP norm, a latent-attention layer's input norm; the others are fused into the next linear)
  bool layernorm = false;
  bool mlaUpProj = false;      ///< "mla_up_proj": latent attention's up-projections and rotary; Q, K, V dropped
  bool mlp = false;            ///< "mlp": a dense layer's whole MLP with its fused norm; its input kept
  bool moe = false;            ///< "moe": an MoE layer's whole block (router, dispatch, experts, combine, shared)
  bool sharedExperts = false;  ///< "shared_experts": the shared experts' MLP
  [[nodiscard]] bool isDefault() const { return *this == RecomputeModules{}; }
  [[nodiscard]] bool any() const { return coreAttn || moeAct || layernorm || mlaUpProj || mlp || moe || sharedExperts; }
  [[nodiscard]] static RecomputeModules none() { return {false, false, false, false, false, false, false}; }
  friend bool operator==(const RecomputeModules&, const RecomputeModules&) = default;
};
/// The plan file's (and Megatron's) names of the modules, in Megatron-Core's order.
[[nodiscard]] std::vector<std::string> recomputeModuleNames(const RecomputeModules& m);
/// Adds one module by its name; false for an unknown name.
[[nodiscard]] bool addRecomputeModule(RecomputeModules& m, std::string_view name);
/// The names joined with "+" ("mla_up_proj+mlp"), or "none".
[[nodiscard]] std::string recomputeModulesLabel(const RecomputeModules& m);
/// Reads a comma-separated list of module names (the command line's form; it replaces the default), or
/// "none" for the empty list.
[[nodiscard]] Result<RecomputeModules> parseRecomputeModules(std::string_view list);

/// How the step is executed where real systems offer a choice that changes its cost.
struct Execution {
  bool flashAttention = true;     ///< fused attention (FlashAttention): no s^2 activations, fewer bytes
  /// With flashAttention: the fused kernels are FlashAttention-2's (PyTorch's SDPA flash backend,
  /// flash-attn 2.x), which on Hopper and later run their Ampere code path, instead of the GPU's own
  /// fastest (cuDNN's fused attention under Transformer Engine, FlashAttention-3). JSON: attention
  /// "flash2". Same cost on Ampere and older. See docs/costmodel.md, "Which fused attention kernel".
  bool flashAttention2 = false;
  bool overlapGradReduce = true;  ///< data-parallel gradient reduction overlapped with backward
  bool overlapParamGather = true; ///< ZeRO parameter all-gather overlapped with forward (prefetch)
  /// Under the interleaved schedule, pipeline sends and receives run beside the other chunks' compute
  /// (Megatron-LM's default since 2023-10, --no-overlap-p2p-communication; Megatron-Bridge and NeMo 2
  /// turn it on with virtual stages). false: each hop waits, exposed. No effect without virtual stages.
  /// See docs/costmodel.md, "Pipeline sends beside compute".
  bool overlapP2pComm = true;
  bool tpCommOverlap = false;     ///< tensor-parallel collectives overlapped with GEMMs
  TpOverlap tpOverlap = TpOverlap::kUserbuffers;  ///< how, when tpCommOverlap
  CpCommType cpCommType = CpCommType::kP2p;  ///< context-parallel exchange (Megatron's default: p2p)
  /// a2a+p2p only: Megatron's --hierarchical-context-parallel-sizes, the all-to-all level's size (its
  /// groups consecutive cp ranks) and the ring's; their product is cp. Empty otherwise.
  std::vector<std::int64_t> hierarchicalCpSizes;
  GradAccumulation gradAccumulation = GradAccumulation::kFused;
  GradSync gradSync = GradSync::kMicroBatch;  ///< ZeRO >= 2 only; see GradSync
  MoeDispatcher moeDispatcher = MoeDispatcher::kAllToAll;  ///< MoE models with ep > 1
  /// Expert-parallel all-to-alls hidden behind another micro-batch's compute (Megatron-Core's
  /// --overlap-moe-expert-parallel-comm: the forward of one micro-batch runs beside the backward of
  /// another); needs ep > 1, virtual stages when pp > 1, no full recompute.
  bool epCommOverlap = false;
  Float8Recipe float8Recipe = Float8Recipe::kTransformerEngine;  ///< precision fp8 only
  /// Transformer Engine's linear weights are themselves the quantized tensors (Megatron's
  /// --fp8-param-gather or --fp4-param-gather, Megatron-Bridge's mixed_precision.fp8_param_gather: TE's
  /// quantized_model_init): no 16-bit copy beside them, and the distributed optimizer all-gathers them
  /// quantized. false: 16-bit weights, beside which each TE linear caches its quantized copy for the whole
  /// run. fp8 or fp4 with a Transformer Engine recipe and ZeRO 1 or 2 (the distributed optimizer). JSON:
  /// quantized_params. See docs/costmodel.md, "Transformer Engine's quantized weights".
  bool quantizedParams = false;
  /// The parameters are kept in fp32 and are the optimizer's master weights; 16-bit copies exist only
  /// while a layer is gathered or in use (PyTorch FSDP/FSDP2's mixed-precision policy, torch.amp).
  /// false: 16-bit training weights beside fp32 master copies inside the optimizer (Megatron,
  /// DeepSpeed). Ignored in fp32 training. See docs/costmodel.md, "Memory".
  bool fp32Params = false;
  /// The loss reads the 16-bit logits in one fused kernel and keeps them (with a per-row statistic) for
  /// its backward, which writes a 16-bit gradient: flash-attn's CrossEntropyLoss (LLM Foundry's default
  /// `loss_fn: fused_crossentropy`), Liger's. false: the logits are upcast to fp32 first and the fp32
  /// copy is what backward keeps (Megatron's vocab-parallel cross-entropy, torchtitan, plain PyTorch).
  /// See docs/costmodel.md, "Fused cross-entropy".
  bool fusedCrossEntropy = false;
  /// With fusedCrossEntropy: the fused loss writes the logits' gradient into the logits themselves during
  /// the forward, and the backward scales it in place (Transformer Engine's parallel_cross_entropy before
  /// July 2026, Megatron's --cross-entropy-fusion-impl te): no gradient buffer beside the kept logits,
  /// and a forward that reads them twice and writes them once. See docs/costmodel.md, "Fused cross-entropy".
  bool crossEntropyInPlace = false;
  /// The loss is PyTorch's F.cross_entropy on an fp32 upcast of the logits (torchtitan, Hugging Face
  /// models, plain PyTorch): its backward holds the dense fp32 gradient nll_loss returns and
  /// log_softmax's fp32 gradient beside the saved log-probabilities, 12 B a logit at the peak where
  /// Megatron's vocab-parallel loss, which writes its gradient into the saved softmax, holds 8.
  /// Not with fusedCrossEntropy. See docs/costmodel.md, "PyTorch's cross-entropy".
  bool torchCrossEntropy = false;
  /// The loss is Megatron-Core's native fusion of its vocab-parallel cross-entropy
  /// (--cross-entropy-loss-fusion with cross_entropy_fusion_impl native, Megatron-Bridge's default): the
  /// same fp32 passes as the unfused loss, compiled into fewer kernels (jit_fuser is torch.compile from
  /// PyTorch 2.2), so fewer bytes move; it keeps the same fp32 softmax. Not with fusedCrossEntropy or
  /// torchCrossEntropy. See docs/costmodel.md, "Megatron's native loss fusion".
  bool nativeFusedCrossEntropy = false;
  /// The output layer runs in MXFP8 (Megatron-Core's fp8_output_proj: a Transformer Engine linear under
  /// the MXFP8 autocast). Without it the output layer is Megatron's own ColumnParallelLinear and runs
  /// at 16 bits whatever the layers' precision. Only with fp8 and float8_recipe mxfp8 (Megatron-Core
  /// refuses it otherwise). See docs/costmodel.md, "The output layer's precision".
  bool fp8OutputProj = false;
  /// Transformer Engine's linears (2.3 on) with fused weight-gradient accumulation hand autograd a
  /// placeholder weight gradient and keep it, one tensor per distinct weight shape and dtype, for the
  /// rest of the run (Megatron-Core and Megatron-Bridge with TE, gradient accumulation fusion on).
  /// See docs/costmodel.md, "Placeholder weight gradients".
  bool teDummyWgrads = false;
  /// ZeRO-3 as DeepSpeed ran it from v0.3.13 to v0.5.4 (2021): one all-gather per parameter tensor (and
  /// one reduce-scatter per gradient), each with a device synchronization before it and one copy per
  /// data-parallel rank into or out of its flat buffer; tensors under 100,000 elements stay gathered.
  /// false: a layer's parameters move in one prefetched collective (FSDP, DeepSpeed from v0.5.5).
  /// Without ZeRO-3 it has no effect.
  /// See docs/costmodel.md, "ZeRO-3 one parameter at a time".
  bool perParameterGathers = false;
  /// The attention input projection's bias gradient comes out of its GEMM (Transformer Engine: the
  /// weight-gradient GEMM's bias-gradient epilogue, or its fused cast/transpose under fp8); Megatron-
  /// Core's other biased linears hand their bias to a fused bias-GeLU or bias-dropout-add and reduce its
  /// gradient apart. false: every bias gradient is a reduction of its own over the output gradient
  /// (PyTorch's autograd, Megatron-LM's own linears, Megatron-DeepSpeed, colo-run). See
  /// docs/costmodel.md, "Bias gradients".
  bool fusedBiasGrad = false;
  /// An expert layer's GEMMs run as Transformer Engine's GroupedLinear does them (Megatron-Core's
  /// --moe-grouped-gemm): one cuBLAS GEMM per local expert, launched in turn over four streams. false:
  /// one grouped kernel for all of them (torch._grouped_mm in torchtitan, the grouped_gemm package of
  /// Megatron-LM's legacy GroupedMLP). See docs/costmodel.md, "Transformer Engine's grouped linear".
  bool teGroupedGemm = false;
  /// Megatron-LM checks each gradient bucket's norm for NaN and Inf before reducing it (its
  /// --no-check-for-nan-in-loss-and-grad turns it off; on by default since 2023-09): one more read of
  /// the whole gradient buffer a step and two host synchronizations per bucket. false: no check
  /// (Megatron-Core's own default, PyTorch, DeepSpeed, colo-run). See docs/costmodel.md, "The NaN check".
  bool gradNanCheck = false;
  /// Megatron's gradient buffer holds and reduces the gradients in bf16 (--grad-reduce-in-bf16; its
  /// DDP config's grad_reduce_in_fp32 false): 2 bytes a gradient instead of 4 in the buffer, the
  /// data-parallel reduction and the distributed optimizer's reduce-scatter. Needs bf16 (or fp8 on
  /// bf16 parameters) training with Megatron's buffer (grad_accumulation fused or main_grad). JSON:
  /// grad_reduce_in_bf16.
  bool gradReduceBf16 = false;
  /// The ops run as eager decompositions (see UnfusedKernels); none by default.
  UnfusedKernels unfused;
  /// What selective recompute re-runs (see RecomputeModules); core_attn by default.
  RecomputeModules recomputeModules;
  /// Host time the framework spends issuing one op (Python module code, dispatcher, autograd, launch):
  /// a layer whose kernels finish faster than the host issues them waits for the host. 0: the host
  /// keeps ahead (CUDA graphs). See docs/costmodel.md, "Host floor".
  double hostMicrosecondsPerOp = kEagerHostMicrosecondsPerOp;
  friend bool operator==(const Execution&, const Execution&) = default;
};

/// The plan file's name of an execution's attention kernels: flash, flash2 or unfused.
[[nodiscard]] std::string attentionName(const Execution& x);
/// Sets flashAttention and flashAttention2 from one of the names attentionName gives; false (and x
/// unchanged) for any other name.
[[nodiscard]] bool setAttention(Execution& x, std::string_view name);

/// Predicted figures (filled by the cost model; all optional until then).
struct Predictions {
  std::optional<double> stepTimeSeconds;
  std::optional<double> tokensPerSecond;
  std::optional<double> modelTflopsPerGpu;     ///< model FLOPs (no recompute) / step time / GPUs
  std::optional<double> hardwareTflopsPerGpu;  ///< including recompute
  std::optional<double> mfu;                   ///< model FLOPs utilisation, 0..1
  std::optional<double> peakMemoryBytes;       ///< max over GPUs
  std::optional<bool> fits;
  std::optional<double> bubbleFraction;
  Json breakdown = Json::object();             ///< per-kind time and memory, as the cost model reports
  friend bool operator==(const Predictions&, const Predictions&) = default;
};

/// Where a plan came from.
struct Provenance {
  std::string toolVersion;
  std::string createdAt;     ///< ISO 8601 UTC
  std::string modelHash;     ///< contentHash of the embedded model document
  std::string clusterHash;   ///< contentHash of the embedded cluster document
  std::string costDbHash;    ///< empty when no cost database was used
  std::string command;       ///< the command line that made it
  friend bool operator==(const Provenance&, const Provenance&) = default;
};

struct Plan {
  std::string name;
  Model model;
  ClusterSpec cluster;
  Parallelism parallel;
  Schedule schedule = Schedule::kOneFOneB;
  std::int64_t microBatchSize = 1;
  std::int64_t globalBatchSize = 1;   ///< samples per optimizer step
  std::int64_t seqLen = 0;            ///< tokens per sample
  int zeroStage = 0;                  ///< 0-3
  Optimizer optimizer = Optimizer::kAdamW;
  Offload offload;
  std::vector<StagePlan> stages;      ///< pp * virtualStages chunks; chunk c*pp + p runs on stage p
  DType precision = DType::kBf16;
  Execution execution;
  Predictions predictions;
  Provenance provenance;
  /// The per-operator plan of `colo-plan autoparallel` (an object the planner reads and checks: mesh,
  /// stages, micro-batch, the strategy and recompute choice of every operator, offload fractions);
  /// null for a degree-level plan. When set, the degree fields above are its Megatron-style equivalent
  /// (or, for a simulation-only plan, Megatron's split on the same cluster).
  Json operatorPlan = nullptr;

  /// Micro-batches per step on each data-parallel replica.
  [[nodiscard]] std::int64_t numMicroBatches() const;
  /// For each transformer layer, the pipeline stage (physical) that holds it.
  [[nodiscard]] std::vector<std::int64_t> layerToStage() const;
};

/// Even split of `layers` into `chunks` (Megatron's default; the first chunks get one more when it does
/// not divide), all with the same recompute policy.
[[nodiscard]] std::vector<StagePlan> uniformStages(std::int64_t layers, std::int64_t chunks, RecomputePolicy policy);

/// Whether some pipeline chunk recomputes selectively (policy selective with layers to recompute): only
/// then are the plan's `execution.recompute_modules` what it re-runs.
[[nodiscard]] bool recomputesSelectively(const Plan& plan);

/// Why the plan cannot keep Transformer Engine's weights quantized (Megatron's --fp8-param-gather /
/// --fp4-param-gather), or nothing when it can: precision fp8 or fp4 through a Transformer Engine recipe,
/// the distributed optimizer (ZeRO 1 or 2) and no fp32 parameters. The one rule validatePlan, the search
/// and the validation harness apply (docs/costmodel.md, "Transformer Engine's quantized weights").
[[nodiscard]] std::optional<std::string> quantizedWeightsRefusal(const Plan& plan);

/// Why Megatron-Core cannot run the plan's output layer as a Transformer Engine linear under MXFP8
/// (execution.fp8_output_proj), or nothing when it can: precision fp8 with the MXFP8 recipe, a GPT
/// (decoder) model, no head tied to the embedding on a single stage, no TE userbuffers at tp > 1
/// (docs/costmodel.md, "The output layer's precision").
[[nodiscard]] std::optional<std::string> fp8OutputProjRefusal(const Plan& plan);

/// Every consistency rule a plan must satisfy before it is costed or run: degrees multiply to the GPU
/// count; heads and kv heads divisible by tp; layers summed over stages; batch divisible by
/// micro-batch x dp; schedule and virtual stages agree; ZeRO/offload/pipeline combinations that real
/// engines refuse; a precision the GPU has. Errors: kBadInput naming the plan field and values.
[[nodiscard]] Result<void> validatePlan(const Plan& plan, const std::string& file = {});

/// Reads a `colo.plan/1` document, including the embedded model and cluster, and validates it.
[[nodiscard]] Result<Plan> planFromJson(const Json& document, const std::string& file);
[[nodiscard]] Result<Plan> loadPlan(const std::string& file);
/// Writes a `colo.plan/1` document that reads back equal.
[[nodiscard]] Json planToJson(const Plan& plan);

}  // namespace colo
