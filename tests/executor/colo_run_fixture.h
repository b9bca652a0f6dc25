#pragma once
// The colo-run test fixture: real ranks joined by c10d Gloo on this machine, plans made as a user makes
// them (colo-plan evaluate ... --out), losses compared with one process.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "colo/core/json.h"
#include "core/test_support.h"

namespace colo {

// Processes (other than this one) whose command line contains `text`.
inline int processesNaming(const std::string& text) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos || std::stoi(pid) == getpid()) continue;
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(text) != std::string::npos) ++count;
  }
  return count;
}

class ColoRun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(COLO_BIN_DIR) + "/colo-run")) GTEST_SKIP() << "colo-run is not built (no LibTorch)";
    auto prepared = test::runProgram("colo-run", "prepare " + test::dataFile("corpus/declaration.txt") + " --out " + data());
    ASSERT_EQ(prepared.exitCode, 0) << prepared.err;
  }
  std::string data() { return m_dir.path("declaration.u16"); }
  // A plan made as a user makes one: colo-plan evaluate ... --out.
  std::string plan(const std::string& name, const std::string& model, const std::string& options) {
    const std::string file = m_dir.path(name + ".json");
    const std::string precision = options.find("--precision") == std::string::npos ? "--precision fp32 " : "";
    const std::string mbs = options.find("--mbs") == std::string::npos ? "--mbs 2 " : "";
    auto r = test::runProgram("colo-plan", "evaluate --model " + model + " --cluster localhost-cpu " + mbs + "--gbs 8 --seq-len 32 " +
                                           precision + options + " --out " + file);
    EXPECT_EQ(r.exitCode, 0) << r.err;
    return file;
  }
  Json train(const std::string& planFile, const std::string& extra = "", int expectExit = 0) {
    auto r = test::runProgram("colo-run", planFile + " --data " + data() + " --threads 1 --json " + extra);
    EXPECT_EQ(r.exitCode, expectExit) << r.err;
    if (r.exitCode != 0) return Json();
    return Json::parse(r.out);
  }
  static void expectSameLosses(const Json& a, const Json& b, double tolerance) {
    ASSERT_TRUE(a.contains("losses") && b.contains("losses"));
    const auto x = a["losses"].get<std::vector<double>>(), y = b["losses"].get<std::vector<double>>();
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_LE(std::fabs(x[i] - y[i]), tolerance * std::fabs(y[i])) << "step " << i << ": " << x[i] << " vs " << y[i];
    }
  }
  // The layout with and without recompute and ZeRO-1 equals the single process over 10 steps.
  void equalsOneProcess(const std::string& model, const std::string& layout, const std::string& variant) {
    const Json single = train(plan("single", model, "--gpus 1"), "--steps 10");
    const Json plain = train(plan("plain", model, layout), "--steps 10");
    const Json other = train(plan("variant", model, layout + " " + variant), "--steps 10");
    expectSameLosses(plain, single, 1e-5);
    expectSameLosses(other, single, 1e-5);
    const auto losses = single["losses"].get<std::vector<double>>();
    EXPECT_LT(losses.back(), losses.front() - 1.0);  // it learns
  }
  // `from` trains 4 steps with a checkpoint every 2; its step-2 checkpoint, resumed under the plan `to`
  // (another layout), gives steps 3 and 4 within 1e-5.
  void expectStepTwoCheckpointMovesInto(const std::string& from, const std::string& to) {
    const std::string ckpt = m_dir.path("moved-ckpt");
    std::filesystem::remove_all(ckpt);
    const Json straight = train(from, "--steps 4 --checkpoint-every 2 --checkpoint-dir " + ckpt);
    std::filesystem::remove_all(ckpt + "/step-00000004");
    {
      std::ofstream latest(ckpt + "/latest", std::ios::trunc);
      latest << "step-00000002\n";
    }
    const Json moved = train(to, "--steps 4 --resume --checkpoint-dir " + ckpt);
    const auto all = straight["losses"].get<std::vector<double>>(), tail = moved["losses"].get<std::vector<double>>();
    ASSERT_EQ(tail.size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) EXPECT_NEAR(tail[i], all[2 + i], 1e-5 * all[2 + i]);
  }
  // Rank `victim` of `planFile` killed at the start of step 5 of 6 ends the job; resuming from the step-3
  // checkpoint gives the last three losses of the run that was not killed, bit for bit; the same
  // checkpoint resumed under `otherPlan` (another layout) gives them within 1e-5.
  void expectKilledRankResumesAndReshards(const std::string& planFile, int victim, const std::string& otherPlan) {
    const Json straight = train(planFile, "--steps 6");
    const std::string ckpt = m_dir.path("killed-ckpt");
    std::filesystem::remove_all(ckpt);
    setenv("COLO_RUN_FAULT", (std::to_string(victim) + ":4").c_str(), 1);
    auto crashed = test::runProgram("colo-run", planFile + " --data " + data() + " --threads 1 --steps 6 --checkpoint-every 3 "
                                                "--checkpoint-dir " + ckpt + " --quiet");
    unsetenv("COLO_RUN_FAULT");
    EXPECT_NE(crashed.exitCode, 0);
    EXPECT_NE(crashed.err.find("rank " + std::to_string(victim) + " failed"), std::string::npos) << crashed.err;
    const std::string copy = m_dir.path("killed-ckpt-copy");
    std::filesystem::remove_all(copy);
    std::filesystem::copy(ckpt, copy, std::filesystem::copy_options::recursive);
    const auto all = straight["losses"].get<std::vector<double>>();
    ASSERT_EQ(all.size(), 6U);
    const auto resumed = train(planFile, "--steps 6 --resume --checkpoint-dir " + ckpt)["losses"].get<std::vector<double>>();
    ASSERT_EQ(resumed.size(), 3U);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed[i], all[3 + i]) << "step " << 4 + i;
    const auto moved = train(otherPlan, "--steps 6 --resume --checkpoint-dir " + copy)["losses"].get<std::vector<double>>();
    ASSERT_EQ(moved.size(), 3U);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(moved[i], all[3 + i], 1e-5 * all[3 + i]) << "step " << 4 + i << " resharded";
  }
  test::ScratchDir m_dir;
};

}  // namespace colo
