#pragma once
// Private: the op graph digested into per-layer templates, and their time and memory under one
// parallel configuration. Per-sample figures are scaled by micro-batch, tensor, sequence and context
// parallelism with the op's shard rule (docs/costmodel.md, "Compute").

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "colo/core/op_graph.h"
#include "colo/costmodel/collectives.h"
#include "colo/costmodel/cost_db.h"
#include "colo/costmodel/hardware.h"

namespace colo::costmodel::detail {

/// Disjoint parts of a layer that Megatron-Core's recompute modules drop and re-run
/// (RecomputeModules; docs/costmodel.md, "Recompute modules"). An op's saved tensors belong to one group
/// and its forward time to one (not always the same: a norm's output is kept by the linears after it).
enum RecomputeGroup : std::int8_t {
  kNoGroup = -1,
  kAttnNormOut,   ///< latent attention's input norm: its output, kept by the down-projections
  kMlpNormOut,    ///< an MoE layer's pre-MLP norm: its output, kept by the router and shared experts
  kMlaQkv,        ///< latent attention's up-projections and rotary: Q, K and V
  kDenseMlp,      ///< a dense layer's MLP with its norm, input excluded
  kExpertAct,     ///< the routed experts' activation: its output
  kSharedInner,   ///< the shared experts' MLP, input excluded
  kMoeRest,       ///< the rest of an MoE block (top-k, sorts, the experts' first GEMM and its output)
  kRecomputeGroups
};

/// One op of a layer template, per sample.
struct OpTemplate {
  std::string name;          // the graph's op name without its layer prefix ("attn.qkv")
  OpKind kind = OpKind::kElementwise;
  Shard shard = Shard::kReplicated;
  std::int64_t m = 0, n = 0, k = 0, batch = 1, groups = 1;  // GEMM dims (batch: bmm count per sample)
  double flopsFwd = 0;
  double bytes = 0;          // forward bytes read + written, per sample
  double savedBytes = 0;     // per sample
  double savedQuadratic = 0; // the part of savedBytes that grows with s^2 (dropped by selective recompute / flash)
  double params = 0;
  bool bias = false;         // a linear with a bias (its gradient sums the output gradient's rows)
  bool biasInGemm = false;   // ... that the linear adds itself (Transformer Engine can fuse its gradient)
  bool causal = false;
  std::int64_t window = 0;   // a sliding window's keys (attention scores of a local layer; 0: none)
  bool attentionCore = false;  // scores/softmax/attention-dropout/context: fused away by FlashAttention
  std::string kernel;          // measured-kernel key: layernorm, softmax, gelu, swiglu, dropout, add, ...
  double elements = 0;         // per sample, for measured-kernel lookups
  std::int64_t width = 0;      // the row width the kernel reduces or gathers over (0 for elementwise)
  RecomputeGroup savedGroup = kNoGroup;  // the recompute group whose drop frees what this op keeps
  RecomputeGroup timeGroup = kNoGroup;   // the recompute group whose re-run repeats this op's forward
};

struct LayerTemplate {
  std::vector<OpTemplate> ops;
  double params = 0;
  double tpSplittableParams = 0;  // parameters divided by tensor parallelism
  double expertParams = 0;        // parameters divided by expert parallelism (and tp)
  bool moe = false;
  bool mla = false;               // multi-head latent attention (the op "attn.kv_down")
  std::int64_t rowOps = 0;        // forward all-reduces (row-parallel outputs)
  double gatheredTensors = 0;     // parameter tensors of 100,000 elements or more (DeepSpeed ZeRO-3 gathers each)
  double gatheredExpertTensors = 0;  // of them, the routed experts' weights (one per expert, spread over ep)
  std::int64_t columnOps = 0;     // backward all-reduces (column-parallel input gradients)
  double qkvSavedPerSample = 0;   // Q, K, V bytes (kept by flash / selective recompute)
  double attentionOutputPerSample = 0;  // attention output (saved by flash)
  double lsePerSample = 0;        // softmax statistics (saved by flash)
};

/// The parallel configuration a layer is costed under.
struct LayerConfig {
  std::int64_t microBatch = 1;
  std::int64_t tp = 1, cp = 1, ep = 1;
  std::int64_t etp = 1;  // tensor parallelism of the expert layers (the plan's expertTp())
  CpCommType cpCommType = CpCommType::kP2p;
  GroupPlacement cpA2aGroup, cpRingGroup;  // a2a+p2p: the all-to-all level and the ring across its groups
  bool sequenceParallel = false;
  bool flash = true;
  bool tpCommOverlap = false;
  bool tpMicroPipeline = false;  // the overlap is PyTorch's async TP (TpOverlap::kMicroPipeline)
  std::int64_t hidden = 0;
  std::int64_t seqLen = 0;
  std::int64_t dtypeBytes = 2;       // GEMM operands
  std::int64_t activationBytes = 2;  // activations, their communication and memory (16-bit under fp8)
  std::int64_t topK = 1;
  std::int64_t routingGroups = 0;     // group-limited routing (MoeSpec): groups, and groups per token
  std::int64_t routingGroupTopK = 0;
  bool dedupDispatch = false;         // DeepEP: one network copy per token and destination node
  bool epCommOverlap = false;         // expert all-to-alls behind another micro-batch's compute
  bool wgradIntoFp32 = false;         // the weight-gradient GEMM accumulates into fp32 main_grad (reads and writes it)
  double embeddingGradAddBytes = 0;   // per table element and micro-batch: Megatron's hook adding an embedding's gradient into main_grad
  Float8Recipe float8Recipe = Float8Recipe::kTransformerEngine;  // fp8 only: how the linears' operands are cast
  bool fusedBiasGrad = false;         // bias gradients from a fused kernel, not a reduction of their own
  int groupedGemmStreams = 0;         // an expert layer's GEMMs: one grouped kernel (0), or one GEMM per expert over this many streams (Transformer Engine: 4)
  bool fusedCrossEntropy = false;     // the loss reads and keeps the 16-bit logits (no fp32 upcast)
  bool crossEntropyInPlace = false;   // ... and writes their gradient into them in the forward (TE's)
  bool nativeFusedLoss = false;       // Megatron's native fusion: the unfused loss's fp32 passes, compiled
  bool fp8OutputProj = false;         // the output layer is Transformer Engine's, in fp8 (else 16-bit)
  UnfusedKernels unfused;             // ops run as PyTorch's eager decompositions (none: fused kernels)
  std::int64_t kvWidth = 0;       // values: kv heads x head dim (MLA: heads x v_head_dim)
  std::int64_t qWidth = 0;        // query heads x head dim (the context-parallel all-to-alls)
  std::int64_t keyWidth = 0;      // keys as attention reads them: kv heads x head dim (MLA: heads x qk_head_dim)
  std::int64_t outWidth = 0;      // attention's output: heads x head dim (MLA: heads x v_head_dim)
  const GemmTable* measured = nullptr;  // measured GEMM times, consulted before the roofline
  const KernelTable* kernels = nullptr; // measured non-GEMM kernel times
  double gemmScale = 1.0;               // measured / roofline on this device, for GEMMs not measured
  double hostSecondsPerOp = 0;          // host time to issue one op (0: the host keeps ahead)
  friend bool operator==(const LayerConfig&, const LayerConfig&) = default;
};

/// Whether Transformer Engine runs the layer's linears in fp8: it keeps their inputs in fp8 and its
/// sequence-parallel all-gathers move the fp8 cast (docs/costmodel.md, "fp8 all-gathers").
[[nodiscard]] inline bool transformerEngineFp8(const LayerConfig& c) {
  return c.dtypeBytes == 1 && transformerEngineRecipe(c.float8Recipe);
}

/// Where GEMM times came from in one evaluation.
struct LookupCounts {
  std::int64_t exact = 0, interpolated = 0, roofline = 0;
  std::int64_t kernelsMeasured = 0, kernelsRoofline = 0;
};

/// A non-GEMM kernel an op runs on one GPU under a config: its key, elements and width.
struct ScaledKernel {
  std::string key;
  double elements = 0;
  std::int64_t width = 0;
};
[[nodiscard]] std::optional<ScaledKernel> scaledKernel(const OpTemplate& op, const LayerConfig& config);
/// Whether the op sorts an expert layer's received rows by local expert (Megatron-Core's
/// dispatch_postprocess, after the expert-tensor-parallel all-gather).
[[nodiscard]] inline bool sortsByExpert(const OpTemplate& op) { return op.kind == OpKind::kPermute && op.groups > 0; }
/// How many ways an elementwise op's rows are split across the tensor-parallel group.
[[nodiscard]] double elementSplit(const OpTemplate& op, const LayerConfig& config);

/// The fused attention kernel a layer runs under FlashAttention, as a measured kernel's key:
/// "flash_attention[.causal].d<query/key head dim>[.v<value head dim>][.dropout]", elements = heads x samples x
/// queries on one GPU, width = keys. Nullopt without flash attention or attention scores, and for
/// sliding windows (their time stays the roofline's).
[[nodiscard]] std::optional<ScaledKernel> flashKernel(const LayerTemplate& layer, const LayerConfig& config);

/// Time (seconds, one micro-batch) and memory (bytes) of one layer template under a config.
struct LayerCost {
  double fwd = 0;           // kernels
  double bwd = 0;           // kernels
  double attnCoreFwd = 0;   // the part selective recompute repeats
  double tpCommFwd = 0;     // exposed
  double tpCommBwd = 0;
  double cpCommFwd = 0, cpCommBwd = 0;
  double epCommFwd = 0, epCommBwd = 0;
  double savedFull = 0;       // no recompute
  double savedSelective = 0;  // selective recompute
  double savedInput = 0;      // full recompute: the layer input only
  double savedOp = 0;         // per-op selective recompute (torchtitan's "op" policy)
  double recomputeOpFwd = 0;  // the forward kernels that policy runs again before the backward
  double recomputeOpFlops = 0;  // the model FLOPs of the products it runs again
  double paramsPerGpu = 0;
  double expertParamsPerGpu = 0;  // the routed experts' part of paramsPerGpu
  // The weights of Transformer Engine's linears (attention and MLP projections, the experts' grouped
  // linears; not the router, the embedding or the vocabulary-parallel head), which fp8 and fp4 runs
  // quantize, and the routed experts' part of them.
  double linearWeightsPerGpu = 0;
  double expertLinearWeightsPerGpu = 0;
  double gemmFlopsFwdPerGpu = 0;  // model FLOPs of the layer on one GPU
  double attnFlopsFwdPerGpu = 0;  // the attention-core part of it
  double opsFwd = 0, opsBwd = 0;  // ops the host issues per micro-batch (kernels and collectives)
  double gatheredTensors = 0;     // LayerTemplate's, with this GPU's share of the expert weights
  double hostWaitFwd = 0, hostWaitBwd = 0;  // part of fwd/bwd the GPU waits for the host (host-bound)
  // Per recompute group: the bytes its drop frees, the forward (kernels and the collectives inside it)
  // its re-run repeats, and that re-run's model FLOPs.
  std::array<double, kRecomputeGroups> groupSaved{};
  std::array<double, kRecomputeGroups> groupFwd{};
  std::array<double, kRecomputeGroups> groupFlops{};
};

/// The GEMM an op runs on one GPU under a config: an [m, k] x [k, n] product, `count` times (batched
/// attention, local experts). Nullopt for ops that are not GEMMs (or fused away by flash attention).
struct ScaledGemm {
  double m = 0, n = 0, k = 0, count = 1;
};
[[nodiscard]] std::optional<ScaledGemm> scaledGemm(const OpTemplate& op, const LayerConfig& config);

/// Builds templates from an op graph (batch 1): one per distinct layer structure, the layer -> template
/// map, and the embedding (layer -1) and head (layer L) templates.
struct ModelTemplates {
  std::vector<LayerTemplate> classes;
  std::vector<std::size_t> layerClass;
  LayerTemplate embedding;
  LayerTemplate head;
  bool tiedHead = false;
  double tiedParams = 0;  // the shared embedding, copied to the last stage when pp > 1
  double modelFlopsPerSample = 0;
  std::int64_t seqLen = 0;
  std::int64_t hidden = 0;
  std::int64_t dtypeBytes = 2;
  std::int64_t kvWidth = 0;
  std::int64_t qWidth = 0;
  std::int64_t keyWidth = 0;  // 0: kvWidth
  std::int64_t outWidth = 0;  // 0: qWidth
  std::int64_t topK = 1;
  std::int64_t routingGroups = 0;     // group-limited routing (MoeSpec)
  std::int64_t routingGroupTopK = 0;
};

[[nodiscard]] ModelTemplates digest(const OpGraph& graph, std::int64_t topK, std::int64_t kvWidth, bool tiedHead);

/// One op's compute time inside a layer (per micro-batch, per GPU), for the per-op breakdown.
struct OpCost {
  std::string name;
  std::string kind;
  double fwd = 0, bwd = 0;
};

/// `opCosts`, when given, receives every op's forward and backward compute (FlashAttention's fused
/// kernel as one "attn.flash" entry); their sums are the layer's fwd and bwd.
[[nodiscard]] LayerCost costLayer(const LayerTemplate& layer, const LayerConfig& config, const DeviceModel& device,
                                  const GroupPlacement& tpGroup, const GroupPlacement& cpGroup,
                                  const GroupPlacement& epGroup, LookupCounts* counts = nullptr,
                                  std::vector<OpCost>* opCosts = nullptr);

/// Seconds of one GEMM of shape (m, n, k), `count` times, on the device (roofline with tile and wave
/// quantisation; docs/costmodel.md).
[[nodiscard]] double gemmSeconds(double m, double n, double k, double count, std::int64_t dtypeBytes,
                                 const DeviceModel& device);

/// Seconds of `count` expert GEMMs of shape (m, n, k): one grouped kernel when `streams` is 0, else one
/// GEMM per expert, launched in turn over `streams` streams (docs/costmodel.md, "Transformer Engine's
/// grouped linear").
[[nodiscard]] double groupedGemmSeconds(double m, double n, double k, double count, int streams,
                                        std::int64_t dtypeBytes, const DeviceModel& device);

}  // namespace colo::costmodel::detail
