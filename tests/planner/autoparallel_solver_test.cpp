// The per-block solver of the operator-level search (planner/src/autoparallel_solver.h), tested below
// the public API: its shortcuts must not change what it finds.
#include "autoparallel_solver.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>
#include <string>
#include <stdexcept>

#include <gtest/gtest.h>

#include "colo/core/library.h"
#include "colo/costmodel/hardware.h"
#include "colo/planner/sharding.h"
#include "core/test_support.h"

namespace colo::planner::detail {
namespace {

// The first layer of a library model as one block solver on a mesh of the library cluster, and the
// interface layouts its input may take (what both solver tests below start from).
struct LayerSolver {
  LayerSolver(const std::string& modelName, const std::string& clusterName, std::vector<std::int64_t> shape,
              std::int64_t samples, bool flash)
      : cluster(test::loadClusterOrFail(test::dataFile("clusters/" + clusterName + ".json"))),
        mesh(orThrow(makeMesh(cluster, std::move(shape)))),
        converter(mesh),
        cc(context(mesh, cluster, samples, flash)),
        block(firstLayer(test::loadModelOrFail(test::dataFile("models/" + modelName + ".json")))),
        solver(block, cc, converter) {
    for (int l = 0; l < kLayouts; ++l) {
      const Layout e = Layout::fromIndex(l);
      if (!e.partial() && fits(e, block.input, cc.samples, mesh)) entries.push_back(e);
    }
  }
  ClusterSpec cluster;
  DeviceMesh mesh;
  LayoutConverter converter;
  CostContext cc;
  Block block;
  BlockSolver solver;
  std::vector<Layout> entries;

 private:
  template <typename T>
  static T orThrow(Result<T> r) {
    if (!r) throw std::runtime_error(r.error().toString());
    return std::move(*r);
  }
  static CostContext context(const DeviceMesh& mesh, const ClusterSpec& cluster, std::int64_t samples, bool flash) {
    CostContext cc;
    cc.mesh = &mesh;
    cc.device = costmodel::deviceModel(cluster.gpu, DType::kBf16);
    cc.samples = samples;
    cc.flash = flash;
    return cc;
  }
  static Block firstLayer(const Model& model) {
    GraphOptions go;
    go.seqLen = model.defaultSeqLen();
    go.batch = 1;
    go.dtypeBytes = 2;
    return makeBlock(orThrow(model.expand(go)), 0, "layer");
  }
};

// At a low price of memory a unit whose forward costs more than everything its recompute could spare
// is never recomputed, so the solve leaves that choice out (BlockDp::leaveOutFruitlessRecompute). A
// forced-choice hook that forces nothing turns the shortcut off: both solves must give the same plans
// (objectives to the bit, and here the same choices: this layer has no exactly tied plans) at every
// price from free memory to ten seconds a GiB. GPT-3 2.7B's layer without FlashAttention (its
// score and softmax tensors make recompute worth it at high prices) on a 2x8 mesh.
TEST(AutoParallelSolver, LeavingOutRecomputeThatCannotPayChangesNoPlan) {
  const LayerSolver x("gpt3-2.7b", "dgx-a100-80gb-x16", {2, 8}, 16, false);
  const BlockSolver& solver = x.solver;
  const std::vector<Layout>& entries = x.entries;
  ASSERT_FALSE(entries.empty());
  int pricesRecomputing = 0, pricesKeeping = 0;
  for (const double lambda : {0.0, 1e-16, 1e-14, 1e-13, 1e-12, 1e-11, 1e-10, 1e-9, 1e-8}) {
    SolveWeights w;
    w.lambda = lambda;
    w.activationCopies = 4;
    w.microBatches = 8;
    SolveWeights unpruned = w;
    unpruned.forceRecompute = [](const Block&, std::size_t) { return -1; };
    const auto fast = solver.solve(entries, w);
    const auto full = solver.solve(entries, unpruned);
    ASSERT_EQ(fast.size(), full.size()) << "lambda " << lambda;
    bool recomputes = false;
    for (std::size_t i = 0; i < fast.size(); ++i) {
      EXPECT_EQ(fast[i].entry, full[i].entry);
      EXPECT_EQ(fast[i].exit, full[i].exit);
      EXPECT_EQ(fast[i].objective, full[i].objective) << "lambda " << lambda;
      EXPECT_EQ(fast[i].activationBytes, full[i].activationBytes) << "lambda " << lambda;
      ASSERT_EQ(fast[i].units.size(), full[i].units.size());
      for (std::size_t u = 0; u < fast[i].units.size(); ++u) {
        EXPECT_EQ(fast[i].units[u].strategy, full[i].units[u].strategy) << "lambda " << lambda << " unit " << u;
        EXPECT_EQ(fast[i].units[u].recompute, full[i].units[u].recompute) << "lambda " << lambda << " unit " << u;
        EXPECT_EQ(fast[i].units[u].keepBeforeConversion, full[i].units[u].keepBeforeConversion) << "lambda " << lambda;
        recomputes = recomputes || full[i].units[u].recompute;
      }
    }
    (recomputes ? pricesRecomputing : pricesKeeping)++;
  }
  // Not vacuous: the sweep spans prices where recompute wins and prices where it does not.
  EXPECT_GT(pricesRecomputing, 0);
  EXPECT_GT(pricesKeeping, 0);
}

// Copies of the mesh reduce gradients over groups the wider meshes already have: what the outer axis of a
// 2x8 mesh reduces, over it and four copies, is what the outer axis of an 8x8 mesh reduces (ranks 8
// apart, across 8 nodes); what both axes reduce likewise; and what the mesh does not reduce at all is
// reduced over the four copies alone, 16 ranks apart, as the outer axis of a 4x16 mesh would.
TEST(AutoParallelSolver, CopiesOfTheMeshReduceOverTheGroupsOfTheWiderMesh) {
  const ClusterSpec cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json")), 64);
  auto narrow = makeMesh(cluster, {2, 8});
  auto wide = makeMesh(cluster, {8, 8});
  auto strided = makeMesh(cluster, {4, 16});
  ASSERT_TRUE(narrow && wide && strided);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const double outer[3] = {2 * gib, 0, 0}, both[3] = {0, 0, 3 * gib}, none[3] = {0, 0, 0};
  EXPECT_NEAR(gradientSyncSeconds(*narrow, outer, 4, 2 * gib), gradientSyncSeconds(*wide, outer), 1e-12);
  EXPECT_NEAR(gradientSyncSeconds(*narrow, both, 4, 3 * gib), gradientSyncSeconds(*wide, both), 1e-12);
  const double alone[3] = {gib, 0, 0};
  EXPECT_NEAR(gradientSyncSeconds(*narrow, none, 4, gib), gradientSyncSeconds(*strided, alone), 1e-12);
  EXPECT_GT(gradientSyncSeconds(*narrow, none, 4, gib), 0.0);
  // One copy: the mesh's own reductions, whatever it holds.
  EXPECT_EQ(gradientSyncSeconds(*narrow, outer, 1, 5 * gib), gradientSyncSeconds(*narrow, outer));
  // An inner-axis reduction's shard crosses the copies: more than the mesh alone, less than reducing the
  // whole gradient over the copies after it.
  const double inner[3] = {0, gib, 0};
  const double withCopies = gradientSyncSeconds(*narrow, inner, 4, gib);
  EXPECT_GT(withCopies, gradientSyncSeconds(*narrow, inner));
  EXPECT_LT(withCopies, gradientSyncSeconds(*narrow, inner) + gradientSyncSeconds(*strided, alone));
}

// The dynamic programme against brute force: over a space small enough to enumerate (two strategies for
// five operators, one for the rest; recompute free for three, kept elsewhere), solving with every
// operator's strategy and recompute choice fixed, once per combination, and keeping the best finds the
// same objective for every (entry, exit) as one solve over the whole space, at prices of memory from
// free to a GiB costing a second. Llama-style layer of tiny-llama on a 1-D mesh of 2.
TEST(AutoParallelSolver, TheBlockSolveEqualsBruteForceOverASmallSpace) {
  const LayerSolver x("tiny-llama", "dgx-a100-80gb", {2}, 8, true);
  const BlockSolver& solver = x.solver;
  const Block& block = x.block;
  const std::vector<Layout>& entries = x.entries;
  const auto& strategies = solver.strategies();
  const std::size_t n = block.units.size();
  // The space: units with two strategies or more contribute their first two (up to five such units);
  // the rest their first. Recompute is free on units 1-3 (each has a later consumer), kept elsewhere.
  std::vector<std::size_t> varied;
  for (std::size_t u = 0; u < n && varied.size() < 5; ++u) {
    if (strategies[u].size() >= 2) varied.push_back(u);
  }
  ASSERT_GE(varied.size(), 3u);
  const std::vector<std::size_t> recomputed{1, 2, 3};
  ASSERT_GT(n, 4u);
  auto index = [&](std::size_t u, const Strategy& st) { return static_cast<std::size_t>(&st - strategies[u].data()); };
  for (const double lambda : {0.0, 1e-13, 1e-11, 1e-9}) {
    SolveWeights w;
    w.lambda = lambda;
    w.activationCopies = 2;
    w.microBatches = 4;
    auto isVaried = [&](std::size_t u) { return std::find(varied.begin(), varied.end(), u) != varied.end(); };
    auto isRecomputed = [&](std::size_t u) { return std::find(recomputed.begin(), recomputed.end(), u) != recomputed.end(); };
    SolveWeights whole = w;
    whole.allow = [&](const Block&, std::size_t u, const Strategy& st) { return index(u, st) < (isVaried(u) ? 2u : 1u); };
    whole.forceRecompute = [&](const Block&, std::size_t u) { return isRecomputed(u) ? -1 : 0; };
    std::map<std::pair<int, int>, double> dp;
    for (const auto& p : solver.solve(entries, whole)) dp[{p.entry.index(), p.exit.index()}] = p.objective;
    ASSERT_FALSE(dp.empty());
    std::map<std::pair<int, int>, double> brute;
    const std::size_t combos = std::size_t{1} << (varied.size() + recomputed.size());
    for (std::size_t bits = 0; bits < combos; ++bits) {
      SolveWeights one = w;
      one.allow = [&](const Block&, std::size_t u, const Strategy& st) {
        const auto at = std::find(varied.begin(), varied.end(), u);
        const std::size_t chosen = at == varied.end() ? 0 : (bits >> static_cast<std::size_t>(at - varied.begin())) & 1u;
        return index(u, st) == chosen;
      };
      one.forceRecompute = [&](const Block&, std::size_t u) {
        const auto at = std::find(recomputed.begin(), recomputed.end(), u);
        if (at == recomputed.end()) return 0;
        return static_cast<int>((bits >> (varied.size() + static_cast<std::size_t>(at - recomputed.begin()))) & 1u);
      };
      for (const auto& p : solver.solve(entries, one)) {
        auto [it, inserted] = brute.try_emplace({p.entry.index(), p.exit.index()}, p.objective);
        if (!inserted) it->second = std::min(it->second, p.objective);
      }
    }
    ASSERT_EQ(dp.size(), brute.size()) << "lambda " << lambda;
    for (const auto& [key, objective] : brute) {
      ASSERT_TRUE(dp.count(key)) << "lambda " << lambda;
      EXPECT_NEAR(dp[key], objective, 1e-12 * objective) << "lambda " << lambda << ", entry " << key.first << ", exit " << key.second;
    }
  }
}

// A caller that wants one plan per entry passes its exit cost, and the solve describes only those plans
// (BlockSolver::solve). They must be exactly what the caller would pick from the whole list: per entry
// the least objective + exit cost, the first in (entry, exit) order on a tie, with every figure the same.
// Llama 3 8B's layer on a 2x4 mesh, with an exit cost that converts back to the entry and one that
// wants the entry's own layout only.
TEST(AutoParallelSolver, AnExitCostGivesThePlansPickedFromTheWholeList) {
  LayerSolver x("llama3-8b", "dgx-h100", {2, 4}, 8, true);
  ASSERT_GT(x.entries.size(), 1u);
  const BlockSolver::ExitCost back = [&x](Layout entry, Layout exit) {
    return x.converter.convert(exit, entry, x.block.input, x.cc.samples).seconds +
           x.converter.convert(entry, gradientTarget(exit), x.block.input, x.cc.samples).seconds;
  };
  const BlockSolver::ExitCost same = [](Layout entry, Layout exit) {
    return exit == entry ? 0.0 : std::numeric_limits<double>::infinity();
  };
  for (const double lambda : {0.0, 1e-12, 1e-10}) {
    SolveWeights w;
    w.lambda = lambda;
    w.activationCopies = 2;
    w.microBatches = 8;
    const auto all = x.solver.solve(x.entries, w);
    // Every sum exactly zero: each entry's first exit must win the tie.
    std::map<std::pair<int, int>, double> objective;
    for (const auto& p : all) objective[{p.entry.index(), p.exit.index()}] = p.objective;
    const BlockSolver::ExitCost tied = [&objective](Layout entry, Layout exit) {
      const auto it = objective.find({entry.index(), exit.index()});
      return it == objective.end() ? 0.0 : -it->second;
    };
    for (const auto* cost : {&back, &same, &tied}) {
      std::map<int, const BlockPlan*> picked;
      for (const auto& p : all) {
        const double sum = p.objective + (*cost)(p.entry, p.exit);
        auto& best = picked[p.entry.index()];
        if (std::isfinite(sum) && (!best || sum < best->objective + (*cost)(best->entry, best->exit))) best = &p;
      }
      std::erase_if(picked, [](const auto& kv) { return kv.second == nullptr; });
      const auto chosen = x.solver.solve(x.entries, w, *cost);
      ASSERT_EQ(chosen.size(), picked.size()) << "lambda " << lambda;
      ASSERT_FALSE(chosen.empty());
      std::size_t i = 0;
      for (const auto& [entry, p] : picked) {
        const BlockPlan& c = chosen[i++];
        EXPECT_EQ(c.entry, p->entry);
        EXPECT_EQ(c.exit, p->exit);
        EXPECT_EQ(c.objective, p->objective);
        EXPECT_EQ(c.seconds, p->seconds);
        EXPECT_EQ(c.activationBytes, p->activationBytes);
        EXPECT_EQ(c.stateBytes, p->stateBytes);
        ASSERT_EQ(c.units.size(), p->units.size());
        for (std::size_t u = 0; u < c.units.size(); ++u) EXPECT_EQ(c.units[u].strategy, p->units[u].strategy) << "unit " << u;
      }
    }
  }
}

}  // namespace
}  // namespace colo::planner::detail
