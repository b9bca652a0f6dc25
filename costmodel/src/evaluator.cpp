// Stage assembly, memory and the closed-form step time (docs/costmodel.md, "Step time" and "Memory").
#include "colo/costmodel/evaluator.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "layer_cost.h"

namespace colo::costmodel {

using detail::LayerConfig;
using detail::LayerCost;
using detail::ModelTemplates;

namespace {

// Bytes of an activation element: the precision's, except under fp8, where only GEMM operands are 8-bit
// (Transformer Engine casts each GEMM's inputs, mostly fused into the kernel before it, and keeps
// activations, their communication and what backward saves in bf16).
std::int64_t activationBytesOf(DType precision) {
  return precision == DType::kFp8 ? 2 : bytesPerElement(precision);
}

// The per-layer costing configuration a plan implies.
LayerConfig layerConfig(const Plan& plan, const ModelTemplates& T) {
  LayerConfig cfg;
  cfg.microBatch = plan.microBatchSize;
  cfg.tp = plan.parallel.tp;
  cfg.cp = plan.parallel.cp;
  cfg.ep = plan.parallel.ep;
  cfg.sequenceParallel = plan.parallel.sequenceParallel;
  cfg.flash = plan.execution.flashAttention;
  cfg.tpCommOverlap = plan.execution.tpCommOverlap;
  cfg.hidden = T.hidden;
  cfg.seqLen = T.seqLen;
  cfg.dtypeBytes = bytesPerElement(plan.precision);
  cfg.activationBytes = activationBytesOf(plan.precision);
  cfg.topK = T.topK;
  cfg.kvWidth = T.kvWidth;
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
double optimizerStepBytes(DType precision) {
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

struct Evaluator::Impl {
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
    const DeviceModel device = deviceModel(cluster.gpu, plan.precision);
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
    kvWidth = model.spec->kvHeads() * model.spec->headSize();
    tied = model.spec->tieWordEmbeddings && model.spec->lmHead;
    impl->numExperts = model.spec->moe.numExperts;
  }
  impl->templates = detail::digest(*graph, topK, kvWidth, tied);
  impl->numLayers = graph->info().numLayers;
  return Evaluator(std::move(impl));
}

Result<Evaluator> Evaluator::create(const Model& model, const ClusterSpec& cluster, std::int64_t seqLen,
                                    const CostDatabase& costDb) {
  auto evaluator = create(model, cluster, seqLen);
  if (!evaluator) return evaluator;
  Impl& impl = *evaluator->m_impl;
  impl.calibration.costDb = costDb.path();
  impl.measured = costDb.gemmsFor(cluster.gpu.name);
  std::vector<KernelMeasurement> kernels;
  std::vector<CollectiveMeasurement> collectives;
  std::vector<CopyMeasurement> copies;
  for (const auto& device : costDb.devicesMatching(cluster.gpu.name)) {
    for (auto& k : costDb.kernelsFor(device)) kernels.push_back(std::move(k));
    for (auto& c : costDb.collectivesFor(device)) collectives.push_back(std::move(c));
    for (auto& c : costDb.copiesFor(device)) copies.push_back(std::move(c));
  }
  for (const DType d : {DType::kFp32, DType::kTf32, DType::kFp16, DType::kBf16, DType::kFp8}) {
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
  };
  for (const auto& cls : T.classes) add(cls);
  add(T.embedding);
  add(T.head);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

struct ChunkCost {
  double fwd = 0, bwd = 0, recompute = 0;
  double tp = 0, cp = 0, ep = 0;  // exposed comm, both directions
  double commFwd = 0;             // the forward-direction part of tp + cp + ep
  double savedPerMicroBatch = 0;  // activations one micro-batch leaves in this chunk
  double workingSet = 0;          // recompute working set (one layer's full activations and their gradients)
  double params = 0;
  double expertParams = 0;  // the routed experts' part of params
  double gemmFlopsFwd = 0;
  double recomputeFlops = 0;
};

}  // namespace

Result<Evaluation> Evaluator::evaluate(const Plan& plan) const {
  const Impl& I = *m_impl;
  const ModelTemplates& T = I.templates;
  auto checkedDevice = I.deviceFor(plan);
  if (!checkedDevice) return fail(checkedDevice.error());
  const DeviceModel device = *checkedDevice;
  const auto& par = plan.parallel;
  const std::int64_t pp = par.pp;
  const std::int64_t v = par.virtualStages;
  const std::int64_t chunks = pp * v;
  const std::int64_t m = plan.numMicroBatches();
  if (chunks < 1 || static_cast<std::int64_t>(plan.stages.size()) != chunks || m < 1) {
    return fail(Error::badInput("plan has " + std::to_string(plan.stages.size()) + " stages for pp*virtual_stages " +
                                std::to_string(chunks) + " and " + std::to_string(m) + " micro-batches (validatePlan first)"));
  }
  const double dt = static_cast<double>(activationBytesOf(plan.precision));
  const double byteScale = dt / static_cast<double>(T.dtypeBytes);

  LayerConfig cfg = I.configFor(plan);
  if (!device.hostIssued) cfg.hostSecondsPerOp = 0;
  detail::LookupCounts counts;

  const GroupPlacement tpGroup = placeGroup(I.cluster, par, Dim::kTp);
  const GroupPlacement cpGroup = placeGroup(I.cluster, par, Dim::kCp);
  const GroupPlacement dpGroup = placeGroup(I.cluster, par, Dim::kDp);
  Parallelism folded = par;  // dp x cp as one group, placed where dp and cp sit in the rank order
  folded.dp = par.dp * par.cp;
  folded.cp = 1;
  const GroupPlacement gradGroup = placeGroup(I.cluster, folded, Dim::kDp);
  const GroupPlacement epGroup = placeGroup(I.cluster, par, Dim::kExpert);
  const GroupPlacement ppGroup = placeGroup(I.cluster, par, Dim::kPp);

  std::vector<LayerCost> classCost;
  classCost.reserve(T.classes.size());
  for (const auto& cls : T.classes) classCost.push_back(costLayer(cls, cfg, device, tpGroup, cpGroup, epGroup, &counts));
  const LayerCost embed = costLayer(T.embedding, cfg, device, tpGroup, cpGroup, epGroup, &counts);
  const LayerCost head = costLayer(T.head, cfg, device, tpGroup, cpGroup, epGroup, &counts);

  // Chunks: consecutive layers, chunk c on physical stage c % pp.
  std::vector<ChunkCost> chunk(static_cast<std::size_t>(chunks));
  std::int64_t layer = 0;
  for (std::int64_t c = 0; c < chunks; ++c) {
    const StagePlan& sp = plan.stages[static_cast<std::size_t>(c)];
    ChunkCost& cc = chunk[static_cast<std::size_t>(c)];
    for (std::int64_t i = 0; i < sp.layers; ++i, ++layer) {
      const LayerCost& lc = classCost[T.layerClass[static_cast<std::size_t>(layer)]];
      const bool recomputes = i < sp.recomputeLayers;
      cc.fwd += lc.fwd;
      cc.bwd += lc.bwd;
      cc.tp += lc.tpCommFwd + lc.tpCommBwd;
      cc.cp += lc.cpCommFwd + lc.cpCommBwd;
      cc.ep += lc.epCommFwd + lc.epCommBwd;
      cc.commFwd += lc.tpCommFwd + lc.cpCommFwd + lc.epCommFwd;
      cc.params += lc.paramsPerGpu;
      cc.expertParams += lc.expertParamsPerGpu;
      cc.gemmFlopsFwd += lc.gemmFlopsFwdPerGpu;
      double saved = lc.savedFull;
      if (recomputes && sp.recompute == RecomputePolicy::kFull) {
        cc.recompute += lc.fwd + lc.tpCommFwd + lc.cpCommFwd + lc.epCommFwd;
        cc.recomputeFlops += lc.gemmFlopsFwdPerGpu;
        saved = lc.savedInput;
        cc.workingSet = std::max(cc.workingSet, 2.0 * lc.savedFull);
      } else if (recomputes && sp.recompute == RecomputePolicy::kSelective) {
        if (!cfg.flash) {
          cc.recompute += lc.attnCoreFwd;
          cc.recomputeFlops += lc.attnFlopsFwdPerGpu;
        }
        saved = lc.savedSelective;
      } else if (recomputes && sp.recompute == RecomputePolicy::kOp) {
        // Per-op: the backward first re-runs what was not kept, rebuilding the layer's activations.
        cc.recompute += lc.recomputeOpFwd;
        cc.recomputeFlops += lc.recomputeOpFlops;
        saved = lc.savedOp;
        cc.workingSet = std::max(cc.workingSet, 2.0 * lc.savedFull - lc.savedOp);
      }
      cc.savedPerMicroBatch += saved * byteScale;
    }
    cc.workingSet *= byteScale;
  }
  {
    ChunkCost& first = chunk.front();
    first.fwd += embed.fwd;
    first.bwd += embed.bwd;
    first.tp += embed.tpCommFwd + embed.tpCommBwd;
    first.commFwd += embed.tpCommFwd;
    first.params += embed.paramsPerGpu;
    first.savedPerMicroBatch += embed.savedFull * byteScale;
    ChunkCost& last = chunk.back();
    last.fwd += head.fwd;
    last.bwd += head.bwd;
    last.tp += head.tpCommFwd + head.tpCommBwd;
    last.commFwd += head.tpCommFwd;
    last.params += head.paramsPerGpu;
    last.gemmFlopsFwd += head.gemmFlopsFwdPerGpu;
    last.savedPerMicroBatch += head.savedFull * byteScale;
    // The tied output layer keeps its own copy of the embedding on the last stage.
    if (T.tiedHead && pp > 1) last.params += T.tiedParams / static_cast<double>(par.tp);
  }

  // Pipeline send/recv of one boundary activation (Megatron's scatter/gather sends 1/tp of it).
  double p2p = 0;
  if (pp > 1) {
    const double bytes = static_cast<double>(plan.microBatchSize) * (static_cast<double>(T.seqLen) / static_cast<double>(par.cp)) *
                         static_cast<double>(T.hidden) * dt / static_cast<double>(par.tp);
    GroupPlacement pair = ppGroup;
    pair.size = 2;
    if (ppGroup.stride < I.cluster.gpusPerNode) pair.outer = nullptr;  // neighbours share a node
    if (!pair.inner && !pair.outer) pair.inner = &I.cluster.links.front();
    p2p = collectiveSeconds(Collective::kSendRecv, bytes, pair);
  }

  // Outside the allocator on every stage: the CUDA context (mem.context) and the NCCL buffers of every
  // communicator a rank uses.
  double communicators = 0;
  for (const GroupPlacement* g : {&tpGroup, &cpGroup, &dpGroup, &epGroup, &ppGroup}) {
    const LinkLevel* link = g->inner ? g->inner : g->outer;
    if (link) communicators += communicatorBytes(device, g->size, link->kind, g->crossesNodes());
  }

  // Physical stages.
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
  const double weightBytes = plan.precision == DType::kFp32 ? 4.0 : 2.0;
  // bf16: gradients accumulate in fp32 (Megatron's main_grad). fp16: 16-bit gradients, plus the fp32
  // copies the mixed-precision optimizer makes of them for the step (memory only).
  const double gradBytes = plan.precision == DType::kFp16 ? 2.0 : 4.0;
  // Accumulating in the 16-bit .grad (autograd) or beside it (DeepSpeed's fp32 copies) keeps both.
  const GradAccumulation accumulation = plan.execution.gradAccumulation;
  const bool sixteenBitGrads = plan.precision == DType::kFp16 || (plan.precision != DType::kFp32 &&
                                                                  (accumulation == GradAccumulation::kAutograd ||
                                                                   accumulation == GradAccumulation::kFp32Copy));
  const double gradMemoryBytes = sixteenBitGrads ? 6.0 : gradBytes;
  const double accumulateBytes = gradAccumulationBytes(accumulation, plan.precision, static_cast<double>(m));
  const double optimizerBytes = plan.precision == DType::kFp32 ? 8.0 : 12.0;
  const double dp = static_cast<double>(par.dp);
  // Gradients are reduced, and ZeRO shards states, over the data-parallel replicas and the
  // context-parallel ranks together: CP ranks hold the same weights and each computes part of their
  // gradient (Megatron-Core's data-parallel group "with context parallel", torchtitan's dp_shard_cp mesh).
  const std::int64_t gradRanks = par.dp * par.cp;
  const double shard = static_cast<double>(gradRanks);
  const double mb = static_cast<double>(m);
  double sumComputeFwdBwd = 0;
  std::vector<double> stageTime(static_cast<std::size_t>(pp));
  std::vector<double> stageCompute(static_cast<std::size_t>(pp)), stageRecompute(static_cast<std::size_t>(pp)),
      stageTp(static_cast<std::size_t>(pp)), stageCp(static_cast<std::size_t>(pp)), stageEp(static_cast<std::size_t>(pp)),
      stagePp(static_cast<std::size_t>(pp)), stageZero3(static_cast<std::size_t>(pp)),
      stageAccumulate(static_cast<std::size_t>(pp));
  double gemmFlopsPerMicroBatch = 0;
  double recomputeFlopsPerMicroBatch = 0;
  for (std::int64_t s = 0; s < pp; ++s) {
    StageReport& st = ev.stages[static_cast<std::size_t>(s)];
    st.stage = s;
    double fwd = 0, bwd = 0, rec = 0, tpc = 0, cpc = 0, epc = 0, commFwd = 0, saved = 0, working = 0, params = 0;
    double expertParams = 0;
    for (std::int64_t c = s; c < chunks; c += pp) {
      const ChunkCost& cc = chunk[static_cast<std::size_t>(c)];
      fwd += cc.fwd;
      bwd += cc.bwd;
      rec += cc.recompute;
      tpc += cc.tp;
      cpc += cc.cp;
      epc += cc.ep;
      commFwd += cc.commFwd;
      saved += cc.savedPerMicroBatch;
      working = std::max(working, cc.workingSet);
      params += cc.params;
      expertParams += cc.expertParams;
      st.layers += plan.stages[static_cast<std::size_t>(c)].layers;
      gemmFlopsPerMicroBatch += cc.gemmFlopsFwd;
      recomputeFlopsPerMicroBatch += cc.recomputeFlops;
    }
    const double p2pTime = pp > 1 ? 2.0 * static_cast<double>(v) * p2p : 0.0;

    // ZeRO-3 gathers every layer's weights before its forward, again before a recomputed forward and
    // before its backward, and reduce-scatters its gradients, each micro-batch, one layer at a time:
    // every collective pays the ring's (n-1) latency steps. Prefetching hides up to 80% behind compute
    // (the collectives compete with it for SMs and memory bandwidth).
    double zero3 = 0;
    if (plan.zeroStage == 3 && gradRanks > 1) {
      const double layersHere = std::max<double>(1.0, static_cast<double>(st.layers));
      const double perLayer = params / layersHere;
      const double gathers = 2.0 + (rec > 0 ? 1.0 : 0.0);
      const double gather = collectiveSeconds(Collective::kAllGather, perLayer * weightBytes, gradGroup);
      const double scatter = collectiveSeconds(Collective::kReduceScatter, perLayer * gradBytes, gradGroup);
      const double comm = layersHere * (gathers * gather + scatter);
      const double cover = plan.execution.overlapParamGather ? 0.8 * (fwd + bwd + rec) : 0.0;
      zero3 = std::max(0.1 * comm, comm - cover);
      zero3 += device.overlapSlowdown * (comm - zero3);  // the hidden part slows the compute it overlaps
    }
    // Summing this micro-batch's gradients into the accumulated ones, after its backward: one pass over
    // the stage's local gradients (its shard under ZeRO >= 2) at HBM speed.
    const double accumulate =
        params / (plan.zeroStage >= 2 ? shard : 1.0) * accumulateBytes / device.memoryBytesPerSecond;
    const double comm = tpc + cpc + epc;
    st.forwardSeconds = fwd + commFwd + p2pTime / 2 + zero3 / 3;
    st.backwardSeconds = bwd + rec + (comm - commFwd) + p2pTime / 2 + zero3 * 2 / 3 + accumulate;
    st.recomputeSeconds = rec;
    st.paramsPerGpu = params;
    stageTime[static_cast<std::size_t>(s)] = fwd + bwd + rec + tpc + cpc + epc + p2pTime + zero3 + accumulate;
    stageAccumulate[static_cast<std::size_t>(s)] = accumulate;
    stageCompute[static_cast<std::size_t>(s)] = fwd + bwd;
    stageRecompute[static_cast<std::size_t>(s)] = rec;
    stageTp[static_cast<std::size_t>(s)] = tpc;
    stageCp[static_cast<std::size_t>(s)] = cpc;
    stageEp[static_cast<std::size_t>(s)] = epc;
    stagePp[static_cast<std::size_t>(s)] = p2pTime;
    stageZero3[static_cast<std::size_t>(s)] = zero3;
    sumComputeFwdBwd += stageTime[static_cast<std::size_t>(s)];

    // Memory.
    MemoryBreakdown& mem = st.memory;
    const double offOpt = plan.offload.optimizerFraction;
    const double offParams = plan.offload.paramsFraction;
    // Expert parameters are replicated only across the expert-data-parallel ranks (dp x cp / ep), and
    // ZeRO shards their states over those (Megatron-Core's expert data-parallel group).
    const double expertShard = std::max(1.0, shard / static_cast<double>(par.ep));
    auto sharded = [&](double bytesPerParam, bool on) {
      return on ? ((params - expertParams) / shard + expertParams / expertShard) * bytesPerParam : params * bytesPerParam;
    };
    mem.weights = sharded(weightBytes, plan.zeroStage >= 3) * (1.0 - offParams);
    mem.gradients = sharded(gradMemoryBytes, plan.zeroStage >= 2);
    mem.optimizer = sharded(optimizerBytes, plan.zeroStage >= 1) * (1.0 - offOpt);
    double inFlight = 1;
    const double p = static_cast<double>(pp);
    const double stageIndex = static_cast<double>(s);
    switch (plan.schedule) {
      case Schedule::kGpipe:
        inFlight = mb;
        break;
      case Schedule::kOneFOneB:
      case Schedule::kZeroBubble:
        inFlight = std::min(mb, p - stageIndex);
        break;
      case Schedule::kInterleaved: {
        // Chunk-micro-batches in flight at the end of warm-up, each one chunk (1/v of the stage) deep.
        const double warm = (p - stageIndex - 1) * 2 + (static_cast<double>(v) - 1) * p + 1;
        inFlight = std::min(mb * static_cast<double>(v), warm) / static_cast<double>(v);
        break;
      }
    }
    st.inFlightMicroBatches = inFlight;
    // The head's saved tensors (the final norm's input, the fp32 logits the loss keeps for its backward)
    // belong to the last virtual stage, whose backward follows its forward at once under 1F1B,
    // interleaving and zero bubble: one micro-batch holds them. GPipe keeps every micro-batch's.
    const double headActivations =
        (s == pp - 1 && plan.schedule != Schedule::kGpipe) ? head.savedFull * byteScale : 0.0;
    mem.activations = (saved - headActivations) * inFlight + headActivations + working;
    // Buffers: sequence-parallel gathers, the logits' 16-bit copy and gradient beside their fp32 upcast,
    // data-parallel gradient buckets, ZeRO-3 gathered layers.
    double buffers = 0;
    const double fullActivation = static_cast<double>(plan.microBatchSize) * static_cast<double>(T.seqLen) /
                                  static_cast<double>(par.cp) * static_cast<double>(T.hidden) * dt;
    if (par.tp > 1) buffers += 2 * fullActivation;
    if (s == pp - 1) {
      for (const auto& op : T.head.ops) {
        if (op.kind == OpKind::kCrossEntropy) {
          buffers += op.savedBytes / 4.0 * dt * 2 * static_cast<double>(plan.microBatchSize) /
                     static_cast<double>(par.cp) / static_cast<double>(par.tp);
        }
      }
    }
    if (gradRanks > 1) buffers += std::min(params * gradBytes, 2 * 40e6 * gradBytes);
    if (plan.zeroStage == 3) {
      double largestLayer = 0;
      for (const auto& lc : classCost) largestLayer = std::max(largestLayer, lc.paramsPerGpu);
      buffers += 2 * largestLayer * weightBytes;
    }
    mem.buffers = buffers;
    mem.allocator = 0.08 * (mem.activations + mem.buffers);
    mem.context = device.contextBytes + communicators;
    ev.peakMemoryBytes = std::max(ev.peakMemoryBytes, mem.total());

    // Data-parallel synchronisation and the optimizer step, after this stage's last backward.
    double dpExposed = 0;
    if (gradRanks > 1 && plan.zeroStage < 3) {
      const double lastBackward = bwd + rec;
      double reduce = 0, gather = 0;
      if (plan.zeroStage == 0 || (accumulation == GradAccumulation::kFp32Copy && plan.zeroStage == 1)) {
        // DeepSpeed's BF16 optimizer all-reduces its fp32 copies whole, under ZeRO-1 too, then each rank
        // updates its partition and the 16-bit weights are all-gathered.
        const double bytes = accumulation == GradAccumulation::kFp32Copy ? 4.0 : gradBytes;
        reduce = collectiveSeconds(Collective::kAllReduce, params * bytes, gradGroup);
        if (plan.zeroStage == 1) gather = collectiveSeconds(Collective::kAllGather, params * weightBytes, gradGroup);
      } else {
        reduce = collectiveSeconds(Collective::kReduceScatter, params * gradBytes, gradGroup);
        gather = collectiveSeconds(Collective::kAllGather, params * weightBytes, gradGroup);
      }
      // Overlapped, at least 10% stays exposed (the last bucket), and the hidden part slows the backward
      // or forward it runs beside (overlapSlowdown).
      auto exposedOf = [&](double collective, bool overlapped, double cover) {
        if (!overlapped) return collective;
        const double exposed = std::max(0.1 * collective, collective - 0.9 * cover);
        return exposed + device.overlapSlowdown * (collective - exposed);
      };
      dpExposed = exposedOf(reduce, plan.execution.overlapGradReduce, lastBackward) +
                  exposedOf(gather, plan.execution.overlapParamGather, fwd);
    }
    // The mixed-precision optimizer step at HBM speed (bytes per parameter: optimizerStepBytes); offloaded
    // states are updated by the host, their gradients and weights crossing PCIe.
    const double localParams = params / (plan.zeroStage >= 1 ? shard : 1.0);
    double optimizer = localParams * (1.0 - plan.offload.optimizerFraction) * optimizerStepBytes(plan.precision) /
                       device.memoryBytesPerSecond;
    if (I.calibration.optimizerMeasured) {
      // The measured AdamW step over fp32 master weights (linear in the parameter count).
      if (const auto t = I.optimizerTable.lookupStreaming("adam_step.fwd", localParams * (1.0 - plan.offload.optimizerFraction))) {
        optimizer = t->first;
      }
    }
    if (plan.offload.optimizerFraction > 0) {
      const double offParamsCount = localParams * plan.offload.optimizerFraction;
      const double host = offParamsCount / device.cpuAdamParamsPerSecond;
      const double pcie = offParamsCount * (gradBytes + weightBytes) / I.cluster.pcieBytesPerSecond;
      optimizer += host + pcie;
    }
    // A tied embedding lives on the first and the last stage: their word-embedding gradients are
    // all-reduced between the two after the backward, before the optimizer (Megatron's embedding group,
    // DeepSpeed's ReduceTiedGrads), on the critical path.
    if (T.tiedHead && pp > 1 && (s == 0 || s == pp - 1)) {
      GroupPlacement ends = ppGroup;
      ends.size = 2;
      ends.perNode = ppGroup.crossesNodes() ? 1 : 2;
      if (ppGroup.crossesNodes()) ends.inner = nullptr;
      const double bytes = accumulation == GradAccumulation::kFp32Copy ? 4.0 : gradBytes;
      dpExposed += collectiveSeconds(Collective::kAllReduce, T.tiedParams / static_cast<double>(par.tp) * bytes, ends);
    }
    st.dpExposedSeconds = dpExposed;
    st.optimizerSeconds = optimizer;
  }

  // Closed-form pipeline time: the slowest stage paces the steady state; the others add fill and
  // drain, shortened by virtual stages (interleaving) or by deferring weight gradients (zero bubble).
  const double tMax = *std::max_element(stageTime.begin(), stageTime.end());
  const std::size_t slowest = static_cast<std::size_t>(std::max_element(stageTime.begin(), stageTime.end()) - stageTime.begin());
  const double fill = sumComputeFwdBwd - tMax;
  double pipeline = 0;
  switch (plan.schedule) {
    case Schedule::kGpipe:
    case Schedule::kOneFOneB:
      pipeline = mb * tMax + fill;
      break;
    case Schedule::kInterleaved:
      pipeline = mb * tMax + fill / static_cast<double>(v);
      break;
    case Schedule::kZeroBubble:
      pipeline = mb * tMax + fill / 3.0;
      break;
  }
  // The tail: data-parallel sync and optimizer. Stage s finishes its last backward roughly the
  // backward time of the stages before it earlier than stage 0.
  double tail = 0;
  std::size_t tailStage = 0;
  double slack = 0;
  for (std::size_t s = 0; s < ev.stages.size(); ++s) {
    const StageReport& st = ev.stages[s];
    const double t = std::max(0.0, st.dpExposedSeconds + st.optimizerSeconds - slack);
    if (t > tail) {
      tail = t;
      tailStage = s;
    }
    slack += st.backwardSeconds / static_cast<double>(v);
  }
  ev.pipelineSeconds = pipeline;
  ev.stepSeconds = pipeline + tail;

  // Breakdown on the critical path: the slowest stage's per-micro-batch parts times m, the fill/drain
  // as bubble, the tail split into its data-parallel and optimizer parts.
  TimeBreakdown& tb = ev.time;
  tb.compute = mb * stageCompute[slowest];
  tb.recompute = mb * stageRecompute[slowest];
  tb.tpComm = mb * stageTp[slowest];
  tb.cpComm = mb * stageCp[slowest];
  tb.epComm = mb * stageEp[slowest];
  tb.ppComm = mb * stagePp[slowest];
  tb.dpComm = mb * stageZero3[slowest];
  tb.gradAccum = mb * stageAccumulate[slowest];
  tb.bubble = pipeline - mb * tMax;
  if (tail > 0) {
    const StageReport& st = ev.stages[tailStage];
    const double parts = st.dpExposedSeconds + st.optimizerSeconds;
    tb.dpComm += parts > 0 ? tail * st.dpExposedSeconds / parts : 0.0;
    tb.optimizer = parts > 0 ? tail * st.optimizerSeconds / parts : 0.0;
  }
  ev.bubbleFraction = ev.stepSeconds > 0 ? tb.bubble / ev.stepSeconds : 0.0;

  const double gpus = static_cast<double>(I.cluster.totalGpus());
  const double samples = static_cast<double>(plan.globalBatchSize);
  const double modelFlops = samples * T.modelFlopsPerSample;
  // Recompute FLOPs: what one replica re-runs per micro-batch, over all its micro-batches and replicas.
  const double replicaShare = static_cast<double>(par.tp * par.cp);  // GPUs sharing a chunk's work
  const double hardwareFlops = modelFlops + recomputeFlopsPerMicroBatch * replicaShare * mb * dp;
  (void)gemmFlopsPerMicroBatch;
  ev.tokensPerSecond = samples * static_cast<double>(T.seqLen) / ev.stepSeconds;
  ev.modelTflopsPerGpu = modelFlops / ev.stepSeconds / gpus / 1e12;
  ev.hardwareTflopsPerGpu = hardwareFlops / ev.stepSeconds / gpus / 1e12;
  ev.mfu = ev.modelTflopsPerGpu * 1e12 / device.peakFlopsPerSecond;
  ev.fits = ev.peakMemoryBytes <= ev.gpuMemoryBytes;
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
