// colo-plan autoparallel: the operator-level auto-parallel solve (planner/autoparallel.h), printed as
// the plan beside Megatron's split and one table of per-operator strategies per distinct block.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "args.h"
#include "colo/core/limits.h"
#include "colo/core/units.h"
#include "colo/core/version.h"
#include "colo/planner/autoparallel.h"
#include "colo/planner/search.h"
#include "colo/planner/sharding.h"
#include "colo/planner/space.h"
#include "commands.h"
#include "inputs.h"
#include "text_table.h"

namespace colo::app {
namespace {

std::string seconds(double s) {
  char buf[32];
  if (s >= 1.0) std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (s >= 1e-3) std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

std::string percent(double f) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", f * 100.0);
  return buf;
}

// "16 samples x 4" (samples per micro-batch, micro-batches).
std::string microBatchText(const planner::OperatorPlan& p) {
  return std::to_string(p.microBatchSize) + (p.microBatchSize == 1 ? " sample x " : " samples x ") + std::to_string(p.microBatches);
}

// How it recomputes: per operator (saying so when the choice was to recompute nothing) or a layer policy.
std::string recomputeText(const planner::OperatorPlan& p) {
  bool any = false;
  for (const auto& b : p.blocks) {
    for (const auto& u : b.units) any = any || u.recompute;
  }
  return p.recompute == "per operator" && !any ? "per operator (nothing recomputed)" : p.recompute;
}

// The peak's parts: model states, kept activations (with the allocator's allowance), buffers; the CUDA
// context is the rest.
std::string memoryParts(const planner::OperatorPlan& p) {
  return formatBytes(p.stateBytes) + " | " + formatBytes(p.activationBytes) + " | " + formatBytes(p.bufferBytes);
}

// "activations 25%, optimizer 0%, weights 100%": the shares an operator plan keeps in host memory.
std::string offloadShares(const planner::OperatorPlan& p) {
  return "activations " + percent(p.activationOffloadFraction) + ", optimizer " + percent(p.optimizerOffloadFraction) +
         ", weights " + percent(p.weightOffloadFraction);
}

// Prints progress to stderr on one line (a terminal) while the search runs.
class StderrProgress : public ProgressSink {
 public:
  explicit StderrProgress(std::ostream& err) : m_err(err) {}
  void progress(double fraction, std::string_view what) override {
    m_err << "\r  " << static_cast<int>(fraction * 100) << "% " << what << "          " << std::flush;
    if (fraction >= 1.0) m_err << "\r" << std::string(60, ' ') << "\r" << std::flush;
  }

 private:
  std::ostream& m_err;
};

void printSummary(const planner::AutoParallelResult& r, std::ostream& out) {
  const auto& j = r.joint;
  const auto& m = r.megatron;
  TextTable t({"", "joint (per operator)", "megatron (column/row split, layer-level recompute)"}, {false, false, false});
  auto both = [&](const std::string& label, const std::string& a, const std::string& b) { t.addRow({label, a, b}); };
  auto meshOf = [](const planner::OperatorPlan& p) { return p.layoutText(); };
  const bool haveMegatron = !m.mesh.empty();
  both("layout", meshOf(j), haveMegatron ? meshOf(m) : "-");
  both("micro-batch", microBatchText(j),
       haveMegatron ? microBatchText(m) : "-");
  both("step time", seconds(j.stepSeconds), haveMegatron ? seconds(m.stepSeconds) : "-");
  both("peak memory", formatBytes(j.peakMemoryBytes) + " of " + formatBytes(j.budgetBytes),
       haveMegatron ? formatBytes(m.peakMemoryBytes) + (r.megatronFits ? "" : " (DOES NOT FIT)") : "-");
  both("states | acts | buffers", memoryParts(j), haveMegatron ? memoryParts(m) : "-");
  both("recompute", recomputeText(j), haveMegatron ? recomputeText(m) : "-");
  both("offload", offloadShares(j),
       haveMegatron ? "none" : "-");
  both("compute | comm", seconds(j.compute) + " | " + seconds(j.communication),
       haveMegatron ? seconds(m.compute) + " | " + seconds(m.communication) : "-");
  both("recompute | bubble", seconds(j.recomputeSeconds) + " | " + seconds(j.bubble),
       haveMegatron ? seconds(m.recomputeSeconds) + " | " + seconds(m.bubble) : "-");
  both("grad sync | optimizer", seconds(j.gradientSync) + " | " + seconds(j.optimizer),
       haveMegatron ? seconds(m.gradientSync) + " | " + seconds(m.optimizer) : "-");
  both("as degrees", j.expressedAs, haveMegatron ? m.expressedAs : "-");
  out << t.render("  ");
  if (haveMegatron && r.megatronFits) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  joint solve vs Megatron's split: %.3fx the speed (%s vs %s per step)\n",
                  m.stepSeconds / j.stepSeconds, seconds(j.stepSeconds).c_str(), seconds(m.stepSeconds).c_str());
    out << buf;
    // Worded as `colo-plan search` ranks its plans.
    if (const std::string why = planner::slowerReason(m, j); !why.empty()) out << "  Megatron's split: " << why << "\n";
    if (const std::string why = planner::slowerReason(j, m); !why.empty()) out << "  the joint solve: " << why << "\n";
  } else if (haveMegatron) {
    out << "  Megatron's split with layer-level recompute does not fit this budget; the joint solve does\n";
  }
}

// The degree-level search's best on the same model, cluster and batch (costed by the evaluator, a
// different model from the operator-level one: a few percent apart on the same plan).
struct DegreeBest {
  std::optional<planner::Candidate> best;
  std::string outside;  // what it uses outside the operator-level space
  std::string why;      // without a best: why there is none
  bool layoutFixed = false;  // --mesh, --pp or --replicas: --out keeps the operator-level plan on that layout
};

DegreeBest degreeBest(const Model& model, const ClusterSpec& cluster, const planner::AutoParallelOptions& a) {
  planner::SearchOptions so;
  so.globalBatchSize = a.globalBatchSize;
  so.seqLen = a.seqLen;
  so.precision = a.precision;
  // The same budget as the joint solve: --memory-gib as its share of the GPU's memory.
  so.maxMemoryFraction = a.memoryBudgetBytes > 0 ? std::min(1.0, a.memoryBudgetBytes / cluster.gpu.memoryBytes) : a.maxMemoryFraction;
  so.allowOffload = a.allowOffload;
  so.topK = 1;
  DegreeBest d;
  auto r = planner::search(model, cluster, so);
  if (!r) {
    d.why = "the degree-level search failed: " + r.error().message;
    return d;
  }
  if (!r->feasible()) {
    d.why = "no plan fits this budget";
    return d;
  }
  d.best = r->top.front();
  d.outside = planner::outsideOperatorSpace(d.best->plan);
  return d;
}

void printDegreeComparison(const planner::AutoParallelResult& r, const DegreeBest& d, std::ostream& out) {
  if (!d.best) {
    out << "  degree-level search (colo-plan search): " << (d.why.empty() ? "no plan fits this budget" : d.why) << "\n";
    return;
  }
  const Plan& p = d.best->plan;
  const double degree = d.best->evaluation.stepSeconds;
  std::ostringstream layout;
  layout << "tp " << p.parallel.tp << " pp " << p.parallel.pp << " dp " << p.parallel.dp;
  if (p.parallel.cp > 1) layout << " cp " << p.parallel.cp;
  if (p.parallel.ep > 1) layout << " ep " << p.parallel.ep;
  if (p.parallel.virtualStages > 1) layout << " vpp " << p.parallel.virtualStages;
  layout << ", mbs " << p.microBatchSize << ", ZeRO-" << p.zeroStage;
  char buf[160];
  std::snprintf(buf, sizeof buf, "  degree-level search (colo-plan search): %s (%s); the joint solve is %.3fx its speed\n",
                seconds(degree).c_str(), layout.str().c_str(), degree / r.joint.stepSeconds);
  out << buf;
  if (degree < r.joint.stepSeconds) {
    out << "  the degree-level plan is faster"
        << (d.outside.empty() ? " (the two cost models differ by a few percent on the same plan)"
                              : ": it uses " + d.outside + ", outside the operator-level space")
        << (d.layoutFixed ? "; --out writes the per-operator plan, on the layout --mesh/--pp/--replicas fix\n" : "; --out writes it\n");
  }
}

}  // namespace

void printOperatorBlocks(const planner::OperatorPlan& p, std::ostream& out) {
  for (const auto& b : p.blocks) {
    out << "\n" << b.name << (b.count > 1 ? " (x" + std::to_string(b.count) + ", solved once)" : "") << ":\n";
    TextTable t({"op", "axes", "input", "output", "collectives", "time", "saved", "states", "activations"},
                {false, false, false, false, false, true, true, true, false});
    for (const auto& u : b.units) {
      t.addRow({u.unit, u.roles, u.input, u.output, u.collectives, seconds(u.seconds), formatBytes(u.activationBytes),
                formatBytes(u.stateBytes), u.activation});
    }
    out << t.render("  ");
  }
}

void printOperatorPlan(const planner::OperatorPlan& p, std::ostream& out) {
  TextTable t({"", p.method == "megatron" ? "megatron (column/row split)" : "per-operator plan"}, {false, false});
  t.addRow({"layout", p.layoutText()});
  t.addRow({"micro-batch", microBatchText(p)});
  t.addRow({"step time", seconds(p.stepSeconds)});
  t.addRow({"peak memory", formatBytes(p.peakMemoryBytes) + " of " + formatBytes(p.budgetBytes) + (p.fits ? "" : " (DOES NOT FIT)")});
  t.addRow({"states | acts | buffers", memoryParts(p)});
  t.addRow({"recompute", recomputeText(p)});
  t.addRow({"offload", offloadShares(p)});
  t.addRow({"compute | comm", seconds(p.compute) + " | " + seconds(p.communication)});
  t.addRow({"recompute | bubble", seconds(p.recomputeSeconds) + " | " + seconds(p.bubble)});
  t.addRow({"grad sync | optimizer", seconds(p.gradientSync) + " | " + seconds(p.optimizer)});
  t.addRow({"as degrees", p.expressedAs});
  out << t.render("  ");
  printOperatorBlocks(p, out);
}

namespace {

const std::vector<OptionSpec>& autoParallelSpecs() {
  static const std::vector<OptionSpec> specs{
      {"model", "M", "model: library name or file"},
      {"cluster", "C", "cluster: library name or file"},
      {"gpus", "N", "scale the cluster to N GPUs"},
      {"gbs", "G", "global batch size (required)"},
      {"seq-len", "S", "tokens per sample"},
      {"mesh", "AxB", "one pipeline stage's mesh, e.g. 8 or 2x8 (default: every 1-D and 2-D mesh)"},
      {"pp", "P", "pipeline stages (default: 1, 2, 4, ...)"},
      {"replicas", "R", "data-parallel copies of each stage's mesh, the third axis (default: 1, and 2, 4, ... for meshes of whole nodes)"},
      {"vpp", "V", "model chunks per stage: 1 for plain 1F1B, more for the interleaved schedule (default: 1, 2, 3, 4, 6 and 8 where they divide the layers)"},
      {"max-memory-fraction", "F", "memory budget as a share of GPU memory (default 0.95)"},
      {"memory-gib", "GIB", "memory budget per GPU in GiB (overrides the fraction)"},
      {"precision", "P", "bf16, fp16, fp8, fp4 (Blackwell), fp32 or tf32 (fp32 states, TF32 matmuls) (default: bf16, or fp16 on GPUs without bf16)"},
      {"no-offload", "", "keep activations, optimizer states and weights on the GPU"},
      {"no-weight-offload", "", "keep the weights on the GPU (activations and optimizer states may still go)"},
      {"solver-only", "", "do not count Megatron's split among the joint candidates (shows what the per-operator solve finds alone)"},
      {"out", "FILE", "write the plan (colo.plan/1 with its per-operator plan) for evaluate --plan and colo-run"},
      {"json", "", "print one JSON object"},
      {"explain", "", "also list the layouts pruned, by rule (as `colo-plan search --explain` lists configurations)"},
      {"help", "", "show this help"}};
  return specs;
}

// One optional positive integer option appended to `into` (--pp, --replicas, --vpp).
Result<void> appendPositive(const Args& args, const std::string& name, std::vector<std::int64_t>& into) {
  if (!args.has(name)) return {};
  auto v = args.positiveInteger(name, 1);
  if (!v) return fail(v.error());
  into.push_back(*v);
  return {};
}

// A fixed mesh (--mesh) must make the cluster with the replicas and stages asked for (the stages follow
// from it when not given), and be laid out on it.
// One --mesh: the pipeline degree that fills the cluster with it (and --replicas), unless --pp says. When
// one copy of the mesh per stage would need more stages than the model has layers, the pipeline degrees
// that keep a layer a stage are searched, each with the copies of the mesh that fill the cluster.
Result<void> checkMesh(const Args& args, const ClusterSpec& cluster, std::int64_t layers, planner::AutoParallelOptions& options) {
  const std::int64_t total = cluster.totalGpus();
  for (const auto r : options.replicas) {
    if (total % r != 0 || options.globalBatchSize % r != 0) {
      return fail(Error::badInput("--replicas " + std::to_string(r) + ": copies of the mesh must divide the cluster's " +
                                  std::to_string(total) + " GPUs and the global batch " +
                                  std::to_string(options.globalBatchSize)));
    }
  }
  if (options.meshes.size() != 1) return {};
  const std::string named = "--mesh " + *args.value("mesh");
  std::int64_t size = 1;
  for (const auto s : options.meshes[0]) size *= s;
  const std::int64_t r = options.replicas.empty() ? 1 : options.replicas[0];
  const std::string copies = r > 1 ? " x " + std::to_string(r) + " replicas" : "";
  const std::string hint = options.replicas.empty() ? " (--replicas R puts R copies of the mesh in each stage)" : "";
  if (options.pipelineDegrees.empty() && total % (size * r) != 0) {
    return fail(Error::badInput(named + ": " + std::to_string(size) + " GPUs" + copies + " do not divide the cluster's " +
                                std::to_string(total) + " GPUs into pipeline stages"));
  }
  const std::int64_t pp = options.pipelineDegrees.empty() ? total / (size * r) : options.pipelineDegrees[0];
  if (size * r * pp != total) {
    return fail(Error::badInput(named + ": " + std::to_string(size) + " GPUs x " + (r > 1 ? std::to_string(r) + " replicas x " : "") +
                                std::to_string(pp) + " stages does not make the cluster's " + std::to_string(total) + " GPUs" + hint));
  }
  auto mesh = planner::makeMesh(cluster, options.meshes[0]);
  if (!mesh) return fail(mesh.error());
  if (pp <= layers || !options.pipelineDegrees.empty()) {
    if (options.pipelineDegrees.empty()) options.pipelineDegrees.push_back(pp);
    return {};  // (more --pp than layers: autoParallel refuses it by name)
  }
  if (!options.replicas.empty()) {
    return fail(Error::badInput(named + copies + ": " + std::to_string(pp) + " pipeline stages, more than the model's " +
                                std::to_string(layers) + " layers (every stage holds at least one)"));
  }
  for (std::int64_t copy = 2; copy <= total / size; copy *= 2) {
    if ((total / size) % copy == 0 && total / (size * copy) <= layers && options.globalBatchSize % copy == 0) {
      options.replicas.push_back(copy);
      options.pipelineDegrees.push_back(total / (size * copy));  // (not always a power of two: 72 GPUs)
    }
  }
  if (options.replicas.empty()) {
    return fail(Error::badInput(named + ": one copy of the mesh per stage makes " + std::to_string(pp) +
                                " pipeline stages, more than the model's " + std::to_string(layers) +
                                " layers, and no power-of-two number of copies (--replicas) divides both the " +
                                std::to_string(total) + " GPUs and the global batch " + std::to_string(options.globalBatchSize) +
                                " with fewer stages"));
  }
  return {};
}

Result<planner::AutoParallelOptions> autoParallelOptions(const Args& args, ClusterSpec& cluster, std::int64_t layers) {
  if (!args.has("gbs")) return fail(Error::badInput("missing --gbs (the global batch size)"));
  auto gbs = args.positiveInteger("gbs", 0);
  if (!gbs) return fail(gbs.error());
  if (*gbs > limits::kMaxBatch) {
    return fail(Error::badInput("--gbs: must be at most " + std::to_string(limits::kMaxBatch) + ", got " + std::to_string(*gbs)));
  }
  auto seq = args.positiveInteger("seq-len", 0);
  if (!seq) return fail(seq.error());
  if (*seq > limits::kMaxSeqLen) {
    return fail(Error::badInput("--seq-len: must be at most " + std::to_string(limits::kMaxSeqLen) + ", got " + std::to_string(*seq)));
  }
  auto precision = precisionOption(args, &cluster);
  if (!precision) return fail(precision.error());
  planner::AutoParallelOptions options;
  options.globalBatchSize = *gbs;
  options.seqLen = *seq;
  options.precision = *precision;
  options.allowOffload = !args.has("no-offload");
  options.allowWeightOffload = !args.has("no-weight-offload");
  options.seedWithMegatron = !args.has("solver-only");
  auto fraction = args.number("max-memory-fraction", options.maxMemoryFraction, kFractionOfMemory);
  if (!fraction) return fail(fraction.error());
  options.maxMemoryFraction = *fraction;
  if (args.has("memory-gib")) {
    auto gib = args.number("memory-gib", 0, {0, cluster.gpu.memoryBytes / (1024.0 * 1024.0 * 1024.0), true});
    if (!gib) return fail(Error::badInput(gib.error().message + " (the " + cluster.gpu.name + "'s memory)"));
    options.memoryBudgetBytes = *gib * 1024.0 * 1024.0 * 1024.0;
  }
  if (const auto m = args.value("mesh")) {
    auto shape = planner::parseMeshShape(*m);
    if (!shape) return fail(shape.error());
    options.meshes.push_back(*shape);
  }
  for (const auto& [name, into] : {std::pair<const char*, std::vector<std::int64_t>*>{"pp", &options.pipelineDegrees},
                                   {"replicas", &options.replicas},
                                   {"vpp", &options.virtualStages}}) {
    if (auto added = appendPositive(args, name, *into); !added) return fail(added.error());
  }
  if (auto mesh = checkMesh(args, cluster, layers, options); !mesh) return fail(mesh.error());
  return options;
}

// --out: the faster of the joint plan and the degree-level search's, with where it came from.
Result<void> writeAutoParallelPlan(const std::string& file, const Model& model, const ClusterSpec& cluster,
                                   const planner::AutoParallelOptions& options, const planner::AutoParallelResult& result,
                                   const DegreeBest& degree, bool degreeFaster, const std::vector<std::string>& argv) {
  auto plan = degreeFaster ? Result<Plan>(degree.best->plan) : planner::operatorPlanFile(model, cluster, options, result);
  if (!plan) return fail(plan.error());
  std::string command = "colo-plan autoparallel";
  for (const auto& a : argv) command += " " + a;
  // The degree-level plan carries its predictions and provenance as search --out writes them.
  if (degreeFaster) planner::annotate(*plan, degree.best->evaluation, command, "");
  plan->provenance.toolVersion = kVersion;
  plan->provenance.modelHash = contentHash(plan->model.toJson());
  plan->provenance.clusterHash = contentHash(clusterToJson(plan->cluster));
  plan->provenance.command = command;
  return writeJsonFileAtomic(file, planToJson(*plan));
}

Json autoParallelJson(const planner::AutoParallelResult& result, const DegreeBest& degree, bool degreeFaster, bool searched) {
  Json j = result.toJson();
  if (searched && !degree.best) {
    j["degree_search"] = {{"step_time_s", nullptr}, {"plan", nullptr}, {"faster_than_joint", false}, {"why", degree.why}};
  }
  if (degree.best) {
    j["degree_search"] = {{"step_time_s", degree.best->evaluation.stepSeconds},
                          {"plan", planToJson(degree.best->plan)},
                          {"outside_operator_space", degree.outside},
                          {"faster_than_joint", degreeFaster}};
  }
  return j;
}

void printAutoParallel(const Model& model, const ClusterSpec& cluster, std::int64_t gbs, const planner::AutoParallelResult& result,
                       const DegreeBest* degree, bool explain, std::ostream& out) {
  out << "colo-plan autoparallel: " << model.name() << " on " << clusterLabel(cluster) << ", global batch " << gbs
      << ", budget " << formatBytes(result.joint.budgetBytes) << " per GPU\n";
  char buf[160];
  std::snprintf(buf, sizeof buf, "solved in %.2f s: %lld block solves, %lld layout conversions costed, %lld candidates\n",
                result.solveSeconds, static_cast<long long>(result.blockSolves),
                static_cast<long long>(result.conversionsCached), static_cast<long long>(result.candidates));
  out << buf;
  const auto& st = result.stats;
  out << st.generated << " layouts (stages x copies x mesh x micro-batch) generated, " << st.prunedTotal() << " pruned, " << st.costed
      << " solved, " << st.feasible << " fit" << (explain ? "" : " (--explain: pruned by rule)") << "\n";
  if (explain) out << st.prunedText();
  out << "\n";
  printSummary(result, out);
  if (degree) printDegreeComparison(result, *degree, out);
  out << "\nper-operator plan (axes: what each mesh axis splits; layouts in Colossal-AI's [b, s, f] notation;\n"
         "time per micro-batch: kernels, collectives and recompute; saved: activations kept per micro-batch)\n";
  printOperatorBlocks(result.joint, out);
}

}  // namespace

int runAutoParallel(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const auto& specs = autoParallelSpecs();
  auto args = Args::parse(argv, specs);
  if (!args) return reportError(args.error(), err);
  if (args->has("help")) {
    out << "usage: colo-plan autoparallel --model M --cluster C --gbs G [--mesh 2x8] [--pp P] [--replicas R] [--vpp V] [--memory-gib G] [--json]\n\n"
           "Gives every operator its own sharding on a device mesh, and chooses which activations to keep,\n"
           "recompute or offload and how much of the optimizer states and weights to offload in the same solve,\n"
           "under the memory budget; prints the plan beside Megatron's column/row split and a table per\n"
           "distinct layer.\n\n"
        << describeOptions(specs);
    return 0;
  }
  auto mc = loadModelAndCluster(*args);
  if (!mc) return reportError(mc.error(), err);
  auto& [model, cluster] = *mc;
  auto options = autoParallelOptions(*args, cluster, model.numLayers());
  if (!options) return reportError(options.error(), err);
  if (auto writable = checkOutputPath(*args, "out"); !writable) return reportError(writable.error(), err);
  for (const auto v : options->virtualStages) {
    if (model.numLayers() % v != 0) {
      return reportError(Error::badInput("--vpp " + std::to_string(v) + ": chunks per stage must divide the model's " +
                                         std::to_string(model.numLayers()) + " layers"),
                         err);
    }
  }
  StderrProgress progress(err);
  if (!args->has("json")) options->progress = &progress;
  auto result = planner::autoParallel(model, cluster, *options);
  if (!result) return reportError(result.error(), err);
  // The degree-level search's best beside it: autoparallel never recommends a slower plan than it.
  const bool solverOnly = args->has("solver-only");
  DegreeBest degree = solverOnly ? DegreeBest{} : degreeBest(model, cluster, *options);
  degree.layoutFixed = args->has("mesh") || args->has("pp") || args->has("replicas");
  const bool degreeFaster = degree.best && degree.best->evaluation.stepSeconds < result->joint.stepSeconds;
  // The degree-level search is not held to the layout the user fixed: --out keeps theirs.
  const bool writeDegree = degreeFaster && !degree.layoutFixed;
  const auto file = args->value("out");
  if (args->has("json")) {
    out << autoParallelJson(*result, degree, degreeFaster, !solverOnly).dump(2) << "\n";
  } else {
    printAutoParallel(model, cluster, options->globalBatchSize, *result, solverOnly ? nullptr : &degree, args->has("explain"), out);
  }
  if (file) {
    if (auto written = writeAutoParallelPlan(*file, model, cluster, *options, *result, degree, writeDegree, argv); !written) {
      return reportError(written.error(), err);
    }
  }
  if (file && !args->has("json")) {
    if (writeDegree) {
      out << "\nwrote " << *file << ": the degree-level search's plan (faster than the joint solve)";
    } else {
      out << "\nwrote " << *file << (result->joint.runnable ? " (colo-run runs it: " + result->joint.expressedAs + ")"
                                                               : " (simulation-only; its degree fields hold Megatron's split)");
    }
    out << "; `colo-plan evaluate --plan " << *file << "` re-costs it\n";
  }
  return 0;
}

}  // namespace colo::app
