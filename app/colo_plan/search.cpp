// colo-plan search: the fastest plans that fit, with reasons, the Pareto front and the search's own figures.
#include <iostream>
#include <map>

#include "args.h"
#include "inputs.h"
#include "colo/core/library.h"
#include "colo/core/units.h"
#include "colo/costmodel/error_band.h"
#include "colo/planner/baseline.h"
#include "colo/planner/search.h"
#include "commands.h"
#include "text_table.h"

namespace colo::app {
namespace {

const std::vector<OptionSpec>& searchOptions() {
  static const std::vector<OptionSpec> specs{
      {"model", "M", "model: library name or file"},
      {"cluster", "C", "cluster: library name or file"},
      {"gpus", "N", "scale the cluster to N GPUs"},
      {"gbs", "G", "global batch size, samples per step (required)"},
      {"seq-len", "S", "tokens per sample (default: the model's)"},
      {"top", "K", "how many plans to list (default 10)"},
      {"fix", "K=V,..", "hold settings fixed: tp, pp, dp, cp, ep, vpp, mbs, zero (e.g. tp=8,pp=4)"},
      {"max-memory-fraction", "F", "a plan fits when its peak is at most F of GPU memory (default 0.95)"},
      {"precision", "P", "bf16, fp16, fp8, fp32 (default: bf16, or fp16 on GPUs without bf16)"},
      {"attention", "A", "flash (default) or unfused"},
      {"zero-bubble", "", "also consider the zero-bubble (ZB-H1) schedule"},
      {"no-offload", "", "never offload optimizer states to the host"},
      {"costdb", "DB", "SQLite cost database of measured GEMMs"},
      {"calibration", "FILE", "scales fitted on your own runs of this cluster (colo-profile calibrate)"},
      {"out", "FILE", "write the best plan as a self-contained colo.plan/1 file"},
      {"json", "", "print one JSON object"},
      {"explain", "", "also print pruning by rule and the Pareto front"},
      {"fail-if-infeasible", "", "exit 3 when no plan fits"},
      {"quiet", "", "no progress on stderr"},
      {"help", "", "show this help"},
  };
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

std::string row(const planner::Candidate& c) { return c.reason; }

}  // namespace

int runSearch(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  auto args = Args::parse(argv, searchOptions());
  if (!args) return reportError(args.error(), err);
  if (args->has("help")) {
    out << "usage: colo-plan search --model M --cluster C [--gpus N] --gbs G [--seq-len S] [--top K] [--fix tp=8,..]\n"
           "         [--max-memory-fraction F] [--costdb DB] [--out plan.json] [--json] [--explain] [--fail-if-infeasible]\n\n"
           "Finds the fastest plans that fit: degrees, micro-batch, virtual stages, ZeRO, offload, per-stage layers and\n"
           "recompute, ranked by predicted step time, with the reason for each.\n\n"
        << describeOptions(searchOptions());
    return 0;
  }
  if (!args->positional().empty()) return reportError(Error::badInput("unexpected argument \"" + args->positional().front() + "\""), err);
  if (!args->has("gbs") && args->has("model") && args->has("cluster")) {
    return reportError(Error::badInput("missing --gbs (global batch size, samples per step)"), err);
  }
  auto inputs = loadModelAndCluster(*args);
  if (!inputs) return reportError(inputs.error(), err);
  if (!args->has("gbs")) return reportError(Error::badInput("missing --gbs (global batch size, samples per step)"), err);
  const Model& model = inputs->first;
  const ClusterSpec& cluster = inputs->second;
  planner::SearchOptions options;
  auto gbs = args->positiveInteger("gbs", 0);
  if (!gbs) return reportError(gbs.error(), err);
  options.globalBatchSize = *gbs;
  auto seq = args->positiveInteger("seq-len", 0);
  if (!seq) return reportError(seq.error(), err);
  options.seqLen = *seq;
  auto top = args->positiveInteger("top", 10);
  if (!top) return reportError(top.error(), err);
  options.topK = static_cast<std::size_t>(*top);
  if (const auto fix = args->value("fix")) {
    auto fixed = planner::parseFixed(*fix);
    if (!fixed) return reportError(fixed.error(), err);
    options.fixed = *fixed;
  }
  if (const auto f = args->value("max-memory-fraction")) {
    char* end = nullptr;
    options.maxMemoryFraction = std::strtod(f->c_str(), &end);
    if (end == f->c_str() || *end != '\0') {
      return reportError(Error::badInput("--max-memory-fraction: expected a number in (0, 1], got \"" + *f + "\""), err);
    }
  }
  auto precision = precisionOption(*args, &cluster);
  if (!precision) return reportError(precision.error(), err);
  options.precision = *precision;
  const std::string attention = args->value("attention", "flash");
  if (attention != "flash" && attention != "unfused") {
    return reportError(Error::badInput("--attention: expected flash or unfused, got \"" + attention + "\""), err);
  }
  options.flashAttention = attention == "flash";
  options.allowZeroBubble = args->has("zero-bubble");
  options.allowOffload = !args->has("no-offload");
  std::optional<costmodel::CostDatabase> costDb;
  if (const auto db = args->value("costdb")) {
    auto opened = costmodel::CostDatabase::open(*db);
    if (!opened) return reportError(opened.error(), err);
    costDb = std::move(*opened);
    options.costDb = &*costDb;
  }

  std::optional<costmodel::RunCalibration> calibration;
  if (const auto file = args->value("calibration")) {
    auto loaded = loadCalibration(*file, cluster);
    if (!loaded) return reportError(loaded.error(), err);
    calibration = *loaded;
    options.calibration = &*calibration;
  }

  StderrProgress progress;
  auto result = planner::search(model, cluster, options, args->has("quiet") || args->has("json") ? nullptr : &progress);
  if (!result) return reportError(result.error(), err);

  std::string command = "colo-plan search";
  for (const auto& a : argv) command += " " + a;
  if (result->feasible()) {
    planner::annotate(result->top.front().plan, result->top.front().evaluation, command, costDb ? costDb->hash() : "");
    if (const auto file = args->value("out")) {
      if (auto written = writeJsonFileAtomic(*file, planToJson(result->top.front().plan)); !written) {
        return reportError(written.error(), err);
      }
    }
  }
  const auto& st = result->stats;
  std::int64_t pruned = 0;
  for (const auto& [rule, count] : st.pruned) pruned += count;
  if (args->has("json")) {
    out << result->toJson().dump(2) << "\n";
  } else {
    out << "search    " << model.name() << " on " << clusterLabel(cluster) << ", gbs "
        << options.globalBatchSize << " x " << (options.seqLen > 0 ? options.seqLen : model.defaultSeqLen())
        << " tokens, " << toString(options.precision)
        << (args->has("precision") || cluster.gpu.hasPeak(DType::kBf16) ? "" : " (this GPU has no bf16)") << ", memory budget " << formatFixed(100 * options.maxMemoryFraction, 0) << "% of "
        << formatBytes(cluster.gpu.memoryBytes) << "\n";
    out << "          " << st.generated << " configurations generated, " << pruned << " pruned, " << st.costed
        << " costed (" << st.evaluated << " evaluations), " << st.feasible << " fit; " << formatFixed(st.seconds, 3)
        << " s (" << formatCount(static_cast<double>(st.generated) / std::max(st.seconds, 1e-9)) << " candidates/s)\n";
    auto table = [&](const std::vector<planner::Candidate>& list, bool ranked) {
      TextTable t({"#", "tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "zero", "recompute", "stages", "step", "likely",
                   "tokens/s", "MFU", "peak mem", "why"},
                  {true, true, true, true, true, true, true, true, true, false, false, true, false, true, true, true, false});
      int i = 0;
      std::map<std::string, std::pair<int, const planner::Candidate*>> shown;  // visible columns -> first row
      int rowNumber = 0;
      for (const auto& c : list) {
        ++rowNumber;
        const auto& p = c.plan;
        const std::string stages = planner::stagesSummary(p);
        std::string rec = planner::recomputeSummary(p);
        if (p.offload.optimizerFraction > 0) rec += " +offload";
        // The likely range of the measured step around the prediction (validated runs most like it), and
        // a fit that the top of the memory band would break.
        const costmodel::PredictionBands bands =
            calibration ? costmodel::PredictionBands{} : costmodel::bandsOf(p, c.evaluation);
        const std::string likely = calibration  ? "calibrated"
                                   : bands.time ? bands.time->describe().substr(0, bands.time->describe().find(','))
                                                : "-";
        std::string memory = formatBytes(c.evaluation.peakMemoryBytes);
        if (bands.memoryAtRisk(c.evaluation)) memory += " AT RISK";
        std::vector<std::string> cells{
            ranked ? std::to_string(++i) : "-", std::to_string(p.parallel.tp), std::to_string(p.parallel.pp),
            std::to_string(p.parallel.dp), std::to_string(p.parallel.cp),
            std::to_string(p.parallel.ep) + (p.parallel.etp > 0 ? " (etp " + std::to_string(p.parallel.etp) + ")" : ""),
            std::to_string(p.parallel.virtualStages), std::to_string(p.microBatchSize), std::to_string(p.zeroStage), rec,
            stages, formatFixed(c.evaluation.stepSeconds, 3) + " s", likely, formatCount(c.evaluation.tokensPerSecond),
            formatFixed(100 * c.evaluation.mfu, 1) + "%", memory, row(c)};
        // Settings no column shows (rank layout, schedule, sequence parallelism) can make two rows read
        // alike: the later one says what sets it apart.
        std::string visible;
        for (std::size_t k = 1; k + 6 < cells.size(); ++k) visible += cells[k] + "|";  // tp .. stages
        if (const auto seen = shown.find(visible); seen != shown.end()) {
          cells.back() += std::string("; unlike ") + (ranked ? "#" : "row ") + std::to_string(seen->second.first) + ": " +
                          planner::planDifferences(seen->second.second->plan, p);
        } else {
          shown.emplace(visible, std::pair{rowNumber, &c});
        }
        t.addRow(cells);
      }
      return t.render("  ");
    };
    if (result->feasible()) {
      out << "best plans (fastest first)\n" << table(result->top, true);
      if (const auto file = args->value("out")) out << "wrote the best plan to " << *file << "\n";
    } else {
      out << "NO FEASIBLE PLAN: " << result->infeasibleReason << "\n";
    }
    if (args->has("explain")) {
      out << "pruned by rule\n";
      for (const auto& [rule, count] : st.pruned) out << "  " << count << "  " << rule << "\n";
      if (!result->pareto.empty()) out << "Pareto front (step time vs peak memory)\n" << table(result->pareto, false);
      if (!result->rejected.empty()) out << "closest that do not fit\n" << table(result->rejected, false);
    }
  }
  if (!result->feasible() && args->has("fail-if-infeasible")) {
    if (args->has("json")) err << "colo-plan: no feasible plan: " << result->infeasibleReason << "\n";
    return 3;
  }
  return 0;
}

}  // namespace colo::app
