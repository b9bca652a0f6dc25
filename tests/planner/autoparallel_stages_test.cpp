// The operator-level search's pipeline stages: layers per stage, with the embedding and the head
// weighed (docs/autoparallel.md, "Assembly").
#include <functional>
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

// The least bottleneck over every split of `layers` into `pp` stages of at least one layer (brute force).
double bestBottleneck(std::int64_t layers, std::int64_t pp, double first, double last) {
  double best = 1e300;
  std::vector<std::int64_t> k(static_cast<std::size_t>(pp), 1);
  std::function<void(std::size_t, std::int64_t)> place = [&](std::size_t i, std::int64_t left) {
    if (i + 1 == k.size()) {
      if (left < 1) return;
      k[i] = left;
      double worst = 0;
      for (std::size_t s = 0; s < k.size(); ++s) {
        worst = std::max(worst, static_cast<double>(k[s]) + (s == 0 ? first : 0.0) + (s + 1 == k.size() ? last : 0.0));
      }
      best = std::min(best, worst);
      return;
    }
    for (std::int64_t n = 1; n <= left - static_cast<std::int64_t>(k.size() - 1 - i); ++n) {
      k[i] = n;
      place(i + 1, left - n);
    }
  };
  place(0, layers);
  return best;
}

TEST(AutoParallelStages, TheSplitsBottleneckIsTheLeastOfAnySplitAndTheSurplusLeavesTheFullestStages) {
  // Against brute force on small cases, with heavy and light ends.
  for (std::int64_t pp = 2; pp <= 5; ++pp) {
    for (std::int64_t layers = pp + 1; layers <= 13; ++layers) {
      for (const double first : {0.0, 0.4, 2.5}) {
        for (const double last : {0.0, 1.0, 3.0, 5.5}) {
          const auto k = stageLayerCounts(layers, pp, 1, 1.0, first, last);
          ASSERT_EQ(static_cast<std::int64_t>(k.size()), pp);
          EXPECT_EQ(std::accumulate(k.begin(), k.end(), std::int64_t{0}), layers);
          double worst = 0;
          for (std::size_t s = 0; s < k.size(); ++s) {
            EXPECT_GE(k[s], 1);
            worst = std::max(worst, static_cast<double>(k[s]) + (s == 0 ? first : 0.0) + (s + 1 == k.size() ? last : 0.0));
          }
          EXPECT_NEAR(worst, bestBottleneck(layers, pp, first, last), 1e-9)
              << layers << " layers, " << pp << " stages, ends " << first << " and " << last;
        }
      }
    }
  }
  // A heavy head on 3 stages: the first stage may take more than an even share.
  EXPECT_EQ(stageLayerCounts(9, 3, 1, 1.0, 0.0, 3.0), (std::vector<std::int64_t>{4, 4, 1}));
  // 32 layers on 8 stages, a head of 3.5 layers: the bottleneck is 5 layers; of the 4 layers too many
  // at that bottleneck, each leaves the stage holding the most layers x micro-batches in flight (stage
  // i holds 8 - i under 1F1B), not all the first stage's.
  EXPECT_EQ(stageLayerCounts(32, 8, 1, 1.0, 0.0, 3.5), (std::vector<std::int64_t>{3, 4, 4, 5, 5, 5, 5, 1}));
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

// Llama 3 8B (a 128K-word head) searched in 4 stages of an 8-GPU mesh on 32 A100s.
struct Llama8bIn4Stages {
  Model model = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  ClusterSpec cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x16.json")), 32);
  AutoParallelOptions options = [] {
    AutoParallelOptions o;
    o.globalBatchSize = 512;
    o.meshes = {{8}};
    o.pipelineDegrees = {4};
    return o;
  }();
};

TEST(AutoParallelStages, ThePlanFileListsTheStagesAsCosted) {
  // Llama 3 8B (a 128K-word head) in 4 stages of an 8-GPU mesh: the runnable degree-level form stored
  // beside the operator plan has the layers per stage the assembly costed, not an even split.
  const Llama8bIn4Stages x;
  const Model& model = x.model;
  const ClusterSpec& cluster = x.cluster;
  const AutoParallelOptions& o = x.options;
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
  // A stored split is costed as stored; one that does not add up is refused by name.
  Json even = loaded->operatorPlan;
  even["stage_layers"] = Json::array({8, 8, 8, 8});
  Plan edited = *loaded;
  edited.operatorPlan = even;
  auto evenly = evaluateOperatorPlan(edited, "8b.json");
  ASSERT_TRUE(evenly) << evenly.error().toString();
  EXPECT_EQ(evenly->stageLayers, (std::vector<std::int64_t>{8, 8, 8, 8}));
  EXPECT_GT(evenly->stepSeconds, j.stepSeconds);
  even["stage_layers"] = Json::array({8, 8, 8, 9});
  edited.operatorPlan = even;
  auto refused = evaluateOperatorPlan(edited, "8b.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/operator_plan/stage_layers");
  EXPECT_NE(refused.error().message.find("[8,8,8,9]"), std::string::npos) << refused.error().message;
  // The operator view of a degree-level plan costs that plan's own stages.
  Plan degree = *file;
  degree.operatorPlan = Json();
  for (auto& st : degree.stages) st.layers = 8;
  auto view = operatorView(degree);
  ASSERT_TRUE(view) << view.error().toString();
  EXPECT_EQ(view->stageLayers, (std::vector<std::int64_t>{8, 8, 8, 8}));
}

TEST(AutoParallelStages, EachStageIsCostedWithTheLayerClassesItHolds) {
  // Two dense layers with a wide MLP, then two MoE layers with small experts (DeepSeek's dense first
  // layers, exaggerated): a stage holding both dense layers holds most of the weights. With every stage
  // costed as average layers, a 2 + 2 split would look leaner than 1 + 3; costed by class it is fuller.
  const Json spec = {{"format", "colo.model/1"}, {"name", "dense-first-moe"}, {"family", "deepseek_v3"},
                     {"num_layers", 4}, {"hidden_size", 512}, {"num_attention_heads", 8}, {"ffn_hidden_size", 16384},
                     {"vocab_size", 1024}, {"seq_len", 256},
                     {"moe", {{"num_experts", 8}, {"top_k", 2}, {"expert_ffn_hidden_size", 128}, {"first_dense_layers", 2}}}};
  auto model = modelFromJson(spec, "dense-first-moe.json");
  ASSERT_TRUE(model) << model.error().toString();
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb.json"));
  AutoParallelOptions o;
  o.globalBatchSize = 16;
  o.allowOffload = false;
  auto context = detail::makeContext(*model, cluster, o);
  ASSERT_TRUE(context) << context.error().toString();
  ASSERT_EQ(context->classes.size(), 2u);
  // Megatron's split with data parallelism over a 1-D mesh of 4, two stages of the given layers (a
  // search of its own each: a search keeps its best plan).
  auto split = [&](std::vector<std::int64_t> stages) {
    detail::Search search(*context);
    return search.megatronAt({4}, detail::MegatronRule{-1, 0, false}, detail::RecomputeMode::kNone, 2, 4, 1, stages);
  };
  auto even = split({2, 2});
  auto uneven = split({1, 3});
  ASSERT_TRUE(even) << even.error().toString();
  ASSERT_TRUE(uneven) << uneven.error().toString();
  EXPECT_EQ(even->stageLayers, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(uneven->stageLayers, (std::vector<std::int64_t>{1, 3}));
  EXPECT_GT(even->stateBytes, uneven->stateBytes);
  EXPECT_GT(even->peakMemoryBytes, uneven->peakMemoryBytes);
  // Interleaved, two chunks a stage of one layer each: chunk v of stage i holds layer 2v + i, so each
  // stage holds one dense and one MoE layer, and the fuller stage holds less than both dense layers.
  auto interleaved = [&] {
    detail::Search search(*context);
    return search.megatronAt({4}, detail::MegatronRule{-1, 0, false}, detail::RecomputeMode::kNone, 2, 4, 2, {1, 1, 1, 1});
  }();
  ASSERT_TRUE(interleaved) << interleaved.error().toString();
  EXPECT_EQ(interleaved->virtualStages, 2);
  EXPECT_LT(interleaved->stateBytes, even->stateBytes);
}

TEST(AutoParallelStages, OffloadedActivationsAreCountedForEveryLayerOfTheStage) {
  // The step's parts add up to the step when a pipelined plan offloads activations: the exposed
  // transfers are those of every layer the slowest stage holds.
  const Llama8bIn4Stages x;
  const Model& model = x.model;
  const ClusterSpec& cluster = x.cluster;
  const AutoParallelOptions& o = x.options;
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  auto file = operatorPlanFile(model, cluster, o, *r);
  ASSERT_TRUE(file) << file.error().toString();
  Plan offloading = *file;
  offloading.operatorPlan["activation_offload_fraction"] = 1.0;
  auto p = evaluateOperatorPlan(offloading, "offload.json");
  ASSERT_TRUE(p) << p.error().toString();
  ASSERT_GT(p->offload, 0.0);
  const double parts = p->compute + p->communication + p->recomputeSeconds + p->offload + p->bubble + p->gradientSync + p->optimizer;
  EXPECT_NEAR(parts, p->stepSeconds, 1e-9 * p->stepSeconds);
}

}  // namespace
}  // namespace colo::planner
