// End-to-end tests of colo-validate on a folder of rows it has never seen: the table, the skipped rows
// with their field, the plans it writes, and exit 2 when nothing can be evaluated.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "colo/core/json.h"
#include "core/test_support.h"

namespace colo {
namespace {

const char* kRow = R"({
  "id": "v100_tp2", "source": {"citation": "a benchmark", "location": "table 1"},
  "model": {"name": "GPT h1536 L16", "arch": "GPT", "num_layers": 16, "hidden_size": 1536, "num_attention_heads": 16,
            "ffn_hidden_size": 6144, "seq_len": 2048, "vocab_size": 51200},
  "hardware": {"gpu": "V100-SXM2-16GB", "gpu_memory_gb": 16, "gpus_per_node": 8, "num_gpus": 8,
               "inter_node": "1x InfiniBand EDR 100 Gb/s per node"},
  "parallel": {"tp": 2, "pp": 1, "dp": 4},
  "training": {"precision": "fp16", "recompute": "full", "micro_batch_size": 4, "global_batch_size": 16},
  "measured": {"iteration_time_ms": 600, "memory_per_gpu_mib_nvidia_smi": 9000}
})";

TEST(ColoValidateCli, UnseenRowsAreEvaluatedAndBadOnesNamed) {
  test::ScratchDir dir;
  Json bad = Json::parse(kRow);
  bad["id"] = "tpu_row";
  bad["hardware"]["gpu"] = "TPU v4";
  dir.write("public_runs.json", Json::array({Json::parse(kRow), bad}).dump(2));
  const auto r = test::runProgram("colo-validate", dir.path("") + " --plans " + dir.path("plans"));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("v100_tp2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0.6000 s"), std::string::npos) << r.out;  // the measured iteration
  EXPECT_NE(r.out.find("skipped tpu_row: hardware.gpu: 'TPU v4'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("over 1 runs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  smi: mean"), std::string::npos) << r.out;  // memory by what its figure counts
  ASSERT_TRUE(std::filesystem::exists(dir.path("plans/v100_tp2.json")));
  const auto e = test::runProgram("colo-plan", "evaluate --plan " + dir.path("plans/v100_tp2.json") + " --json");
  ASSERT_EQ(e.exitCode, 0) << e.err;
  EXPECT_GT(Json::parse(e.out)["step_time_s"].get<double>(), 0);
}

TEST(ColoValidateCli, NothingToEvaluateIsExit2) {
  test::ScratchDir dir;
  Json bad = Json::parse(kRow);
  bad["measured"] = Json::object();
  dir.write("public_runs.json", Json::array({bad}).dump());
  const auto r = test::runProgram("colo-validate", dir.path(""));
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("skipped v100_tp2: measured: no iteration time"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir.path("") + "/public_runs.json: no row could be evaluated"), std::string::npos) << r.err;
  // Rows read from a file are named by that file, not by a public_runs.json inside it.
  const std::string rows = dir.write("rows.json", Json::array({bad}).dump());
  const auto file = test::runProgram("colo-validate", rows);
  EXPECT_EQ(file.exitCode, 2);
  EXPECT_NE(file.err.find("error: " + rows + ": no row could be evaluated"), std::string::npos) << file.err;
  dir.write("public_runs.json", "[{\"id\": ");
  const auto broken = test::runProgram("colo-validate", dir.path(""));
  EXPECT_EQ(broken.exitCode, 2);
  EXPECT_NE(broken.err.find("public_runs.json"), std::string::npos) << broken.err;
}

TEST(ColoValidateCli, KernelTablesBesideTheRowsAreCheckedAndABadOneIsExit2) {
  test::ScratchDir dir;
  dir.write("public_runs.json", Json::array({Json::parse(kRow)}).dump(2));
  std::filesystem::create_directories(dir.path("kernels"));
  const std::string table =
      R"({"format": "colo.kernel-benchmark/1", "id": "small_table", "cluster": "h100-hbm2e-500w-x64",
          "block": "layernorm_linear_sigmoid", "recipe": "rowwise",
          "points": [[16384, 4096, 1024, 0.57], [32768, 16384, 16384, 1.49]]})";
  dir.write("kernels/small.json", table);
  dir.write("kernels/gemm.json", R"({"format": "colo.kernel-benchmark/1", "id": "expert_gemms", "cluster": "dgx-b200",
          "block": "gemm", "streams": 4, "points": [[20, 1232, 3072, 5120, 0, 1150], [20, 5120, 3072, 1232, 8, 860],
          [40, 616, 3072, 5120, 0, 1050]]})");
  dir.write("kernels/attention.json", R"({"format": "colo.kernel-benchmark/1", "id": "latent_attention", "cluster": "dgx-b200",
          "block": "attention", "points": [[1, 4096, 128, 128, 192, 128, 735.4, 2376.62]]})");
  const auto r = test::runProgram("colo-validate", dir.path(""));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("kernel benchmarks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("latent_attention (time of each fused attention shape, forward and backward): |error| mean"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("of 1 shapes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("small_table (speedup of float8 over bf16): |error| mean"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("of 2 shapes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expert_gemms (time of each GEMM shape): |error| mean"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("of 3 shapes"), std::string::npos) << r.out;
  // --kernel-points lists a GEMM table's shapes, each measured time from its TFLOP/s
  // (2 x 20 x 1232 x 3072 x 5120 / 1150e12 s = 674.0 us), and refuses what it cannot list.
  const auto points = test::runProgram("colo-validate", dir.path("") + " --kernel-points expert_gemms");
  ASSERT_EQ(points.exitCode, 0) << points.err;
  EXPECT_NE(points.out.find("674.0 us"), std::string::npos) << points.out;
  EXPECT_NE(points.out.find("1232"), std::string::npos) << points.out;
  EXPECT_NE(points.out.find("616"), std::string::npos) << points.out;
  const auto unknown = test::runProgram("colo-validate", dir.path("") + " --kernel-points nothing_here");
  EXPECT_EQ(unknown.exitCode, 2);
  EXPECT_NE(unknown.err.find("nothing_here"), std::string::npos) << unknown.err;
  EXPECT_EQ(test::runProgram("colo-validate", dir.path("") + " --kernel-points small_table").exitCode, 2);
  EXPECT_EQ(test::runProgram("colo-validate", dir.path("") + " --kernel-points expert_gemms --calibrate").exitCode, 2);
  // Without a folder: the shipped tables.
  const auto shipped = test::runProgram("colo-validate", "--kernel-points simumax_b200_grouped_gemm");
  ASSERT_EQ(shipped.exitCode, 0) << shipped.err;
  EXPECT_NE(shipped.out.find("simumax_b200_grouped_gemm"), std::string::npos) << shipped.out;
  std::filesystem::remove(dir.path("kernels/gemm.json"));
  std::filesystem::remove(dir.path("kernels/attention.json"));
  // A malformed table stops the report, naming the file, the field and the value.
  Json broken = Json::parse(table);
  broken["points"][1][2] = "wide";
  dir.write("kernels/small.json", broken.dump());
  const auto bad = test::runProgram("colo-validate", dir.path(""));
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("small.json"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("/points/1"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("\"wide\""), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace colo

namespace colo {
namespace {

TEST(ColoValidateCli, HelpExitsZeroAndNamesTheSchema) {
  const auto r = test::runProgram("colo-validate", "--help");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("usage: colo-validate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("data/validation/README.md"), std::string::npos) << r.out;
  const auto bad = test::runProgram("colo-validate", "--plan x");
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--plan"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace colo
