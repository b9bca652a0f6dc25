// colo-run as a user runs it: real ranks joined by c10d Gloo on this machine. With fp32 and a fixed
// seed, every parallel layout must train exactly like one process (within 1e-5 relative, LibTorch's
// reductions summing in another order), a killed rank must end the job, and resume is bit-identical.
#include <algorithm>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

#include <gtest/gtest.h>

#include "colo/core/json.h"
#include "core/test_support.h"
#include "executor/colo_run_fixture.h"

namespace colo {
namespace {

TEST_F(ColoRun, TensorAndDataParallelTrainLikeOneProcess) {
  equalsOneProcess("tiny-gpt", "--gpus 4 --tp 2 --dp 2", "--sp --zero 1 --recompute full");
}

TEST_F(ColoRun, PipelineAndDataParallelTrainLikeOneProcess) {
  equalsOneProcess("tiny-gpt", "--gpus 4 --pp 2 --dp 2", "--zero 1 --recompute selective");
}

TEST_F(ColoRun, TensorAndPipelineParallelTrainLikeOneProcessForLlama) {
  equalsOneProcess("tiny-llama", "--gpus 4 --tp 2 --pp 2", "--sp --recompute full");
}

TEST_F(ColoRun, InterleavedPipelineTrainsLikeOneProcess) {
  equalsOneProcess("tiny-gpt", "--gpus 4 --pp 2 --vpp 2 --dp 2", "--zero 1 --recompute full");
}

TEST_F(ColoRun, Bf16MixedPrecisionTracksFp32AndParallelTracksOneProcess) {
  const Json fp32 = train(plan("fp32", "tiny-gpt", "--gpus 1"), "--steps 8");
  const Json bf16 = train(plan("bf16", "tiny-gpt", "--gpus 1 --precision bf16"), "--steps 8");
  const Json parallel = train(plan("bf16-tp2pp2", "tiny-gpt", "--gpus 4 --tp 2 --pp 2 --sp --recompute full --precision bf16"),
                              "--steps 8");
  expectSameLosses(bf16, fp32, 1e-2);      // bf16 weights and activations, fp32 master weights and gradients
  expectSameLosses(parallel, bf16, 5e-3);  // bf16 rounds differently once the sums are split
  const auto a = fp32["losses"].get<std::vector<double>>(), b = bf16["losses"].get<std::vector<double>>();
  EXPECT_NE(a, b);  // it really computed in bf16
}

TEST_F(ColoRun, ResumeIsBitIdenticalAndReshardsAcrossPlans) {
  const std::string tp2dp2 = plan("tp2dp2", "tiny-gpt", "--gpus 4 --tp 2 --dp 2 --zero 1");
  const Json straight = train(tp2dp2, "--steps 6");
  // Killed at the start of step 5 (index 4): the checkpoint after step 3 survives.
  const std::string ckpt = m_dir.path("ckpt");
  setenv("COLO_RUN_FAULT", "1:4", 1);
  auto crashed = test::runProgram("colo-run", tp2dp2 + " --data " + data() + " --threads 1 --steps 6 --checkpoint-every 3 "
                                              "--checkpoint-dir " + ckpt + " --quiet");
  unsetenv("COLO_RUN_FAULT");
  EXPECT_NE(crashed.exitCode, 0);
  EXPECT_NE(crashed.err.find("rank 1 failed"), std::string::npos) << crashed.err;
  ASSERT_TRUE(std::filesystem::exists(ckpt + "/latest"));
  const std::string copy = m_dir.path("ckpt-copy");  // the resumed run checkpoints again at its end
  std::filesystem::copy(ckpt, copy, std::filesystem::copy_options::recursive);
  const Json resumed = train(tp2dp2, "--steps 6 --resume --checkpoint-dir " + ckpt);
  ASSERT_EQ(resumed["first_step"], 3);
  const auto all = straight["losses"].get<std::vector<double>>();
  const auto tail = resumed["losses"].get<std::vector<double>>();
  ASSERT_EQ(tail.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(tail[i], all[3 + i]) << "step " << 3 + i;  // bit-identical
  // The same checkpoint resumed under another plan of the model (re-sharded).
  const Json other = train(plan("pp2dp2", "tiny-gpt", "--gpus 4 --pp 2 --dp 2"), "--steps 6 --resume --checkpoint-dir " + copy);
  const auto moved = other["losses"].get<std::vector<double>>();
  ASSERT_EQ(moved.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(moved[i], all[3 + i], 1e-5 * all[3 + i]) << "step " << 3 + i;
}

TEST_F(ColoRun, AKilledRankEndsTheJobWithoutLeftovers) {
  const std::string file = plan("killed", "tiny-gpt", "--gpus 4 --tp 2 --dp 2");
  setenv("COLO_RUN_FAULT", "2:2", 1);
  const auto start = std::chrono::steady_clock::now();
  auto r = test::runProgram("colo-run", file + " --data " + data() + " --threads 1 --steps 200 --quiet");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  unsetenv("COLO_RUN_FAULT");
  EXPECT_NE(r.exitCode, 0);
  EXPECT_LT(seconds, 30.0);
  EXPECT_NE(r.err.find("rank 2 failed (killed by signal 9)"), std::string::npos) << r.err;
  // No process of this job is left (each rank's command line names the plan file).
  EXPECT_EQ(processesNaming(file), 0);
}

// A rank that crashes (a segmentation fault inside LibTorch, NCCL or CUDA) says so with its stack, and
// the launcher ends the job naming the rank and the signal.
TEST_F(ColoRun, ACrashedRankPrintsItsStackAndEndsTheJob) {
  const std::string file = plan("crashed", "tiny-gpt", "--gpus 2 --dp 2");
  setenv("COLO_RUN_FAULT", "1:1:11", 1);
  auto r = test::runProgram("colo-run", file + " --data " + data() + " --threads 1 --steps 50 --quiet");
  unsetenv("COLO_RUN_FAULT");
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.err.find("colo-run: rank 1: fatal signal 11 at address "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stack words that point into code"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("colo-run+0x"), std::string::npos) << r.err;  // module and offset, for addr2line
  EXPECT_NE(r.err.find("stack as unwound:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 failed (killed by signal 11)"), std::string::npos) << r.err;
  EXPECT_EQ(processesNaming(file), 0);
}

// --trace: rank 0's last two steps as a Chrome trace with colo's phases, where LibTorch has Kineto
// (PyTorch's LibTorch); without it (Debian's) one line says no trace was written and the run goes on.
TEST_F(ColoRun, TraceRecordsTheLastStepsPhasesOrSaysWhyNot) {
  const std::string file = plan("traced", "tiny-gpt", "--gpus 2 --dp 2");
  const std::string trace = m_dir.path("trace.json");
  auto r = test::runProgram("colo-run", file + " --data " + data() + " --threads 1 --steps 3 --quiet --json --trace " + trace);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["losses"].size(), 3u);
  if (!std::filesystem::exists(trace)) {
    EXPECT_NE(r.err.find("colo-run: --trace: no trace written: "), std::string::npos) << r.err;
    GTEST_SKIP() << "this LibTorch records no trace: " << r.err;
  }
  std::ifstream in(trace);
  const Json j = Json::parse(in);
  std::map<std::string, int> phases;
  for (const auto& e : j["traceEvents"]) {
    if (e.value("cat", "") == "user_annotation") ++phases[e.value("name", "")];
  }
  EXPECT_EQ(phases["colo:forward"], 2);  // two steps of one micro-batch each
  EXPECT_EQ(phases["colo:optimizer"], 2);
  EXPECT_GE(phases["colo:backward"], 2);
  EXPECT_EQ(phases["colo:reduce"], 2);
}

// The launcher's result files go in a directory of its own under TMPDIR, removed at the end (by nftw:
// PyTorch's libtorch.so interposes a std::filesystem::remove_all that crashed every launcher on a GPU).
TEST_F(ColoRun, TheLauncherRemovesItsTemporaryFiles) {
  const std::string tmp = m_dir.path("tmp");
  std::filesystem::create_directories(tmp);
  const std::string file = plan("tmp", "tiny-gpt", "--gpus 2 --dp 2");
  setenv("TMPDIR", tmp.c_str(), 1);
  auto r = test::runProgram("colo-run", file + " --data " + data() + " --threads 1 --steps 2 --quiet --json --compare " + file);
  unsetenv("TMPDIR");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(Json::parse(r.out).contains("baseline"));
  EXPECT_TRUE(std::filesystem::is_empty(tmp)) << std::filesystem::directory_iterator(tmp)->path();
}

TEST_F(ColoRun, RecordsRunsAndComparesWithABaseline) {
  const std::string runs = m_dir.path("runs.sqlite");
  const std::string a = plan("a", "tiny-gpt", "--gpus 2 --tp 2");
  const std::string b = plan("b", "tiny-gpt", "--gpus 2 --dp 2");
  auto r = test::runProgram("colo-run", a + " --data " + data() + " --threads 1 --steps 3 --quiet --runs-db " + runs + " --compare " + b);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("predicted step time"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("measured step time"), std::string::npos);
  auto listed = test::runProgram("colo-run", "runs --runs-db " + runs + " --json");
  ASSERT_EQ(listed.exitCode, 0) << listed.err;
  const Json j = Json::parse(listed.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["parallel"]["tp"], 2);
  EXPECT_EQ(j[1]["parallel"]["dp"], 2);
  EXPECT_EQ(j[0]["losses"].size(), 3u);
  EXPECT_GT(j[0]["predicted_step_time_s"].get<double>(), 0);
  // The recorded runs carry their plans: the cost model calibrates on this machine's own runs.
  const std::string calibration = m_dir.path("calibration.json");
  auto cal = test::runProgram("colo-profile", "calibrate --runs " + runs + " --out " + calibration);
  ASSERT_EQ(cal.exitCode, 0) << cal.err << cal.out;
  EXPECT_NE(cal.out.find("from 2 runs (2 with memory)"), std::string::npos) << cal.out;
  const Json fitted = test::loadJson(calibration);
  EXPECT_GT(fitted["compute_scale"].get<double>(), 0);
  auto calibrated = test::runProgram("colo-plan", "evaluate --plan " + a + " --calibration " + calibration + " --json");
  ASSERT_EQ(calibrated.exitCode, 0) << calibrated.err;
  // The Megatron-style baseline made by the planner's rules for the same model and cluster.
  auto megatron = test::runProgram("colo-run", a + " --data " + data() + " --threads 1 --steps 2 --quiet --json --compare megatron");
  ASSERT_EQ(megatron.exitCode, 0) << megatron.err;
  const Json both = Json::parse(megatron.out);
  EXPECT_EQ(both["baseline"]["plan"], "megatron-baseline");
  EXPECT_EQ(both["baseline"]["losses"].size(), 2u);
}

TEST_F(ColoRun, BadInputIsRefusedBeforeAnyRankStarts) {
  const std::string file = plan("four", "tiny-gpt", "--gpus 4 --tp 2 --dp 2");
  auto nproc = test::runProgram("colo-run", file + " --data " + data() + " --nproc-per-node 2");
  EXPECT_EQ(nproc.exitCode, 2);
  EXPECT_NE(nproc.err.find("torchrun"), std::string::npos) << nproc.err;
  auto offload = test::runProgram("colo-run", plan("offload", "tiny-gpt", "--gpus 2 --dp 2 --zero 1 --offload-optimizer 0.5 --optimizer lamb") +
                                                  " --data " + data());
  EXPECT_EQ(offload.exitCode, 2);
  EXPECT_NE(offload.err.find("offload with optimizer lamb"), std::string::npos) << offload.err;
  auto noData = test::runProgram("colo-run", file + " --data " + m_dir.path("none.u16"));
  EXPECT_EQ(noData.exitCode, 2);
  EXPECT_NE(noData.err.find("none.u16"), std::string::npos);
  // Token ids beyond the vocabulary: a uint16 file with id 65535.
  const std::string big = m_dir.write("big.u16", std::string("\xff\xff\x01\x00\x02\x00", 6));
  auto outside = test::runProgram("colo-run", plan("one", "tiny-gpt", "--gpus 1") + " --data " + big);
  EXPECT_EQ(outside.exitCode, 2);
  EXPECT_NE(outside.err.find("outside the model's vocabulary"), std::string::npos) << outside.err;
  auto garbage = test::runProgram("colo-run", m_dir.write("bad.json", "{\"format\": \"colo.plan/1\"") + " --data " + data());
  EXPECT_EQ(garbage.exitCode, 2);
  // --resume with no checkpoint written yet: one line naming the folder, not one per rank.
  auto resume = test::runProgram("colo-run", file + " --data " + data() + " --resume --checkpoint-dir " + m_dir.path("empty"));
  EXPECT_EQ(resume.exitCode, 2);
  EXPECT_NE(resume.err.find("no checkpoint to resume from"), std::string::npos) << resume.err;
  EXPECT_NE(resume.err.find(m_dir.path("empty")), std::string::npos) << resume.err;
  EXPECT_EQ(std::count(resume.err.begin(), resume.err.end(), '\n'), 1) << resume.err;
  auto noDb = test::runProgram("colo-run", file + " --data " + data() + " --costdb " + m_dir.path("none.sqlite"));
  EXPECT_EQ(noDb.exitCode, 2);
  EXPECT_NE(noDb.err.find("none.sqlite"), std::string::npos) << noDb.err;
  // A plan for 16 nodes of 8 GPUs started by hand: one line pointing to torchrun/SLURM, no rank started
  // (it once started all 128 ranks here and printed nothing).
  const std::string nodes = m_dir.path("nodes.json");
  auto made = test::runProgram("colo-plan", "evaluate --model tiny-gpt --cluster dgx-a100-80gb-x16 --dp 128 --mbs 1 --gbs 128 "
                                            "--seq-len 32 --precision fp32 --out " + nodes);
  ASSERT_EQ(made.exitCode, 0) << made.err;
  auto many = test::runProgram("colo-run", nodes + " --data " + data() + " --steps 1");
  EXPECT_EQ(many.exitCode, 2);
  EXPECT_NE(many.err.find("the plan spans 16 nodes of 8 GPUs (128 ranks)"), std::string::npos) << many.err;
  EXPECT_NE(many.err.find("--nproc-per-node 128"), std::string::npos) << many.err;
  EXPECT_EQ(std::count(many.err.begin(), many.err.end(), '\n'), 1) << many.err;
  // colo-run prepare on a folder: bad input naming it, not an internal error.
  auto folder = test::runProgram("colo-run", "prepare " + m_dir.path("") + " --out " + m_dir.path("x.u16"));
  EXPECT_EQ(folder.exitCode, 2) << folder.err;
  EXPECT_NE(folder.err.find("is a directory"), std::string::npos) << folder.err;
}

// The README's demo (tiny-gpt, global batch 8 x 128 tokens, 20 steps, default learning-rate schedule):
// every layout trains like this one process, and its loss falls step after step with no spike (with
// 2 warm-up steps it jumped from 5.09 to 10.69 at step 9, grad norm 64).
TEST_F(ColoRun, TheReadmeRunLearnsWithoutASpike) {
  const std::string file = m_dir.path("readme.json");
  auto made = test::runProgram("colo-plan", "evaluate --model tiny-gpt --cluster localhost-cpu --gpus 1 --mbs 8 --gbs 8 "
                                            "--seq-len 128 --precision fp32 --out " + file);
  ASSERT_EQ(made.exitCode, 0) << made.err;
  const Json j = train(file, "--steps 20 --quiet");
  const auto losses = j["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 20u);
  for (std::size_t i = 1; i < losses.size(); ++i) EXPECT_LE(losses[i], losses[i - 1] + 0.05) << "step " << i;
  EXPECT_LT(losses.back(), losses.front() - 3.0);
}

// Predicted against measured compares like with like: on CPU, what training added to the process
// against the model's tensors (not the whole resident set), and a line that says where the step went.
TEST_F(ColoRun, ReportComparesLikeWithLikeAndExplainsTheStep) {
  const std::string file = plan("report", "tiny-gpt", "--gpus 1");
  auto r = test::runProgram("colo-run", file + " --data " + data() + " --threads 1 --steps 4 --quiet");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resident before the model was built"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("in LibTorch calls"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the analytic model of cluster localhost-cpu"), std::string::npos) << r.out;
  const Json j = train(file, "--steps 4 --quiet");
  EXPECT_GT(j["tensor_memory_bytes"].get<double>(), 0);
  EXPECT_LT(j["tensor_memory_bytes"].get<double>(), j["peak_memory_bytes"].get<double>());
  EXPECT_GT(j["predicted_tensor_bytes"].get<double>(), 0);
  EXPECT_GT(j["predicted_compute_s"].get<double>(), 0);
}

}  // namespace
}  // namespace colo

namespace colo {
namespace {

// colo's fused kernels in the model (RMSNorm, SwiGLU, rotary and the vocabulary-parallel cross-entropy
// for Llama; LayerNorm for GPT) train as LibTorch's operators do. On the CPU the references run, through
// the same autograd wrappers that launch the CUDA kernels on a GPU.
TEST_F(ColoRun, FusedKernelsTrainLikeLibTorchsOperators) {
  const std::string single = plan("single", "tiny-llama", "--gpus 1");
  const Json plain = train(single, "--steps 6 --fused-kernels off");
  const Json fused = train(single, "--steps 6 --fused-kernels on");
  EXPECT_FALSE(plain["fused_kernels"].get<bool>());
  EXPECT_TRUE(fused["fused_kernels"].get<bool>());
  EXPECT_EQ(fused["fused_kernel_names"].get<std::vector<std::string>>(),
            (std::vector<std::string>{"rmsnorm", "swiglu", "rotary", "cross_entropy", "adamw", "grad_norm"}));
  EXPECT_TRUE(plain["fused_kernel_names"].empty());
  expectSameLosses(fused, plain, 1e-5);
  // Tensor parallelism: the cross-entropy's max and sums are all-reduced over the vocabulary shards.
  const Json tp2 = train(plan("tp2", "tiny-llama", "--gpus 2 --tp 2 --sp"), "--steps 6 --fused-kernels on");
  expectSameLosses(tp2, plain, 1e-5);
  const Json bf16 = train(plan("bf16", "tiny-llama", "--gpus 1 --precision bf16"), "--steps 6 --fused-kernels on");
  expectSameLosses(bf16, plain, 2e-2);
  const std::string gpt = plan("gpt", "tiny-gpt", "--gpus 1");
  const Json gptFused = train(gpt, "--steps 4 --fused-kernels on");
  EXPECT_EQ(gptFused["fused_kernel_names"].get<std::vector<std::string>>(), (std::vector<std::string>{"layernorm", "cross_entropy", "adamw", "grad_norm"}));
  expectSameLosses(gptFused, train(gpt, "--steps 4"), 1e-5);
  // Auto is LibTorch's operators on the CPU.
  EXPECT_FALSE(train(single, "--steps 1")["fused_kernels"].get<bool>());
  auto bad = test::runProgram("colo-run", single + " --data " + data() + " --fused-kernels maybe");
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--fused-kernels"), std::string::npos) << bad.err;
}

// NCCL needs a CUDA LibTorch and a GPU: without them one clear error, before any rank starts.
TEST_F(ColoRun, NcclWithoutACudaBuildOrDeviceIsOneClearError) {
  auto r = test::runProgram("colo-run", plan("single", "tiny-gpt", "--gpus 1") + " --data " + data() + " --backend nccl --steps 1");
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("--backend nccl"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace colo
