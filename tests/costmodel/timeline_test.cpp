#include "colo/costmodel/timeline.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <gtest/gtest.h>

namespace colo::costmodel {
namespace {

ScheduleInput uniform(Schedule s, std::int64_t pp, std::int64_t v, std::int64_t m, double f, double b) {
  ScheduleInput in;
  in.schedule = s;
  in.pp = pp;
  in.virtualStages = v;
  in.microBatches = m;
  in.forwardSeconds.assign(static_cast<std::size_t>(pp * v), f / static_cast<double>(v));
  in.backwardSeconds.assign(static_cast<std::size_t>(pp * v), b / static_cast<double>(v));
  return in;
}

TEST(Timeline, OneFOneBMatchesTheTextbookFormula) {
  const auto t = simulateSchedule(uniform(Schedule::kOneFOneB, 4, 1, 8, 1.0, 2.0));
  ASSERT_TRUE(t) << t.error().toString();
  EXPECT_DOUBLE_EQ(t->makespanSeconds, (8 + 4 - 1) * 3.0);
  EXPECT_NEAR(t->bubbleFraction, 3.0 / 11.0, 1e-12);
  EXPECT_EQ(t->events.size(), 4u * 8 * 2);
  const auto g = simulateSchedule(uniform(Schedule::kGpipe, 4, 1, 8, 1.0, 2.0));
  ASSERT_TRUE(g);
  EXPECT_DOUBLE_EQ(g->makespanSeconds, t->makespanSeconds);
}

TEST(Timeline, InterleavingDividesTheBubbleByTheVirtualStages) {
  const auto t = simulateSchedule(uniform(Schedule::kInterleaved, 4, 2, 8, 1.0, 2.0));
  ASSERT_TRUE(t) << t.error().toString();
  EXPECT_NEAR(t->makespanSeconds, 8 * 3.0 + 3 * 3.0 / 2, 1e-9);
}

TEST(Timeline, EveryTaskRunsAfterItsInputsAndStagesNeverOverlap) {
  for (const auto schedule : {Schedule::kGpipe, Schedule::kOneFOneB, Schedule::kInterleaved, Schedule::kZeroBubble}) {
    auto in = uniform(schedule, 4, schedule == Schedule::kInterleaved ? 2 : 1, 8, 1.0, 2.0);
    in.p2pSeconds = 0.1;
    const auto t = simulateSchedule(in);
    ASSERT_TRUE(t) << toString(schedule);
    std::map<std::tuple<std::int64_t, std::int64_t, int>, double> end;
    for (const auto& e : t->events) end[{e.chunk, e.microBatch, static_cast<int>(e.kind)}] = e.endSeconds;
    for (const auto& e : t->events) {
      if (e.kind == TaskKind::kForward && e.chunk > 0) {
        EXPECT_GE(e.startSeconds + 1e-12, end.at({e.chunk - 1, e.microBatch, 0}) + 0.1);
      }
      if ((e.kind == TaskKind::kBackward || e.kind == TaskKind::kBackwardInput) && e.chunk < in.pp * in.virtualStages - 1) {
        EXPECT_GE(e.startSeconds + 1e-12, end.at({e.chunk + 1, e.microBatch, static_cast<int>(e.kind)}) + 0.1);
      }
    }
    std::vector<std::vector<std::pair<double, double>>> byStage(4);
    for (const auto& e : t->events) byStage[static_cast<std::size_t>(e.stage)].push_back({e.startSeconds, e.endSeconds});
    for (auto& spans : byStage) {
      std::sort(spans.begin(), spans.end());
      for (std::size_t i = 1; i < spans.size(); ++i) EXPECT_GE(spans[i].first + 1e-12, spans[i - 1].second);
    }
  }
}

TEST(Timeline, ZeroBubbleFillsTheCoolDown) {
  auto in = uniform(Schedule::kZeroBubble, 8, 1, 32, 1.0, 2.0);
  const auto zb = simulateSchedule(in);
  const auto ofob = simulateSchedule(uniform(Schedule::kOneFOneB, 8, 1, 32, 1.0, 2.0));
  ASSERT_TRUE(zb);
  ASSERT_TRUE(ofob);
  EXPECT_LT(zb->makespanSeconds, ofob->makespanSeconds);
  EXPECT_LT(zb->bubbleFraction, ofob->bubbleFraction);
}

TEST(Timeline, RejectsInconsistentInput) {
  auto in = uniform(Schedule::kInterleaved, 4, 2, 6, 1.0, 2.0);  // 6 micro-batches, pp 4
  EXPECT_FALSE(simulateSchedule(in));
  in = uniform(Schedule::kOneFOneB, 4, 1, 8, 1.0, 2.0);
  in.forwardSeconds.pop_back();
  EXPECT_FALSE(simulateSchedule(in));
}

TEST(Timeline, AsciiChartHasOneRowPerStage) {
  const auto t = simulateSchedule(uniform(Schedule::kOneFOneB, 4, 1, 8, 1.0, 2.0));
  ASSERT_TRUE(t);
  const std::string chart = t->renderAscii(60);
  EXPECT_EQ(std::count(chart.begin(), chart.end(), '\n'), 4);
  EXPECT_NE(chart.find("stage 3"), std::string::npos);
  EXPECT_EQ(chart.find("stage 0  |F"), 0u + 2);  // stage 0 starts at once
}

}  // namespace
}  // namespace colo::costmodel
