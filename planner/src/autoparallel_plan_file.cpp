// Operator plans in plan files and views: reading a stored operator plan back and re-costing it with its
// strategies forced (evaluate --plan), writing one (autoparallel --out), and a degree-level plan seen
// operator by operator (colo-studio's Operators tab). docs/autoparallel.md, "Saved plans".
#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "autoparallel_search.h"
#include "colo/planner/space.h"

namespace colo::planner {
namespace detail {
namespace {

// A stored operator plan, read and checked against the model and cluster.
struct Stored {
  std::vector<std::int64_t> shape;
  std::int64_t pp = 1, vpp = 1, samples = 1, replicas = 1;
  double price = 0, alpha = 0, beta = 0, gamma = 0;
  Layout entry;
  std::map<const Block*, std::vector<std::pair<std::array<Role, 2>, int>>> units;  // roles and recompute per unit
  std::string recompute, method;
  std::vector<std::int64_t> stages;  // layers per chunk as stored (empty: files from before stage_layers)
};

// The plan file's error paths, under /operator_plan.
struct StoredReader {
  const Json& stored;
  const std::string& file;
  const Context& c;

  Error bad(const std::string& path, const std::string& why) const { return Error::badInput(why, file, "/operator_plan" + path); }
  std::optional<double> number(const char* key) const {
    if (!stored.contains(key) || !stored[key].is_number()) return std::nullopt;
    return stored[key].get<double>();
  }
  // A count: a whole number from 1 to 2^20 (anything larger is no pipeline), else nullopt.
  std::optional<std::int64_t> count(const char* key) const {
    const auto v = number(key);
    if (!v || !(*v >= 1 && *v <= 1048576.0) || *v != std::floor(*v)) return std::nullopt;
    return static_cast<std::int64_t>(*v);
  }
  // What the file prints beside its inputs is recomputed on reading; where it could be taken for an input
  // (an edited mesh or batch count, a layout's text, a block's layer count), it must agree with them.
  Result<void> agrees(const Json& j, const char* key, const Json& expected, const std::string& path, const std::string& from) const {
    if (!j.contains(key) || j[key] == expected) return {};
    return fail(bad(path, "is " + expected.dump() + " (from " + from + "), got " + describeJsonValue(j[key]) + "; it is printed, not read"));
  }
};

// The mesh, pipeline, batch and offload figures, checked against the cluster and the global batch.
Result<DeviceMesh> readShape(const StoredReader& r, Stored& out) {
  const Json& stored = r.stored;
  const Context& c = r.c;
  if (!stored.contains("mesh_shape") || !stored["mesh_shape"].is_array()) return fail(r.bad("/mesh_shape", "missing or not a list of axis sizes"));
  for (const auto& v : stored["mesh_shape"]) {
    if (!v.is_number_integer()) return fail(r.bad("/mesh_shape", "axis sizes must be integers"));
    out.shape.push_back(v.get<std::int64_t>());
  }
  auto mesh = makeMesh(*c.cluster, out.shape, "operator_plan.mesh_shape");
  if (!mesh) return fail(Error::badInput(mesh.error().message, r.file, "/operator_plan/mesh_shape"));
  const auto pp = r.count("pipeline_stages");
  const auto samples = r.count("micro_batch_size");
  const auto price = r.number("memory_price");
  const auto alpha = r.number("activation_offload_fraction");
  const auto beta = r.number("optimizer_offload_fraction");
  // Files written before weights were offloaded have none: 0.
  const auto gamma = stored.contains("weight_offload_fraction") ? r.number("weight_offload_fraction") : std::optional<double>(0.0);
  // Files written before replicas were solved have none: one.
  const auto replicas = stored.contains("replicas") ? r.count("replicas") : std::optional<std::int64_t>(1);
  if (!replicas) return fail(r.bad("/replicas", "must be a whole number of data-parallel copies of the mesh, 1 or more, got " + stored["replicas"].dump()));
  if (c.options.globalBatchSize % *replicas != 0) {
    return fail(r.bad("/replicas", std::to_string(*replicas) + " replicas do not divide the global batch " + std::to_string(c.options.globalBatchSize)));
  }
  if (!pp || c.cluster->totalGpus() != *pp * *replicas * mesh->size()) {
    const std::string stages = stored.contains("pipeline_stages") ? stored["pipeline_stages"].dump() : "none";
    return fail(r.bad(pp && *replicas > 1 ? "/replicas" : "/pipeline_stages",
                      "stages (" + stages + ") x replicas (" + std::to_string(*replicas) + ") x the mesh's " + std::to_string(mesh->size()) +
                          " GPUs must be the cluster's " + std::to_string(c.cluster->totalGpus())));
  }
  const std::string givenSamples = stored.contains("micro_batch_size") ? describeJsonValue(stored["micro_batch_size"]) : "none";
  if (!samples) return fail(r.bad("/micro_batch_size", "must be a whole number of samples from 1 to 1048576, got " + givenSamples));
  if ((c.options.globalBatchSize / *replicas) % *samples != 0) {
    return fail(r.bad("/micro_batch_size",
                      "must divide each replica's batch " + std::to_string(c.options.globalBatchSize / *replicas) + ", got " + givenSamples));
  }
  if (!price || *price < 0) return fail(r.bad("/memory_price", "missing or negative"));
  if (!alpha || *alpha < 0 || *alpha > 1) return fail(r.bad("/activation_offload_fraction", "must be in [0, 1]"));
  if (!beta || *beta < 0 || *beta > 1) return fail(r.bad("/optimizer_offload_fraction", "must be in [0, 1]"));
  if (!gamma || *gamma < 0 || *gamma > 1) {
    return fail(r.bad("/weight_offload_fraction", "must be in [0, 1], got " + describeJsonValue(stored["weight_offload_fraction"])));
  }
  out.replicas = *replicas;
  out.pp = *pp;
  out.samples = *samples;
  out.price = *price;
  out.alpha = *alpha;
  out.beta = *beta;
  out.gamma = *gamma;
  return *mesh;
}

// Interleaving and the layers of each chunk.
Result<void> readStages(const StoredReader& r, Stored& out) {
  const Json& stored = r.stored;
  const std::int64_t layers = r.c.numLayers;
  // Files written before interleaving was solved have no virtual_stages: 1F1B.
  const auto vpp = stored.contains("virtual_stages") ? r.count("virtual_stages") : std::optional<std::int64_t>(1);
  const std::int64_t microBatches = r.c.options.globalBatchSize / (out.replicas * out.samples);
  if (!vpp || chunkCounts({*vpp}, layers, out.pp, microBatches).empty()) {
    return fail(r.bad("/virtual_stages", "must be 1, or chunks per stage that divide the " + std::to_string(layers) + " layers over " +
                                             std::to_string(out.pp) + " stages with micro-batches (" + std::to_string(microBatches) +
                                             ") in groups of the stages"));
  }
  out.vpp = *vpp;
  // Files written before stages were split unevenly have no stage_layers: the assembly chooses.
  if (!stored.contains("stage_layers")) return {};
  const Json& counts = stored["stage_layers"];
  const std::size_t chunks = static_cast<std::size_t>(out.pp * out.vpp);
  std::int64_t total = 0;
  bool ok = counts.is_array() && counts.size() == chunks;
  for (std::size_t i = 0; ok && i < counts.size(); ++i) {
    ok = counts[i].is_number_integer() && counts[i].get<std::int64_t>() >= 1 && counts[i].get<std::int64_t>() <= layers;
    if (ok) total += counts[i].get<std::int64_t>();
  }
  if (!ok || total != layers) {
    return fail(r.bad("/stage_layers", "must list " + std::to_string(chunks) + " positive layer counts (one per stage" +
                                           (out.vpp > 1 ? " and chunk" : "") + ") adding up to the model's " + std::to_string(layers) +
                                           " layers, got " + describeJsonValue(counts)));
  }
  for (const auto& v : counts) out.stages.push_back(v.get<std::int64_t>());
  return {};
}

// One stored operator: its name (which must be the block's own at that place), a role per mesh axis and
// whether it is recomputed.
Result<std::pair<std::array<Role, 2>, int>> readUnit(const StoredReader& r, const Json& unit, const std::string& here,
                                                     const std::string& expected, int axes) {
  if (!unit.is_object()) return fail(r.bad(here, "must be an object naming the operator, its axis_roles and recompute"));
  const std::string name = unit.contains("unit") && unit["unit"].is_string() ? unit["unit"].get<std::string>() : std::string();
  if (name != expected) return fail(r.bad(here + "/unit", "expected \"" + expected + "\", got \"" + name + "\""));
  std::array<Role, 2> roles{Role::kNone, Role::kNone};
  const Json& names = unit.contains("axis_roles") ? unit["axis_roles"] : Json();
  if (!names.is_array() || static_cast<int>(names.size()) != axes) {
    return fail(r.bad(here + "/axis_roles", "must give one role per mesh axis (" + std::to_string(axes) + ")"));
  }
  for (std::size_t a = 0; a < names.size(); ++a) {
    if (!names[a].is_string() || !parseRole(names[a].get<std::string>(), roles[a])) {
      return fail(r.bad(here + "/axis_roles/" + std::to_string(a), "not a role (none, batch, seq, out, in, expert, inner, fsdp): " + names[a].dump()));
    }
  }
  if (unit.contains("recompute") && !unit["recompute"].is_boolean()) {
    return fail(r.bad(here + "/recompute", "must be true or false, got " + describeJsonValue(unit["recompute"])));
  }
  return std::pair{roles, unit.value("recompute", false) ? 1 : 0};
}

// The blocks in order (embedding, each layer class, head), each with its operators.
Result<void> readBlocks(const StoredReader& r, int axes, Stored& out) {
  const Context& c = r.c;
  const Json& blocks = r.stored.contains("blocks") ? r.stored["blocks"] : Json();
  if (!blocks.is_array() || blocks.size() != c.classes.size() + 2) {
    return fail(r.bad("/blocks", "must list the embedding, " + std::to_string(c.classes.size()) + " layer block(s) and the head"));
  }
  std::vector<const Block*> order{&c.embedding};
  for (const auto& cls : c.classes) order.push_back(&cls.block);
  order.push_back(&c.head);
  for (std::size_t b = 0; b < order.size(); ++b) {
    const std::string at = "/blocks/" + std::to_string(b);
    if (!blocks[b].is_object()) return fail(r.bad(at, "must be an object with the block's units"));
    const Json& units = blocks[b].contains("units") ? blocks[b]["units"] : Json();
    const std::int64_t layers = b == 0 || b + 1 == order.size() ? 1 : static_cast<std::int64_t>(c.classes[b - 1].layers.size());
    if (auto ok = r.agrees(blocks[b], "count", layers, at + "/count", "the model's layers"); !ok) return fail(ok.error());
    if (!units.is_array() || units.size() != order[b]->units.size()) {
      return fail(r.bad(at + "/units", "must list the block's " + std::to_string(order[b]->units.size()) + " operators"));
    }
    auto& list = out.units[order[b]];
    for (std::size_t u = 0; u < units.size(); ++u) {
      auto unit = readUnit(r, units[u], at + "/units/" + std::to_string(u), order[b]->units[u].name, axes);
      if (!unit) return fail(unit.error());
      list.push_back(*unit);
    }
  }
  return {};
}

Result<Stored> readStored(const Json& stored, const std::string& file, const Context& c) {
  const StoredReader r{stored, file, c};
  Stored out;
  auto mesh = readShape(r, out);
  if (!mesh) return fail(mesh.error());
  if (auto ok = readStages(r, out); !ok) return fail(ok.error());
  const Json interface = stored.value("interface", Json::object());
  const int index = interface.contains("index") && interface["index"].is_number_integer() ? interface["index"].get<int>() : -1;
  if (index < 0 || index >= kLayouts) return fail(r.bad("/interface/index", "missing or not a layout index (0-24)"));
  out.entry = Layout::fromIndex(index);
  const std::int64_t microBatches = c.options.globalBatchSize / (out.replicas * out.samples);
  if (auto ok = r.agrees(stored, "mesh", mesh->toString(), "/mesh", "mesh_shape"); !ok) return fail(ok.error());
  if (auto ok = r.agrees(stored, "micro_batches", microBatches, "/micro_batches", "the global batch, replicas and micro_batch_size"); !ok) {
    return fail(ok.error());
  }
  if (auto ok = r.agrees(interface, "layout", toString(out.entry, mesh->axes()), "/interface/layout", "interface/index"); !ok) {
    return fail(ok.error());
  }
  out.recompute = stored.value("recompute", std::string("per operator"));
  out.method = stored.value("method", std::string("joint"));
  if (auto ok = readBlocks(r, mesh->axes(), out); !ok) return fail(ok.error());
  return out;
}

// Each stored operator's roles must be one of its strategies on this mesh: a role that does not apply
// (say, experts for a projection) is named with the operator and the roles it has.
Result<void> checkRolesOffered(const MeshSolvers& ms, const Stored& st, const std::string& file) {
  std::vector<const BlockSolver*> solvers{ms.embedding.get()};
  for (const auto& layer : ms.layers) solvers.push_back(layer.get());
  solvers.push_back(ms.head.get());
  const int axes = ms.mesh->axes();
  auto rolesOf = [axes](const std::array<Role, 2>& r) {
    std::string out = "[" + roleName(r[0]);
    if (axes > 1) out += ", " + roleName(r[1]);
    return out + "]";
  };
  for (std::size_t b = 0; b < solvers.size(); ++b) {
    const Block& block = solvers[b]->block();
    const auto& stored = st.units.at(&block);
    for (std::size_t u = 0; u < stored.size(); ++u) {
      const auto& offered = solvers[b]->strategies()[u];
      if (std::any_of(offered.begin(), offered.end(), [&](const Strategy& s) { return s.role == stored[u].first; })) continue;
      std::string roles;
      for (const auto& s : offered) {
        const std::string r = rolesOf(s.role);
        if (roles.find(r) == std::string::npos) roles += (roles.empty() ? "" : " ") + r;
      }
      return fail(Error::badInput(block.units[u].name + " has no strategy " + rolesOf(stored[u].first) + " on mesh " +
                                      ms.mesh->toString() + "; its roles there: " + roles,
                                  file, "/operator_plan/blocks/" + std::to_string(b) + "/units/" + std::to_string(u) + "/axis_roles"));
    }
  }
  return {};
}

}  // namespace

Result<OperatorPlan> Search::reproduce(const Json& json, const std::string& file) {
  auto stored = readStored(json, file, m_c);
  if (!stored) return fail(stored.error());
  const Stored& st = *stored;
  MeshSolvers& ms = solversFor(st.shape, st.samples, st.replicas);
  const std::int64_t microBatches = m_c.options.globalBatchSize / (st.replicas * st.samples);
  SolveWeights w;
  w.lambda = st.price;
  w.activationCopies = static_cast<double>(std::min(st.pp, microBatches));
  w.microBatches = static_cast<double>(microBatches);
  const auto& units = st.units;
  if (auto offered = checkRolesOffered(ms, st, file); !offered) return fail(offered.error());
  w.allow = [&units](const Block& block, std::size_t u, const Strategy& s) { return units.at(&block)[u].first == s.role; };
  w.forceRecompute = [&units](const Block& block, std::size_t u) { return units.at(&block)[u].second; };
  auto solution = solveFixed(ms, w, st.entry);
  if (!solution) return fail(Error::badInput(solution.error().message, file, "/operator_plan/blocks"));
  solution->recompute = st.recompute;
  Best best;
  best.assembly = assemble(m_c, ms, *solution, st.pp, microBatches, st.alpha, st.beta, st.vpp, st.stages.empty() ? nullptr : &st.stages,
                           st.gamma);
  best.solvers = &ms;
  best.solution = *solution;
  best.pp = st.pp;
  best.vpp = st.vpp;
  best.replicas = st.replicas;
  best.microBatches = microBatches;
  return report(best, st.method);
}

Result<Solution> Search::solveFixed(const MeshSolvers& ms, const SolveWeights& w, Layout entry) {
  Solution sol;
  for (std::size_t k = 0; k < m_c.classes.size(); ++k) {
    BlockPlan chosen;
    double back = 0;
    for (auto& plan : ms.layers[k]->solve({entry}, w, backToEntry(ms, k))) {
      const double conv = boundarySeconds(ms, plan.exit, plan.entry, m_c.classes[k].block.input);
      if (plan.objective + conv < chosen.objective + back) {
        chosen = plan;
        back = conv;
      }
    }
    if (!chosen.valid()) return fail(Error::badInput("layer block " + std::to_string(k + 1) + ": its operators' strategies do not connect on this mesh"));
    sol.layers.push_back(chosen);
    sol.backConversion.push_back(back);
  }
  chooseEmbedding(ms.embedding->solve({}, w), ms, entry, sol);
  for (auto& plan : ms.head->solve({entry}, w, anyExit)) {
    if (plan.objective < sol.head.objective) sol.head = plan;
  }
  if (!sol.embedding.valid() || !sol.head.valid()) return fail(Error::badInput("the embedding's or head's strategies do not connect on this mesh"));
  sol.weights = w;
  sol.weights.allow = nullptr;
  sol.weights.forceRecompute = nullptr;
  measureBuffers(m_c, ms, sol);
  return sol;
}

Result<OperatorPlan> Search::megatronAt(const std::vector<std::int64_t>& shape, const MegatronRule& rule, RecomputeMode mode,
                                        std::int64_t pp, std::int64_t samples, std::int64_t vpp,
                                        const std::vector<std::int64_t>& stages, std::int64_t replicas) {
  auto mesh = makeMesh(*m_c.cluster, shape, "plan");
  if (!mesh) return fail(mesh.error());
  const Combo k{pp, shape, samples, m_c.options.globalBatchSize / (replicas * samples), 0.0, 0.0, replicas};
  MeshSolvers& ms = solversFor(shape, samples, replicas);
  // solveMegatron tries every rule and mode; keep the one asked for.
  const std::vector<MegatronRule> only{rule};
  m_onlyRules = &only;
  m_onlyMode = mode;
  m_onlyChunks = {vpp};
  m_fixedStages = stages;
  (void)solveMegatron(k, ms);  // (whether it fits is the report's)
  m_onlyRules = nullptr;
  m_onlyChunks.clear();
  m_fixedStages.clear();
  const Best& chosen = m_megatron.solvers ? m_megatron : m_megatronLean;
  if (!chosen.solvers) return fail(Error::badInput("the plan's split does not apply to its model (mesh " + mesh->toString() + ")"));
  return report(chosen, "megatron");
}

}  // namespace detail

using namespace detail;

Result<OperatorPlan> evaluateOperatorPlan(const Plan& plan, const std::string& file) {
  if (!plan.operatorPlan.is_object()) return fail(Error::badInput("the plan has no operator_plan (it is a degree-level plan)", file));
  AutoParallelOptions options;
  options.globalBatchSize = plan.globalBatchSize;
  options.seqLen = plan.seqLen;
  options.precision = plan.precision;
  options.hostMicrosecondsPerOp = plan.execution.hostMicrosecondsPerOp;
  options.flashAttention = plan.execution.flashAttention;
  options.flashAttention2 = plan.execution.flashAttention2;
  const Json& stored = plan.operatorPlan;
  // A budget above the GPU (written before colo refused one) is the GPU's memory: what fits is judged there.
  if (stored.contains("budget_bytes") && stored["budget_bytes"].is_number()) {
    options.memoryBudgetBytes = std::min(stored["budget_bytes"].get<double>(), plan.cluster.gpu.memoryBytes);
  }
  auto context = makeContext(plan.model, plan.cluster, options);
  if (!context) return fail(Error::badInput(context.error().message, file));
  Search search(std::move(*context));
  return search.reproduce(stored, file);
}

namespace {

// Why a degree-level plan has no operator view ("" when it has one).
std::string viewRefusal(const Plan& plan) {
  const auto& par = plan.parallel;
  const auto str = [](std::int64_t v) { return std::to_string(v); };
  if (par.ep > 1 && par.expertTp() != par.tp) {
    return "experts folded over other ranks (expert_tp " + str(par.expertTp()) + ", tp " + str(par.tp) +
           ") have no operator rule: a MoE block's experts split over the data-parallel ranks beside tp";
  }
  if (par.ep > 1 && par.cp > 1) return "expert parallelism over dp x cp (ep " + str(par.ep) + " beside cp " + str(par.cp) + ") has no operator rule";
  if (par.ep > 1 && par.dp % par.ep != 0) return "ep does not divide dp (ep " + str(par.ep) + ", dp " + str(par.dp) + ")";
  if (par.ep > 1 && plan.zeroStage == 3) return "ZeRO-3 beside expert parallelism shards the experts' weights, which no operator rule does";
  if (plan.schedule == Schedule::kGpipe || plan.schedule == Schedule::kZeroBubble) {
    return "the operator view assembles 1F1B and interleaved 1F1B pipelines only, not " + toString(plan.schedule);
  }
  if (plan.zeroStage == 2) return "ZeRO-2 shards the gradients, which no operator role holds apart from the weights";
  if (plan.zeroStage == 3 && par.cp > 1) return "ZeRO-3 beside context parallelism shards the weights over dp x cp, which no operator rule does";
  if (plan.zeroStage == 3 && par.pp > 1) return "ZeRO-3 under pipelining gathers a stage's weights once a step, not per operator";
  if (plan.offload.paramsFraction > 0) return "parameter offload is not an operator role";
  if (plan.offload.activationLayers > 0) {
    return "activation offload of whole layers (the first " + str(plan.offload.activationLayers) +
           ") is not an operator role (the operator view offloads per operator)";
  }
  if (recomputesSelectively(plan) && !plan.execution.recomputeModules.isDefault()) {
    return "selective recompute of Megatron-Core's modules (" + recomputeModulesLabel(plan.execution.recomputeModules) +
           ") has no operator rule (the operator view's selective recompute is the attention core's)";
  }
  if (const char* rule = chunksRule(plan.model.numLayers(), par.pp, par.virtualStages)) {
    return std::string(rule) + " (the interleaved assembly holds equal chunks: " + str(plan.model.numLayers()) + " layers over " +
           str(par.pp) + " x " + str(par.virtualStages) + " chunks)";
  }
  return {};
}

// A degree-level plan's mesh of one stage, Megatron's rule on it, the copies of that mesh and the
// data-parallel ranks inside it.
struct ViewLayout {
  std::vector<std::int64_t> shape;
  MegatronRule rule;
  std::int64_t replicas = 1;
  std::int64_t meshDp = 1;
};
ViewLayout viewLayout(const Plan& plan) {
  const auto& par = plan.parallel;
  ViewLayout v;
  v.meshDp = par.dp;
  if (par.cp > 1) {
    // Context parallelism (colo-run's ranks: tp, cp, dp from the inside out): the sequence over the
    // outer axis with tensor parallelism inside, data parallelism as copies of that mesh; or the sequence
    // inside and data parallelism outside. The per-operator model exchanges keys and values by all-gather.
    if (par.tp > 1) {
      v = {{par.cp, par.tp}, {1, -1, par.sequenceParallel, false, 0}, par.dp, 1};
    } else if (par.dp > 1) {
      v = {{par.dp, par.cp}, {-1, 0, false, false, 1}, 1, par.dp};
    } else {
      v = {{par.cp}, {-1, -1, false, false, 0}, 1, 1};
    }
  } else if (par.ep > 1) {
    // Expert parallelism (Megatron-Core's ranks: ep inside dp, beside tp): the mesh ep x tp, or ep alone,
    // its outer axis splitting the batch of dense operators and the experts of MoE blocks, copied dp/ep
    // times (each copy holds the same experts: the experts' data parallelism).
    v.shape = par.tp > 1 ? std::vector<std::int64_t>{par.ep, par.tp} : std::vector<std::int64_t>{par.ep};
    v.rule = par.tp > 1 ? MegatronRule{1, 0, par.sequenceParallel} : MegatronRule{-1, 0, false};
    v.replicas = par.dp / par.ep;
    v.meshDp = par.ep;
  } else if (par.tp > 1 && par.dp > 1) {
    v.shape = {par.dp, par.tp};
    v.rule = {1, 0, par.sequenceParallel};
  } else if (par.tp > 1) {
    v.shape = {par.tp};
    v.rule = {0, -1, par.sequenceParallel};
  } else {
    v.shape = {par.dp};
    v.rule = {-1, par.dp > 1 ? 0 : -1, false};  // (one GPU: nothing to split)
  }
  v.rule.fsdp = plan.zeroStage == 3 && par.dp > 1;
  v.rule.expertsOverDp = par.ep > 1 ? 1 : 0;  // (the plan's own choice, not the solver's)
  return v;
}

}  // namespace

Result<OperatorPlan> operatorView(const Plan& plan, double maxMemoryFraction) {
  if (plan.operatorPlan.is_object()) return evaluateOperatorPlan(plan);
  if (const std::string why = viewRefusal(plan); !why.empty()) return fail(Error::badInput("no operator view: " + why));
  AutoParallelOptions options;
  options.globalBatchSize = plan.globalBatchSize;
  options.seqLen = plan.seqLen;
  options.precision = plan.precision;
  options.maxMemoryFraction = maxMemoryFraction;
  options.allowOffload = false;
  options.hostMicrosecondsPerOp = plan.execution.hostMicrosecondsPerOp;
  options.flashAttention = plan.execution.flashAttention;
  options.flashAttention2 = plan.execution.flashAttention2;
  auto context = makeContext(plan.model, plan.cluster, options);
  if (!context) return fail(context.error());
  Search search(std::move(*context));
  const ViewLayout v = viewLayout(plan);
  const RecomputePolicy policy = plan.stages.empty() ? RecomputePolicy::kNone : plan.stages.front().recompute;
  const RecomputeMode mode = policy == RecomputePolicy::kFull        ? RecomputeMode::kFull
                             : policy == RecomputePolicy::kSelective ? RecomputeMode::kSelective
                                                                     : RecomputeMode::kNone;
  std::vector<std::int64_t> stages;  // the plan's own layers per chunk
  for (const auto& st : plan.stages) stages.push_back(st.layers);
  const auto& par = plan.parallel;
  return search.megatronAt(v.shape, v.rule, mode, par.pp, plan.microBatchSize * v.meshDp, par.virtualStages, stages, v.replicas);
}

Result<Plan> detail::degreeForm(const Model& model, const ClusterSpec& cluster, const AutoParallelOptions& options,
                        const OperatorPlan& degrees) {
  Plan p;
  p.name = model.name() + " per-operator plan";
  p.model = model;
  p.cluster = cluster;
  p.parallel.tp = degrees.tp;
  p.parallel.cp = degrees.cp;
  p.parallel.dp = degrees.dp;
  p.parallel.ep = degrees.ep;
  p.parallel.pp = degrees.pipelineStages;
  p.parallel.virtualStages = degrees.virtualStages;
  p.schedule = degrees.virtualStages > 1 ? Schedule::kInterleaved : Schedule::kOneFOneB;
  p.parallel.sequenceParallel = degrees.sequenceParallel && degrees.tp > 1;
  // Samples per micro-batch over one replica's mesh, over that mesh's share of the data-parallel ranks
  // (context parallelism splits the sequence, not the samples).
  const std::int64_t meshDp = std::max<std::int64_t>(1, degrees.dp / std::max<std::int64_t>(1, degrees.replicas));
  p.microBatchSize = std::max<std::int64_t>(1, degrees.microBatchSize / meshDp);
  p.globalBatchSize = options.globalBatchSize;
  p.seqLen = options.seqLen > 0 ? options.seqLen : model.defaultSeqLen();
  p.precision = options.precision;
  p.execution.hostMicrosecondsPerOp = options.hostMicrosecondsPerOp;
  p.execution.flashAttention = options.flashAttention;
  p.execution.flashAttention2 = options.flashAttention && options.flashAttention2;
  // The optimizer states are split over dp x cp (Megatron's distributed optimizer; the per-operator
  // solve splits them over every axis that replicates the weights, sequence axes included).
  p.zeroStage = degrees.dp * degrees.cp > 1 ? degrees.zeroStage : 0;
  const RecomputePolicy policy = degrees.recomputePolicy == "full"        ? RecomputePolicy::kFull
                                 : degrees.recomputePolicy == "selective" ? RecomputePolicy::kSelective
                                                                          : RecomputePolicy::kNone;
  p.stages = uniformStages(model.numLayers(), p.parallel.pp * p.parallel.virtualStages, policy);
  // The layers per chunk the assembly costed (the plan's stages list chunk by chunk, as Megatron's).
  if (degrees.stageLayers.size() == p.stages.size()) {
    for (std::size_t i = 0; i < p.stages.size(); ++i) {
      p.stages[i].layers = degrees.stageLayers[i];
      if (p.stages[i].recompute != RecomputePolicy::kNone) p.stages[i].recomputeLayers = p.stages[i].layers;
    }
  }
  if (degrees.runnable && degrees.optimizerOffloadFraction > 0) {
    p.zeroStage = std::max(p.zeroStage, 1);
    p.offload.optimizerFraction = degrees.optimizerOffloadFraction;
  }
  if (auto valid = validatePlan(p); !valid) {
    return fail(Error::badInput("the operator plan's degree-level form is not a valid plan: " + valid.error().message));
  }
  return p;
}

Result<Plan> operatorPlanFile(const Model& model, const ClusterSpec& cluster, const AutoParallelOptions& options,
                              const AutoParallelResult& result) {
  const OperatorPlan& op = result.joint;
  // The degree fields: the plan's own equivalent, else Megatron's split from the same solve.
  const OperatorPlan& degrees = op.runnable ? op : result.megatron;
  if (degrees.mesh.empty()) return fail(Error::badInput("the operator plan has no degree-level form to store beside it"));
  auto form = degreeForm(model, cluster, options, degrees);
  if (!form) return fail(form.error());
  Plan p = std::move(*form);
  p.predictions.stepTimeSeconds = op.stepSeconds;
  p.predictions.peakMemoryBytes = op.peakMemoryBytes;
  p.predictions.fits = op.fits;
  p.operatorPlan = op.toJson();  // (degreeForm validated the plan; neither field changes that)
  return p;
}

}  // namespace colo::planner
