#include "colo/costmodel/run_calibration.h"

#include <gtest/gtest.h>

namespace colo::costmodel {
namespace {

RunObservation run(double compute, double other, double measured) {
  RunObservation o;
  o.id = "r";
  o.predictedComputeSeconds = compute;
  o.predictedOtherSeconds = other;
  o.measuredStepSeconds = measured;
  return o;
}

TEST(RunCalibration, RecoversTheComputeAndTheOtherScale) {
  // Runs whose compute takes 1.25x and whose communication takes 0.8x what colo predicts, in mixes that
  // differ: the fit finds both; with two runs it falls back to one common scale.
  std::vector<RunObservation> runs;
  for (const auto& [c, o] : {std::pair{1.0, 0.2}, {2.0, 1.5}, {0.5, 1.0}, {3.0, 0.1}}) runs.push_back(run(c, o, 1.25 * c + 0.8 * o));
  auto fit = fitRunCalibration(runs, "H100");
  ASSERT_TRUE(fit) << fit.error().toString();
  EXPECT_NEAR(fit->computeScale, 1.25, 1e-9);
  EXPECT_NEAR(fit->otherScale, 0.8, 1e-9);
  EXPECT_EQ(fit->runs, 4u);
  auto two = fitRunCalibration({runs[0], runs[1]}, "H100");
  ASSERT_TRUE(two);
  EXPECT_EQ(two->computeScale, two->otherScale);
  const auto cv = leaveOneOut(runs);
  ASSERT_EQ(cv.after.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_LT(cv.after[i], cv.before[i] + 1e-12);
  EXPECT_FALSE(fitRunCalibration({}, "H100"));
}

TEST(RunCalibration, ApplyKeepsTheBreakdownSummingToTheStep) {
  Evaluation ev;
  ev.time.compute = 2;
  ev.time.recompute = 1;
  ev.time.tpComm = 0.5;
  ev.time.bubble = 0.5;
  ev.stepSeconds = 4;
  ev.pipelineSeconds = 4;
  ev.tokensPerSecond = 1000;
  ev.mfu = 0.5;
  ev.gpuMemoryBytes = 100;
  StageReport st;
  st.memory.weights = 40;
  st.memory.activations = 40;
  ev.stages.push_back(st);
  ev.peakMemoryBytes = 80;
  RunCalibration c;
  c.computeScale = 2;
  c.otherScale = 0.5;
  c.memoryScale = 1.5;
  c.apply(ev);
  EXPECT_DOUBLE_EQ(ev.stepSeconds, 2 * 3 + 0.5 * 1);
  EXPECT_DOUBLE_EQ(ev.tokensPerSecond, 1000 * 4 / 6.5);
  EXPECT_DOUBLE_EQ(ev.mfu, 0.5 * 4 / 6.5);
  EXPECT_DOUBLE_EQ(ev.peakMemoryBytes, 120);
  EXPECT_FALSE(ev.fits);  // 120 of 100
}

TEST(RunCalibration, TheFileRoundTripsAndABadOneIsNamed) {
  RunCalibration c;
  c.gpu = "H100-SXM5-80GB";
  c.computeScale = 1.1;
  c.runs = 3;
  auto back = RunCalibration::fromJson(c.toJson(), "cal.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->gpu, c.gpu);
  EXPECT_EQ(back->computeScale, 1.1);
  Json bad = c.toJson();
  bad["other_scale"] = 40;
  auto e = RunCalibration::fromJson(bad, "cal.json");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().toString(), "cal.json: /other_scale: must be between 0.2 and 5, got 40.000000");
}

}  // namespace
}  // namespace colo::costmodel
