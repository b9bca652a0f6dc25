// Operator-level auto-parallel search (colo/planner/autoparallel.h): for every pipeline degree, stage
// mesh and micro-batch, the blocks are solved exactly at a sweep of memory prices, and each solution is
// assembled into a step (pipeline, gradient reduction, optimizer, host transfers) under the budget;
// Megatron's split is solved the same way under its rules. docs/autoparallel.md.
#include "colo/planner/autoparallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>

#include "autoparallel_detail.h"
#include "colo/core/units.h"
#include "colo/costmodel/evaluator.h"

namespace colo::planner {
namespace {

using namespace detail;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Per micro-batch figures of one solved block.
struct Figures {
  double seconds = 0, compute = 0, comm = 0, recompute = 0, activation = 0, state = 0, optimizerParams = 0;
  double sync[3] = {0, 0, 0};
};
Figures figuresOf(const BlockPlan& p) {
  Figures f;
  f.compute = p.computeSeconds;
  f.comm = p.commSeconds;
  f.recompute = p.recomputeSeconds;
  f.seconds = f.compute + f.comm + f.recompute;
  f.activation = p.activationBytes;
  f.state = p.stateBytes;
  f.optimizerParams = p.optimizerParams;
  for (int k = 0; k < 3; ++k) f.sync[k] = p.syncBytes[k];
  return f;
}

// Everything solved for one stage mesh and micro-batch.
struct MeshSolvers {
  std::unique_ptr<DeviceMesh> mesh;
  std::unique_ptr<LayoutConverter> converter;
  std::vector<std::unique_ptr<BlockSolver>> layers;  // per layer class
  std::unique_ptr<BlockSolver> embedding, head;
  std::int64_t samples = 1;
};

// One way to run every block, at one interface layout.
struct Solution {
  std::vector<BlockPlan> layers;  // per class, exit converted back to the entry
  std::vector<double> backConversion;  // per class: exit -> entry, forward and backward
  BlockPlan embedding, head;
  double embeddingConversion = 0;
  SolveWeights weights;
  std::string recompute;
  bool megatron = false;
};

struct Context {
  const ClusterSpec* cluster = nullptr;
  costmodel::DeviceModel device;
  AutoParallelOptions options;
  std::int64_t seqLen = 0, hidden = 0, numLayers = 0;
  double budget = 0;
  double stepBytesPerParam = 0;  // optimizer step HBM traffic per parameter
  double flopsPerSample = 0;     // GEMM FLOPs of one sample, forward and backward
  double peakRate = 0;           // FLOP/s a large GEMM reaches
  std::vector<LayerClass> classes;
  Block embedding, head;
};

// The best plan with the layers of `solution` for (pp, micro-batches), with the offload fractions.
struct Assembly {
  double step = kInf, memory = kInf;
  double compute = 0, comm = 0, recompute = 0, bubble = 0, sync = 0, optimizer = 0, offload = 0;
  double states = 0, activations = 0;
  double alpha = 0, beta = 0;
};

Assembly assemble(const Context& c, const MeshSolvers& ms, const Solution& sol, std::int64_t pp, std::int64_t microBatches,
                  double alpha, double beta) {
  Assembly a;
  a.alpha = alpha;
  a.beta = beta;
  const double P = static_cast<double>(pp);
  const double M = static_cast<double>(microBatches);
  const auto& dev = c.device;
  const double pcie = c.cluster->pcieBytesPerSecond > 0 ? c.cluster->pcieBytesPerSecond : 16e9;
  Figures layers;  // one stage's layers, per micro-batch
  double offloadExposed = 0, offloaded = 0;
  for (std::size_t k = 0; k < c.classes.size(); ++k) {
    const double n = static_cast<double>(c.classes[k].layers.size()) / P;
    const Figures f = figuresOf(sol.layers[k]);
    layers.seconds += n * (f.seconds + sol.backConversion[k]);
    layers.compute += n * f.compute;
    layers.comm += n * (f.comm + sol.backConversion[k]);
    layers.recompute += n * f.recompute;
    layers.activation += n * f.activation;
    layers.state += n * f.state;
    layers.optimizerParams += n * f.optimizerParams;
    for (int j = 0; j < 3; ++j) layers.sync[j] += n * f.sync[j];
    // Offloaded activations leave during the layer's forward and return before its backward, hidden
    // behind up to 80% of its kernels.
    const double moved = alpha * f.activation;
    offloaded += n * moved;
    offloadExposed += n * std::max(0.0, 2.0 * moved / pcie - 0.8 * f.compute);
  }
  const Figures emb = figuresOf(sol.embedding);
  const Figures head = figuresOf(sol.head);
  const double embSeconds = emb.seconds + sol.embeddingConversion;
  // Stage figures: the first stage holds the embedding, the last the head (one stage: both).
  struct Stage {
    double seconds, compute, comm, recompute, activation, state, optimizerParams, sync[3], copies;
  };
  auto stage = [&](bool first, bool last) {
    Stage s{};
    s.seconds = layers.seconds + offloadExposed + (first ? embSeconds : 0) + (last ? head.seconds : 0);
    s.compute = layers.compute + (first ? emb.compute : 0) + (last ? head.compute : 0);
    s.comm = layers.comm + (first ? emb.comm + sol.embeddingConversion : 0) + (last ? head.comm : 0);
    s.recompute = layers.recompute + (first ? emb.recompute : 0) + (last ? head.recompute : 0);
    s.activation = layers.activation - offloaded + (first ? emb.activation : 0) + (last ? head.activation : 0);
    s.state = layers.state + (first ? emb.state : 0) + (last ? head.state : 0);
    s.optimizerParams = layers.optimizerParams + (first ? emb.optimizerParams : 0) + (last ? head.optimizerParams : 0);
    for (int j = 0; j < 3; ++j) s.sync[j] = layers.sync[j] + (first ? emb.sync[j] : 0) + (last ? head.sync[j] : 0);
    // 1F1B: the first stage holds pp micro-batches' activations at its peak, the last one.
    s.copies = first ? std::min(P, M) : 1.0;
    return s;
  };
  std::vector<Stage> stages{stage(true, pp == 1)};
  if (pp > 1) stages.push_back(stage(false, true));
  // Activations and their gradients between stages.
  double hop = 0;
  if (pp > 1) {
    Parallelism par;
    par.tp = ms.mesh->size();
    par.pp = pp;
    const auto group = costmodel::placeGroup(*c.cluster, par, costmodel::Dim::kPp);
    const double bytes = static_cast<double>(ms.samples) * static_cast<double>(c.seqLen * c.hidden) * 2.0 /
                         static_cast<double>(ms.mesh->size());
    hop = 2.0 * costmodel::collectiveSeconds(costmodel::Collective::kSendRecv, bytes, group);
  }
  double slowest = 0;
  for (const auto& s : stages) slowest = std::max(slowest, s.seconds + hop);
  const Stage& critical = *std::max_element(stages.begin(), stages.end(), [](const Stage& x, const Stage& y) {
    return x.seconds < y.seconds;
  });
  a.compute = M * critical.compute;
  a.comm = M * (critical.comm + hop);
  a.recompute = M * critical.recompute;
  a.offload = M * offloadExposed;
  a.bubble = (P - 1.0) * slowest;
  const double pipeline = (M + P - 1.0) * slowest;
  // Gradient reductions after the last backward, hidden behind up to 90% of it (as the evaluator's
  // data-parallel tail), the hidden part slowing what it overlaps.
  double tail = 0, peak = 0;
  for (const auto& s : stages) {
    const double C = gradientSyncSeconds(*ms.mesh, s.sync);
    const double cover = 0.9 * (s.seconds * 2.0 / 3.0);
    double exposed = std::max(0.1 * C, C - cover);
    exposed += dev.overlapSlowdown * (C - exposed);
    const double onDevice = s.optimizerParams * (1.0 - beta) * c.stepBytesPerParam / dev.memoryBytesPerSecond;
    const double host = beta * s.optimizerParams;
    const double hostStep = host > 0 ? host / dev.cpuAdamParamsPerSecond + host * 4.0 / pcie : 0.0;
    if (exposed + onDevice + hostStep > tail) {
      tail = exposed + onDevice + hostStep;
      a.sync = exposed;
      a.optimizer = onDevice + hostStep;
    }
    const double state = s.state - beta * s.optimizerParams * 12.0;
    const double acts = s.copies * s.activation;
    // The caching allocator's fragmentation allowance on activations, as the evaluator counts it.
    double total = state + 1.08 * acts + dev.contextBytes;
    // What goes to host memory must fit there: every GPU of a node offloads alike.
    const double hosted = s.copies * offloaded + beta * s.optimizerParams * 12.0;
    if (hosted > 0 && c.cluster->hostMemoryBytes > 0 &&
        hosted * static_cast<double>(c.cluster->gpusPerNode) > 0.9 * c.cluster->hostMemoryBytes) {
      total = kInf;
    }
    if (total > peak) {
      peak = total;
      a.states = state;
      a.activations = 1.08 * acts;
    }
  }
  a.step = pipeline + tail;
  a.memory = peak;
  return a;
}

std::vector<std::vector<std::int64_t>> meshShapes(const ClusterSpec& cluster, std::int64_t gpus) {
  // A 1-D mesh across nodes is a 2-D mesh with every operator using both axes alike: left out there.
  std::vector<std::vector<std::int64_t>> shapes;
  if (gpus <= cluster.gpusPerNode) shapes.push_back({gpus});
  for (std::int64_t inner = 2; inner < gpus && inner <= cluster.gpusPerNode; inner *= 2) {
    if (cluster.gpusPerNode % inner == 0 && gpus % inner == 0) shapes.push_back({gpus / inner, inner});
  }
  if (shapes.empty()) shapes.push_back({gpus});  // one GPU per node: the one axis crosses nodes
  return shapes;
}

std::vector<std::int64_t> microBatchSizes(std::int64_t gbs, std::int64_t gpus, std::int64_t pp, std::int64_t seqLen) {
  // Samples per micro-batch over one stage's mesh: powers of two dividing the global batch, up to four
  // samples per GPU, and giving each GPU at least one 128-row GEMM tile of tokens (below that every
  // product of every layout runs at the tile and wave floor; docs/autoparallel.md). The smallest
  // candidate is always kept.
  std::vector<std::int64_t> out;
  const std::int64_t tokensPerGpu = 128;
  for (std::int64_t b = 1; b <= gbs; b *= 2) {
    if (gbs % b != 0) continue;
    if (gbs / b < pp) break;
    if (b > 4 * gpus) break;
    if (b * seqLen < tokensPerGpu * gpus && !out.empty()) out.clear();
    out.push_back(b);
  }
  return out;
}

std::vector<LayerClass> layerClasses(const OpGraph& graph) {
  std::vector<LayerClass> classes;
  std::map<std::string, std::size_t> bySignature;
  for (std::int64_t l = 0; l < graph.info().numLayers; ++l) {
    std::ostringstream sig;
    for (const auto id : graph.layerOps(l)) {
      const Op& op = graph.op(id);
      sig << static_cast<int>(op.kind) << ',' << static_cast<int>(op.shard) << ',' << op.params << ',' << op.flopsFwd << ';';
    }
    auto [it, inserted] = bySignature.try_emplace(sig.str(), classes.size());
    if (inserted) classes.push_back({makeBlock(graph, l, "layer"), {}});
    classes[it->second].layers.push_back(l);
  }
  return classes;
}

std::string layerRange(const std::vector<std::int64_t>& layers) {
  if (layers.size() == 1) return "layer " + std::to_string(layers[0]);
  bool contiguous = layers.back() - layers.front() + 1 == static_cast<std::int64_t>(layers.size());
  if (contiguous) return "layers " + std::to_string(layers.front()) + "-" + std::to_string(layers.back());
  return std::to_string(layers.size()) + " layers from " + std::to_string(layers.front());
}

class Search {
 public:
  Search(Context context) : m_c(std::move(context)) {}

  Result<AutoParallelResult> run();
  /// Re-costs a stored operator plan: its blocks solved with each unit's strategy and recompute choice
  /// forced, at its price of memory, assembled with its offload fractions.
  Result<OperatorPlan> reproduce(const Json& stored, const std::string& file);
  /// Megatron's split on one mesh with one rule and layer-level recompute mode, assembled as is.
  Result<OperatorPlan> megatronAt(const std::vector<std::int64_t>& shape, const MegatronRule& rule, RecomputeMode mode,
                                  std::int64_t pp, std::int64_t samples);

 private:
  struct Best {
    Assembly assembly;
    const MeshSolvers* solvers = nullptr;
    Solution solution;
    std::int64_t pp = 1, microBatches = 1;
  };
  struct Combo {
    std::int64_t pp = 1;
    std::vector<std::int64_t> shape;
    std::int64_t samples = 1, microBatches = 1;
    double bound = 0;  // seconds no plan of this combination beats
  };
  [[nodiscard]] std::vector<Combo> combos() const;
  bool solveJoint(const Combo& k, MeshSolvers& ms);
  void solveMegatron(const Combo& k, MeshSolvers& ms);
  MeshSolvers& solversFor(const std::vector<std::int64_t>& shape, std::int64_t samples);
  std::vector<Solution> solve(const MeshSolvers& ms, const SolveWeights& weights, const std::string& recompute, bool megatron);
  bool consider(const MeshSolvers& ms, const Solution& sol, std::int64_t pp, std::int64_t microBatches, Best& best,
                Best& leanest, double* fastest = nullptr);
  OperatorPlan report(const Best& best, const std::string& method) const;

  Context m_c;
  std::map<std::pair<std::vector<std::int64_t>, std::int64_t>, std::unique_ptr<MeshSolvers>> m_solvers;
  std::int64_t m_blockSolves = 0, m_candidates = 0;
  std::vector<double> m_lambdas;
  const std::vector<MegatronRule>* m_onlyRules = nullptr;  // megatronAt: the one rule and mode to solve
  RecomputeMode m_onlyMode = RecomputeMode::kNone;
  Best m_joint, m_jointLean, m_megatron, m_megatronLean;
};

MeshSolvers& Search::solversFor(const std::vector<std::int64_t>& shape, std::int64_t samples) {
  auto& slot = m_solvers[{shape, samples}];
  if (slot) return *slot;
  slot = std::make_unique<MeshSolvers>();
  slot->mesh = std::make_unique<DeviceMesh>(*makeMesh(*m_c.cluster, shape));
  slot->converter = std::make_unique<LayoutConverter>(*slot->mesh);
  slot->samples = samples;
  CostContext cc;
  cc.mesh = slot->mesh.get();
  cc.device = m_c.device;
  cc.samples = samples;
  cc.dtypeBytes = 2;
  for (const auto& cls : m_c.classes) slot->layers.push_back(std::make_unique<BlockSolver>(cls.block, cc, *slot->converter));
  slot->embedding = std::make_unique<BlockSolver>(m_c.embedding, cc, *slot->converter);
  slot->head = std::make_unique<BlockSolver>(m_c.head, cc, *slot->converter);
  return *slot;
}

std::vector<Solution> Search::solve(const MeshSolvers& ms, const SolveWeights& weights, const std::string& recompute,
                                    bool megatron) {
  // Every interface layout the residual stream may take.
  std::vector<Layout> entries;
  for (int l = 0; l < kLayouts; ++l) {
    const Layout e = Layout::fromIndex(l);
    // (A residual stream split by features, 2-D tensor parallelism's layout, is left out: each block
    // still may convert to it inside.)
    const bool featureSplit = e.use[0] == AxisUse::kFeature || e.use[1] == AxisUse::kFeature;
    if (!e.partial() && !featureSplit && fits(e, m_c.embedding.input, ms.samples, *ms.mesh)) entries.push_back(e);
  }
  // Per class, per entry: the best plan whose exit converts back to the entry.
  std::map<int, Solution> byEntry;
  for (const Layout e : entries) byEntry[e.index()].layers.resize(m_c.classes.size());
  for (auto& [k, s] : byEntry) s.backConversion.assign(m_c.classes.size(), kInf);
  for (std::size_t k = 0; k < m_c.classes.size(); ++k) {
    ++m_blockSolves;
    for (auto& plan : ms.layers[k]->solve(entries, weights)) {
      auto it = byEntry.find(plan.entry.index());
      if (it == byEntry.end()) continue;
      const TensorDims& dims = m_c.classes[k].block.input;
      const double back = ms.converter->convert(plan.exit, plan.entry, dims, ms.samples).seconds +
                          ms.converter->convert(plan.entry, gradientTarget(plan.exit), dims, ms.samples).seconds;
      Solution& s = it->second;
      const double objective = plan.objective + back;
      if (objective < s.layers[k].objective + s.backConversion[k]) {
        s.layers[k] = plan;
        s.backConversion[k] = back;
      }
    }
  }
  ++m_blockSolves;
  const auto embPlans = ms.embedding->solve({}, weights);
  ++m_blockSolves;
  const auto headPlans = ms.head->solve(entries, weights);
  std::vector<Solution> out;
  for (auto& [index, s] : byEntry) {
    const Layout e = Layout::fromIndex(index);
    bool complete = true;
    for (const auto& p : s.layers) complete = complete && p.valid();
    if (!complete) continue;
    double best = kInf;
    for (const auto& p : embPlans) {
      const TensorDims& dims = m_c.embedding.input;
      const double conv = ms.converter->convert(p.exit, e, dims, ms.samples).seconds +
                          ms.converter->convert(e, gradientTarget(p.exit), dims, ms.samples).seconds;
      if (p.objective + conv < best) {
        best = p.objective + conv;
        s.embedding = p;
        s.embeddingConversion = conv;
      }
    }
    best = kInf;
    for (const auto& p : headPlans) {
      if (p.entry == e && p.objective < best) {
        best = p.objective;
        s.head = p;
      }
    }
    if (!s.embedding.valid() || !s.head.valid()) continue;
    s.weights = weights;
    s.recompute = recompute;
    s.megatron = megatron;
    out.push_back(std::move(s));
  }
  return out;
}

bool Search::consider(const MeshSolvers& ms, const Solution& sol, std::int64_t pp, std::int64_t microBatches, Best& best,
                      Best& leanest, double* fastest) {
  // Without offload first: when that fits, offloading only adds transfers.
  ++m_candidates;
  const Assembly plain = assemble(m_c, ms, sol, pp, microBatches, 0.0, 0.0);
  if (fastest) *fastest = std::min(*fastest, plain.step);
  if (plain.memory < leanest.assembly.memory) leanest = {plain, &ms, sol, pp, microBatches};
  if (plain.memory <= m_c.budget) {
    if (plain.step < best.assembly.step) best = {plain, &ms, sol, pp, microBatches};
    return true;
  }
  const bool offload = m_c.options.allowOffload && !sol.megatron && m_c.cluster->pcieBytesPerSecond > 0;
  if (!offload) return false;
  bool fit = false;
  for (const double alpha : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    for (const double beta : {0.0, 0.25, 0.5, 0.75, 1.0}) {
      if (alpha == 0 && beta == 0) continue;
      ++m_candidates;
      const Assembly a = assemble(m_c, ms, sol, pp, microBatches, alpha, beta);
      if (a.memory < leanest.assembly.memory) leanest = {a, &ms, sol, pp, microBatches};
      if (a.memory > m_c.budget) continue;
      fit = true;
      if (a.step < best.assembly.step) best = {a, &ms, sol, pp, microBatches};
    }
  }
  return fit;
}

std::vector<Search::Combo> Search::combos() const {
  const auto& o = m_c.options;
  const std::int64_t total = m_c.cluster->totalGpus();
  std::vector<std::int64_t> degrees = o.pipelineDegrees;
  if (degrees.empty()) {
    for (std::int64_t pp = 1; pp <= std::min(total, m_c.numLayers); pp *= 2) {
      if (total % pp == 0) degrees.push_back(pp);
    }
  }
  std::vector<Combo> out;
  for (const auto pp : degrees) {
    const std::int64_t gpus = total / pp;
    for (auto& shape : o.meshes.empty() ? meshShapes(*m_c.cluster, gpus) : o.meshes) {
      std::int64_t size = 1;
      for (const auto x : shape) size *= x;
      if (size != gpus) continue;
      for (const auto samples : microBatchSizes(o.globalBatchSize, gpus, pp, m_c.seqLen)) {
        const std::int64_t microBatches = o.globalBatchSize / samples;
        // No plan of this layout beats its GEMMs at the large-GEMM rate with the 1F1B bubble.
        const double bound = static_cast<double>(microBatches + pp - 1) * m_c.flopsPerSample *
                             static_cast<double>(samples) / static_cast<double>(pp * gpus) / m_c.peakRate;
        out.push_back({pp, shape, samples, microBatches, bound});
      }
    }
  }
  // The most promising first, so that the bound prunes the rest.
  std::stable_sort(out.begin(), out.end(), [](const Combo& a, const Combo& b) { return a.bound < b.bound; });
  return out;
}

bool Search::solveJoint(const Combo& k, MeshSolvers& ms) {
  // Free memory first; when that does not fit, the least price on the sweep that fits, by bisection
  // (a higher price never costs less time nor more memory). False when even the highest price does not fit.
  SolveWeights w;
  w.activationCopies = static_cast<double>(std::min(k.pp, k.microBatches));
  w.microBatches = static_cast<double>(k.microBatches);
  double fastest = kInf;  // the quickest assembled step at the probed price, fitting or not
  auto probeAt = [&](double lambda) {
    w.lambda = lambda;
    bool fit = false;
    for (const auto& sol : solve(ms, w, "per operator", false)) {
      fit = consider(ms, sol, k.pp, k.microBatches, m_joint, m_jointLean, &fastest) || fit;
    }
    return fit;
  };
  auto probe = [&](std::size_t i) { return probeAt(m_lambdas[i]); };
  if (probe(0)) return true;
  // Free memory gives this combination's fastest plans: when they are no faster than the best plan
  // found, no price of memory makes them so.
  if (fastest >= m_joint.assembly.step) return true;
  if (!probe(m_lambdas.size() - 1)) return false;
  std::size_t lo = 0, hi = m_lambdas.size() - 1;
  while (hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    (probe(mid) ? hi : lo) = mid;
  }
  // Where this combination holds the best plan, the price is refined between the grid's points (the
  // budget's exact point is usually between them).
  if (m_joint.solvers == &ms && m_joint.pp == k.pp && m_joint.microBatches == k.microBatches) {
    double a = lo == 0 ? m_lambdas[1] / 10.0 : m_lambdas[lo], b = m_lambdas[hi];
    for (int step = 0; step < 4; ++step) {
      const double mid = std::sqrt(a * b);
      (probeAt(mid) ? b : a) = mid;
    }
  }
  return true;
}

void Search::solveMegatron(const Combo& k, MeshSolvers& ms) {
  const auto& classes = m_c.classes;
  SolveWeights w;
  w.activationCopies = static_cast<double>(std::min(k.pp, k.microBatches));
  w.microBatches = static_cast<double>(k.microBatches);
  // Megatron keeps sequence-parallel inputs sharded and gathers them again backward: memory is priced high.
  w.lambda = 1e-11;
  const int axes = ms.mesh->axes();
  for (const auto& rule : m_onlyRules ? *m_onlyRules : megatronRules(axes)) {
    Layout entry;
    if (rule.dpAxis == 2) entry.use = {AxisUse::kBatch, AxisUse::kBatch};
    else if (rule.dpAxis >= 0) entry.use[static_cast<std::size_t>(rule.dpAxis)] = AxisUse::kBatch;
    if (rule.sequenceParallel && rule.tpAxis >= 0) entry.use[static_cast<std::size_t>(rule.tpAxis)] = AxisUse::kSeq;
    if (!fits(entry, m_c.embedding.input, ms.samples, *ms.mesh)) continue;
    for (const auto mode : {RecomputeMode::kNone, RecomputeMode::kSelective, RecomputeMode::kFull}) {
      if (m_onlyRules && mode != m_onlyMode) continue;
      w.recompute = mode;
      const DeviceMesh& mesh = *ms.mesh;
      w.allow = [&rule, &mesh](const Block& block, std::size_t u, const Strategy& st) {
        return megatronAllows(rule, block.units[u], st, mesh);
      };
      auto best = [&](const BlockSolver& solver, const std::vector<Layout>& entries, bool sameExit) {
        ++m_blockSolves;
        BlockPlan chosen;
        for (auto& plan : solver.solve(entries, w)) {
          if ((!sameExit || plan.exit == entry) && plan.objective < chosen.objective) chosen = plan;
        }
        return chosen;
      };
      Solution sol;
      sol.backConversion.assign(classes.size(), 0.0);
      bool ok = true;
      for (std::size_t c = 0; c < classes.size() && ok; ++c) {
        sol.layers.push_back(best(*ms.layers[c], {entry}, true));
        ok = sol.layers.back().valid();
      }
      if (!ok) continue;
      // The embedding's output converts to the layers' layout (a vocabulary-parallel lookup's partial
      // sums are all-reduced, or reduce-scattered under sequence parallelism).
      ++m_blockSolves;
      for (auto& plan : ms.embedding->solve({}, w)) {
        const TensorDims& dims = m_c.embedding.input;
        const double conv = ms.converter->convert(plan.exit, entry, dims, ms.samples).seconds +
                            ms.converter->convert(entry, gradientTarget(plan.exit), dims, ms.samples).seconds;
        if (plan.objective + conv < sol.embedding.objective + sol.embeddingConversion) {
          sol.embedding = plan;
          sol.embeddingConversion = conv;
        }
      }
      sol.head = best(*ms.head, {entry}, false);
      if (!sol.embedding.valid() || !sol.head.valid()) continue;
      sol.weights = w;
      sol.weights.allow = nullptr;
      sol.megatron = true;
      sol.recompute = mode == RecomputeMode::kNone ? "none" : mode == RecomputeMode::kSelective ? "selective" : "full";
      consider(ms, sol, k.pp, k.microBatches, m_megatron, m_megatronLean);
      // Megatron's split is a point of the joint space: the joint solve is never worse than it.
      if (m_c.options.seedWithMegatron) {
        Solution asJoint = sol;
        asJoint.megatron = false;
        consider(ms, asJoint, k.pp, k.microBatches, m_joint, m_jointLean);
      }
    }
  }
}

Result<AutoParallelResult> Search::run() {
  const auto start = std::chrono::steady_clock::now();
  const auto& o = m_c.options;
  const std::int64_t total = m_c.cluster->totalGpus();
  for (const auto pp : o.pipelineDegrees) {
    if (pp <= 0 || total % pp != 0) {
      return fail(Error::badInput("--pp " + std::to_string(pp) + ": does not divide the cluster's " + std::to_string(total) + " GPUs"));
    }
  }
  // Memory prices: none, then a sweep of seconds per byte (a GiB weighs from ~0.1 us to ~10 s).
  m_lambdas = {0.0};
  for (double x = -16.0; x <= -8.0 + 1e-9; x += 1.0) m_lambdas.push_back(std::pow(10.0, x));
  const auto work = combos();
  if (work.empty()) {
    return fail(Error::badInput("--mesh/--pp: no mesh shape and micro-batch cover one pipeline stage of the cluster's " +
                                std::to_string(total) + " GPUs with global batch " + std::to_string(o.globalBatchSize)));
  }
  // (pp, mesh) -> the least micro-batch that does not fit at any price: larger ones need more memory.
  std::map<std::pair<std::int64_t, std::vector<std::int64_t>>, std::int64_t> tooLarge;
  for (std::size_t i = 0; i < work.size(); ++i) {
    const Combo& k = work[i];
    if (o.cancel && o.cancel->cancelled()) break;
    if (o.progress && i % 8 == 0) {
      o.progress->progress(static_cast<double>(i) / static_cast<double>(work.size()),
                           std::to_string(k.pp) + " stages x mesh " + DeviceMesh{k.shape, nullptr}.toString());
    }
    const bool jointCanWin = k.bound < m_joint.assembly.step;
    const bool megatronCanWin = k.bound < m_megatron.assembly.step;
    if (!jointCanWin && !megatronCanWin) continue;
    const auto key = std::make_pair(k.pp, k.shape);
    if (const auto it = tooLarge.find(key); it != tooLarge.end() && k.samples >= it->second) continue;
    MeshSolvers& ms = solversFor(k.shape, k.samples);
    if (jointCanWin && !solveJoint(k, ms)) {
      auto& limit = tooLarge.try_emplace(key, k.samples).first->second;
      limit = std::min(limit, k.samples);
      continue;
    }
    if (megatronCanWin) solveMegatron(k, ms);
  }
  if (o.progress) o.progress->progress(1.0, "done");
  if (!m_joint.solvers) {
    if (o.cancel && o.cancel->cancelled()) return fail(Error{ErrorCode::kInfeasible, {}, {}, "cancelled before any plan was found"});
    std::ostringstream msg;
    msg << "no operator-level plan fits " << formatBytes(m_c.budget) << " per GPU";
    if (m_jointLean.solvers) {
      msg << "; the leanest needs " << formatBytes(m_jointLean.assembly.memory) << " (" << m_jointLean.pp << " stages of mesh "
          << m_jointLean.solvers->mesh->toString() << ", " << m_jointLean.solvers->samples << " samples per micro-batch)";
    }
    return fail(Error{ErrorCode::kInfeasible, {}, {}, msg.str()});
  }
  AutoParallelResult result;
  result.joint = report(m_joint, "joint");
  const Best& mega = m_megatron.solvers ? m_megatron : m_megatronLean;
  if (mega.solvers) result.megatron = report(mega, "megatron");
  result.megatronFits = m_megatron.solvers != nullptr;
  result.blockSolves = m_blockSolves;
  result.candidates = m_candidates;
  for (const auto& [key, ms] : m_solvers) result.conversionsCached += static_cast<std::int64_t>(ms->converter->cached());
  result.solveSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

Result<OperatorPlan> Search::reproduce(const Json& stored, const std::string& file) {
  const std::string where = "/operator_plan";
  auto bad = [&](const std::string& path, const std::string& why) { return fail(Error::badInput(why, file, where + path)); };
  auto number = [&](const Json& j, const char* key) -> std::optional<double> {
    if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
    return j[key].get<double>();
  };
  if (!stored.contains("mesh_shape") || !stored["mesh_shape"].is_array()) return bad("/mesh_shape", "missing or not a list of axis sizes");
  std::vector<std::int64_t> shape;
  for (const auto& v : stored["mesh_shape"]) {
    if (!v.is_number_integer()) return bad("/mesh_shape", "axis sizes must be integers");
    shape.push_back(v.get<std::int64_t>());
  }
  auto mesh = makeMesh(*m_c.cluster, shape, "operator_plan.mesh_shape");
  if (!mesh) return fail(Error::badInput(mesh.error().message, file, where + "/mesh_shape"));
  const auto pp = number(stored, "pipeline_stages");
  const auto samples = number(stored, "micro_batch_size");
  const auto price = number(stored, "memory_price");
  const auto alpha = number(stored, "activation_offload_fraction");
  const auto beta = number(stored, "optimizer_offload_fraction");
  if (!pp || *pp < 1 || m_c.cluster->totalGpus() != static_cast<std::int64_t>(*pp) * mesh->size()) {
    return bad("/pipeline_stages", "stages x the mesh's GPUs must be the cluster's " + std::to_string(m_c.cluster->totalGpus()));
  }
  if (!samples || *samples < 1 || m_c.options.globalBatchSize % static_cast<std::int64_t>(*samples) != 0) {
    return bad("/micro_batch_size", "must divide the global batch " + std::to_string(m_c.options.globalBatchSize));
  }
  if (!price || *price < 0) return bad("/memory_price", "missing or negative");
  if (!alpha || *alpha < 0 || *alpha > 1) return bad("/activation_offload_fraction", "must be in [0, 1]");
  if (!beta || *beta < 0 || *beta > 1) return bad("/optimizer_offload_fraction", "must be in [0, 1]");
  const int interface = stored.contains("interface") && stored["interface"].contains("index") && stored["interface"]["index"].is_number_integer()
                            ? stored["interface"]["index"].get<int>()
                            : -1;
  if (interface < 0 || interface >= kLayouts) return bad("/interface/index", "missing or not a layout index (0-24)");
  const Layout entry = Layout::fromIndex(interface);
  // The stored blocks in order: embedding, each layer class, head.
  const Json& blocks = stored.contains("blocks") ? stored["blocks"] : Json();
  if (!blocks.is_array() || blocks.size() != m_c.classes.size() + 2) {
    return bad("/blocks", "must list the embedding, " + std::to_string(m_c.classes.size()) + " layer block(s) and the head");
  }
  std::vector<const Block*> order{&m_c.embedding};
  for (const auto& cls : m_c.classes) order.push_back(&cls.block);
  order.push_back(&m_c.head);
  std::map<const Block*, std::vector<std::pair<std::array<Role, 2>, int>>> forced;
  for (std::size_t b = 0; b < order.size(); ++b) {
    const Json& units = blocks[b].contains("units") ? blocks[b]["units"] : Json();
    const std::string at = "/blocks/" + std::to_string(b) + "/units";
    if (!units.is_array() || units.size() != order[b]->units.size()) {
      return bad(at, "must list the block's " + std::to_string(order[b]->units.size()) + " operators");
    }
    auto& list = forced[order[b]];
    for (std::size_t u = 0; u < units.size(); ++u) {
      const Json& unit = units[u];
      const std::string here = at + "/" + std::to_string(u);
      if (unit.value("unit", std::string()) != order[b]->units[u].name) {
        return bad(here + "/unit", "expected \"" + order[b]->units[u].name + "\", got \"" + unit.value("unit", std::string()) + "\"");
      }
      std::array<Role, 2> roles{Role::kNone, Role::kNone};
      const Json& names = unit.contains("axis_roles") ? unit["axis_roles"] : Json();
      if (!names.is_array() || static_cast<int>(names.size()) != mesh->axes()) {
        return bad(here + "/axis_roles", "must give one role per mesh axis (" + std::to_string(mesh->axes()) + ")");
      }
      for (std::size_t a = 0; a < names.size(); ++a) {
        if (!names[a].is_string() || !parseRole(names[a].get<std::string>(), roles[a])) {
          return bad(here + "/axis_roles/" + std::to_string(a), "not a role (none, batch, seq, out, in, expert, inner): " + names[a].dump());
        }
      }
      list.push_back({roles, unit.value("recompute", false) ? 1 : 0});
    }
  }
  MeshSolvers& ms = solversFor(shape, static_cast<std::int64_t>(*samples));
  const std::int64_t microBatches = m_c.options.globalBatchSize / static_cast<std::int64_t>(*samples);
  SolveWeights w;
  w.lambda = *price;
  w.activationCopies = static_cast<double>(std::min(static_cast<std::int64_t>(*pp), microBatches));
  w.microBatches = static_cast<double>(microBatches);
  w.allow = [&forced](const Block& block, std::size_t u, const Strategy& st) { return forced.at(&block)[u].first == st.role; };
  w.forceRecompute = [&forced](const Block& block, std::size_t u) { return forced.at(&block)[u].second; };
  Solution sol;
  for (std::size_t k = 0; k < m_c.classes.size(); ++k) {
    BlockPlan chosen;
    double back = 0;
    for (auto& plan : ms.layers[k]->solve({entry}, w)) {
      const TensorDims& dims = m_c.classes[k].block.input;
      const double conv = ms.converter->convert(plan.exit, plan.entry, dims, ms.samples).seconds +
                          ms.converter->convert(plan.entry, gradientTarget(plan.exit), dims, ms.samples).seconds;
      if (plan.objective + conv < chosen.objective + back) {
        chosen = plan;
        back = conv;
      }
    }
    if (!chosen.valid()) return bad("/blocks/" + std::to_string(k + 1), "its operators' strategies do not connect on this mesh and micro-batch");
    sol.layers.push_back(chosen);
    sol.backConversion.push_back(back);
  }
  for (auto& plan : ms.embedding->solve({}, w)) {
    const TensorDims& dims = m_c.embedding.input;
    const double conv = ms.converter->convert(plan.exit, entry, dims, ms.samples).seconds +
                        ms.converter->convert(entry, gradientTarget(plan.exit), dims, ms.samples).seconds;
    if (plan.objective + conv < sol.embedding.objective + sol.embeddingConversion) {
      sol.embedding = plan;
      sol.embeddingConversion = conv;
    }
  }
  for (auto& plan : ms.head->solve({entry}, w)) {
    if (plan.objective < sol.head.objective) sol.head = plan;
  }
  if (!sol.embedding.valid() || !sol.head.valid()) return bad("/blocks", "the embedding's or head's strategies do not connect on this mesh");
  sol.weights = w;
  sol.weights.allow = nullptr;
  sol.weights.forceRecompute = nullptr;
  sol.recompute = stored.value("recompute", std::string("per operator"));
  Best best;
  best.assembly = assemble(m_c, ms, sol, static_cast<std::int64_t>(*pp), microBatches, *alpha, *beta);
  best.solvers = &ms;
  best.solution = sol;
  best.pp = static_cast<std::int64_t>(*pp);
  best.microBatches = microBatches;
  return report(best, stored.value("method", std::string("joint")));
}

Result<OperatorPlan> Search::megatronAt(const std::vector<std::int64_t>& shape, const MegatronRule& rule, RecomputeMode mode,
                                        std::int64_t pp, std::int64_t samples) {
  auto mesh = makeMesh(*m_c.cluster, shape, "plan");
  if (!mesh) return fail(mesh.error());
  const Combo k{pp, shape, samples, m_c.options.globalBatchSize / samples, 0.0};
  MeshSolvers& ms = solversFor(shape, samples);
  // solveMegatron tries every rule and mode; keep the one asked for.
  const std::vector<MegatronRule> only{rule};
  m_onlyRules = &only;
  m_onlyMode = mode;
  solveMegatron(k, ms);
  m_onlyRules = nullptr;
  const Best& chosen = m_megatron.solvers ? m_megatron : m_megatronLean;
  if (!chosen.solvers) return fail(Error::badInput("the plan's split does not apply to its model on mesh " + mesh->toString()));
  return report(chosen, "megatron");
}

OperatorPlan Search::report(const Best& best, const std::string& method) const {
  const Assembly& a = best.assembly;
  OperatorPlan p;
  p.method = method;
  p.mesh = best.solvers->mesh->toString();
  p.pipelineStages = best.pp;
  p.microBatchSize = best.solvers->samples;
  p.microBatches = best.microBatches;
  p.stepSeconds = a.step;
  p.peakMemoryBytes = a.memory;
  p.budgetBytes = m_c.budget;
  p.fits = a.memory <= m_c.budget;
  p.activationOffloadFraction = a.alpha;
  p.optimizerOffloadFraction = a.beta;
  p.recompute = best.solution.recompute;
  p.compute = a.compute;
  p.communication = a.comm;
  p.recomputeSeconds = a.recompute;
  p.bubble = a.bubble;
  p.gradientSync = a.sync;
  p.optimizer = a.optimizer;
  p.offload = a.offload;
  p.stateBytes = a.states;
  p.activationBytes = a.activations;
  p.contextBytes = m_c.device.contextBytes;
  std::vector<SolvedBlock> blocks;
  blocks.push_back({best.solvers->embedding.get(), best.solution.embedding, "embedding", 1, 0});
  for (std::size_t k = 0; k < m_c.classes.size(); ++k) {
    const auto& cls = m_c.classes[k];
    std::string name = layerRange(cls.layers);
    blocks.push_back({best.solvers->layers[k].get(), best.solution.layers[k], name, static_cast<std::int64_t>(cls.layers.size()),
                      a.alpha * best.solution.layers[k].activationBytes});
  }
  blocks.push_back({best.solvers->head.get(), best.solution.head, "head", 1, 0});
  p.blocks = assignments(blocks, *best.solvers->mesh, best.solution.weights);
  const Equivalent eq = expressAs(blocks, *best.solvers->mesh, best.pp, a.alpha);
  p.runnable = eq.runnable;
  p.expressedAs = eq.text;
  p.tp = eq.tp;
  p.dp = eq.dp;
  p.sequenceParallel = eq.sequenceParallel;
  p.recomputePolicy = eq.recompute;
  if (a.beta > 0 && p.runnable) p.expressedAs += ", optimizer offload " + std::to_string(static_cast<int>(a.beta * 100)) + "%";
  p.meshShape = best.solvers->mesh->shape;
  p.memoryPrice = best.solution.weights.lambda;
  const Layout interface = best.solution.layers.front().entry;
  p.interfaceIndex = interface.index();
  p.interfaceLayout = toString(interface, best.solvers->mesh->axes());
  return p;
}

Result<Context> makeContext(const Model& model, const ClusterSpec& cluster, const AutoParallelOptions& options) {
  if (options.globalBatchSize <= 0) return fail(Error::badInput("--gbs: the global batch size must be positive"));
  if (!cluster.gpu.hasPeak(options.precision)) {
    return fail(Error::badInput("--precision " + toString(options.precision) + ": " + cluster.gpu.name + " has no such peak"));
  }
  Context c;
  c.cluster = &cluster;
  c.options = options;
  c.seqLen = options.seqLen > 0 ? options.seqLen : model.defaultSeqLen();
  GraphOptions go;
  go.seqLen = c.seqLen;
  go.batch = 1;
  go.dtypeBytes = options.precision == DType::kFp32 ? 4 : 2;
  auto graph = model.expand(go);
  if (!graph) return fail(graph.error());
  c.hidden = graph->info().hiddenSize;
  c.numLayers = graph->info().numLayers;
  if (c.numLayers <= 0 || c.hidden <= 0) {
    return fail(Error::badInput("the model has no transformer layers with a hidden size to split", model.file));
  }
  c.device = costmodel::deviceModel(cluster.gpu, options.precision);
  c.budget = options.memoryBudgetBytes > 0 ? options.memoryBudgetBytes : options.maxMemoryFraction * cluster.gpu.memoryBytes;
  c.stepBytesPerParam = costmodel::optimizerStepBytes(options.precision);
  for (std::size_t id = 0; id < graph->size(); ++id) {
    const Op& op = graph->op(id);
    if (op.isGemm()) c.flopsPerSample += op.flopsFwd + op.flopsBwd;
  }
  c.peakRate = c.device.peakFlopsPerSecond * c.device.gemmEfficiency * c.device.sustainedClock;
  c.classes = layerClasses(*graph);
  c.embedding = makeBlock(*graph, -1, "embedding");
  c.head = makeBlock(*graph, c.numLayers, "head");
  for (const auto& shape : options.meshes) {
    auto mesh = makeMesh(cluster, shape);
    if (!mesh) return fail(mesh.error());
  }
  return c;
}

}  // namespace

Result<AutoParallelResult> autoParallel(const Model& model, const ClusterSpec& cluster, const AutoParallelOptions& options) {
  auto context = makeContext(model, cluster, options);
  if (!context) return fail(context.error());
  Search search(std::move(*context));
  return search.run();
}

Result<OperatorPlan> evaluateOperatorPlan(const Plan& plan, const std::string& file) {
  if (!plan.operatorPlan.is_object()) return fail(Error::badInput("the plan has no operator_plan (it is a degree-level plan)", file));
  AutoParallelOptions options;
  options.globalBatchSize = plan.globalBatchSize;
  options.seqLen = plan.seqLen;
  options.precision = plan.precision;
  const Json& stored = plan.operatorPlan;
  if (stored.contains("budget_bytes") && stored["budget_bytes"].is_number()) options.memoryBudgetBytes = stored["budget_bytes"].get<double>();
  auto context = makeContext(plan.model, plan.cluster, options);
  if (!context) return fail(Error::badInput(context.error().message, file));
  Search search(std::move(*context));
  return search.reproduce(stored, file);
}

Result<OperatorPlan> operatorView(const Plan& plan, double maxMemoryFraction) {
  const auto& par = plan.parallel;
  auto refuse = [](const std::string& why) { return fail(Error::badInput("no operator view: " + why)); };
  if (plan.operatorPlan.is_object()) return evaluateOperatorPlan(plan);
  if (par.cp > 1) return refuse("context parallelism (cp " + std::to_string(par.cp) + ") is not one of Megatron's operator rules here");
  if (par.ep > 1) return refuse("expert parallelism (ep " + std::to_string(par.ep) + ") beside tp is not modelled per operator");
  if (par.virtualStages > 1 || plan.schedule != Schedule::kOneFOneB) return refuse("the operator view assembles 1F1B pipelines only");
  if (plan.zeroStage >= 2) return refuse("ZeRO-" + std::to_string(plan.zeroStage) + " shards more than the optimizer states");
  AutoParallelOptions options;
  options.globalBatchSize = plan.globalBatchSize;
  options.seqLen = plan.seqLen;
  options.precision = plan.precision;
  options.maxMemoryFraction = maxMemoryFraction;
  options.allowOffload = false;
  auto context = makeContext(plan.model, plan.cluster, options);
  if (!context) return fail(context.error());
  Search search(std::move(*context));
  std::vector<std::int64_t> shape;
  MegatronRule rule;
  if (par.tp > 1 && par.dp > 1) {
    shape = {par.dp, par.tp};
    rule = {1, 0, par.sequenceParallel};
  } else if (par.tp > 1) {
    shape = {par.tp};
    rule = {0, -1, par.sequenceParallel};
  } else {
    shape = {par.dp};
    rule = {-1, 0, false};
  }
  const RecomputePolicy policy = plan.stages.empty() ? RecomputePolicy::kNone : plan.stages.front().recompute;
  const RecomputeMode mode = policy == RecomputePolicy::kFull        ? RecomputeMode::kFull
                             : policy == RecomputePolicy::kSelective ? RecomputeMode::kSelective
                                                                     : RecomputeMode::kNone;
  return search.megatronAt(shape, rule, mode, par.pp, plan.microBatchSize * par.dp);
}

Result<Plan> operatorPlanFile(const Model& model, const ClusterSpec& cluster, const AutoParallelOptions& options,
                              const AutoParallelResult& result) {
  const OperatorPlan& op = result.joint;
  // The degree fields: the plan's own equivalent, else Megatron's split from the same solve.
  const OperatorPlan& degrees = op.runnable ? op : result.megatron;
  if (degrees.mesh.empty()) return fail(Error::badInput("the operator plan has no degree-level form to store beside it"));
  Plan p;
  p.name = model.name() + " per-operator plan";
  p.model = model;
  p.cluster = cluster;
  p.parallel.tp = degrees.tp;
  p.parallel.dp = degrees.dp;
  p.parallel.pp = degrees.pipelineStages;
  p.parallel.sequenceParallel = degrees.sequenceParallel && degrees.tp > 1;
  p.microBatchSize = std::max<std::int64_t>(1, degrees.microBatchSize / std::max<std::int64_t>(1, degrees.dp));
  p.globalBatchSize = options.globalBatchSize;
  p.seqLen = options.seqLen > 0 ? options.seqLen : model.defaultSeqLen();
  p.precision = options.precision;
  p.zeroStage = degrees.dp > 1 ? 1 : 0;
  const RecomputePolicy policy = degrees.recomputePolicy == "full"        ? RecomputePolicy::kFull
                                 : degrees.recomputePolicy == "selective" ? RecomputePolicy::kSelective
                                                                          : RecomputePolicy::kNone;
  p.stages = uniformStages(model.numLayers(), p.parallel.pp, policy);
  if (op.runnable && op.optimizerOffloadFraction > 0) {
    p.zeroStage = std::max(p.zeroStage, 1);
    p.offload.optimizerFraction = op.optimizerOffloadFraction;
  }
  p.predictions.stepTimeSeconds = op.stepSeconds;
  p.predictions.peakMemoryBytes = op.peakMemoryBytes;
  p.predictions.fits = op.fits;
  p.operatorPlan = op.toJson();
  if (auto valid = validatePlan(p); !valid) {
    return fail(Error::badInput("the operator plan's degree-level form is not a valid plan: " + valid.error().message));
  }
  return p;
}

}  // namespace colo::planner
