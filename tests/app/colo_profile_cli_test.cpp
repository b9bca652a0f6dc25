// colo-profile as a user runs it. Skips, saying why, when the build has no LibTorch (no profiler).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <csignal>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <gtest/gtest.h>

#include "colo/core/json.h"
#include "core/test_support.h"

extern char** environ;

namespace colo {
namespace {

test::ProgramOutput profile(const std::string& arguments) { return test::runProgram("colo-profile", arguments); }

class ColoProfileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(COLO_BIN_DIR) + "/colo-profile")) {
      GTEST_SKIP() << "colo-profile is not built (COLO_BUILD_EXECUTOR off: no LibTorch)";
    }
  }
};

TEST_F(ColoProfileCli, HelpNamesEverySubcommandAndEachHasItsOwnHelp) {
  auto help = profile("--help");
  ASSERT_EQ(help.exitCode, 0) << help.err;
  for (const char* sub : {"merge", "check", "collectives", "calibrate"}) {
    EXPECT_NE(help.out.find(std::string("colo-profile ") + sub + " "), std::string::npos) << sub << " missing from\n" << help.out;
    auto own = profile(std::string(sub) + " --help");
    EXPECT_EQ(own.exitCode, 0) << sub << ": " << own.err;
    EXPECT_NE(own.out.find(std::string("usage: colo-profile ") + sub), std::string::npos) << sub << ":\n" << own.out;
  }
  auto unknown = profile("bogus");
  EXPECT_EQ(unknown.exitCode, 2);
  EXPECT_NE(unknown.err.find("unknown command \"bogus\""), std::string::npos) << unknown.err;
}

TEST_F(ColoProfileCli, ProfileResumeCheckAndMerge) {
  test::ScratchDir dir;
  const std::string db = dir.path("cpu.sqlite");
  auto first = profile("--model tiny-gpt --db " + db + " --seq-len 64 --reps 2 --json");
  ASSERT_EQ(first.exitCode, 0) << first.err;
  const Json a = Json::parse(first.out);
  EXPECT_GT(a["measured"].get<int>(), 5);
  auto second = profile("--model tiny-gpt --db " + db + " --seq-len 64 --reps 2 --resume --json --quiet");
  ASSERT_EQ(second.exitCode, 0) << second.err;
  EXPECT_EQ(Json::parse(second.out)["measured"].get<int>(), 0);
  // Everything measured the first time (every GEMM shape and every kernel) is skipped the second, each
  // counted as what it is.
  EXPECT_EQ(Json::parse(second.out)["skipped"].get<int>(), a["shapes"].get<int>());
  EXPECT_EQ(Json::parse(second.out)["kernels_skipped"].get<int>(), a["kernels"].get<int>());
  EXPECT_EQ(Json::parse(second.out)["kernels"].get<int>(), 0);
  EXPECT_GT(a["kernels"].get<int>(), 3);
  auto check = profile("check --model tiny-gpt --db " + db + " --seq-len 64 --batch 1 --reps 2 --json");
  ASSERT_EQ(check.exitCode, 0) << check.err;
  const Json c = Json::parse(check.out);
  EXPECT_GT(c["measured_step_s"].get<double>(), 0);
  EXPECT_EQ(c["gemm_time_sources"]["roofline"].get<int>(), 0);

  const std::string other = dir.path("other.sqlite");
  ASSERT_EQ(profile("--model tiny-llama --db " + other + " --seq-len 64 --reps 1 --quiet").exitCode, 0);
  auto merged = profile("merge --db " + db + " " + other);
  ASSERT_EQ(merged.exitCode, 0) << merged.err;
  EXPECT_NE(merged.out.find("rows added"), std::string::npos);

  // A bad file among several writes nothing: every file is checked first (the good one was merged, and a
  // missing --db created, before the bad one failed).
  const std::string garbage = dir.write("garbage.sqlite", std::string(4096, 'x'));
  const std::string fresh = dir.path("fresh.sqlite");
  auto bad = profile("merge --db " + fresh + " " + other + " " + garbage);
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find(garbage), std::string::npos) << bad.err;
  EXPECT_TRUE(bad.out.empty()) << bad.out;
  EXPECT_FALSE(std::filesystem::exists(fresh));
  auto missing = profile("merge --db " + fresh + " " + dir.path("nosuch.sqlite"));
  EXPECT_EQ(missing.exitCode, 2);
  EXPECT_FALSE(std::filesystem::exists(fresh));
  // A device that is not there is refused before the database is created (an empty file was left).
  const auto cuda = profile("--model tiny-gpt --db " + fresh + " --device cuda --seq-len 64 --reps 1 --quiet");
  if (cuda.exitCode == 2) {
    EXPECT_NE(cuda.err.find("--device cuda"), std::string::npos) << cuda.err;
    EXPECT_FALSE(std::filesystem::exists(fresh));
  }
  // Itself (it was "database is locked").
  auto self = profile("merge --db " + db + " " + db);
  EXPECT_EQ(self.exitCode, 2);
  EXPECT_NE(self.err.find("a database cannot be merged into itself"), std::string::npos) << self.err;
  {
    // (Last: it needs the sqlite3 tool.) Each GEMM row records its repetitions and spread, as the kernels'
    // do (every row said 1 and 0): db's own rows were measured with --reps 2, the merged ones with 1.
    const std::string query = "sqlite3 " + db + " 'SELECT COUNT(*), MIN(repetitions), MAX(repetitions), MIN(spread_s) >= 0 FROM gemms' 2>/dev/null";
    FILE* pipe = popen(query.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    char line[128] = {};
    const bool read = std::fgets(line, sizeof line, pipe) != nullptr;
    const int status = pclose(pipe);
    if (!read || status != 0) GTEST_SKIP() << "the sqlite3 command-line tool is not installed";
    int rows = 0, least = 0, most = 0, spread = 0;
    ASSERT_EQ(std::sscanf(line, "%d|%d|%d|%d", &rows, &least, &most, &spread), 4) << line;
    EXPECT_GT(rows, 0);
    EXPECT_EQ(least, 1);
    EXPECT_EQ(most, 2);
    EXPECT_EQ(spread, 1);
  }
}

TEST_F(ColoProfileCli, CollectivesResumeMeasuresOnlyTheMissingSizes) {
  test::ScratchDir dir;
  std::random_device rd;
  const std::string db = dir.path("c.sqlite");
  auto port = [&] { return " --port " + std::to_string(30000 + static_cast<int>(rd() % 20000)); };
  auto first = profile("collectives --db " + db + " --world 2 --sizes 1024 --reps 2 --json" + port());
  ASSERT_EQ(first.exitCode, 0) << first.err;
  EXPECT_EQ(Json::parse(first.out)["measurements"].get<int>(), 3);
  auto second = profile("collectives --db " + db + " --world 2 --sizes 1024,4096 --reps 2 --resume --json" + port());
  ASSERT_EQ(second.exitCode, 0) << second.err;
  EXPECT_EQ(Json::parse(second.out)["measurements"].get<int>(), 3);  // 4096 only
  EXPECT_EQ(Json::parse(second.out)["sizes_already_in"].get<int>(), 1);
  auto third = profile("collectives --db " + db + " --world 2 --sizes 1024,4096 --reps 2 --resume --json" + port());
  ASSERT_EQ(third.exitCode, 0) << third.err;
  const Json nothing = Json::parse(third.out);  // still one JSON object with nothing left to measure
  EXPECT_EQ(nothing["measurements"].get<int>(), 0);
  EXPECT_EQ(nothing["sizes_already_in"].get<int>(), 2);
  EXPECT_FALSE(nothing["cancelled"].get<bool>());
  EXPECT_EQ(nothing["fits"][0]["points"].get<int>(), 2);  // over the stored rows of both sizes (this run measured none)
}

TEST_F(ColoProfileCli, CollectivesInterruptedKeepWhatWasMeasured) {
  // SIGINT to the parent (rank 0) while it measures: every rank stops after the size in flight, the
  // completed sizes are written, exit 130; --resume then measures the rest, and the file holds every size.
  test::ScratchDir dir;
  std::random_device rd;
  const std::string db = dir.path("c.sqlite");
  const std::string sizes = "1024,65536,1048576,4194304,16777216,67108864";
  const std::string bin = std::string(COLO_BIN_DIR) + "/colo-profile";
  std::vector<std::string> argv{bin, "collectives", "--db", db, "--world", "2", "--sizes", sizes, "--reps", "5", "--json",
                                "--port", std::to_string(30000 + static_cast<int>(rd() % 20000))};
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, dir.path("out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, dir.path("err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, bin.c_str(), &actions, nullptr, cargv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  // The signal once the database exists (the program has started), and a second later while it measures.
  for (int i = 0; i < 600 && !std::filesystem::exists(db); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::ifstream outFile(dir.path("out")), errFile(dir.path("err"));
  const std::string out((std::istreambuf_iterator<char>(outFile)), {}), err((std::istreambuf_iterator<char>(errFile)), {});
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) {
    GTEST_SKIP() << "the signal came before colo-profile installed its handler (a slow start): nothing measured to keep";
  }
  ASSERT_TRUE(WIFEXITED(status)) << err;
  if (WEXITSTATUS(status) == 0) GTEST_SKIP() << "the run finished before the signal (a fast machine): nothing to interrupt";
  ASSERT_EQ(WEXITSTATUS(status), 130) << out << err;
  const Json j = Json::parse(out);
  EXPECT_TRUE(j["cancelled"].get<bool>());
  const int kept = j["measurements"].get<int>();
  EXPECT_LT(kept, 18);
  EXPECT_EQ(kept % 3, 0);  // whole sizes only
  auto rest = profile("collectives --db " + db + " --world 2 --sizes " + sizes + " --reps 1 --resume --json --port " +
                      std::to_string(30000 + static_cast<int>(rd() % 20000)));
  ASSERT_EQ(rest.exitCode, 0) << rest.err;
  EXPECT_EQ(Json::parse(rest.out)["sizes_already_in"].get<int>(), kept / 3);
  EXPECT_EQ(kept + Json::parse(rest.out)["measurements"].get<int>(), 18);
}

TEST_F(ColoProfileCli, CollectivesAcrossTwoProcesses) {
  test::ScratchDir dir;
  std::random_device rd;
  const int port = 30000 + static_cast<int>(rd() % 20000);
  auto r = profile("collectives --db " + dir.path("c.sqlite") + " --world 2 --sizes 1024,4194304 --reps 3 --port " +
                   std::to_string(port) + " --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["measurements"].get<int>(), 6);
  ASSERT_EQ(j["fits"].size(), 1u);  // one link level: loopback
  EXPECT_EQ(j["fits"][0]["level"], "loopback");
  EXPECT_GT(j["fits"][0]["bandwidth_GBps"].get<double>(), 0);

  // The cost model takes the loopback level's latency and bandwidth from the measurements.
  const std::string plan = "evaluate --model tiny-gpt --cluster localhost-cpu --gpus 2 --dp 2 --mbs 1 --gbs 2 --seq-len 64 "
                           "--precision fp32 --costdb " + dir.path("c.sqlite");
  auto explained = test::runProgram("colo-plan", plan + " --explain");
  ASSERT_EQ(explained.exitCode, 0) << explained.err;
  EXPECT_NE(explained.out.find("link loopback   measured collectives (2)"), std::string::npos) << explained.out;
  auto json = test::runProgram("colo-plan", plan + " --json");
  ASSERT_EQ(json.exitCode, 0) << json.err;
  const Json e = Json::parse(json.out);
  EXPECT_EQ(e["calibration"]["links"][0]["level"], "loopback");
  EXPECT_NEAR(e["calibration"]["links"][0]["bytes_per_s"].get<double>(), j["fits"][0]["bandwidth_GBps"].get<double>() * 1e9,
              1e-3 * e["calibration"]["links"][0]["bytes_per_s"].get<double>());
}

TEST_F(ColoProfileCli, ForeignFilesAreRefusedUntouched) {
  test::ScratchDir dir;
  const std::string bad = dir.write("bad.sqlite", std::string(1000, 'q'));
  auto r = profile("--model tiny-gpt --db " + bad + " --quiet");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
  std::ifstream in(bad);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), std::string(1000, 'q'));
  EXPECT_EQ(profile("--model tiny-gpt --db x.sqlite --tp 0").exitCode, 2);
  // A list with a trailing comma is refused whole, naming the option and its value, and creates no file.
  const std::string fresh = dir.path("fresh.sqlite");
  const auto trailing = profile("--model tiny-gpt --db " + fresh + " --tp 1,2,");
  EXPECT_EQ(trailing.exitCode, 2);
  EXPECT_NE(trailing.err.find("--tp: expected values (positive integers) separated by commas, got \"1,2,\""), std::string::npos)
      << trailing.err;
  EXPECT_FALSE(std::filesystem::exists(fresh));
}

TEST_F(ColoProfileCli, CalibrateFitsTheUsersRunsAndEvaluateAppliesIt) {
  // The shipped example: seven NeMo runs on DGX H100. Each run predicted by scales fitted on the other
  // six must come closer to its measurement than uncalibrated colo does.
  test::ScratchDir dir;
  const std::string out = dir.path("h100.json");
  const auto fitted = profile("calibrate --runs " + test::dataFile("examples/nemo-h100-runs.csv") + " --out " + out);
  ASSERT_EQ(fitted.exitCode, 0) << fitted.err;
  EXPECT_NE(fitted.out.find("calibration of H100-SXM5-80GB from 7 runs"), std::string::npos) << fitted.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(fitted.out, m, std::regex(R"(median ([0-9.]+)% -> ([0-9.]+)%)"))) << fitted.out;
  EXPECT_LT(std::stod(m[2]), std::stod(m[1]));
  auto cal = readJsonFile(out);
  ASSERT_TRUE(cal) << cal.error().toString();
  EXPECT_EQ((*cal)["format"], "colo.calibration/1");
  EXPECT_EQ((*cal)["runs"], 7);
  const std::string plan = "evaluate --model llama3-8b --cluster dgx-h100 --gpus 8 --cp 2 --gbs 128 --seq-len 8192 --zero 1 --precision fp8";
  const auto plain = test::runProgram("colo-plan", plan + " --json");
  const auto calibrated = test::runProgram("colo-plan", plan + " --json --calibration " + out);
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  ASSERT_EQ(calibrated.exitCode, 0) << calibrated.err;
  const double before = Json::parse(plain.out)["step_time_s"].get<double>();
  const double after = Json::parse(calibrated.out)["step_time_s"].get<double>();
  EXPECT_NEAR(after / before, (*cal)["compute_scale"].get<double>(), 0.35);  // one scale or two, close to it
  EXPECT_NE(after, before);
  // The calibration belongs to its GPU: an A100 plan refuses it, naming the file and field.
  const auto wrong = test::runProgram("colo-plan", "evaluate --model llama3-8b --cluster dgx-a100-80gb --gpus 8 --gbs 16 --calibration " + out);
  EXPECT_EQ(wrong.exitCode, 2);
  EXPECT_NE(wrong.err.find(out + ": /gpu: fitted on runs of H100-SXM5-80GB"), std::string::npos) << wrong.err;
  // A CSV without a required column is refused by line and column.
  const std::string csv = dir.path("bad.csv");
  std::ofstream(csv) << "model,gpu,gpus,tp,pp,dp,mbs,gbs,seq_len\nllama3-8b,H100,8,1,1,8,1,8,8192\n";
  const auto bad = profile("calibrate --runs " + csv);
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find(csv + ": line 1, column step_time_s: missing from the header"), std::string::npos) << bad.err;
  // A misspelled column (it was ignored, its figures silently left out) and a model colo does not know
  // (it was "model.num_layers: missing or not positive") are named.
  const std::string header = "model,gpu,gpus,tp,pp,dp,mbs,gbs,seq_len,step_time_s";
  std::ofstream(csv) << header << ",peak_mem_gib\nllama3-8b,H100,8,1,1,8,1,8,8192,1.5,70\n";
  const auto misspelled = profile("calibrate --runs " + csv);
  EXPECT_EQ(misspelled.exitCode, 2);
  EXPECT_NE(misspelled.err.find(csv + ": line 1, column peak_mem_gib: unknown column"), std::string::npos) << misspelled.err;
  // A trailing comma (an unnamed, empty column) and a model named as people write it are fine.
  std::ofstream(csv) << header << ",\nLlama 3 8B,H100,8,1,1,8,1,8,8192,1.5,\nllama3-8b,H100,8,1,1,8,1,16,8192,2.9,\n"
                        "llama3-8b,H100,8,1,1,8,1,32,8192,5.6,\n";
  const auto trailing = test::runProgram("colo-validate", csv);
  EXPECT_EQ(trailing.exitCode, 0) << trailing.err;
  std::ofstream(csv) << header << "\nnosuch,H100,8,1,1,8,1,8,8192,1.5\n";
  const auto unknown = profile("calibrate --runs " + csv);
  EXPECT_EQ(unknown.exitCode, 2);
  EXPECT_NE(unknown.err.find(csv + ": line 2, column model: \"nosuch\" is not a library model"), std::string::npos)
      << unknown.err;
  // A --gpu no run is on is named as such (it said "no run with a measured and a predicted step time"),
  // and an --out folder that does not exist is named before the runs are read.
  const std::string runs = test::dataFile("examples/nemo-h100-runs.csv");
  const auto b200 = profile("calibrate --runs " + runs + " --gpu B200");
  EXPECT_EQ(b200.exitCode, 2);
  EXPECT_NE(b200.err.find("--gpu B200: no run is on such a GPU (the runs are on H100-SXM5-80GB)"), std::string::npos) << b200.err;
  const auto nowhere = profile("calibrate --runs " + runs + " --out /nonexistent/c.json");
  EXPECT_EQ(nowhere.exitCode, 2);
  EXPECT_NE(nowhere.err.find("--out /nonexistent/c.json: the folder /nonexistent does not exist"), std::string::npos) << nowhere.err;
}

}  // namespace
}  // namespace colo
