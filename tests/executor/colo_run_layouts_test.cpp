// The layouts and optimizers colo-run gained for the plans colo recommends: ZeRO-2 and ZeRO-3 (alone, with
// tensor and sequence parallelism, with pipelines), LAMB and LARS, and the best plan of searches with no
// --fix. Each must train like one process (fp32, fixed seed, 1e-5 relative), resume across plans, and
// ZeRO-3 must hold a fraction of ZeRO-0's model states.
#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "executor/colo_run_fixture.h"

namespace colo {
namespace {

TEST_F(ColoRun, ZeroTwoAndThreeTrainLikeOneProcess) {
  const Json single = train(plan("single", "tiny-gpt", "--gpus 1"), "--steps 10");
  for (const std::string layout : {"--gpus 4 --dp 4 --zero 2", "--gpus 4 --dp 4 --zero 3", "--gpus 4 --dp 4 --zero 3 --recompute full"}) {
    SCOPED_TRACE(layout);
    expectSameLosses(train(plan("zero", "tiny-gpt", layout), "--steps 10"), single, 1e-5);
  }
  const auto losses = single["losses"].get<std::vector<double>>();
  EXPECT_LT(losses.back(), losses.front() - 1.0);
}

TEST_F(ColoRun, ZeroThreeComposesWithTensorAndPipelineParallelism) {
  const Json single = train(plan("single", "tiny-llama", "--gpus 1"), "--steps 10");
  // tp2 x dp2 with sequence parallelism; pp2 x dp2 keeps each stage's weights gathered across its
  // micro-batches (no reshard, as torchtitan composes FSDP2 with pipelining); interleaved with ZeRO-2.
  for (const std::string layout : {"--gpus 4 --tp 2 --dp 2 --sp --zero 3 --recompute selective",
                                   "--gpus 4 --pp 2 --dp 2 --zero 3 --recompute full", "--gpus 4 --pp 2 --vpp 2 --dp 2 --zero 2"}) {
    SCOPED_TRACE(layout);
    expectSameLosses(train(plan("zero", "tiny-llama", layout), "--steps 10"), single, 1e-5);
  }
}

TEST_F(ColoRun, AChunkHoldingOnlyTheEmbeddingOrTheLossTrainsLikeOneProcess) {
  // Megatron's --account-for-embedding/loss-in-pipeline-split can leave the first chunk the embedding
  // alone and the last the loss alone: such a plan runs, one stage passing activations it did not change.
  const Json single = train(plan("single", "tiny-llama", "--gpus 1"), "--steps 5");
  for (const std::string layout : {"--gpus 2 --pp 2 --stages 0,4", "--gpus 2 --pp 2 --vpp 2 --stages 0,2,2,0"}) {
    SCOPED_TRACE(layout);
    expectSameLosses(train(plan("edges", "tiny-llama", layout), "--steps 5"), single, 1e-5);
  }
}

TEST_F(ColoRun, ZeroThreeHoldsAFractionOfTheModelStatesAndSaysSo) {
  const Json zero0 = train(plan("z0", "tiny-llama", "--gpus 4 --dp 4 --zero 0"), "--steps 2");
  const Json zero3 = train(plan("z3", "tiny-llama", "--gpus 4 --dp 4 --zero 3"), "--steps 2");
  const double a = zero0["model_state_bytes"].get<double>(), b = zero3["model_state_bytes"].get<double>();
  // fp32: ZeRO-0 holds 16 bytes a parameter; ZeRO-3 a quarter of that, plus the units gathered at once.
  EXPECT_GT(a, 0);
  EXPECT_LE(b, 0.4 * a) << "ZeRO-3 " << b << " bytes, ZeRO-0 " << a;
  EXPECT_GT(b, 0.25 * a);  // the shards alone are a quarter: gathered units come on top
  EXPECT_GT(zero3["predicted_model_state_bytes"].get<double>(), 0);
  // The run's table puts it beside the prediction.
  auto r = test::runProgram("colo-run", m_dir.path("z3.json") + " --data " + data() + " --threads 1 --steps 2 --quiet");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("model states"), std::string::npos) << r.out;
}

// Prefetch and overlap change when collectives finish, never a number: the losses equal those of the
// run where each collective finishes where it starts. The prefetched unit shows in the memory held.
TEST_F(ColoRun, ZeroPrefetchAndOverlapChangeNoNumber) {
  const std::string zero0 = plan("z0", "tiny-llama", "--gpus 4 --dp 4 --zero 0");
  for (const std::string layout : {"--gpus 4 --dp 4 --zero 3", "--gpus 4 --dp 4 --zero 3 --recompute full", "--gpus 4 --tp 2 --dp 2 --zero 2"}) {
    SCOPED_TRACE(layout);
    const std::string file = plan("ov", "tiny-llama", layout);
    const Json overlapped = train(file, "--steps 3"), serial = train(file, "--steps 3 --no-overlap");
    ASSERT_EQ(overlapped["losses"].size(), 3U);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(overlapped["losses"][i].get<double>(), serial["losses"][i].get<double>()) << "step " << i + 1;
    EXPECT_GT(overlapped["zero_comm_wait_s"].get<double>(), 0);
    if (layout.find("zero 3") == std::string::npos) continue;
    // From the second step the next unit is gathered while this one computes: one more unit held.
    const double a = train(zero0, "--steps 2")["model_state_bytes"].get<double>();
    EXPECT_GT(overlapped["model_state_bytes"].get<double>(), serial["model_state_bytes"].get<double>());
    EXPECT_LE(overlapped["model_state_bytes"].get<double>(), 0.4 * a);
  }
}

TEST_F(ColoRun, LambAndLarsTrainLikeTheirOneProcessRuns) {
  for (const std::string optimizer : {"lamb", "lars"}) {
    SCOPED_TRACE(optimizer);
    const Json single = train(plan("single-" + optimizer, "tiny-gpt", "--gpus 1 --optimizer " + optimizer), "--steps 10");
    // Trust ratios take norms over whole parameters: split by tp, sharded by ZeRO, on two stages.
    for (const std::string layout : {"--gpus 4 --tp 2 --dp 2 --sp --zero 1", "--gpus 4 --dp 4 --zero 3", "--gpus 4 --tp 2 --pp 2"}) {
      SCOPED_TRACE(layout);
      expectSameLosses(train(plan("opt", "tiny-gpt", layout + " --optimizer " + optimizer), "--steps 10"), single, 1e-5);
    }
    const Json adamw = train(plan("adamw", "tiny-gpt", "--gpus 1"), "--steps 10");
    EXPECT_NE(single["losses"], adamw["losses"]);  // it really ran another optimizer
    const auto losses = single["losses"].get<std::vector<double>>();
    EXPECT_LT(losses.back(), losses.front());  // and it learns
  }
}

TEST_F(ColoRun, ZeroThreeCheckpointsResumeExactlyAndReshardIntoOtherPlans) {
  const std::string zero3 = plan("z3", "tiny-gpt", "--gpus 4 --dp 4 --zero 3");
  const Json straight = train(zero3, "--steps 6");
  const std::string ckpt = m_dir.path("ckpt");
  setenv("COLO_RUN_FAULT", "3:4", 1);  // rank 3 killed at the start of step 5: the step-3 checkpoint survives
  auto crashed = test::runProgram("colo-run", zero3 + " --data " + data() + " --threads 1 --steps 6 --checkpoint-every 3 "
                                              "--checkpoint-dir " + ckpt + " --quiet");
  unsetenv("COLO_RUN_FAULT");
  EXPECT_NE(crashed.exitCode, 0);
  EXPECT_NE(crashed.err.find("rank 3 failed"), std::string::npos) << crashed.err;
  const std::string copy = m_dir.path("ckpt-copy");
  std::filesystem::copy(ckpt, copy, std::filesystem::copy_options::recursive);
  const Json resumed = train(zero3, "--steps 6 --resume --checkpoint-dir " + ckpt);
  const auto all = straight["losses"].get<std::vector<double>>();
  const auto tail = resumed["losses"].get<std::vector<double>>();
  ASSERT_EQ(tail.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(tail[i], all[3 + i]) << "step " << 3 + i;  // bit-identical
  // A ZeRO-3 checkpoint resumed under tp2 x dp2 with ZeRO-2, and that one's under ZeRO-0 on one stage pair.
  const Json moved = train(plan("tp2dp2", "tiny-gpt", "--gpus 4 --tp 2 --dp 2 --zero 2"), "--steps 6 --resume --checkpoint-dir " + copy);
  const auto next = moved["losses"].get<std::vector<double>>();
  ASSERT_EQ(next.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(next[i], all[3 + i], 1e-5 * all[3 + i]) << "step " << 3 + i;
}

TEST_F(ColoRun, ContextParallelRingTrainsLikeOneProcess) {
  // Ring attention over the cp group with Megatron's load-balanced split (two chunks per rank), with
  // tp and sequence parallelism (rotary and learned positions), ZeRO-3 over dp x cp, four ranks in the ring.
  for (const std::string model : {"tiny-llama", "tiny-gpt"}) {
    const Json single = train(plan("single", model, "--gpus 1"), "--steps 10");
    std::vector<std::string> layouts{"--gpus 4 --tp 2 --cp 2 --sp"};
    if (model == "tiny-llama") {
      layouts.insert(layouts.end(), {"--gpus 2 --cp 2", "--gpus 4 --cp 2 --dp 2 --zero 3", "--gpus 4 --cp 4 --recompute full"});
    }
    for (const std::string& layout : layouts) {
      SCOPED_TRACE(model + " " + layout);
      expectSameLosses(train(plan("cp", model, layout), "--steps 10"), single, 1e-5);
    }
  }
  // A cp checkpoint resumes under a plan without cp.
  expectStepTwoCheckpointMovesInto(plan("tp2cp2", "tiny-llama", "--gpus 4 --tp 2 --cp 2 --sp"), plan("dp2", "tiny-llama", "--gpus 2 --dp 2"));
}

// Every parameter of the checkpoint's model moved: its Adam first moment is not all zero (a parameter
// no optimizer state holds would train in no layout, and equal curves would not show it).
void expectEveryParameterTrained(const std::string& checkpointStep, std::size_t parameters) {
  std::size_t seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(checkpointStep)) {
    if (entry.path().extension() != ".json") continue;
    const Json manifest = test::loadJson(entry.path().string());
    std::ifstream blob(entry.path().parent_path() / (entry.path().stem().string() + ".bin"), std::ios::binary);
    for (const auto& p : manifest["params"]) {
      const auto numel = p["numel"].get<std::int64_t>();
      std::vector<float> moment(static_cast<std::size_t>(numel));
      blob.seekg((p["offset"].get<std::int64_t>() + numel) * 4);
      blob.read(reinterpret_cast<char*>(moment.data()), numel * 4);
      EXPECT_TRUE(std::any_of(moment.begin(), moment.end(), [](float x) { return x != 0.0f; })) << p["name"];
      ++seen;
    }
  }
  EXPECT_EQ(seen, parameters);
}

TEST_F(ColoRun, MixtureOfExpertsWithExpertParallelismTrainsLikeOneProcess) {
  // tiny-moe: four experts, top-2, a shared expert. Expert parallelism sends each token to the rank
  // holding its experts by all-to-all and back; composed with ZeRO-2/3, tp with sequence parallelism,
  // a pipeline with recompute.
  const std::string ckpt = m_dir.path("single-ckpt");
  const Json single = train(plan("single", "tiny-moe", "--gpus 1"), "--steps 10 --checkpoint-dir " + ckpt);
  for (const std::string layout : {"--gpus 2 --dp 2 --ep 2", "--gpus 4 --dp 4 --ep 2 --zero 3", "--gpus 4 --dp 4 --ep 4 --zero 2",
                                   "--gpus 4 --tp 2 --dp 2 --ep 2 --sp --zero 1", "--gpus 4 --pp 2 --dp 2 --ep 2 --recompute full"}) {
    SCOPED_TRACE(layout);
    expectSameLosses(train(plan("ep", "tiny-moe", layout), "--steps 10"), single, 1e-5);
  }
  const auto losses = single["losses"].get<std::vector<double>>();
  EXPECT_LT(losses.back(), losses.front() - 1.0);
  // 4 layers x (2 norms, q k v o, router, shared gate/up/down, 4 experts x gate/up/down) + embedding, final norm, head.
  expectEveryParameterTrained(ckpt + "/step-00000010", 4 * (2 + 4 + 1 + 3 + 12) + 3);
  // An expert-parallel checkpoint resumes on one rank (each expert read from the rank that held it).
  expectStepTwoCheckpointMovesInto(plan("ep2", "tiny-moe", "--gpus 2 --dp 2 --ep 2 --zero 1"), plan("one", "tiny-moe", "--gpus 1"));
}

TEST_F(ColoRun, OptimizerOffloadTrainsLikeOneProcessAndReportsHostMemory) {
  // ZeRO-Offload: a share of each rank's optimizer shard (fp32 master and moments) in host memory,
  // stepped there; gradients out and weights back every step.
  const Json single = train(plan("single", "tiny-gpt", "--gpus 1"), "--steps 10");
  const Json zero1 = train(plan("z1", "tiny-gpt", "--gpus 2 --dp 2 --zero 1"), "--steps 2");
  for (const std::string layout : {"--gpus 2 --dp 2 --zero 1 --offload-optimizer 0.5", "--gpus 4 --dp 4 --zero 2 --offload-optimizer 1",
                                   "--gpus 4 --tp 2 --dp 2 --sp --zero 3 --offload-optimizer 0.3"}) {
    SCOPED_TRACE(layout);
    const Json offloaded = train(plan("offload", "tiny-gpt", layout), "--steps 10");
    expectSameLosses(offloaded, single, 1e-5);
    EXPECT_GT(offloaded["host_memory_bytes"].get<double>(), 0);
    EXPECT_GT(offloaded["predicted_host_memory_bytes"].get<double>(), 0);
    EXPECT_GT(offloaded["offload_copy_s"].get<double>(), 0);
  }
  // Half of ZeRO-1's 16 B a parameter (fp32 master copy and two moments: 12 B on the host) leaves the device.
  const Json half = train(plan("half", "tiny-gpt", "--gpus 2 --dp 2 --zero 1 --offload-optimizer 0.5"), "--steps 2");
  EXPECT_NEAR(half["host_memory_bytes"].get<double>(), half["predicted_host_memory_bytes"].get<double>(),
              0.01 * half["predicted_host_memory_bytes"].get<double>());
  EXPECT_LT(half["model_state_bytes"].get<double>(), zero1["model_state_bytes"].get<double>());
  auto shown = test::runProgram("colo-run", m_dir.path("half.json") + " --data " + data() + " --threads 1 --steps 2 --quiet");
  EXPECT_NE(shown.out.find("host memory"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("offload copy"), std::string::npos) << shown.out;
}

TEST_F(ColoRun, ZeroBubbleTrainsLikeOneProcess) {
  // ZB-H1: each backward split into the input gradient (sent upstream at once) and the weight gradient
  // (run later, where the schedule has a bubble), in the simulator's order. Under ZeRO-2/3 a unit's
  // gradients wait for its deferred weight gradients before they are reduce-scattered.
  const Json single = train(plan("single", "tiny-gpt", "--gpus 1"), "--steps 10");
  for (const std::string layout : {"--gpus 2 --pp 2 --schedule zb", "--gpus 4 --pp 4 --schedule zb",
                                   "--gpus 4 --pp 2 --dp 2 --zero 1 --schedule zb --recompute full",
                                   "--gpus 4 --pp 2 --dp 2 --zero 2 --schedule zb", "--gpus 4 --pp 2 --dp 2 --zero 3 --schedule zb --recompute full"}) {
    SCOPED_TRACE(layout);
    expectSameLosses(train(plan("zb", "tiny-gpt", layout), "--steps 10"), single, 1e-5);
  }
}

// A killed rank ends the job in every new layout; its last checkpoint resumes it exactly and moves into
// another layout: ring attention, experts over an all-to-all, the zero-bubble schedule, offloaded states.
TEST_F(ColoRun, NewLayoutsSurviveAKilledRankAndReshardTheirCheckpoints) {
  struct Case {
    std::string model, layout;
    int victim;
    std::string other;
  };
  for (const Case& c : std::vector<Case>{{"tiny-llama", "--gpus 4 --tp 2 --cp 2", 3, "--gpus 2 --dp 2 --zero 1"},
                                         {"tiny-moe", "--gpus 4 --dp 4 --ep 2 --zero 2", 2, "--gpus 2 --dp 2"},
                                         {"tiny-gpt", "--gpus 4 --pp 2 --dp 2 --schedule zb", 1, "--gpus 2 --pp 2"},
                                         {"tiny-gpt", "--gpus 2 --dp 2 --zero 1 --offload-optimizer 0.5", 1, "--gpus 2 --dp 2 --zero 3"}}) {
    SCOPED_TRACE(c.layout);
    expectKilledRankResumesAndReshards(plan("killed", c.model, c.layout), c.victim, plan("other", c.model, c.other));
  }
}

TEST_F(ColoRun, TheBestPlanOfSearchesWithoutFixRunsAndTrainsLikeOneProcess) {
  struct Case {
    std::string model;
    int gpus;
  };
  for (const Case& c : {Case{"tiny-gpt", 2}, Case{"tiny-gpt", 4}, Case{"tiny-llama", 2}, Case{"tiny-llama", 4}, Case{"tiny-moe", 4}}) {
    SCOPED_TRACE(c.model + " on " + std::to_string(c.gpus));
    const std::string file = m_dir.path("best-" + c.model + std::to_string(c.gpus) + ".json");
    auto searched = test::runProgram("colo-plan", "search --model " + c.model + " --cluster localhost-cpu --gpus " + std::to_string(c.gpus) +
                                                      " --gbs 8 --seq-len 32 --precision fp32 --quiet --out " + file);
    ASSERT_EQ(searched.exitCode, 0) << searched.err;
    // One process with the plan's micro-batch size (a MoE layer's load-balancing loss is per micro-batch).
    // Ten steps: later (seen at step 18), a MoE top-k choice between two experts with nearly equal router
    // scores can flip on a last-bit difference of the summation order, and the curves part.
    const auto mbs = test::loadJson(file)["batch"]["micro_batch_size"].get<std::int64_t>();
    const std::string steps = "--steps 10";
    const Json single = train(plan("single", c.model, "--gpus 1 --mbs " + std::to_string(mbs)), steps);
    // The searched layouts split the GEMMs over tp and sum over dp, so fp32 rounding drifts from one
    // process's: tiny-gpt on 4 (tp 2, dp 2, ZeRO-2) reached 1.4e-5 at step 19 of 20 with Debian's OpenBLAS
    // 0.3.21 (pthread). A wrong reduction or gradient is off by 1e-3 or more within a few steps.
    expectSameLosses(train(file, steps), single, 5e-5);
  }
}

TEST_F(ColoRun, SearchRanksOnlyRunnablePlansForColoRunAndSaysWhatItCannotRun) {
  // --runnable on a model colo-run cannot train names the reason; --any plans it for other tools.
  auto latent = test::runProgram("colo-plan", "search --model deepseek-v3 --cluster dgx-h100-x64 --gbs 512 --quiet --runnable");
  EXPECT_EQ(latent.exitCode, 2);
  EXPECT_NE(latent.err.find("multi-head latent attention"), std::string::npos) << latent.err;
  // With --out and a model colo-run trains, the saved plan is one it runs: zero-bubble with ZeRO-2 on two
  // data-parallel ranks is (a unit's gradients wait for its deferred weight gradients), and trains.
  const std::string file = m_dir.path("zb.json");
  const std::string held = "search --model tiny-gpt --cluster localhost-cpu --gpus 4 --gbs 8 --seq-len 32 --precision fp32 "
                           "--fix pp=2,zero=2,dp=2 --zero-bubble --quiet --out " + file;
  ASSERT_EQ(test::runProgram("colo-plan", held).exitCode, 0);
  const Json saved = test::loadJson(file);
  EXPECT_EQ(saved["schedule"], "zb");
  EXPECT_EQ(saved["zero_stage"], 2);
  const auto mbs = saved["batch"]["micro_batch_size"].get<std::int64_t>();
  expectSameLosses(train(file, "--steps 10"), train(plan("single", "tiny-gpt", "--gpus 1 --mbs " + std::to_string(mbs)), "--steps 10"), 1e-5);
}

}  // namespace
}  // namespace colo
