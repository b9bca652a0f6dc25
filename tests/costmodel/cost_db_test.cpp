#include <algorithm>
#include "colo/costmodel/cost_db.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>

#include "colo/costmodel/evaluator.h"
#include "core/test_support.h"

namespace colo::costmodel {
namespace {

std::string readBytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The GEMMs GPT-2 small runs per layer at micro-batch 1, seq 1024, tp 1, and its LM head.
const std::vector<GemmMeasurement> kGpt2Shapes = {
    {1024, 2304, 768, DType::kBf16, 1e-3}, {1024, 768, 768, DType::kBf16, 1e-3}, {1024, 3072, 768, DType::kBf16, 1e-3},
    {1024, 768, 3072, DType::kBf16, 1e-3}, {1024, 50257, 768, DType::kBf16, 1e-3}};

Plan gpt2Plan() {
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/gpt2-small.json"));
  p.cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb.json")), 1);
  p.globalBatchSize = 8;
  p.seqLen = 1024;
  p.stages = uniformStages(12, 1, RecomputePolicy::kNone);
  return p;
}

TEST(CostDatabase, CreateAddReopenAndMatchTheDevice) {
  test::ScratchDir dir;
  const auto file = dir.path("costs.sqlite");
  {
    auto db = CostDatabase::create(file);
    ASSERT_TRUE(db) << db.error().toString();
    ASSERT_TRUE(db->addGemms("NVIDIA A100-SXM4-80GB", kGpt2Shapes));
    ASSERT_TRUE(db->addGemms("NVIDIA H100 80GB HBM3", {{64, 64, 64, DType::kBf16, 1e-5}}));
  }
  auto db = CostDatabase::open(file);
  ASSERT_TRUE(db) << db.error().toString();
  EXPECT_EQ(db->gemmsFor("A100-SXM4-80GB").size(), kGpt2Shapes.size());
  EXPECT_EQ(db->gemmsFor("h100").size(), 1u);
  EXPECT_TRUE(db->gemmsFor("V100").empty());
  EXPECT_EQ(db->hash().size(), 16u);
  auto again = CostDatabase::create(file);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find("refusing to overwrite"), std::string::npos);
}

TEST(CostDatabase, CorruptOrForeignFilesAreRefusedAndLeftUntouched) {
  test::ScratchDir dir;
  const auto garbage = dir.write("garbage.sqlite", std::string(4096, 'x'));
  const std::string before = readBytes(garbage);
  auto g = CostDatabase::open(garbage);
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(g.error().file, garbage);
  EXPECT_EQ(readBytes(garbage), before);

  const auto missing = CostDatabase::open(dir.path("missing.sqlite"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kIo);

  // A real SQLite file of another schema version.
  const auto file = dir.path("v1.sqlite");
  ASSERT_TRUE(CostDatabase::create(file));
  {
    const std::string cmd = "sqlite3 " + file + " \"UPDATE meta SET value='99' WHERE key='schema_version'\" 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "the sqlite3 command-line tool is not installed";
  }
  auto v = CostDatabase::open(file);
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().message.find("schema version 99"), std::string::npos);

  // Another colo database (a runs database's format): refused by readers and writers, not written to
  // (it was read as a cost database, and the profiler wrote into it).
  const auto runs = dir.path("runs.sqlite");
  ASSERT_TRUE(CostDatabase::create(runs));
  {
    const std::string cmd = "sqlite3 " + runs + " \"UPDATE meta SET value='colo.runs' WHERE key='format'\" 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "the sqlite3 command-line tool is not installed";
  }
  const std::string runsBytes = readBytes(runs);
  for (const bool write : {false, true}) {
    const auto opened = write ? CostDatabase::openForWrite(runs) : CostDatabase::open(runs);
    ASSERT_FALSE(opened);
    EXPECT_EQ(opened.error().code, ErrorCode::kBadInput);
    EXPECT_EQ(opened.error().path, "meta.format");
    EXPECT_NE(opened.error().message.find("its format is 'colo.runs'"), std::string::npos) << opened.error().message;
  }
  EXPECT_EQ(readBytes(runs), runsBytes);
}

TEST(CostDatabase, MeasuredTimesReplaceTheRoofline) {
  test::ScratchDir dir;
  const auto file = dir.path("costs.sqlite");
  {
    auto db = CostDatabase::create(file);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->addGemms("A100-SXM4-80GB", kGpt2Shapes));
  }
  auto db = CostDatabase::open(file);
  ASSERT_TRUE(db);
  const Plan p = gpt2Plan();
  auto roofline = evaluatePlan(p);
  auto measured = evaluatePlan(p, &*db);
  ASSERT_TRUE(roofline);
  ASSERT_TRUE(measured);
  EXPECT_EQ(roofline->gemmExact, 0);
  // The forward GEMMs of the layer template (4) and the LM head are in the database; their backward
  // shapes ([m,n]x[n,k] and [k,m]x[m,n]) are not, so they come from the nearest shape or the roofline.
  EXPECT_GE(measured->gemmExact, 5);
  EXPECT_EQ(measured->gemmExact + measured->gemmInterpolated + measured->gemmRoofline, 15);
  // 1 ms per forward GEMM is far slower than the roofline's tens of microseconds: 12 layers x 4 GEMMs plus
  // the head, 8 micro-batches.
  EXPECT_GT(measured->stepSeconds, roofline->stepSeconds + 8 * (12 * 4 + 1) * 1e-3 * 0.9);
}

TEST(CostDatabase, OneDeviceAnswersAndTwoThatMatchTheGpuAreRefused) {
  // Two A100 profiles in one file: mixed, which row won a shape depended on the merge order, and the
  // roofline scale was fitted over both. Now the file is refused, naming both; one device is used and named.
  test::ScratchDir dir;
  const auto file = dir.path("costs.sqlite");
  {
    auto db = CostDatabase::create(file);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->addGemms("NVIDIA A100-SXM4-80GB", kGpt2Shapes));
    ASSERT_TRUE(db->addGemms("NVIDIA H100 80GB HBM3", {{64, 64, 64, DType::kBf16, 1e-5}}));
  }
  const Plan p = gpt2Plan();
  {
    auto db = CostDatabase::open(file);
    ASSERT_TRUE(db);
    auto one = evaluatePlan(p, &*db);
    ASSERT_TRUE(one) << one.error().toString();
    EXPECT_EQ(one->calibration.costDbDevice, "NVIDIA A100-SXM4-80GB");
    EXPECT_EQ(one->calibration.toJson()["cost_db_device"], "NVIDIA A100-SXM4-80GB");
    EXPECT_GE(one->gemmExact, 5);
  }
  {
    auto db = CostDatabase::openForWrite(file);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->addGemms("A100-SXM4-80GB (another node)", kGpt2Shapes));
  }
  auto db = CostDatabase::open(file);
  ASSERT_TRUE(db);
  auto two = evaluatePlan(p, &*db);
  ASSERT_FALSE(two);
  EXPECT_EQ(two.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(two.error().file, file);
  EXPECT_NE(two.error().message.find("2 of its devices match the cluster's GPU"), std::string::npos) << two.error().message;
  EXPECT_NE(two.error().message.find("\"NVIDIA A100-SXM4-80GB\""), std::string::npos) << two.error().message;
  // The H100 cluster takes the one H100 device, named in the calibration.
  Plan h100 = p;
  h100.cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json")), 1);
  auto none = evaluatePlan(h100, &*db);
  ASSERT_TRUE(none) << none.error().toString();
  EXPECT_EQ(none->calibration.costDbDevice, "NVIDIA H100 80GB HBM3");
}

TEST(CostDatabase, NearbyShapesAreInterpolatedFarOnesAreNot) {
  GemmTable table({{1024, 1024, 1024, DType::kBf16, 2e-3}}, DType::kBf16);
  auto flopsTime = [](double m, double n, double k) { return 2 * m * n * k / 1e14; };
  auto exact = table.lookup(1024, 1024, 1024, flopsTime);
  ASSERT_TRUE(exact);
  EXPECT_EQ(exact->second, LookupSource::kExact);
  EXPECT_DOUBLE_EQ(exact->first, 2e-3);
  auto near = table.lookup(2048, 1024, 1024, flopsTime);
  ASSERT_TRUE(near);
  EXPECT_EQ(near->second, LookupSource::kInterpolated);
  EXPECT_DOUBLE_EQ(near->first, 4e-3);  // scaled by the roofline's ratio
  EXPECT_FALSE(table.lookup(16384, 1024, 1024, flopsTime));  // more than 4x away: the roofline decides
  EXPECT_TRUE(GemmTable({{1024, 1024, 1024, DType::kFp16, 1e-3}}, DType::kBf16).empty());  // other precision
}

}  // namespace
}  // namespace colo::costmodel

namespace colo::costmodel {
namespace {

TEST(CostDatabaseV2, KernelsCollectivesAndResume) {
  test::ScratchDir dir;
  const auto file = dir.path("v2.sqlite");
  auto db = CostDatabase::openForWrite(file);  // creates
  ASSERT_TRUE(db) << db.error().toString();
  EXPECT_EQ(db->schemaVersion(), 3);
  ASSERT_TRUE(db->addGemms("cpu: test", {{64, 64, 64, DType::kFp32, 1e-4}}, "torch 1.13"));
  ASSERT_TRUE(db->addCopies("cpu: test", {{"h2d", true, 1 << 20, 8e-5, 1e-6, 10}, {"d2h", false, 1 << 20, 2e-4, 1e-6, 10}}));
  ASSERT_TRUE(db->addKernels("cpu: test", {{"layernorm", DType::kFp32, "4096x768", "aten", 2e-4, 1e-5, 20}}));
  ASSERT_TRUE(db->addCollectives("cpu: test", {{"all_reduce", "gloo", 2, "loopback", 1 << 20, 3e-4, 1e-5, 10}}));
  EXPECT_TRUE(db->hasGemm("cpu: test", DType::kFp32, 64, 64, 64));
  EXPECT_FALSE(db->hasGemm("cpu: test", DType::kFp32, 64, 64, 128));
  auto reopened = CostDatabase::open(file);
  ASSERT_TRUE(reopened);
  EXPECT_EQ(reopened->kernelsFor("cpu: test").size(), 1u);
  EXPECT_EQ(reopened->collectivesFor("cpu: test").front().bytes, 1 << 20);
  EXPECT_EQ(reopened->devices(), std::vector<std::string>{"cpu: test"});
  const auto copies = reopened->copiesFor("cpu: test");
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].direction, "d2h");
  EXPECT_FALSE(copies[0].pinned);
  EXPECT_TRUE(copies[1].pinned);
  EXPECT_EQ(reopened->devicesMatching("CPU: Test"), std::vector<std::string>{"cpu: test"});
  EXPECT_TRUE(reopened->devicesMatching("h100").empty());
}

TEST(CostDatabaseV2, ColoRunsOwnKernelIsTheOneLookedUpWhereBothAreMeasured) {
  // A device profiled before colo's fused kernels existed, then again: both rows stay in the file, and
  // the table prices the kernel colo-run runs, whichever row comes first.
  test::ScratchDir dir;
  auto db = CostDatabase::openForWrite(dir.path("both.sqlite"));
  ASSERT_TRUE(db) << db.error().toString();
  ASSERT_TRUE(db->addKernels("cuda: test", {{"rmsnorm.fwd", DType::kBf16, "8192x1024", "aten", 2.5e-4, 1e-6, 20},
                                            {"rmsnorm.fwd", DType::kBf16, "8192x1024", "colo fused", 6e-5, 1e-6, 20},
                                            {"gelu.fwd", DType::kBf16, "8192x1024", "aten", 1e-4, 1e-6, 20}}));
  const auto rows = db->kernelsFor("cuda: test");
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& order : {rows, std::vector<KernelMeasurement>(rows.rbegin(), rows.rend())}) {
    const KernelTable table(order, DType::kBf16);
    const auto rms = table.lookup("rmsnorm.fwd", 8192, 1024);
    ASSERT_TRUE(rms);
    EXPECT_DOUBLE_EQ(rms->first, 6e-5);
    const auto gelu = table.lookup("gelu.fwd", 8192, 1024);
    ASSERT_TRUE(gelu);
    EXPECT_DOUBLE_EQ(gelu->first, 1e-4);  // only LibTorch's: that one
  }
  EXPECT_TRUE(isColoImplementation("colo fused AdamW (multi-tensor kernel)"));
  EXPECT_FALSE(isColoImplementation("aten"));
  EXPECT_FALSE(isColoImplementation("torch.optim.AdamW"));
}

TEST(CostDatabaseV2, VersionOneFilesAreMigratedInPlace) {
  test::ScratchDir dir;
  const auto file = dir.path("v1.sqlite");
  const std::string v1 =
      "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "CREATE TABLE devices(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, fingerprint TEXT NOT NULL DEFAULT '');"
      "CREATE TABLE gemms(device_id INTEGER NOT NULL, dtype TEXT NOT NULL, m INTEGER NOT NULL, n INTEGER NOT NULL,"
      " k INTEGER NOT NULL, median_s REAL NOT NULL, spread_s REAL NOT NULL DEFAULT 0, repetitions INTEGER NOT NULL DEFAULT 1,"
      " measured_at TEXT NOT NULL DEFAULT '', PRIMARY KEY (device_id, dtype, m, n, k));"
      "INSERT INTO meta VALUES ('format', 'colo.costdb'), ('schema_version', '1');"
      "INSERT INTO devices(name) VALUES ('gpu');"
      "INSERT INTO gemms(device_id, dtype, m, n, k, median_s) VALUES (1, 'bf16', 128, 128, 128, 1e-5);";
  if (std::system(("sqlite3 " + file + " \"" + v1 + "\" 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "the sqlite3 command-line tool is not installed";
  }
  auto readOnly = CostDatabase::open(file);
  ASSERT_TRUE(readOnly);
  EXPECT_EQ(readOnly->schemaVersion(), 1);
  EXPECT_EQ(readOnly->gemmsFor("gpu").size(), 1u);
  auto db = CostDatabase::openForWrite(file);
  ASSERT_TRUE(db) << db.error().toString();
  EXPECT_EQ(db->schemaVersion(), 3);
  EXPECT_EQ(db->migratedFrom(), 1);  // colo-profile says so
  ASSERT_TRUE(db->addKernels("gpu", {{"gelu", DType::kBf16, "1x1", "", 1e-6, 0, 1}}));
  ASSERT_TRUE(db->addCopies("gpu", {{"h2d", true, 4096, 1e-5, 0, 3}}));
  EXPECT_EQ(CostDatabase::open(file)->schemaVersion(), 3);
  EXPECT_EQ(CostDatabase::open(file)->copiesFor("gpu").size(), 1u);
  EXPECT_EQ(CostDatabase::open(file)->gemmsFor("gpu").size(), 1u);  // the old rows survive
  EXPECT_EQ(CostDatabase::openForWrite(file)->migratedFrom(), 0);      // nothing left to migrate
}

TEST(CostDatabaseV2, EveryRunsFingerprintIsKept) {
  // Rows of one device from runs with different fingerprints (a 1-thread and a 2-thread run): the device
  // keeps both, once each, the most recently written last, and a merge adds the other file's.
  test::ScratchDir dir;
  const auto a = dir.path("a.sqlite");
  const auto b = dir.path("b.sqlite");
  {
    auto db = CostDatabase::openForWrite(a);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->addGemms("cpu", {{64, 64, 64, DType::kFp32, 1e-5}}, "libtorch 1.13; threads 1"));
    ASSERT_TRUE(db->addGemms("cpu", {{128, 64, 64, DType::kFp32, 2e-5}}, "libtorch 1.13; threads 2"));
    ASSERT_TRUE(db->addGemms("cpu", {{256, 64, 64, DType::kFp32, 3e-5}}, "libtorch 1.13; threads 1"));
    EXPECT_EQ(db->fingerprintOf("cpu"), "libtorch 1.13; threads 2\nlibtorch 1.13; threads 1");
    ASSERT_TRUE(db->addKernels("cpu", {{"gelu", DType::kFp32, "1x1", "", 1e-6, 0, 1}}, "libtorch 1.13; threads 3"));
    EXPECT_EQ(db->fingerprintOf("gpu"), "");
    auto other = CostDatabase::openForWrite(b);
    ASSERT_TRUE(other);
    ASSERT_TRUE(other->addGemms("cpu", {{64, 64, 64, DType::kFp32, 9e-5}}, "libtorch 2.5; threads 4"));
  }
  auto db = CostDatabase::openForWrite(a);
  ASSERT_TRUE(db);
  auto added = db->merge(b);
  ASSERT_TRUE(added) << added.error().toString();
  EXPECT_EQ(*added, 0);  // the one row of b is already in a; the fingerprint is not a row
  EXPECT_EQ(db->fingerprintOf("cpu"), "libtorch 1.13; threads 2\nlibtorch 1.13; threads 1\nlibtorch 1.13; threads 3\nlibtorch 2.5; threads 4");
  // Bounded by the schema's 4 KiB: the oldest go first.
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(db->addGemms("cpu", {{64, 64, 64, DType::kFp32, 1e-5}}, "run " + std::to_string(i) + std::string(40, '.')));
  }
  const std::string history = db->fingerprintOf("cpu");
  EXPECT_LE(history.size(), 4096u);
  EXPECT_NE(history.find("run 199"), std::string::npos);
  EXPECT_EQ(history.find("threads 2"), std::string::npos);
  EXPECT_TRUE(CostDatabase::open(a));  // still a valid file
}

TEST(CostDatabaseV2, MergeAddsWhatIsMissingAndRefusesForeignFiles) {
  test::ScratchDir dir;
  const auto a = dir.path("a.sqlite");
  const auto b = dir.path("b.sqlite");
  {
    auto da = CostDatabase::openForWrite(a);
    ASSERT_TRUE(da);
    ASSERT_TRUE(da->addGemms("gpu-a", {{64, 64, 64, DType::kBf16, 1e-5}}));
    auto dbb = CostDatabase::openForWrite(b);
    ASSERT_TRUE(dbb);
    ASSERT_TRUE(dbb->addGemms("gpu-b", {{64, 64, 64, DType::kBf16, 2e-5}, {128, 64, 64, DType::kBf16, 3e-5}}));
    ASSERT_TRUE(dbb->addGemms("gpu-a", {{64, 64, 64, DType::kBf16, 9e-5}}));  // same key as a: a's row is kept
    ASSERT_TRUE(dbb->addCollectives("gpu-b", {{"all_gather", "nccl", 8, "nvlink", 1024, 1e-5, 0, 5}}));
    ASSERT_TRUE(dbb->addCopies("gpu-b", {{"d2h", true, 1 << 20, 4e-5, 0, 5}}));
  }
  auto merged = CostDatabase::openForWrite(a);
  ASSERT_TRUE(merged);
  auto added = merged->merge(b);
  ASSERT_TRUE(added) << added.error().toString();
  EXPECT_GE(*added, 4);  // device gpu-b, two GEMMs, one collective
  EXPECT_EQ(merged->gemmsFor("gpu-b").size(), 2u);
  EXPECT_DOUBLE_EQ(merged->gemmsFor("gpu-a").front().seconds, 1e-5);
  EXPECT_EQ(merged->collectivesFor("gpu-b").size(), 1u);
  EXPECT_EQ(merged->copiesFor("gpu-b").size(), 1u);

  const auto garbage = dir.write("garbage.sqlite", std::string(2048, 'z'));
  const std::string before = readBytes(garbage);
  EXPECT_FALSE(merged->merge(garbage));
  EXPECT_FALSE(CostDatabase::openForWrite(garbage));
  EXPECT_EQ(readBytes(garbage), before);
}

TEST(CostDatabase, ReadingLeavesNothingBesideTheFile) {
  test::ScratchDir dir;
  const auto file = dir.path("costs.sqlite");
  {
    auto db = CostDatabase::create(file);  // WAL mode, as colo-profile writes
    ASSERT_TRUE(db) << db.error().toString();
    ASSERT_TRUE(db->addGemms("GPU", kGpt2Shapes));
  }
  auto db = CostDatabase::open(file);
  ASSERT_TRUE(db) << db.error().toString();
  EXPECT_EQ(db->gemmsFor("GPU").size(), kGpt2Shapes.size());
  for (const char* suffix : {"-wal", "-shm", "-journal"}) EXPECT_FALSE(std::filesystem::exists(file + suffix)) << suffix;
}

TEST(CostDatabase, NonFiniteTimesAreRefusedNamingTableAndColumn) {
  test::ScratchDir dir;
  const auto file = dir.path("costs.sqlite");
  {
    auto db = CostDatabase::create(file);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->addKernels("GPU", {{"layernorm.fwd", DType::kBf16, "8192x768", "aten", 1e-5}}));
    ASSERT_TRUE(db->addKernels("GPU", {{"gelu.fwd", DType::kBf16, "8192x768", "aten", std::numeric_limits<double>::infinity()}}));
  }
  auto db = CostDatabase::open(file);
  ASSERT_FALSE(db);
  EXPECT_EQ(db.error().toString(),
            file + ": kernels.median_s: must be a finite number of seconds above 0 and below 1e6, got Inf (row 2)");
}

}  // namespace
}  // namespace colo::costmodel

namespace colo::costmodel {
namespace {

// What CUDA calls a card against what the shipped cluster files call it.
TEST(CostDatabaseDevices, ACardServesTheClusterOfItsModelMemoryAndFormFactor) {
  EXPECT_TRUE(deviceMatchesGpu("cuda: NVIDIA H200", "H200-SXM-141GB"));
  EXPECT_TRUE(deviceMatchesGpu("cuda: NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"));
  EXPECT_TRUE(deviceMatchesGpu("cuda: NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"));
  EXPECT_TRUE(deviceMatchesGpu("cuda: NVIDIA GeForce RTX 4090", "GeForce RTX 4090"));
  EXPECT_TRUE(deviceMatchesGpu("cpu: Intel(R) Xeon(R) CPU @ 2.20GHz", "cpu"));
  EXPECT_TRUE(deviceMatchesGpu("anything", ""));
  EXPECT_FALSE(deviceMatchesGpu("cuda: NVIDIA H200", "H100-SXM5-80GB"));
  EXPECT_FALSE(deviceMatchesGpu("cuda: NVIDIA H100 80GB HBM3", "H100-SXM-96GB-HBM2e-500W"));  // another memory
  EXPECT_FALSE(deviceMatchesGpu("cuda: NVIDIA H100 PCIe", "H100-SXM5-80GB"));                 // another form factor
  EXPECT_FALSE(deviceMatchesGpu("cuda: NVIDIA A100-SXM4-40GB", "A100-SXM4-80GB"));
  EXPECT_FALSE(deviceMatchesGpu("cuda: NVIDIA GB200", "B200-SXM-180GB"));
  EXPECT_FALSE(deviceMatchesGpu("cuda: device 0", "H200-SXM-141GB"));
}

// The H200 database measured on a GPU visit ships under data/costdb and serves the hgx-h200 cluster.
TEST(CostDatabaseDevices, TheShippedH200DatabaseServesTheH200Cluster) {
  auto db = CostDatabase::open(std::string(COLO_SOURCE_DIR) + "/data/costdb/h200-bf16.sqlite");
  ASSERT_TRUE(db) << db.error().toString();
  EXPECT_EQ(db->devicesMatching("H200-SXM-141GB"), std::vector<std::string>{"cuda: NVIDIA H200"});
  EXPECT_TRUE(db->devicesMatching("H100-SXM5-80GB").empty());
  EXPECT_GT(db->gemmsFor("H200-SXM-141GB").size(), 400u);
  const auto kernels = db->kernelsFor("cuda: NVIDIA H200");
  EXPECT_GT(kernels.size(), 200u);
  // Flash attention's fused kernel as the cost model looks it up (GPT-2's heads of 64, dropout 0.1).
  EXPECT_TRUE(std::any_of(kernels.begin(), kernels.end(), [](const KernelMeasurement& k) {
    return k.op == "flash_attention.causal.d64.dropout.fwd";
  }));
  EXPECT_FALSE(db->collectivesFor("cuda: NVIDIA H200").empty());
}

}  // namespace
}  // namespace colo::costmodel
