// colo-validate: predicted against measured for the published runs in data/validation, as a table,
// with the error per source and overall. Usage: colo-validate [DATA_DIR] [--plans OUT_DIR]
// --plans writes each run's plan as OUT_DIR/<id>.json, to study one with `colo-plan evaluate --plan F --explain`.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "colo/core/library.h"
#include "colo/core/units.h"
#include "args.h"
#include "text_table.h"
#include "validation_harness.h"
#include "validation_kernels.h"
#include "validation_ranking.h"
#include "validation_residuals.h"

namespace {

// Layouts of one model on one cluster, in colo's order against the measured order: every group when
// there are few, else a summary per source.
template <typename Median>
void printRanking(const std::vector<colo::validation::GroupRanking>& groups, Median median) {
  if (groups.empty()) return;
  std::cout << "ranking of layouts (time per sample; groups of 3+ runs of one model on one cluster):\n";
  std::map<std::string, std::vector<const colo::validation::GroupRanking*>> bySource;
  for (const auto& g : groups) bySource[g.group.substr(0, g.group.find(' '))].push_back(&g);
  auto line = [](const std::string& name, std::size_t runs, double tau, double slowdown, const std::string& extra) {
    std::cout << "  " << name << ": Kendall's tau " << colo::formatFixed(tau, 2) << ", colo's fastest "
              << (slowdown <= 1e-12 ? std::string("is the measured fastest")
                                    : colo::formatFixed(100 * slowdown, 1) + "% slower than the measured fastest")
              << " (" << runs << " runs" << extra << ")\n";
  };
  for (const auto& [source, members] : bySource) {
    if (groups.size() <= 12) {
      for (const auto* g : members) line(g->group, g->runs, g->kendallTau, g->pickSlowdown, "");
      continue;
    }
    std::vector<double> taus, slowdowns;
    std::size_t runs = 0, within = 0;
    for (const auto* g : members) {
      taus.push_back(g->kendallTau);
      slowdowns.push_back(g->pickSlowdown);
      runs += g->runs;
      if (g->pickSlowdown <= 0.03) ++within;
    }
    std::cout << "  " << source << ": median Kendall's tau " << colo::formatFixed(median(taus), 2) << " over "
              << members.size() << " groups (" << runs << " runs); colo's fastest within 3% of the measured fastest in "
              << within << " of " << members.size() << ", median "
              << colo::formatFixed(100 * median(slowdowns), 1) << "% slower\n";
  }
}

// --calibrate: for the runs of each GPU (3 or more), each run predicted by a calibration fitted on the
// others (colo-profile calibrate), against the uncalibrated prediction.
template <typename Median>
void printCalibration(const std::vector<colo::validation::Case>& cases, Median median) {
  std::map<std::string, std::vector<colo::costmodel::RunObservation>> byGpu;
  for (const auto& c : cases) {
    if (auto o = colo::validation::observationOf(c)) byGpu[c.plan.cluster.gpu.name].push_back(*o);
  }
  std::cout << "calibration from these runs (each run predicted by scales fitted on the other runs of its GPU):\n";
  for (const auto& [gpu, runs] : byGpu) {
    if (runs.size() < 3) continue;
    const auto cv = colo::costmodel::leaveOneOut(runs);
    auto all = colo::costmodel::fitRunCalibration(runs, gpu);
    std::cout << "  " << gpu << ": step |error| median " << colo::formatFixed(100 * median(cv.before), 1) << "% -> "
              << colo::formatFixed(100 * median(cv.after), 1) << "% over " << cv.after.size() << " runs";
    if (all) {
      std::cout << " (all runs: compute x" << colo::formatFixed(all->computeScale, 2) << ", the rest x"
                << colo::formatFixed(all->otherScale, 2) << ", memory x" << colo::formatFixed(all->memoryScale, 2) << ")";
    }
    std::cout << "\n";
  }
}

// --residuals FILE [DIR...]: the residual table of the development sets (default: data/validation's
// published and vtrain_single folders), written atomically.
int writeResiduals(const std::string& file, std::vector<std::string> folders) {
  if (folders.empty()) {
    const std::string root = colo::dataDirectory() + "/validation";
    folders = {root + "/published", root + "/vtrain_single"};
  }
  auto table = colo::validation::residualsOfFolders(folders);
  if (!table) {
    std::cerr << "colo-validate: error: " << table.error().toString() << "\n";
    return colo::exitCodeFor(table.error().code);
  }
  if (auto written = colo::writeJsonFileAtomic(file, table->toJson()); !written) {
    std::cerr << "colo-validate: error: " << written.error().toString() << "\n";
    return colo::exitCodeFor(written.error().code);
  }
  std::size_t memory = 0;
  for (const auto& r : table->rows()) memory += r.memoryError ? 1 : 0;
  std::cout << "wrote " << file << ": " << table->rows().size() << " runs (" << memory << " with memory) from";
  for (const auto& f : folders) std::cout << " " << f;
  std::cout << "\n";
  return 0;
}

double medianOf(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double meanOf(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

int writePlans(const std::vector<colo::validation::Case>& cases, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  for (const auto& c : cases) {
    const std::string file = dir + "/" + c.id + ".json";
    std::ofstream out(file);
    out << colo::planToJson(c.plan).dump(2) << "\n";
    if (!out) {
      std::cerr << "colo-validate: error: " << file << ": cannot write\n";
      return 2;
    }
  }
  return 0;
}

// The table of runs and the errors it sums up: per source, fully published, and memory by what each
// figure counts.
struct Report {
  colo::app::TextTable table{{"run", "measured", "predicted", "error", "memory meas.", "memory pred.", "error"},
                             {false, true, true, true, true, true, true}};
  std::ostringstream layerLines;  // single-layer timings, forward and backward apart
  std::vector<double> errors;
  std::vector<double> fullErrors;
  std::vector<double> memoryErrors;
  std::map<std::string, std::vector<double>> memoryByFigure;  // what the figure counts -> |errors|
  std::map<std::string, std::vector<double>> bySource;
  std::vector<std::string> notFitting;  // runs that happened, predicted not to fit their GPUs

  void add(const colo::validation::Case& c, const colo::validation::Outcome& o) {
    const double e = std::fabs(o.stepError);
    errors.push_back(e);
    if (c.fullyPublished) fullErrors.push_back(e);
    bySource[c.id.substr(0, c.id.find('_'))].push_back(e);
    if (!o.predictedToFit) notFitting.push_back(c.id);
    std::string memMeasured = "-", memPredicted = "-", memError = "-";
    if (o.memoryError) {
      // What the figure counts: the device (nvidia-smi), the allocator's reserved or its live tensors.
      const char* what = c.memoryMeasure == colo::validation::MemoryMeasure::kAllocated  ? "alloc"
                         : c.memoryMeasure == colo::validation::MemoryMeasure::kReserved ? "resv"
                                                                                          : "smi";
      memMeasured = colo::formatBytes(*c.measuredMemoryBytes) + " " + what;
      memPredicted = colo::formatBytes(*o.predictedMemoryBytes);
      memError = colo::formatFixed(100 * *o.memoryError, 1) + "%";
      memoryErrors.push_back(std::fabs(*o.memoryError));
      memoryByFigure[what].push_back(std::fabs(*o.memoryError));
    }
    if (o.reservedError) memoryByFigure["resv"].push_back(std::fabs(*o.reservedError));
    if (o.predictedForwardSeconds && c.measuredForwardSeconds && c.measuredBackwardSeconds) {
      layerLines << "  " << c.id << ": forward " << colo::formatFixed(1e3 * *o.predictedForwardSeconds, 2) << " ms (measured "
                 << colo::formatFixed(1e3 * *c.measuredForwardSeconds, 2) << "), backward "
                 << colo::formatFixed(1e3 * *o.predictedBackwardSeconds, 2) << " ms (measured "
                 << colo::formatFixed(1e3 * *c.measuredBackwardSeconds, 2) << ")\n";
    }
    table.addRow({c.id + (c.fullyPublished ? "" : " *"), colo::formatFixed(o.measuredSeconds, 4) + " s",
                  colo::formatFixed(o.predictedStepSeconds, 4) + " s", colo::formatFixed(100 * o.stepError, 1) + "%",
                  memMeasured, memPredicted, memError});
  }

  void printSummary() const {
    std::cout << "step time |error|: median " << colo::formatFixed(100 * medianOf(errors), 1) << "%, mean "
              << colo::formatFixed(100 * meanOf(errors), 1) << "% over " << errors.size() << " runs; median "
              << colo::formatFixed(100 * medianOf(fullErrors), 1) << "% over the " << fullErrors.size()
              << " fully published\n";
    for (const auto& [source, v] : bySource) {
      std::cout << "  " << source << ": median " << colo::formatFixed(100 * medianOf(v), 1) << "%, mean "
                << colo::formatFixed(100 * meanOf(v), 1) << "% (" << v.size() << ")\n";
    }
    // Every run here ran on its GPUs: a plan predicted not to fit is a wrong answer to the first question.
    std::cout << "predicted not to fit the GPUs they ran on: " << notFitting.size() << " of " << errors.size() << " runs";
    for (std::size_t i = 0; i < notFitting.size(); ++i) std::cout << (i == 0 ? " (" : ", ") << notFitting[i];
    std::cout << (notFitting.empty() ? "\n" : ")\n");
    if (memoryErrors.empty()) return;
    std::cout << "memory |error|: mean " << colo::formatFixed(100 * meanOf(memoryErrors), 1) << "% over "
              << memoryErrors.size() << " runs\n";
    // Every figure a run gives, by what it counts (a run giving allocated and reserved counts in both).
    for (const auto& [figure, v] : memoryByFigure) {
      std::cout << "  " << figure << ": mean " << colo::formatFixed(100 * meanOf(v), 1) << "% (" << v.size() << ")\n";
    }
  }
};

// The kernel-level tables beside the runs (DATA_DIR/kernels), when there are any, each checked.
struct KernelLines {
  std::vector<std::string> lines;
};
colo::Result<KernelLines> checkKernelTables(const std::string& folder) {
  auto benches = colo::validation::loadKernelBenchmarks(folder);
  if (!benches) return colo::fail(benches.error());
  KernelLines out;
  for (const auto& b : *benches) {
    auto c = colo::validation::checkKernelBenchmark(b);
    if (!c) return colo::fail(c.error());
    using colo::validation::KernelBlock;
    const bool speedup = b.block == KernelBlock::kLayerNormLinearSigmoid;
    const char* what = speedup                             ? " (speedup of float8 over bf16)"
                       : b.block == KernelBlock::kGemm ? " (time of each GEMM shape)"
                                                       : " (time of each fused attention shape, forward and backward)";
    std::string line = "  " + b.id + what +
                       ": |error| mean " + colo::formatFixed(100 * c->meanAbsError, 1) + "%, median signed " +
                       colo::formatFixed(100 * c->medianSigned, 1) + "%";
    if (speedup) line += ", same side of 1 in " + colo::formatFixed(100 * c->sameSide, 0) + "%";
    out.lines.push_back(line + " of " + std::to_string(c->shapes) + " shapes");
  }
  return out;
}

// --kernel-points ID: every shape of the GEMM table ID (DATA_DIR/kernels), predicted against measured,
// to see where a table's residual lies (by pass, rows, experts).
int printKernelPoints(const std::string& folder, const std::string& id) {
  auto benches = colo::validation::loadKernelBenchmarks(folder);
  if (!benches) {
    std::cerr << "colo-validate: error: " << benches.error().toString() << "\n";
    return colo::exitCodeFor(benches.error().code);
  }
  for (const auto& b : *benches) {
    if (b.id != id) continue;
    if (b.block != colo::validation::KernelBlock::kGemm) {
      std::cerr << "colo-validate: error: --kernel-points " << id << ": only GEMM tables list their points\n";
      return 2;
    }
    colo::app::TextTable table{{"groups", "m", "n", "k", "accumulate B", "measured", "predicted", "error"},
                               {true, true, true, true, true, true, true, true}};
    for (const auto& point : b.points) {
      auto predicted = colo::validation::predictGemm(b, point);
      if (!predicted) {
        std::cerr << "colo-validate: error: " << predicted.error().toString() << "\n";
        return colo::exitCodeFor(predicted.error().code);
      }
      const double measured = 2 * point.groups * point.m * point.k * point.n / (point.tflops * 1e12);
      table.addRow({colo::formatFixed(point.groups, 0), colo::formatFixed(point.m, 0), colo::formatFixed(point.n, 0),
                    colo::formatFixed(point.k, 0), colo::formatFixed(point.accumulateBytes, 0),
                    colo::formatFixed(1e6 * measured, 1) + " us", colo::formatFixed(1e6 * *predicted, 1) + " us",
                    colo::formatFixed(100 * (*predicted / measured - 1), 1) + "%"});
    }
    std::cout << b.id << " (" << b.file << "):\n" << table.render();
    return 0;
  }
  std::cerr << "colo-validate: error: --kernel-points: no kernel table \"" << id << "\" under " << folder << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<colo::app::OptionSpec> specs{
      {"plans", "DIR", "also write each evaluated run's plan as DIR/<id>.json (colo-plan evaluate --plan F --explain)"},
      {"residuals", "FILE", "instead, write the error bands' residual table of the DATA_DIRs (default: published, vtrain_single)"},
      {"calibrate", "", "also fit a calibration on the runs of each GPU and show the error before and after on the runs it did not see"},
      {"kernel-points", "ID", "instead, list every shape of the GEMM kernel table ID (DATA_DIR/kernels), predicted against measured"},
      {"help", "", "show this help"}};
  auto args = colo::app::Args::parse(std::vector<std::string>(argv + 1, argv + argc), specs);
  if (!args) {
    std::cerr << "colo-validate: error: " << args.error().toString() << "\n";
    return 2;
  }
  if (const auto file = args->value("residuals"); file && !args->has("help")) return writeResiduals(*file, args->positional());
  if (args->has("help") || args->positional().size() > 1) {
    (args->has("help") ? std::cout : std::cerr)
        << "usage: colo-validate [DATA_DIR | RUNS.json | RUNS.csv] [--plans DIR] [--calibrate]\n"
           "       colo-validate --residuals FILE [DATA_DIR...]\n"
           "       colo-validate [DATA_DIR] --kernel-points ID\n\n"
           "Predicted against measured step time and memory for the published runs in DATA_DIR (default: the\n"
           "shipped data/validation): DATA_DIR/public_runs.json holds the rows, DATA_DIR/assumptions.json (optional)\n"
           "what each row leaves unsaid. The schema: data/validation/README.md. Exit 2 when no row can be evaluated.\n\n"
        << colo::app::describeOptions(specs);
    return args->has("help") ? 0 : 2;
  }
  const std::string folder = args->positional().empty() ? colo::dataDirectory() + "/validation" : args->positional().front();
  if (const auto id = args->value("kernel-points")) {
    if (args->has("plans") || args->has("calibrate")) {
      std::cerr << "colo-validate: error: --kernel-points lists one kernel table; --plans and --calibrate are for the runs\n";
      return 2;
    }
    // The shipped tables sit beside the published runs (data/validation/published/kernels).
    std::string kernels = folder + "/kernels";
    if (!std::filesystem::is_directory(kernels) && std::filesystem::is_directory(folder + "/published/kernels")) {
      kernels = folder + "/published/kernels";
    }
    return printKernelPoints(kernels, *id);
  }
  const std::string plansDir = args->value("plans", "");
  std::vector<colo::validation::Skipped> skipped;
  auto cases = colo::validation::loadRuns(folder, &skipped);
  if (!cases) {
    std::cerr << "colo-validate: error: " << cases.error().toString() << "\n";
    return 2;
  }
  // The reason names the row already when it comes from the row's own check.
  auto skippedLine = [](const colo::validation::Skipped& s) {
    return "skipped " + (s.reason.rfind(s.id + ":", 0) == 0 ? s.reason : s.id + ": " + s.reason);
  };
  if (cases->empty()) {
    for (const auto& s : skipped) std::cerr << "colo-validate: " << skippedLine(s) << "\n";
    // The file the rows came from: a folder's public_runs.json, or the CSV or JSON named.
    const bool isFolder = std::filesystem::is_directory(folder);
    std::cerr << "colo-validate: error: " << (isFolder ? folder + "/public_runs.json" : folder) << ": no row could be evaluated\n";
    return 2;
  }
  // Kernel tables are read and checked before anything is printed or written.
  auto kernelLines = checkKernelTables(folder + "/kernels");
  if (!kernelLines) {
    std::cerr << "colo-validate: error: " << kernelLines.error().toString() << "\n";
    return colo::exitCodeFor(kernelLines.error().code);
  }
  if (!plansDir.empty()) {
    if (const int rc = writePlans(*cases, plansDir); rc != 0) return rc;
  }
  Report report;
  std::vector<colo::validation::Outcome> outcomes;
  for (const auto& c : *cases) {
    auto o = colo::validation::evaluateCase(c);
    if (!o) {
      std::cerr << "colo-validate: error: " << folder << "/public_runs.json: " << c.id << ": " << o.error().toString() << "\n";
      return colo::exitCodeFor(o.error().code);
    }
    outcomes.push_back(*o);
    report.add(c, *o);
  }
  std::cout << report.table.render();
  if (!report.layerLines.str().empty()) std::cout << "\nlayer timings, forward and backward:\n" << report.layerLines.str();
  std::cout << "\n* configuration partly assumed (assumptions.json, or inferred from the row)\n"
            << "memory: smi = device memory in use (nvidia-smi), resv = allocator reserved, alloc = peak live tensors;\n"
            << "        the prediction leaves out what the figure does not count\n";
  for (const auto& s : skipped) std::cout << skippedLine(s) << "\n";
  std::cout << "\n";
  report.printSummary();
  printRanking(colo::validation::rankLayouts(outcomes), medianOf);
  if (!kernelLines->lines.empty()) {
    std::cout << "kernel benchmarks (predicted against measured):\n";
    for (const auto& line : kernelLines->lines) std::cout << line << "\n";
  }
  if (args->has("calibrate")) printCalibration(*cases, medianOf);
  return 0;
}
