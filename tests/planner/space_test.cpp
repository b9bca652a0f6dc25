// The plan space's rules (colo/planner/space.h), which the degree-level search, the operator-level search
// and the baselines share: the same list of chunk counts and the same interleaving rule in all three.
#include "colo/planner/space.h"

#include <gtest/gtest.h>

#include "colo/planner/autoparallel.h"
#include "colo/planner/baseline.h"
#include "core/test_support.h"
#include "search_parts.h"

namespace colo::planner {
namespace {

using Counts = std::vector<std::int64_t>;

TEST(Space, ChunkCountsKeepEqualChunksAndMicroBatchesInGroupsOfTheStages) {
  // GPT-3's 96 layers over 8 stages: 8 chunks would hold 1.5 layers each.
  EXPECT_EQ(chunkCounts({}, 96, 8, 64), (Counts{1, 2, 3, 4, 6}));
  // 60 micro-batches are not in groups of 8 stages: plain 1F1B only.
  EXPECT_EQ(chunkCounts({}, 96, 8, 60), (Counts{1}));
  // One stage: nothing to interleave.
  EXPECT_EQ(chunkCounts({}, 96, 1, 64), (Counts{1}));
  // What the user asks for, in the order given, where it is valid (5 x 8 does not divide 96; 0 is no count).
  EXPECT_EQ(chunkCounts({6, 5, 0, 2}, 96, 8, 64), (Counts{6, 2}));
  EXPECT_EQ(chunkCounts({5}, 96, 8, 64), Counts{});
}

TEST(Space, RulesNameWhatTheyRefuse) {
  EXPECT_STREQ(stagesRule(4, 8), "more stages than layers");
  EXPECT_EQ(stagesRule(8, 8), nullptr);
  EXPECT_STREQ(chunksRule(96, 1, 2), "virtual stages need pp > 1 and layers divisible by pp*vpp");
  EXPECT_EQ(chunksRule(96, 8, 1), nullptr);
  EXPECT_STREQ(interleavedBatchRule(12, 8, 2), "interleaving needs micro-batches divisible by pp");
  EXPECT_EQ(interleavedBatchRule(12, 8, 1), nullptr);
  // Llama 3 70B: 64 heads, 8 key/value heads.
  EXPECT_EQ(headsRule(64, 8, 8), nullptr);
  EXPECT_STREQ(headsRule(64, 8, 16), "heads or kv heads not divisible by tp");
  EXPECT_STREQ(headsRule(12, 0, 8), "heads or kv heads not divisible by tp");
  EXPECT_EQ(headsRule(0, 0, 8), nullptr);  // (a model without attention)
}

// The degree-level search prunes exactly the chunk counts the operator-level search leaves out.
TEST(Space, BothSearchesAcceptTheSameChunkCounts) {
  const Model model = test::loadModelOrFail(test::dataFile("models/gpt3-175b.json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x16.json"));
  SearchOptions o;
  o.globalBatchSize = 1536;
  auto space = detail::makeSpace(model, cluster, o);
  ASSERT_TRUE(space) << space.error().toString();
  int interleaved = 0, refused = 0;
  for (const std::int64_t pp : {1, 2, 4, 8, 16, 32}) {
    for (const std::int64_t mbs : {1, 2, 4, 8}) {
      const std::int64_t tp = 8, dp = cluster.totalGpus() / (tp * pp);
      if (dp < 1) continue;
      const std::int64_t microBatches = o.globalBatchSize / (mbs * dp);
      const Counts accepted = chunkCounts({}, space->layers, pp, microBatches);
      for (const std::int64_t vpp : kChunkCounts) {
        const detail::Config c{tp, 1, pp, dp, 1, mbs, vpp, 1, vpp > 1 ? Schedule::kInterleaved : Schedule::kOneFOneB, 0, 0};
        double states = 0;
        const char* rule = detail::pruneRule(*space, c, false, states);
        const bool chunkRule = rule != nullptr && (std::string(rule).starts_with("virtual stages") || std::string(rule).starts_with("interleaving"));
        const bool offered = std::find(accepted.begin(), accepted.end(), vpp) != accepted.end();
        EXPECT_EQ(!chunkRule, offered) << "pp " << pp << " mbs " << mbs << " vpp " << vpp << ": " << (rule ? rule : "kept");
        interleaved += vpp > 1 && offered;
        refused += !offered;
      }
    }
  }
  // Both kinds occur (the test would say nothing otherwise).
  EXPECT_GT(interleaved, 10);
  EXPECT_GT(refused, 10);
}

// Both searches say why a plan ranks below the best in the same words: its largest extra part.
TEST(Space, SlowerReasonNamesTheLargestExtraPart) {
  EXPECT_EQ(slowerReason(11.0, 10.0, {{"compute", 0.2}, {"recompute", 0.7}, {"optimizer", -0.1}}), "+10.0% step: recompute +0.700 s");
  // Within 0.05%, or no part 0.5 ms longer: a tie, which the caller words.
  EXPECT_EQ(slowerReason(10.004, 10.0, {{"compute", 0.004}}), "");
  EXPECT_EQ(slowerReason(11.0, 10.0, {{"compute", 0.0001}}), "");
  EXPECT_EQ(slowerReason(11.0, 0.0, {{"compute", 1.0}}), "");
  OperatorPlan best, other;
  best.stepSeconds = 10;
  other.stepSeconds = 12;
  other.communication = 1.5;
  other.bubble = 0.5;
  EXPECT_EQ(slowerReason(other, best), "+20.0% step: collectives +1.500 s");
  EXPECT_EQ(slowerReason(best, other), "");
}

TEST(Space, OutsideOperatorSpaceNamesWhatTheOperatorSearchDoesNotHold) {
  const Model model = test::loadModelOrFail(test::dataFile("models/gpt3-175b.json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x128.json"));
  auto b = baselinePlan(Baseline::kMegatron, model, cluster, 1536, 0, DType::kBf16, 0.95);
  ASSERT_TRUE(b) << b.error().toString();
  // Megatron's own layout is in it (the baseline chooses its chunk count from the same list).
  EXPECT_EQ(outsideOperatorSpace(b->plan), "");
  EXPECT_NE(std::find(kChunkCounts.begin(), kChunkCounts.end(), b->plan.parallel.virtualStages), kChunkCounts.end());
  Plan p = b->plan;
  p.parallel.virtualStages = 5;
  p.zeroStage = 2;
  EXPECT_EQ(outsideOperatorSpace(p), "5 chunks per stage (the operator-level search tries 2, 3, 4, 6 and 8), ZeRO-2");
  p = b->plan;
  p.schedule = Schedule::kZeroBubble;
  EXPECT_EQ(outsideOperatorSpace(p), "the zero-bubble schedule");
}

}  // namespace
}  // namespace colo::planner
