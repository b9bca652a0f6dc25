// Time and money of a training run from a plan's predicted step (docs/costmodel.md, "Time and money").
#include "colo/planner/budget.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "colo/core/number_list.h"
#include "colo/core/units.h"

namespace colo::planner {

TrainingCost trainingCost(const Plan& plan, const costmodel::Evaluation& evaluation, const TrainingBudget& budget) {
  TrainingCost c;
  if (!budget.enabled()) return c;
  const double tokensPerStep = static_cast<double>(plan.globalBatchSize) * static_cast<double>(plan.seqLen);
  if (tokensPerStep <= 0) return c;
  c.steps = std::ceil(budget.trainTokens / tokensPerStep);
  const double seconds = c.steps * evaluation.stepSeconds;
  c.days = seconds / 86400.0;
  c.gpuHours = seconds / 3600.0 * static_cast<double>(plan.cluster.totalGpus());
  c.dollars = c.gpuHours * budget.pricePerGpuHour;
  c.meetsDeadline = budget.deadlineDays <= 0 || c.days <= budget.deadlineDays;
  return c;
}

std::string formatDollars(double dollars) {
  if (dollars >= 1e9) return "$" + formatFixed(dollars / 1e9, 2) + "B";
  if (dollars >= 1e6) return "$" + formatFixed(dollars / 1e6, 2) + "M";
  if (dollars >= 1e3) return "$" + formatFixed(dollars / 1e3, 1) + "K";
  return "$" + formatFixed(dollars, 2);
}

std::string TrainingCost::describe(const TrainingBudget& budget) const {
  std::ostringstream o;
  o << formatFixed(days, days < 10 ? 2 : 1) << " days";
  if (days >= 730) o << " (" << formatFixed(days / 365.25, 1) << " years)";
  o << ", " << formatCount(gpuHours) << " GPU-hours";
  if (budget.pricePerGpuHour > 0) o << ", " << formatDollars(dollars);
  if (!meetsDeadline) o << ", MISSES the " << formatFixed(budget.deadlineDays, 1) << "-day deadline";
  return o.str();
}

Json TrainingCost::toJson() const {
  return {{"steps", steps}, {"days", days}, {"gpu_hours", gpuHours}, {"dollars", dollars}, {"meets_deadline", meetsDeadline}};
}

Result<Objective> parseObjective(const std::string& name) {
  if (name == "time") return Objective::kTime;
  if (name == "cost") return Objective::kCost;
  return fail(Error::badInput("--objective: expected time or cost, got \"" + name + "\""));
}

Result<double> parseTokenCount(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end == begin) return fail(Error::badInput("expected a token count such as 300B, 1.5T or 3e11, got \"" + text + "\""));
  double scale = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") scale = 1e3;
  else if (suffix == "M") scale = 1e6;
  else if (suffix == "B" || suffix == "G") scale = 1e9;
  else if (suffix == "T") scale = 1e12;
  else if (!suffix.empty()) {
    return fail(Error::badInput("expected a token count such as 300B, 1.5T or 3e11 (suffixes K, M, B, T), got \"" + text + "\""));
  }
  const double tokens = value * scale;
  if (!(tokens >= 1) || !std::isfinite(tokens) || tokens > 1e18) {
    return fail(Error::badInput("a token count must be between 1 and 1e18, got \"" + text + "\""));
  }
  return tokens;
}

Result<std::vector<std::int64_t>> parseGpuCounts(const std::string& text) {
  auto counts = parsePositiveIntegerList(text, 1LL << 24);
  if (!counts) return fail(Error::badInput("--gpus: expected GPU counts such as 256 or 256,512,1024, got \"" + text + "\""));
  for (std::size_t i = 0; i < counts->size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if ((*counts)[i] == (*counts)[j]) {
        return fail(Error::badInput("--gpus: " + std::to_string((*counts)[i]) + " is given twice in \"" + text + "\""));
      }
    }
  }
  return *counts;
}

}  // namespace colo::planner
