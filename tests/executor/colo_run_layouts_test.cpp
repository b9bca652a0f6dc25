// The layouts and optimizers colo-run gained for the plans colo recommends: ZeRO-2 and ZeRO-3 (alone, with
// tensor and sequence parallelism, with pipelines), LAMB and LARS, and the best plan of searches with no
// --fix. Each must train like one process (fp32, fixed seed, 1e-5 relative), resume across plans, and
// ZeRO-3 must hold a fraction of ZeRO-0's model states.
#include <cstdlib>

#include "executor/colo_run_fixture.h"

namespace colo {
namespace {

TEST_F(ColoRun, ZeroTwoAndThreeTrainLikeOneProcess) {
  const Json single = train(plan("single", "tiny-gpt", "--gpus 1"), "--steps 20");
  for (const std::string layout : {"--gpus 4 --dp 4 --zero 2", "--gpus 4 --dp 4 --zero 3", "--gpus 4 --dp 4 --zero 3 --recompute full"}) {
    SCOPED_TRACE(layout);
    expectSameLosses(train(plan("zero", "tiny-gpt", layout), "--steps 20"), single, 1e-5);
  }
  const auto losses = single["losses"].get<std::vector<double>>();
  EXPECT_LT(losses.back(), losses.front() - 1.0);
}

TEST_F(ColoRun, ZeroThreeComposesWithTensorAndPipelineParallelism) {
  const Json single = train(plan("single", "tiny-llama", "--gpus 1"), "--steps 20");
  // tp2 x dp2 with sequence parallelism; pp2 x dp2 keeps each stage's weights gathered across its
  // micro-batches (no reshard, as torchtitan composes FSDP2 with pipelining); interleaved with ZeRO-2.
  for (const std::string layout : {"--gpus 4 --tp 2 --dp 2 --sp --zero 3 --recompute selective",
                                   "--gpus 4 --pp 2 --dp 2 --zero 3 --recompute full", "--gpus 4 --pp 2 --vpp 2 --dp 2 --zero 2"}) {
    SCOPED_TRACE(layout);
    expectSameLosses(train(plan("zero", "tiny-llama", layout), "--steps 20"), single, 1e-5);
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

TEST_F(ColoRun, LambAndLarsTrainLikeTheirOneProcessRuns) {
  for (const std::string optimizer : {"lamb", "lars"}) {
    SCOPED_TRACE(optimizer);
    const Json single = train(plan("single-" + optimizer, "tiny-gpt", "--gpus 1 --optimizer " + optimizer), "--steps 20");
    // Trust ratios take norms over whole parameters: split by tp, sharded by ZeRO, on two stages.
    for (const std::string layout : {"--gpus 4 --tp 2 --dp 2 --sp --zero 1", "--gpus 4 --dp 4 --zero 3", "--gpus 4 --tp 2 --pp 2"}) {
      SCOPED_TRACE(layout);
      expectSameLosses(train(plan("opt", "tiny-gpt", layout + " --optimizer " + optimizer), "--steps 20"), single, 1e-5);
    }
    const Json adamw = train(plan("adamw", "tiny-gpt", "--gpus 1"), "--steps 20");
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
    const Json single = train(plan("single", model, "--gpus 1"), "--steps 20");
    std::vector<std::string> layouts{"--gpus 4 --tp 2 --cp 2 --sp"};
    if (model == "tiny-llama") {
      layouts.insert(layouts.end(), {"--gpus 2 --cp 2", "--gpus 4 --cp 2 --dp 2 --zero 3", "--gpus 4 --cp 4 --recompute full"});
    }
    for (const std::string& layout : layouts) {
      SCOPED_TRACE(model + " " + layout);
      expectSameLosses(train(plan("cp", model, layout), "--steps 20"), single, 1e-5);
    }
  }
  // A cp checkpoint resumes under a plan without cp.
  const std::string ckpt = m_dir.path("ckpt");
  const Json straight = train(plan("tp2cp2", "tiny-llama", "--gpus 4 --tp 2 --cp 2 --sp"), "--steps 4 --checkpoint-every 2 --checkpoint-dir " + ckpt);
  std::filesystem::remove_all(ckpt + "/step-00000004");
  {
    std::ofstream latest(ckpt + "/latest", std::ios::trunc);
    latest << "step-00000002\n";
  }
  const Json moved = train(plan("dp2", "tiny-llama", "--gpus 2 --dp 2"), "--steps 4 --resume --checkpoint-dir " + ckpt);
  const auto all = straight["losses"].get<std::vector<double>>(), tail = moved["losses"].get<std::vector<double>>();
  ASSERT_EQ(tail.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_NEAR(tail[i], all[2 + i], 1e-5 * all[2 + i]);
}

TEST_F(ColoRun, ZeroBubbleTrainsLikeOneProcess) {
  // ZB-H1: each backward split into the input gradient (sent upstream at once) and the weight gradient
  // (run later, where the schedule has a bubble), in the simulator's order.
  const Json single = train(plan("single", "tiny-gpt", "--gpus 1"), "--steps 20");
  for (const std::string layout : {"--gpus 2 --pp 2 --schedule zb", "--gpus 4 --pp 4 --schedule zb",
                                   "--gpus 4 --pp 2 --dp 2 --zero 1 --schedule zb --recompute full"}) {
    SCOPED_TRACE(layout);
    expectSameLosses(train(plan("zb", "tiny-gpt", layout), "--steps 20"), single, 1e-5);
  }
}

TEST_F(ColoRun, TheBestPlanOfSearchesWithoutFixRunsAndTrainsLikeOneProcess) {
  struct Case {
    std::string model;
    int gpus;
  };
  for (const Case& c : {Case{"tiny-gpt", 2}, Case{"tiny-gpt", 4}, Case{"tiny-llama", 2}, Case{"tiny-llama", 4}}) {
    SCOPED_TRACE(c.model + " on " + std::to_string(c.gpus));
    const std::string file = m_dir.path("best-" + c.model + std::to_string(c.gpus) + ".json");
    auto searched = test::runProgram("colo-plan", "search --model " + c.model + " --cluster localhost-cpu --gpus " + std::to_string(c.gpus) +
                                                      " --gbs 8 --seq-len 32 --precision fp32 --quiet --out " + file);
    ASSERT_EQ(searched.exitCode, 0) << searched.err;
    const Json single = train(plan("single", c.model, "--gpus 1"), "--steps 20");
    expectSameLosses(train(file, "--steps 20"), single, 1e-5);
  }
}

TEST_F(ColoRun, SearchRanksOnlyRunnablePlansForColoRunAndSaysWhatItCannotRun) {
  // --runnable on a model colo-run cannot train names the reason; --any plans it for other tools.
  auto moe = test::runProgram("colo-plan", "search --model mixtral-8x7b --cluster dgx-h100-x64 --gbs 512 --quiet --runnable");
  EXPECT_EQ(moe.exitCode, 2);
  EXPECT_NE(moe.err.find("mixture-of-experts"), std::string::npos) << moe.err;
  // With --out and a model colo-run trains, the saved plan is one it runs: zero-bubble with ZeRO-2 on
  // two data-parallel ranks is not (--any ranks it first here).
  const std::string file = m_dir.path("zb.json");
  const std::string held = "search --model tiny-gpt --cluster localhost-cpu --gpus 4 --gbs 8 --seq-len 32 --precision fp32 "
                           "--fix pp=2,zero=2,dp=2 --zero-bubble --quiet --out " + file;
  ASSERT_EQ(test::runProgram("colo-plan", held).exitCode, 0);
  EXPECT_NE(test::loadJson(file)["schedule"], "zb");
  ASSERT_EQ(test::runProgram("colo-plan", held + " --any").exitCode, 0);
  EXPECT_EQ(test::loadJson(file)["schedule"], "zb");
}

}  // namespace
}  // namespace colo
