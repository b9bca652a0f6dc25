// colo-profile calibrate: the scales that bring colo's predictions for a cluster in line with the runs a
// user measured there (docs/costmodel.md, "Calibration from your runs").
#include "calibrate.h"

#include <algorithm>
#include <iostream>
#include <set>

#include "args.h"
#include "inputs.h"
#include "colo/core/json.h"
#include "colo/core/units.h"
#include "colo/costmodel/run_calibration.h"
#include "validation_harness.h"
#ifdef COLO_HAVE_EXECUTOR
#include <fstream>

#include "colo/core/plan.h"
#include "colo/executor/runs_db.h"
#endif

namespace colo::app {
namespace {

// One measured run against colo's prediction for it, and the GPU it ran on.
struct Observed {
  std::string gpu;
  costmodel::RunObservation observation;
};

// A SQLite file (a colo-run runs database, when its meta says so).
bool isSqliteFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[16] = {};
  in.read(head, sizeof head);
  return in.gcount() == 16 && std::string(head, 15) == "SQLite format 3";
}

// The runs colo-run recorded (`--runs-db`): each run's plan evaluated here against the step time and
// tensor memory it measured. Runs recorded before the plan was stored (schema version 1) are skipped.
Result<std::vector<Observed>> observedInRunsDatabase(const std::string& path) {
#ifdef COLO_HAVE_EXECUTOR
  auto db = executor::RunsDatabase::open(path);
  if (!db) return fail(db.error());
  std::vector<Observed> out;
  for (const auto& rec : db->runs()) {
    const std::string id = "run " + std::to_string(rec.id) + " (" + rec.result.planName + ")";
    if (rec.plan.empty()) {
      std::cerr << "colo-profile: skipped " << id << ": recorded without its plan (before runs database version 2)\n";
      continue;
    }
    Json document;
    try {
      document = Json::parse(rec.plan);
    } catch (const std::exception&) {
      std::cerr << "colo-profile: skipped " << id << ": runs.plan is not JSON\n";
      continue;
    }
    auto plan = planFromJson(document, path + ": runs.plan of " + id);
    if (!plan) {
      std::cerr << "colo-profile: skipped " << id << ": " << plan.error().toString() << "\n";
      continue;
    }
    auto ev = costmodel::evaluatePlan(*plan);
    if (!ev) {
      std::cerr << "colo-profile: skipped " << id << ": " << ev.error().toString() << "\n";
      continue;
    }
    costmodel::RunObservation o = costmodel::observe(id, *ev, rec.result.stepTimeSeconds);
    if (rec.result.tensorMemoryBytes > 0) {
      // What training added to the process (colo-run's tensor memory) against the tensors colo predicts.
      double predicted = 0;
      for (const auto& st : ev->stages) {
        const auto& m = st.memory;
        predicted = std::max(predicted, m.weights + m.gradients + m.optimizer + m.activations + m.buffers);
      }
      o.predictedMemoryBytes = predicted;
      o.measuredMemoryBytes = rec.result.tensorMemoryBytes;
    }
    out.push_back({plan->cluster.gpu.name, o});
  }
  return out;
#else
  return fail(Error::badInput("this colo-profile was built without the executor (LibTorch with c10d): it cannot read a "
                              "runs database; give a CSV of the runs instead", path));
#endif
}

// The runs of a CSV, a JSON array of validation rows or a folder (validation::loadRuns).
Result<std::vector<Observed>> observedInRows(const std::string& path) {
  std::vector<validation::Skipped> skipped;
  auto cases = validation::loadRuns(path, &skipped);
  if (!cases) return fail(cases.error());
  for (const auto& s : skipped) std::cerr << "colo-profile: skipped " << s.reason << "\n";
  std::vector<Observed> out;
  for (const auto& c : *cases) {
    auto o = validation::observationOf(c);
    if (!o) {
      std::cerr << "colo-profile: skipped " << c.id << ": " << o.error().toString() << "\n";
      continue;
    }
    out.push_back({c.plan.cluster.gpu.name, *o});
  }
  return out;
}

int fail2(const Error& e) {
  std::cerr << "colo-profile: error: " << e.toString() << "\n";
  return exitCodeFor(e.code);
}

double medianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int calibrate(const std::vector<std::string>& argv) {
  const std::vector<OptionSpec> specs{
      {"runs", "PATH", "your runs: colo-run's runs database (--runs-db), a CSV (columns in docs/costmodel.md), a JSON array of validation rows, or a folder"},
      {"gpu", "NAME", "use only the runs on this GPU (when the runs span several)"},
      {"out", "FILE", "where to write the calibration (default calibration.json)"},
      {"help", "", "show this help"}};
  auto args = Args::parse(argv, specs);
  if (!args) return fail2(args.error());
  if (args->has("help")) {
    std::cout << "usage: colo-profile calibrate --runs PATH [--gpu NAME] [--out FILE]\n\n"
                 "Fits how far colo's predictions are from the step times (and peak memory) you measured on one\n"
                 "cluster, on the compute part of the step and on the rest, and writes the scales that\n"
                 "`colo-plan evaluate|search --calibration FILE` applies. Prints the error before and after, each\n"
                 "run predicted by scales fitted on the others.\n\n"
              << describeOptions(specs);
    return 0;
  }
  const auto runsPath = args->value("runs");
  if (!runsPath) return fail2(Error::badInput("missing --runs PATH (a CSV of your jobs, see --help)"));
  if (auto writable = checkOutputPath(*args, "out"); !writable) return fail2(writable.error());
  auto observed = isSqliteFile(*runsPath) ? observedInRunsDatabase(*runsPath) : observedInRows(*runsPath);
  if (!observed) return fail2(observed.error());
  std::set<std::string> gpus;
  std::vector<costmodel::RunObservation> runs;
  const std::string only = args->value("gpu", "");
  std::string gpu;
  for (const auto& o : *observed) {
    if (!only.empty() && o.gpu.find(only) == std::string::npos) continue;
    gpus.insert(o.gpu);
    gpu = o.gpu;
    runs.push_back(o.observation);
  }
  if (runs.empty() && !only.empty()) {
    std::set<std::string> all;
    for (const auto& o : *observed) all.insert(o.gpu);
    std::string names;
    for (const auto& g : all) names += (names.empty() ? "" : ", ") + g;
    return fail2(Error::badInput("--gpu " + only + ": no run is on such a GPU (the runs are on " + (names.empty() ? "none" : names) + ")", *runsPath));
  }
  if (gpus.size() > 1) {
    std::string names;
    for (const auto& g : gpus) names += (names.empty() ? "" : ", ") + g;
    return fail2(Error::badInput("the runs span several GPUs (" + names + "): calibrate one cluster at a time with --gpu", *runsPath));
  }
  auto fitted = costmodel::fitRunCalibration(runs, gpu);
  if (!fitted) return fail2(Error::badInput(fitted.error().message, *runsPath));
  const std::string out = args->value("out", "calibration.json");
  if (auto written = writeJsonFileAtomic(out, fitted->toJson()); !written) return fail2(written.error());
  std::cout << "calibration of " << gpu << " from " << fitted->runs << " runs (" << fitted->memoryRuns
            << " with memory): compute x" << formatFixed(fitted->computeScale, 3) << ", communication, bubble and optimizer x"
            << formatFixed(fitted->otherScale, 3) << ", memory x" << formatFixed(fitted->memoryScale, 3) << "\n";
  const auto cv = costmodel::leaveOneOut(runs);
  if (!cv.after.empty()) {
    std::cout << "each run predicted by scales fitted on the others: step |error| median "
              << formatFixed(100 * medianOf(cv.before), 1) << "% -> " << formatFixed(100 * medianOf(cv.after), 1) << "%\n";
  } else {
    std::cout << "one run: no run left to check the calibration on\n";
  }
  std::cout << "wrote " << out << " (colo-plan evaluate|search --calibration " << out << ")\n";
  return 0;
}

}  // namespace colo::app
