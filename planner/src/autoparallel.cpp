// Operator-level auto-parallel search (colo/planner/autoparallel.h): for every pipeline degree, stage
// mesh and micro-batch, the blocks are solved exactly at a sweep of memory prices, and each solution is
// assembled into a step (pipeline, gradient reduction, optimizer, host transfers) under the budget;
// Megatron's split is solved the same way under its rules. docs/autoparallel.md.
#include "colo/planner/autoparallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "autoparallel_search.h"
#include "colo/core/runnable.h"
#include "colo/core/units.h"
#include "colo/costmodel/evaluator.h"

namespace colo::planner {
namespace detail {
namespace {

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
  // Samples per micro-batch over one stage's mesh: powers of two dividing the global batch, up to 16K
  // tokens per GPU, and giving each GPU at least one 128-row GEMM tile of tokens (below that every
  // product of every layout runs at the tile and wave floor; docs/autoparallel.md). The smallest
  // candidate is always kept.
  std::vector<std::int64_t> out;
  const std::int64_t tokensPerGpu = 128;
  for (std::int64_t b = 1; b <= gbs; b *= 2) {
    if (gbs % b != 0) continue;
    if (gbs / b < pp) break;
    if (b > 1 && b * seqLen > 16384 * gpus) break;
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

}  // namespace

MeshSolvers& Search::solversFor(const std::vector<std::int64_t>& shape, std::int64_t samples, std::int64_t replicas) {
  auto& slot = m_solvers[{shape, samples, replicas}];
  if (slot) return *slot;
  slot = std::make_unique<MeshSolvers>();
  for (const auto& [key, other] : m_solvers) {
    if (std::get<0>(key) == shape && other && other->mesh) {  // (this slot itself has none yet)
      slot->mesh = other->mesh;
      slot->converter = other->converter;
      break;
    }
  }
  if (!slot->mesh) {
    slot->mesh = std::make_shared<DeviceMesh>(*makeMesh(*m_c.cluster, shape));
    slot->converter = std::make_shared<LayoutConverter>(*slot->mesh);
  }
  slot->samples = samples;
  slot->replicas = replicas;
  CostContext cc;
  cc.mesh = slot->mesh.get();
  cc.device = m_c.device;
  cc.samples = samples;
  cc.dtypeBytes = 2;
  cc.flash = m_c.options.flashAttention;
  cc.mainGradBytes = m_c.gradBufferBytes;
  cc.replicas = replicas;
  for (const auto& cls : m_c.classes) slot->layers.push_back(std::make_unique<BlockSolver>(cls.block, cc, *slot->converter));
  slot->embedding = std::make_unique<BlockSolver>(m_c.embedding, cc, *slot->converter);
  slot->head = std::make_unique<BlockSolver>(m_c.head, cc, *slot->converter);
  slot->communicatorBytes = meshCommunicatorBytes(m_c, *slot);
  for (std::size_t k = 0; k < m_c.classes.size(); ++k) {
    double least = 0;
    for (const auto& options : slot->layers[k]->strategies()) {
      double fastest = kInf;
      for (const auto& st : options) fastest = std::min(fastest, st.fwd + st.bwd + st.commFwd + st.commBwd);
      least += fastest;
    }
    slot->leastLayerSeconds += least * static_cast<double>(m_c.classes[k].layers.size()) / static_cast<double>(m_c.numLayers);
  }
  return *slot;
}

std::vector<Layout> Search::entryLayouts(const MeshSolvers& ms) const {
  // Every interface layout the residual stream may take.
  std::vector<Layout> entries;
  for (int l = 0; l < kLayouts; ++l) {
    const Layout e = Layout::fromIndex(l);
    // (A residual stream split by features, 2-D tensor parallelism's layout, is left out: each block
    // still may convert to it inside.)
    const bool featureSplit = e.use[0] == AxisUse::kFeature || e.use[1] == AxisUse::kFeature;
    if (!e.partial() && !featureSplit && fits(e, m_c.embedding.input, ms.samples, *ms.mesh)) entries.push_back(e);
  }
  return entries;
}

std::vector<Solution> Search::solve(const MeshSolvers& ms, const SolveWeights& weights, const std::string& recompute,
                                    bool megatron) {
  const std::vector<Layout> entries = entryLayouts(ms);
  // Per class, per entry: the best plan whose exit converts back to the entry.
  std::map<int, Solution> byEntry;
  for (const Layout e : entries) byEntry[e.index()].layers.resize(m_c.classes.size());
  for (auto& [k, s] : byEntry) s.backConversion.assign(m_c.classes.size(), kInf);
  for (std::size_t k = 0; k < m_c.classes.size(); ++k) {
    ++m_blockSolves;
    for (auto& plan : ms.layers[k]->solve(entries, weights, backToEntry(ms, k))) {
      auto it = byEntry.find(plan.entry.index());
      if (it == byEntry.end()) continue;
      const double back = boundarySeconds(ms, plan.exit, plan.entry, m_c.classes[k].block.input);
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
  const auto headPlans = ms.head->solve(entries, weights, anyExit);
  std::vector<Solution> out;
  for (auto& [index, s] : byEntry) {
    const Layout e = Layout::fromIndex(index);
    bool complete = true;
    for (const auto& p : s.layers) complete = complete && p.valid();
    if (!complete) continue;
    chooseEmbedding(embPlans, ms, e, s);
    double best = kInf;
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
    measureBuffers(m_c, ms, s);
    out.push_back(std::move(s));
  }
  return out;
}

// One solution of one combination at one chunk count, assembled with any offload fractions; every
// assembly counts as a candidate and may be the leanest.
struct Search::Assembler {
  Search& search;
  const MeshSolvers& ms;
  const Solution& sol;
  const Combo& k;
  std::int64_t vpp;
  Best& leanest;
  mutable AssemblyMemo memo{};  // (the offload grid's shares of optimizer states share a pipeline)
  Assembly operator()(double alpha, double beta, double gamma = 0.0) const {
    ++search.m_candidates;
    const auto* fixed = search.m_fixedStages.empty() ? nullptr : &search.m_fixedStages;
    Assembly a = memo(search.m_c, ms, sol, k.pp, k.microBatches, alpha, beta, vpp, fixed, gamma);
    if (a.memory < leanest.assembly.memory) leanest = as(a);
    return a;
  }
  [[nodiscard]] Best as(const Assembly& a) const { return {a, &ms, sol, k.pp, k.microBatches, vpp, k.replicas}; }
};

bool Search::consider(const MeshSolvers& ms, const Solution& sol, const Combo& k, Best& best, Best& leanest, double* fastest) {
  bool fit = false;
  const auto& wanted = m_onlyChunks.empty() ? m_c.options.virtualStages : m_onlyChunks;
  for (const std::int64_t vpp : chunkCounts(wanted, m_c.numLayers, k.pp, k.microBatches)) {
    const Assembler at{*this, ms, sol, k, vpp, leanest};
    // Without offload first: when that fits, offloading only adds transfers.
    const Assembly plain = at(0.0, 0.0);
    if (fastest) *fastest = std::min(*fastest, plain.step);
    if (plain.memory <= m_c.budget) {
      if (plain.step < best.assembly.step) best = at.as(plain);
      fit = true;
      continue;
    }
    const bool offload = m_c.options.allowOffload && !sol.megatron && m_c.cluster->pcieBytesPerSecond > 0;
    if (offload) fit = offloadShares(at, plain, best) || fit;
  }
  return fit;
}

bool Search::offloadShares(const Assembler& at, const Assembly& plain, Best& best) {
  bool fit = false;
  const bool weights = m_c.options.allowWeightOffload;
  bool weightsCanFit = weights;  // (decided on the first share that needs them)
  bool weightsChecked = false;
  for (const double alpha : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    for (const double beta : {0.0, 0.25, 0.5, 0.75, 1.0}) {
      const Assembly a = alpha == 0 && beta == 0 ? plain : at(alpha, beta);
      if (a.memory <= m_c.budget) {
        fit = true;
        if (a.step < best.assembly.step) best = at.as(a);
        continue;
      }
      if (!weightsCanFit) continue;
      // Offloading only adds time: from an assembly no faster than the best plan, no share makes one
      // (unless the price bisection asks whether any share fits, and no probe has said so yet).
      if (a.step >= best.assembly.step && !(m_askWeightsFit && !m_weightsOffloadedFit)) continue;
      if (!weightsChecked) {
        // Everything offloaded holds the least on the GPU: when even that does not fit the GPU, no
        // weight share helps (the host's limit is checked per share: more offload can overflow it).
        weightsChecked = true;
        weightsCanFit = at(1.0, 1.0, 1.0).deviceMemory <= m_c.budget;
        if (!weightsCanFit) continue;
      }
      // The layers' weights too, where the activations' and optimizer's shares do not fit: GPU memory
      // falls and time grows with their share, so the least quarter that fits (host memory permitting)
      // is the quickest with these shares. All of them first: when that does not fit the GPU, none does.
      const Assembly all = at(alpha, beta, 1.0);
      if (all.deviceMemory > m_c.budget) continue;
      for (const double gamma : {0.25, 0.5, 0.75, 1.0}) {
        const Assembly w = gamma == 1.0 ? all : at(alpha, beta, gamma);
        if (w.memory > m_c.budget) continue;
        m_weightsOffloadedFit = true;
        if (w.step < best.assembly.step) best = at.as(w);
        break;
      }
    }
  }
  return fit;
}

std::vector<std::int64_t> Search::replicaCounts(std::int64_t pp) const {
  if (!m_c.options.replicas.empty()) return m_c.options.replicas;
  // Every power of two the stage's GPUs take: searchesReplicas() picks the meshes each may copy.
  const std::int64_t gpus = m_c.cluster->totalGpus() / pp;
  std::vector<std::int64_t> out;
  for (std::int64_t r = 1; r <= gpus && gpus % r == 0; r *= 2) out.push_back(r);
  return out;
}

std::vector<Search::Combo> Search::combos() {
  const auto& o = m_c.options;
  const std::int64_t total = m_c.cluster->totalGpus();
  std::vector<std::int64_t> degrees = o.pipelineDegrees;
  if (degrees.empty()) {
    for (std::int64_t pp = 1; pp <= total && !stagesRule(m_c.numLayers, pp); pp *= 2) {
      if (total % pp == 0) degrees.push_back(pp);
    }
  }
  std::vector<Combo> out;
  auto prune = [this](const char* rule) {
    ++m_stats.generated;
    ++m_stats.pruned[rule];
  };
  for (const auto pp : degrees) {
    for (const auto r : replicaCounts(pp)) {
      if (r < 1 || (total / pp) % r != 0 || o.globalBatchSize % r != 0) {
        prune("copies of the mesh do not divide the stage's GPUs or the global batch");
        continue;
      }
      const std::int64_t gpus = total / (pp * r);  // one replica's mesh
      const std::int64_t batch = o.globalBatchSize / r;
      for (auto& shape : o.meshes.empty() ? meshShapes(*m_c.cluster, gpus) : o.meshes) {
        std::int64_t size = 1;
        for (const auto x : shape) size *= x;
        if (size != gpus) {
          prune("--mesh does not cover one copy of a stage");
          continue;
        }
        if (o.replicas.empty() && !searchesReplicas(*m_c.cluster, pp, shape, r)) {
          // (counted per micro-batch, as the layouts that are generated)
          for (std::size_t i = microBatchSizes(batch, gpus, pp, m_c.seqLen).size(); i > 0; --i) {
            prune("copies of a mesh other than 2 to 8 whole nodes, or below 32 nodes (--replicas asks)");
          }
          continue;
        }
        for (const auto samples : microBatchSizes(batch, gpus, pp, m_c.seqLen)) {
          const std::int64_t microBatches = batch / samples;
          // No plan of this layout beats its GEMMs at the large-GEMM rate with the smallest bubble its
          // chunk counts allow.
          const auto chunks = chunkCounts(o.virtualStages, m_c.numLayers, pp, microBatches);
          if (chunks.empty()) {
            prune("no chunk count asked for (--vpp) divides the layers with micro-batches in groups of the stages");
            continue;
          }
          ++m_stats.generated;
          const double most = static_cast<double>(*std::max_element(chunks.begin(), chunks.end()));
          const double slots = static_cast<double>(microBatches) + static_cast<double>(pp - 1) / most;
          const double bound = slots * m_c.flopsPerSample * static_cast<double>(samples) / static_cast<double>(pp * gpus) / m_c.peakRate;
          out.push_back({pp, shape, samples, microBatches, bound, slots, r});
        }
      }
    }
  }
  // The most promising first, so that the bound prunes the rest.
  std::stable_sort(out.begin(), out.end(), [](const Combo& a, const Combo& b) { return a.bound < b.bound; });
  return out;
}

bool Search::solveJoint(const Combo& k, MeshSolvers& ms, bool& fitted) {
  // Free memory first; when that does not fit, the least price on the sweep that fits, by bisection
  // (a higher price never costs less time nor more memory, offload aside: laterAtHigherPrices). False when
  // even the highest price does not fit.
  double fastest = kInf;  // the quickest assembled step at free memory, fitting or not
  Best mine;              // this combination's best fitting plan
  std::vector<char> probed(m_lambdas.size(), 0);
  auto probe = [&](std::size_t i, double* quickest) {
    probed[i] = 1;
    const bool fits = probeJoint(k, ms, m_lambdas[i], mine, quickest);
    fitted = fitted || mine.solvers != nullptr;  // (weights offloaded included)
    return fits;
  };
  if (probe(0, &fastest)) {
    laterAtHigherPrices(k, mine, 1, fastest);
    return true;
  }
  // Free memory gives this combination's fastest plans: when they are no faster than the best plan
  // found, no price of memory makes them so.
  if (fastest >= m_joint.assembly.step) return true;
  // The highest price is probed (does anything fit?) only once a middle one has not fitted: most
  // combinations fit at a middle price, and bisection needs no more.
  const std::size_t highest = m_lambdas.size() - 1;
  std::size_t lo = 0, hi = highest;
  bool fitsAtHi = false;
  double quickestAtHi = kInf;  // fitting or not, without offload
  while (hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    double quickest = kInf;
    if (probe(mid, &quickest)) {
      hi = mid;
      fitsAtHi = true;
      quickestAtHi = quickest;
      continue;
    }
    lo = mid;
    // What fits needs a price above this one, where no plan is quicker: when the quickest here cannot
    // beat the best plan found, nothing of this combination can.
    if (quickest >= m_joint.assembly.step) return true;
    if (!fitsAtHi) {
      m_askWeightsFit = true;
      const bool fits = probe(highest, nullptr);
      m_askWeightsFit = false;
      if (!fits) {
        if (!m_weightsOffloadedFit) return false;
        // Only offloading weights fits. Less memory at a higher price means a smaller share to fetch,
        // so the least fitting price is not the quickest: every price of the grid is tried.
        for (std::size_t i = 1; i < highest; ++i) {
          if (!probed[i]) probe(i, nullptr);
        }
        return true;
      }
      fitsAtHi = true;
    }
  }
  // The budget's exact point is usually between the grid's prices: the best combinations are refined
  // there once all are known (run()).
  m_brackets.push_back({k, lo == 0 ? m_lambdas[1] / 10.0 : m_lambdas[lo], m_lambdas[hi], mine.assembly.step});
  laterAtHigherPrices(k, mine, hi + 1, quickestAtHi);
  return true;
}

bool Search::probeJoint(const Combo& k, MeshSolvers& ms, double lambda, Best& mine, double* fastest) {
  SolveWeights w;
  w.activationCopies = static_cast<double>(std::min(k.pp, k.microBatches));
  w.microBatches = static_cast<double>(k.microBatches);
  w.lambda = lambda;
  bool fit = false;
  m_weightsOffloadedFit = false;
  for (const auto& sol : solve(ms, w, "per operator", false)) {
    fit = consider(ms, sol, k, mine, m_jointLean, fastest) || fit;
  }
  if (mine.solvers && mine.assembly.step < m_joint.assembly.step) m_joint = mine;
  return fit;
}

// With offload, the least price of memory that fits is not always the quickest: a higher price (more
// recompute, fewer kept activations) leaves less to send to the host, and a smaller share of the weights
// or optimizer states there can save more time than the recompute costs. A combination whose best plan
// offloads is noted here and its higher prices are tried once the search is done (offloadAtHigherPrices),
// so the search's pruning, which the best plan so far drives, is as without them. `quickest` is the
// quickest plan without offload at the price below `from`, fitting or not: no plan at a higher price is
// quicker.
void Search::laterAtHigherPrices(const Combo& k, const Best& mine, std::size_t from, double quickest) {
  const Assembly& a = mine.assembly;
  if (!mine.solvers || (a.alpha == 0 && a.beta == 0 && a.gamma == 0) || from >= m_lambdas.size()) return;
  m_offloaded.push_back({k, from, quickest});
}

void Search::offloadAtHigherPrices() {
  for (const auto& [k, from, bound] : m_offloaded) {
    if (bound >= m_joint.assembly.step) continue;
    MeshSolvers& ms = solversFor(k.shape, k.samples, k.replicas);
    Best mine;
    // Up the grid until the quickest plan without offload at a price (a bound on every share there,
    // growing with the price) is no quicker than the best plan found.
    for (std::size_t i = from; i < m_lambdas.size(); ++i) {
      if (m_c.options.cancel && m_c.options.cancel->cancelled()) return;
      double quickest = kInf;
      probeJoint(k, ms, m_lambdas[i], mine, &quickest);
      if (quickest >= m_joint.assembly.step) break;
    }
  }
}

void Search::refineBest() {
  // The three combinations with the fastest fitting plans, each refined by four bisections of the price
  // between the grid points that bracket its budget.
  std::sort(m_brackets.begin(), m_brackets.end(), [](const Bracket& a, const Bracket& b) { return a.step < b.step; });
  for (std::size_t i = 0; i < m_brackets.size() && i < 3; ++i) {
    Bracket& br = m_brackets[i];
    MeshSolvers& ms = solversFor(br.combo.shape, br.combo.samples, br.combo.replicas);
    Best mine;
    for (int step = 0; step < 4; ++step) {
      const double mid = std::sqrt(br.fails * br.fits);
      (probeJoint(br.combo, ms, mid, mine, nullptr) ? br.fits : br.fails) = mid;
    }
  }
}

bool Search::solveMegatron(const Combo& k, MeshSolvers& ms) {
  bool fitted = false;
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
    if (rule.cpAxis >= 0) entry.use[static_cast<std::size_t>(rule.cpAxis)] = AxisUse::kSeq;
    if (!fits(entry, m_c.embedding.input, ms.samples, *ms.mesh)) continue;
    for (const auto mode : {RecomputeMode::kNone, RecomputeMode::kSelective, RecomputeMode::kFull}) {
      if (m_onlyRules && mode != m_onlyMode) continue;
      w.recompute = mode;
      const DeviceMesh& mesh = *ms.mesh;
      w.allow = [&rule, &mesh](const Block& block, std::size_t u, const Strategy& st) {
        return megatronAllows(rule, block.units[u], st, mesh);
      };
      Solution sol;
      sol.backConversion.assign(classes.size(), 0.0);
      bool ok = true;
      for (std::size_t c = 0; c < classes.size() && ok; ++c) {
        // A layer's exit goes back to the residual stream's layout (a MoE block under tp ends in partial
        // sums, reduced as Megatron-Core's combine does; a dense layer ends in it already).
        ++m_blockSolves;
        BlockPlan chosen;
        double back = 0;
        for (auto& plan : ms.layers[c]->solve({entry}, w, backToEntry(ms, c))) {
          const double conversion = boundarySeconds(ms, plan.exit, entry, classes[c].block.input);
          if (plan.objective + conversion < chosen.objective + back) {
            chosen = plan;
            back = conversion;
          }
        }
        sol.layers.push_back(chosen);
        sol.backConversion[c] = back;
        ok = chosen.valid();
      }
      if (!ok) continue;
      // The embedding's output converts to the layers' layout (a vocabulary-parallel lookup's partial
      // sums are all-reduced, or reduce-scattered under sequence parallelism).
      ++m_blockSolves;
      chooseEmbedding(ms.embedding->solve({}, w), ms, entry, sol);
      ++m_blockSolves;
      for (auto& plan : ms.head->solve({entry}, w, anyExit)) {
        if (plan.objective < sol.head.objective) sol.head = plan;
      }
      if (!sol.embedding.valid() || !sol.head.valid()) continue;
      sol.weights = w;
      sol.weights.allow = nullptr;
      sol.megatron = true;
      measureBuffers(m_c, ms, sol);
      sol.recompute = mode == RecomputeMode::kNone ? "none" : mode == RecomputeMode::kSelective ? "selective" : "full";
      fitted = consider(ms, sol, k, m_megatron, m_megatronLean) || fitted;
      // Megatron's split is a point of the joint space: the joint solve is never worse than it.
      if (m_c.options.seedWithMegatron) {
        Solution asJoint = sol;
        asJoint.megatron = false;
        consider(ms, asJoint, k, m_joint, m_jointLean);
      }
    }
  }
  return fitted;
}

Result<AutoParallelResult> Search::run() {
  const auto start = std::chrono::steady_clock::now();
  const auto& o = m_c.options;
  const std::int64_t total = m_c.cluster->totalGpus();
  for (const auto pp : o.pipelineDegrees) {
    if (pp <= 0 || total % pp != 0) {
      return fail(Error::badInput("--pp " + std::to_string(pp) + ": does not divide the cluster's " + std::to_string(total) + " GPUs"));
    }
    if (stagesRule(m_c.numLayers, pp)) {
      return fail(Error::badInput("--pp " + std::to_string(pp) + ": more pipeline stages than the model's " +
                                  std::to_string(m_c.numLayers) + " layers (every stage holds at least one)"));
    }
  }
  // Memory prices: none, then a sweep of seconds per byte (a GiB weighs from ~0.1 us to ~10 s).
  m_lambdas = {0.0};
  for (double x = -16.0; x <= -8.0 + 1e-9; x += 1.0) m_lambdas.push_back(std::pow(10.0, x));
  const auto work = combos();
  if (work.empty()) {
    return fail(Error::badInput(std::string(o.virtualStages.empty() ? "--mesh/--pp" : "--mesh/--pp/--vpp") +
                                ": no mesh shape and micro-batch cover one pipeline stage of the cluster's " + std::to_string(total) +
                                " GPUs with global batch " + std::to_string(o.globalBatchSize) +
                                (o.virtualStages.empty() ? "" : " in chunks that divide the " + std::to_string(m_c.numLayers) +
                                                                   " layers (with micro-batches in groups of the stages)")));
  }
  // (pp, replicas, mesh) -> the least micro-batch that does not fit at any price: larger ones need more memory.
  std::map<std::tuple<std::int64_t, std::int64_t, std::vector<std::int64_t>>, std::int64_t> tooLarge;
  for (std::size_t i = 0; i < work.size(); ++i) {
    const Combo& k = work[i];
    if (o.cancel && o.cancel->cancelled()) break;
    if (o.progress && i % 8 == 0) {
      o.progress->progress(static_cast<double>(i) / static_cast<double>(work.size()),
                           std::to_string(k.pp) + " stages x mesh " + DeviceMesh{k.shape, nullptr, {}}.toString() +
                               (k.replicas > 1 ? " x " + std::to_string(k.replicas) + " replicas" : ""));
    }
    const bool jointCanWin = k.bound < m_joint.assembly.step;
    // Megatron's split on replicas is its split on the wider mesh with more data parallelism: the search
    // solves it on the meshes alone, unless the replicas were asked for.
    const bool megatronCanWin = (k.replicas == 1 || !o.replicas.empty()) && k.bound < m_megatron.assembly.step;
    if (!jointCanWin && !megatronCanWin) {
      ++m_stats.pruned["bound: its GEMMs at the large-GEMM rate are no faster than the best plan"];
      continue;
    }
    const auto key = std::make_tuple(k.pp, k.replicas, k.shape);
    if (const auto it = tooLarge.find(key); it != tooLarge.end() && k.samples >= it->second) {
      ++m_stats.pruned["dominated: a smaller micro-batch on this layout does not fit at any price of memory"];
      continue;
    }
    MeshSolvers& ms = solversFor(k.shape, k.samples, k.replicas);
    // The mesh's own kernels bound the step tighter: the slowest stage holds at least the average share
    // of layers, each no quicker than its fastest strategies.
    const double kernels = k.slots * static_cast<double>(m_c.numLayers) / static_cast<double>(k.pp) * ms.leastLayerSeconds;
    const bool jointMay = jointCanWin && kernels < m_joint.assembly.step;
    const bool megatronMay = megatronCanWin && kernels < m_megatron.assembly.step;
    if (!jointMay && !megatronMay) {
      ++m_stats.pruned["bound: the mesh's fastest kernels are no faster than the best plan"];
      continue;
    }
    ++m_stats.costed;
    bool fitted = false;  // a plan of this layout fits (the joint solve's, else Megatron's)
    if (jointMay && !solveJoint(k, ms, fitted)) {
      auto& limit = tooLarge.try_emplace(key, k.samples).first->second;
      limit = std::min(limit, k.samples);
      continue;
    }
    if (megatronMay) fitted = solveMegatron(k, ms) || fitted;
    m_stats.feasible += fitted ? 1 : 0;
  }
  if (!(o.cancel && o.cancel->cancelled())) refineBest();
  offloadAtHigherPrices();
  if (o.progress) o.progress->progress(1.0, "done");
  if (!m_joint.solvers) {
    if (o.cancel && o.cancel->cancelled()) return fail(Error{ErrorCode::kInfeasible, {}, {}, "cancelled before any plan was found"});
    std::ostringstream msg;
    msg << "no operator-level plan fits " << formatBytes(m_c.budget) << " per GPU";
    if (m_jointLean.solvers) {
      const auto plural = [](std::int64_t n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); };
      msg << "; the leanest needs " << formatBytes(m_jointLean.assembly.memory) << " (" << plural(m_jointLean.pp, "stage") << " of mesh "
          << m_jointLean.solvers->mesh->toString()
          << (m_jointLean.replicas > 1 ? " x " + std::to_string(m_jointLean.replicas) + " replicas" : "") << ", "
          << plural(m_jointLean.solvers->samples, "sample") << " per micro-batch)";
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
  result.stats = m_stats;
  result.stats.evaluated = m_candidates;
  std::set<const LayoutConverter*> converters;
  for (const auto& [key, ms] : m_solvers) {
    if (converters.insert(ms->converter.get()).second) result.conversionsCached += static_cast<std::int64_t>(ms->converter->cached());
  }
  result.solveSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.stats.seconds = result.solveSeconds;
  return result;
}

double Search::boundarySeconds(const MeshSolvers& ms, Layout exit, Layout entry, const TensorDims& dims) const {
  return ms.converter->convert(exit, entry, dims, ms.samples).seconds +
         ms.converter->convert(entry, gradientTarget(exit), dims, ms.samples).seconds;
}

void Search::chooseEmbedding(const std::vector<BlockPlan>& plans, const MeshSolvers& ms, Layout entry, Solution& sol) const {
  for (const auto& plan : plans) {
    const double conv = boundarySeconds(ms, plan.exit, entry, m_c.embedding.input);
    if (plan.objective + conv < sol.embedding.objective + sol.embeddingConversion) {
      sol.embedding = plan;
      sol.embeddingConversion = conv;
    }
  }
}

OperatorPlan Search::report(const Best& best, const std::string& method) const {
  const Assembly& a = best.assembly;
  OperatorPlan p;
  p.method = method;
  p.mesh = best.solvers->mesh->toString();
  p.replicas = best.replicas;
  p.pipelineStages = best.pp;
  p.virtualStages = best.vpp;
  p.stageLayers = a.stageLayers;
  p.microBatchSize = best.solvers->samples;
  p.microBatches = best.microBatches;
  p.stepSeconds = a.step;
  p.peakMemoryBytes = a.memory;
  p.budgetBytes = m_c.budget;
  p.fits = a.memory <= m_c.budget;
  p.activationOffloadFraction = a.alpha;
  p.optimizerOffloadFraction = a.beta;
  p.weightOffloadFraction = a.gamma;
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
  p.bufferBytes = a.buffers;
  std::vector<SolvedBlock> blocks;
  blocks.push_back({best.solvers->embedding.get(), best.solution.embedding, "embedding", 1, 0});
  for (std::size_t k = 0; k < m_c.classes.size(); ++k) {
    const auto& cls = m_c.classes[k];
    std::string name = layerRange(cls.layers);
    blocks.push_back({best.solvers->layers[k].get(), best.solution.layers[k], name, static_cast<std::int64_t>(cls.layers.size()),
                      a.alpha * best.solution.layers[k].activationBytes});
  }
  blocks.push_back({best.solvers->head.get(), best.solution.head, "head", 1, 0});
  p.blocks = assignments(blocks, *best.solvers->mesh, best.solution.weights, best.replicas);
  // On one stage a tied head that splits the embedding's weight alike holds no copy of its own.
  if (best.pp == 1 && best.solution.tiedShare > 0) {
    const auto& headUnits = best.solvers->head->block().units;
    for (std::size_t u = 0; u < headUnits.size() && u < p.blocks.back().units.size(); ++u) {
      const Unit& unit = headUnits[u];
      if (unit.tiedParams > 0) p.blocks.back().units[u].stateBytes *= unit.params / (unit.params + unit.tiedParams);
    }
  }
  const Equivalent eq = expressAs(blocks, *best.solvers->mesh, best.pp, a.alpha, a.gamma, best.replicas);
  p.runnable = eq.runnable;
  p.expressedAs = eq.text;
  p.tp = eq.tp;
  p.cp = eq.cp;
  p.zeroStage = eq.zeroStage;
  p.dp = eq.dp;
  p.ep = eq.ep;
  p.sequenceParallel = eq.sequenceParallel;
  p.recomputePolicy = eq.recompute;
  if (a.beta > 0 && p.runnable) p.expressedAs += ", optimizer offload " + std::to_string(static_cast<int>(a.beta * 100)) + "%";
  if (p.runnable) {
    // Its degree-level form, checked against colo-run's own capability list (the one the executor
    // checks): the degrees stay, only the verdict changes.
    auto form = degreeForm(*m_c.model, *m_c.cluster, m_c.options, p);
    const auto ok = form ? checkRunnable(*form) : Result<void>(fail(form.error()));
    if (!ok) {
      p.runnable = false;
      p.expressedAs = "simulation-only: " + ok.error().message + " (as " + p.expressedAs + ")";
    }
  }
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
  c.model = &model;
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
  c.device = costmodel::deviceModel(cluster.gpu, options.precision, options.flashAttention && options.flashAttention2);
  // A budget above the GPU's memory would call plans that cannot run "fits".
  if (options.memoryBudgetBytes > cluster.gpu.memoryBytes) {
    return fail(Error::badInput("the memory budget, " + formatBytes(options.memoryBudgetBytes) + ", is more than the " +
                                cluster.gpu.name + "'s " + formatBytes(cluster.gpu.memoryBytes)));
  }
  c.budget = options.memoryBudgetBytes > 0 ? options.memoryBudgetBytes : options.maxMemoryFraction * cluster.gpu.memoryBytes;
  c.stepBytesPerParam = costmodel::optimizerStepBytes(options.precision);
  c.gradBufferBytes = options.precision == DType::kFp16 ? 2.0 : 4.0;  // as the evaluator's Megatron buffer
  c.gradientBytes = 2.0;  // as the mesh's own reductions move them (CostContext::dtypeBytes)
  for (std::size_t id = 0; id < graph->size(); ++id) {
    const Op& op = graph->op(id);
    if (op.isGemm()) c.flopsPerSample += op.flopsFwd + op.flopsBwd;
  }
  c.peakRate = c.device.peakFlopsPerSecond * c.device.gemmEfficiency * c.device.sustainedClock;
  c.hostSecondsPerOp = c.device.hostIssued ? options.hostMicrosecondsPerOp * 1e-6 : 0.0;
  c.classes = layerClasses(*graph);
  c.classesBefore.assign(c.classes.size(), std::vector<std::int64_t>(static_cast<std::size_t>(c.numLayers) + 1, 0));
  for (std::size_t k = 0; k < c.classes.size(); ++k) {
    for (const auto l : c.classes[k].layers) ++c.classesBefore[k][static_cast<std::size_t>(l) + 1];
    for (std::size_t l = 1; l < c.classesBefore[k].size(); ++l) c.classesBefore[k][l] += c.classesBefore[k][l - 1];
  }
  c.embedding = makeBlock(*graph, -1, "embedding");
  c.head = makeBlock(*graph, c.numLayers, "head");
  for (const auto& shape : options.meshes) {
    auto mesh = makeMesh(cluster, shape);
    if (!mesh) return fail(mesh.error());
  }
  return c;
}

}  // namespace detail

using namespace detail;

// The default rule for copies of the mesh (docs/autoparallel.md, "Replicas"): the third axis pays where a
// mesh's two axes split the model (tensor and sequence or expert parallelism) and data parallelism
// remains, which is the large clusters; on smaller ones, and for other meshes, its solves cost time
// without a better plan in the library. (A copy of a 1-D mesh is a 2-D mesh with a data-parallel axis.)
bool searchesReplicas(const ClusterSpec& cluster, std::int64_t pp, const std::vector<std::int64_t>& shape, std::int64_t replicas) {
  constexpr std::int64_t kClusterNodes = 32, kLeastNodes = 2, kMostNodes = 8;
  if (replicas == 1) return true;
  const std::int64_t node = std::max<std::int64_t>(1, cluster.gpusPerNode);
  if (replicas < 1 || (replicas & (replicas - 1)) != 0 || cluster.totalGpus() < kClusterNodes * node) return false;
  if (shape.size() != 2 || shape[1] != node) return false;
  const std::int64_t mesh = shape[0] * shape[1];
  return pp * replicas * mesh == cluster.totalGpus() && mesh >= kLeastNodes * node && mesh <= kMostNodes * node;
}

Result<AutoParallelResult> autoParallel(const Model& model, const ClusterSpec& cluster, const AutoParallelOptions& options) {
  auto context = makeContext(model, cluster, options);
  if (!context) return fail(context.error());
  Search search(std::move(*context));
  return search.run();
}

}  // namespace colo::planner
