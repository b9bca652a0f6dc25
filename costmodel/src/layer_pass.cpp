#include "layer_comm.h"
#include "layer_cost.h"

#include "colo/costmodel/op_cost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

// A layer's time and memory under one configuration (costLayer): the per-op pass over a layer
// template (docs/costmodel.md, "Compute", "Memory"), composed with the communication of each parallel
// dimension (layer_comm.cpp) and the host floor ("Host floor").
namespace colo::costmodel::detail {
namespace {

// The separate matrix products a GEMM of colo's graph stands for, as shares of its output width: the
// builder fuses q, k and v into "qkv" and gate and up into "gate_up" (core/src/op_graph_builder.cpp);
// eager frameworks run them as separate products, which is what per-op recompute counts.
// (On the evaluator's hot path: no allocation.)
struct ProductShares {
  std::array<double, 3> share{1.0, 0.0, 0.0};
  std::size_t count = 1;
};
ProductShares productShares(const OpTemplate& op, const LayerConfig& c) {
  auto endsWith = [&](std::string_view suffix) { return std::string_view(op.name).ends_with(suffix); };
  const double n = static_cast<double>(op.n);
  const double kv = static_cast<double>(c.kvWidth);
  if (endsWith("qkv") && kv > 0 && n > 2 * kv) return {{(n - 2 * kv) / n, kv / n, kv / n}, 3};
  if (endsWith("gate_up")) return {{0.5, 0.5, 0.0}, 2};
  return {};
}


// Measured times of a kernel on this device (colo-profile on a GPU) replace the estimate, each way
// on its own. `kernelOf` names the kernel and its scaled shape; it is only called when the config has
// measured kernels (it builds a key string, which the search's hot path does without).
template <class KernelOf>
bool applyMeasured(const LayerConfig& c, KernelOf&& kernelOf, double& fwd, double& bwd, LookupCounts* counts) {
  if (!c.kernels || c.kernels->empty()) return false;
  const std::optional<ScaledKernel> kernel = kernelOf();
  if (!kernel) return false;
  const auto f = c.kernels->lookup(kernel->key + ".fwd", kernel->elements, kernel->width);
  const auto g = c.kernels->lookup(kernel->key + ".bwd", kernel->elements, kernel->width);
  if (f) fwd = f->first;
  if (g) bwd = g->first;
  if (counts) ++(f ? counts->kernelsMeasured : counts->kernelsRoofline);
  return g.has_value();  // whether the backward is measured
}

// What a fused cross-entropy reads forward and keeps for backward, per sample: the 16-bit logits and a
// log-sum-exp per row (flash-attn's CrossEntropyLoss, LLM Foundry's `fused_crossentropy`).
double fusedLossSavedBytes(const OpTemplate& op, const LayerConfig& c) {
  const double rows = op.elements / static_cast<double>(std::max<std::int64_t>(1, op.width));
  return op.elements * static_cast<double>(c.activationBytes) + 4.0 * rows;
}

// PyTorch's eager decomposition of an op the graph holds as one fused kernel (execution.unfused_kernels;
// docs/costmodel.md, "Eager elementwise kernels"): bytes moved per element of the op and kernels
// launched, each way, and bytes kept for backward per element. kernelsFwd 0: the op runs fused. `a` is
// the activations' bytes; .float() and .type_as() are no-ops on fp32 activations.
struct EagerOp {
  double fwdBytes = 0, bwdBytes = 0, kernelsFwd = 0, kernelsBwd = 0, savedBytes = 0;
};

EagerOp eagerDecomposition(const OpTemplate& op, const LayerConfig& c) {
  const double a = static_cast<double>(c.activationBytes);
  const bool casts = a < 4;
  const double castPair = casts ? 2 * (a + 4) : 0;  // to fp32 and back, each reading one and writing the other
  EagerOp e;
  if (op.kind == OpKind::kRmsNorm && (c.unfused.rmsNorm || (c.unfused.finalNorm && op.name == "head.final_norm"))) {
    // A weightless norm (Llama 4's query/key L2 norm) stops at type_as: no product by a weight, no
    // weight gradient, nothing kept for one.
    const double weighted = op.params > 0 ? 1 : 0;
    // x.float(); pow(2) 8; mean 4; + eps and rsqrt per row; x * r 8; type_as; * weight 2a.
    e.fwdBytes = castPair + 20 + weighted * 2 * a;
    e.kernelsFwd = (casts ? 7 : 5) + weighted;
    // * weight: the input's gradient 2a, the weight's a product and a row sum 4a; type_as's gradient
    // to fp32; x * r: g * r 8, (g * x) summed over the row 16; rsqrt and add per row (three small
    // kernels); mean's gradient expanded and divided 4; pow's grad * (2 * x.pow(1)), a copy 8, a scale
    // 8 and a product 12; x's two gradients added 12; .float()'s gradient back to 16 bits.
    e.bwdBytes = weighted * 6 * a + castPair + 68;
    e.kernelsBwd = (casts ? 13 : 11) + weighted * 3;
    // x in fp32 (pow and the scale), the normalized rows (the weight's gradient)
    e.savedBytes = (casts ? 4 : a) + weighted * a;
  } else if (op.kind == OpKind::kRotary && c.unfused.rotary) {
    // Per query and key: .float(), the complex multiply by the frequencies 8, type_as; backward the
    // three in reverse (the frequencies need no gradient, nothing is kept per token).
    e.fwdBytes = e.bwdBytes = castPair + 8;
    e.kernelsFwd = e.kernelsBwd = 2 * (casts ? 3 : 1);
  } else if (op.kind == OpKind::kGatedActivation && c.unfused.gatedActivation) {
    // act(gate) 2a, then * up 3a; backward the product's two gradients 3a each and act's 3a.
    e.fwdBytes = 5 * a;
    e.kernelsFwd = 2;
    e.bwdBytes = 9 * a;
    e.kernelsBwd = 3;
    e.savedBytes = 3 * a;  // gate, up and act(gate)
  }
  return e;
}

// Compute seconds of one op, one micro-batch, each way.
struct OpTime {
  double fwd = 0, bwd = 0;
};

// One layer template costed under one configuration: the layer's ops in the order it runs them (each
// op's kernels, what per-op recompute runs again, what the op keeps for its backward), then the fused
// attention kernel, the communication of each parallel dimension (layer_comm.cpp) and the host floor.
class LayerPass {
 public:
  LayerPass(const LayerTemplate& layer, const LayerConfig& c, const DeviceModel& device, const GroupPlacement& tpGroup,
            const GroupPlacement& cpGroup, const GroupPlacement& epGroup, LookupCounts* counts,
            std::vector<OpCost>* opCosts)
      : layer_(layer), c_(c), device_(device), tpGroup_(tpGroup), cpGroup_(cpGroup), epGroup_(epGroup), counts_(counts),
        opCosts_(opCosts), attentionDevice_(device), b_(static_cast<double>(c.microBatch)), tp_(static_cast<double>(c.tp)),
        cp_(static_cast<double>(c.cp)), tokenScale_(b_ / cp_), seqSplit_(c.sequenceParallel ? tp_ : 1.0),
        bw_(device.memoryBytesPerSecond), floor_(device.kernelFloorSeconds),
        regather_(c.tp > 1 && c.sequenceParallel ? tensorParallelGather(c, tpGroup) : 0.0),
        regatherOutput_(c.tp > 1 && c.sequenceParallel ? outputLayerGather(c, tpGroup) : 0.0) {
    // Attention's products keep 16 bits under fp8 (hardware.h).
    attentionDevice_.peakFlopsPerSecond = device.attentionPeakFlopsPerSecond;
    attentionDevice_.gemmEfficiency = device.attentionGemmEfficiency;
  }

  LayerCost run();

 private:
  double gemmOn(const DeviceModel& dev, double m, double n, double k, double count, int streams = 0) const;
  OpTime matrixProduct(const OpTemplate& op);
  double biasGradient(const OpTemplate& op, const ScaledGemm& g);
  OpTime float8Casts(const OpTemplate& op, const ScaledGemm& g);
  OpTime streamedOp(const OpTemplate& op, bool fused);
  void countLinearWeights(const OpTemplate& op);
  void recomputedByOp(const OpTemplate& op, double fwd, bool fused);
  void keptForBackward(const OpTemplate& op, bool fused);
  void fusedAttention();
  void hostFloor();

  const LayerTemplate& layer_;
  const LayerConfig& c_;
  const DeviceModel& device_;
  const GroupPlacement& tpGroup_;
  const GroupPlacement& cpGroup_;
  const GroupPlacement& epGroup_;
  LookupCounts* counts_;
  std::vector<OpCost>* opCosts_;
  DeviceModel attentionDevice_;
  const double b_, tp_, cp_;
  const double tokenScale_;
  const double seqSplit_;  // full-width activations under SP
  const double bw_;
  const double floor_;
  // Under sequence parallelism each column-parallel linear's backward gathers its saved input shard
  // again beside its input-gradient GEMM (tensorParallelComm): what that costs, and what of it is
  // exposed, summed over the layer.
  const double regather_;
  const double regatherOutput_;  // the output layer's (Megatron's own linear: 16 bits, no userbuffers)
  double regatherExposed_ = 0;

  LayerCost out_;
  double attnSaved_ = 0;
  double quadraticSaved_ = 0;
  // Per-op selective recompute keeps the output of every other matrix product, counted in the order
  // the layer runs them (the 1st, 3rd, ...); a fused projection counts as the GEMMs eager frameworks
  // run apart (QKV as q, k and v; gate_up as gate and up).
  std::int64_t products_ = 0;
  double opKeptOutputs_ = 0;
  const OpTemplate* scores_ = nullptr;
  const OpTemplate* context_ = nullptr;
  const OpTemplate* previous_ = nullptr;
};

// A measured time when the cost database has this shape or a near one, else the roofline.
double LayerPass::gemmOn(const DeviceModel& dev, double m, double n, double k, double count, int streams) const {
  const std::int64_t bytes = &dev == &attentionDevice_ ? c_.activationBytes : c_.dtypeBytes;
  if (c_.measured && !c_.measured->empty()) {
    auto roofline = [&](double mm, double nn, double kk) { return detail::gemmSeconds(mm, nn, kk, 1, bytes, dev); };
    if (auto hit = c_.measured->lookup(m, n, k, roofline)) {
      if (counts_) ++(hit->second == LookupSource::kExact ? counts_->exact : counts_->interpolated);
      return hit->first * count;
    }
  }
  if (counts_) ++counts_->roofline;
  return detail::groupedGemmSeconds(m, n, k, count, streams, bytes, dev) * c_.gemmScale;
}

LayerCost LayerPass::run() {
  for (const auto& op : layer_.ops) {
    const bool fused = c_.flash && op.attentionCore;
    const bool product = op.kind == OpKind::kMatMul || op.kind == OpKind::kGroupedMatMul || op.kind == OpKind::kBatchedMatMul;
    const OpTime t = product ? matrixProduct(op) : streamedOp(op, fused);
    out_.fwd += t.fwd;
    out_.bwd += t.bwd;
    if (t.fwd > 0) out_.opsFwd += 1;
    // A GEMM's backward is two GEMMs (input and weight gradient); other ops one kernel, if any.
    if (t.bwd > 0) out_.opsBwd += product ? 2 : 1;
    if (opCosts_) opCosts_->push_back({op.name, toString(op.kind), t.fwd, t.bwd});
    countLinearWeights(op);
    previous_ = &op;
    recomputedByOp(op, t.fwd, fused);
    keptForBackward(op, fused);
    if (op.timeGroup != kNoGroup) {
      out_.groupFwd[op.timeGroup] += t.fwd;
      if (product) {
        if (const auto g = scaledGemm(op, c_)) out_.groupFlops[op.timeGroup] += 2.0 * g->m * g->n * g->k * g->count;
      }
    }
  }
  fusedAttention();
  out_.savedInput = b_ * (static_cast<double>(c_.seqLen) / cp_) * static_cast<double>(c_.hidden) *
                    static_cast<double>(c_.activationBytes) / seqSplit_;
  // The attention kernel's saved tensors stay (torchtitan's save list holds SDPA; unfused, the core's).
  const double attentionKept = (c_.flash && scores_)
                                   ? (layer_.attentionOutputPerSample + layer_.lsePerSample) * tokenScale_ / tp_
                                   : attnSaved_;
  out_.savedOp = std::min(out_.savedFull, out_.savedInput + attentionKept + opKeptOutputs_);

  if (c_.tp > 1) {
    tensorParallelComm(layer_, c_, device_, tpGroup_, out_);
    vocabParallelComm(layer_, c_, tpGroup_, out_);
  }
  out_.tpCommBwd += regatherExposed_;
  expertParallelComm(layer_, c_, device_, epGroup_, out_);
  contextParallelComm(c_, device_, cpGroup_, out_);
  // A checkpointed MLP or MoE block re-runs its collectives too: the MLP's half of the layer's forward
  // tensor-parallel pair, and the MoE block's dispatch and combine.
  if (layer_.moe) {
    out_.groupFwd[kMoeRest] += out_.epCommFwd + 0.5 * out_.tpCommFwd;
  } else if (out_.groupFwd[kDenseMlp] > 0) {
    out_.groupFwd[kDenseMlp] += 0.5 * out_.tpCommFwd;
  }
  hostFloor();
  const double ep = static_cast<double>(c_.ep);
  out_.paramsPerGpu = (layer_.params - layer_.tpSplittableParams - layer_.expertParams) + layer_.tpSplittableParams / tp_ +
                      layer_.expertParams / (static_cast<double>(c_.etp) * ep);
  out_.expertParamsPerGpu = layer_.expertParams / (static_cast<double>(c_.etp) * ep);
  out_.gatheredTensors = layer_.gatheredTensors + layer_.gatheredExpertTensors / ep;
  return out_;
}

// A matrix product: the forward GEMM, and backward the input- and weight-gradient GEMMs at their own
// shapes, with what the framework runs around them (async TP's decomposition, bias gradients, torchao's
// float8 casts).
OpTime LayerPass::matrixProduct(const OpTemplate& op) {
  double fwd = 0;
  double bwd = 0;
  const auto g = scaledGemm(op, c_);
  const double flops = 2 * g.value_or(ScaledGemm{0, 0, 0, 0}).m * (g ? g->n * g->k * g->count : 0);
  if (op.kind == OpKind::kBatchedMatMul) {
    if (!scores_) scores_ = &op;
    else if (!context_) context_ = &op;
    const double full = 2 * static_cast<double>(op.batch) * b_ / tp_ * static_cast<double>(op.m) / cp_ *
                        static_cast<double>(op.n) * static_cast<double>(op.k);
    out_.gemmFlopsFwdPerGpu += full;
    out_.attnFlopsFwdPerGpu += full;
  } else {
    out_.gemmFlopsFwdPerGpu += flops;
  }
  if (!g) return {};
  // torchao's recipes convert nn.Linear only, and torchtitan leaves the output head out
  // (filter_fqns "output"): the head and grouped expert GEMMs stay at 16 bits. Under Transformer
  // Engine's recipes the head is Megatron's own ColumnParallelLinear, outside TE's autocast, at 16
  // bits too, unless fp8_output_proj makes it a TE linear under MXFP8.
  const bool torchao = !transformerEngineRecipe(c_.float8Recipe);
  const bool sixteenBit = op.kind == OpKind::kBatchedMatMul || (op.shard == Shard::kVocab && !c_.fp8OutputProj) ||
                          (torchao && op.kind == OpKind::kGroupedMatMul);
  const DeviceModel& dev = sixteenBit ? attentionDevice_ : device_;
  // PyTorch's async TP runs a matmul fused with a collective as tp matmuls of m/tp rows, one per
  // rank's shard (_fused_all_gather_matmul, _fused_matmul_reduce_scatter), which fill the GPU's
  // waves less well: forward, the column-parallel linears (input gathered) and the row-parallel
  // ones (output reduce-scattered); backward, the row-parallel linears' input gradient (output
  // gradient gathered). The weight gradients and the column-parallel input gradients are whole.
  // (An MoE block's shared expert adds its partial output to the routed one before the reduction:
  // torchtitan's shared_experts.w2 keeps a Partial output, so nothing of the block is fused.)
  const bool decomposed = c_.tpMicroPipeline && c_.sequenceParallel && c_.tp > 1 && op.kind == OpKind::kMatMul &&
                          (op.shard == Shard::kColumn || op.shard == Shard::kRow) && !op.name.starts_with("moe.");
  // (The host issues the fused op as one op of the compiled graph: its inner launches are counted
  // as one.)
  const int streams = op.kind == OpKind::kGroupedMatMul ? c_.groupedGemmStreams : 0;
  auto fusedGemm = [&](double m, double n, double k) {
    return decomposed ? tp_ * gemmOn(dev, m / tp_, n, k, g->count) : gemmOn(dev, m, n, k, g->count, streams);
  };
  fwd = fusedGemm(g->m, g->n, g->k);
  // The fused matmul-reduce-scatter exchanges the unreduced [m, n] partial products and sums the
  // tp received [m/tp, n] blocks in a kernel of its own (reduce_fn over the stacked partials).
  if (decomposed && op.shard == Shard::kRow) {
    fwd += std::max(floor_, g->m * g->n * g->count * static_cast<double>(c_.activationBytes) * (1.0 + 1.0 / tp_) / bw_);
    out_.opsFwd += 1;
  }
  // Backward: the input gradient [m, n] x [n, k] and the weight gradient [k, m] x [m, n], each at
  // its own shape (measured where the database has it, else the roofline).
  const bool wgradHp = c_.float8Recipe == Float8Recipe::kRowwiseGwHp;
  double wgrad = gemmOn(wgradHp ? attentionDevice_ : dev, g->k, g->n, g->m, g->count, streams);
  // Megatron's gradient-accumulation fusion (and Transformer Engine's fused wgrad accumulation)
  // has the weight-gradient GEMM add into the fp32 main_grad: it reads and writes the [k, n]
  // weight in fp32, which bounds short products (an expert's few hundred tokens) by memory.
  if (c_.wgradIntoFp32 && op.kind != OpKind::kBatchedMatMul) {
    const double operand = static_cast<double>(sixteenBit ? c_.activationBytes : c_.dtypeBytes);
    const double io = (g->m * g->k + g->m * g->n) * operand + g->k * g->n * 8.0;
    wgrad = std::max(wgrad, g->count * io / dev.memoryBytesPerSecond);
  }
  const double dgrad = op.shard == Shard::kRow ? fusedGemm(g->m, g->k, g->n) : gemmOn(dev, g->m, g->k, g->n, g->count, streams);
  // The re-gather of a column-parallel linear's input runs beside its input-gradient GEMM; what that
  // GEMM (or, for the layers' linears, Transformer Engine's userbuffers) does not cover is exposed,
  // and what it covers slows both by the overlap factor.
  auto regather = [&](double gather, bool userbuffers) {
    const double hidden = userbuffers ? gather : std::min(gather, dgrad);
    regatherExposed_ += std::max(0.0, gather - hidden) + device_.overlapSlowdown * hidden;
    out_.opsBwd += 1;
  };
  if (op.kind == OpKind::kMatMul && op.shard == Shard::kColumn && regather_ > 0) regather(regather_, c_.tpCommOverlap);
  // The output layer is column-parallel too: Megatron's ColumnParallelLinear gathers its 16-bit input
  // again beside its input-gradient GEMM, outside Transformer Engine's userbuffers.
  if (op.kind == OpKind::kMatMul && op.shard == Shard::kVocab && regatherOutput_ > 0) regather(regatherOutput_, false);
  bwd = dgrad + wgrad;
  bwd += biasGradient(op, *g);
  if (torchao && !sixteenBit) {
    const OpTime cast = float8Casts(op, *g);
    fwd += cast.fwd;
    bwd += cast.bwd;
  }
  return {fwd, bwd};
}

// A biased linear's bias gradient sums its output gradient over the rows (Megatron-LM's linears:
// grad_output.sum(dim=0); PyTorch's autograd reduces a broadcast bias the same way): a read of that
// gradient. Transformer Engine fuses it into the GEMM for the linears that add their own bias
// (OpTemplate::biasInGemm). A row-parallel linear's bias is added after the reduction, on the sequence
// shard under sequence parallelism.
double LayerPass::biasGradient(const OpTemplate& op, const ScaledGemm& g) {
  if (!op.bias || (c_.fusedBiasGrad && op.biasInGemm)) return 0.0;
  const double rows = op.shard == Shard::kRow && c_.sequenceParallel ? tp_ : 1.0;
  out_.opsBwd += 1;
  return std::max(floor_, g.m * g.n * g.count * static_cast<double>(c_.activationBytes) / rows / bw_);
}

// torchao's float8 casts around a linear (torchtitan's float8 converters): the input and weight forward,
// the output gradient (and, by recipe, the transposed operands) backward.
OpTime LayerPass::float8Casts(const OpTemplate& op, const ScaledGemm& g) {
  // Under tensor parallelism torchtitan's float8 layouts (tensorwise only) cast the operand a
  // sequence-parallel all-gather brings before gathering it: on the shard, and gathered in fp8.
  const bool castShard = c_.float8Recipe == Float8Recipe::kTensorwise && c_.sequenceParallel;
  const double input = g.m * g.k * g.count / (castShard && op.shard == Shard::kColumn ? tp_ : 1.0);
  const double gradOutput = g.m * g.n * g.count / (castShard && op.shard == Shard::kRow ? tp_ : 1.0);
  // torchtitan's linears are separate modules (wq, wk, wv; w1, w3): one set of per-linear kernels
  // each for the products a fused GEMM of colo's graph stands for.
  const double linears = static_cast<double>(productShares(op, c_).count) * g.count;
  const Float8CastSeconds cast = float8CastSeconds(c_.float8Recipe, input, g.k * g.n * g.count, gradOutput, linears, device_);
  out_.opsFwd += cast.kernelsForward;
  out_.opsBwd += cast.kernelsBackward;
  return {cast.forward, cast.backward};
}

// Any other op: memory-bound passes over its bytes (or its eager decomposition's kernels, or its
// measured kernel), nothing when flash attention fuses it away.
OpTime LayerPass::streamedOp(const OpTemplate& op, bool fused) {
  double fwd = 0;
  double bwd = 0;
  if (fused) return {};
  // A sort of the routed rows by local expert moves nothing when a GPU holds one expert; DeepEP's and
  // HybridEP's dispatch lay the rows out by expert themselves (Megatron-Core's flex dispatcher has no sort).
  if (sortsByExpert(op) && (static_cast<double>(op.groups) <= static_cast<double>(c_.ep) || c_.dedupDispatch)) return {};
  const double split = elementSplit(op, c_);
  // Dropout also writes its 1-byte mask (its saved bytes) forward and reads it backward. A residual
  // add right after a hidden-state dropout is fused with it (Megatron's bias-dropout-add): the pair
  // reads x and the residual and writes the sum and the mask, so the add only adds its residual read.
  const bool fusedAdd = op.kind == OpKind::kAdd && previous_ && previous_->kind == OpKind::kDropout &&
                        previous_->shard == Shard::kSequence;
  double traffic = op.bytes;
  if (op.kind == OpKind::kDropout) traffic += op.savedBytes;
  // A fused cross-entropy reads the 16-bit logits once and writes a statistic per row; its
  // backward reads them again and writes their 16-bit gradient (twice the forward's traffic).
  // In place (Transformer Engine's), the forward reads them twice (the row statistics, then the
  // loss) and writes the gradient over them; the backward scales it, a read and a write.
  const bool fusedLoss = op.kind == OpKind::kCrossEntropy && c_.fusedCrossEntropy;
  if (fusedLoss) traffic = fusedLossSavedBytes(op, c_) + (c_.crossEntropyInPlace ? 2.0 * op.elements * static_cast<double>(c_.activationBytes) : 0.0);
  double lossBackward = c_.crossEntropyInPlace ? 2.0 / 3.0 : 2.0;
  // Megatron's native fusion runs the unfused loss's passes as three compiled kernels forward: the
  // upcast with the row max (16-bit in, fp32 out), the shift, exp and sum in place (fp32 in and
  // out) and the division in place (fp32 in and out); backward one: the saved softmax in, updated
  // in place, and the 16-bit gradient out (megatron/core/fusions/fused_cross_entropy.py).
  const bool nativeLoss = op.kind == OpKind::kCrossEntropy && c_.nativeFusedLoss && !fusedLoss;
  if (nativeLoss) {
    const double dt = static_cast<double>(c_.activationBytes);
    traffic = op.elements * (dt + 4.0 + 8.0 + 8.0);
    lossBackward = (8.0 + dt) / (dt + 20.0);
  }
  if (fusedAdd) traffic = op.bytes / 3.0;
  const double bytes = traffic * tokenScale_ / split;
  fwd = fusedAdd ? bytes / bw_ : std::max(floor_, bytes / bw_);
  // Backward reads the saved input and the incoming gradient and writes one gradient (1.5 passes
  // of the forward's traffic); dropout's backward is one masked pass (gradient and mask in, gradient out: the forward's traffic); a residual's gradient is
  // passed through to both inputs without a kernel of its own.
  if (op.kind == OpKind::kAdd) bwd = 0.0;
  else if (op.kind == OpKind::kDropout || op.kind == OpKind::kPermute) bwd = fwd;  // one pass (a permutation's backward: the inverse copy)
  else bwd = std::max(floor_, (fusedLoss || nativeLoss ? lossBackward : 1.5) * bytes / bw_);
  // Eager: the decomposition's kernels at HBM speed (a measured kernel is the fused one). The host
  // issues each of its aten ops; the host floor's time per op covers about three of them.
  const EagerOp eager = eagerDecomposition(op, c_);
  if (eager.kernelsFwd > 0) {
    const double elements = op.elements * tokenScale_ / split;
    fwd = std::max(eager.kernelsFwd * floor_, eager.fwdBytes * elements / bw_);
    bwd = std::max(eager.kernelsBwd * floor_, eager.bwdBytes * elements / bw_);
    out_.opsFwd += (eager.kernelsFwd - 1) / 3.0;
    out_.opsBwd += (eager.kernelsBwd - 1) / 3.0;
    if (counts_ && c_.kernels && !c_.kernels->empty()) ++counts_->kernelsRoofline;
  }
  const bool measuredBwd = eager.kernelsFwd == 0 && applyMeasured(c_, [&] { return scaledKernel(op, c_); }, fwd, bwd, counts_);
  // PyTorch's embedding backward returns a dense gradient of the whole table: it zero-fills it
  // (at::zeros in embedding_dense_backward) before adding the tokens' rows, every micro-batch
  // (Megatron's VocabParallelEmbedding runs F.embedding on its vocabulary shard). colo-profile's
  // `embedding` kernel looks up as many rows as tokens in a table of as many rows, so a measured
  // backward holds the zero-fill of that many rows already. Under gradient-accumulation fusion
  // Megatron's backward hook then adds the gradient into the fp32 main_grad
  // (param.main_grad.add_(param.grad.data)): read both, write main_grad.
  if (op.kind == OpKind::kEmbedding && op.params > 0) {
    const double table = op.params / (op.shard == Shard::kVocab ? tp_ : 1.0);  // elements
    const double looked = op.elements * tokenScale_ / split;                    // the tokens' rows, elements
    const double zeroed = measuredBwd ? std::max(0.0, table - looked) : table;
    bwd += (zeroed * static_cast<double>(c_.activationBytes) + table * c_.embeddingGradAddBytes) / bw_;
  }
  return {fwd, bwd};
}

// A Transformer Engine linear's weight on this GPU (the [k, n] operand of the GEMM it runs here, one
// per local expert): what fp8 and fp4 runs keep quantized (stageMemory). The router is a plain
// parameter; the vocabulary-parallel head and the embedding are Megatron's own layers (the head under
// fp8_output_proj is a TE linear built outside fp8_model_init: StateBytes::headCopy).
void LayerPass::countLinearWeights(const OpTemplate& op) {
  if (op.kind != OpKind::kMatMul && op.kind != OpKind::kGroupedMatMul) return;
  if (op.params <= 0 || op.shard == Shard::kVocab || std::string_view(op.name).ends_with("router")) return;
  const auto g = scaledGemm(op, c_);
  if (!g) return;
  const double weights = g->n * g->k * g->count;
  out_.linearWeightsPerGpu += weights;
  if (op.kind == OpKind::kGroupedMatMul) out_.expertLinearWeightsPerGpu += weights;
}

// What per-op selective recompute runs again before the backward, and keeps.
void LayerPass::recomputedByOp(const OpTemplate& op, double fwd, bool fused) {
  if ((op.kind == OpKind::kMatMul || op.kind == OpKind::kGroupedMatMul) && !fused) {
    double kept = 0;
    const ProductShares parts = productShares(op, c_);
    for (std::size_t i = 0; i < parts.count; ++i) kept += (++products_ % 2 == 1) ? parts.share[i] : 0.0;
    if (const auto g = scaledGemm(op, c_)) {
      const double split = op.shard == Shard::kRow ? seqSplit_ : 1.0;  // reduce-scattered under SP
      opKeptOutputs_ += kept * g->m * g->n * g->count * static_cast<double>(c_.activationBytes) / split;
      out_.recomputeOpFlops += (1.0 - kept) * 2.0 * g->m * g->n * g->k * g->count;
    }
    out_.recomputeOpFwd += (1.0 - kept) * fwd;
  } else if (!op.attentionCore) {
    out_.recomputeOpFwd += fwd;  // norms, rotary, activations, residuals: cheap, recomputed
  }
  if (op.attentionCore) out_.attnCoreFwd += fwd;
}

// What the op keeps for its backward, under each recompute policy.
void LayerPass::keptForBackward(const OpTemplate& op, bool fused) {
  // Saved activations: a linear saves its input (full width unless SP splits it); everything
  // downstream of a column-parallel linear is split by TP.
  double savedSplit = 1.0;
  switch (op.shard) {
    case Shard::kColumn:
    case Shard::kSequence:
      savedSplit = seqSplit_;
      break;
    case Shard::kVocab:
      savedSplit = op.kind == OpKind::kMatMul ? seqSplit_ : tp_;
      break;
    case Shard::kRow:
    case Shard::kHeads:
    case Shard::kInner:
      savedSplit = tp_;
      break;
    case Shard::kReplicated:
      savedSplit = 1.0;
      break;
    case Shard::kExpert:  // each expert-TP group keeps its own tokens' share (see scaledGemm)
      savedSplit = tp_ / static_cast<double>(c_.etp);
      break;
  }
  // Transformer Engine keeps a linear layer's input for the weight gradient in its fp8 copy (Linear,
  // LayerNormLinear, LayerNormMLP and GroupedLinear save the quantized input when the recipe runs the
  // weight gradient in fp8, its default): 1 byte per element instead of the template's 2. Megatron's
  // output layer is not a Transformer Engine module (unless fp8_output_proj) and torchao's recipes
  // save the 16-bit input.
  const bool fp8Input = transformerEngineFp8(c_) && (op.kind == OpKind::kMatMul || op.kind == OpKind::kGroupedMatMul) &&
                        (op.shard != Shard::kVocab || c_.fp8OutputProj);
  // A fused cross-entropy keeps the 16-bit logits and a statistic per row, not an fp32 copy.
  // Templates hold 16-bit bytes, which the stage rescales to the plan's activations: bytes counted
  // at the plan's own width go back to template units first.
  const double toTemplate = 2.0 / static_cast<double>(c_.activationBytes);
  const EagerOp eagerSaved = eagerDecomposition(op, c_);
  const double opSaved = op.kind == OpKind::kCrossEntropy && c_.fusedCrossEntropy ? fusedLossSavedBytes(op, c_) * toTemplate
                         : eagerSaved.kernelsFwd > 0 && !fused ? eagerSaved.savedBytes * op.elements * toTemplate
                                                               : op.savedBytes;
  const double saved = opSaved * tokenScale_ / savedSplit * (fp8Input ? 0.5 : 1.0);
  out_.savedFull += saved;
  if (op.savedGroup != kNoGroup) out_.groupSaved[op.savedGroup] += saved;
  if (op.attentionCore) attnSaved_ += saved;
  quadraticSaved_ += op.savedQuadratic * tokenScale_ / savedSplit;
}

void LayerPass::fusedAttention() {
  // FlashAttention: one fused kernel each way; a causal mask lets it skip half the blocks.
  if (c_.flash && scores_) {
    const double count = static_cast<double>(scores_->batch) * b_ / tp_;
    // Q.K^T over the query/key width, then P.V over the value width (the same width but for latent
    // attention, whose values are narrower).
    const double valueWidth = static_cast<double>(context_ ? context_->n : scores_->k);
    const double flops = 2.0 * count * (static_cast<double>(scores_->m) / cp_) * static_cast<double>(scores_->n) *
                         (static_cast<double>(scores_->k) + valueWidth);
    // The share of query-key pairs a causal mask leaves: half of a full (or chunked) sequence, and
    // s*w - w*(w-1)/2 of the s*w pairs a sliding window of w keys spans.
    const double m = static_cast<double>(scores_->m);
    const double density = !scores_->causal       ? 1.0
                           : scores_->window > 0 ? 1.0 - (static_cast<double>(scores_->window) - 1.0) / (2.0 * m)
                                                : 0.5;
    const double work = density * flops;
    const auto t = fusedAttentionSeconds(work, device_, static_cast<double>(scores_->k));
    double fwd = t.forward;
    double bwd = t.backward;
    applyMeasured(c_, [&] { return flashKernel(layer_, c_); }, fwd, bwd, counts_);
    out_.fwd += fwd;
    out_.bwd += bwd;
    out_.opsFwd += 1;
    out_.opsBwd += 1;
    if (opCosts_) opCosts_->push_back({"attn.flash", "flash_attention", fwd, bwd});
    out_.attnCoreFwd += fwd;
    // Saves Q, K, V, the output and the softmax statistics instead of anything quadratic.
    const double flashSaved = (layer_.qkvSavedPerSample + layer_.attentionOutputPerSample + layer_.lsePerSample) * tokenScale_ / tp_;
    out_.savedFull += flashSaved - attnSaved_;
    out_.savedSelective = out_.savedFull;
  } else {
    out_.savedSelective = out_.savedFull - quadraticSaved_;
  }
  // Latent attention's Q, K and V, which the attention core keeps (fused or not): mla_up_proj drops them.
  if (layer_.mla) out_.groupSaved[kMlaQkv] += layer_.qkvSavedPerSample * tokenScale_ / tp_;
}

void LayerPass::hostFloor() {
  // Host floor: the GPU cannot run a kernel before the host has issued it. When the layer's kernels
  // and exposed collectives take less than the host's time to issue them, the GPU waits for the rest.
  if (c_.hostSecondsPerOp > 0) {
    const double deviceFwd = out_.fwd + out_.tpCommFwd + out_.cpCommFwd + out_.epCommFwd;
    const double deviceBwd = out_.bwd + out_.tpCommBwd + out_.cpCommBwd + out_.epCommBwd;
    out_.hostWaitFwd = std::max(0.0, out_.opsFwd * c_.hostSecondsPerOp - deviceFwd);
    out_.hostWaitBwd = std::max(0.0, out_.opsBwd * c_.hostSecondsPerOp - deviceBwd);
    out_.fwd += out_.hostWaitFwd;
    out_.bwd += out_.hostWaitBwd;
    if (opCosts_ && out_.hostWaitFwd + out_.hostWaitBwd > 0) {
      opCosts_->push_back({"host.wait", "host", out_.hostWaitFwd, out_.hostWaitBwd});
    }
  }
}

}  // namespace

LayerCost costLayer(const LayerTemplate& layer, const LayerConfig& c, const DeviceModel& device,
                    const GroupPlacement& tpGroup, const GroupPlacement& cpGroup, const GroupPlacement& epGroup,
                    LookupCounts* counts, std::vector<OpCost>* opCosts) {
  return LayerPass(layer, c, device, tpGroup, cpGroup, epGroup, counts, opCosts).run();
}

}  // namespace colo::costmodel::detail
