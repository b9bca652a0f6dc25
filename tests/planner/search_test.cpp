#include "colo/planner/search.h"
#include "colo/planner/export.h"
#include "colo/costmodel/evaluator.h"
#include "colo/core/runnable.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "core/test_support.h"

namespace colo::planner {
namespace {

struct Setup {
  Model model;
  ClusterSpec cluster;
};

Setup setup(const std::string& model, const std::string& cluster, std::int64_t gpus) {
  Setup s{test::loadModelOrFail(test::dataFile("models/" + model + ".json")),
          test::loadClusterOrFail(test::dataFile("clusters/" + cluster + ".json"))};
  auto scaled = scaleCluster(s.cluster, gpus);
  EXPECT_TRUE(scaled);
  s.cluster = *scaled;
  return s;
}

class Recorder : public ProgressSink {
 public:
  void progress(double fraction, std::string_view) override { fractions.push_back(fraction); }
  std::vector<double> fractions;
};

TEST(Search, RunnableOnlyKeepsWhatColoRunExecutesAndSaysWhenNothingIsLeft) {
  auto s = setup("tiny-llama", "localhost-cpu", 4);
  SearchOptions o;
  o.globalBatchSize = 8;
  o.seqLen = 8192;
  o.precision = DType::kFp32;
  o.runnableOnly = true;
  o.allowZeroBubble = true;
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_TRUE(r->feasible()) << r->infeasibleReason;
  for (const auto& c : r->top) EXPECT_TRUE(runnable(c.plan)) << c.plan.name;
  // Dropout with context parallelism is not on colo-run's list: held to cp 2, nothing is left.
  ModelSpec withDropout = *s.model.spec;
  withDropout.dropout = 0.1;
  s.model.spec = withDropout;
  o.fixed = {{"cp", 2}};
  r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_FALSE(r->feasible());
  EXPECT_NE(r->infeasibleReason.find("--any"), std::string::npos) << r->infeasibleReason;
  // A model colo-run cannot train is refused with the reason.
  const auto latent = setup("deepseek-v3", "dgx-h100-x64", 512);
  auto refused = search(latent.model, latent.cluster, o);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("multi-head latent attention"), std::string::npos);
}

TEST(Search, ContextParallelPlansTakeTheExchangeThatPays) {
  // Llama 3 8B at 128K tokens on two H100 nodes: with cp 16 across them, all-to-alls inside each node and
  // a two-step ring between them (a2a+p2p 8x2) beat the sixteen-rank ring by more than the 1% a change
  // of exchange must pay; the plan the search keeps says so and is costed with it.
  auto s = setup("llama3-8b", "dgx-h100-x64", 16);
  SearchOptions o;
  o.globalBatchSize = 16;
  o.seqLen = 131072;
  o.fixed = {{"tp", 1}, {"cp", 16}, {"zero", 3}, {"mbs", 1}};
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_TRUE(r->feasible()) << r->infeasibleReason;
  const Plan& best = r->top.front().plan;
  EXPECT_EQ(best.execution.cpCommType, CpCommType::kA2aP2p);
  EXPECT_EQ(best.execution.hierarchicalCpSizes, (std::vector<std::int64_t>{8, 2}));
  Plan ring = best;
  ring.execution.cpCommType = CpCommType::kP2p;
  ring.execution.hierarchicalCpSizes.clear();
  auto evaluator = costmodel::Evaluator::create(s.model, s.cluster, 131072);
  ASSERT_TRUE(evaluator) << evaluator.error().toString();
  auto ringTime = evaluator->evaluate(ring);
  ASSERT_TRUE(ringTime) << ringTime.error().toString();
  EXPECT_LT(r->top.front().evaluation.stepSeconds, 0.99 * ringTime->stepSeconds);
  // Plans colo-run must run keep the ring (the only cp it executes), at its own time.
  o.runnableOnly = true;
  auto runs = search(s.model, s.cluster, o);
  ASSERT_TRUE(runs) << runs.error().toString();
  ASSERT_TRUE(runs->feasible()) << runs->infeasibleReason;
  EXPECT_EQ(runs->top.front().plan.execution.cpCommType, CpCommType::kP2p);
  EXPECT_NEAR(runs->top.front().evaluation.stepSeconds, ringTime->stepSeconds, 1e-9 * ringTime->stepSeconds);
  o.runnableOnly = false;
  // A user's exchange (a plan of theirs, --from-plan: torchtitan's all_gather) is kept, not swapped.
  o.execution.cpCommType = CpCommType::kAllGather;
  auto theirs = search(s.model, s.cluster, o);
  ASSERT_TRUE(theirs && theirs->feasible());
  EXPECT_EQ(theirs->top.front().plan.execution.cpCommType, CpCommType::kAllGather);
  // An a2a+p2p plan's sizes hold only at its own cp: at another cp every candidate is a valid plan.
  o.execution.cpCommType = CpCommType::kA2aP2p;
  o.execution.hierarchicalCpSizes = {8, 2};
  o.fixed = {{"tp", 1}, {"cp", 8}, {"zero", 3}, {"mbs", 1}};
  auto other = search(s.model, s.cluster, o);
  ASSERT_TRUE(other && other->feasible());
  for (const auto& c : other->top) EXPECT_TRUE(validatePlan(c.plan)) << validatePlan(c.plan).error().toString();
  o.execution = {};
  // Inside one node there is no second level: cp 8 keeps the ring or takes plain all-to-alls.
  auto one = setup("llama3-8b", "dgx-h100", 8);
  o.globalBatchSize = 8;
  o.fixed = {{"tp", 1}, {"cp", 8}, {"zero", 3}, {"mbs", 1}};
  auto r1 = search(one.model, one.cluster, o);
  ASSERT_TRUE(r1) << r1.error().toString();
  for (const auto& c : r1->top) EXPECT_NE(c.plan.execution.cpCommType, CpCommType::kA2aP2p);
}

TEST(Search, FindsAFittingPlanForGpt3OnAThousandGpus) {
  const auto s = setup("gpt3-175b", "dgx-a100-80gb-x128", 1024);
  SearchOptions o;
  o.globalBatchSize = 1536;
  Recorder progress;
  auto r = search(s.model, s.cluster, o, &progress);
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_TRUE(r->feasible()) << r->infeasibleReason;
  EXPECT_LE(r->top.size(), 10u);
  for (std::size_t i = 1; i < r->top.size(); ++i) {
    EXPECT_LE(r->top[i - 1].evaluation.stepSeconds, r->top[i].evaluation.stepSeconds);
    EXPECT_NE(r->top[i].reason.find("% step"), std::string::npos);
  }
  const auto& best = r->top.front();
  EXPECT_TRUE(validatePlan(best.plan)) << validatePlan(best.plan).error().toString();
  EXPECT_LE(best.evaluation.peakMemoryBytes, 0.95 * s.cluster.gpu.memoryBytes);
  EXPECT_GT(r->stats.generated, r->stats.costed);
  EXPECT_GT(r->stats.pruned.size(), 3u);
  std::int64_t pruned = 0;
  for (const auto& [rule, count] : r->stats.pruned) pruned += count;
  EXPECT_EQ(pruned + r->stats.costed, r->stats.generated);
  ASSERT_FALSE(progress.fractions.empty());
  EXPECT_DOUBLE_EQ(progress.fractions.back(), 1.0);
  // Pareto front: faster plans use more memory.
  for (std::size_t i = 1; i < r->pareto.size(); ++i) {
    EXPECT_LE(r->pareto[i - 1].evaluation.stepSeconds, r->pareto[i].evaluation.stepSeconds);
    EXPECT_GT(r->pareto[i - 1].evaluation.peakMemoryBytes, r->pareto[i].evaluation.peakMemoryBytes);
  }
}

TEST(Search, Fp8PlansKeepTransformerEnginesWeightsQuantizedUnderTheDistributedOptimizer) {
  // Quantized weights (--fp8-param-gather) hold and gather fewer bytes than 16-bit ones beside TE's
  // cached copy: the search takes them wherever Megatron allows (ZeRO 1 or 2), and the plan says so.
  const auto s = setup("llama3-8b", "dgx-h100", 8);
  SearchOptions o;
  o.globalBatchSize = 64;
  o.seqLen = 8192;
  o.precision = DType::kFp8;
  o.topK = 20;
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_TRUE(r->feasible()) << r->infeasibleReason;
  for (const auto& c : r->top) {
    EXPECT_EQ(c.plan.execution.quantizedParams, c.plan.zeroStage == 1 || c.plan.zeroStage == 2) << c.plan.name;
    ASSERT_TRUE(validatePlan(c.plan)) << c.plan.name;
  }
  // The best such plan against the same plan with 16-bit weights: less memory, no slower.
  const auto best = std::find_if(r->top.begin(), r->top.end(), [](const auto& c) { return c.plan.execution.quantizedParams; });
  ASSERT_NE(best, r->top.end());
  Plan sixteen = best->plan;
  sixteen.execution.quantizedParams = false;
  auto quantized = costmodel::evaluatePlan(best->plan);
  auto cached = costmodel::evaluatePlan(sixteen);
  ASSERT_TRUE(quantized && cached);
  EXPECT_LT(quantized->peakMemoryBytes, cached->peakMemoryBytes);
  EXPECT_LE(quantized->stepSeconds, cached->stepSeconds);
  // Told not to propose them (the validation harness, whose rows' frameworks decide), the search keeps
  // the base's 16-bit weights.
  o.proposeQuantizedWeights = false;
  auto kept = search(s.model, s.cluster, o);
  ASSERT_TRUE(kept && kept->feasible());
  for (const auto& c : kept->top) EXPECT_FALSE(c.plan.execution.quantizedParams) << c.plan.name;
}

TEST(Search, AFixedZeroStageIsKeptEvenWhereAnotherDominatesIt) {
  // ZeRO-2 dominates ZeRO-1 without pipelining, but an engine that runs only ZeRO-1 must get one.
  const auto s = setup("tiny-gpt", "localhost-cpu", 4);
  SearchOptions o;
  o.globalBatchSize = 8;
  o.seqLen = 128;
  o.fixed = *parseFixed("tp=2,dp=2,zero=1");
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r) << r.error().toString();
  ASSERT_TRUE(r->feasible()) << r->infeasibleReason;
  EXPECT_EQ(r->top.front().plan.zeroStage, 1);
  o.fixed = *parseFixed("tp=2,dp=2");
  auto free = search(s.model, s.cluster, o);
  ASSERT_TRUE(free && free->feasible());
  EXPECT_EQ(free->top.front().plan.zeroStage, 2);
}

TEST(Search, BestIsNeverWorseThanTheMegatronConfiguration) {
  // The configuration of Narayanan et al.: tp 8, pp 16 interleaved, dp 8, selective recompute + SP.
  const auto s = setup("gpt3-175b", "dgx-a100-80gb-x128", 1024);
  SearchOptions o;
  o.globalBatchSize = 1536;
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r && r->feasible());
  Plan megatron;
  megatron.model = s.model;
  megatron.cluster = s.cluster;
  megatron.parallel.tp = 8;
  megatron.parallel.pp = 16;
  megatron.parallel.dp = 8;
  megatron.parallel.sequenceParallel = true;
  megatron.parallel.virtualStages = 3;
  megatron.schedule = Schedule::kInterleaved;
  megatron.globalBatchSize = 1536;
  megatron.seqLen = 2048;
  megatron.zeroStage = 1;
  megatron.stages = uniformStages(96, 48, RecomputePolicy::kSelective);
  auto baseline = costmodel::evaluatePlan(megatron);
  ASSERT_TRUE(baseline);
  EXPECT_LE(r->top.front().evaluation.stepSeconds, baseline->stepSeconds);
}

TEST(Search, FixedSettingsAreRespected) {
  const auto s = setup("llama2-70b", "dgx-h100-x64", 64);
  SearchOptions o;
  o.globalBatchSize = 256;
  o.fixed = {{"tp", 8}, {"pp", 2}};
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r && r->feasible()) << (r ? r->infeasibleReason : r.error().toString());
  for (const auto& c : r->top) {
    EXPECT_EQ(c.plan.parallel.tp, 8);
    EXPECT_EQ(c.plan.parallel.pp, 2);
  }
  o.fixed = {{"tp", 3}};
  auto bad = search(s.model, s.cluster, o);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("does not divide"), std::string::npos);
  EXPECT_FALSE(parseFixed("tp=8,pipeline=2"));
  EXPECT_FALSE(parseFixed("zero=5"));
  EXPECT_EQ(parseFixed("tp=8,zero=1")->at("zero"), 1);
  // A setting given twice is refused (the last one used to win silently).
  auto twice = parseFixed("tp=2,tp=4");
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message.find("tp is given twice"), std::string::npos) << twice.error().message;
  // Fixed degrees whose product does not divide the GPUs, or does not make them when all four are fixed,
  // are bad input naming the product (they used to give "no feasible plan" and exit 0).
  for (const auto& [fix, reason] : std::vector<std::pair<std::string, std::string>>{
           {"tp=8,pp=16", "--fix: tp=8*pp=16 is more than the cluster's 64 GPUs"},
           {"tp=8,pp=4,dp=4", "--fix: tp=8*pp=4*dp=4 is more than the cluster's 64 GPUs"},
           {"tp=8,pp=2,dp=2,cp=1", "--fix: tp=8*pp=2*dp=2*cp=1 = 32 does not make the cluster's 64 GPUs"}}) {
    o.fixed = *parseFixed(fix);
    auto refused = search(s.model, s.cluster, o);
    ASSERT_FALSE(refused) << fix;
    EXPECT_EQ(refused.error().code, ErrorCode::kBadInput) << fix;
    EXPECT_EQ(refused.error().message, reason) << fix;
  }
}

TEST(Search, ProposesExpertParallelismFoldedOverTensorParallelRanks) {
  // Mixtral on 16 H100s with tp 2 and pp 2 leaves dp 4: ep 8 needs the experts' own tensor parallelism
  // at 1, which the search proposes (and the Megatron export carries).
  const auto s = setup("mixtral-8x7b", "dgx-h100-x64", 16);
  SearchOptions o;
  o.globalBatchSize = 64;
  o.fixed = {{"tp", 2}, {"pp", 2}, {"ep", 8}};
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r && r->feasible()) << (r ? r->infeasibleReason : r.error().toString());
  for (const auto& c : r->top) {
    EXPECT_EQ(c.plan.parallel.ep, 8);
    EXPECT_EQ(c.plan.parallel.expertTp(), 1);
    ASSERT_TRUE(validatePlan(c.plan)) << validatePlan(c.plan).error().toString();
  }
  const auto megatron = exportPlan(r->top.front().plan, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(megatron);
  EXPECT_NE(megatron->find("--expert-tensor-parallel-size 1"), std::string::npos) << *megatron;
  o.fixed = {{"tp", 2}, {"pp", 2}, {"ep", 8}, {"etp", 2}};
  auto none = search(s.model, s.cluster, o);
  EXPECT_TRUE(!none || !none->feasible());
}

TEST(Search, TightMemoryTurnsOnRecomputeThenOffload) {
  const auto s = setup("llama2-13b", "dgx-a100-40gb", 8);
  SearchOptions o;
  o.globalBatchSize = 64;
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r && r->feasible()) << (r ? r->infeasibleReason : "");
  o.maxMemoryFraction = 0.45;  // 18 GiB of 40
  auto tight = search(s.model, s.cluster, o);
  ASSERT_TRUE(tight);
  if (tight->feasible()) {
    EXPECT_GE(tight->top.front().evaluation.stepSeconds, r->top.front().evaluation.stepSeconds);
    EXPECT_LE(tight->top.front().evaluation.peakMemoryBytes, 0.45 * s.cluster.gpu.memoryBytes);
  }
}

TEST(Search, AtOnePipelineStageActivationOffloadFitsFasterThanRecompute) {
  // Llama 3 70B in fp8 on 64 GB200s, tp 1 and pp 1 as Megatron-Bridge's recipe runs it: the activations
  // of 80 layers at micro-batch 2 do not fit in 184 GiB. Over NVLink-C2C the copies of some layers to
  // host memory hide behind the compute, which recompute would add to: the search offloads the fewest
  // layers that fit (Bridge's recipe: 40).
  const auto s = setup("llama3-70b", "gb200-nvl72-x8", 64);
  SearchOptions o;
  o.globalBatchSize = 256;
  o.precision = DType::kFp8;
  o.fixed = {{"tp", 1}, {"pp", 1}, {"cp", 1}, {"mbs", 2}};
  o.topK = 3;
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r && r->feasible()) << (r ? r->infeasibleReason : r.error().toString());
  const Candidate& best = r->top.front();
  EXPECT_GT(best.plan.offload.activationLayers, 0);
  EXPECT_LT(best.plan.offload.activationLayers, 80);
  EXPECT_EQ(best.plan.stages.front().recomputeLayers, 0);
  EXPECT_EQ(best.evaluation.time.offload, 0);
  EXPECT_TRUE(best.evaluation.fits);
  EXPECT_TRUE(validatePlan(best.plan));
  // One layer fewer does not fit.
  Plan fewer = best.plan;
  fewer.offload.activationLayers -= 1;
  auto tighter = costmodel::evaluatePlan(fewer);
  ASSERT_TRUE(tighter);
  EXPECT_GT(tighter->peakMemoryBytes, 0.95 * s.cluster.gpu.memoryBytes);
  // Without offload the search recomputes, and the step is longer.
  o.allowOffload = false;
  auto recomputed = search(s.model, s.cluster, o);
  ASSERT_TRUE(recomputed && recomputed->feasible());
  EXPECT_EQ(recomputed->top.front().plan.offload.activationLayers, 0);
  EXPECT_GT(recomputed->top.front().evaluation.time.recompute, 0);
  EXPECT_GT(recomputed->top.front().evaluation.stepSeconds, best.evaluation.stepSeconds);
}

TEST(Search, MoeModelsRecomputeMegatronsOutputDiscardingModulesOnEveryLayer) {
  // DeepSeek-V3 on 1,024 H100s at tp 2, pp 32: its activations do not fit. Megatron-Bridge's MoE
  // recipes recompute the cheap modules (layernorm, moe_act, mla_up_proj) rather than whole layers;
  // the search's selective recompute is those beside the attention core, and covers every layer not
  // fully recomputed, as Megatron-Core's one setting does.
  const auto s = setup("deepseek-v3", "dgx-h100-x2048", 1024);
  SearchOptions o;
  o.globalBatchSize = 8192;
  o.seqLen = 4096;
  o.fixed = {{"tp", 2}, {"pp", 32}, {"cp", 1}, {"mbs", 1}, {"vpp", 1}};
  o.topK = 1;
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r && r->feasible()) << (r ? r->infeasibleReason : r.error().toString());
  const Plan& best = r->top.front().plan;
  const RecomputeModules& m = best.execution.recomputeModules;
  EXPECT_TRUE(m.coreAttn && m.moeAct && m.layernorm && m.mlaUpProj && !m.moe && !m.mlp) << recomputeModulesLabel(m);
  for (const auto& st : best.stages) {
    EXPECT_TRUE(st.recomputeLayers == st.layers || st.recompute == RecomputePolicy::kFull)
        << toString(st.recompute) << " " << st.recomputeLayers << "/" << st.layers;
  }
  EXPECT_TRUE(validatePlan(best));
  // The attention core alone frees nothing under fused attention: asked for it, the search recomputes
  // whole layers, and the step is longer.
  o.execution.recomputeModules = RecomputeModules{};
  o.recomputeModulesChosen = true;
  auto named = search(s.model, s.cluster, o);
  ASSERT_TRUE(named && named->feasible());
  EXPECT_EQ(named->top.front().plan.execution.recomputeModules.moeAct, false);
  EXPECT_GT(named->top.front().evaluation.stepSeconds, r->top.front().evaluation.stepSeconds);
  // A dense model's search is as before: the attention core only, no list in its plans.
  const auto dense = setup("llama3-70b", "dgx-h100-x64", 64);
  SearchOptions d;
  d.globalBatchSize = 128;
  d.topK = 3;
  auto denseResult = search(dense.model, dense.cluster, d);
  ASSERT_TRUE(denseResult && denseResult->feasible());
  for (const auto& c : denseResult->top) EXPECT_TRUE(c.plan.execution.recomputeModules.isDefault());
}

TEST(Search, OneGpuFitsGpt3OnlyByOffloadingEverything) {
  // GPT-3 175B on one 80 GB A100: the model states (2.9 TiB) fit only off the GPU. The memory bound
  // must not prune what offload makes fit (it once answered "no plan fits"); the plan found is ZeRO-3
  // with parameters, gradients and optimizer states offloaded, and it pays PCIe for every fetch. They
  // are more than the node's 2 TiB of host memory, so they go to its NVMe (ZeRO-Infinity).
  const auto s = setup("gpt3-175b", "dgx-a100-80gb", 1);
  SearchOptions o;
  o.globalBatchSize = 1536;
  o.topK = 3;
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->feasible()) << r->infeasibleReason;
  const Candidate& best = r->top.front();
  EXPECT_EQ(best.plan.zeroStage, 3);
  EXPECT_EQ(best.plan.offload.paramsFraction, 1.0);
  EXPECT_EQ(best.plan.offload.optimizerFraction, 1.0);
  EXPECT_GT(best.evaluation.time.offload, 0);
  EXPECT_EQ(best.plan.offload.target, OffloadTarget::kNvme);
  EXPECT_TRUE(best.evaluation.fitsHost);
  EXPECT_TRUE(best.evaluation.fits);
  // A cluster without NVMe has nowhere to put them: nothing fits.
  auto noNvme = s.cluster;
  noNvme.nvmeCapacityBytes = 0;
  auto full = search(s.model, noNvme, o);
  ASSERT_TRUE(full);
  EXPECT_FALSE(full->feasible());
  o.allowOffload = false;  // without offload nothing fits, and the reason says to allow it
  auto none = search(s.model, s.cluster, o);
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->feasible());
  EXPECT_NE(none->infeasibleReason.find("offload"), std::string::npos) << none->infeasibleReason;
}

TEST(Search, ImpossibleBudgetsAreExplained) {
  const auto s = setup("llama3-405b", "dgx-h100", 8);  // 405B on one node
  SearchOptions o;
  o.globalBatchSize = 8;
  o.allowOffload = false;
  auto r = search(s.model, s.cluster, o);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->feasible());
  EXPECT_NE(r->infeasibleReason.find("no "), std::string::npos);
  EXPECT_FALSE(r->infeasibleReason.empty());
  const Json j = r->toJson();
  EXPECT_TRUE(j["best"].is_null());
  EXPECT_TRUE(j.contains("infeasible_reason"));
}

TEST(Search, CancellationStopsEarly) {
  const auto s = setup("gpt3-175b", "dgx-a100-80gb-x128", 1024);
  SearchOptions o;
  o.globalBatchSize = 1536;
  CancellationToken cancel;
  cancel.cancel();
  auto r = search(s.model, s.cluster, o, nullptr, &cancel);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->stats.costed, 0);
}

}  // namespace
}  // namespace colo::planner
