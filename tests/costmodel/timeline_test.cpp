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
  const std::string chart = t->renderAscii(80);
  EXPECT_EQ(std::count(chart.begin(), chart.end(), '\n'), 5);  // four stages and the scale line
  EXPECT_NE(chart.find("stage 3"), std::string::npos);
  EXPECT_EQ(chart.find("stage 0  |F"), 0u + 2);  // stage 0 starts at once
  EXPECT_NE(chart.find("one column = "), std::string::npos);
  EXPECT_EQ(chart.find('~'), std::string::npos);  // 33 s of 1 s forwards fit 80 columns at two per forward
}

// Many micro-batches used to fill every column with the longer backward ('B' alone); the chart now keeps
// a forward two columns wide, elides the steady state, and shows recompute, communication and bubble.
TEST(Timeline, AsciiChartOfManyMicroBatchesShowsEveryActivity) {
  auto in = uniform(Schedule::kOneFOneB, 4, 1, 256, 1.0, 3.0);
  in.recomputeSeconds.assign(4, 1.0);  // a full recompute replays the 1 s forward
  in.commShare = 0.25;
  const auto t = simulateSchedule(in);
  ASSERT_TRUE(t);
  for (const auto& e : t->events) {
    EXPECT_NEAR(e.commSeconds, 0.25 * (e.endSeconds - e.startSeconds), 1e-9);
    EXPECT_DOUBLE_EQ(e.recomputeSeconds, e.kind == TaskKind::kForward ? 0.0 : 1.0);
  }
  const std::string chart = t->renderAscii(100);
  for (const char mark : {'F', 'B', 'R', 'c', '.', '~'}) EXPECT_NE(chart.find(mark), std::string::npos) << mark << "\n" << chart;
  EXPECT_NE(chart.find("of steady state"), std::string::npos) << chart;
  // Stage 3 (last) idles during the warm-up: its row opens with the bubble.
  const auto last = chart.find("stage 3  |");
  ASSERT_NE(last, std::string::npos);
  EXPECT_EQ(chart.substr(last + 10, 3), "...") << chart;
  // No column mark of 'B' dominates the row any more.
  const std::string row0 = chart.substr(chart.find("stage 0  |") + 10, 100);
  EXPECT_LT(std::count(row0.begin(), row0.end(), 'B'), 60) << chart;
}

}  // namespace
}  // namespace colo::costmodel
