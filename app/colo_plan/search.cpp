// colo-plan search: the fastest plans that fit, with reasons, the Pareto front and the search's own figures.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "colo/core/runnable.h"
#include "args.h"
#include "inputs.h"
#include "colo/core/library.h"
#include "colo/core/units.h"
#include "colo/costmodel/error_band.h"
#include "colo/planner/autoparallel.h"
#include "colo/planner/baseline.h"
#include "colo/planner/budget.h"
#include "colo/planner/search.h"
#include "commands.h"
#include "text_table.h"

namespace colo::app {
namespace {

const std::vector<OptionSpec>& searchOptions() {
  static const std::vector<OptionSpec> specs = [] {
    std::vector<OptionSpec> own{
      {"model", "M", "model: library name or file"},
      {"cluster", "C", "cluster: library name or file"},
      {"gpus", "N", "scale the cluster to N GPUs; N1,N2,.. searches each size and ranks them together"},
      {"objective", "O", "rank by time (default: step time) or cost (GPU-hours, dollars with a price)"},
      {"from-plan", "FILE", "start from a saved or imported plan: its model, cluster, batch and precision, and show how much faster colo's best is"},
      {"gbs", "G", "global batch size, samples per step (required)"},
      {"seq-len", "S", "tokens per sample (default: the model's)"},
      {"top", "K", "how many plans to list (default 10)"},
      {"fix", "K=V,..", "hold settings fixed: tp, pp, dp, cp, ep, etp (the experts' tp), vpp, mbs, zero (e.g. tp=8,pp=4)"},
      {"max-memory-fraction", "F", "a plan fits when its peak is at most F of GPU memory (default 0.95)"},
      {"precision", "P", "bf16, fp16, fp8, fp4 (Blackwell), fp32 or tf32 (fp32 states, TF32 matmuls) (default: bf16, or fp16 on GPUs without bf16)"},
      {"attention", "A", "flash (default: the GPU's fastest fused kernels), flash2 (FlashAttention-2's, PyTorch SDPA) or unfused"},
      {"fused-cross-entropy", "", "the loss reads the 16-bit logits in one kernel, without an fp32 copy (flash-attn's, LLM Foundry's default, Liger)"},
      {"cross-entropy-in-place", "", "with --fused-cross-entropy: the loss writes the logits' gradient into them (Transformer Engine's, Megatron's --cross-entropy-fusion-impl te)"},
      {"unfused-kernels", "OPS", "ops the framework runs as PyTorch's eager decompositions, not one fused kernel each: all (torchtitan without compile, Hugging Face models), or a comma list of rmsnorm, final_rmsnorm (the norm after the last block: torchtitan's compiled runs), rotary, gated_activation (default: none, as Megatron, Transformer Engine and torch.compile)"},
      {"torch-cross-entropy", "", "the loss is PyTorch's F.cross_entropy on fp32 logits (torchtitan, Hugging Face): its backward holds two fp32 gradients of the logits beside the saved log-probabilities"},
      {"moe-dispatcher", "D", "MoE token dispatch of every candidate: alltoall (default), deepep or hybridep (Megatron-Core's flex dispatcher: one network copy per token and node, forwarded over NVLink); colo-run runs alltoall only"},
      {"recompute-modules", "M", "what the search's selective recompute re-runs (Megatron-Core's --recompute-modules): a comma list of core_attn (the default), moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts"},
      {"native-fused-cross-entropy", "", "the loss is Megatron-Core's native fusion of its vocab-parallel cross-entropy (--cross-entropy-loss-fusion; Megatron-Bridge's default): its fp32 passes compiled into fewer kernels"},
      {"te-dummy-wgrads", "", "Transformer Engine (2.3 on) keeps a placeholder weight gradient per distinct weight shape (Megatron-Core, Megatron-Bridge)"},
      {"per-parameter-gathers", "", "ZeRO-3 gathers and reduce-scatters one parameter tensor at a time, synchronously (DeepSpeed v0.3.13 to v0.5.4)"},
      {"zero-bubble", "", "also consider the zero-bubble (ZB-H1) schedule"},
      {"no-offload", "", "never offload optimizer states, parameters or activations to the host"},
      {"optimizer", "O", "adamw (default), lamb or lars: the optimizer every candidate trains with"},
      {"runnable", "", "only plans colo-run executes (the default with --out when colo-run can train the model, without --from-plan or a flex --moe-dispatcher)"},
      {"any", "", "with --out: rank every plan, also those colo-run cannot execute (for export to other tools)"},
      {"costdb", "DB", "SQLite cost database of measured GEMMs"},
      {"calibration", "FILE", "scales fitted on your own runs of this cluster (colo-profile calibrate)"},
      {"out", "FILE", "write the best plan as a self-contained colo.plan/1 file"},
      {"json", "", "print one JSON object"},
      {"explain", "", "also print pruning by rule and the Pareto front"},
      {"fail-if-infeasible", "", "exit 3 when no plan fits"},
      {"quiet", "", "no progress on stderr"},
      {"help", "", "show this help"},
    };
    for (auto& o : budgetOptions()) own.push_back(std::move(o));
    return own;
  }();
  return specs;
}

class StderrProgress : public ProgressSink {
 public:
  void progress(double fraction, std::string_view what) override {
    const int pct = static_cast<int>(fraction * 100);
    if (pct == m_last) return;
    m_last = pct;
    std::cerr << "\rsearch: " << what << " " << pct << "%   " << (fraction >= 1.0 ? "\n" : "") << std::flush;
  }

 private:
  int m_last = -1;
};

// What one search needs beyond the options: the database and calibration it was given.
struct SearchInputs {
  planner::SearchOptions options;
  std::optional<costmodel::CostDatabase> costDb;
  std::optional<costmodel::RunCalibration> calibration;
  planner::TrainingBudget budget;
  planner::Objective objective = planner::Objective::kTime;
};

Result<void> readSearchInputs(const Args& args, const Model& model, const ClusterSpec& cluster, SearchInputs& in,
                              const Plan* from) {
  planner::SearchOptions& options = in.options;
  auto gbs = args.positiveInteger("gbs", from ? from->globalBatchSize : 0);
  if (!gbs) return fail(gbs.error());
  options.globalBatchSize = *gbs;
  auto seq = args.positiveInteger("seq-len", from ? from->seqLen : 0);
  if (!seq) return fail(seq.error());
  options.seqLen = *seq > 0 ? *seq : model.defaultSeqLen();
  auto top = args.positiveInteger("top", 10);
  if (!top) return fail(top.error());
  options.topK = static_cast<std::size_t>(*top);
  if (const auto fix = args.value("fix")) {
    auto fixed = planner::parseFixed(*fix);
    if (!fixed) return fail(fixed.error());
    options.fixed = *fixed;
  }
  auto fraction = args.number("max-memory-fraction", options.maxMemoryFraction, kFractionOfMemory);
  if (!fraction) return fail(fraction.error());
  options.maxMemoryFraction = *fraction;
  auto precision = precisionOption(args, &cluster);
  if (!precision) return fail(precision.error());
  options.precision = from && !args.has("precision") ? from->precision : *precision;
  const std::string attention = args.value("attention", "flash");
  Execution named;
  if (!setAttention(named, attention)) {
    return fail(Error::badInput("--attention: expected flash, flash2 or unfused, got \"" + attention + "\""));
  }
  options.flashAttention = named.flashAttention;
  // From the user's plan: its framework's execution (overlaps, gradient accumulation, FSDP's fp32
  // parameters, host time per op, attention kernels) carries over to every candidate, so that the
  // comparison is like with like.
  if (from) options.execution = from->execution;
  if (from && !args.has("attention")) {
    options.flashAttention = from->execution.flashAttention;
  } else {
    options.execution.flashAttention2 = named.flashAttention2;
  }
  if (args.has("fused-cross-entropy")) options.execution.fusedCrossEntropy = true;
  if (args.has("te-dummy-wgrads")) options.execution.teDummyWgrads = true;
  if (auto unfused = args.value("unfused-kernels")) {
    auto parsed = parseUnfusedKernels(*unfused);
    if (!parsed) return fail(Error::badInput("--unfused-kernels: " + parsed.error().message));
    options.execution.unfused = *parsed;
  }
  if (auto modules = args.value("recompute-modules")) {
    auto parsed = parseRecomputeModules(*modules);
    if (!parsed) return fail(Error::badInput("--recompute-modules: " + parsed.error().message));
    // Megatron-Core's rules, said once here rather than as every candidate refused.
    if (parsed->moeAct && !(model.spec && model.spec->moe.enabled())) {
      return fail(Error::badInput("--recompute-modules: moe_act re-runs the experts' activation and " + model.name() +
                                  " has no mixture of experts"));
    }
    if (parsed->mlaUpProj && !(model.spec && model.spec->mla.enabled())) {
      return fail(Error::badInput("--recompute-modules: mla_up_proj re-runs latent attention's up-projections and " +
                                  model.name() + " has no multi-head latent attention"));
    }
    options.execution.recomputeModules = *parsed;
    options.recomputeModulesChosen = true;
  }
  if (const auto dispatcher = args.value("moe-dispatcher")) {
    auto parsed = parseMoeDispatcher(*dispatcher);
    if (!parsed) return fail(Error::badInput("--moe-dispatcher: " + parsed.error().message));
    if (*parsed != MoeDispatcher::kAllToAll && !(model.spec && model.spec->moe.enabled())) {
      return fail(Error::badInput("--moe-dispatcher " + *dispatcher + ": " + model.name() + " has no mixture of experts"));
    }
    options.execution.moeDispatcher = *parsed;
  }
  if (args.has("per-parameter-gathers")) options.execution.perParameterGathers = true;
  if (args.has("cross-entropy-in-place")) options.execution.crossEntropyInPlace = true;
  if (args.has("torch-cross-entropy")) options.execution.torchCrossEntropy = true;
  if (args.has("native-fused-cross-entropy")) options.execution.nativeFusedCrossEntropy = true;
  options.allowZeroBubble = args.has("zero-bubble");
  options.allowOffload = !args.has("no-offload");
  if (auto optimizer = parseOptimizer(args.value("optimizer", from ? toString(from->optimizer) : "adamw")); !optimizer) {
    return fail(Error::badInput("--optimizer: " + optimizer.error().message));
  } else {
    options.optimizer = *optimizer;
  }
  // A saved plan is what colo-run trains: rank what it can execute, unless asked for every plan or the
  // model is one colo-run cannot train (then the plan is for another tool).
  if (args.has("runnable") && args.has("any")) return fail(Error::badInput("--runnable and --any: choose one"));
  // A dispatcher colo-run does not run asks for plans for another tool, as --any does.
  const bool otherDispatcher = options.execution.moeDispatcher != MoeDispatcher::kAllToAll;
  if (args.has("runnable") && otherDispatcher) {
    const std::string source = args.has("moe-dispatcher") ? "--moe-dispatcher " : "the plan's execution.moe_dispatcher ";
    return fail(Error::badInput("--runnable and " + source + toString(options.execution.moeDispatcher) +
                                ": colo-run dispatches tokens with plain all-to-alls; choose one"));
  }
  options.runnableOnly = args.has("runnable") ||
                         (args.has("out") && !args.has("any") && !otherDispatcher && !from && checkRunnableModel(model).has_value());
  if (const auto db = args.value("costdb")) {
    auto file = resolveLibraryFile(LibraryKind::kCostDbs, *db);  // a path, or a shipped database by name
    if (!file) return fail(Error::badInput("--costdb: " + file.error().message));
    auto opened = costmodel::CostDatabase::open(*file);
    if (!opened) return fail(opened.error());
    in.costDb = std::move(*opened);
  }
  if (const auto file = args.value("calibration")) {
    auto loaded = loadCalibration(*file, cluster);
    if (!loaded) return fail(loaded.error());
    in.calibration = *loaded;
  }
  auto budget = budgetOption(args);
  if (!budget) return fail(budget.error());
  in.budget = *budget;
  auto objective = planner::parseObjective(args.value("objective", "time"));
  if (!objective) return fail(objective.error());
  in.objective = *objective;
  return {};
}

// The ranked table: one row a plan, with days, GPU-hours and dollars under a budget and the GPU count
// when several cluster sizes were searched.
std::string renderCandidates(const std::vector<planner::Candidate>& list, bool ranked, const SearchInputs& in, bool showGpus) {
  std::vector<std::string> head{"#", "tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "zero", "recompute", "stages", "step", "likely",
                                "tokens/s", "MFU", "peak mem"};
  std::vector<bool> right{true, true, true, true, true, true, true, true, true, false, false, true, false, true, true, true};
  if (showGpus) {
    head.insert(head.begin() + 1, "gpus");
    right.insert(right.begin() + 1, true);
  }
  const bool budget = in.budget.enabled();
  const bool price = in.budget.pricePerGpuHour > 0;
  if (budget) {
    for (const char* h : {"days", "GPU-h"}) {
      head.emplace_back(h);
      right.push_back(true);
    }
    if (price) {
      head.emplace_back("cost");
      right.push_back(true);
    }
  }
  head.emplace_back("why");
  right.push_back(false);
  TextTable t(head, right);
  const std::size_t firstHidden = showGpus ? 2 : 1;  // tp .. stages identify a row
  int i = 0;
  std::map<std::string, std::pair<int, const planner::Candidate*>> shown;  // visible columns -> first row
  int rowNumber = 0;
  for (const auto& c : list) {
    ++rowNumber;
    const auto& p = c.plan;
    std::string rec = planner::recomputeSummary(p);
    if (p.offload.optimizerFraction > 0) rec += p.offload.target == OffloadTarget::kNvme ? " +nvme" : " +offload";
    // The likely range of the measured step around the prediction (validated runs most like it), and a
    // fit that the top of the memory band would break.
    const costmodel::PredictionBands bands = in.calibration ? costmodel::PredictionBands{} : costmodel::bandsOf(p, c.evaluation);
    const std::string likely = in.calibration ? "calibrated"
                               : bands.time   ? bands.time->describe().substr(0, bands.time->describe().find(','))
                                              : "-";
    std::string memory = formatBytes(c.evaluation.peakMemoryBytes);
    if (bands.memoryAtRisk(c.evaluation)) memory += " AT RISK";
    std::vector<std::string> cells{ranked ? std::to_string(++i) : "-", std::to_string(p.parallel.tp), std::to_string(p.parallel.pp),
                                   std::to_string(p.parallel.dp),
                                   std::to_string(p.parallel.cp) +
                                       (p.parallel.cp > 1 && p.execution.cpCommType != CpCommType::kP2p
                                            ? " " + cpExchangeLabel(p.execution.cpCommType, p.execution.hierarchicalCpSizes)
                                            : ""),
                                   std::to_string(p.parallel.ep) + (p.parallel.etp > 0 ? " (etp " + std::to_string(p.parallel.etp) + ")" : ""),
                                   std::to_string(p.parallel.virtualStages), std::to_string(p.microBatchSize),
                                   std::to_string(p.zeroStage), rec, planner::stagesSummary(p),
                                   formatFixed(c.evaluation.stepSeconds, 3) + " s", likely,
                                   formatCount(c.evaluation.tokensPerSecond), formatFixed(100 * c.evaluation.mfu, 1) + "%", memory};
    if (showGpus) cells.insert(cells.begin() + 1, std::to_string(p.cluster.totalGpus()));
    std::string visible;
    for (std::size_t k = firstHidden; k < firstHidden + 10; ++k) visible += cells[k] + "|";
    if (budget) {
      const auto cost = planner::trainingCost(p, c.evaluation, in.budget);
      cells.push_back(formatFixed(cost.days, cost.days < 10 ? 2 : 1) + (cost.meetsDeadline ? "" : " LATE"));
      cells.push_back(formatCount(cost.gpuHours));
      if (price) cells.push_back(planner::formatDollars(cost.dollars));
    }
    // Settings no column shows (rank layout, schedule, sequence parallelism) can make two rows read
    // alike: the later one says what sets it apart.
    std::string why = c.reason;
    if (const auto seen = shown.find(visible); seen != shown.end()) {
      why += std::string("; unlike ") + (ranked ? "#" : "row ") + std::to_string(seen->second.first) + ": " +
             planner::planDifferences(seen->second.second->plan, p);
    } else {
      shown.emplace(visible, std::pair{rowNumber, &c});
    }
    cells.push_back(why);
    t.addRow(cells);
  }
  return t.render("  ");
}

std::string searchHeader(const Model& model, const ClusterSpec& cluster, const SearchInputs& in, const planner::SearchResult& r,
                         bool precisionGiven) {
  const auto& st = r.stats;
  const std::int64_t pruned = st.prunedTotal();
  std::ostringstream out;
  out << "search    " << model.name() << " on " << clusterLabel(cluster) << ", gbs " << in.options.globalBatchSize << " x "
      << in.options.seqLen << " tokens, " << toString(in.options.precision)
      << (precisionGiven || cluster.gpu.hasPeak(DType::kBf16) ? "" : " (this GPU has no bf16)");
  if (in.options.execution.unfused.any()) out << ", eager " << unfusedKernelsLabel(in.options.execution.unfused);
  if (in.options.execution.moeDispatcher != MoeDispatcher::kAllToAll) {
    out << ", " << toString(in.options.execution.moeDispatcher) << " MoE dispatch";
  }
  if (!in.options.execution.recomputeModules.isDefault()) {
    out << ", selective recompute of " << recomputeModulesLabel(in.options.execution.recomputeModules);
  }
  out << ", memory budget "
      << formatFixed(100 * in.options.maxMemoryFraction, 0) << "% of " << formatBytes(cluster.gpu.memoryBytes)
      << (in.options.runnableOnly ? ", only plans colo-run executes (--any: all)" : "") << "\n";
  out << "          " << st.generated << " configurations generated, " << pruned << " pruned, " << st.costed << " costed ("
      << st.evaluated << " evaluations), " << st.feasible << " fit; " << formatFixed(st.seconds, 3) << " s ("
      << formatCount(static_cast<double>(st.generated) / std::max(st.seconds, 1e-9)) << " candidates/s)\n";
  return out.str();
}

// Orders plans found on one or several cluster sizes by the objective: wall-clock time (step time: the
// global batch is the same everywhere) or cost (GPU-seconds per step, as GPU-hours and dollars are);
// with a deadline, plans that miss it come last.
void rankByObjective(std::vector<planner::Candidate>& list, const SearchInputs& in) {
  auto key = [&](const planner::Candidate& c) {
    const double gpus = static_cast<double>(c.plan.cluster.totalGpus());
    const bool late = in.budget.enabled() && !planner::trainingCost(c.plan, c.evaluation, in.budget).meetsDeadline;
    return std::pair{late, in.objective == planner::Objective::kCost ? c.evaluation.stepSeconds * gpus : c.evaluation.stepSeconds};
  };
  std::stable_sort(list.begin(), list.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
}

// How the user's plan compares with colo's best.
// A per-operator plan (colo-plan autoparallel --out) is judged as evaluate --plan re-costs it, not by
// its degree fields (its degree-level equivalent, or Megatron's split beside a simulation-only plan).
std::string fromPlanLine(const Plan& from, const std::string& file, const planner::Candidate& best, const SearchInputs& in) {
  auto evaluated = costmodel::evaluatePlan(from, in.costDb ? &*in.costDb : nullptr);
  if (!evaluated) return "your plan: " + evaluated.error().message + "\n";
  std::ostringstream out;
  costmodel::Evaluation e = *evaluated;
  std::string kind;
  if (from.operatorPlan.is_object()) {
    auto op = planner::evaluateOperatorPlan(from, file);
    if (!op) return "your plan: " + op.error().message + "\n";
    e.stepSeconds = op->stepSeconds;
    e.peakMemoryBytes = op->peakMemoryBytes;
    e.fits = op->fits;
    kind = " (costed per operator, as evaluate --plan does)";
  }
  const double ratio = e.stepSeconds / best.evaluation.stepSeconds;
  out << "your plan " << from.name << kind << ": " << formatFixed(e.stepSeconds, 3) << " s a step, peak " << formatBytes(e.peakMemoryBytes)
      << (e.fits ? "" : " (DOES NOT FIT)") << "; colo's best (#1) is "
      << (ratio >= 1 ? formatFixed(ratio, 2) + "x as fast" : "slower (" + formatFixed(ratio, 2) + "x its speed)");
  if (in.budget.enabled()) {
    const auto mine = planner::trainingCost(from, e, in.budget);
    const auto theirs = planner::trainingCost(best.plan, best.evaluation, in.budget);
    out << ": " << mine.describe(in.budget) << " -> " << theirs.describe(in.budget);
  }
  out << (kind.empty() ? "; what differs: " : "; what differs from its degree fields: ") << planner::planDifferences(from, best.plan) << "\n";
  return out.str();
}

// The job: --from-plan's model, cluster and batch, or --model and --cluster; the cluster scaled to each
// of several --gpus sizes.
struct SearchJob {
  std::optional<Plan> from;
  std::optional<Model> model;
  std::vector<ClusterSpec> clusters;
};

Result<SearchJob> searchJob(const Args& args) {
  SearchJob job;
  if (const auto file = args.value("from-plan")) {
    for (const char* given : {"model", "cluster"}) {
      if (args.has(given)) return fail(Error::badInput(std::string("--") + given + " cannot be combined with --from-plan (the plan names it)"));
    }
    auto loaded = loadPlan(*file);
    if (!loaded) return fail(loaded.error());
    if (loaded->operatorPlan.is_object()) {
      if (auto op = planner::evaluateOperatorPlan(*loaded, *file); !op) return fail(op.error());
    }
    job.from = std::move(*loaded);
  }
  const auto missingGbs = [] { return Error::badInput("missing --gbs (global batch size, samples per step)"); };
  if (!job.from && !args.has("gbs") && args.has("model") && args.has("cluster")) return fail(missingGbs());
  std::vector<std::int64_t> sizes;
  if (const auto gpus = args.value("gpus"); gpus && gpus->find(',') != std::string::npos) {
    auto parsed = planner::parseGpuCounts(*gpus);
    if (!parsed) return fail(parsed.error());
    sizes = *parsed;
  }
  auto inputs = job.from ? Result<std::pair<Model, ClusterSpec>>(std::pair{job.from->model, job.from->cluster})
                         : loadModelAndCluster(args, /*applyGpus=*/sizes.empty());
  if (!inputs) return fail(inputs.error());
  if (job.from && sizes.empty() && args.has("gpus")) {
    auto gpus = args.positiveInteger("gpus", 0);
    if (!gpus) return fail(gpus.error());
    sizes.push_back(*gpus);
  }
  if (!job.from && !args.has("gbs")) return fail(missingGbs());
  job.model = std::move(inputs->first);
  if (sizes.empty()) job.clusters.push_back(inputs->second);
  for (const auto n : sizes) {
    auto scaled = scaleCluster(inputs->second, n);
    if (!scaled) {
      const std::string& why = scaled.error().message;  // most of scaleCluster's messages name --gpus already
      return fail(Error::badInput(why.starts_with("--gpus") ? why : "--gpus " + std::to_string(n) + ": " + why));
    }
    job.clusters.push_back(std::move(*scaled));
  }
  return job;
}

Json searchJson(const std::vector<planner::SearchResult>& results, const std::vector<planner::Candidate>& ranked,
                const SearchInputs& in) {
  Json j = results.size() == 1 ? results.front().toJson() : Json::object();
  if (results.size() > 1) {
    j["searches"] = Json::array();
    for (const auto& r : results) j["searches"].push_back(r.toJson());
  }
  j["objective"] = in.objective == planner::Objective::kCost ? "cost" : "time";
  if (in.budget.enabled() || results.size() > 1) {
    j["ranked"] = Json::array();
    for (const auto& c : ranked) {
      Json row{{"gpus", c.plan.cluster.totalGpus()}, {"plan", planToJson(c.plan)}, {"step_time_s", c.evaluation.stepSeconds}};
      if (in.budget.enabled()) row["training"] = planner::trainingCost(c.plan, c.evaluation, in.budget).toJson();
      j["ranked"].push_back(row);
    }
  }
  return j;
}

void printSearch(const Args& args, const SearchJob& job, const std::vector<planner::SearchResult>& results,
                 const std::vector<planner::Candidate>& ranked, const SearchInputs& in, std::ostream& out) {
  for (std::size_t k = 0; k < results.size(); ++k) out << searchHeader(*job.model, job.clusters[k], in, results[k], args.has("precision"));
  if (!ranked.empty()) {
    if (in.budget.enabled()) {
      out << "training  " << formatCount(in.budget.trainTokens) << " tokens"
          << (in.budget.pricePerGpuHour > 0 ? " at $" + formatFixed(in.budget.pricePerGpuHour, 2) + "/GPU-hour" : "")
          << (in.budget.deadlineDays > 0 ? ", deadline " + formatFixed(in.budget.deadlineDays, 1) + " days (LATE: a plan that misses it, ranked last)" : "")
          << "\n";
    }
    if (in.costDb) {
      const std::string& device = ranked.front().evaluation.calibration.costDbDevice;
      out << "costdb    " << in.costDb->path()
          << (device.empty() ? " (no device of it matches the cluster's GPU: nothing measured is used)" : " (device \"" + device + "\")") << "\n";
    }
    out << (in.objective == planner::Objective::kCost ? "best plans (cheapest first: GPU-hours)\n" : "best plans (fastest first)\n")
        << renderCandidates(ranked, true, in, job.clusters.size() > 1);
    if (job.from) out << fromPlanLine(*job.from, args.value("from-plan").value_or(""), ranked.front(), in);
    if (const auto file = args.value("out")) out << "wrote the best plan to " << *file << "\n";
  } else {
    for (const auto& r : results) out << "NO FEASIBLE PLAN: " << r.infeasibleReason << "\n";
  }
  if (!args.has("explain")) return;
  for (const auto& r : results) {
    out << r.stats.prunedText();
    if (!r.pareto.empty()) out << "Pareto front (step time vs peak memory)\n" << renderCandidates(r.pareto, false, in, false);
    if (!r.rejected.empty()) out << "closest that do not fit\n" << renderCandidates(r.rejected, false, in, false);
  }
}

}  // namespace

int runSearch(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  auto args = Args::parse(argv, searchOptions());
  if (!args) return reportError(args.error(), err);
  if (args->has("help")) {
    out << "usage: colo-plan search --model M --cluster C [--gpus N|N1,N2,..] --gbs G [--seq-len S] [--top K] [--fix tp=8,..]\n"
           "         [--train-tokens T [--price-per-gpu-hour USD] [--deadline-days D]] [--objective time|cost]\n"
           "         [--max-memory-fraction F] [--costdb DB] [--out plan.json] [--json] [--explain] [--fail-if-infeasible]\n\n"
           "Finds the fastest plans that fit: degrees, micro-batch, virtual stages, ZeRO, offload, per-stage layers and\n"
           "recompute, ranked by predicted step time (or, with --objective cost, by GPU-hours), with the reason for each.\n"
           "Several --gpus sizes are searched each and ranked together; --train-tokens adds days, GPU-hours and dollars.\n\n"
        << describeOptions(searchOptions());
    return 0;
  }
  if (!args->positional().empty()) return reportError(Error::badInput("unexpected argument \"" + args->positional().front() + "\""), err);
  auto job = searchJob(*args);
  if (!job) return reportError(job.error(), err);
  if (auto writable = checkOutputPath(*args, "out"); !writable) return reportError(writable.error(), err);
  const Model& model = *job->model;
  SearchInputs in;
  if (auto read = readSearchInputs(*args, model, job->clusters.front(), in, job->from ? &*job->from : nullptr); !read) {
    return reportError(read.error(), err);
  }
  in.options.costDb = in.costDb ? &*in.costDb : nullptr;
  in.options.calibration = in.calibration ? &*in.calibration : nullptr;

  StderrProgress progress;
  const bool quiet = args->has("quiet") || args->has("json");
  std::vector<planner::SearchResult> results;
  std::vector<planner::Candidate> ranked;
  // Across several sizes, fixed degrees that do not make one size leave that size out (said on stderr);
  // they are an error only when they make none.
  std::vector<ClusterSpec> searched;
  std::optional<Error> unmade;
  for (const auto& cluster : job->clusters) {
    auto result = planner::search(model, cluster, in.options, quiet ? nullptr : &progress);
    if (!result && job->clusters.size() > 1 && result.error().code == ErrorCode::kBadInput &&
        result.error().message.rfind("--fix: ", 0) == 0) {
      err << "colo-plan: note: --gpus " << cluster.totalGpus() << " left out: " << result.error().message << "\n";
      unmade = result.error();
      continue;
    }
    if (!result) return reportError(result.error(), err);
    for (const auto& c : result->top) ranked.push_back(c);
    results.push_back(std::move(*result));
    searched.push_back(cluster);
  }
  if (results.empty() && unmade) return reportError(*unmade, err);
  job->clusters = std::move(searched);
  rankByObjective(ranked, in);
  if (ranked.size() > in.options.topK) ranked.resize(in.options.topK);
  const bool feasible = !ranked.empty();

  std::string command = "colo-plan search";
  for (const auto& a : argv) command += " " + a;
  if (feasible) {
    planner::annotate(ranked.front().plan, ranked.front().evaluation, command, in.costDb ? in.costDb->hash() : "");
    if (const auto file = args->value("out")) {
      if (auto written = writeJsonFileAtomic(*file, planToJson(ranked.front().plan)); !written) return reportError(written.error(), err);
    }
  }
  if (args->has("json")) {
    out << searchJson(results, ranked, in).dump(2) << "\n";
  } else {
    printSearch(*args, *job, results, ranked, in, out);
  }
  if (!feasible && args->has("fail-if-infeasible")) {
    if (args->has("json")) err << "colo-plan: no feasible plan: " << results.front().infeasibleReason << "\n";
    return 3;
  }
  return 0;
}

}  // namespace colo::app
