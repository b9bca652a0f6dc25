// Stage assembly, memory and the closed-form step time (docs/costmodel.md, "Step time" and "Memory").
#include "colo/costmodel/evaluator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>

#include "layer_cost.h"
#include "stage_cost.h"

namespace colo::costmodel {

using detail::LayerConfig;
using detail::LayerCost;
using detail::ModelTemplates;

namespace {

// Transformer Engine's compute streams for multi-stream GEMMs (num_compute_streams,
// transformer_engine/common/util/multi_stream.h).
constexpr int kTransformerEngineStreams = 4;

// Bytes of an activation element: the precision's, except under fp8 (and fp4), where only GEMM operands are 8-bit
// (Transformer Engine casts each GEMM's inputs, mostly fused into the kernel before it, and keeps
// activations, their communication and what backward saves in bf16, but for the fp8 copy of each
// linear layer's input that Transformer Engine keeps for the weight gradient: layer_cost.cpp).
std::int64_t activationBytesOf(DType precision) {
  return quantizedGemms(precision) ? 2 : bytesPerElement(precision);
}

// Where offloaded states live, per node, and whether the node holds them (Evaluation::fitsHost).
// Offloaded activations (activation offload) live in host memory whatever offload.target says.
void judgeOffloadCapacity(const Plan& plan, Evaluation& ev) {
  double states = 0, activations = 0;
  for (const auto& st : ev.stages) {
    states = std::max(states, st.memory.host - st.memory.hostActivations);
    activations = std::max(activations, st.memory.hostActivations);
  }
  const double gpus = detail::gpusOnNode(plan);
  const bool onNvme = plan.offload.target == OffloadTarget::kNvme;
  double inHost = activations * gpus;
  if (onNvme && states > 0) {
    ev.nvmeBytesPerNode = states * gpus;
    ev.nvmeFits = plan.cluster.nvmeCapacityBytes > 0 && ev.nvmeBytesPerNode <= plan.cluster.nvmeCapacityBytes;
  } else {
    inHost += states * gpus;
  }
  if (inHost > 0) {
    ev.hostBytesPerNode = inHost;
    ev.hostMemoryFits = plan.cluster.hostMemoryBytes <= 0 || inHost <= 0.9 * plan.cluster.hostMemoryBytes;
  }
  ev.fitsHost = ev.hostMemoryFits && ev.nvmeFits;
}

// The per-layer costing configuration a plan implies.
LayerConfig layerConfig(const Plan& plan, const ModelTemplates& T) {
  LayerConfig cfg;
  cfg.microBatch = plan.microBatchSize;
  cfg.tp = plan.parallel.tp;
  cfg.cp = plan.parallel.cp;
  cfg.ep = plan.parallel.ep;
  cfg.etp = plan.parallel.expertTp();
  cfg.cpCommType = plan.execution.cpCommType;
  cfg.sequenceParallel = plan.parallel.sequenceParallel;
  cfg.flash = plan.execution.flashAttention;
  cfg.tpCommOverlap = plan.execution.tpCommOverlap;
  cfg.tpMicroPipeline = plan.execution.tpCommOverlap && plan.execution.tpOverlap == TpOverlap::kMicroPipeline;
  cfg.hidden = T.hidden;
  cfg.seqLen = T.seqLen;
  cfg.dtypeBytes = bytesPerElement(plan.precision);
  cfg.activationBytes = activationBytesOf(plan.precision);
  cfg.topK = T.topK;
  cfg.routingGroups = T.routingGroups;
  cfg.routingGroupTopK = T.routingGroupTopK;
  cfg.dedupDispatch = deduplicatesAcrossNodes(plan.execution.moeDispatcher);
  cfg.epCommOverlap = plan.execution.epCommOverlap;
  cfg.wgradIntoFp32 = plan.execution.gradAccumulation == GradAccumulation::kFused && plan.precision != DType::kFp32;
  // Gradient-accumulation fusion covers linear layers; an embedding's gradient is added into main_grad
  // by the backward hook, as every parameter's is without the fusion (main_grad mode, which charges it
  // already through gradAccumulationBytes).
  if (plan.execution.gradAccumulation == GradAccumulation::kFused) {
    cfg.embeddingGradAddBytes =
        gradAccumulationBytes(GradAccumulation::kMainGrad, plan.execution.gradReduceBf16 ? DType::kFp16 : plan.precision, 1.0);
  }
  if (plan.precision == DType::kFp8) cfg.float8Recipe = plan.execution.float8Recipe;
  cfg.fusedCrossEntropy = plan.execution.fusedCrossEntropy;
  cfg.fusedBiasGrad = plan.execution.fusedBiasGrad;
  cfg.groupedGemmStreams = plan.execution.teGroupedGemm ? kTransformerEngineStreams : 0;
  cfg.unfused = plan.execution.unfused;
  cfg.crossEntropyInPlace = plan.execution.fusedCrossEntropy && plan.execution.crossEntropyInPlace;
  cfg.nativeFusedLoss = plan.execution.nativeFusedCrossEntropy && !plan.execution.fusedCrossEntropy;
  cfg.fp8OutputProj = plan.precision == DType::kFp8 && plan.execution.fp8OutputProj;
  cfg.kvWidth = T.kvWidth;
  cfg.qWidth = T.qWidth > 0 ? T.qWidth : T.hidden;
  cfg.keyWidth = T.keyWidth > 0 ? T.keyWidth : T.kvWidth;
  cfg.outWidth = T.outWidth > 0 ? T.outWidth : cfg.qWidth;
  cfg.hostSecondsPerOp = plan.execution.hostMicrosecondsPerOp * 1e-6;
  return cfg;
}

}  // namespace

// Memory traffic of one optimizer step per parameter, as Megatron's mixed-precision optimizers run it
// (megatron/optimizer): the fused Adam reads master weight, gradient and both moments and writes the
// three states back (28 B); the global gradient norm reads the fp32 gradients (4 B); grads are zeroed
// for the next step. fp16 (loss scaling) first copies the 16-bit gradients into fp32 main gradients
// (2 + 4 B), unscales them checking for inf/nan in place (8 B), zeroes 16-bit grads (2 B) and copies
// the master weights back to the 16-bit model (4 + 2 B): 54 B. bf16 accumulates into fp32 main
// gradients during backward, so no copy or unscale: 4 + 28 + 6 + 4 (zeroing) = 42 B. fp32: 36 B.
// fp32 parameters that are their own master (PyTorch FSDP's mixed precision): no 16-bit copy to
// write back, 36 B, as fp32 training (fp16 unscales the fp32 gradient in place first: + 8 B).
// LARS keeps one momentum buffer instead of Adam's two moments (8 B less to read and write); LAMB
// writes Adam's update, then reads weights and update again for the two per-parameter norms before
// applying it (12 B more).
double optimizerStepBytes(DType precision, bool fp32Params, Optimizer optimizer) {
  const double adjust = optimizer == Optimizer::kLars ? -8.0 : optimizer == Optimizer::kLamb ? 12.0 : 0.0;
  return adjust + adamStepBytes(precision, fp32Params);
}

double gradientBufferBytes(const Plan& plan) {
  const GradAccumulation mode = plan.execution.gradAccumulation;
  if ((mode != GradAccumulation::kFused && mode != GradAccumulation::kMainGrad) || plan.zeroStage > 1) return 0.0;
  // fp32 main gradients (bf16 training turns on --accumulate-allreduce-grads-in-fp32; fp32 training);
  // fp16 keeps them at 16 bits unless asked.
  return plan.precision == DType::kFp16 || plan.execution.gradReduceBf16 ? 2.0 : 4.0;
}

double adamStepBytes(DType precision, bool fp32Params) {
  if (fp32Params && precision != DType::kFp32 && precision != DType::kTf32) {
    return precision == DType::kFp16 ? 44.0 : 36.0;
  }
  switch (precision) {
    case DType::kFp16:
      return 54.0;
    case DType::kFp32:
    case DType::kTf32:
      return 36.0;
    default:
      return 42.0;
  }
}

// HBM traffic per local parameter of adding one micro-batch's gradients into the accumulated ones, on
// average over the step's m micro-batches (g: the 16-bit gradient, 4 B in fp32 training):
//  fused      0: the weight-gradient GEMM accumulates into fp32 main_grad in its epilogue
//             (Megatron's --gradient-accumulation-fusion, on by default since late 2021; Megatron-Core);
//  main_grad  g + 2 x main_grad bytes: the backward hook's main_grad.add_(grad) reads both and writes
//             main_grad (Megatron-LM 2021 local DDP; main_grad is 16-bit in fp16 unless
//             --accumulate-allreduce-grads-in-fp32, fp32 in bf16): fp16 6 B, bf16 10 B;
//  autograd   3 g from the second micro-batch on: AccumulateGrad's in-place grad += new;
//  fp32_copy  g + 16 every micro-batch: DeepSpeed's BF16 optimizer after each pipeline backward,
//             hp_grad.add_(lp_grad.to(fp32)) (read g, write and read the fp32 upcast, read and write
//             the fp32 copy): 18 B.
double gradAccumulationBytes(GradAccumulation mode, DType precision, double microBatches) {
  const double g = precision == DType::kFp32 ? 4.0 : 2.0;
  switch (mode) {
    case GradAccumulation::kFused:
      return 0.0;
    case GradAccumulation::kMainGrad: {
      const double mainGrad = precision == DType::kFp16 ? 2.0 : 4.0;
      return g + 2.0 * mainGrad;
    }
    case GradAccumulation::kAutograd:
      return microBatches > 1 ? 3.0 * g * (microBatches - 1.0) / microBatches : 0.0;
    case GradAccumulation::kFp32Copy:
      return g + 16.0;
  }
  return 0.0;
}

namespace {
std::uint64_t newEvaluatorId() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}
}  // namespace

struct Evaluator::Impl {
  const std::uint64_t id = newEvaluatorId();  // (names this evaluator's layer costs in LayerMemo)
  ClusterSpec cluster;
  std::vector<GemmMeasurement> measured;  // for the cluster's GPU, all precisions
  std::map<DType, GemmTable> tables;
  std::map<DType, KernelTable> kernelTables;
  std::map<DType, double> gemmScale;
  std::map<DType, std::int64_t> gemmScalePoints;  // measured GEMMs each scale was fitted on
  KernelTable optimizerTable;  // adam_step, fp32 master weights
  Calibration calibration;
  ModelTemplates templates;
  std::int64_t numLayers = 0;
  std::int64_t numExperts = 0;

  // The device model a plan trains on; errors for a sequence length other than the evaluator's or a
  // precision the GPU has no peak for.
  Result<DeviceModel> deviceFor(const Plan& plan) const {
    if (plan.seqLen != templates.seqLen) {
      return fail(Error::badInput("plan seq_len " + std::to_string(plan.seqLen) + " differs from the evaluator's " +
                                  std::to_string(templates.seqLen)));
    }
    const DeviceModel device = deviceModel(cluster.gpu, plan.precision, plan.execution.flashAttention && plan.execution.flashAttention2);
    if (device.peakFlopsPerSecond <= 0) {
      return fail(Error::badInput(cluster.gpu.name + " has no " + toString(plan.precision) + " peak"));
    }
    return device;
  }

  // The layer-costing configuration of a plan, with this evaluator's measured tables and calibration.
  LayerConfig configFor(const Plan& plan) const {
    LayerConfig cfg = layerConfig(plan, templates);
    if (auto table = tables.find(plan.precision); table != tables.end()) cfg.measured = &table->second;
    if (auto kt = kernelTables.find(plan.precision); kt != kernelTables.end()) cfg.kernels = &kt->second;
    if (auto gs = gemmScale.find(plan.precision); gs != gemmScale.end()) cfg.gemmScale = gs->second;
    // Hierarchical context parallelism: the all-to-all level is consecutive members of the cp group,
    // the ring every a-th (Megatron-Core's hierarchical cp groups).
    if (plan.execution.cpCommType == CpCommType::kA2aP2p && plan.execution.hierarchicalCpSizes.size() == 2) {
      const GroupPlacement cp = placeGroup(cluster, plan.parallel, Dim::kCp);
      const std::int64_t a = plan.execution.hierarchicalCpSizes[0];
      cfg.cpA2aGroup = placeRanks(cluster, a, cp.stride);
      cfg.cpRingGroup = placeRanks(cluster, plan.execution.hierarchicalCpSizes[1], cp.stride * a);
    }
    return cfg;
  }
};

Evaluator::Evaluator(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Evaluator::Evaluator(Evaluator&&) noexcept = default;
Evaluator& Evaluator::operator=(Evaluator&&) noexcept = default;
Evaluator::~Evaluator() = default;

const ClusterSpec& Evaluator::cluster() const { return m_impl->cluster; }
std::int64_t Evaluator::seqLen() const { return m_impl->templates.seqLen; }
double Evaluator::modelFlopsPerSample() const { return m_impl->templates.modelFlopsPerSample; }

Result<Evaluator> Evaluator::create(const Model& model, const ClusterSpec& cluster, std::int64_t seqLen) {
  // Templates are built at 16-bit activations; other precisions rescale bytes at evaluation.
  auto graph = model.expand(GraphOptions{seqLen, 1, 2});
  if (!graph) return fail(graph.error());
  auto impl = std::make_unique<Impl>();
  impl->cluster = cluster;
  std::int64_t topK = 1;
  std::int64_t kvWidth = graph->info().hiddenSize;
  bool tied = false;
  if (model.spec) {
    topK = std::max<std::int64_t>(1, model.spec->moe.topK);
    kvWidth = model.spec->valueWidth();
    tied = model.spec->tieWordEmbeddings && model.spec->lmHead;
    impl->numExperts = model.spec->moe.numExperts;
  }
  impl->templates = detail::digest(*graph, topK, kvWidth, tied);
  if (model.spec) {
    const ModelSpec& s = *model.spec;
    impl->templates.qWidth = s.numAttentionHeads * (s.mla.enabled() ? s.mla.qkHeadDim() : s.headSize());
    // MLA: Megatron-Core up-projects each head's key and value from the latent before core attention,
    // so context parallelism moves per-head keys of qk_head_dim and values of v_head_dim, not the latent.
    impl->templates.keyWidth = s.mla.enabled() ? s.numAttentionHeads * s.mla.qkHeadDim() : s.kvHeads() * s.headSize();
    impl->templates.outWidth = s.mla.enabled() ? s.numAttentionHeads * s.mla.vHeadDim : s.numAttentionHeads * s.headSize();
    impl->templates.routingGroups = s.moe.routingGroups;
    impl->templates.routingGroupTopK = s.moe.routingGroupTopK;
  }
  impl->numLayers = graph->info().numLayers;
  return Evaluator(std::move(impl));
}

Result<Evaluator> Evaluator::create(const Model& model, const ClusterSpec& cluster, std::int64_t seqLen,
                                    const CostDatabase& costDb) {
  auto evaluator = create(model, cluster, seqLen);
  if (!evaluator) return evaluator;
  Impl& impl = *evaluator->m_impl;
  impl.calibration.costDb = costDb.path();
  // One device's measurements: two devices that both match the GPU (two machines' profiles merged, say)
  // would be mixed into one table, and which row wins a shape would depend on the order they were merged.
  const auto matching = costDb.devicesMatching(cluster.gpu.name);
  if (matching.size() > 1) {
    std::string names;
    for (const auto& d : matching) names += (names.empty() ? "\"" : ", \"") + d + "\"";
    return fail(Error::badInput(std::to_string(matching.size()) + " of its devices match the cluster's GPU \"" + cluster.gpu.name +
                                    "\" (" + names + "): keep one device per GPU model in a cost database (profile each machine into a file of its own)",
                                costDb.path()));
  }
  std::vector<KernelMeasurement> kernels;
  std::vector<CollectiveMeasurement> collectives;
  std::vector<CopyMeasurement> copies;
  if (!matching.empty()) {
    const std::string& device = matching.front();
    impl.calibration.costDbDevice = device;
    impl.measured = costDb.gemmsOfDevice(device);
    kernels = costDb.kernelsFor(device);
    collectives = costDb.collectivesFor(device);
    copies = costDb.copiesFor(device);
  }
  for (const DType d : {DType::kFp32, DType::kTf32, DType::kFp16, DType::kBf16, DType::kFp8, DType::kFp4}) {
    GemmTable table(impl.measured, d);
    if (!table.empty()) {
      impl.tables.emplace(d, std::move(table));
      const DeviceModel device = deviceModel(cluster.gpu, d);
      if (device.peakFlopsPerSecond > 0) {
        const std::int64_t bytes = bytesPerElement(d);
        impl.gemmScale[d] = gemmRooflineScale(impl.measured, d, [&](double m, double n, double k) {
          return detail::gemmSeconds(m, n, k, 1, bytes, device);
        });
        impl.gemmScalePoints[d] = std::count_if(impl.measured.begin(), impl.measured.end(),
                                                [&](const GemmMeasurement& g) { return g.dtype == d; });
      }
    }
    KernelTable kt(kernels, d);
    if (!kt.empty()) impl.kernelTables.emplace(d, std::move(kt));
  }
  impl.optimizerTable = KernelTable(kernels, DType::kFp32);
  impl.calibration.optimizerMeasured = impl.optimizerTable.lookupStreaming("adam_step.fwd", 1.0).has_value();
  impl.calibration.links = applyLinkFits(impl.cluster, fitLinkLevels(collectives));
  if (const auto pcie = fitCopyBandwidth(copies)) {
    impl.cluster.pcieBytesPerSecond = *pcie;
    impl.calibration.pcieBytesPerSecond = *pcie;
  }
  return evaluator;
}

std::vector<Evaluator::GemmShape> Evaluator::gemmShapes(const Plan& plan) const {
  const ModelTemplates& T = m_impl->templates;
  const LayerConfig cfg = layerConfig(plan, T);
  std::vector<GemmShape> out;
  auto add = [&](const detail::LayerTemplate& layer) {
    for (const auto& op : layer.ops) {
      const auto g = detail::scaledGemm(op, cfg);
      if (!g) continue;
      auto r = [](double v) { return static_cast<std::int64_t>(std::llround(v)); };
      const std::int64_t count = std::max<std::int64_t>(1, r(g->count));
      out.push_back({r(g->m), r(g->n), r(g->k), count});
      out.push_back({r(g->m), r(g->k), r(g->n), count});
      out.push_back({r(g->k), r(g->n), r(g->m), count});
    }
  };
  for (const auto& cls : T.classes) add(cls);
  add(T.embedding);
  add(T.head);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end(), [](const GemmShape& a, const GemmShape& b) {
              return a.m == b.m && a.n == b.n && a.k == b.k;
            }),
            out.end());
  return out;
}

std::vector<Evaluator::KernelShape> Evaluator::kernelShapes(const Plan& plan) const {
  const ModelTemplates& T = m_impl->templates;
  const LayerConfig cfg = layerConfig(plan, T);
  std::vector<KernelShape> out;
  auto add = [&](const detail::LayerTemplate& layer) {
    for (const auto& op : layer.ops) {
      if (const auto k = detail::scaledKernel(op, cfg)) {
        out.push_back({k->key, static_cast<std::int64_t>(k->elements), k->width, T.hidden});
      }
    }
    if (const auto k = detail::flashKernel(layer, cfg)) out.push_back({k->key, static_cast<std::int64_t>(k->elements), k->width, T.hidden});
  };
  for (const auto& cls : T.classes) add(cls);
  add(T.embedding);
  add(T.head);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

// Closed-form pipeline time: the slowest stage paces the steady state; the others add fill and drain,
// shortened by virtual stages (interleaving) or by deferring weight gradients (zero bubble). Then the
// tail, and the breakdown on the critical path: the slowest stage's per-micro-batch parts times m, the
// fill and drain as bubble, the tail split into its data-parallel and optimizer parts.
//
// The tail meets at the gradient norm. Every framework colo models takes the global norm of the
// gradients before any stage steps (Megatron's clip_grad_norm / get_grad_norm_fp32, all-reduced over the
// model-parallel group, or every rank with the distributed optimizer; clip_grad 1.0 by default; torchtitan's clip_grad_norm_ over the pipeline mesh;
// DeepSpeed's optimizers' global norm over the model-parallel ranks, clipping or not): the stages' steps
// wait for the last stage to finish reducing its gradients (and the passes before the norm: scaling the
// gradient buffer, the NaN check, the norm's own read). Stage s finishes its last backward about the
// backward time of the stages before it earlier than stage 0, and its reduction starts then; after the
// norm each stage steps and gathers its updated shards, and the next step's first forward reaches stage
// s after the stages before it, so a later stage's longer step hides behind their forwards.
// Returns the tail split into its data-parallel and optimizer seconds.
struct TailSplit {
  double dataParallel = 0, optimizer = 0;
};
TailSplit stepTail(const std::vector<detail::StageTail>& tails, const Evaluation& ev, double v) {
  // Each side of the norm: the longest stage's part, split between data-parallel traffic and the
  // optimizer's passes in that stage's proportion.
  struct Side {
    double seconds = 0, traffic = 0;
    void take(double total, double trafficPart, double slack) {
      if (total - slack <= seconds) return;
      seconds = total - slack;
      traffic = total > 0 ? trafficPart / total : 0.0;
    }
  } before, after;
  double slackBackward = 0, slackForward = 0;
  for (std::size_t s = 0; s < tails.size(); ++s) {
    const detail::StageTail& t = tails[s];
    const double reduce = t.dataParallel - t.afterNorm;
    before.take(reduce + t.beforeNorm, reduce, slackBackward);
    after.take(t.optimizer - t.beforeNorm + t.afterNorm, t.afterNorm, slackForward);
    slackBackward += ev.stages[s].backwardSeconds / v;
    slackForward += ev.stages[s].forwardSeconds / v;
  }
  return {before.seconds * before.traffic + after.seconds * after.traffic,
          before.seconds * (1.0 - before.traffic) + after.seconds * (1.0 - after.traffic)};
}

void closeSchedule(const Plan& plan, const std::vector<detail::StageWork>& work,
                   const std::vector<detail::StageTime>& times, const std::vector<detail::StageTail>& tails,
                   Evaluation& ev) {
  const double mb = static_cast<double>(plan.numMicroBatches());
  const double v = static_cast<double>(plan.parallel.virtualStages);
  std::size_t slowest = 0;
  double sum = 0;
  for (std::size_t s = 0; s < times.size(); ++s) {
    sum += times[s].total;
    if (times[s].total > times[slowest].total) slowest = s;
  }
  const double tMax = times[slowest].total;
  const double fill = sum - tMax;
  double pipeline = mb * tMax + fill;
  if (plan.schedule == Schedule::kInterleaved) pipeline = mb * tMax + fill / v;
  if (plan.schedule == Schedule::kZeroBubble) pipeline = mb * tMax + fill / 3.0;
  const TailSplit tail = stepTail(tails, ev, v);
  ev.pipelineSeconds = pipeline;
  ev.stepSeconds = pipeline + tail.dataParallel + tail.optimizer;

  const detail::StageWork& w = work[slowest];
  const detail::StageTime& t = times[slowest];
  TimeBreakdown& tb = ev.time;
  tb.compute = mb * (w.fwd + w.bwd);
  tb.recompute = mb * w.rec;
  tb.tpComm = mb * w.tp;
  tb.cpComm = mb * w.cp;
  tb.epComm = mb * w.ep;
  tb.ppComm = mb * t.p2p;
  tb.dpComm = mb * t.sharding;
  tb.gradAccum = mb * t.accumulate;
  tb.offload = mb * (t.offload + t.offloadGradients + t.activationOffload);
  tb.bubble = pipeline - mb * tMax;
  tb.dpComm += tail.dataParallel;
  tb.optimizer = tail.optimizer;
  ev.bubbleFraction = ev.stepSeconds > 0 ? tb.bubble / ev.stepSeconds : 0.0;
}

}  // namespace

namespace {

// The layer costs of the last evaluation on this thread. costLayer is a function of the evaluator's
// templates and of the layer configuration, device and tp/cp/ep groups alone: plans that differ only in
// their stages, recompute, offload, ZeRO stage or batch (the search asks for several such variants of
// each configuration) cost their layers the same, so those are formed once. Keyed by the evaluator's
// id and everything costLayer reads; per thread, so evaluators on several threads do not share it.
struct LayerMemo {
  std::uint64_t owner = 0;
  detail::LayerConfig cfg;
  DeviceModel device;
  GroupPlacement tp, cp, ep;
  detail::CostedLayers layers;
  detail::LookupCounts counts;
};

LayerMemo& layerMemo() {
  thread_local LayerMemo memo;
  return memo;
}

// This thread's costed layers for the configuration, formed anew unless the memo holds them.
const LayerMemo& costedLayers(std::uint64_t owner, const ModelTemplates& T, const detail::LayerConfig& cfg,
                              const DeviceModel& device, const detail::Groups& groups) {
  LayerMemo& memo = layerMemo();
  if (memo.owner == owner && memo.cfg == cfg && memo.device == device && memo.tp == groups.tp && memo.cp == groups.cp &&
      memo.ep == groups.ep) {
    return memo;
  }
  memo.owner = 0;  // (invalid until formed whole)
  memo.counts = {};
  memo.layers.classes.clear();
  memo.layers.classes.reserve(T.classes.size());
  for (const auto& cls : T.classes) memo.layers.classes.push_back(costLayer(cls, cfg, device, groups.tp, groups.cp, groups.ep, &memo.counts));
  memo.layers.embedding = costLayer(T.embedding, cfg, device, groups.tp, groups.cp, groups.ep, &memo.counts);
  memo.layers.head = costLayer(T.head, cfg, device, groups.tp, groups.cp, groups.ep, &memo.counts);
  memo.cfg = cfg;
  memo.device = device;
  memo.tp = groups.tp;
  memo.cp = groups.cp;
  memo.ep = groups.ep;
  memo.owner = owner;
  return memo;
}

// Throughput and FLOP rates of the closed schedule. Recompute FLOPs: what one replica re-runs per
// micro-batch, over all its micro-batches and replicas.
void throughputFigures(const Plan& plan, const ModelTemplates& T, double gpus, double peakFlopsPerSecond,
                       double recomputeFlopsPerMicroBatch, Evaluation& ev) {
  const Parallelism& par = plan.parallel;
  const double samples = static_cast<double>(plan.globalBatchSize);
  const double modelFlops = samples * T.modelFlopsPerSample;
  const double replicaShare = static_cast<double>(par.tp * par.cp);  // GPUs sharing a chunk's work
  const double hardwareFlops = modelFlops + recomputeFlopsPerMicroBatch * replicaShare *
                                                static_cast<double>(plan.numMicroBatches()) * static_cast<double>(par.dp);
  ev.tokensPerSecond = samples * static_cast<double>(T.seqLen) / ev.stepSeconds;
  ev.modelTflopsPerGpu = modelFlops / ev.stepSeconds / gpus / 1e12;
  ev.hardwareTflopsPerGpu = hardwareFlops / ev.stepSeconds / gpus / 1e12;
  ev.mfu = ev.modelTflopsPerGpu * 1e12 / peakFlopsPerSecond;
}

}  // namespace

Result<Evaluation> Evaluator::evaluate(const Plan& plan) const {
  const Impl& I = *m_impl;
  const ModelTemplates& T = I.templates;
  auto checkedDevice = I.deviceFor(plan);
  if (!checkedDevice) return fail(checkedDevice.error());
  const DeviceModel device = *checkedDevice;
  const Parallelism& par = plan.parallel;
  const std::int64_t pp = par.pp;
  const std::int64_t v = par.virtualStages;
  const std::int64_t m = plan.numMicroBatches();
  if (pp * v < 1 || static_cast<std::int64_t>(plan.stages.size()) != pp * v || m < 1) {
    return fail(Error::badInput("plan has " + std::to_string(plan.stages.size()) + " stages for pp*virtual_stages " +
                                std::to_string(pp * v) + " and " + std::to_string(m) + " micro-batches (validatePlan first)"));
  }
  const double dt = static_cast<double>(activationBytesOf(plan.precision));
  const double byteScale = dt / static_cast<double>(T.dtypeBytes);

  LayerConfig cfg = I.configFor(plan);
  if (!device.hostIssued) cfg.hostSecondsPerOp = 0;
  const detail::Groups groups = detail::placeGroups(I.cluster, par);
  const LayerMemo& memo = costedLayers(I.id, T, cfg, device, groups);
  const detail::CostedLayers& layers = memo.layers;
  const detail::LookupCounts counts = memo.counts;
  const std::vector<detail::ChunkCost> chunks = detail::costChunks(plan, T, layers, cfg, byteScale);
  const double hop = detail::pipelineHopSeconds(plan, T, groups, I.cluster, dt);
  const detail::StateBytes bytes = detail::stateBytesOf(plan);
  const detail::StageMemoryInputs memoryInputs{&T, &layers, byteScale,
                                               device.contextBytes + detail::communicatorMemory(groups, device)};
  detail::OptimizerInputs optimizerInputs;
  optimizerInputs.measuredAdam = I.calibration.optimizerMeasured ? &I.optimizerTable : nullptr;
  optimizerInputs.pcieBytesPerSecond = I.cluster.pcieBytesPerSecond;
  optimizerInputs.tiedParams = T.tiedHead ? T.tiedParams : 0.0;

  Evaluation ev;
  ev.microBatches = m;
  ev.gemmExact = counts.exact;
  ev.gemmInterpolated = counts.interpolated;
  ev.gemmRoofline = counts.roofline;
  ev.kernelsMeasured = counts.kernelsMeasured;
  ev.kernelsRoofline = counts.kernelsRoofline;
  ev.calibration = I.calibration;
  if (auto gs = I.gemmScale.find(plan.precision); gs != I.gemmScale.end()) {
    ev.calibration.gemmRooflineScale = gs->second;
    ev.calibration.gemmRooflineScalePoints = I.gemmScalePoints.at(plan.precision);
  }
  ev.gpuMemoryBytes = I.cluster.gpu.memoryBytes;
  ev.stages.resize(static_cast<std::size_t>(pp));
  std::vector<detail::StageWork> work(static_cast<std::size_t>(pp));
  std::vector<detail::StageTime> times(static_cast<std::size_t>(pp));
  std::vector<detail::StageTail> tails(static_cast<std::size_t>(pp));
  double recomputeFlopsPerMicroBatch = 0;
  for (std::int64_t s = 0; s < pp; ++s) {
    const auto i = static_cast<std::size_t>(s);
    const detail::StageWork& w = work[i] = detail::sumStage(chunks, plan, s);
    const detail::StageTime& t = times[i] = detail::timeStage(plan, w, groups, device, bytes, hop);
    recomputeFlopsPerMicroBatch += w.recomputeFlops;
    StageReport& st = ev.stages[i];
    st.stage = s;
    st.layers = w.layers;
    st.forwardSeconds = t.forward;
    st.backwardSeconds = t.backward;
    st.recomputeSeconds = w.rec;
    st.paramsPerGpu = w.params;
    st.memory = detail::stageMemory(plan, w, s, bytes, memoryInputs, &st.inFlightMicroBatches);
    ev.peakMemoryBytes = std::max(ev.peakMemoryBytes, st.memory.total());
    const detail::StageTail& tail = tails[i] = detail::stageTail(plan, w, s, groups, device, bytes, optimizerInputs);
    st.dpExposedSeconds = tail.dataParallel;
    st.optimizerSeconds = tail.optimizer;
    st.offloadPcieSeconds = tail.offloadPcie;
  }
  closeSchedule(plan, work, times, tails, ev);

  throughputFigures(plan, T, static_cast<double>(I.cluster.totalGpus()), device.peakFlopsPerSecond, recomputeFlopsPerMicroBatch, ev);
  judgeOffloadCapacity(plan, ev);
  ev.fits = ev.peakMemoryBytes <= ev.gpuMemoryBytes && ev.fitsHost;
  return ev;
}

Result<std::vector<Evaluator::OpTime>> Evaluator::opTimes(const Plan& plan) const {
  const Impl& I = *m_impl;
  const ModelTemplates& T = I.templates;
  auto checkedDevice = I.deviceFor(plan);
  if (!checkedDevice) return fail(checkedDevice.error());
  const DeviceModel device = *checkedDevice;
  const LayerConfig cfg = I.configFor(plan);
  const GroupPlacement tpGroup = placeGroup(I.cluster, plan.parallel, Dim::kTp);
  const GroupPlacement cpGroup = placeGroup(I.cluster, plan.parallel, Dim::kCp);
  const GroupPlacement epGroup = placeGroup(I.cluster, plan.parallel, Dim::kExpert);
  std::vector<OpTime> out;
  auto add = [&](const detail::LayerTemplate& layer, const std::string& block, std::int64_t count) {
    std::vector<detail::OpCost> ops;
    (void)costLayer(layer, cfg, device, tpGroup, cpGroup, epGroup, nullptr, &ops);
    for (auto& o : ops) out.push_back({block, count, std::move(o.name), std::move(o.kind), o.fwd, o.bwd});
  };
  add(T.embedding, "embedding", 1);
  for (std::size_t c = 0; c < T.classes.size(); ++c) {
    const auto count = static_cast<std::int64_t>(std::count(T.layerClass.begin(), T.layerClass.end(), c));
    add(T.classes[c], T.classes.size() == 1 ? "layer" : "layer class " + std::to_string(c), count);
  }
  add(T.head, "head", 1);
  return out;
}

namespace {

// Validates the plan and builds an evaluator for its embedded model and cluster.
Result<Evaluator> evaluatorFor(const Plan& plan, const CostDatabase* costDb) {
  if (auto valid = validatePlan(plan); !valid) return fail(valid.error());
  return costDb ? Evaluator::create(plan.model, plan.cluster, plan.seqLen, *costDb)
                : Evaluator::create(plan.model, plan.cluster, plan.seqLen);
}

}  // namespace

Result<std::vector<Evaluator::OpTime>> opTimesOf(const Plan& plan, const CostDatabase* costDb) {
  auto evaluator = evaluatorFor(plan, costDb);
  if (!evaluator) return fail(evaluator.error());
  return evaluator->opTimes(plan);
}

namespace {

Json memoryJson(const MemoryBreakdown& m) {
  return {{"weights", m.weights},         {"gradients", m.gradients}, {"optimizer", m.optimizer},
          {"activations", m.activations}, {"buffers", m.buffers},     {"allocator", m.allocator},
          {"context", m.context}};
}

}  // namespace

Json Calibration::toJson() const {
  Json linkJson = Json::array();
  for (const auto& l : links) {
    linkJson.push_back({{"level", l.level}, {"latency_s", l.latencySeconds}, {"bytes_per_s", l.bytesPerSecond},
                        {"points", l.points}, {"rms_relative_error", l.rmsRelativeError}});
  }
  return {{"cost_db", costDb},
          {"cost_db_device", costDbDevice},
          {"links", linkJson},
          {"gemm_roofline_scale", gemmRooflineScale},
          {"gemm_roofline_scale_points", gemmRooflineScalePoints},
          {"pcie_bytes_per_s", pcieBytesPerSecond},
          {"optimizer_measured", optimizerMeasured}};
}

Json Evaluation::toJson() const {
  Json stagesJson = Json::array();
  double maxStage = 0;
  const MemoryBreakdown* peak = nullptr;
  for (const auto& s : stages) {
    stagesJson.push_back({{"stage", s.stage},
                          {"layers", s.layers},
                          {"forward_s", s.forwardSeconds},
                          {"backward_s", s.backwardSeconds},
                          {"recompute_s", s.recomputeSeconds},
                          {"params_per_gpu", s.paramsPerGpu},
                          {"in_flight_micro_batches", s.inFlightMicroBatches},
                          {"dp_exposed_s", s.dpExposedSeconds},
                          {"optimizer_s", s.optimizerSeconds},
                          {"memory_bytes", [&] {
                             Json m = memoryJson(s.memory);
                             m["total"] = s.memory.total();
                             return m;
                           }()}});
    if (s.memory.total() >= maxStage) {
      maxStage = s.memory.total();
      peak = &s.memory;
    }
  }
  const Json memory = peak ? memoryJson(*peak) : Json::object();
  return {{"step_time_s", stepSeconds},
          {"pipeline_time_s", pipelineSeconds},
          {"tokens_per_s", tokensPerSecond},
          {"model_tflops_per_gpu", modelTflopsPerGpu},
          {"hardware_tflops_per_gpu", hardwareTflopsPerGpu},
          {"mfu", mfu},
          {"peak_memory_bytes", peakMemoryBytes},
          {"gpu_memory_bytes", gpuMemoryBytes},
          {"fits", fits},
          {"host_bytes_per_node", hostBytesPerNode},
          {"nvme_bytes_per_node", nvmeBytesPerNode},
          {"fits_host", fitsHost},
          {"bubble_fraction", bubbleFraction},
          {"micro_batches", microBatches},
          {"gemm_time_sources", {{"exact", gemmExact}, {"interpolated", gemmInterpolated}, {"roofline", gemmRoofline}}},
          {"kernel_time_sources", {{"measured", kernelsMeasured}, {"roofline", kernelsRoofline}}},
          {"calibration", calibration.toJson()},
          {"breakdown",
           {{"time_s",
             {{"compute", time.compute},
              {"recompute", time.recompute},
              {"tp_comm", time.tpComm},
              {"cp_comm", time.cpComm},
              {"ep_comm", time.epComm},
              {"pp_comm", time.ppComm},
              {"dp_comm", time.dpComm},
              {"bubble", time.bubble},
              {"grad_accum", time.gradAccum},
              {"offload", time.offload},
              {"optimizer", time.optimizer}}},
            {"memory_bytes", memory}}},
          {"stages", stagesJson}};
}

Result<Evaluation> evaluatePlan(const Plan& plan, const CostDatabase* costDb) {
  auto evaluator = evaluatorFor(plan, costDb);
  if (!evaluator) return fail(evaluator.error());
  return evaluator->evaluate(plan);
}

}  // namespace colo::costmodel
