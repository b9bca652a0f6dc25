// Kernel-level tables (data/validation/published/kernels) and the float8 cast costs they check.
#include <gtest/gtest.h>

#include "colo/core/library.h"
#include "colo/costmodel/evaluator.h"
#include "colo/costmodel/hardware.h"
#include "colo/costmodel/op_cost.h"
#include "core/test_support.h"
#include "validation_kernels.h"

namespace colo::validation {
namespace {

const std::string kRowwiseTable = "validation/published/kernels/torchao_float8_rowwise_h100.json";

// The error loading `text` as a kernel table gives (a failure when it loads).
Error refusedTable(const test::ScratchDir& dir, const std::string& text) {
  auto b = loadKernelBenchmark(dir.write("table.json", text));
  EXPECT_FALSE(b);
  return b ? Error{} : b.error();
}

TEST(KernelBenchmarks, TorchaosRowwiseTableIsPredictedWithinTenPercent) {
  // torchao's measured speedup of float8 rowwise over bf16 for a LayerNorm -> Linear -> Sigmoid block,
  // 216 shapes from 1024 to 32768 on each axis. Before colo charged rowwise's casts as measured, it
  // predicted speedups 34% too high on average and the wrong side of 1 for a quarter of the shapes
  // (a float8 linear of a small tensor-parallel shard is slower than bf16: torchtitan issue 1207).
  auto bench = loadKernelBenchmark(test::dataFile(kRowwiseTable));
  ASSERT_TRUE(bench) << bench.error().toString();
  EXPECT_EQ(bench->points.size(), 216u);
  EXPECT_EQ(bench->recipe, Float8Recipe::kRowwise);
  auto check = checkKernelBenchmark(*bench);
  ASSERT_TRUE(check) << check.error().toString();
  EXPECT_EQ(check->shapes, 216u);
  EXPECT_LT(check->meanAbsError, 0.10);
  EXPECT_LT(std::abs(check->medianSigned), 0.05);
  EXPECT_GT(check->sameSide, 0.9);
  // The shape of a Llama 3 8B k or v projection at tensor parallelism 8 (16,384 tokens, k 4096, n 1024
  // is the table's nearest): measured 0.57; colo must say float8 loses there. The largest GEMMs win.
  auto at = [&](double m, double k, double n) {
    auto s = predictBlock(*bench, {m, k, n, 1.0});
    EXPECT_TRUE(s) << s.error().toString();
    return s ? s->bf16 / s->float8 : 0.0;
  };
  EXPECT_LT(at(16384, 4096, 1024), 0.8);
  EXPECT_GT(at(32768, 16384, 16384), 1.3);
}

TEST(KernelBenchmarks, TransformerEnginesGroupedGemmsOnB200AreTimedFourStreamsAtATime) {
  // SimuMax's measured B200 GroupedLinear passes (108 shapes of DeepSeek-V2/V3 expert layers). Pooling
  // every expert's tiles as one grouped kernel predicts them 23% fast; four streams at a time, each GEMM
  // its own launch, as Transformer Engine runs them, brings the table to 15%.
  auto bench = loadKernelBenchmark(test::dataFile("validation/published/kernels/simumax_b200_grouped_gemm.json"));
  ASSERT_TRUE(bench) << bench.error().toString();
  EXPECT_EQ(bench->block, KernelBlock::kGemm);
  EXPECT_EQ(bench->streams, 4);
  EXPECT_EQ(bench->points.size(), 108u);
  auto check = checkKernelBenchmark(*bench);
  ASSERT_TRUE(check) << check.error().toString();
  EXPECT_LT(check->meanAbsError, 0.17);
  KernelBenchmark pooled = *bench;
  pooled.streams = 0;
  auto one = checkKernelBenchmark(pooled);
  ASSERT_TRUE(one) << one.error().toString();
  EXPECT_GT(one->meanAbsError, 0.20);
  EXPECT_LT(one->medianSigned, check->medianSigned);
  // The dense GEMMs of the same machine (514 shapes of Llama 3 and DeepSeek layers): colo's roofline.
  auto dense = loadKernelBenchmark(test::dataFile("validation/published/kernels/simumax_b200_gemm.json"));
  ASSERT_TRUE(dense) << dense.error().toString();
  auto denseCheck = checkKernelBenchmark(*dense);
  ASSERT_TRUE(denseCheck) << denseCheck.error().toString();
  EXPECT_EQ(denseCheck->shapes, 514u);
  EXPECT_LT(denseCheck->meanAbsError, 0.15);
  EXPECT_LT(std::abs(denseCheck->medianSigned), 0.05);
  // One point by hand: 20 experts of 1,232 rows, [1232, 5120] x [5120, 3072], forward.
  auto seconds = predictGemm(*bench, KernelPoint{1232, 5120, 3072, 0, 20, 0, 1000});
  ASSERT_TRUE(seconds) << seconds.error().toString();
  const auto cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-b200.json"));
  const auto d = costmodel::deviceModel(cluster.gpu, DType::kBf16);
  EXPECT_DOUBLE_EQ(*seconds, 5 * costmodel::gemmSeconds(1232, 3072, 5120, 4, 2, d));
}

TEST(KernelBenchmarks, TransformerEnginesFusedAttentionOnB200IsPredictedWhereTheKernelsDominate) {
  // SimuMax's measured B200 fused attention (19 shapes): Llama 3's head dim 128 and DeepSeek's latent
  // attention (192 / 128). Each time is the span of one call's kernels, so where the forward is short
  // the host's gaps between them show (~90-100 us forward at 16 heads or fewer, whatever the work):
  // only the shapes whose measured forward takes 200 us or more are held to the cost model here.
  auto bench = loadKernelBenchmark(test::dataFile("validation/published/kernels/simumax_b200_attention.json"));
  ASSERT_TRUE(bench) << bench.error().toString();
  EXPECT_EQ(bench->block, KernelBlock::kAttention);
  ASSERT_EQ(bench->points.size(), 19u);
  auto check = checkKernelBenchmark(*bench);
  ASSERT_TRUE(check) << check.error().toString();
  EXPECT_EQ(check->shapes, 19u);
  int shapes = 0, latent = 0;
  double sum = 0;
  for (const auto& p : bench->points) {
    if (p.forwardSeconds < 200e-6) continue;
    auto t = predictAttention(*bench, p);
    ASSERT_TRUE(t) << t.error().toString();
    ++shapes;
    sum += std::abs(t->forward / p.forwardSeconds - 1.0) + std::abs(t->backward / p.backwardSeconds - 1.0);
    // The latent attention's backward at its measured share (0.35); at head dim 128's it was 13-20% fast.
    if (p.headDim == 192) {
      ++latent;
      EXPECT_NEAR(t->backward / p.backwardSeconds, 1.0, 0.06) << p.heads << " heads, " << p.seq << " tokens";
    }
  }
  EXPECT_EQ(shapes, 10);
  EXPECT_EQ(latent, 4);
  EXPECT_LT(sum / (2 * shapes), 0.10);
  // One point by hand: 128 heads of 192 / 128 at 4,096 tokens, causal.
  const auto cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-b200.json"));
  const auto d = costmodel::deviceModel(cluster.gpu, DType::kBf16);
  auto t = predictAttention(*bench, bench->points[13]);
  ASSERT_TRUE(t) << t.error().toString();
  const double flops = 128.0 * 4096.0 * 4096.0 * (192.0 + 128.0);
  EXPECT_DOUBLE_EQ(t->forward, costmodel::fusedAttentionSeconds(flops, d, 192).forward);
  EXPECT_NEAR(bench->points[13].forwardSeconds, 735.4e-6, 1e-9);
}

TEST(KernelBenchmarks, AMalformedAttentionTableIsRefusedNamingTheFieldAndValue) {
  test::ScratchDir dir;
  auto refused = [&](const std::string& text) { return refusedTable(dir, text); };
  const std::string head = R"({"format": "colo.kernel-benchmark/1", "id": "a", "cluster": "dgx-b200", "block": "attention", )";
  // Key/value heads that do not divide the query heads; a missing time; a block's key it does not have.
  Error e = refused(head + R"("points": [[1, 4096, 128, 16, 128, 128, 490, 1469], [1, 4096, 128, 24, 128, 128, 490, 1469]]})");
  EXPECT_EQ(e.path, "/points/1");
  EXPECT_NE(e.message.find("kv_heads dividing heads"), std::string::npos) << e.message;
  e = refused(head + R"("points": [[1, 4096, 128, 16, 128, 128, 490]]})");
  EXPECT_EQ(e.path, "/points/0");
  e = refused(head + R"("streams": 4, "points": [[1, 4096, 128, 16, 128, 128, 490, 1469]]})");
  EXPECT_EQ(e.path, "/streams");
  auto ok = loadKernelBenchmark(dir.write("fine.json", head + R"("points": [[1, 4096, 128, 16, 128, 128, 490, 1469]]})"));
  ASSERT_TRUE(ok) << ok.error().toString();
  EXPECT_DOUBLE_EQ(ok->points[0].backwardSeconds, 1469e-6);
}

TEST(KernelBenchmarks, AMalformedGemmTableIsRefusedNamingTheFieldAndValue) {
  test::ScratchDir dir;
  auto refused = [&](const std::string& text) { return refusedTable(dir, text); };
  const std::string head = R"({"format": "colo.kernel-benchmark/1", "id": "g", "cluster": "dgx-b200", "block": "gemm", )";
  Error e = refused(head + R"("streams": 4, "points": [[20, 1232, 3072, 5120, 0, 1000], [20, 1232, 3072, 5120, 3, 1000]]})");
  EXPECT_EQ(e.path, "/points/1");
  EXPECT_NE(e.message.find("accumulate_bytes"), std::string::npos) << e.message;
  e = refused(head + R"("streams": -1, "points": [[20, 1232, 3072, 5120, 0, 1000]]})");
  EXPECT_EQ(e.path, "/streams");
  EXPECT_NE(e.message.find("-1"), std::string::npos) << e.message;
  e = refused(head + R"("points": [[20, 1232, 3072, 5120, 0]]})");
  EXPECT_EQ(e.path, "/points/0");
  // A misspelt key, or the other block's, is not read as a default.
  e = refused(head + R"("stream": 4, "points": [[20, 1232, 3072, 5120, 0, 1000]]})");
  EXPECT_EQ(e.path, "/stream");
  e = refused(head + R"("recipe": "rowwise", "points": [[20, 1232, 3072, 5120, 0, 1000]]})");
  EXPECT_EQ(e.path, "/recipe");
  auto whole = loadKernelBenchmark(dir.write("four.json", head + R"("streams": 4.0, "points": [[20, 1232, 3072, 5120, 0, 1000]]})"));
  ASSERT_TRUE(whole) << whole.error().toString();
  EXPECT_EQ(whole->streams, 4);
  e = refused(R"({"format": "colo.kernel-benchmark/1", "id": "g", "cluster": "dgx-b200", "block": "conv", "points": [[1, 1, 1, 1]]})");
  EXPECT_EQ(e.path, "/block");
  EXPECT_NE(e.message.find("conv"), std::string::npos) << e.message;
}

TEST(KernelBenchmarks, AMalformedTableIsRefusedNamingTheFieldAndValue) {
  test::ScratchDir dir;
  auto refused = [&](const std::string& text) { return refusedTable(dir, text); };
  const std::string head =
      R"({"format": "colo.kernel-benchmark/1", "id": "t", "cluster": "h100-hbm2e-500w-x64", "block": "layernorm_linear_sigmoid", )";
  Error e = refused(head + R"("recipe": "rowwise", "points": [[1024, 1024, 1024, 0.5], [1024, -1, 1024, 0.5]]})");
  EXPECT_EQ(e.path, "/points/1");
  EXPECT_NE(e.message.find("-1"), std::string::npos) << e.message;
  e = refused(head + R"("recipe": "transformer_engine", "points": [[1024, 1024, 1024, 0.5]]})");
  EXPECT_EQ(e.path, "/recipe");
  e = refused(R"({"format": "colo.plan/1"})");
  EXPECT_NE(e.message.find("kernel-benchmark"), std::string::npos) << e.message;
  // Sides out of range, and a cluster the library does not have, are named with their value.
  e = refused(head + R"("recipe": "rowwise", "points": [[1e308, 1024, 1024, 0.5]]})");
  EXPECT_EQ(e.path, "/points/0");
  e = refused(R"({"format": "colo.kernel-benchmark/1", "id": "t", "cluster": "../models/llama3-8b", "block": "layernorm_linear_sigmoid", "recipe": "rowwise", "points": [[1024, 1024, 1024, 0.5]]})");
  EXPECT_EQ(e.path, "/cluster");
  EXPECT_NE(e.message.find("../models/llama3-8b"), std::string::npos) << e.message;
  EXPECT_NE(e.file.find("table.json"), std::string::npos) << e.file;
  e = refused(head + R"("recipe": "rowwise"})");
  EXPECT_EQ(e.path, "/points");
  EXPECT_NE(e.message.find("nothing"), std::string::npos) << e.message;
}

TEST(Float8Casts, RowwiseChargesItsMeasuredCastTimeAndAFixedCostPerLinearModule) {
  const auto cluster = test::loadClusterOrFail(test::dataFile("clusters/h100-hbm2e-500w-x64.json"));
  const auto fp8 = costmodel::deviceModel(cluster.gpu, DType::kFp8);
  const double bw = fp8.memoryBytesPerSecond;
  // Large operands (every kernel far above the launch floor): input i, weight w, output gradient g.
  const double i = 16384.0 * 8192, w = 8192.0 * 8192, g = 16384.0 * 8192;
  const auto one = costmodel::float8CastSeconds(Float8Recipe::kRowwise, i, w, g, 1.0, fp8);
  const auto three = costmodel::float8CastSeconds(Float8Recipe::kRowwise, i, w, g, 3.0, fp8);
  EXPECT_NEAR(one.forward + one.backward, 1.9 * (10 * i + 14 * w + 6 * g) / bw + 80e-6, 1e-9);
  // A fused GEMM standing for three modules (q, k, v) pays each module's fixed time; its cast bytes and
  // kernel count stay those of one linear (the shared input cast once; docs/costmodel.md says what is not modelled).
  EXPECT_NEAR((three.forward + three.backward) - (one.forward + one.backward), 2 * 80e-6, 1e-12);
  EXPECT_EQ(one.kernelsForward + one.kernelsBackward, 9);
  // Tensorwise (not measured by the table) keeps its bytes at the stream rate; Transformer Engine fuses.
  const auto tensorwise = costmodel::float8CastSeconds(Float8Recipe::kTensorwise, i, w, g, 3.0, fp8);
  EXPECT_NEAR(tensorwise.forward + tensorwise.backward, (4 * i + 8 * w + 4 * g) / bw, 1e-9);
  const auto te = costmodel::float8CastSeconds(Float8Recipe::kTransformerEngine, i, w, g, 3.0, fp8);
  EXPECT_EQ(te.forward + te.backward, 0.0);
}

}  // namespace
}  // namespace colo::validation
