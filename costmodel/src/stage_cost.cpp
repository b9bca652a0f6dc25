// Chunks, stages and their time per micro-batch, and the data-parallel and optimizer tail
// (docs/costmodel.md, "Communication" and "Step time").
#include "stage_cost.h"

#include <algorithm>

namespace colo::costmodel::detail {

Groups placeGroups(const ClusterSpec& cluster, const Parallelism& par) {
  Groups g;
  g.tp = placeGroup(cluster, par, Dim::kTp);
  g.cp = placeGroup(cluster, par, Dim::kCp);
  g.dp = placeGroup(cluster, par, Dim::kDp);
  g.ep = placeGroup(cluster, par, Dim::kExpert);
  g.pp = placeGroup(cluster, par, Dim::kPp);
  Parallelism folded = par;
  folded.dp = par.dp * par.cp;
  folded.cp = 1;
  g.grad = placeGroup(cluster, folded, Dim::kDp);
  g.expertGrad = placeGroup(cluster, par, Dim::kExpertData);
  return g;
}

double communicatorMemory(const Groups& groups, const DeviceModel& device) {
  double bytes = 0;
  for (const GroupPlacement* g : {&groups.tp, &groups.cp, &groups.dp, &groups.ep, &groups.pp}) {
    const LinkLevel* link = g->inner ? g->inner : g->outer;
    if (link) bytes += communicatorBytes(device, g->size, link->kind, g->crossesNodes());
  }
  return bytes;
}

double pipelineHopSeconds(const Plan& plan, const ModelTemplates& T, const Groups& groups, const ClusterSpec& cluster,
                          double activationBytes) {
  if (plan.parallel.pp <= 1) return 0.0;
  const double bytes = static_cast<double>(plan.microBatchSize) *
                       (static_cast<double>(T.seqLen) / static_cast<double>(plan.parallel.cp)) *
                       static_cast<double>(T.hidden) * activationBytes / static_cast<double>(plan.parallel.tp);
  GroupPlacement pair = groups.pp;
  pair.size = 2;
  if (groups.pp.stride < cluster.gpusPerNode) pair.outer = nullptr;  // neighbours share a node
  if (!pair.inner && !pair.outer) pair.inner = &cluster.links.front();
  return collectiveSeconds(Collective::kSendRecv, bytes, pair);
}

namespace {
// The recompute groups (layer_cost.h) a set of Megatron-Core recompute modules drops, as bits.
unsigned recomputeGroupMask(const RecomputeModules& m) {
  unsigned mask = 0;
  auto add = [&](RecomputeGroup g) { mask |= 1u << g; };
  if (m.layernorm) {
    add(kAttnNormOut);
    add(kMlpNormOut);
  }
  if (m.mlaUpProj) add(kMlaQkv);
  if (m.mlp) add(kDenseMlp);
  if (m.moeAct) add(kExpertAct);
  if (m.sharedExperts) add(kSharedInner);
  if (m.moe) {
    add(kMoeRest);
    add(kExpertAct);
    add(kSharedInner);
  }
  return mask;
}
}  // namespace

std::vector<ChunkCost> costChunks(const Plan& plan, const ModelTemplates& T, const CostedLayers& layers,
                                  const LayerConfig& config, double byteScale) {
  std::vector<ChunkCost> chunks(plan.stages.size());
  const RecomputeModules& modules = plan.execution.recomputeModules;
  const unsigned groups = recomputeGroupMask(modules);
  std::size_t layer = 0;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const StagePlan& sp = plan.stages[c];
    ChunkCost& cc = chunks[c];
    for (std::int64_t i = 0; i < sp.layers; ++i, ++layer) {
      const LayerCost& lc = layers.classes[T.layerClass[layer]];
      cc.layerClasses |= std::uint64_t{1} << std::min<std::size_t>(T.layerClass[layer], 63);
      const bool recomputes = i < sp.recomputeLayers;
      cc.fwd += lc.fwd;
      cc.bwd += lc.bwd;
      cc.tp += lc.tpCommFwd + lc.tpCommBwd;
      cc.cp += lc.cpCommFwd + lc.cpCommBwd;
      cc.ep += lc.epCommFwd + lc.epCommBwd;
      cc.commFwd += lc.tpCommFwd + lc.cpCommFwd + lc.epCommFwd;
      cc.params += lc.paramsPerGpu;
      cc.expertParams += lc.expertParamsPerGpu;
      cc.linearWeights += lc.linearWeightsPerGpu;
      cc.expertLinearWeights += lc.expertLinearWeightsPerGpu;
      cc.gatheredTensors += lc.gatheredTensors;
      cc.gemmFlopsFwd += lc.gemmFlopsFwdPerGpu;
      double saved = lc.savedFull;
      if (recomputes && sp.recompute == RecomputePolicy::kFull) {
        cc.recompute += lc.fwd + lc.tpCommFwd + lc.cpCommFwd + lc.epCommFwd;
        cc.recomputeFlops += lc.gemmFlopsFwdPerGpu;
        saved = lc.savedInput;
        cc.workingSet = std::max(cc.workingSet, 2.0 * lc.savedFull);
      } else if (recomputes && sp.recompute == RecomputePolicy::kSelective) {
        if (modules.coreAttn) {
          if (!config.flash) {
            cc.recompute += lc.attnCoreFwd;
            cc.recomputeFlops += lc.attnFlopsFwdPerGpu;
          }
          saved = lc.savedSelective;
        }
        // The other modules: each group dropped once, whichever modules name it; the largest one's
        // activations are rebuilt inside that module's backward.
        if (groups != 0) {
          // What is rebuilt lives through the backward of its half of the layer: the attention half's
          // groups together, the MLP half's together; the larger half is the working set.
          double attentionHalf = 0, mlpHalf = 0;
          for (int g = 0; g < kRecomputeGroups; ++g) {
            if ((groups & (1u << g)) == 0) continue;
            saved -= lc.groupSaved[g];
            cc.recompute += lc.groupFwd[g];
            cc.recomputeFlops += lc.groupFlops[g];
            (g == kAttnNormOut || g == kMlaQkv ? attentionHalf : mlpHalf) += lc.groupSaved[g];
          }
          saved = std::max(saved, lc.savedInput);
          cc.workingSet = std::max(cc.workingSet, std::max(attentionHalf, mlpHalf));
        }
      } else if (recomputes && sp.recompute == RecomputePolicy::kOp) {
        // Per-op: the backward first re-runs what was not kept, rebuilding the layer's activations.
        // torchtitan's save list keeps reduce-scatter outputs but no all-gather or all-reduce, so the
        // replayed forward runs the tensor-parallel all-gathers again (sequence parallelism: half of
        // the forward's reduce-scatter + all-gather pairs) or every forward all-reduce (without it).
        cc.recompute += lc.recomputeOpFwd + lc.tpCommFwd * (config.sequenceParallel ? 0.5 : 1.0);
        cc.recomputeFlops += lc.recomputeOpFlops;
        saved = lc.savedOp;
        cc.workingSet = std::max(cc.workingSet, 2.0 * lc.savedFull - lc.savedOp);
      }
      cc.savedPerMicroBatch += saved * byteScale;
      // Activation offload takes the model's first layers (pp 1: they are all in this chunk).
      if (static_cast<std::int64_t>(layer) < plan.offload.activationLayers) {
        cc.offloaded += saved * byteScale;
        cc.largestOffloaded = std::max(cc.largestOffloaded, saved * byteScale);
      }
    }
    cc.workingSet *= byteScale;
  }
  // The embedding joins the first chunk, the head the last (its GEMM is model FLOPs; the lookup is not).
  auto join = [&](ChunkCost& cc, const LayerCost& block) {
    cc.fwd += block.fwd;
    cc.bwd += block.bwd;
    cc.tp += block.tpCommFwd + block.tpCommBwd;
    cc.commFwd += block.tpCommFwd;
    cc.params += block.paramsPerGpu;
    cc.gatheredTensors += block.gatheredTensors;
    cc.savedPerMicroBatch += block.savedFull * byteScale;
  };
  join(chunks.front(), layers.embedding);
  ChunkCost& last = chunks.back();
  join(last, layers.head);
  last.gemmFlopsFwd += layers.head.gemmFlopsFwdPerGpu;
  // The tied output layer keeps its own copy of the embedding on the last stage.
  if (T.tiedHead && plan.parallel.pp > 1) last.params += T.tiedParams / static_cast<double>(plan.parallel.tp);
  return chunks;
}

StageWork sumStage(const std::vector<ChunkCost>& chunks, const Plan& plan, std::int64_t stage) {
  StageWork w;
  const auto pp = static_cast<std::size_t>(plan.parallel.pp);
  for (std::size_t c = static_cast<std::size_t>(stage); c < chunks.size(); c += pp) {
    const ChunkCost& cc = chunks[c];
    w.fwd += cc.fwd;
    w.bwd += cc.bwd;
    w.rec += cc.recompute;
    w.tp += cc.tp;
    w.cp += cc.cp;
    w.ep += cc.ep;
    w.commFwd += cc.commFwd;
    w.saved += cc.savedPerMicroBatch;
    w.offloaded += cc.offloaded;
    w.largestOffloaded = std::max(w.largestOffloaded, cc.largestOffloaded);
    w.working = std::max(w.working, cc.workingSet);
    w.params += cc.params;
    w.expertParams += cc.expertParams;
    w.linearWeights += cc.linearWeights;
    w.expertLinearWeights += cc.expertLinearWeights;
    w.gatheredTensors += cc.gatheredTensors;
    w.layers += plan.stages[c].layers;
    w.layerClasses |= cc.layerClasses;
    w.gemmFlops += cc.gemmFlopsFwd;
    w.recomputeFlops += cc.recomputeFlops;
  }
  return w;
}

bool gradientsSharded(const Plan& plan) {
  return plan.zeroStage >= 2 && plan.execution.gradSync == GradSync::kMicroBatch;
}

bool stageStaysGathered(const Plan& plan) {
  return plan.zeroStage >= 3 && plan.parallel.pp > 1 && plan.execution.gradSync == GradSync::kStep;
}

double gpusOnNode(const Plan& plan) {
  return static_cast<double>(std::max<std::int64_t>(1, std::min(plan.cluster.gpusPerNode, plan.cluster.totalGpus())));
}

double offloadBytesPerSecond(const Plan& plan, double pcieBytesPerSecond) {
  if (plan.offload.target != OffloadTarget::kNvme || plan.cluster.nvmeBytesPerSecond <= 0) return pcieBytesPerSecond;
  return std::min(pcieBytesPerSecond, plan.cluster.nvmeBytesPerSecond / gpusOnNode(plan));
}

StateBytes stateBytesOf(const Plan& plan) {
  StateBytes b;
  const bool fp32 = plan.precision == DType::kFp32;
  // PyTorch FSDP's mixed precision (and torch.amp) keeps the parameter itself in fp32 as the
  // optimizer's master; the 16-bit copy exists only while a layer is gathered or in use.
  const bool fp32Params = !fp32 && plan.execution.fp32Params;
  b.weight = fp32 || fp32Params ? 4.0 : 2.0;
  b.gathered = fp32 ? 4.0 : 2.0;
  // bf16: gradients accumulate in fp32 (Megatron's main_grad). fp16: 16-bit gradients, plus the fp32
  // copies the mixed-precision optimizer makes of them for the step (memory only).
  b.gradient = plan.precision == DType::kFp16 || plan.execution.gradReduceBf16 ? 2.0 : 4.0;
  // Accumulating in the 16-bit .grad (autograd) or beside it (DeepSpeed's fp32 copies) keeps both.
  // With fp32 parameters the kept gradient is the fp32 .grad of the (sharded) parameter: the 16-bit
  // gradient is cast for the reduction (FSDP's reduce_dtype) and freed.
  const GradAccumulation accumulation = plan.execution.gradAccumulation;
  const bool sixteenBitGrads = !fp32Params && (plan.precision == DType::kFp16 ||
                                               (!fp32 && (accumulation == GradAccumulation::kAutograd ||
                                                          accumulation == GradAccumulation::kFp32Copy)));
  b.gradientMemory = sixteenBitGrads ? 6.0 : (fp32Params ? 4.0 : b.gradient);
  // A bf16 main_grad buffer (--grad-reduce-in-bf16) accumulates at 16 bits, as fp16 training's does.
  const DType bufferType = plan.execution.gradReduceBf16 ? DType::kFp16 : plan.precision;
  b.accumulate = gradAccumulationBytes(accumulation, bufferType, static_cast<double>(plan.numMicroBatches()));
  // fp32 moments (two for AdamW and LAMB, one for LARS) and, unless the weights are fp32 themselves,
  // the fp32 master copy.
  b.optimizer = 4.0 * optimizerMoments(plan.optimizer) + (fp32 || fp32Params ? 0.0 : 4.0);
  b.linearWeight = b.weight;
  b.linearGathered = b.gathered;
  // Transformer Engine's quantized weights (docs/costmodel.md, "Transformer Engine's quantized weights").
  // One quantized copy of a weight holds, per element: per-tensor fp8 on Hopper its data and its
  // transpose (Hopper's fp8 GEMMs take only the TN layout), on Blackwell the data alone; MXFP8 a
  // row-wise and a column-wise copy with an E8M0 scale per 32 elements each; NVFP4 the same at 4 bits
  // with an E4M3 scale per 16. Without quantized parameters TE keeps that copy beside the 16-bit weight
  // for the whole run (its weight workspace, refreshed on each step's first micro-batch); with them it is
  // the weight. FSDP (ZeRO-3) keeps no cached copy.
  if (quantizedGemms(plan.precision) && transformerEngineRecipe(plan.execution.float8Recipe) && plan.zeroStage < 3) {
    const bool fp4 = plan.precision == DType::kFp4;
    const bool mxfp8 = !fp4 && plan.execution.float8Recipe == Float8Recipe::kMxfp8;
    const bool blackwell = plan.cluster.gpu.hasPeak(DType::kFp4);
    const double copy = fp4 ? 2.0 * (0.5 + 1.0 / 16.0) : mxfp8 ? 2.0 * (1.0 + 1.0 / 32.0) : blackwell ? 1.0 : 2.0;
    b.linearWeight = plan.execution.quantizedParams ? copy : b.weight + copy;
    // The all-gather moves the quantized row-wise data (fp4: with its scales); MXFP8's is staged in
    // bf16 in the gradient buffer and quantized after it (Megatron's reuse_grad_buf_for_mxfp8_param_ag).
    if (plan.execution.quantizedParams) b.linearGathered = fp4 ? 0.5 + 1.0 / 16.0 : mxfp8 ? 2.0 : 1.0;
    if (mxfp8 && plan.execution.fp8OutputProj) b.headCopy = copy;
  }
  return b;
}

// One ZeRO-3 collective over `bytes` of the stage's parameters or gradients. DeepSpeed from v0.3.13 to
// v0.5.4 (execution.per_parameter_gathers) runs one per parameter tensor (`tensors` of them share the
// bytes; the collective's cost is affine in its size, so equal shares give the exact sum), each passing
// through torch.distributed's list form: one copy per rank into or out of the flat buffer, issued by
// the host after the device synchronization that precedes every gather.
namespace {
double zeroThreeOver(Collective kind, double bytes, double tensors, const Plan& plan, const GroupPlacement& group,
                     const DeviceModel& device) {
  if (plan.zeroStage != 3 || !plan.execution.perParameterGathers || tensors <= 0) return collectiveSeconds(kind, bytes, group);
  if (group.size <= 1 || bytes <= 0) return 0.0;
  const double copies = static_cast<double>(group.size) * device.kernelFloorSeconds;
  return tensors * (collectiveSeconds(kind, bytes / tensors, group) + copies);
}

// The dense parameters' gradients are reduced (and ZeRO-sharded) over the dp x cp ranks, the routed
// experts' over the ranks that hold the same experts: Megatron-Core keeps expert parameters in grad
// buffers of their own, reduced over the expert-data-parallel group (distributed_data_parallel.py,
// expert_parallel_buffers); DeepSpeed's MoE likewise. `share` of the stage's parameters at
// `bytesPerParam`, as `tensors` parameter tensors.
double zeroThreeSeconds(Collective kind, const StageWork& w, double share, double bytesPerParam, double tensors,
                        const Plan& plan, const Groups& groups, const DeviceModel& device) {
  const double dense = w.params - w.expertParams;
  const double expertShare = w.params > 0 ? w.expertParams / w.params : 0.0;
  return zeroThreeOver(kind, share * dense * bytesPerParam, tensors * (1.0 - expertShare), plan, groups.grad, device) +
         zeroThreeOver(kind, share * w.expertParams * bytesPerParam, tensors * expertShare, plan, groups.expertGrad, device);
}

// Megatron-LM's check of the gradients for NaN and Inf before they are reduced (start_grad_sync ->
// check_grads, megatron/core/distributed/param_and_grad_buffer.py): per bucket, the norm of its whole
// gradient buffer (a read of every local parameter's reduced gradient), then torch.isnan and
// torch.isinf of that norm, each turned into a Python bool: a host synchronization after which the
// device waits for the host to launch the next kernel (one kernel floor each). Each model chunk has
// its own dense and expert buffers (distributed_data_parallel.py); only the first chunk of the first
// pipeline stage is split into buckets, of max(40M, 1M x dp) parameters (the data-parallel group
// without context parallelism, Megatron-LM 2026), and only when the reduction overlaps the backward
// (training.py disables bucketing for later chunks; without overlap a buffer is one bucket).
double nanCheckSeconds(const Plan& plan, const StageWork& w, const StateBytes& bytes, const DeviceModel& device,
                       std::int64_t stage) {
  const double perParam = plan.execution.gradAccumulation == GradAccumulation::kFp32Copy ? 4.0 : bytes.gradient;
  const double read = w.params * perParam / device.memoryBytesPerSecond;
  const double chunks = static_cast<double>(std::max<std::int64_t>(1, plan.parallel.virtualStages));
  const double bucketParams = std::max(40e6, 1e6 * static_cast<double>(plan.parallel.dp));
  const bool bucketed = plan.execution.overlapGradReduce && stage == 0;
  auto bucketsOf = [&](double params) {
    if (params <= 0) return 0.0;
    return bucketed ? std::ceil(params / chunks / bucketParams) + (chunks - 1.0) : chunks;
  };
  const double buckets = bucketsOf(w.params - w.expertParams) + bucketsOf(w.expertParams);
  return read + 2.0 * buckets * device.kernelFloorSeconds;
}

// What stays exposed of a collective overlapped with `cover` seconds of compute: at least 10% (the last
// bucket or hop), and the hidden part slows the compute it runs beside (overlapSlowdown).
double exposedBeside(double collective, double cover, const DeviceModel& device) {
  const double exposed = std::max(0.1 * collective, collective - 0.9 * cover);
  return exposed + device.overlapSlowdown * (collective - exposed);
}

double gradCollectiveSeconds(Collective kind, const StageWork& w, double bytesPerParam, const Groups& groups) {
  return collectiveSeconds(kind, (w.params - w.expertParams) * bytesPerParam, groups.grad) +
         collectiveSeconds(kind, w.expertParams * bytesPerParam, groups.expertGrad);
}

// The distributed optimizer's all-gather of the updated weights: Transformer Engine's linear weights at
// their own width (StateBytes::linearGathered), the rest at 16 bits.
double paramGatherSeconds(const StageWork& w, const StateBytes& bytes, const Groups& groups) {
  const double denseLinear = w.linearWeights - w.expertLinearWeights;
  const double dense = (w.params - w.expertParams - denseLinear) * bytes.gathered + denseLinear * bytes.linearGathered;
  const double expert = (w.expertParams - w.expertLinearWeights) * bytes.gathered + w.expertLinearWeights * bytes.linearGathered;
  return collectiveSeconds(Collective::kAllGather, dense, groups.grad) +
         collectiveSeconds(Collective::kAllGather, expert, groups.expertGrad);
}
}  // namespace

double shardedParams(const Plan& plan, const StageWork& w) {
  const double shard = static_cast<double>(plan.parallel.dp * plan.parallel.cp);
  const double expertShard = std::max<double>(1.0, static_cast<double>(plan.parallel.expertDp()));
  return (w.params - w.expertParams) / shard + w.expertParams / expertShard;
}

double offloadedGradientCopies(const Plan& plan, const StageWork& w, const StateBytes& bytes) {
  const double m = static_cast<double>(plan.numMicroBatches());
  const double pcie = plan.cluster.pcieBytesPerSecond;
  if (plan.zeroStage < 2 || plan.offload.optimizerFraction <= 0 || pcie <= 0 || !gradientsSharded(plan)) return 0.0;
  // ZeRO-Offload keeps the gradient partitions of the offloaded optimizer share in (pinned) host memory
  // at the model's 16-bit width and sums the micro-batches into them through the GPU. DeepSpeed's ZeRO-3
  // (stage3.py, partition_grads; the partition buffer is on the CPU when the optimizer is offloaded):
  // the first micro-batch copies its partition out and back in (a device buffer for what follows); each
  // later one copies the host sum in, adds on the GPU and copies it out. Two copies a micro-batch. Its
  // ZeRO-2 (stage_1_and_2.py, async_accumulate_grad_in_cpu_via_gpu, with gradient accumulation only):
  // one copy a micro-batch. The fp32 copy at the accumulation boundary is the optimizer tail's
  // (stageTail). They run on a side stream behind the backward and stay in host memory even when the
  // optimizer states live on NVMe, so they cross PCIe only.
  const double copies = plan.zeroStage >= 3 ? 2.0 : (m > 1 ? 1.0 : 0.0);
  if (copies == 0) return 0.0;
  const double seconds = copies * shardedParams(plan, w) * plan.offload.optimizerFraction * bytes.gathered / pcie;
  return std::max(0.1 * seconds, seconds - 0.8 * (w.bwd + w.rec));
}

OffloadPasses activationOffloadSeconds(const Plan& plan, const StageWork& w) {
  const double pcie = plan.cluster.pcieBytesPerSecond;
  if (plan.offload.activationLayers <= 0 || w.offloaded <= 0 || pcie <= 0) return {};
  // Transformer Engine's offload handler (cpu_offload, AsyncDoubleBufferGroupOffloadHandler) splits the
  // layers into one window per offloaded layer (layer_window_map: L / N layers each). Layer i's copy to
  // pinned host memory runs on its own stream during window i and the compute waits for it at the
  // window's end; in the backward each layer's copy back runs during the window before its own backward.
  // Every copy crosses the host link at its full rate, one direction each pass, and hides behind its
  // window's compute: with equal layers, what the N copies exceed of the pass is exposed.
  const double copies = w.offloaded / pcie;
  const double forward = w.fwd + w.commFwd;
  const double backward = w.bwd + (w.tp + w.cp + w.ep - w.commFwd);
  return {std::max(0.0, copies - forward), std::max(0.0, copies - backward)};
}

StageTime timeStage(const Plan& plan, const StageWork& w, const Groups& groups, const DeviceModel& device,
                    const StateBytes& bytes, double pipelineHop) {
  StageTime t;
  const std::int64_t gradRanks = plan.parallel.dp * plan.parallel.cp;
  t.p2p = plan.parallel.pp > 1 ? 2.0 * static_cast<double>(plan.parallel.virtualStages) * pipelineHop : 0.0;
  // Megatron-Core's interleaved schedule with overlap_p2p_comm posts each chunk's send and the next
  // chunk's receive asynchronously and waits for them only before the chunk that needs the data
  // (pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving): the transfer runs
  // beside the stage's other chunks. As for the data-parallel overlap, at least 10% stays exposed (the
  // warm-up's first receive, the cool-down's last send) and the hidden part slows the compute it meets.
  if (t.p2p > 0 && plan.parallel.virtualStages > 1 && plan.execution.overlapP2pComm) {
    t.p2p = exposedBeside(t.p2p, w.fwd + w.bwd + w.rec, device);
  }
  // ZeRO-3 gathers every layer's weights before its forward, again before a recomputed forward and
  // before its backward, each micro-batch, one layer at a time: every collective pays the ring's (n-1)
  // latency steps. A stage that stays gathered (FSDP2 under PyTorch's pipelining, as torchtitan and
  // Llama 3 run it) gathers each layer once per step instead. Prefetching hides up to 80% behind
  // compute (the collectives compete with it for SMs and memory bandwidth).
  // ZeRO >= 2 with grad_sync micro_batch reduce-scatters each micro-batch's gradients into the shard
  // during its backward (DeepSpeed ZeRO-2/3, colo-run): per layer under ZeRO-3, in buckets under ZeRO-2
  // (overlapped like the data-parallel reduction). With grad_sync step the gradients are reduce-
  // scattered once, after the last micro-batch (stageTail).
  const bool shardedGrads = gradientsSharded(plan);
  // Any rank group holding the same weights: dp x cp for the dense ones, expert data parallelism for
  // the routed experts (with experts folded over tensor-parallel ranks it exceeds dp x cp).
  const bool replicated = gradRanks > 1 || plan.parallel.expertDp() > 1;
  if (plan.zeroStage == 3 && replicated) {
    const double layersHere = std::max<double>(1.0, static_cast<double>(w.layers));
    const double perLayer = 1.0 / layersHere;  // one layer's share of the stage's parameters
    const double gathers = stageStaysGathered(plan) ? 1.0 / static_cast<double>(plan.numMicroBatches())
                                                    : 2.0 + (w.rec > 0 ? 1.0 : 0.0);
    const double tensors = w.gatheredTensors / layersHere;
    const double gather = zeroThreeSeconds(Collective::kAllGather, w, perLayer, bytes.gathered, tensors, plan, groups, device);
    const double scatter =
        shardedGrads ? zeroThreeSeconds(Collective::kReduceScatter, w, perLayer, bytes.gradient, tensors, plan, groups, device) : 0.0;
    const double comm = layersHere * (gathers * gather + scatter);
    // DeepSpeed's per-parameter gathers synchronize the device before each one: nothing overlaps them.
    const double cover =
        plan.execution.overlapParamGather && !plan.execution.perParameterGathers ? 0.8 * (w.fwd + w.bwd + w.rec) : 0.0;
    t.sharding = std::max(0.1 * comm, comm - cover);
    t.sharding += device.overlapSlowdown * (comm - t.sharding);  // the hidden part slows the compute it overlaps
  }
  if (plan.zeroStage == 2 && shardedGrads && replicated) {
    const double scatter = gradCollectiveSeconds(Collective::kReduceScatter, w, bytes.gradient, groups);
    t.sharding += plan.execution.overlapGradReduce ? exposedBeside(scatter, w.bwd + w.rec, device) : scatter;
  }
  // Offloaded parameters (ZeRO-3's offload_param, ZeRO-Infinity, Gemini's host chunks) live in host
  // memory and cross PCIe before every use: each layer's 16-bit shard is fetched for the forward, for a
  // recomputed forward and for the backward, and released after (DeepSpeed's per-layer fetch), every
  // micro-batch (once per step when ZeRO-3 under pipelining keeps the stage gathered). Prefetching the
  // next layer hides up to 80% behind compute, as for ZeRO-3's gathers.
  if (plan.offload.paramsFraction > 0 && plan.cluster.pcieBytesPerSecond > 0) {
    const double passes = stageStaysGathered(plan) ? 1.0 / static_cast<double>(plan.numMicroBatches()) : 2.0 + (w.rec > 0 ? 1.0 : 0.0);
    const double local = plan.zeroStage >= 3 ? shardedParams(plan, w) : w.params;
    const double fetch = passes * local * plan.offload.paramsFraction * bytes.gathered /
                         offloadBytesPerSecond(plan, plan.cluster.pcieBytesPerSecond);
    t.offload = std::max(0.1 * fetch, fetch - 0.8 * (w.fwd + w.bwd + w.rec));
  }
  t.offloadGradients = offloadedGradientCopies(plan, w, bytes);
  const OffloadPasses activations = activationOffloadSeconds(plan, w);
  t.activationOffload = activations.forward + activations.backward;
  // Summing this micro-batch's gradients into the accumulated ones, after its backward: one pass over
  // the stage's local gradients (its shard under ZeRO >= 2) at HBM speed.
  t.accumulate = (gradientsSharded(plan) ? shardedParams(plan, w) : w.params) * bytes.accumulate / device.memoryBytesPerSecond;
  const double comm = w.tp + w.cp + w.ep;
  t.forward = w.fwd + w.commFwd + t.p2p / 2 + t.sharding / 3 + t.offload / 3 + activations.forward;
  t.backward = w.bwd + w.rec + (comm - w.commFwd) + t.p2p / 2 + t.sharding * 2 / 3 + t.offload * 2 / 3 +
               t.offloadGradients + t.accumulate + activations.backward;
  t.total = w.fwd + w.bwd + w.rec + comm + t.p2p + t.sharding + t.offload + t.offloadGradients + t.accumulate +
            t.activationOffload;
  return t;
}

StageTail stageTail(const Plan& plan, const StageWork& w, std::int64_t stage, const Groups& groups,
                    const DeviceModel& device, const StateBytes& bytes, const OptimizerInputs& in) {
  StageTail tail;
  const auto& par = plan.parallel;
  const GradAccumulation accumulation = plan.execution.gradAccumulation;
  if (par.dp * par.cp > 1 || par.expertDp() > 1) {
    double reduce = 0, gather = 0;
    if (plan.zeroStage == 0 || (accumulation == GradAccumulation::kFp32Copy && plan.zeroStage == 1)) {
      // DeepSpeed's BF16 optimizer all-reduces its fp32 copies whole, under ZeRO-1 too, then each rank
      // updates its partition and the 16-bit weights are all-gathered.
      const double b = accumulation == GradAccumulation::kFp32Copy ? 4.0 : bytes.gradient;
      reduce = gradCollectiveSeconds(Collective::kAllReduce, w, b, groups);
      if (plan.zeroStage == 1) gather = paramGatherSeconds(w, bytes, groups);
    } else {
      // Sharded gradients were reduce-scattered every micro-batch already (timeStage).
      if (!gradientsSharded(plan)) {
        reduce = zeroThreeSeconds(Collective::kReduceScatter, w, 1.0, bytes.gradient, w.gatheredTensors, plan, groups, device);
      }
      // ZeRO-3's next step gathers each layer before use (timeStage); ZeRO-1/2 gather the updated shards.
      if (plan.zeroStage < 3) gather = paramGatherSeconds(w, bytes, groups);
    }
    // Overlapped, at least 10% stays exposed (the last bucket), and the hidden part slows the backward
    // or forward it runs beside (overlapSlowdown).
    auto exposedOf = [&](double collective, bool overlapped, double cover) {
      return overlapped ? exposedBeside(collective, cover, device) : collective;
    };
    // DeepSpeed's per-parameter ZeRO-3 collectives synchronize the device: nothing hides them.
    const bool synchronous = plan.zeroStage == 3 && plan.execution.perParameterGathers;
    tail.afterNorm = exposedOf(gather, plan.execution.overlapParamGather, w.fwd);
    tail.dataParallel = exposedOf(reduce, plan.execution.overlapGradReduce && !synchronous, w.bwd + w.rec) + tail.afterNorm;
  }
  // The mixed-precision optimizer step at HBM speed (bytes per parameter: optimizerStepBytes); offloaded
  // states are updated by the host, their gradients and weights crossing PCIe.
  const double localParams = plan.zeroStage >= 1 ? shardedParams(plan, w) : w.params;
  const double onDevice = localParams * (1.0 - plan.offload.optimizerFraction);
  const double buffer = gradientBufferBytes(plan);
  // optimizerStepBytes zeroes the gradients of the rank's shard; a Megatron buffer is zeroed whole, below.
  const double stepBytes = optimizerStepBytes(plan.precision, plan.execution.fp32Params, plan.optimizer) - buffer;
  tail.optimizer = onDevice * stepBytes / device.memoryBytesPerSecond;
  // Of the step, the norm's own read of the fp32 gradients (4 B) comes before the norm is all-reduced.
  constexpr double kNormReadBytes = 4.0;
  tail.beforeNorm = onDevice * kNormReadBytes / device.memoryBytesPerSecond;
  if (in.measuredAdam && plan.optimizer == Optimizer::kAdamW) {
    // The measured AdamW step over fp32 master weights (linear in the parameter count).
    if (const auto t = in.measuredAdam->lookupStreaming("adam_step.fwd", onDevice)) tail.optimizer = t->first;
  }
  // Megatron's contiguous gradient buffer holds every local parameter's main gradient on every rank of
  // the data-parallel group (ZeRO <= 1): zeroed whole at the start of each step (zero_grad_buffer) and,
  // with more than one data-parallel rank, scaled by 1/(dp x cp) in place before it is reduced (megatron/
  // model/distributed.py since 2021-03; Megatron-Core's start_grad_sync, unless average_in_collective,
  // off by default, folds the scaling into the collective). A write, then a read and a write, at HBM speed
  // on the compute stream, nothing beside them: the zeroing before the first forward, the scaling in the
  // last backward.
  if (buffer > 0) {
    const double pass = w.params * buffer / device.memoryBytesPerSecond;
    const double scaling = par.dp * par.cp > 1 ? 2.0 * pass : 0.0;  // before the reduction, so before the norm
    tail.optimizer += pass + scaling;
    tail.beforeNorm += scaling;
  }
  if (plan.execution.gradNanCheck) {
    // Megatron checks each bucket as it starts reducing it: before the norm.
    const double check = nanCheckSeconds(plan, w, bytes, device, stage);
    tail.optimizer += check;
    tail.beforeNorm += check;
  }
  if (plan.offload.optimizerFraction > 0) {
    const double offParams = localParams * plan.offload.optimizerFraction;
    tail.offloadPcie = offParams * (bytes.gradient + bytes.weight) / offloadBytesPerSecond(plan, in.pcieBytesPerSecond);
    tail.optimizer += offParams / device.cpuAdamParamsPerSecond + tail.offloadPcie;
    // On NVMe the host step reads the fp32 master and moments in and writes them back out, at the
    // node's NVMe bandwidth shared by its GPUs (ZeRO-Infinity's swapping).
    if (plan.offload.target == OffloadTarget::kNvme && plan.cluster.nvmeBytesPerSecond > 0) {
      const double states = 4.0 * optimizerMoments(plan.optimizer) + 4.0;
      tail.optimizer += 2.0 * offParams * states / (plan.cluster.nvmeBytesPerSecond / gpusOnNode(plan));
    }
  }
  // A tied embedding lives on the first and the last stage: their word-embedding gradients are
  // all-reduced between the two after the backward, before the optimizer (Megatron's embedding group,
  // DeepSpeed's ReduceTiedGrads), on the critical path.
  if (in.tiedParams > 0 && par.pp > 1 && (stage == 0 || stage == par.pp - 1)) {
    GroupPlacement ends = groups.pp;
    ends.size = 2;
    ends.perNode = groups.pp.crossesNodes() ? 1 : 2;
    if (groups.pp.crossesNodes()) ends.inner = nullptr;
    const double b = accumulation == GradAccumulation::kFp32Copy ? 4.0 : bytes.gradient;
    tail.dataParallel += collectiveSeconds(Collective::kAllReduce, in.tiedParams / static_cast<double>(par.tp) * b, ends);
  }
  return tail;
}

}  // namespace colo::costmodel::detail
