// Per-GPU memory of a pipeline stage by kind (docs/costmodel.md, "Memory").
#include <algorithm>
#include <array>
#include <string_view>

#include "stage_cost.h"

namespace colo::costmodel::detail {
namespace {

// Micro-batches whose activations a stage holds at the worst moment of the schedule.
double microBatchesInFlight(const Plan& plan, std::int64_t stage) {
  const double mb = static_cast<double>(plan.numMicroBatches());
  const double p = static_cast<double>(plan.parallel.pp);
  const double v = static_cast<double>(plan.parallel.virtualStages);
  const double s = static_cast<double>(stage);
  switch (plan.schedule) {
    case Schedule::kGpipe:
      return mb;
    case Schedule::kOneFOneB:
    case Schedule::kZeroBubble:
      return std::min(mb, p - s);
    case Schedule::kInterleaved: {
      // Chunk-micro-batches in flight at the end of warm-up, each one chunk (1/v of the stage) deep.
      const double warm = (p - s - 1) * 2 + (v - 1) * p + 1;
      return std::min(mb * v, warm) / v;
    }
  }
  return 1;
}

// Transformer Engine's placeholder weight gradients (execution.te_dummy_wgrads; docs/costmodel.md,
// "Placeholder weight gradients"): with fused weight-gradient accumulation each TE linear hands autograd
// an uninitialised tensor of its weight's shape, taken from a cache that keeps one per distinct shape and
// dtype for the rest of the run. The stage's layers' distinct per-GPU weight shapes, in bytes: attention
// and MLP linears (column- and row-parallel, and the replicated low-rank projections of MLA), and one
// expert's matrices of a grouped GEMM. The router (a plain parameter) and the vocabulary-parallel head
// and embedding (Megatron's own layers, not TE's) get real gradients, except the head of a stage that
// has it (`teHead`) under fp8_output_proj, where it is a TE linear.
double placeholderWgradBytes(const ModelTemplates& T, std::uint64_t classes, const Parallelism& par, double elementBytes,
                             bool teHead) {
  struct ShapeSeen {
    double rows = 0, cols = 0;
  };
  std::array<ShapeSeen, 64> seen{};
  std::size_t count = 0;
  double total = 0;
  // A weight's per-GPU shard is the [k, n] operand of the GEMM the op runs on one GPU (scaledGemm).
  LayerConfig shards;
  shards.tp = par.tp;
  shards.ep = par.ep;
  shards.etp = par.expertTp();
  auto visit = [&](const std::vector<OpTemplate>& ops, bool vocab) {
    for (const auto& op : ops) {
      if (op.params <= 0 || (op.shard == Shard::kVocab) != vocab || std::string_view(op.name).ends_with("router")) continue;
      if (op.kind != OpKind::kMatMul && op.kind != OpKind::kGroupedMatMul) continue;
      const auto gemm = scaledGemm(op, shards);
      if (!gemm) continue;
      const double rows = gemm->n, cols = gemm->k;  // [out, in], as torch keeps it
      const bool known = std::any_of(seen.begin(), seen.begin() + static_cast<std::ptrdiff_t>(count),
                                     [&](const ShapeSeen& s) { return s.rows == rows && s.cols == cols; });
      if (known) continue;
      if (count < seen.size()) seen[count++] = {rows, cols};
      total += rows * cols * elementBytes;
    }
  };
  for (std::size_t c = 0; c < T.classes.size(); ++c) {
    if ((classes & (std::uint64_t{1} << std::min<std::size_t>(c, 63))) != 0) visit(T.classes[c].ops, false);
  }
  if (teHead) visit(T.head.ops, true);
  return total;
}

// The output layer's weight on this GPU, in elements: the [k, n] operand of its GEMM (vocabulary / tp).
double headWeightElements(const ModelTemplates& T, const Parallelism& par) {
  LayerConfig shards;
  shards.tp = par.tp;
  double elements = 0;
  for (const auto& op : T.head.ops) {
    if (op.kind != OpKind::kMatMul || op.shard != Shard::kVocab) continue;
    if (const auto gemm = scaledGemm(op, shards)) elements += gemm->n * gemm->k * gemm->count;
  }
  return elements;
}

// The logits of one micro-batch on this GPU (the loss's saved fp32 softmax is 4 B each).
double logitsPerGpu(const Plan& plan, const ModelTemplates& T) {
  double logits = 0;
  for (const auto& op : T.head.ops) {
    if (op.kind == OpKind::kCrossEntropy) logits += op.savedBytes / 4.0;
  }
  return logits * static_cast<double>(plan.microBatchSize) / static_cast<double>(plan.parallel.cp) /
         static_cast<double>(plan.parallel.tp);
}

bool pytorchLoss(const Execution& x) { return x.torchCrossEntropy && !x.fusedCrossEntropy; }

// What the loss holds beside the logits it keeps for its backward, at its worst moment, per GPU: the
// 16-bit logits beside their fp32 upcast in the forward, then their 16-bit gradient beside it in the
// backward; never both, as the logits are freed when the forward returns (a fused kernel: the gradient
// beside the saved 16-bit logits; fused in place: nothing). PyTorch's F.cross_entropy on the upcast:
// nll_loss's dense fp32 gradient and log_softmax's fp32 gradient, both beside the saved
// log-probabilities, in its backward. Over a vocabulary split by tensor parallelism PyTorch runs it
// through DTensor's loss_parallel handlers (torchtitan's default), whose one fused backward holds a
// third fp32 tensor: the zero-filled gradient, the exponent of the log-probabilities and their sum
// (docs/costmodel.md, "PyTorch's loss over a split vocabulary, and the hole its logits leave").
double logitCopyBytes(const Plan& plan, const ModelTemplates& T, double dt) {
  const auto& x = plan.execution;
  const double fp32Tensors = plan.parallel.tp > 1 ? 3.0 : 2.0;
  const double copies = x.fusedCrossEntropy && x.crossEntropyInPlace ? 0.0 : 1.0;
  return logitsPerGpu(plan, T) * (pytorchLoss(x) ? fp32Tensors * 4.0 : dt * copies);
}

// What the caching allocator keeps reserved beside the loss's peak without a tensor in it, per GPU:
// PyTorch's cross-entropy on the fp32 upcast frees the 16-bit logits (and the upcast) when the forward
// returns, and the backward's first fp32 tensor takes the upcast's block, leaving the 16-bit logits'
// share of it free between live blocks; the second fp32 tensor fits in no free block and extends the
// segment, so the hole stays reserved through the loss's peak (PyTorch's CUDACachingAllocator:
// best-fit from the free blocks of the pool, blocks split and merged only with their neighbours,
// cached memory released only on empty_cache or an allocation failure; the same with expandable
// segments, which torchtitan enables). Megatron's and the fused losses free nothing before their
// backward's allocation.
double upcastLogitsHole(const Plan& plan, const ModelTemplates& T, double dt) {
  return pytorchLoss(plan.execution) ? logitsPerGpu(plan, T) * dt : 0.0;
}

}  // namespace

MemoryBreakdown stageMemory(const Plan& plan, const StageWork& w, std::int64_t stage, const StateBytes& bytes,
                            const StageMemoryInputs& in, double* inFlightOut) {
  const ModelTemplates& T = *in.templates;
  const auto& par = plan.parallel;
  const bool last = stage == par.pp - 1;
  MemoryBreakdown mem;
  // Model states. Expert parameters are replicated only across the expert-data-parallel ranks
  // (tp x cp x dp / (expert_tp x ep); dp x cp / ep with expert_tp = tp), and ZeRO shards their states
  // over those (Megatron-Core's expert data-parallel group).
  const double shardParams = shardedParams(plan, w);
  auto sharded = [&](double bytesPerParam, bool on) { return (on ? shardParams : w.params) * bytesPerParam; };
  mem.weights = sharded(bytes.weight, plan.zeroStage >= 3) * (1.0 - plan.offload.paramsFraction);
  // Transformer Engine's linear weights under fp8 or fp4: their cached quantized copies, or the
  // quantized weights in place of the 16-bit ones (StateBytes::linearWeight; ZeRO < 3 only).
  mem.weights += w.linearWeights * (bytes.linearWeight - bytes.weight);
  if (last && bytes.headCopy > 0) mem.weights += headWeightElements(T, par) * bytes.headCopy;
  // A ZeRO-3 stage that stays gathered from its first forward to its last backward (no reshard between
  // micro-batches) holds the whole stage unsharded beside its shards.
  if (stageStaysGathered(plan)) mem.weights += w.params * bytes.gathered;
  // fp32 parameters under ZeRO-2 are FSDP's SHARD_GRAD_OP: the fp32 parameters are sharded too, and the
  // 16-bit copies gathered for the forward stay until the backward.
  if (plan.zeroStage == 2 && plan.execution.fp32Params && bytes.weight > bytes.gathered) {
    mem.weights = sharded(bytes.weight, true) * (1.0 - plan.offload.paramsFraction) + w.params * bytes.gathered;
  }
  mem.gradients = sharded(bytes.gradientMemory, gradientsSharded(plan));
  mem.optimizer = sharded(bytes.optimizer, plan.zeroStage >= 1) * (1.0 - plan.offload.optimizerFraction);
  // What offload moves to the host: the optimizer share with its fp32 master copy (also in fp32
  // training, where the device's weights are the master: ZeRO-Offload steps a host copy), its gradient
  // partitions under ZeRO >= 2 (DeepSpeed accumulates them there), and the parameter share.
  const double hostOptimizer = 4.0 * optimizerMoments(plan.optimizer) + 4.0;
  mem.host = sharded(hostOptimizer, plan.zeroStage >= 1) * plan.offload.optimizerFraction +
             sharded(bytes.weight, plan.zeroStage >= 3) * plan.offload.paramsFraction;
  if (plan.zeroStage >= 2 && gradientsSharded(plan)) mem.host += mem.gradients * plan.offload.optimizerFraction;
  // ZeRO-Offload (ZeRO >= 2) keeps the fp32 gradient partitions of the offloaded optimizer share in host
  // memory: each bucket is copied out as it is reduced (DeepSpeed's offload_optimizer; the 16-bit bucket
  // buffers stay, counted below).
  if (plan.zeroStage >= 2 && gradientsSharded(plan)) mem.gradients *= 1.0 - plan.offload.optimizerFraction;
  if (plan.execution.teDummyWgrads) mem.gradients += placeholderWgradBytes(T, w.layerClasses, par, bytes.gathered,
                                                                               last && plan.precision == DType::kFp8 && plan.execution.fp8OutputProj);

  // Activations. The head's saved tensors (the final norm's input, the fp32 logits the loss keeps for
  // its backward) belong to the last virtual stage, whose backward follows its forward at once under
  // 1F1B, interleaving and zero bubble: one micro-batch holds them. GPipe keeps every micro-batch's.
  const double inFlight = microBatchesInFlight(plan, stage);
  if (inFlightOut) *inFlightOut = inFlight;
  const double headActivations =
      (last && plan.schedule != Schedule::kGpipe) ? in.layers->head.savedFull * in.byteScale : 0.0;
  // Activation offload (pp 1, one micro-batch at a time) keeps the offloaded layers' activations in host
  // memory; on the device, at the end of the forward, only the last offloaded layer's, whose copy runs
  // during the last window, is still there beside the layers kept (docs/costmodel.md, "Activation offload").
  const double offloadedAway = w.offloaded > 0 ? (w.offloaded - w.largestOffloaded) * inFlight : 0.0;
  const double layersSaved = (w.saved - headActivations) * inFlight - offloadedAway;
  mem.hostActivations = w.offloaded * inFlight;
  mem.host += mem.hostActivations;

  // Buffers: sequence-parallel gathers, the loss's copies of the logits (logitCopyBytes; a fused
  // cross-entropy keeps the 16-bit logits themselves, counted as saved), data-parallel gradient
  // buckets, ZeRO-3 gathered layers.
  const double dt = in.byteScale * static_cast<double>(T.dtypeBytes);
  const double mbs = static_cast<double>(plan.microBatchSize);
  const double fullActivation =
      mbs * static_cast<double>(T.seqLen) / static_cast<double>(par.cp) * static_cast<double>(T.hidden) * dt;
  double buffers = 0;
  if (par.tp > 1) buffers += 2 * fullActivation;
  const double logitCopies = last ? logitCopyBytes(plan, T, dt) : 0.0;
  const double logitHole = last ? upcastLogitsHole(plan, T, dt) : 0.0;
  // The head's tensors of a micro-batch (its saved logits, their 16-bit copies) live from its forward
  // to the loss's backward; a recomputed layer's working set exists only inside that layer's backward,
  // which runs after the loss's and the output layer's backward have freed them. The two phases never
  // overlap: the larger sets the peak (docs/costmodel.md, "full recompute's working set and the head").
  // Zero bubble defers weight gradients, the output layer's too: the logits' gradient waits for it
  // while the layers' backward runs, so there both are counted.
  const bool phasesApart = plan.schedule != Schedule::kZeroBubble;
  double hole = 0;
  if (phasesApart && w.working > headActivations + logitCopies + logitHole) {
    mem.activations = layersSaved + w.working;
  } else {
    mem.activations = layersSaved + headActivations + (phasesApart ? 0.0 : w.working);
    buffers += logitCopies;
    hole = logitHole;
  }
  if (par.dp * par.cp > 1) buffers += std::min(w.params * bytes.gradient, 2 * 40e6 * bytes.gradient);
  if (plan.zeroStage == 3 && !stageStaysGathered(plan)) {
    double largestLayer = 0;
    for (const auto& lc : in.layers->classes) largestLayer = std::max(largestLayer, lc.paramsPerGpu);
    buffers += 2 * largestLayer * bytes.gathered;
  }
  mem.buffers = buffers;
  mem.allocator = 0.08 * (mem.activations + mem.buffers) + hole;
  mem.context = in.contextBytes;
  return mem;
}

}  // namespace colo::costmodel::detail
