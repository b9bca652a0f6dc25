// A published row that names no parallel layout (validation_rows_detail.h, chooseOpenLayout).

#include <algorithm>
#include <optional>
#include <string>

#include "colo/planner/search.h"
#include "validation_rows_detail.h"

namespace colo::validation::detail {

Result<void> chooseOpenLayout(const std::string& id, std::optional<std::int64_t> microBatch, std::optional<std::int64_t> virtualStages,
                              Plan& p) {
  planner::SearchOptions options;
  options.globalBatchSize = p.globalBatchSize;
  options.seqLen = p.seqLen;
  options.precision = p.precision;
  options.execution = p.execution;
  options.flashAttention = p.execution.flashAttention;
  options.topK = 1;
  // What the framework and the row decide stays: the optimizer's sharding and no context or expert
  // parallelism the row does not name; degrees, micro-batch, schedule and recompute are colo's choice.
  options.fixed["zero"] = p.zeroStage;
  options.fixed["cp"] = 1;
  options.fixed["ep"] = std::max<std::int64_t>(1, p.parallel.ep);
  options.allowOffload = false;
  options.proposeQuantizedWeights = false;  // the row's framework decides (execution.quantized_params)
  if (microBatch) options.fixed["mbs"] = *microBatch;
  if (virtualStages) options.fixed["vpp"] = *virtualStages;
  auto found = planner::search(p.model, p.cluster, options);
  if (!found) return fail(rowError(id, "parallel", "no layout stated, and colo's search failed: " + found.error().message));
  if (found->top.empty()) {
    return fail(rowError(id, "parallel", "no layout stated, and no layout colo knows fits: " + found->infeasibleReason));
  }
  const Plan& best = found->top.front().plan;
  p.parallel = best.parallel;
  p.schedule = best.schedule;
  p.stages = best.stages;
  p.microBatchSize = best.microBatchSize;
  return {};
}

}  // namespace colo::validation::detail
