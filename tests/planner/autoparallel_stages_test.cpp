// The operator-level search's pipeline stages: layers per stage, with the embedding and the head
// weighed (docs/autoparallel.md, "Assembly").
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "autoparallel_search.h"
#include "colo/planner/autoparallel.h"
#include "colo/planner/search.h"
#include "core/test_support.h"

namespace colo::planner {
namespace {

using detail::stageLayerCounts;

TEST(AutoParallelStages, TheEndStagesGiveLayersToTheEmbeddingAndTheHead) {
  // Llama 3 405B's 126 layers on 64 stages, the embedding and head each near a layer's time: one layer
  // on each end stage, two on every other (as Megatron runs it: Llama 3 paper, "one layer fewer on the
  // first and last stage").
  std::vector<std::int64_t> expected(64, 2);
  expected.front() = expected.back() = 1;
  EXPECT_EQ(stageLayerCounts(126, 64, 1, 1.0, 0.9, 1.0), expected);
  // Nothing at the ends and layers that divide: equal stages.
  EXPECT_EQ(stageLayerCounts(128, 64, 1, 1.0, 0.0, 0.0), std::vector<std::int64_t>(64, 2));
  // A head of three layers' time on 4 stages of 30 layers: the slowest stage takes 9 layers' time at
  // best; of the splits that reach it, the one with the fewest layers on the first stage (which holds
  // the most micro-batches in flight).
  EXPECT_EQ(stageLayerCounts(30, 4, 1, 1.0, 0.0, 3.0), (std::vector<std::int64_t>{6, 9, 9, 6}));
  // Two stages: the last takes what the first leaves.
  EXPECT_EQ(stageLayerCounts(10, 2, 1, 1.0, 0.0, 2.0), (std::vector<std::int64_t>{6, 4}));
  // Layers left over go to the later middle stages (fewer micro-batches in flight there).
  EXPECT_EQ(stageLayerCounts(11, 4, 1, 1.0, 0.0, 0.0), (std::vector<std::int64_t>{2, 3, 3, 3}));
  // The interleaved schedule keeps equal chunks; one stage holds everything.
  EXPECT_EQ(stageLayerCounts(32, 4, 2, 1.0, 5.0, 5.0), std::vector<std::int64_t>(8, 4));
  EXPECT_EQ(stageLayerCounts(32, 1, 1, 1.0, 5.0, 5.0), std::vector<std::int64_t>(1, 32));
}

TEST(AutoParallelStages, Llama405BOnSixtyFourStagesBeatsTheDegreeLevelPlanAndReproducesItsStages) {
  // The degree-level search's best plan for Llama 3 405B on 16,384 H100s is tp 4 x cp 8, 64 stages of
  // 1, 2 x 62, 1 layers, 8 copies. The operator-level search on the same 8x4 mesh, 64 stages and 8 copies
  // used to spread the layers evenly (1.97 a stage beside the head): 8.42 s against 6.50 s.
  const Model model = test::loadModelOrFail(test::dataFile("models/llama3-405b.json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x2048.json"));
  AutoParallelOptions o;
  o.globalBatchSize = 2048;
  o.meshes = {{8, 4}};
  o.pipelineDegrees = {64};
  o.replicas = {8};
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  const OperatorPlan& j = r->joint;
  std::vector<std::int64_t> expected(64, 2);
  expected.front() = expected.back() = 1;
  EXPECT_EQ(j.stageLayers, expected) << j.layoutText();
  SearchOptions so;
  so.globalBatchSize = 2048;
  so.topK = 1;
  auto degree = search(model, cluster, so);
  ASSERT_TRUE(degree && degree->feasible());
  EXPECT_LT(j.stepSeconds, degree->top.front().evaluation.stepSeconds) << j.layoutText();
  // Stored beside the degree-level plan, evaluate --plan gives the same stages and step.
  Plan stored = degree->top.front().plan;
  stored.operatorPlan = j.toJson();
  auto again = evaluateOperatorPlan(stored, "405b.json");
  ASSERT_TRUE(again) << again.error().toString();
  EXPECT_EQ(again->stageLayers, expected);
  EXPECT_NEAR(again->stepSeconds, j.stepSeconds, 1e-9 * j.stepSeconds);
}

TEST(AutoParallelStages, ThePlanFileListsTheStagesAsCosted) {
  // Llama 3 8B (a 128K-word head) in 4 stages of an 8-GPU mesh: the runnable degree-level form stored
  // beside the operator plan has the layers per stage the assembly costed, not an even split.
  const Model model = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  const ClusterSpec cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x16.json")), 32);
  AutoParallelOptions o;
  o.globalBatchSize = 512;
  o.meshes = {{8}};
  o.pipelineDegrees = {4};
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  const OperatorPlan& j = r->joint;
  ASSERT_EQ(j.stageLayers.size(), 4u);
  EXPECT_EQ(std::accumulate(j.stageLayers.begin(), j.stageLayers.end(), std::int64_t{0}), 32);
  EXPECT_LT(j.stageLayers.back(), j.stageLayers[1]) << "the head's stage gives up layers";
  auto file = operatorPlanFile(model, cluster, o, *r);
  ASSERT_TRUE(file) << file.error().toString();
  ASSERT_EQ(file->stages.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(file->stages[i].layers, j.stageLayers[i]) << i;
  auto loaded = planFromJson(planToJson(*file), "8b.json");
  ASSERT_TRUE(loaded) << loaded.error().toString();
  auto again = evaluateOperatorPlan(*loaded, "8b.json");
  ASSERT_TRUE(again) << again.error().toString();
  EXPECT_EQ(again->stageLayers, j.stageLayers);
  EXPECT_NEAR(again->stepSeconds, j.stepSeconds, 1e-9 * j.stepSeconds);
}

}  // namespace
}  // namespace colo::planner
