// Residuals of validated runs for the error bands.
#include "validation_residuals.h"

#include "colo/costmodel/evaluator.h"

namespace colo::validation {

costmodel::ResidualTable residualsOf(const std::vector<Outcome>& outcomes) {
  std::vector<costmodel::Residual> rows;
  for (const Outcome& o : outcomes) {
    if (!o.source || o.source->layerOnly || o.predictedStepSeconds <= 0) continue;
    auto ev = costmodel::evaluatePlan(o.source->plan);
    if (!ev) continue;
    costmodel::Residual r;
    r.id = o.source->id;
    r.features = costmodel::featuresOf(o.source->plan, *ev);
    // stepError is (predicted - measured) / measured; a band is on the measured value around a prediction.
    r.timeError = 1.0 / (1.0 + o.stepError) - 1.0;
    if (o.memoryError) r.memoryError = 1.0 / (1.0 + *o.memoryError) - 1.0;
    rows.push_back(std::move(r));
  }
  return costmodel::ResidualTable(std::move(rows));
}

Result<costmodel::ResidualTable> residualsOfFolders(const std::vector<std::string>& folders) {
  std::vector<costmodel::Residual> all;
  for (const auto& folder : folders) {
    std::vector<Skipped> skipped;  // rows colo cannot evaluate give no residual
    auto cases = loadCases(folder, &skipped);
    if (!cases) return fail(cases.error());
    std::vector<Outcome> outcomes;
    for (const auto& c : *cases) {
      if (auto o = evaluateCase(c)) outcomes.push_back(*o);
    }
    const auto table = residualsOf(outcomes);
    all.insert(all.end(), table.rows().begin(), table.rows().end());
  }
  return costmodel::ResidualTable(std::move(all));
}

}  // namespace colo::validation
