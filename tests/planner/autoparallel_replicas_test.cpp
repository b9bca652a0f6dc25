// The operator-level search's third axis: data-parallel replicas of each stage's mesh
// (docs/autoparallel.md, "Replicas").
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "colo/core/runnable.h"
#include "colo/costmodel/evaluator.h"
#include "colo/planner/autoparallel.h"
#include "core/test_support.h"

namespace colo::planner {
namespace {

// A plan file holding `view` (an operator plan) on `cluster` with global batch `gbs`.
Plan storedPlan(const Plan& base, const OperatorPlan& view) {
  Plan p = base;
  p.operatorPlan = view.toJson();
  return p;
}

// GPT-3 13B on 64 A100s as Megatron runs it, tp 8 inside a node and dp 8 across (a degree-level plan).
Plan gpt3On8x8(std::int64_t microBatch, std::int64_t globalBatch, bool sequenceParallel, RecomputePolicy recompute) {
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/gpt3-13b.json"));
  p.cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x16.json")), 64);
  p.parallel.tp = 8;
  p.parallel.dp = 8;
  p.parallel.sequenceParallel = sequenceParallel;
  p.microBatchSize = microBatch;
  p.globalBatchSize = globalBatch;
  p.seqLen = 2048;
  p.zeroStage = 1;
  p.stages = uniformStages(p.model.numLayers(), 1, recompute);
  return p;
}

// Megatron's split with data parallelism on the outer axis of an 8x8 mesh equals the same split on a 2x8
// mesh copied four times: the outer axis and the replicas reduce the gradients as one group of 8 and
// split the optimizer states over the same 8 ranks, and every GPU runs the same micro-batch. The two
// are costed alike to rounding; the replica form says how many copies it has and runs as dp 8.
TEST(AutoParallelReplicas, ReplicasOfADataParallelAxisEqualTheWiderMesh) {
  const Plan p = gpt3On8x8(2, 128, true, RecomputePolicy::kSelective);
  auto wide = operatorView(p);
  ASSERT_TRUE(wide) << wide.error().toString();
  ASSERT_EQ(wide->meshShape, (std::vector<std::int64_t>{8, 8}));
  ASSERT_EQ(wide->replicas, 1);

  Plan copies = storedPlan(p, *wide);
  copies.operatorPlan["mesh_shape"] = Json::array({2, 8});
  copies.operatorPlan["replicas"] = 4;
  copies.operatorPlan["mesh"] = "2x8";  // printed beside mesh_shape, so edited with it
  copies.operatorPlan["micro_batch_size"] = wide->microBatchSize / 4;
  auto narrow = evaluateOperatorPlan(copies, "copies.json");
  ASSERT_TRUE(narrow) << narrow.error().toString();
  EXPECT_EQ(narrow->replicas, 4);
  EXPECT_EQ(narrow->mesh, "2x8");
  EXPECT_EQ(narrow->microBatches, wide->microBatches);
  EXPECT_NEAR(narrow->stepSeconds, wide->stepSeconds, 1e-9 * wide->stepSeconds);
  EXPECT_NEAR(narrow->gradientSync, wide->gradientSync, 1e-9 * wide->gradientSync);
  EXPECT_NEAR(narrow->stateBytes, wide->stateBytes, 1e-6 * wide->stateBytes);
  EXPECT_NEAR(narrow->peakMemoryBytes, wide->peakMemoryBytes, 1e-6 * wide->peakMemoryBytes);
  ASSERT_TRUE(narrow->runnable) << narrow->expressedAs;
  EXPECT_EQ(narrow->dp, 8);
  EXPECT_EQ(narrow->tp, 8);
  EXPECT_NE(narrow->layoutText().find("x mesh 2x8 x 4 replicas"), std::string::npos) << narrow->layoutText();

  // Without the replicas the same 2x8 mesh holds four times the optimizer states per rank it splits
  // them over less, and reduces its gradients over 2 ranks instead of 8.
  Plan alone = copies;
  alone.cluster = *scaleCluster(p.cluster, 16);
  alone.globalBatchSize = 32;
  alone.operatorPlan["replicas"] = 1;
  auto single = evaluateOperatorPlan(alone, "alone.json");
  ASSERT_TRUE(single) << single.error().toString();
  EXPECT_GT(single->stateBytes, narrow->stateBytes);
  EXPECT_LT(single->gradientSync, narrow->gradientSync);
}

// The same operators on one, two and four copies of a 2x8 mesh (16, 32, 64 H100s, the batch scaled
// alike): the kernels are the same, the gradient reduction grows with the copies and the optimizer step
// shrinks. Per operator, a unit's states p(6 + 12/(sR)) (6 bytes of weight and gradient, 12 of optimizer
// split over s ranks of the mesh and R copies) fall from one copy to two by twice what they fall from two
// to four.
TEST(AutoParallelReplicas, CopiesReduceMoreGradientsAndSplitTheOptimizerStates) {
  const Model model = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  const ClusterSpec base = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json"));
  const ClusterSpec node2 = *scaleCluster(base, 16);
  AutoParallelOptions o;
  o.globalBatchSize = 16;
  o.seqLen = 4096;
  o.meshes = {{2, 8}};
  o.pipelineDegrees = {1};
  o.allowOffload = false;
  auto r = autoParallel(model, node2, o);
  ASSERT_TRUE(r) << r.error().toString();
  Plan stored;
  stored.model = model;
  stored.seqLen = 4096;
  stored.operatorPlan = r->joint.toJson();
  auto copies = [&](std::int64_t n) {
    Plan q = stored;
    q.cluster = *scaleCluster(base, 16 * n);
    q.globalBatchSize = 16 * n;
    q.operatorPlan["replicas"] = n;
    auto e = evaluateOperatorPlan(q, "copies.json");
    EXPECT_TRUE(e) << e.error().toString();
    return *e;
  };
  const OperatorPlan one = copies(1), two = copies(2), four = copies(4);
  EXPECT_NEAR(one.stepSeconds, r->joint.stepSeconds, 1e-9 * one.stepSeconds);
  EXPECT_NEAR(one.compute, four.compute, 1e-9 * one.compute);  // the same micro-batches through the same operators
  EXPECT_LT(one.gradientSync, two.gradientSync);
  EXPECT_LT(two.gradientSync, four.gradientSync);
  EXPECT_GT(one.optimizer, two.optimizer);
  EXPECT_GT(two.optimizer, four.optimizer);
  EXPECT_GT(one.stateBytes, two.stateBytes);
  EXPECT_GT(two.stateBytes, four.stateBytes);
  ASSERT_EQ(one.blocks.size(), four.blocks.size());
  int units = 0;
  for (std::size_t i = 0; i < one.blocks.size(); ++i) {
    for (std::size_t u = 0; u < one.blocks[i].units.size(); ++u) {
      const double w1 = one.blocks[i].units[u].stateBytes, w2 = two.blocks[i].units[u].stateBytes,
                   w4 = four.blocks[i].units[u].stateBytes;
      if (w1 == 0) continue;
      ++units;
      EXPECT_NEAR((w1 - w2) / (w2 - w4), 2.0, 1e-9) << one.blocks[i].units[u].unit;
    }
  }
  EXPECT_GT(units, 3);
}

// On a large cluster the default search tries replicas of meshes of whole nodes: Llama 3 405B on 16,384
// H100s solves to a genuinely three-axis layout (its mesh splits sequence and features, the replicas
// the batch) well ahead of the best plan with one mesh per stage, and its plan file round-trips.
TEST(AutoParallelReplicas, ALargeClusterSolvesToAThreeAxisLayout) {
  const Model model = test::loadModelOrFail(test::dataFile("models/llama3-405b.json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x2048.json"));
  AutoParallelOptions o;
  o.globalBatchSize = 2048;
  auto three = autoParallel(model, cluster, o);
  ASSERT_TRUE(three) << three.error().toString();
  AutoParallelOptions flat = o;
  flat.replicas = {1};
  auto two = autoParallel(model, cluster, flat);
  ASSERT_TRUE(two) << two.error().toString();
  const OperatorPlan& j = three->joint;
  ASSERT_GT(j.replicas, 1) << j.layoutText();
  EXPECT_EQ(j.pipelineStages * j.replicas * j.meshShape[0] * j.meshShape[1], cluster.totalGpus());
  EXPECT_EQ(j.microBatches * j.microBatchSize * j.replicas, o.globalBatchSize);
  EXPECT_LT(j.stepSeconds, 0.85 * two->joint.stepSeconds) << j.layoutText() << " vs " << two->joint.layoutText();
  // Neither mesh axis is data-parallel in the layers: both split the model.
  for (const auto& b : j.blocks) {
    if (b.name.rfind("layer", 0) != 0) continue;
    for (const auto& u : b.units) EXPECT_EQ(u.roles.find("batch"), std::string::npos) << u.unit << " " << u.roles;
  }
  auto file = operatorPlanFile(model, cluster, o, *three);
  ASSERT_TRUE(file) << file.error().toString();
  auto loaded = planFromJson(planToJson(*file), "405b.json");
  ASSERT_TRUE(loaded) << loaded.error().toString();
  auto again = evaluateOperatorPlan(*loaded, "405b.json");
  ASSERT_TRUE(again) << again.error().toString();
  EXPECT_EQ(again->replicas, j.replicas);
  EXPECT_NEAR(again->stepSeconds, j.stepSeconds, 1e-9 * j.stepSeconds);
  EXPECT_NEAR(again->peakMemoryBytes, j.peakMemoryBytes, 1e-9 * j.peakMemoryBytes);
}

// A stored replica count that does not fit the plan is refused by name.
TEST(AutoParallelReplicas, AStoredReplicaCountThatDoesNotFitIsRefusedByName) {
  const Plan p = gpt3On8x8(1, 64, false, RecomputePolicy::kFull);
  auto view = operatorView(p);
  ASSERT_TRUE(view) << view.error().toString();
  auto refused = [&](const Json& replicas, const std::string& path) {
    Plan q = storedPlan(p, *view);
    q.operatorPlan["replicas"] = replicas;
    auto r = evaluateOperatorPlan(q, "bad.json");
    ASSERT_FALSE(r) << replicas.dump();
    EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
    EXPECT_EQ(r.error().file, "bad.json");
    EXPECT_EQ(r.error().path, path) << r.error().message;
  };
  refused(0, "/operator_plan/replicas");
  refused(2.5, "/operator_plan/replicas");
  refused("four", "/operator_plan/replicas");
  refused(2, "/operator_plan/replicas");  // 2 copies of the 64-GPU mesh need 128 GPUs
}

// Megatron's split of a MoE model puts experts on the data-parallel axis: its degree-level form, and the
// plan file written from it, carry that as expert parallelism (ep), which they used to leave at 1.
TEST(AutoParallelReplicas, ExpertsOnTheDataAxisAreTheDegreeFormsExpertParallelism) {
  const Model model = test::loadModelOrFail(test::dataFile("models/mixtral-8x7b.json"));
  const ClusterSpec cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json")), 64);
  AutoParallelOptions o;
  o.globalBatchSize = 128;
  o.meshes = {{8, 8}};
  o.pipelineDegrees = {1};
  o.seedWithMegatron = false;
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_TRUE(r->megatron.runnable) << r->megatron.expressedAs;
  EXPECT_EQ(r->megatron.ep, 8) << r->megatron.expressedAs;
  EXPECT_NE(r->megatron.expressedAs.find(" ep=8 "), std::string::npos) << r->megatron.expressedAs;
  auto file = operatorPlanFile(model, cluster, o, *r);
  ASSERT_TRUE(file) << file.error().toString();
  if (!r->joint.runnable) {
    EXPECT_EQ(file->parallel.ep, 8);
  }
  EXPECT_EQ(file->parallel.tp * file->parallel.dp * file->parallel.pp, 64);
}

// Context parallelism has an operator view (colo-studio's Operators tab showed none for the degree-level
// search's best plans with cp): every operator splits the sequence over the cp axis, the tensor-parallel
// axis inside it as Megatron's split, data parallelism as copies of the tp x cp mesh; its memory and step
// agree with the evaluator's to within what the two models differ in (the per-operator model exchanges
// keys and values by all-gather where the plan's ring overlaps them).
TEST(AutoParallelReplicas, ContextParallelPlansHaveAnOperatorView) {
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/llama3-70b.json"));
  p.cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json")), 128);
  p.parallel.tp = 2;
  p.parallel.cp = 4;
  p.parallel.dp = 4;
  p.parallel.pp = 4;
  p.parallel.sequenceParallel = true;
  p.microBatchSize = 1;
  p.globalBatchSize = 64;
  p.seqLen = 8192;
  p.zeroStage = 1;
  p.stages = uniformStages(p.model.numLayers(), 4, RecomputePolicy::kNone);
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  auto view = operatorView(p);
  ASSERT_TRUE(view) << view.error().toString();
  EXPECT_EQ(view->mesh, "4x2");
  EXPECT_EQ(view->replicas, 4);
  EXPECT_TRUE(view->runnable) << view->expressedAs;
  EXPECT_NE(view->expressedAs.find("cp=4"), std::string::npos) << view->expressedAs;
  for (const auto& b : view->blocks) {
    if (b.name.rfind("layer", 0) != 0) continue;
    for (const auto& u : b.units) {
      if (u.unit == "attn.core") {
        EXPECT_EQ(u.roles, "0:seq 1:out");
      }
      if (u.unit == "mlp.down") {
        EXPECT_EQ(u.roles, "0:seq 1:in");
      }
    }
  }
  auto ev = costmodel::evaluatePlan(p);
  ASSERT_TRUE(ev) << ev.error().toString();
  EXPECT_NEAR(view->stepSeconds, ev->stepSeconds, 0.03 * ev->stepSeconds);  // 1.1% apart (2026-11-30)
  EXPECT_NEAR(view->peakMemoryBytes, ev->peakMemoryBytes, 0.03 * ev->peakMemoryBytes);  // 1.4% apart
  // A 1-D sequence split and the sequence inside data parallelism have views too.
  p.parallel.tp = 1;
  p.parallel.cp = 8;
  p.parallel.dp = 4;
  p.parallel.sequenceParallel = false;
  auto inner = operatorView(p);
  ASSERT_TRUE(inner) << inner.error().toString();
  EXPECT_EQ(inner->mesh, "4x8");
  EXPECT_TRUE(inner->runnable) << inner->expressedAs;
  // ZeRO-3 beside context parallelism shards the weights over dp x cp: no operator rule does, so no view
  // (it was viewed with the weights sharded over dp alone, or not at all with dp 1).
  p.zeroStage = 3;
  auto sharded = operatorView(p);
  ASSERT_FALSE(sharded);
  EXPECT_NE(sharded.error().message.find("ZeRO-3 beside context parallelism"), std::string::npos) << sharded.error().message;
}

// A MoE plan's expert parallelism (ep inside dp, beside tp, as Megatron-Core places it) has an operator
// view: the mesh ep x tp copied dp/ep times, the MoE blocks' experts over its outer axis.
TEST(AutoParallelReplicas, ExpertParallelPlansHaveAnOperatorView) {
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/mixtral-8x7b.json"));
  p.cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json")), 32);
  p.parallel.tp = 2;
  p.parallel.dp = 8;
  p.parallel.ep = 4;
  p.parallel.pp = 2;
  p.parallel.sequenceParallel = true;
  p.microBatchSize = 1;
  p.globalBatchSize = 256;
  p.seqLen = 4096;
  p.zeroStage = 1;
  p.stages = uniformStages(p.model.numLayers(), 2, RecomputePolicy::kSelective);
  for (auto& s : p.stages) s.recomputeLayers = s.layers;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  auto view = operatorView(p);
  ASSERT_TRUE(view) << view.error().toString();
  EXPECT_EQ(view->mesh, "4x2");
  EXPECT_EQ(view->replicas, 2);
  EXPECT_TRUE(view->runnable) << view->expressedAs;
  EXPECT_NE(view->expressedAs.find("tp=2 dp=8 ep=4 pp=2 sp"), std::string::npos) << view->expressedAs;
  int moe = 0;
  for (const auto& b : view->blocks) {
    for (const auto& u : b.units) {
      if (u.kind != "moe") continue;
      ++moe;
      EXPECT_EQ(u.roles, "0:expert 1:inner") << b.name;
    }
  }
  EXPECT_GT(moe, 0);
  auto ev = costmodel::evaluatePlan(p);
  ASSERT_TRUE(ev) << ev.error().toString();
  EXPECT_NEAR(view->stepSeconds, ev->stepSeconds, 0.03 * ev->stepSeconds);  // 0.6% apart (2026-12-01)
  EXPECT_NEAR(view->peakMemoryBytes, ev->peakMemoryBytes, 0.03 * ev->peakMemoryBytes);  // 1.1% apart
  // Without expert parallelism the MoE blocks split the batch (the solver is not free to split experts).
  p.parallel.ep = 1;
  auto dense = operatorView(p);
  ASSERT_TRUE(dense) << dense.error().toString();
  EXPECT_EQ(dense->mesh, "8x2");
  for (const auto& b : dense->blocks) {
    for (const auto& u : b.units) {
      if (u.kind == "moe") {
        EXPECT_EQ(u.roles, "0:batch 1:inner") << b.name;
      }
    }
  }
  // Experts alone on a 1-D mesh, copied: tp 1, ep 8 over 16 data-parallel ranks.
  {
    Plan q = p;
    q.parallel.tp = 1;
    q.parallel.sequenceParallel = false;
    q.parallel.ep = 8;
    q.parallel.dp = 16;
    ASSERT_TRUE(validatePlan(q)) << validatePlan(q).error().toString();
    auto alone = operatorView(q);
    ASSERT_TRUE(alone) << alone.error().toString();
    EXPECT_EQ(alone->mesh, "8");
    EXPECT_EQ(alone->replicas, 2);
    EXPECT_NE(alone->expressedAs.find("tp=1 dp=16 ep=8 pp=2"), std::string::npos) << alone->expressedAs;
    for (const auto& b : alone->blocks) {
      for (const auto& u : b.units) {
        if (u.kind == "moe") {
          EXPECT_EQ(u.roles, "0:expert") << b.name;
        }
      }
    }
    // Experts over dp x cp, and ZeRO-3 beside expert parallelism, have no operator rule.
    Plan cp = q;
    cp.parallel.cp = 2;
    cp.parallel.dp = 8;
    cp.seqLen = 8192;
    auto overCp = operatorView(cp);
    ASSERT_FALSE(overCp);
    EXPECT_NE(overCp.error().message.find("expert parallelism over dp x cp"), std::string::npos) << overCp.error().message;
    Plan z3 = q;
    z3.zeroStage = 3;
    z3.parallel.pp = 1;
    z3.stages = uniformStages(q.model.numLayers(), 1, RecomputePolicy::kFull);
    for (auto& s : z3.stages) s.recomputeLayers = s.layers;
    auto sharded = operatorView(z3);
    ASSERT_FALSE(sharded);
    EXPECT_NE(sharded.error().message.find("ZeRO-3 beside expert parallelism"), std::string::npos) << sharded.error().message;
  }
  // Experts folded over the tensor-parallel ranks have no operator rule: refused by name.
  p.parallel.ep = 8;
  p.parallel.etp = 1;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  auto folded = operatorView(p);
  ASSERT_FALSE(folded);
  EXPECT_NE(folded.error().message.find("experts folded over other ranks (expert_tp 1, tp 2)"), std::string::npos)
      << folded.error().message;
}

// One GPU has an operator view (it was refused: its one-GPU mesh was given a data-parallel axis, which
// no layout of the layers could enter), and an interleaved plan whose chunks are unequal is refused by the
// space's own rule rather than by "the split does not apply".
TEST(AutoParallelReplicas, OneGpuAndUnequalChunksInTheOperatorView) {
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/gpt2-small.json"));
  const ClusterSpec node = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb.json"));
  p.cluster = *scaleCluster(node, 1);
  p.microBatchSize = 8;
  p.globalBatchSize = 32;
  p.seqLen = 1024;
  p.zeroStage = 0;
  p.stages = uniformStages(p.model.numLayers(), 1, RecomputePolicy::kNone);
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  auto view = operatorView(p);
  ASSERT_TRUE(view) << view.error().toString();
  EXPECT_EQ(view->mesh, "1");
  EXPECT_TRUE(view->runnable) << view->expressedAs;
  auto ev = costmodel::evaluatePlan(p);
  ASSERT_TRUE(ev) << ev.error().toString();
  EXPECT_NEAR(view->stepSeconds, ev->stepSeconds, 0.1 * ev->stepSeconds);
  // 12 layers over 2 stages of 4 chunks: 1 or 2 layers a chunk.
  p.cluster = *scaleCluster(node, 2);
  p.parallel.pp = 2;
  p.parallel.virtualStages = 4;
  p.schedule = Schedule::kInterleaved;
  p.stages = uniformStages(p.model.numLayers(), 8, RecomputePolicy::kNone);
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  auto unequal = operatorView(p);
  ASSERT_FALSE(unequal);
  EXPECT_NE(unequal.error().message.find("12 layers over 2 x 4 chunks"), std::string::npos) << unequal.error().message;
}

}  // namespace
}  // namespace colo::planner
