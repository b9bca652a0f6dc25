#pragma once
/// \file
/// What a training run costs in days, GPU-hours and dollars: a plan's predicted step time, times the
/// steps a token budget needs, times the GPUs it holds, times a price per GPU-hour. `search
/// --objective cost|time`, `evaluate` and `compare` print it (docs/costmodel.md, "Time and money").

#include <optional>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/plan.h"
#include "colo/costmodel/evaluator.h"

namespace colo::planner {

/// The run the user wants to pay for. Tokens are required; price and deadline are optional.
struct TrainingBudget {
  double trainTokens = 0;      ///< tokens to train on (0: no budget given)
  double pricePerGpuHour = 0;  ///< USD per GPU-hour (0: none given; dollars are not shown)
  double deadlineDays = 0;     ///< wall-clock days the run must finish in (0: none)
  [[nodiscard]] bool enabled() const { return trainTokens > 0; }
};

/// What a plan costs under a budget.
struct TrainingCost {
  double steps = 0;        ///< optimizer steps: ceil(tokens / (global batch x sequence))
  double days = 0;         ///< wall-clock days at the predicted step time
  double gpuHours = 0;     ///< days x 24 x GPUs of the plan's cluster
  double dollars = 0;      ///< GPU-hours x price (0 without a price)
  bool meetsDeadline = true;
  /// "12.3 days, 2.36M GPU-hours, $4.72M" (dollars only with a price; "MISSES the 10-day deadline").
  [[nodiscard]] std::string describe(const TrainingBudget& budget) const;
  [[nodiscard]] Json toJson() const;
};

/// "$1.01M", "$12.3K", "$950.00".
[[nodiscard]] std::string formatDollars(double dollars);

[[nodiscard]] TrainingCost trainingCost(const Plan& plan, const costmodel::Evaluation& evaluation,
                                        const TrainingBudget& budget);

/// How plans are ranked: by wall-clock time to train (fastest first) or by what the run costs
/// (GPU-hours, or dollars with a price; with a deadline, runs that miss it rank last).
enum class Objective { kTime, kCost };
[[nodiscard]] Result<Objective> parseObjective(const std::string& name);  ///< time, cost

/// A token count as people write it: 300e9, 3e11, 300B, 1.5T, 15T, 2M, 500K.
[[nodiscard]] Result<double> parseTokenCount(const std::string& text);

/// A list of GPU counts: "256", "256,512,1024". Errors name the text.
[[nodiscard]] Result<std::vector<std::int64_t>> parseGpuCounts(const std::string& text);

}  // namespace colo::planner
