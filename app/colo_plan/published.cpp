// Published runs of the plan's model on the plan's kind of GPU, each with what was measured and what
// colo predicts for that very run, so a user can judge a prediction against a famous configuration.
#include <algorithm>
#include <regex>
#include <sstream>

#include "colo/core/library.h"
#include "colo/core/units.h"
#include "colo/costmodel/evaluator.h"
#include "colo/planner/baseline.h"
#include "commands.h"
#include "validation_harness.h"

namespace colo::app {
namespace {

// "A100-SXM4-80GB" and "NVIDIA A100 80GB PCIe" are both "A100".
std::string gpuFamily(const std::string& name) {
  static const std::regex family("([A-Z]{1,2}[0-9]{2,4})");
  std::smatch m;
  return std::regex_search(name, m, family) ? m[1].str() : name;
}

bool sameShape(const Model& a, const Model& b) {
  if (!a.spec || !b.spec) return false;
  const ModelSpec& x = *a.spec;
  const ModelSpec& y = *b.spec;
  return x.numLayers == y.numLayers && x.hiddenSize == y.hiddenSize && x.numAttentionHeads == y.numAttentionHeads &&
         x.ffnHiddenSize == y.ffnHiddenSize;
}

std::string layout(const Plan& p) {
  const auto& q = p.parallel;
  std::string s = std::to_string(p.cluster.totalGpus()) + " x " + p.cluster.gpu.name + ", tp" + std::to_string(q.tp) + " pp" +
                  std::to_string(q.pp) + " dp" + std::to_string(q.dp);
  if (q.cp > 1) s += " cp" + std::to_string(q.cp);
  if (q.virtualStages > 1) s += " vpp" + std::to_string(q.virtualStages);
  s += ", gbs " + std::to_string(p.globalBatchSize) + ", recompute " + planner::recomputeSummary(p) + ", " +
       attentionName(p.execution) + " attention";
  return s;
}

}  // namespace

std::string publishedRunsOf(const Plan& plan) {
  std::vector<validation::Skipped> skipped;  // rows colo cannot evaluate are simply not references
  auto cases = validation::loadCases(dataDirectory() + "/validation", &skipped);
  if (!cases) return {};
  std::ostringstream out;
  int shown = 0;
  for (const auto& c : *cases) {
    if (c.layerOnly || !c.measuredStepSeconds || !sameShape(c.plan.model, plan.model)) continue;
    if (gpuFamily(c.plan.cluster.gpu.name) != gpuFamily(plan.cluster.gpu.name)) continue;
    auto outcome = validation::evaluateCase(c);
    auto ev = costmodel::evaluatePlan(c.plan);
    if (!outcome || !ev) continue;
    // The model FLOPs are the same whoever measures the step, so MFU scales with the step time.
    const double measuredMfu = ev->mfu * outcome->predictedStepSeconds / outcome->measuredSeconds;
    if (shown++ == 0) out << "published runs of this model on " << gpuFamily(plan.cluster.gpu.name) << " (data/validation):\n";
    out << "  " << c.id << (c.fullyPublished ? "" : " (some settings assumed)") << ": " << layout(c.plan) << "\n"
        << "    measured " << formatFixed(outcome->measuredSeconds, 3) << " s, " << formatFixed(100 * measuredMfu, 1)
        << "% MFU; colo predicts " << formatFixed(outcome->predictedStepSeconds, 3) << " s, " << formatFixed(100 * ev->mfu, 1)
        << "% MFU for that run (" << (outcome->stepError >= 0 ? "+" : "") << formatFixed(100 * outcome->stepError, 1)
        << "% step)\n"
        << "    this plan differs in: " << planner::planDifferences(c.plan, plan) << "\n";
  }
  return out.str();
}

Result<costmodel::RunCalibration> loadCalibration(const std::string& file, const ClusterSpec& cluster) {
  auto calibration = costmodel::RunCalibration::load(file);
  if (!calibration) return fail(calibration.error());
  if (calibration->gpu != cluster.gpu.name) {
    return fail(Error::badInput("fitted on runs of " + calibration->gpu + ", but the plan's GPU is " + cluster.gpu.name,
                                file, "/gpu"));
  }
  return calibration;
}

}  // namespace colo::app
