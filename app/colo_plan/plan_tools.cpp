// colo-plan compare, check and export: a plan against an expert baseline, a plan as a CI gate, and a plan
// as the settings of other tools.
#include <cmath>
#include <fstream>
#include <iostream>

#include "args.h"
#include "colo/core/runnable.h"
#include "inputs.h"
#include "colo/core/library.h"
#include "colo/core/units.h"
#include "colo/planner/autoparallel.h"
#include "colo/planner/baseline.h"
#include "colo/planner/export.h"
#include "colo/planner/export_check.h"
#include "colo/planner/search.h"
#include "commands.h"
#include "text_table.h"

namespace colo::app {
namespace {

Json side(const Plan& p, const costmodel::Evaluation& e, const std::string& rules) {
  Json j = e.toJson();
  j.erase("stages");
  j["configuration"] = {{"tp", p.parallel.tp}, {"pp", p.parallel.pp}, {"dp", p.parallel.dp}, {"cp", p.parallel.cp},
                        {"vpp", p.parallel.virtualStages}, {"mbs", p.microBatchSize}, {"zero", p.zeroStage},
                        {"schedule", toString(p.schedule)}};
  j["how_chosen"] = rules;
  return j;
}

}  // namespace

int runCompare(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  std::vector<OptionSpec> specs{
      {"model", "M", "model: library name or file"},
      {"cluster", "C", "cluster: library name or file"},
      {"gpus", "N", "scale the cluster to N GPUs"},
      {"gbs", "G", "global batch size (required)"},
      {"seq-len", "S", "tokens per sample"},
      {"baseline", "B", "megatron (default), zero3 or ddp"},
      {"max-memory-fraction", "F", "memory budget as a share of GPU memory (default 0.95)"},
      {"precision", "P", "bf16, fp16, fp8, fp4 (Blackwell), fp32 or tf32 (fp32 states, TF32 matmuls) (default: bf16, or fp16 on GPUs without bf16)"},
      {"json", "", "print one JSON object"},
      {"help", "", "show this help"}};
  for (auto& o : budgetOptions()) specs.push_back(std::move(o));
  auto args = Args::parse(argv, specs);
  if (!args) return reportError(args.error(), err);
  if (args->has("help")) {
    out << "usage: colo-plan compare --model M --cluster C --gbs G [--seq-len S] [--baseline megatron|zero3|ddp] [--json]\n\n"
           "Puts the configuration an expert would set by the published rules beside colo's best plan.\n\n"
        << describeOptions(specs);
    return 0;
  }
  auto mc = loadModelAndCluster(*args);
  if (!mc) return reportError(mc.error(), err);
  if (!args->has("gbs")) return reportError(Error::badInput("missing --gbs"), err);
  auto gbs = args->positiveInteger("gbs", 0);
  auto seq = args->positiveInteger("seq-len", 0);
  if (!gbs) return reportError(gbs.error(), err);
  if (!seq) return reportError(seq.error(), err);
  auto baselineKind = planner::parseBaseline(args->value("baseline", "megatron"));
  if (!baselineKind) return reportError(Error::badInput("--baseline: " + baselineKind.error().message), err);
  auto precision = precisionOption(*args, &mc->second);
  if (!precision) return reportError(precision.error(), err);
  auto fraction = args->number("max-memory-fraction", 0.95, kFractionOfMemory);
  if (!fraction) return reportError(fraction.error(), err);

  auto budget = budgetOption(*args);
  if (!budget) return reportError(budget.error(), err);
  auto& [model, cluster] = *mc;
  auto baseline = planner::baselinePlan(*baselineKind, model, cluster, *gbs, *seq, *precision, *fraction);
  if (!baseline) return reportError(baseline.error(), err);
  planner::SearchOptions options;
  options.globalBatchSize = *gbs;
  options.seqLen = *seq;
  options.precision = *precision;
  options.maxMemoryFraction = *fraction;
  options.topK = 1;
  auto found = planner::search(model, cluster, options);
  if (!found) return reportError(found.error(), err);

  if (args->has("json")) {
    Json j;
    j["baseline"] = side(baseline->plan, baseline->evaluation, baseline->rules);
    j["baseline"]["name"] = planner::toString(*baselineKind);
    if (budget->enabled()) {
      j["baseline"]["training"] = planner::trainingCost(baseline->plan, baseline->evaluation, *budget).toJson();
    }
    if (found->feasible()) {
      const auto& best = found->top.front();
      j["colo"] = side(best.plan, best.evaluation, "colo-plan search (fastest that fits)");
      j["differences"] = planner::planDifferences(baseline->plan, best.plan);
      j["speedup"] = baseline->evaluation.stepSeconds / best.evaluation.stepSeconds;
      if (budget->enabled()) j["colo"]["training"] = planner::trainingCost(best.plan, best.evaluation, *budget).toJson();
    } else {
      j["colo"] = nullptr;
      j["infeasible_reason"] = found->infeasibleReason;
    }
    out << j.dump(2) << "\n";
    return 0;
  }
  const auto& b = baseline->evaluation;
  TextTable t({"", planner::toString(*baselineKind) + " baseline", "colo best"}, {false, true, true});
  auto col = [&](const char* name, const std::string& x, const std::string& y) { t.addRow({name, x, y}); };
  const bool have = found->feasible();
  const auto* best = have ? &found->top.front() : nullptr;
  auto conf = [](const Plan& p) {
    return "tp" + std::to_string(p.parallel.tp) + " pp" + std::to_string(p.parallel.pp) + " dp" + std::to_string(p.parallel.dp) +
           (p.parallel.cp > 1 ? " cp" + std::to_string(p.parallel.cp) : "") + (p.parallel.ep > 1 ? " ep" + std::to_string(p.parallel.ep) : "") +
           (p.parallel.virtualStages > 1 ? " vpp" + std::to_string(p.parallel.virtualStages) : "") + " mbs" +
           std::to_string(p.microBatchSize) + " zero" + std::to_string(p.zeroStage);
  };
  col("configuration", conf(baseline->plan), have ? conf(best->plan) : "-");
  col("step time", formatFixed(b.stepSeconds, 3) + " s", have ? formatFixed(best->evaluation.stepSeconds, 3) + " s" : "-");
  col("tokens/s", formatCount(b.tokensPerSecond), have ? formatCount(best->evaluation.tokensPerSecond) : "-");
  col("MFU", formatFixed(100 * b.mfu, 1) + "%", have ? formatFixed(100 * best->evaluation.mfu, 1) + "%" : "-");
  col("peak memory", formatBytes(b.peakMemoryBytes), have ? formatBytes(best->evaluation.peakMemoryBytes) : "-");
  col("fits", b.fits ? "yes" : "NO", have ? "yes" : "-");
  col("bubble", formatFixed(100 * b.bubbleFraction, 1) + "%", have ? formatFixed(100 * best->evaluation.bubbleFraction, 1) + "%" : "-");
  if (budget->enabled()) {
    const auto cb = planner::trainingCost(baseline->plan, b, *budget);
    const auto cc = have ? planner::trainingCost(best->plan, best->evaluation, *budget) : planner::TrainingCost{};
    col("days to train", formatFixed(cb.days, 1), have ? formatFixed(cc.days, 1) : "-");
    col("GPU-hours", formatCount(cb.gpuHours), have ? formatCount(cc.gpuHours) : "-");
    if (budget->pricePerGpuHour > 0) col("cost", planner::formatDollars(cb.dollars), have ? planner::formatDollars(cc.dollars) : "-");
    if (budget->deadlineDays > 0) col("meets deadline", cb.meetsDeadline ? "yes" : "NO", have ? (cc.meetsDeadline ? "yes" : "NO") : "-");
  }
  out << model.name() << " on " << clusterLabel(cluster) << ", gbs " << *gbs << "\n"
      << t.render("  ");
  out << "baseline: " << baseline->rules << "\n";
  if (have) {
    out << "colo is " << formatFixed(b.stepSeconds / best->evaluation.stepSeconds, 2) << "x the baseline's speed; what differs: "
        << planner::planDifferences(baseline->plan, best->plan) << "\n";
    out << publishedRunsOf(best->plan);
  } else {
    out << "colo: " << found->infeasibleReason << "\n";
  }
  return 0;
}

namespace {

// What check judges: the plan's evaluation, or for a per-operator plan (colo-plan autoparallel --out)
// its operator-level re-costing, as evaluate --plan prints it (the degree fields are only its
// equivalent or Megatron's split beside it). Its MFU is the degree form's model FLOPs over its step.
struct CheckFigures {
  double stepSeconds = 0, mfu = 0, peakMemoryBytes = 0, gpuMemoryBytes = 0;
  bool fits = false;
  bool operatorLevel = false;
  bool simulationOnly = false;  // a per-operator plan colo-run cannot run
};

Result<CheckFigures> checkFigures(const Plan& plan, const std::string& file) {
  auto ev = costmodel::evaluatePlan(plan);
  if (!ev) return fail(ev.error());
  CheckFigures f{ev->stepSeconds, ev->mfu, ev->peakMemoryBytes, ev->gpuMemoryBytes, ev->fits, false};
  if (!plan.operatorPlan.is_object()) return f;
  auto op = planner::evaluateOperatorPlan(plan, file);
  if (!op) return fail(op.error());
  f.mfu = ev->mfu * ev->stepSeconds / op->stepSeconds;
  f.stepSeconds = op->stepSeconds;
  f.peakMemoryBytes = op->peakMemoryBytes;
  f.fits = op->fits;  // under its budget (at most the GPU's memory), as evaluate --plan says
  f.operatorLevel = true;
  f.simulationOnly = !op->runnable;
  return f;
}

}  // namespace

int runCheck(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const std::vector<OptionSpec> specs{
      {"plan", "FILE", "the plan to check (required)"},
      {"min-mfu", "X", "fail when the predicted MFU is below X (0..1)"},
      {"max-memory-fraction", "F", "fail when the predicted peak exceeds F of GPU memory"},
      {"max-step-time", "S", "fail when the predicted step time exceeds S seconds"},
      {"help", "", "show this help"}};
  auto args = Args::parse(argv, specs);
  if (!args) return reportError(args.error(), err);
  if (args->has("help")) {
    out << "usage: colo-plan check --plan plan.json [--min-mfu X] [--max-memory-fraction F] [--max-step-time S]\n\n"
           "Re-evaluates a plan and exits 4 when it misses a bound (a regression gate for CI); 0 when it passes.\n\n"
        << describeOptions(specs);
    return 0;
  }
  const auto file = args->value("plan");
  if (!file) return reportError(Error::badInput("missing --plan"), err);
  auto plan = loadPlan(*file);
  if (!plan) return reportError(plan.error(), err);
  auto figures = checkFigures(*plan, *file);
  if (!figures) return reportError(figures.error(), err);
  const CheckFigures* ev = &*figures;
  auto number = [&](const char* name, const NumberRange& range) -> Result<std::optional<double>> {
    if (!args->has(name)) return std::optional<double>{};
    auto v = args->number(name, 0, range);
    if (!v) return fail(v.error());
    return std::optional<double>{*v};
  };
  auto minMfu = number("min-mfu", {0, 1});
  auto maxMem = number("max-memory-fraction", kFractionOfMemory);
  auto maxStep = number("max-step-time", {0, INFINITY, true});
  for (const auto* r : {&minMfu, &maxMem, &maxStep}) {
    if (!*r) return reportError(r->error(), err);
  }
  std::vector<std::string> failures;
  if (*minMfu && ev->mfu < **minMfu) {
    failures.push_back("MFU " + formatFixed(100 * ev->mfu, 1) + "% is below " + formatFixed(100 * **minMfu, 1) + "%");
  }
  const double fraction = ev->peakMemoryBytes / ev->gpuMemoryBytes;
  if (*maxMem && fraction > **maxMem) {
    failures.push_back("peak memory " + formatBytes(ev->peakMemoryBytes) + " is " + formatFixed(100 * fraction, 1) +
                       "% of the GPU, above " + formatFixed(100 * **maxMem, 1) + "%");
  }
  if (*maxStep && ev->stepSeconds > **maxStep) {
    failures.push_back("step time " + formatFixed(ev->stepSeconds, 3) + " s exceeds " + formatFixed(**maxStep, 3) + " s");
  }
  if (!ev->fits) failures.push_back("the plan does not fit in GPU memory");
  out << *file << ": " << (ev->operatorLevel ? (ev->simulationOnly ? "per-operator plan (simulation-only), " : "per-operator plan, ") : "") << "step " << formatFixed(ev->stepSeconds, 3) << " s, MFU " << formatFixed(100 * ev->mfu, 1) << "%, peak "
      << formatBytes(ev->peakMemoryBytes) << " (" << formatFixed(100 * fraction, 1) << "% of GPU memory)\n";
  out << publishedRunsOf(*plan);
  if (failures.empty()) {
    out << "check passed\n";
    return 0;
  }
  for (const auto& f : failures) err << "colo-plan: check failed: " << f << "\n";
  return 4;
}

int runExport(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const std::vector<OptionSpec> specs{
      {"plan", "FILE", "the plan to export (required)"},
      {"format", "F", "megatron, deepspeed, colossalai, torchrun or slurm (required)"},
      {"out", "FILE", "write to FILE instead of standard output"},
      {"help", "", "show this help"}};
  auto args = Args::parse(argv, specs);
  if (!args) return reportError(args.error(), err);
  if (args->has("help")) {
    out << "usage: colo-plan export --plan plan.json --format megatron|deepspeed|colossalai|torchrun|slurm [--out FILE]\n\n"
        << describeOptions(specs);
    return 0;
  }
  const auto file = args->value("plan");
  const auto formatName = args->value("format");
  if (!file) return reportError(Error::badInput("missing --plan"), err);
  if (!formatName) return reportError(Error::badInput("missing --format"), err);
  auto format = planner::parseExportFormat(*formatName);
  if (!format) return reportError(Error::badInput("--format: " + format.error().message), err);
  auto plan = loadPlan(*file);
  if (!plan) return reportError(plan.error(), err);
  // A per-operator plan goes out as its degree fields: the tools take degrees, not per-operator shardings.
  if (plan->operatorPlan.is_object()) {
    if (auto op = planner::evaluateOperatorPlan(*plan, *file); !op) return reportError(op.error(), err);
  }
  // torchrun and SLURM launch colo-run on the plan file itself: a plan it refuses (by the same check) would
  // stop on every rank, so no such launch is written.
  if (*format == planner::ExportFormat::kTorchrun || *format == planner::ExportFormat::kSlurm) {
    if (auto runs = checkRunnable(*plan); !runs) {
      return reportError(Error::badInput("colo-run cannot run it (" + runs.error().message + "), so a " + *formatName +
                                             " launch of it would stop on every rank" +
                                             (plan->operatorPlan.is_object() ? " (--format megatron writes Megatron's split beside it)" : ""),
                                         *file),
                         err);
    }
  }
  auto text = planner::exportPlan(*plan, *format, *file);
  if (!text) return reportError(text.error(), err);
  if (plan->operatorPlan.is_object()) {
    auto op = planner::evaluateOperatorPlan(*plan, *file);
    auto ev = costmodel::evaluatePlan(*plan);
    if (op && ev) {
      err << "colo-plan: note: " << *file << " is a per-operator plan (" << formatFixed(op->stepSeconds, 3)
          << " s); the export writes its degree fields (" << (op->runnable ? "its equivalent" : "Megatron's split beside it")
          << ", " << formatFixed(ev->stepSeconds, 3) << " s by colo's model)\n";
    }
  }
  // Megatron-LM's arguments and DeepSpeed's config are checked against the tools' schemas
  // (data/export-schemas/) before they are written: an export the tool would refuse is not written.
  auto problems = planner::checkExport(*plan, *format, *text);
  if (!problems) return reportError(problems.error(), err);
  if (!problems->empty()) {
    std::string why;
    for (const auto& pr : *problems) why += (why.empty() ? "" : "; ") + pr.rule + ": " + pr.message;
    return reportError(Error::badInput("the tool would refuse this " + *formatName + " export (" + why + ")", *file), err);
  }
  if (const auto target = args->value("out")) {
    std::ofstream f(*target, std::ios::binary | std::ios::trunc);
    if (!(f << *text)) return reportError(Error::io("cannot write", *target), err);
    return 0;
  }
  out << *text;
  return 0;
}

}  // namespace colo::app
