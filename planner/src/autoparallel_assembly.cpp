// The step of one solution of the operator-level search: pipeline, gradient reduction, optimizer and
// host transfers, and the fullest stage's memory (docs/autoparallel.md, "Assembly" and "Offload").
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <span>
#include <tuple>
#include <utility>

#include "autoparallel_search.h"
#include "colo/costmodel/collectives.h"
#include "colo/costmodel/evaluator.h"

namespace colo::planner::detail {
namespace {

// Per micro-batch figures of one solved block.
struct Figures {
  double seconds = 0, compute = 0, comm = 0, recompute = 0, activation = 0, state = 0, optimizerParams = 0;
  double params = 0;  // held after weight sharding: the gradient buffer's length
  double sync[3] = {0, 0, 0};
};
// `host`: seconds the host needs to issue one kernel or collective. Each way, a block whose device time
// is shorter than its ops' issue time waits for the host (the evaluator's host floor), counted as compute.
Figures figuresOf(const BlockPlan& p, double host) {
  Figures f;
  f.compute = p.computeSeconds;
  f.comm = p.commSeconds;
  f.recompute = p.recomputeSeconds;
  if (host > 0) {
    const double forward = p.forwardSeconds;
    const double backward = p.computeSeconds + p.commSeconds - forward;
    f.compute += std::max(0.0, p.opsForward * host - forward) + std::max(0.0, p.opsRecompute * host - p.recomputeSeconds) +
                 std::max(0.0, p.opsBackward * host - backward);
  }
  f.seconds = f.compute + f.comm + f.recompute;
  f.activation = p.activationBytes;
  f.state = p.stateBytes;
  f.optimizerParams = p.optimizerParams;
  f.params = p.params;
  for (int k = 0; k < 3; ++k) f.sync[k] = p.syncBytes[k];
  return f;
}

// One stage per micro-batch, all its chunks together, with the embedding (first stage) or head (last).
struct Stage {
  double seconds = 0, compute = 0, comm = 0, recompute = 0, activation = 0, headActivation = 0, state = 0;
  double optimizerParams = 0, params = 0, sync[3] = {0, 0, 0}, copies = 0;
  double layers = 0, exposed = 0, offloaded = 0, layerParams = 0;  // of its layers: count, offload's exposed seconds and bytes, parameters
  bool last = false;  // holds the head
};

// The layer classes of one solution at one set of offload fractions, per layer and micro-batch, and
// the stages they make.
class StageCosts {
 public:
  StageCosts(const Context& c, const Solution& sol, double alpha, double gamma, double pcie)
      : m_c(c), m_sol(sol), m_emb(figuresOf(sol.embedding, c.hostSecondsPerOp)), m_head(figuresOf(sol.head, c.hostSecondsPerOp)),
        m_s(scratch()) {
    const double L = static_cast<double>(c.numLayers);
    m_s.layers.clear();
    m_s.exposed.clear();
    m_s.offloaded.clear();
    for (std::size_t k = 0; k < c.classes.size(); ++k) {
      Figures f = figuresOf(sol.layers[k], c.hostSecondsPerOp);
      f.seconds += sol.backConversion[k];
      f.comm += sol.backConversion[k];
      // Offloaded activations leave during the layer's forward and return before its backward; offloaded
      // weights come in for each use (forward, recomputed forward, backward: ZeRO-Infinity's fetch per
      // layer and micro-batch). One PCIe link, hidden behind up to 80% of the layer's kernels.
      const double moved = alpha * f.activation;
      const double weights = gamma * f.params * c.weightBytes;
      const double uses = f.recompute > 0 ? 3.0 : 2.0;
      m_s.offloaded.push_back(moved);
      m_s.exposed.push_back(std::max(0.0, (2.0 * moved + uses * weights) / pcie - 0.8 * f.compute));
      m_averageSeconds += static_cast<double>(c.classes[k].layers.size()) / L * (f.seconds + m_s.exposed.back());
      m_s.layers.push_back(f);
    }
  }
  /// The model's average layer, with its exposed offload (what the stage split weighs).
  [[nodiscard]] double averageLayerSeconds() const { return m_averageSeconds; }
  [[nodiscard]] double embeddingSeconds() const { return m_emb.seconds + m_sol.embeddingConversion; }
  [[nodiscard]] double headSeconds() const { return m_head.seconds; }

  /// Layers of each class on each stage: its chunks hold consecutive layers in chunk order (chunk v of
  /// stage i at v*pp + i).
  void place(const std::vector<std::int64_t>& stageLayers, std::int64_t pp) {
    const std::size_t K = m_s.layers.size();
    m_s.mix.assign(static_cast<std::size_t>(pp) * K, 0.0);
    std::int64_t first = 0;
    for (std::size_t chunk = 0; chunk < stageLayers.size(); ++chunk) {
      const auto from = static_cast<std::size_t>(first);
      const auto to = static_cast<std::size_t>(first + stageLayers[chunk]);
      double* row = &m_s.mix[(chunk % static_cast<std::size_t>(pp)) * K];
      for (std::size_t k = 0; k < K; ++k) row[k] += static_cast<double>(m_c.classesBefore[k][to] - m_c.classesBefore[k][from]);
      first += stageLayers[chunk];
    }
  }

  /// A middle stage's time per micro-batch and what it holds at its peak with `copies` micro-batches in
  /// flight, without building it (which stages are the slowest and the fullest).
  [[nodiscard]] std::pair<double, double> middleKeys(std::int64_t index, double copies) const {
    const std::size_t K = m_s.layers.size();
    const double* counts = &m_s.mix[static_cast<std::size_t>(index) * K];
    double seconds = 0, state = 0, activation = 0;
    for (std::size_t k = 0; k < K; ++k) {
      const Figures& f = m_s.layers[k];
      seconds += counts[k] * (f.seconds + m_s.exposed[k]);
      state += counts[k] * f.state;
      activation += counts[k] * (f.activation - m_s.offloaded[k]);
    }
    return {seconds, state + 1.08 * copies * activation};
  }

  /// Stage `index` of `pp` (after place()), holding `copies` micro-batches of activations at its peak.
  [[nodiscard]] Stage stage(std::int64_t index, std::int64_t pp, double copies) const {
    const bool first = index == 0, last = index == pp - 1;
    Stage s;
    const std::size_t K = m_s.layers.size();
    const double* counts = &m_s.mix[static_cast<std::size_t>(index) * K];
    for (std::size_t k = 0; k < K; ++k) {
      const double n = counts[k];
      const Figures& f = m_s.layers[k];
      s.seconds += n * (f.seconds + m_s.exposed[k]);
      s.compute += n * f.compute;
      s.comm += n * f.comm;
      s.recompute += n * f.recompute;
      s.activation += n * (f.activation - m_s.offloaded[k]);
      s.state += n * f.state;
      // (Split over the copies of the mesh already, as the solver priced them.)
      s.optimizerParams += n * f.optimizerParams;
      s.params += n * f.params;
      for (int j = 0; j < 3; ++j) s.sync[j] += n * f.sync[j];
      s.layers += n;
      s.exposed += n * m_s.exposed[k];
      s.offloaded += n * m_s.offloaded[k];
    }
    s.layerParams = s.params;
    s.seconds += (first ? embeddingSeconds() : 0) + (last ? m_head.seconds : 0);
    s.compute += (first ? m_emb.compute : 0) + (last ? m_head.compute : 0);
    s.comm += (first ? m_emb.comm + m_sol.embeddingConversion : 0) + (last ? m_head.comm : 0);
    s.recompute += (first ? m_emb.recompute : 0) + (last ? m_head.recompute : 0);
    s.activation += (first ? m_emb.activation : 0) + (last ? m_head.activation : 0);
    s.headActivation = last ? m_head.activation : 0;  // held for one micro-batch: its backward follows its forward
    s.last = last;
    // One stage holding the embedding and a head that splits their tied weight alike keeps one copy.
    const double head = last ? 1.0 - (first ? m_sol.tiedShare : 0.0) : 0.0;
    s.state += (first ? m_emb.state : 0) + head * m_head.state;
    s.optimizerParams += (first ? m_emb.optimizerParams : 0) + head * m_head.optimizerParams;
    s.params += (first ? m_emb.params : 0) + head * m_head.params;
    for (int j = 0; j < 3; ++j) s.sync[j] += (first ? m_emb.sync[j] : 0) + head * m_head.sync[j];
    s.copies = copies;
    return s;
  }

 private:
  // The per-class and per-stage figures, in buffers a thread reuses from one assembly to the next (the
  // search assembles millions of candidates).
  struct Scratch {
    std::vector<Figures> layers;               // per class, its exit converted back to the entry
    std::vector<double> exposed, offloaded;    // per class and layer: offload's exposed seconds, bytes moved
    std::vector<double> mix;                   // [stage * classes + class]: layers
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }
  const Context& m_c;
  const Solution& m_sol;
  Figures m_emb, m_head;
  Scratch& m_s;
  double m_averageSeconds = 0;
};

// Activations and their gradients between stages, once per pipeline degree (a MeshSolvers belongs to
// one Search, whose context is fixed, and holds one count of replicas: pp is all the hop depends on).
double hopSeconds(const Context& c, const MeshSolvers& ms, std::int64_t pp) {
  if (pp <= 1) return 0.0;
  if (const auto memo = ms.hopSeconds.find(pp); memo != ms.hopSeconds.end()) return memo->second;
  Parallelism par;
  par.tp = ms.mesh->size();
  par.dp = ms.replicas;
  par.pp = pp;
  const auto group = costmodel::placeGroup(*c.cluster, par, costmodel::Dim::kPp);
  const double bytes = static_cast<double>(ms.samples) * static_cast<double>(c.seqLen * c.hidden) * 2.0 /
                       static_cast<double>(ms.mesh->size());
  const double hop = 2.0 * costmodel::collectiveSeconds(costmodel::Collective::kSendRecv, bytes, group);
  ms.hopSeconds.emplace(pp, hop);
  return hop;
}

// What a stage adds after its last backward (gradient reduction, optimizer step, host transfers) and
// what it holds at its peak.
struct StageEnd {
  double sync = 0, optimizer = 0;
  double state = 0, activations = 0, buffers = 0, device = 0;
  double total = 0;  // device, or +infinity when the host cannot hold the stage's offloaded share
};

// `memo` caches the stage's gradient reduction while the solution stays the same.
StageEnd stageEnd(const Context& c, const MeshSolvers& ms, MeshSolvers::SyncMemo& memo, const Solution& sol, const Stage& s,
                  double beta, double gamma, double pcie, double pipelineCommunicator) {
  const auto& dev = c.device;
  const std::int64_t replicas = ms.replicas;
  StageEnd e;
  // Gradient reductions after the last backward, hidden behind up to 90% of it (as the evaluator's
  // data-parallel tail), the hidden part slowing what it overlaps.
  const double held = s.params * c.gradientBytes;  // at the width the mesh's reductions use
  const std::array<double, 4> key{s.sync[0], s.sync[1], s.sync[2], replicas > 1 ? held : 0.0};
  if (memo.key != key) {
    memo.key = key;
    memo.seconds = gradientSyncSeconds(*ms.mesh, s.sync, replicas, held);
  }
  const double C = memo.seconds;
  const double cover = 0.9 * (s.seconds * 2.0 / 3.0);
  e.sync = std::max(0.1 * C, C - cover);
  e.sync += dev.overlapSlowdown * (C - e.sync);
  // Offloaded weights leave the layers' share of the stage's 16-bit weights, less two average layers'
  // worth in use and prefetched.
  const double hostWeights = gamma * s.layerParams * c.weightBytes;
  const double layerWeights = s.layers > 0 ? hostWeights / s.layers : 0.0;
  // The step over the optimizer shard, whose zeroing is the buffer's; the gradient buffer of every held
  // parameter zeroed each step and, when any axis reduces gradients, scaled before it (the evaluator's
  // Megatron buffer, docs/costmodel.md).
  const bool reduced = s.sync[0] + s.sync[1] + s.sync[2] > 0 || replicas > 1;
  const double buffer = s.params * c.gradBufferBytes * (reduced ? 3.0 : 1.0);
  const double onDevice = (s.optimizerParams * (1.0 - beta) * (c.stepBytesPerParam - c.gradBufferBytes) + buffer) /
                          dev.memoryBytesPerSecond;
  const double host = beta * s.optimizerParams;
  // Weights updated on the GPU whose 16-bit copy lives on the host go back once a step.
  const double hostStep = (host > 0 ? host / dev.cpuAdamParamsPerSecond + host * 4.0 / pcie : 0.0) + (1.0 - beta) * hostWeights / pcie;
  e.optimizer = onDevice + hostStep;
  e.state = s.state - beta * s.optimizerParams * 12.0 - hostWeights + std::min(s.layers, 2.0) * layerWeights;
  const double acts = s.copies * (s.activation - s.headActivation) + std::min(s.copies, 1.0) * s.headActivation;
  // The caching allocator's fragmentation allowance on activations, as the evaluator counts it.
  e.activations = 1.08 * acts;
  // Buffers, as the evaluator counts them (its stage memory): the gathers beside the kept activations,
  // the last stage's logit copies, the data-parallel gradient buckets (two of 40 M elements, or the
  // stage's gradients when fewer), each with the allocator's allowance; and NCCL's communicators.
  const double buckets = sol.dataParallel || replicas > 1 ? std::min(s.params, 2.0 * 40e6) * c.gradBufferBytes : 0.0;
  const double buffers = sol.gatherBuffers + 2.0 * sol.gatheredWeights + (s.last ? sol.logitCopies : 0.0) + buckets;
  e.buffers = 1.08 * buffers + ms.communicatorBytes + pipelineCommunicator;
  e.device = e.state + e.activations + e.buffers + dev.contextBytes;
  e.total = e.device;
  // What goes to host memory must fit there: every GPU of a node offloads alike.
  const double hosted = s.copies * s.offloaded + beta * s.optimizerParams * 12.0 + hostWeights;
  if (hosted > 0 && c.cluster->hostMemoryBytes > 0 &&
      hosted * static_cast<double>(c.cluster->gpusPerNode) > 0.9 * c.cluster->hostMemoryBytes) {
    e.total = kInf;
  }
  return e;
}

}  // namespace

std::vector<std::int64_t> stageLayerCounts(std::int64_t layers, std::int64_t pp, std::int64_t vpp, double layerSeconds,
                                           double firstSeconds, double lastSeconds) {
  const std::int64_t chunks = pp * std::max<std::int64_t>(1, vpp);
  if (pp <= 1 || vpp > 1 || layers <= pp || layerSeconds <= 0) {
    // One stage, or Megatron's interleaved schedule: equal chunks (chunkCounts keeps only those that divide).
    std::vector<std::int64_t> out(static_cast<std::size_t>(chunks), layers / chunks);
    for (std::int64_t i = 0; i < layers % chunks; ++i) ++out[static_cast<std::size_t>(chunks - 1 - i)];
    return out;
  }
  // The least bottleneck T: under it stage i takes floor((T - extra_i) / layer) layers, at least one.
  auto capacity = [&](double t, double extra) {
    const double n = std::floor((t - extra) / layerSeconds + 1e-9);
    return n < 1.0 ? std::int64_t{0} : static_cast<std::int64_t>(std::min(n, static_cast<double>(layers)));
  };
  auto fits = [&](double t) {
    const std::int64_t first = capacity(t, firstSeconds), last = capacity(t, lastSeconds), middle = capacity(t, 0.0);
    return first >= 1 && last >= 1 && middle >= 1 && first + last + (pp - 2) * middle >= layers;
  };
  double lo = 0, hi = std::max(firstSeconds, lastSeconds) + static_cast<double>(layers) * layerSeconds;
  for (int i = 0; i < 64 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (fits(mid) ? hi : lo) = mid;
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(pp), capacity(hi, 0.0));
  out.front() = capacity(hi, firstSeconds);
  out.back() = capacity(hi, lastSeconds);
  // Take back the surplus where activations weigh most: 1F1B's stage i holds pp - i micro-batches of
  // its layers, so a layer leaves the stage whose layers x micro-batches in flight is largest (the
  // earlier on a tie). No stage gets slower, so the bottleneck stays the least.
  std::int64_t surplus = -layers;
  for (const auto n : out) surplus += n;
  auto weight = [&](std::size_t i) { return static_cast<double>(pp - static_cast<std::int64_t>(i)) * static_cast<double>(out[i]); };
  auto lighter = [&](std::size_t x, std::size_t y) { return weight(x) < weight(y) || (weight(x) == weight(y) && x > y); };
  std::vector<std::size_t> heap;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] > 1) heap.push_back(i);
  }
  std::make_heap(heap.begin(), heap.end(), lighter);
  while (surplus > 0 && !heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), lighter);
    const std::size_t i = heap.back();
    --out[i];
    --surplus;
    if (out[i] > 1) {
      std::push_heap(heap.begin(), heap.end(), lighter);
    } else {
      heap.pop_back();
    }
  }
  return out;
}

namespace {

// A group of `members` ranks `stride` apart (the replicas' and the pipeline's): NCCL's buffers for it, on
// the innermost link it uses.
double groupCommunicatorBytes(const Context& c, std::int64_t members, std::int64_t stride) {
  if (members <= 1 || c.cluster->links.empty()) return 0.0;
  const bool crosses = stride * (members - 1) >= c.cluster->gpusPerNode || stride >= c.cluster->gpusPerNode;
  const LinkKind innermost = stride < c.cluster->gpusPerNode ? c.cluster->links.front().kind : c.cluster->links.back().kind;
  return costmodel::communicatorBytes(c.device, members, innermost, crosses);
}

}  // namespace

double pipelineCommunicatorBytes(const Context& c, const MeshSolvers& ms, std::int64_t pp) {
  return groupCommunicatorBytes(c, pp, ms.mesh->size() * ms.replicas);
}

double meshCommunicatorBytes(const Context& c, const MeshSolvers& ms) {
  // The inner axis's group, and the outer axis's with the replicas as one group (they reduce gradients
  // together, as Megatron's data-parallel group spans both): copies of a mesh cost what the wider mesh does.
  const DeviceMesh& mesh = *ms.mesh;
  const int inner = mesh.axes() - 1;
  const costmodel::GroupPlacement g = mesh.group(inner);
  const LinkLevel* link = g.inner ? g.inner : g.outer;
  double bytes = link ? costmodel::communicatorBytes(c.device, g.size, link->kind, g.crossesNodes()) : 0.0;
  const std::int64_t outer = (mesh.axes() > 1 ? mesh.axisSize(0) : 1) * ms.replicas;
  return bytes + groupCommunicatorBytes(c, outer, mesh.axisSize(inner));
}

namespace {

// The chosen strategy of the first unit of `block` that `is` picks, or null.
template <class Is>
const Strategy* chosenOf(const BlockSolver& solver, const BlockPlan& plan, Is&& is) {
  const auto& units = solver.block().units;
  for (std::size_t u = 0; u < units.size() && u < plan.units.size(); ++u) {
    if (!is(units[u]) || plan.units[u].strategy < 0) continue;
    return &solver.strategies()[u][static_cast<std::size_t>(plan.units[u].strategy)];
  }
  return nullptr;
}

// Solution::tiedShare: the head's tied weight is the embedding's own where every mesh axis splits the
// vocabulary in both or in neither, shards the weight (fsdp) in both or in neither, and does not split
// the head's hidden dimension.
double tiedShare(const MeshSolvers& ms, const Solution& sol) {
  const Unit* tied = nullptr;
  for (const auto& u : ms.head->block().units) tied = !tied && u.tiedParams > 0 ? &u : tied;
  if (!tied || sol.head.params <= 0) return 0.0;
  const Strategy* head = chosenOf(*ms.head, sol.head, [](const Unit& u) { return u.tiedParams > 0; });
  const Strategy* emb = chosenOf(*ms.embedding, sol.embedding, [](const Unit& u) { return u.kind == UnitKind::kEmbedding && u.params > 0; });
  if (!head || !emb) return 0.0;
  for (int a = 0; a < ms.mesh->axes(); ++a) {
    const Role h = head->role[static_cast<std::size_t>(a)], e = emb->role[static_cast<std::size_t>(a)];
    if ((h == Role::kOut) != (e == Role::kOut) || (h == Role::kFsdp) != (e == Role::kFsdp) || h == Role::kIn) return 0.0;
  }
  return head->stateParams * tied->tiedParams / (tied->params + tied->tiedParams) / sol.head.params;
}

}  // namespace

void measureBuffers(const Context& c, const MeshSolvers& ms, Solution& sol) {
  const DeviceMesh& mesh = *ms.mesh;
  auto axesWith = [&mesh](const std::array<Role, 2>& roles, Role role) {
    double n = 1;
    for (int a = 0; a < mesh.axes(); ++a) n *= roles[static_cast<std::size_t>(a)] == role ? static_cast<double>(mesh.axisSize(a)) : 1.0;
    return n;
  };
  bool featureSplit = false;
  double gathered = 0;
  for (std::size_t k = 0; k < sol.layers.size() && k < ms.layers.size(); ++k) {
    const auto& strategies = ms.layers[k]->strategies();
    double weights = 0;
    for (std::size_t u = 0; u < sol.layers[k].units.size(); ++u) {
      const int chosen = sol.layers[k].units[u].strategy;
      if (chosen < 0) continue;
      const Strategy& st = strategies[u][static_cast<std::size_t>(chosen)];
      featureSplit = featureSplit || axesWith(st.role, Role::kOut) > 1 || axesWith(st.role, Role::kIn) > 1;
      weights += st.stateParams * axesWith(st.role, Role::kFsdp);
    }
    // Sharded weights (ZeRO-3's role) are gathered a layer at a time: the largest layer, whole.
    if (weights > 0 && weights > sol.layers[k].params) gathered = std::max(gathered, weights);
  }
  sol.gatheredWeights = gathered * c.weightBytes;
  // Feature-split operators read the sequence gathered (sequence parallelism's all-gather, or the
  // replicated input of tensor parallelism): the evaluator's two full activations, of the micro-batch's
  // share that the batch-split axes leave.
  sol.gatherBuffers = 0;
  sol.dataParallel = false;
  if (!sol.layers.empty()) {
    const Layout entry = sol.layers.front().entry;
    for (int a = 0; a < mesh.axes(); ++a) {
      sol.dataParallel = sol.dataParallel || (entry.use[static_cast<std::size_t>(a)] == AxisUse::kBatch && mesh.axisSize(a) > 1);
    }
  }
  if (featureSplit && !sol.layers.empty()) {
    const Layout entry = sol.layers.front().entry;
    double batchSplit = 1;
    for (int a = 0; a < mesh.axes(); ++a) batchSplit *= entry.use[static_cast<std::size_t>(a)] == AxisUse::kBatch ? static_cast<double>(mesh.axisSize(a)) : 1.0;
    sol.gatherBuffers = 2.0 * static_cast<double>(ms.samples) / batchSplit * static_cast<double>(c.seqLen) * static_cast<double>(c.hidden) *
                        c.weightBytes;
  }
  // The loss keeps the fp32 logits; Megatron's unfused loss also holds their 16-bit copy in its forward
  // and their 16-bit gradient in its backward, one at a time (Plan's default execution; the evaluator's
  // logit copies).
  sol.logitCopies = 0;
  const auto& headUnits = ms.head->block().units;
  for (std::size_t u = 0; u < headUnits.size() && u < sol.head.units.size(); ++u) {
    const int chosen = sol.head.units[u].strategy;
    if (headUnits[u].kind != UnitKind::kLoss || chosen < 0) continue;
    const Strategy& st = ms.head->strategies()[u][static_cast<std::size_t>(chosen)];
    sol.logitCopies += st.ownSaved / 4.0 * c.weightBytes;
  }
  sol.tiedShare = tiedShare(ms, sol);
}

// What the pipeline makes of one solution at one share of activations and weights offloaded: the
// stages that can be slowest, fullest or last to reduce, and the step before their ends (which the
// optimizer states' share changes; finishAssembly).
struct AssemblyMemo::Frame {
  Assembly base;  // its shares of activations and weights, layer split, compute, comm, recompute, offload, bubble
  bool valid = false;
  std::array<Stage, 4> chosen{};
  std::size_t count = 0;
  double slowest = 0, pcie = 0, pipelineCommunicator = 0;
};

namespace {

void pipelineOf(const Context& c, const MeshSolvers& ms, const Solution& sol, std::int64_t pp, std::int64_t microBatches, double alpha,
                std::int64_t vpp, const std::vector<std::int64_t>* fixedStages, double gamma, AssemblyMemo::Frame& f) {
  f.base = Assembly{};
  f.base.alpha = alpha;
  f.base.gamma = gamma;
  f.valid = true;
  const double P = static_cast<double>(pp);
  const double M = static_cast<double>(microBatches);
  const double V = static_cast<double>(std::max<std::int64_t>(1, vpp));
  f.pcie = c.cluster->pcieBytesPerSecond > 0 ? c.cluster->pcieBytesPerSecond : 16e9;
  StageCosts costs(c, sol, alpha, gamma, f.pcie);
  // Layers per stage: the first and last stages give up layers to their embedding and head.
  const std::size_t chunkCount = static_cast<std::size_t>(pp * std::max<std::int64_t>(1, vpp));
  if (fixedStages && fixedStages->size() == chunkCount &&
      std::accumulate(fixedStages->begin(), fixedStages->end(), std::int64_t{0}) == c.numLayers) {
    f.base.stageLayers = *fixedStages;  // a saved or degree-level plan's own split
  } else {
    f.base.stageLayers = stageLayerCounts(c.numLayers, pp, vpp, costs.averageLayerSeconds(), costs.embeddingSeconds(), costs.headSeconds());
  }
  costs.place(f.base.stageLayers, pp);
  // Micro-batches whose activations stage i holds at its peak: 1F1B keeps pp - i; the interleaved
  // schedule's warm-up keeps 2(pp - i - 1) + (v - 1)pp + 1 chunk-micro-batches of 1/v of the stage's
  // layers (Megatron's schedule; Korthikanti et al. 2022: pp(1 + (pp - 1)/(pp v)) on the first stage).
  auto copiesOf = [&](std::int64_t i) {
    const double d = static_cast<double>(i);
    return std::min(V == 1.0 ? P - d : (2.0 * (P - d - 1.0) + (V - 1.0) * P + 1.0) / V, M);
  };
  auto stage = [&](std::int64_t i) { return costs.stage(i, pp, copiesOf(i)); };
  // The stages that can be slowest, fullest or last to reduce: the two ends and, between them, the
  // slowest (the earliest of them) and the one whose layers and micro-batches in flight hold the most.
  // (At most four, kept on the stack: the search assembles millions of candidates.)
  f.count = 0;
  auto keep = [&](const Stage& s) { f.chosen[f.count++] = s; };
  keep(stage(0));
  if (pp > 2) {
    auto [widestSeconds, fullestHeld] = costs.middleKeys(1, copiesOf(1));
    std::int64_t widestAt = 1, fullestAt = 1;
    for (std::int64_t i = 2; i < pp - 1; ++i) {
      const auto [seconds, held] = costs.middleKeys(i, copiesOf(i));
      if (seconds > widestSeconds) std::tie(widestSeconds, widestAt) = std::make_pair(seconds, i);
      if (held > fullestHeld) std::tie(fullestHeld, fullestAt) = std::make_pair(held, i);
    }
    keep(stage(widestAt));
    if (fullestAt != widestAt) keep(stage(fullestAt));
  }
  if (pp > 1) keep(stage(pp - 1));
  const std::span<const Stage> stages(f.chosen.data(), f.count);
  // A micro-batch crosses a stage boundary once per chunk; the bubble is pp - 1 chunks' time.
  const double hop = hopSeconds(c, ms, pp);
  f.slowest = 0;
  for (const auto& s : stages) f.slowest = std::max(f.slowest, s.seconds + V * hop);
  const Stage& critical = *std::max_element(stages.begin(), stages.end(), [](const Stage& x, const Stage& y) {
    return x.seconds < y.seconds;
  });
  f.base.compute = M * critical.compute;
  f.base.comm = M * (critical.comm + V * hop);
  f.base.recompute = M * critical.recompute;
  f.base.offload = M * critical.exposed;
  f.base.bubble = (P - 1.0) * f.slowest / V;
  f.pipelineCommunicator = pipelineCommunicatorBytes(c, ms, pp);
}

// The step ends with the stage last to reduce and update; memory is the fullest stage's.
Assembly finishAssembly(const Context& c, const MeshSolvers& ms, const Solution& sol, std::int64_t microBatches, double beta,
                        const AssemblyMemo::Frame& f) {
  Assembly a = f.base;
  a.beta = beta;
  double tail = 0, peak = 0, device = 0;
  for (std::size_t i = 0; i < f.count; ++i) {
    const StageEnd e = stageEnd(c, ms, ms.lastSync[i], sol, f.chosen[i], beta, a.gamma, f.pcie, f.pipelineCommunicator);
    if (e.sync + e.optimizer > tail) {
      tail = e.sync + e.optimizer;
      a.sync = e.sync;
      a.optimizer = e.optimizer;
    }
    device = std::max(device, e.device);
    if (e.total > peak) {
      peak = e.total;
      a.states = e.state;
      a.activations = e.activations;
      a.buffers = e.buffers;
    }
  }
  a.step = static_cast<double>(microBatches) * f.slowest + a.bubble + tail;
  a.memory = peak;
  a.deviceMemory = device;
  return a;
}

}  // namespace

AssemblyMemo::AssemblyMemo() : m_frame(std::make_unique<Frame>()) {}
AssemblyMemo::~AssemblyMemo() = default;

Assembly AssemblyMemo::operator()(const Context& c, const MeshSolvers& ms, const Solution& sol, std::int64_t pp, std::int64_t microBatches,
                                  double alpha, double beta, std::int64_t vpp, const std::vector<std::int64_t>* fixedStages, double gamma) {
  Frame& f = *m_frame;
  if (!f.valid || f.base.alpha != alpha || f.base.gamma != gamma) pipelineOf(c, ms, sol, pp, microBatches, alpha, vpp, fixedStages, gamma, f);
  return finishAssembly(c, ms, sol, microBatches, beta, f);
}

Assembly assemble(const Context& c, const MeshSolvers& ms, const Solution& sol, std::int64_t pp, std::int64_t microBatches,
                  double alpha, double beta, std::int64_t vpp, const std::vector<std::int64_t>* fixedStages, double gamma) {
  AssemblyMemo::Frame f;
  pipelineOf(c, ms, sol, pp, microBatches, alpha, vpp, fixedStages, gamma, f);
  return finishAssembly(c, ms, sol, microBatches, beta, f);
}

}  // namespace colo::planner::detail
