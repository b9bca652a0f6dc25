#include "colo/planner/budget.h"

#include <cmath>

#include <gtest/gtest.h>

#include "colo/planner/search.h"
#include "core/test_support.h"

namespace colo::planner {
namespace {

Plan llamaPlan(std::int64_t gpus) {
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/llama3-70b.json"));
  auto c = scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json")), gpus);
  EXPECT_TRUE(c);
  p.cluster = *c;
  p.parallel.tp = 8;
  p.parallel.pp = 4;
  p.parallel.dp = gpus / 32;
  p.parallel.sequenceParallel = true;
  p.microBatchSize = 1;
  p.globalBatchSize = 512;
  p.seqLen = 8192;
  p.zeroStage = 1;
  p.stages = uniformStages(80, 4, RecomputePolicy::kSelective);
  return p;
}

TEST(Budget, DaysGpuHoursAndDollarsFollowTheStepTime) {
  const Plan p = llamaPlan(512);
  costmodel::Evaluation ev;
  ev.stepSeconds = 8.0;
  const TrainingBudget budget{15e12, 2.5, 365};
  const TrainingCost c = trainingCost(p, ev, budget);
  const double steps = std::ceil(15e12 / (512.0 * 8192.0));  // 3,576,279 steps
  EXPECT_DOUBLE_EQ(c.steps, steps);
  EXPECT_DOUBLE_EQ(c.days, steps * 8.0 / 86400.0);
  EXPECT_DOUBLE_EQ(c.gpuHours, steps * 8.0 / 3600.0 * 512.0);
  EXPECT_DOUBLE_EQ(c.dollars, c.gpuHours * 2.5);
  EXPECT_TRUE(c.meetsDeadline);  // 331 days
  const TrainingCost late = trainingCost(p, ev, TrainingBudget{15e12, 0, 300});
  EXPECT_FALSE(late.meetsDeadline);
  EXPECT_EQ(late.dollars, 0);
  EXPECT_NE(late.describe(TrainingBudget{15e12, 0, 300}).find("MISSES the 300.0-day deadline"), std::string::npos);
  EXPECT_EQ(trainingCost(p, ev, TrainingBudget{}).steps, 0);  // no budget, nothing computed
}

TEST(Budget, TokenCountsAndGpuListsParseAsPeopleWriteThem) {
  EXPECT_DOUBLE_EQ(*parseTokenCount("300B"), 300e9);
  EXPECT_DOUBLE_EQ(*parseTokenCount("1.5T"), 1.5e12);
  EXPECT_DOUBLE_EQ(*parseTokenCount("3e11"), 3e11);
  EXPECT_DOUBLE_EQ(*parseTokenCount("500K"), 5e5);
  for (const char* bad : {"", "T", "12Q", "-5B", "0", "1e30"}) EXPECT_FALSE(parseTokenCount(bad)) << bad;
  EXPECT_EQ(*parseGpuCounts("256,512,1024"), (std::vector<std::int64_t>{256, 512, 1024}));
  EXPECT_EQ(*parseGpuCounts("8"), (std::vector<std::int64_t>{8}));
  EXPECT_EQ(*parseGpuCounts("256, 512"), (std::vector<std::int64_t>{256, 512}));
  for (const char* bad : {"", "256,,512", "256,x", "-8", "0", "256,512,", "+256", ","}) EXPECT_FALSE(parseGpuCounts(bad)) << bad;
  // A size given twice would list every plan twice.
  auto twice = parseGpuCounts("8,16,8");
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().message, "--gpus: 8 is given twice in \"8,16,8\"");
  EXPECT_EQ(*parseObjective("cost"), Objective::kCost);
  EXPECT_FALSE(parseObjective("money"));
  EXPECT_EQ(formatDollars(1.0094e6), "$1.01M");
  EXPECT_EQ(formatDollars(12345), "$12.3K");
}

TEST(Budget, MoreGpusFinishSoonerAndCostAtLeastAsMuch) {
  // Searched at 256 and 512 GPUs, the same global batch: the larger cluster trains in fewer days, and
  // (weak scaling loses efficiency) no fewer GPU-hours.
  const Model model = test::loadModelOrFail(test::dataFile("models/llama3-70b.json"));
  SearchOptions options;
  options.globalBatchSize = 512;
  options.seqLen = 8192;
  options.topK = 1;
  const TrainingBudget budget{1e12, 2.0, 0};
  std::vector<TrainingCost> costs;
  for (const std::int64_t gpus : {256, 512}) {
    auto cluster = scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json")), gpus);
    ASSERT_TRUE(cluster);
    auto found = search(model, *cluster, options);
    ASSERT_TRUE(found && found->feasible());
    costs.push_back(trainingCost(found->top.front().plan, found->top.front().evaluation, budget));
  }
  EXPECT_LT(costs[1].days, costs[0].days);
  EXPECT_GE(costs[1].gpuHours, 0.98 * costs[0].gpuHours);
}

}  // namespace
}  // namespace colo::planner
