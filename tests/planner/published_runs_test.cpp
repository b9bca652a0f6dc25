// On the published runs, the search finds a configuration at least as fast (as predicted) as the one
// the authors ran, under the same execution settings and memory budget.
#include <gtest/gtest.h>

#include "colo/planner/search.h"
#include "core/test_support.h"
#include "validation_harness.h"

namespace colo {
namespace {

TEST(PublishedRuns, SearchIsAtLeastAsFastAsThePublishedConfiguration) {
  auto cases = validation::loadCases(test::dataFile("validation"));
  ASSERT_TRUE(cases) << cases.error().toString();
  int compared = 0;
  for (const auto& c : *cases) {
    if (c.layerOnly) continue;
    auto published = costmodel::evaluatePlan(c.plan);
    ASSERT_TRUE(published) << c.id;
    if (!published->fits) continue;  // a configuration colo thinks cannot fit is no fair yardstick
    planner::SearchOptions o;
    o.globalBatchSize = c.plan.globalBatchSize;
    o.seqLen = c.plan.seqLen;
    o.precision = c.plan.precision;
    o.flashAttention = c.plan.execution.flashAttention;
    o.execution = c.plan.execution;
    o.maxMemoryFraction = 1.0;
    auto r = planner::search(c.plan.model, c.plan.cluster, o);
    ASSERT_TRUE(r) << c.id << ": " << r.error().toString();
    ASSERT_TRUE(r->feasible()) << c.id << ": " << r->infeasibleReason;
    EXPECT_LE(r->top.front().evaluation.stepSeconds, published->stepSeconds * (1 + 1e-9))
        << c.id << ": best " << r->top.front().plan.name;
    ++compared;
  }
  EXPECT_GE(compared, 4);
}

}  // namespace
}  // namespace colo
