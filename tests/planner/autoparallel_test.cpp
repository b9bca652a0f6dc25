#include "colo/planner/autoparallel.h"

#include <cmath>
#include <functional>
#include <map>

#include <gtest/gtest.h>

#include "autoparallel_search.h"
#include "colo/core/runnable.h"
#include "colo/costmodel/evaluator.h"
#include "colo/planner/sharding.h"
#include "core/test_support.h"

namespace colo::planner {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

Layout layout(AxisUse a0, AxisUse a1 = AxisUse::kReplicate) {
  Layout l;
  l.use = {a0, a1};
  return l;
}

// The roles of the units of the (first) layer block of a plan, by unit name.
// 64 H100s in 8 nodes: the library's 64-node cluster scaled down.
ClusterSpec eightH100Nodes() {
  return *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json")), 64);
}

std::map<std::string, std::string> layerRoles(const OperatorPlan& p) {
  std::map<std::string, std::string> roles;
  for (const auto& b : p.blocks) {
    if (b.name.rfind("layer", 0) != 0) continue;
    for (const auto& u : b.units) roles[u.unit] = u.roles;
    break;
  }
  return roles;
}

TEST(Sharding, MeshShapesAreCheckedAgainstTheCluster) {
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x16.json"));
  auto mesh = makeMesh(cluster, {2, 8});
  ASSERT_TRUE(mesh) << mesh.error().toString();
  EXPECT_EQ(mesh->size(), 16);
  EXPECT_EQ(mesh->toString(), "2x8");
  // The inner axis is one node's NVSwitch, the outer crosses nodes.
  EXPECT_FALSE(mesh->group(1).crossesNodes());
  EXPECT_TRUE(mesh->group(0).crossesNodes());
  // makeMesh places both groups once; a mesh built without it places them on each call, the same way.
  ASSERT_EQ(mesh->placed.size(), 2u);
  const DeviceMesh bare{mesh->shape, &cluster, {}};
  for (int a = 0; a < 2; ++a) {
    const auto cached = mesh->group(a), placed = bare.group(a);
    EXPECT_EQ(cached.size, placed.size);
    EXPECT_EQ(cached.stride, placed.stride);
    EXPECT_EQ(cached.perNode, placed.perNode);
    EXPECT_EQ(cached.inner, placed.inner);
    EXPECT_EQ(cached.outer, placed.outer);
  }
  EXPECT_EQ(mesh->group(0).size, 2);
  EXPECT_EQ(mesh->group(1).size, 8);
  auto odd = makeMesh(cluster, {3, 3});
  ASSERT_FALSE(odd);
  EXPECT_NE(odd.error().message.find("--mesh 3x3"), std::string::npos) << odd.error().message;
  auto wide = makeMesh(cluster, {256});
  ASSERT_FALSE(wide);
  EXPECT_NE(wide.error().message.find("do not divide"), std::string::npos) << wide.error().message;
  EXPECT_FALSE(parseMeshShape("2x"));
  EXPECT_FALSE(parseMeshShape("2x2x2"));
  EXPECT_FALSE(parseMeshShape("0x8"));
  EXPECT_EQ(*parseMeshShape("4x2"), (std::vector<std::int64_t>{4, 2}));
}

TEST(Sharding, ConversionsUseTheCollectiveEachAxisNeeds) {
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x16.json"));
  const auto mesh = *makeMesh(cluster, {2, 8});
  LayoutConverter conv(mesh);
  const TensorDims dims{2048, 12288, 1, 2};
  using enum AxisUse;
  EXPECT_EQ(toString(layout(kBatch, kFeature)), "[S0, R, S1]");
  EXPECT_EQ(toString(layout(kBatch, kPartial)), "[S0, R, R] P1");
  EXPECT_EQ(toString(layout(kBatch, kBatch)), "[S01, R, R]");
  // Nothing moves between equal layouts or when slicing a replicated tensor.
  EXPECT_EQ(conv.convert(layout(kBatch), layout(kBatch), dims, 8).seconds, 0.0);
  EXPECT_EQ(conv.convert(layout(kBatch), layout(kBatch, kSeq), dims, 8).seconds, 0.0);
  // Megatron's g and its sequence-parallel form: partial sums all-reduced, or reduce-scattered.
  const auto& ar = conv.convert(layout(kBatch, kPartial), layout(kBatch), dims, 8);
  EXPECT_EQ(ar.steps, "all-reduce(1)");
  const auto& rs = conv.convert(layout(kBatch, kPartial), layout(kBatch, kSeq), dims, 8);
  EXPECT_EQ(rs.steps, "reduce-scatter(1)");
  EXPECT_LT(rs.seconds, ar.seconds);
  EXPECT_EQ(conv.convert(layout(kBatch, kSeq), layout(kBatch), dims, 8).steps, "all-gather(1)");
  EXPECT_EQ(conv.convert(layout(kBatch, kSeq), layout(kBatch, kFeature), dims, 8).steps, "all-to-all(1)");
  // A whole tensor never becomes partial sums.
  EXPECT_TRUE(std::isinf(conv.convert(layout(kBatch), layout(kBatch, kPartial), dims, 8).seconds));
  // Across nodes the same collective costs more than inside one.
  EXPECT_GT(conv.convert(layout(kSeq), layout(kReplicate), dims, 8).seconds,
            conv.convert(layout(kReplicate, kSeq), layout(kReplicate), dims, 8).seconds);
  // Moving a split from one axis to the other slices first, then gathers the smaller shard.
  const auto& move = conv.convert(layout(kBatch), layout(kReplicate, kBatch), dims, 16);
  EXPECT_EQ(move.collectives, 1);
  EXPECT_EQ(move.steps, "all-gather(0)");
  // A split that does not divide the tensor is impossible.
  EXPECT_TRUE(std::isinf(conv.convert(layout(kReplicate), layout(kBatch, kBatch), dims, 8).seconds));
  // Cached: asking again adds nothing.
  const auto before = conv.cached();
  (void)conv.convert(layout(kBatch, kPartial), layout(kBatch), dims, 8);
  EXPECT_EQ(conv.cached(), before);
}

TEST(AutoParallel, MemoryCountsTheBuffersTheEvaluatorCounts) {
  // Llama 3 8B on 8 H100s, tp 2 with sequence parallelism, dp 4, two samples per GPU: the operator view
  // of Megatron's split counted states, activations and the CUDA context only, 75.6 GiB against the
  // evaluator's 82.9 GiB, and called it fitting a 75.6 GiB budget. It now counts the 16-bit logits or
  // their gradient (2 GiB here), the sequence gathers, gradient buckets and NCCL's buffers too.
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  p.cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json")), 8);
  p.parallel.tp = 2;
  p.parallel.dp = 4;
  p.parallel.sequenceParallel = true;
  p.microBatchSize = 2;
  p.globalBatchSize = 64;
  p.seqLen = 8192;
  p.zeroStage = 1;
  p.stages = uniformStages(p.model.numLayers(), 1, RecomputePolicy::kNone);
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  auto view = operatorView(p);
  ASSERT_TRUE(view) << view.error().toString();
  auto ev = costmodel::evaluatePlan(p);
  ASSERT_TRUE(ev) << ev.error().toString();
  const double GiB = 1024.0 * 1024.0 * 1024.0;
  EXPECT_GT(view->bufferBytes, 2.0 * GiB);
  EXPECT_NEAR(view->stateBytes + view->activationBytes + view->bufferBytes + view->contextBytes, view->peakMemoryBytes,
              1e-6 * view->peakMemoryBytes);
  EXPECT_NEAR(view->peakMemoryBytes, ev->peakMemoryBytes, 0.05 * ev->peakMemoryBytes)
      << view->peakMemoryBytes / GiB << " GiB against the evaluator's " << ev->peakMemoryBytes / GiB;
  EXPECT_EQ(view->toJson()["memory"]["buffers"].get<double>(), view->bufferBytes);
}

// GPT-3 175B on 16 stages of 8 A100s under 36 GiB, offload off, solved without Megatron's plans among the
// candidates (three tests below).
struct Gpt3At36GiB {
  Model model = test::loadModelOrFail(test::dataFile("models/gpt3-175b.json"));
  ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x16.json"));
  AutoParallelOptions o = [] {
    AutoParallelOptions x;
    x.globalBatchSize = 1536;
    x.meshes = {{8}};
    x.pipelineDegrees = {16};
    x.memoryBudgetBytes = 36 * kGiB;
    x.allowOffload = false;
    x.seedWithMegatron = false;
    return x;
  }();
};

// GPT-3 175B's layers on an 8-GPU node mesh, 16 pipeline stages of 128 A100s, under a budget that
// forbids replicated weights: the per-operator solve (without Megatron's plans among its candidates)
// finds Megatron's split by itself: column-parallel QKV and MLP up, attention by heads, row-parallel
// output and down projections, norms and dropout split along the sequence (sequence parallelism).
TEST(AutoParallel, RediscoversMegatronsSplitOnGptLayers) {
  Gpt3At36GiB g;
  auto& [model, cluster, o] = g;
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_TRUE(r->joint.fits);
  const auto roles = layerRoles(r->joint);
  EXPECT_EQ(roles.at("attn.qkv"), "0:out");
  EXPECT_EQ(roles.at("attn.core"), "0:out");
  EXPECT_EQ(roles.at("attn.out"), "0:in");
  EXPECT_EQ(roles.at("mlp.up"), "0:out");
  EXPECT_EQ(roles.at("mlp.gelu"), "0:out");
  EXPECT_EQ(roles.at("mlp.down"), "0:in");
  EXPECT_EQ(roles.at("attn_norm"), "0:seq");
  EXPECT_EQ(roles.at("mlp_residual"), "0:seq");
  // Alone, the solver comes within 0.3% of Megatron's split: one price of memory for every block
  // reaches only the points of the time/memory trade-off's convex hull, and Megatron's 155.7 s at 35.9 GiB
  // lies above the segment from 151.3 s at 39.0 GiB to 156.1 s at 32.8 GiB (docs/autoparallel.md,
  // "Not yet"). It was 154.8 s while the tied head's copy of the embedding cost no memory.
  ASSERT_TRUE(r->megatronFits);
  EXPECT_LE(r->joint.stepSeconds, r->megatron.stepSeconds * 1.003);
  EXPECT_NE(r->megatron.expressedAs.find("tp=8 dp=1 pp=16"), std::string::npos) << r->megatron.expressedAs;
  EXPECT_TRUE(r->megatron.runnable);
  // By default Megatron's plans join the candidates: the answer is at least as fast as its split.
  o.seedWithMegatron = true;
  auto seeded = autoParallel(model, cluster, o);
  ASSERT_TRUE(seeded) << seeded.error().toString();
  EXPECT_LE(seeded->joint.stepSeconds, seeded->megatron.stepSeconds * 1.0001);
  EXPECT_LE(seeded->joint.stepSeconds, r->joint.stepSeconds * 1.0001);
}

// A tied head multiplies by the embedding's weight: where the two split it alike on one stage it is one
// tensor (Megatron's tied embedding); on the last of several stages, or split otherwise, the head holds
// its own copy, whose states count (they were free, and the head kept the whole vocabulary for nothing).
TEST(AutoParallel, ATiedHeadHoldsTheEmbeddingsWeightUnlessItSharesIt) {
  Gpt3At36GiB g;
  auto& [model, cluster, o] = g;
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  const auto& head = r->joint.blocks.back();
  ASSERT_EQ(head.name, "head");
  // GPT-3's 50,257 x 12,288 table split eight ways, in 16-bit weights and gradients and fp32 Adam states.
  const double copy = 50257.0 * 12288.0 / 8.0;
  bool found = false;
  for (const auto& u : head.units) {
    if (u.unit != "head.lm_head") continue;
    found = true;
    EXPECT_GT(u.stateBytes, copy * 10.0) << u.roles;
    EXPECT_EQ(u.roles, "0:out");  // it split the vocabulary only once the copy cost memory (it kept 0:seq)
  }
  EXPECT_TRUE(found);
  // GPT-2 small on one stage of eight A100s: the joint plan is Megatron's data parallelism, one copy of
  // the table (it was 110 MiB leaner than Megatron's split, holding the table once, split, while its head
  // used it whole).
  const Model gpt2 = test::loadModelOrFail(test::dataFile("models/gpt2-small.json"));
  AutoParallelOptions small;
  small.globalBatchSize = 64;
  auto s = autoParallel(gpt2, test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb.json")), small);
  ASSERT_TRUE(s) << s.error().toString();
  EXPECT_GE(s->joint.stateBytes, s->megatron.stateBytes * 0.999) << s->joint.expressedAs;
}

// Llama-3-70B on a node mesh: the MLP is column- then row-parallel and the attention output row-parallel
// as in Megatron; for grouped-query attention under memory pressure the solver splits the QKV product
// by its input instead (its input stays sharded, no gather to keep or repeat), which colo's cost model
// prices below Megatron's gather.
TEST(AutoParallel, LlamaLayersKeepTheColumnRowMlpAndBeatMegatron) {
  const Model model = test::loadModelOrFail(test::dataFile("models/llama3-70b.json"));
  const ClusterSpec cluster = eightH100Nodes();
  AutoParallelOptions o;
  o.globalBatchSize = 512;
  o.meshes = {{8}};
  o.pipelineDegrees = {8};
  o.memoryBudgetBytes = 30 * kGiB;
  o.allowOffload = false;
  o.seedWithMegatron = false;
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  const auto roles = layerRoles(r->joint);
  EXPECT_EQ(roles.at("mlp.gate_up"), "0:out");
  EXPECT_EQ(roles.at("mlp.swiglu"), "0:out");
  EXPECT_EQ(roles.at("mlp.down"), "0:in");
  EXPECT_EQ(roles.at("attn.core"), "0:out");
  EXPECT_EQ(roles.at("attn.out"), "0:in");
  EXPECT_TRUE(roles.at("attn.qkv") == "0:out" || roles.at("attn.qkv") == "0:in") << roles.at("attn.qkv");
  ASSERT_TRUE(r->megatronFits);
  // Strictly faster (89.5 s against 109.3 s when written): the solve alone, not seeded with Megatron's.
  EXPECT_LT(r->joint.stepSeconds, 0.95 * r->megatron.stepSeconds);
  EXPECT_LE(r->joint.peakMemoryBytes, o.memoryBudgetBytes);
}

// Under a budget Megatron's split cannot meet even with full recompute, the joint solve finds a plan
// that fits (per-operator recompute, activations and optimizer states to host memory) and says what
// it costs.
TEST(AutoParallel, FitsWhereMegatronWithLayerRecomputeCannot) {
  const Model model = test::loadModelOrFail(test::dataFile("models/llama3-70b.json"));
  const ClusterSpec cluster = eightH100Nodes();
  AutoParallelOptions o;
  o.globalBatchSize = 512;
  o.meshes = {{8}};
  o.pipelineDegrees = {8};
  o.memoryBudgetBytes = 22 * kGiB;
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_FALSE(r->megatronFits);
  EXPECT_GT(r->megatron.peakMemoryBytes, o.memoryBudgetBytes);
  EXPECT_TRUE(r->joint.fits);
  EXPECT_LE(r->joint.peakMemoryBytes, o.memoryBudgetBytes);
  EXPECT_GT(r->joint.stepSeconds, 0.0);
  EXPECT_GT(r->joint.activationOffloadFraction + r->joint.optimizerOffloadFraction, 0.0);
  EXPECT_FALSE(r->joint.runnable);
  EXPECT_NE(r->joint.expressedAs.find("simulation-only"), std::string::npos);
  // Without host memory the same budget cannot be met: the error names the least memory a plan needs.
  o.allowOffload = false;
  auto none = autoParallel(model, cluster, o);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kInfeasible);
  EXPECT_NE(none.error().message.find("the leanest needs"), std::string::npos) << none.error().message;
}

// Across small library models on one node, the joint solve is never slower than Megatron's split
// (which it contains), and plans that are Megatron's split say so and are runnable.
TEST(AutoParallel, NeverSlowerThanMegatronAndSaysWhatRuns) {
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb.json"));
  for (const char* name : {"tiny-gpt", "gpt2-small", "bert-large", "tiny-moe"}) {
    SCOPED_TRACE(name);
    const Model model = test::loadModelOrFail(test::dataFile(std::string("models/") + name + ".json"));
    AutoParallelOptions o;
    o.globalBatchSize = 64;
    auto r = autoParallel(model, cluster, o);
    ASSERT_TRUE(r) << r.error().toString();
    ASSERT_TRUE(r->megatronFits);
    EXPECT_LE(r->joint.stepSeconds, r->megatron.stepSeconds * 1.0000001);
    // colo-run trains decoder language models: BERT's plan is Megatron's split, but simulation-only,
    // by the executor's own capability list.
    const bool decoder = std::string(name) != "bert-large";
    EXPECT_EQ(r->megatron.runnable, decoder) << r->megatron.expressedAs;
    EXPECT_EQ(static_cast<bool>(checkRunnableModel(model)), decoder);
    if (!decoder) {
      EXPECT_NE(r->megatron.expressedAs.find("decoder language models"), std::string::npos) << r->megatron.expressedAs;
    }
    // Every block has a row per unit with layouts in Colossal-AI's notation.
    ASSERT_GE(r->joint.blocks.size(), 3u);
    for (const auto& b : r->joint.blocks) {
      for (const auto& u : b.units) {
        EXPECT_FALSE(u.roles.empty());
        EXPECT_TRUE(u.output == "-" || u.output.front() == '[') << u.output;
      }
    }
    const Json j = r->toJson();
    EXPECT_TRUE(j.contains("joint") && j["joint"].contains("blocks"));
    EXPECT_GT(j["block_solves"].get<std::int64_t>(), 0);
  }
}

// The third model: Mixtral-8x7B's layers on an 8-GPU node mesh (8 stages of 8 on 64 H100s). The
// per-operator solve alone, without Megatron's split among its candidates, is at least as fast as it.
TEST(AutoParallel, MixtralLayersOnANodeMeshAreAtLeastAsFastAsMegatrons) {
  const Model model = test::loadModelOrFail(test::dataFile("models/mixtral-8x7b.json"));
  const ClusterSpec cluster = eightH100Nodes();
  AutoParallelOptions o;
  o.globalBatchSize = 256;
  o.meshes = {{8}};
  o.pipelineDegrees = {8};
  o.seedWithMegatron = false;
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_TRUE(r->megatronFits);
  EXPECT_LE(r->joint.stepSeconds, r->megatron.stepSeconds * 1.0000001)
      << r->joint.layoutText() << " against " << r->megatron.layoutText();
}

// Megatron's split of a MoE model may use tensor parallelism: its MoE blocks end in partial sums over
// the tensor axis, which go back to the residual stream's layout at their cost (until 2026-12-01 it
// demanded the layout itself, and every MoE model's Megatron split came out without tp).
TEST(AutoParallel, MegatronsSplitOfAMoeModelMayUseTensorParallelism) {
  const Model model = test::loadModelOrFail(test::dataFile("models/mixtral-8x7b.json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json"));
  AutoParallelOptions o;
  o.globalBatchSize = 256;
  o.meshes = {{2, 4}};
  o.pipelineDegrees = {1};
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(r->megatron.mesh, "2x4");
  EXPECT_EQ(r->megatron.tp, 4) << r->megatron.expressedAs;
  EXPECT_NE(r->megatron.expressedAs.find("tp=4 dp=2 ep=2"), std::string::npos) << r->megatron.expressedAs;
  for (const auto& b : r->megatron.blocks) {
    for (const auto& u : b.units) {
      if (u.kind == "moe") {
        EXPECT_EQ(u.roles, "0:expert 1:inner") << b.name;
      }
    }
  }
}

// A budget above the GPU's memory is refused: the plans under it would read "fits" on GPUs they do not fit.
TEST(AutoParallel, ABudgetAboveTheGpusMemoryIsRefused) {
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb.json"));
  const Model model = test::loadModelOrFail(test::dataFile("models/tiny-llama.json"));
  AutoParallelOptions o;
  o.globalBatchSize = 8;
  o.memoryBudgetBytes = cluster.gpu.memoryBytes * 1.5;
  auto r = autoParallel(model, cluster, o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  EXPECT_NE(r.error().message.find("the memory budget, 120.00 GiB, is more than the A100-SXM4-80GB's 80.00 GiB"), std::string::npos)
      << r.error().toString();
  o.memoryBudgetBytes = cluster.gpu.memoryBytes;
  EXPECT_TRUE(autoParallel(model, cluster, o));
}

// Every operator splitting the sequence over the mesh is Megatron's context parallelism: runnable by
// colo-run as cp, unless the executor's capability list refuses it (its MoE layers run without cp).
TEST(AutoParallel, SequenceSplitEverywhereIsContextParallelism) {
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb.json"));
  auto asContextParallel = [&](const char* name) {
    const Model model = test::loadModelOrFail(test::dataFile(std::string("models/") + name + ".json"));
    AutoParallelOptions o;
    o.globalBatchSize = 8;
    o.meshes = {{8}};
    o.pipelineDegrees = {1};
    o.memoryBudgetBytes = cluster.gpu.memoryBytes;  // (the tiny models fit whole: the roles are what is checked)
    auto r = autoParallel(model, cluster, o);
    EXPECT_TRUE(r) << r.error().toString();
    auto file = operatorPlanFile(model, cluster, o, *r);
    EXPECT_TRUE(file) << file.error().toString();
    Plan edited = *file;
    for (auto& block : edited.operatorPlan["blocks"]) {
      for (auto& unit : block["units"]) {
        unit["axis_roles"] = Json::array({"seq"});
        unit["recompute"] = false;
      }
    }
    auto p = evaluateOperatorPlan(edited, "cp.json");
    EXPECT_TRUE(p) << p.error().toString();
    return *p;
  };
  const OperatorPlan dense = asContextParallel("tiny-llama");
  EXPECT_TRUE(dense.runnable) << dense.expressedAs;
  EXPECT_EQ(dense.cp, 8);
  EXPECT_EQ(dense.tp, 1);
  EXPECT_NE(dense.expressedAs.find("cp=8"), std::string::npos) << dense.expressedAs;
  // Its degree-level form splits the optimizer states over the cp ranks, as the solve priced them.
  const Model model = test::loadModelOrFail(test::dataFile("models/tiny-llama.json"));
  AutoParallelOptions o;
  o.globalBatchSize = 8;
  auto form = detail::degreeForm(model, cluster, o, dense);
  ASSERT_TRUE(form) << form.error().toString();
  EXPECT_EQ(form->parallel.cp, 8);
  EXPECT_EQ(form->zeroStage, 1);
  const OperatorPlan moe = asContextParallel("tiny-moe");
  EXPECT_FALSE(moe.runnable);
  EXPECT_NE(moe.expressedAs.find("without context parallelism"), std::string::npos) << moe.expressedAs;
}

TEST(AutoParallel, MoeLayersCanSplitExperts) {
  const Model model = test::loadModelOrFail(test::dataFile("models/mixtral-8x7b.json"));
  const ClusterSpec cluster = eightH100Nodes();
  AutoParallelOptions o;
  o.globalBatchSize = 256;
  o.meshes = {{8}};
  o.pipelineDegrees = {8};
  o.memoryBudgetBytes = 40 * kGiB;
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  const auto roles = layerRoles(r->joint);
  ASSERT_TRUE(roles.contains("moe"));
  // The experts' weights cannot all be replicated in this budget: they are split by expert or width.
  EXPECT_TRUE(roles.at("moe") == "0:expert" || roles.at("moe") == "0:inner") << roles.at("moe");
}

TEST(AutoParallel, BadInputNamesTheOption) {
  const Model model = test::loadModelOrFail(test::dataFile("models/tiny-gpt.json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb.json"));
  AutoParallelOptions o;
  auto noBatch = autoParallel(model, cluster, o);
  ASSERT_FALSE(noBatch);
  EXPECT_NE(noBatch.error().message.find("--gbs"), std::string::npos);
  o.globalBatchSize = 64;
  o.meshes = {{3, 3}};
  auto mesh = autoParallel(model, cluster, o);
  ASSERT_FALSE(mesh);
  EXPECT_EQ(mesh.error().code, ErrorCode::kBadInput);
  o.meshes = {};
  o.pipelineDegrees = {3};
  auto pp = autoParallel(model, cluster, o);
  ASSERT_FALSE(pp);
  EXPECT_NE(pp.error().message.find("--pp 3"), std::string::npos);
  o.pipelineDegrees = {2};
  o.virtualStages = {5};  // tiny-gpt's layers do not split into 2 stages of 5 chunks
  auto chunks = autoParallel(model, cluster, o);
  ASSERT_FALSE(chunks);
  EXPECT_NE(chunks.error().message.find("--vpp"), std::string::npos) << chunks.error().message;
  o.virtualStages = {};
  o.pipelineDegrees = {};
  o.memoryBudgetBytes = 1024.0;  // a kilobyte
  auto tiny = autoParallel(model, cluster, o);
  ASSERT_FALSE(tiny);
  EXPECT_EQ(tiny.error().code, ErrorCode::kInfeasible);
}

TEST(AutoParallel, CancelledBeforeAnyPlanSaysSo) {
  const Model model = test::loadModelOrFail(test::dataFile("models/gpt2-small.json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb.json"));
  CancellationToken cancel;
  cancel.cancel();
  AutoParallelOptions o;
  o.globalBatchSize = 64;
  o.cancel = &cancel;
  auto r = autoParallel(model, cluster, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("cancelled"), std::string::npos);
}

// `autoparallel --out` stores the per-operator plan in the plan file; reading it back and re-costing it
// gives the same figures; an edited strategy is re-costed as edited; a bad one is named by its path.
TEST(AutoParallel, PlanFileStoresThePerOperatorPlanAndEvaluateReproducesIt) {
  Gpt3At36GiB g;
  auto& [model, cluster, o] = g;
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  auto file = operatorPlanFile(model, cluster, o, *r);
  ASSERT_TRUE(file) << file.error().toString();
  auto loaded = planFromJson(planToJson(*file), "op.json");
  ASSERT_TRUE(loaded) << loaded.error().toString();
  ASSERT_TRUE(loaded->operatorPlan.is_object());
  auto again = evaluateOperatorPlan(*loaded, "op.json");
  ASSERT_TRUE(again) << again.error().toString();
  EXPECT_NEAR(again->stepSeconds, r->joint.stepSeconds, 1e-9 * r->joint.stepSeconds);
  EXPECT_NEAR(again->peakMemoryBytes, r->joint.peakMemoryBytes, 1e-9 * r->joint.peakMemoryBytes);
  EXPECT_EQ(layerRoles(*again), layerRoles(r->joint));
  EXPECT_EQ(again->expressedAs, r->joint.expressedAs);
  // Simulation-only: the executor refuses it, saying why; its degree fields are Megatron's split.
  if (!r->joint.runnable) {
    auto runs = checkRunnable(*loaded);
    ASSERT_FALSE(runs);
    EXPECT_NE(runs.error().message.find("simulation-only"), std::string::npos) << runs.error().message;
    EXPECT_EQ(loaded->parallel.tp, r->megatron.tp);
  }
  // Edit the layer's QKV product to split its rows by sequence (weights replicated): re-costed as edited.
  Plan edited = *loaded;
  auto& qkv = edited.operatorPlan["blocks"][1]["units"][1];
  ASSERT_EQ(qkv["unit"], "attn.qkv");
  qkv["axis_roles"] = Json::array({"seq"});
  auto changed = evaluateOperatorPlan(edited, "op.json");
  ASSERT_TRUE(changed) << changed.error().toString();
  EXPECT_EQ(layerRoles(*changed).at("attn.qkv"), "0:seq");
  EXPECT_NE(changed->peakMemoryBytes, again->peakMemoryBytes);
  qkv["axis_roles"] = Json::array({"diagonal"});
  auto bad = evaluateOperatorPlan(edited, "op.json");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(bad.error().path, "/operator_plan/blocks/1/units/1/axis_roles/0");
  EXPECT_EQ(bad.error().file, "op.json");
  // A role that names no strategy of this operator (experts for a projection) is refused at the
  // operator, with the roles it has (it was "layer block 1: its operators' strategies do not connect").
  qkv["axis_roles"] = Json::array({"expert"});
  auto offered = evaluateOperatorPlan(edited, "op.json");
  ASSERT_FALSE(offered);
  EXPECT_EQ(offered.error().path, "/operator_plan/blocks/1/units/1/axis_roles");
  EXPECT_NE(offered.error().message.find("attn.qkv has no strategy [expert] on mesh"), std::string::npos) << offered.error().message;
  EXPECT_NE(offered.error().message.find("[out]"), std::string::npos) << offered.error().message;
  qkv["axis_roles"] = Json::array({"fsdp-ish"});
  auto listed = evaluateOperatorPlan(edited, "op.json");
  ASSERT_FALSE(listed);
  EXPECT_NE(listed.error().message.find("inner, fsdp)"), std::string::npos) << listed.error().message;
  // A field of the wrong type is named (it was an internal error), and what the file prints beside its
  // inputs must agree with them (an edited mesh, batch count, layout text or layer count was ignored).
  auto refused = [&loaded](const std::function<void(Json&)>& edit, const std::string& path, const std::string& text) {
    Plan p = *loaded;
    edit(p.operatorPlan);
    auto e = evaluateOperatorPlan(p, "op.json");
    ASSERT_FALSE(e) << path;
    EXPECT_EQ(e.error().code, ErrorCode::kBadInput);
    EXPECT_EQ(e.error().path, path);
    EXPECT_NE(e.error().message.find(text), std::string::npos) << e.error().message;
  };
  refused([](Json& j) { j["blocks"][1]["units"][1]["recompute"] = "yes"; }, "/operator_plan/blocks/1/units/1/recompute",
          "must be true or false, got \"yes\"");
  refused([](Json& j) { j["micro_batch_size"] = "2"; }, "/operator_plan/micro_batch_size",
          "must be a whole number of samples from 1 to 1048576, got \"2\"");
  refused([](Json& j) { j["blocks"][1]["units"][1]["unit"] = 5; }, "/operator_plan/blocks/1/units/1/unit", "expected \"attn.qkv\"");
  refused([](Json& j) { j["mesh"] = "3x3"; }, "/operator_plan/mesh", "it is printed, not read");
  refused([](Json& j) { j["micro_batches"] = j["micro_batches"].get<int>() + 1; }, "/operator_plan/micro_batches", "it is printed, not read");
  refused([](Json& j) { j["blocks"][1]["count"] = 7; }, "/operator_plan/blocks/1/count", "it is printed, not read");
  refused([](Json& j) { j["interface"]["layout"] = "[Q, R, R]"; }, "/operator_plan/interface/layout", "it is printed, not read");
}

TEST(AutoParallel, ARunnablePlanFileCarriesItsDegreeLevelEquivalent) {
  const Model model = test::loadModelOrFail(test::dataFile("models/tiny-gpt.json"));
  const ClusterSpec cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/localhost-cpu.json")), 2);
  AutoParallelOptions o;
  // 16 samples per GPU: at 4 the vocabulary-split embedding (half its table's gradient per GPU) pays
  // for itself, and the plan mixes the two rules.
  o.globalBatchSize = 32;
  o.seqLen = 128;
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_TRUE(r->joint.runnable) << r->joint.expressedAs;
  auto file = operatorPlanFile(model, cluster, o, *r);
  ASSERT_TRUE(file) << file.error().toString();
  EXPECT_EQ(file->parallel.tp * file->parallel.dp * file->parallel.pp, 2);
  EXPECT_TRUE(checkRunnable(*file)) << checkRunnable(*file).error().message;
  ASSERT_TRUE(file->predictions.stepTimeSeconds);
  EXPECT_DOUBLE_EQ(*file->predictions.stepTimeSeconds, r->joint.stepSeconds);
}

// Megatron's interleaved schedule, per operator: v chunks per stage cut the bubble to (p - 1)/v of a
// stage's time and hold more micro-batches on the first stage (Korthikanti's p(1 + (p - 1)/(pv))),
// as the evaluator says of the same plan; the joint search tries chunk counts and stores its choice.
TEST(AutoParallel, InterleavedStagesShrinkTheBubbleAndHoldMoreActivations) {
  const Model model = test::loadModelOrFail(test::dataFile("models/gpt3-175b.json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x16.json"));
  Plan p;
  p.model = model;
  p.cluster = cluster;
  p.parallel.tp = 8;
  p.parallel.pp = 16;
  p.parallel.sequenceParallel = true;
  p.microBatchSize = 1;
  p.globalBatchSize = 64;
  p.seqLen = 2048;
  p.zeroStage = 1;
  p.stages = uniformStages(model.numLayers(), 16, RecomputePolicy::kSelective);
  auto plain = operatorView(p);
  ASSERT_TRUE(plain) << plain.error().toString();
  EXPECT_EQ(plain->virtualStages, 1);
  Plan interleaved = p;
  interleaved.parallel.virtualStages = 3;
  interleaved.schedule = Schedule::kInterleaved;
  interleaved.stages = uniformStages(model.numLayers(), 48, RecomputePolicy::kSelective);
  ASSERT_TRUE(validatePlan(interleaved)) << validatePlan(interleaved).error().message;
  auto view = operatorView(interleaved);
  ASSERT_TRUE(view) << view.error().toString();
  EXPECT_EQ(view->virtualStages, 3);
  EXPECT_LT(view->bubble, 0.4 * plain->bubble);
  EXPECT_LT(view->stepSeconds, plain->stepSeconds);
  EXPECT_GT(view->activationBytes, plain->activationBytes);
  // Against the evaluator on the same plans: the bubble shrinks alike.
  auto evPlain = costmodel::evaluatePlan(p);
  auto evInterleaved = costmodel::evaluatePlan(interleaved);
  ASSERT_TRUE(evPlain && evInterleaved);
  const double opGain = plain->stepSeconds / view->stepSeconds;
  const double evGain = evPlain->stepSeconds / evInterleaved->stepSeconds;
  EXPECT_NEAR(opGain, evGain, 0.05 * evGain);
  // Gpipe has no operator view.
  Plan gpipe = p;
  gpipe.schedule = Schedule::kGpipe;
  auto refused = operatorView(gpipe);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("gpipe"), std::string::npos) << refused.error().message;
  // The joint search on a bubble-bound layout chooses chunks, and its plan file keeps them.
  AutoParallelOptions o;
  o.globalBatchSize = 64;
  o.meshes = {{8}};
  o.pipelineDegrees = {16};
  o.allowOffload = false;
  auto r = autoParallel(model, cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_GT(r->joint.virtualStages, 1);
  o.virtualStages = {1};
  auto oneChunk = autoParallel(model, cluster, o);
  ASSERT_TRUE(oneChunk) << oneChunk.error().toString();
  EXPECT_EQ(oneChunk->joint.virtualStages, 1);
  EXPECT_LT(r->joint.stepSeconds, oneChunk->joint.stepSeconds);
  o.virtualStages = {};
  auto file = operatorPlanFile(model, cluster, o, *r);
  ASSERT_TRUE(file) << file.error().toString();
  EXPECT_EQ(file->operatorPlan["virtual_stages"], r->joint.virtualStages);
  auto again = evaluateOperatorPlan(*file, "op.json");
  ASSERT_TRUE(again) << again.error().toString();
  EXPECT_NEAR(again->stepSeconds, r->joint.stepSeconds, 1e-9 * r->joint.stepSeconds);
  Plan badChunks = *file;
  badChunks.operatorPlan["virtual_stages"] = 5;  // 96 layers over 16 stages do not split in 5
  auto bad = evaluateOperatorPlan(badChunks, "op.json");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().path, "/operator_plan/virtual_stages");
  badChunks.operatorPlan["virtual_stages"] = 1e300;
  auto huge = evaluateOperatorPlan(badChunks, "op.json");
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().path, "/operator_plan/virtual_stages");
  badChunks.operatorPlan["virtual_stages"] = r->joint.virtualStages;
  badChunks.operatorPlan["pipeline_stages"] = 1e300;
  auto stages = evaluateOperatorPlan(badChunks, "op.json");
  ASSERT_FALSE(stages);
  EXPECT_EQ(stages.error().path, "/operator_plan/pipeline_stages");
}

// A ZeRO-3 (FSDP) degree-level plan seen per operator: every weight-bearing operator shards its weights
// over the data-parallel axis (the fsdp role), and the view says it equals the plan it came from.
TEST(AutoParallel, ZeroThreePlansAreShardedWeightsPerOperator) {
  const Model model = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json"));
  Plan p;
  p.model = model;
  p.cluster = cluster;
  p.parallel.dp = 8;
  p.microBatchSize = 1;
  p.globalBatchSize = 64;
  p.seqLen = 8192;
  p.zeroStage = 3;
  p.stages = uniformStages(model.numLayers(), 1, RecomputePolicy::kFull);
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().message;
  auto view = operatorView(p);
  ASSERT_TRUE(view) << view.error().toString();
  EXPECT_TRUE(view->runnable) << view->expressedAs;
  EXPECT_EQ(view->zeroStage, 3);
  EXPECT_NE(view->expressedAs.find("zero3"), std::string::npos) << view->expressedAs;
  const auto roles = layerRoles(*view);
  EXPECT_EQ(roles.at("attn.qkv"), "0:fsdp");
  EXPECT_EQ(roles.at("mlp.down"), "0:fsdp");
  EXPECT_EQ(roles.at("attn_norm"), "0:batch");
  // Sharded weights hold an eighth of the ZeRO-1 view's model states.
  Plan z1 = p;
  z1.zeroStage = 1;
  auto dense = operatorView(z1);
  ASSERT_TRUE(dense) << dense.error().toString();
  EXPECT_LT(view->stateBytes, 0.5 * dense->stateBytes);
  EXPECT_GT(view->communication, dense->communication);
  // ZeRO-2 has no operator form: refused by name.
  Plan z2 = p;
  z2.zeroStage = 2;
  auto refused = operatorView(z2);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("ZeRO-2"), std::string::npos);
}

}  // namespace
}  // namespace colo::planner
