// The operator-level search skips combinations (stages, mesh, micro-batch) that cannot beat the best plan
// found: a combination's bound (its kernels and in-unit collectives at each unit's fastest strategy, over
// the pipeline's micro-batches and bubble) and the price bisection's order must never lose the optimum
// (docs/autoparallel.md, "Solve time").
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "colo/planner/autoparallel.h"
#include "core/test_support.h"

namespace colo::planner {
namespace {

struct Case {
  std::string model, cluster;
  std::int64_t gbs;
};

// Every (pipeline degree, mesh) of one node searched on its own, where nothing else prunes it, against
// the whole search: the fastest of them is the whole search's plan.
void expectPruningKeepsTheOptimum(const Case& c) {
  const Model model = test::loadModelOrFail(test::dataFile("models/" + c.model + ".json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/" + c.cluster + ".json"));
  ASSERT_EQ(cluster.totalGpus(), cluster.gpusPerNode) << "one node: every mesh is searched with one replica";
  AutoParallelOptions o;
  o.globalBatchSize = c.gbs;
  o.seedWithMegatron = false;  // the per-operator sweep alone
  auto whole = autoParallel(model, cluster, o);
  ASSERT_TRUE(whole) << c.model << ": " << whole.error().toString();
  double fastest = INFINITY;
  std::string where;
  int searched = 0;
  for (std::int64_t pp = 1; pp <= cluster.totalGpus() && pp <= model.numLayers(); pp *= 2) {
    const std::int64_t gpus = cluster.totalGpus() / pp;
    std::vector<std::vector<std::int64_t>> shapes{{gpus}};
    for (std::int64_t inner = 2; inner < gpus; inner *= 2) shapes.push_back({gpus / inner, inner});
    for (const auto& shape : shapes) {
      AutoParallelOptions one = o;
      one.pipelineDegrees = {pp};
      one.meshes = {shape};
      one.replicas = {1};
      auto r = autoParallel(model, cluster, one);
      if (!r) continue;  // nothing of this combination fits, or no micro-batch covers it
      ++searched;
      if (r->joint.stepSeconds < fastest) {
        fastest = r->joint.stepSeconds;
        where = r->joint.layoutText();
      }
    }
  }
  ASSERT_GE(searched, 3) << c.model;
  EXPECT_NEAR(whole->joint.stepSeconds, fastest, 1e-12 * fastest)
      << c.model << ": whole search " << whole->joint.layoutText() << ", fastest alone " << where;
}

TEST(AutoParallelPruning, SkippedCombinationsNeverHoldTheFastestPlan) {
  // A dense GPT, a small MoE (whose all-to-alls are in-unit collectives the bound counts) and a Llama
  // whose memory budget makes the price bisection run.
  for (const Case& c : {Case{"gpt2-medium", "dgx-a100-80gb", 512}, Case{"tiny-moe", "dgx-a100-80gb", 64},
                        Case{"llama3-8b", "dgx-h100", 512}}) {
    expectPruningKeepsTheOptimum(c);
  }
}

}  // namespace
}  // namespace colo::planner
