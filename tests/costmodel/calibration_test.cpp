// Calibration of the analytic model from a real SQLite cost database.
#include <algorithm>
#include "colo/costmodel/calibration.h"

#include <gtest/gtest.h>

#include "colo/costmodel/collectives.h"
#include "colo/costmodel/evaluator.h"
#include "colo/costmodel/hardware.h"
#include "core/test_support.h"

namespace colo::costmodel {
namespace {

// Times a ring of `world` members would take with this latency per step and bandwidth.
std::vector<CollectiveMeasurement> ringRows(const std::string& level, std::int64_t world, double latency, double bandwidth) {
  std::vector<CollectiveMeasurement> rows;
  const double n = static_cast<double>(world);
  for (const std::int64_t bytes : {std::int64_t{1} << 10, std::int64_t{1} << 16, std::int64_t{1} << 22, std::int64_t{1} << 26}) {
    const double b = static_cast<double>(bytes);
    rows.push_back({"all_reduce", "gloo", world, level, bytes, 2 * (n - 1) * latency + 2 * (n - 1) / n * b / bandwidth, 0, 5});
    rows.push_back({"all_gather", "gloo", world, level, bytes, (n - 1) * latency + (n - 1) / n * b / bandwidth, 0, 5});
    rows.push_back({"broadcast", "gloo", world, level, bytes, 1.0, 0, 5});  // not on the ring model: ignored
  }
  return rows;
}

TEST(Calibration, RingFitRecoversLatencyAndBandwidth) {
  const auto fits = fitLinkLevels(ringRows("loopback", 4, 30e-6, 2.5e9));
  ASSERT_EQ(fits.size(), 1u);
  EXPECT_EQ(fits[0].level, "loopback");
  EXPECT_EQ(fits[0].points, 4);  // the all-reduces
  EXPECT_NEAR(fits[0].latencySeconds, 30e-6, 1e-9);
  EXPECT_NEAR(fits[0].bytesPerSecond / 2.5e9, 1.0, 1e-6);
  EXPECT_LT(fits[0].rmsRelativeError, 1e-6);
  // Without all-reduces at two sizes, the other ring collectives are used.
  std::vector<CollectiveMeasurement> gathers;
  for (const auto& r : ringRows("net", 2, 1e-5, 1e9)) {
    if (r.op == "all_gather") gathers.push_back(r);
  }
  const auto gatherFit = fitLinkLevels(gathers);
  ASSERT_EQ(gatherFit.size(), 1u);
  EXPECT_NEAR(gatherFit[0].bytesPerSecond / 1e9, 1.0, 1e-6);
  // A stalled small message (noise on a loaded machine) makes the joint fit's bandwidth term negative:
  // the level is still fitted, by bandwidth alone, from the large message.
  std::vector<CollectiveMeasurement> noisy{{"all_reduce", "gloo", 2, "loopback", 1024, 2e-3, 0, 3},
                                           {"all_reduce", "gloo", 2, "loopback", 4194304, 1.5e-3, 0, 3}};
  const auto noisyFit = fitLinkLevels(noisy);
  ASSERT_EQ(noisyFit.size(), 1u);
  EXPECT_EQ(noisyFit[0].latencySeconds, 0);
  EXPECT_GT(noisyFit[0].bytesPerSecond, 0);
  // One message size cannot separate latency from bandwidth.
  std::vector<CollectiveMeasurement> one{{"all_reduce", "nccl", 2, "nvlink", 1024, 1e-5, 0, 1}};
  EXPECT_TRUE(fitLinkLevels(one).empty());
}

TEST(Calibration, AppliedFitsReproduceTheMeasurementsThroughTheCollectiveModel) {
  ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x16.json"));
  const std::string inner = cluster.links.front().name;
  const auto applied = applyLinkFits(cluster, fitLinkLevels(ringRows(inner, 8, 5e-6, 150e9)));
  ASSERT_EQ(applied.size(), 1u);
  Parallelism p;
  p.tp = 8;
  p.dp = 16;
  const auto tp = placeGroup(cluster, p, Dim::kTp);
  const double bytes = 1 << 26;
  EXPECT_NEAR(collectiveSeconds(Collective::kAllReduce, bytes, tp), 14 * 5e-6 + 2.0 * 7 / 8 * bytes / 150e9, 1e-9);
  // A level without measurements keeps its datasheet figures.
  EXPECT_EQ(cluster.links.back(), test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x16.json")).links.back());
}

TEST(Calibration, CopyBandwidthUsesLargePinnedCopies) {
  EXPECT_FALSE(fitCopyBandwidth({}));
  const auto bw = fitCopyBandwidth({{"h2d", true, 1 << 24, (1 << 24) / 20e9, 0, 5},
                                    {"d2h", true, 1 << 26, (1 << 26) / 20e9, 0, 5},
                                    {"h2d", false, 1 << 26, 1.0, 0, 5},    // pageable: not the offload path
                                    {"h2d", true, 1 << 12, 1.0, 0, 5}});  // latency-bound
  ASSERT_TRUE(bw);
  EXPECT_NEAR(*bw / 20e9, 1.0, 1e-9);
}

Plan tinyPlan(std::int64_t dp) {
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/tiny-gpt.json"));
  p.cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/localhost-cpu.json")), dp);
  p.parallel.dp = dp;
  p.microBatchSize = 4;
  p.globalBatchSize = 4 * dp;
  p.seqLen = 128;
  p.precision = DType::kFp32;
  p.execution.overlapGradReduce = false;
  p.stages = uniformStages(p.model.numLayers(), 1, RecomputePolicy::kNone);
  return p;
}

// An embedding lookup is timed at its tokens x width (what colo-profile's "embedding" kernel moves),
// not at the table's vocabulary x width: the token and position lookups of a micro-batch read the same
// measured kernel. The backward then writes the dense gradient of its whole table: the kernel's own
// table has as many rows as tokens, so the zero-fill of the rows beyond them is added (fp32: 4 B), and
// Megatron's hook adds the whole table into main_grad (4 + 8 B).
TEST(Calibration, AnEmbeddingLookupIsTimedByItsTokensNotItsTable) {
  test::ScratchDir dir;
  const std::string file = dir.path("embedding.sqlite");
  const Plan plan = tinyPlan(1);
  const std::int64_t width = plan.model.spec->hiddenSize;
  const double elements = static_cast<double>(plan.microBatchSize * plan.seqLen * width);
  {
    auto db = CostDatabase::openForWrite(file);
    ASSERT_TRUE(db) << db.error().toString();
    ASSERT_TRUE(db->addKernels("cpu: test", {{"embedding.fwd", DType::kFp32, kernelShape(elements, width), "aten", 3e-3, 0, 3},
                                             {"embedding.bwd", DType::kFp32, kernelShape(elements, width), "aten", 5e-3, 0, 3}}));
  }
  auto db = CostDatabase::open(file);
  ASSERT_TRUE(db);
  auto ops = opTimesOf(plan, &*db);
  ASSERT_TRUE(ops) << ops.error().toString();
  int lookups = 0;
  const double bw = deviceModel(plan.cluster.gpu, plan.precision).memoryBytesPerSecond;
  for (const auto& o : *ops) {
    if (o.kind != "embedding") continue;
    ++lookups;
    const double rows = static_cast<double>(o.op == "embed.tokens" ? plan.model.spec->vocabSize
                                                                   : plan.model.spec->maxPositionEmbeddings);
    EXPECT_DOUBLE_EQ(o.forwardSeconds, 3e-3) << o.op;
    const double tokens = static_cast<double>(plan.microBatchSize * plan.seqLen);  // 512: more than the 256 positions
    EXPECT_NEAR(o.backwardSeconds, 5e-3 + (std::max(0.0, rows - tokens) * 4.0 + rows * 12.0) * static_cast<double>(width) / bw, 1e-12)
        << o.op;
  }
  EXPECT_EQ(lookups, 2);  // tokens and positions
}

// Flash attention's fused kernel, measured (colo-profile times it under the key the cost model asks
// for), replaces its roofline; the profiler's list of kernels to measure holds that key.
TEST(Calibration, AMeasuredFlashAttentionKernelReplacesItsRoofline) {
  test::ScratchDir dir;
  const std::string file = dir.path("flash.sqlite");
  Plan plan = tinyPlan(1);
  plan.execution.flashAttention = true;
  const auto& spec = *plan.model.spec;
  const std::int64_t headDim = spec.hiddenSize / spec.numAttentionHeads;
  const std::string key = "flash_attention.causal.d" + std::to_string(headDim);
  const double elements = static_cast<double>(plan.microBatchSize * spec.numAttentionHeads * plan.seqLen);
  auto ev = Evaluator::create(plan.model, plan.cluster, plan.seqLen);
  ASSERT_TRUE(ev) << ev.error().toString();
  const auto shapes = ev->kernelShapes(plan);
  EXPECT_TRUE(std::any_of(shapes.begin(), shapes.end(), [&](const auto& k) {
    return k.key == key && k.elements == static_cast<std::int64_t>(elements) && k.width == plan.seqLen;
  })) << key;
  auto roofline = opTimesOf(plan, nullptr);
  ASSERT_TRUE(roofline) << roofline.error().toString();
  {
    auto db = CostDatabase::openForWrite(file);
    ASSERT_TRUE(db) << db.error().toString();
    ASSERT_TRUE(db->addKernels("cpu: test", {{key + ".fwd", DType::kFp32, kernelShape(elements, plan.seqLen), "aten", 7e-3, 0, 3},
                                             {key + ".bwd", DType::kFp32, kernelShape(elements, plan.seqLen), "aten", 9e-3, 0, 3}}));
  }
  auto db = CostDatabase::open(file);
  ASSERT_TRUE(db);
  auto ops = opTimesOf(plan, &*db);
  ASSERT_TRUE(ops) << ops.error().toString();
  int found = 0;
  for (const auto& o : *ops) {
    if (o.op != "attn.flash") continue;
    ++found;
    EXPECT_DOUBLE_EQ(o.forwardSeconds, 7e-3);
    EXPECT_DOUBLE_EQ(o.backwardSeconds, 9e-3);
  }
  EXPECT_GT(found, 0);
  for (const auto& o : *roofline) {
    if (o.op == "attn.flash") {
      EXPECT_LT(o.forwardSeconds, 7e-3);  // the roofline's own figure differs
    }
  }
}

TEST(Calibration, EvaluatorUsesEveryKindOfMeasurementInTheDatabase) {
  test::ScratchDir dir;
  const std::string file = dir.path("cal.sqlite");
  const Plan plan = tinyPlan(2);
  auto noDb = evaluatePlan(plan);
  ASSERT_TRUE(noDb) << noDb.error().toString();
  EXPECT_TRUE(noDb->calibration.costDb.empty());
  EXPECT_EQ(noDb->calibration.gemmRooflineScale, 1.0);
  {
    auto db = CostDatabase::openForWrite(file);
    ASSERT_TRUE(db) << db.error().toString();
    // A loopback link 100x slower than the cluster file says.
    ASSERT_TRUE(db->addCollectives("cpu: test", ringRows("loopback", 2, 2e-3, 0.05e9)));
    // One GEMM the plan does not run, measured 3x slower than the roofline: the unmeasured ones scale.
    auto ev = Evaluator::create(plan.model, plan.cluster, plan.seqLen);
    ASSERT_TRUE(ev);
    ASSERT_TRUE(db->addGemms("cpu: test", {{7, 9, 11, DType::kFp32, 1.0}}));
    // The optimizer step: 1 second per 2^20 parameters.
    ASSERT_TRUE(db->addKernels("cpu: test", {{"adam_step.fwd", DType::kFp32, kernelShape(1 << 20, 0), "x", 1.0, 0, 3}}));
  }
  auto db = CostDatabase::open(file);
  ASSERT_TRUE(db);
  auto withDb = evaluatePlan(plan, &*db);
  ASSERT_TRUE(withDb) << withDb.error().toString();
  const auto& c = withDb->calibration;
  EXPECT_EQ(c.costDb, file);
  ASSERT_EQ(c.links.size(), 1u);
  EXPECT_EQ(c.links[0].level, "loopback");
  EXPECT_GT(withDb->time.dpComm, 20 * noDb->time.dpComm);  // the slow measured link
  EXPECT_TRUE(c.optimizerMeasured);
  const double params = withDb->stages[0].paramsPerGpu;
  EXPECT_NEAR(withDb->stages[0].optimizerSeconds, params / (1 << 20), 1e-6 * params);
  EXPECT_EQ(c.gemmRooflineScalePoints, 1);
  EXPECT_EQ(c.gemmRooflineScale, 5.0);  // 1 s for a 7x9x11 GEMM is far off the roofline: clamped
  EXPECT_GT(withDb->time.compute, 2 * noDb->time.compute);
  const Json j = withDb->toJson();
  EXPECT_EQ(j["calibration"]["links"][0]["level"], "loopback");
  EXPECT_TRUE(j["calibration"]["optimizer_measured"].get<bool>());
}

}  // namespace
}  // namespace colo::costmodel
