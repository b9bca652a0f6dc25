// colo-profile calibrate: the scales that bring colo's predictions for a cluster in line with the runs a
// user measured there (docs/costmodel.md, "Calibration from your runs").
#include "calibrate.h"

#include <algorithm>
#include <iostream>
#include <set>

#include "args.h"
#include "colo/core/json.h"
#include "colo/core/units.h"
#include "colo/costmodel/run_calibration.h"
#include "validation_harness.h"

namespace colo::app {
namespace {

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
      {"runs", "PATH", "your runs: a CSV (columns in docs/costmodel.md), a JSON array of validation rows, or a folder"},
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
  std::vector<validation::Skipped> skipped;
  auto cases = validation::loadRuns(*runsPath, &skipped);
  if (!cases) return fail2(cases.error());
  for (const auto& s : skipped) std::cerr << "colo-profile: skipped " << s.reason << "\n";
  std::set<std::string> gpus;
  std::vector<costmodel::RunObservation> runs;
  const std::string only = args->value("gpu", "");
  std::string gpu;
  for (const auto& c : *cases) {
    if (!only.empty() && c.plan.cluster.gpu.name.find(only) == std::string::npos) continue;
    auto o = validation::observationOf(c);
    if (!o) {
      std::cerr << "colo-profile: skipped " << c.id << ": " << o.error().toString() << "\n";
      continue;
    }
    gpus.insert(c.plan.cluster.gpu.name);
    gpu = c.plan.cluster.gpu.name;
    runs.push_back(*o);
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
