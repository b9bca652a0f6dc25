#include "colo/planner/partition.h"

#include <cmath>
#include <functional>
#include <random>

#include <gtest/gtest.h>

namespace colo::planner {
namespace {

TEST(Partition, HeavierEndStagesGetFewerLayers) {
  // 96 layers over 8 stages; the first stage carries 2 layers' worth of embedding, the last 6 of head.
  const auto counts = partitionLayers(96, 1.0, {2, 0, 0, 0, 0, 0, 0, 6}, std::vector<std::int64_t>(8, 96));
  ASSERT_TRUE(counts);
  std::int64_t total = 0;
  double worst = 0;
  for (std::size_t s = 0; s < counts->size(); ++s) {
    total += (*counts)[s];
    worst = std::max(worst, (s == 0 ? 2.0 : s == 7 ? 6.0 : 0.0) + static_cast<double>((*counts)[s]));
  }
  EXPECT_EQ(total, 96);
  EXPECT_LT((*counts)[7], (*counts)[3]);
  EXPECT_LT((*counts)[0], (*counts)[3]);
  EXPECT_LE(worst, 13.0);  // (96 + 8) / 8 = 13 is the balanced bottleneck
}

TEST(Partition, MatchesBruteForceOnSmallCases) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t stages = 2 + trial % 3;
    const std::int64_t layers = stages + rng() % 8;
    std::vector<double> extra(static_cast<std::size_t>(stages));
    std::vector<std::int64_t> cap(static_cast<std::size_t>(stages));
    for (std::size_t s = 0; s < extra.size(); ++s) {
      extra[s] = static_cast<double>(rng() % 5);
      cap[s] = 1 + static_cast<std::int64_t>(rng() % static_cast<unsigned>(layers));
    }
    // Brute force over all compositions.
    double best = INFINITY;
    std::vector<std::int64_t> c(static_cast<std::size_t>(stages), 1);
    std::function<void(std::size_t, std::int64_t)> rec = [&](std::size_t s, std::int64_t left) {
      if (s + 1 == c.size()) {
        if (left < 1 || left > cap[s]) return;
        c[s] = left;
        double w = 0;
        for (std::size_t i = 0; i < c.size(); ++i) w = std::max(w, extra[i] + static_cast<double>(c[i]));
        best = std::min(best, w);
        return;
      }
      for (std::int64_t n = 1; n <= std::min(cap[s], left - 1); ++n) {
        c[s] = n;
        rec(s + 1, left - n);
      }
    };
    rec(0, layers);
    const auto got = partitionLayers(layers, 1.0, extra, cap);
    if (std::isinf(best)) {
      EXPECT_FALSE(got) << trial;
      continue;
    }
    ASSERT_TRUE(got) << trial;
    double worst = 0;
    std::int64_t total = 0;
    for (std::size_t i = 0; i < got->size(); ++i) {
      EXPECT_LE((*got)[i], cap[i]);
      EXPECT_GE((*got)[i], 1);
      worst = std::max(worst, extra[i] + static_cast<double>((*got)[i]));
      total += (*got)[i];
    }
    EXPECT_EQ(total, layers);
    EXPECT_DOUBLE_EQ(worst, best) << "trial " << trial;
  }
}

TEST(Checkpoint, ChoosesTheCheapestOptionThatFits) {
  const std::vector<RecomputeOption> options = {{RecomputePolicy::kSelective, 0.1, 1.0, 0.0},
                                                {RecomputePolicy::kFull, 0.5, 4.0, 0.0}};
  // 10 layers at 50 bytes, budget 45: selective needs 5 layers (0.5 s), full needs 2 layers (1.0 s).
  auto c = chooseRecompute(10, 50, 45, options);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->policy, RecomputePolicy::kSelective);
  EXPECT_EQ(c->layers, 5);
  // Budget 35: selective cannot (at most 10 saved); full needs 4 layers.
  c = chooseRecompute(10, 50, 35, options);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->policy, RecomputePolicy::kFull);
  EXPECT_EQ(c->layers, 4);
  EXPECT_FALSE(chooseRecompute(10, 50, 5, options));
  EXPECT_EQ(chooseRecompute(10, 50, 60, options)->policy, RecomputePolicy::kNone);
}

TEST(Checkpoint, ChainDynamicProgrammingMatchesBruteForce) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = 1 + trial % 7;
    std::vector<std::vector<double>> t(n), m(n);
    for (std::size_t i = 0; i < n; ++i) {
      // none / selective / full: time grows, memory shrinks.
      const double a = 10 + rng() % 10, s = 3 + rng() % 4;
      t[i] = {0.0, 0.1 * (1 + rng() % 3), 0.5 + 0.1 * (rng() % 5)};
      m[i] = {a, a - s, 2.0};
    }
    const double budget = static_cast<double>(rng() % static_cast<unsigned>(20 * n + 1));
    double best = INFINITY;
    std::vector<int> choice(n);
    std::function<void(std::size_t, double, double)> rec = [&](std::size_t i, double time, double mem) {
      if (mem > budget + 1e-9) return;
      if (i == n) {
        best = std::min(best, time);
        return;
      }
      for (int j = 0; j < 3; ++j) rec(i + 1, time + t[i][static_cast<std::size_t>(j)], mem + m[i][static_cast<std::size_t>(j)]);
    };
    rec(0, 0, 0);
    const auto got = solveCheckpointChain(t, m, budget, 1.0);  // integral memory: quantisation is exact
    if (std::isinf(best)) {
      EXPECT_FALSE(got) << trial;
      continue;
    }
    ASSERT_TRUE(got) << trial;
    double time = 0, mem = 0;
    for (std::size_t i = 0; i < n; ++i) {
      time += t[i][static_cast<std::size_t>((*got)[i])];
      mem += m[i][static_cast<std::size_t>((*got)[i])];
    }
    EXPECT_LE(mem, budget + 1e-9);
    EXPECT_NEAR(time, best, 1e-12) << "trial " << trial;
  }
}

}  // namespace
}  // namespace colo::planner
