#include "colo/core/plan.h"
#include "colo/core/runnable.h"

#include <functional>

#include <gtest/gtest.h>

#include "core/test_support.h"

namespace colo {
namespace {

// GPT-3 175B on 1,024 A100s the Megatron way: tp 8 inside a node, pp 16 interleaved, dp 8.
Plan megatronPlan() {
  Plan p;
  p.name = "gpt3-175b megatron";
  p.model = test::loadModelOrFail(test::dataFile("models/gpt3-175b.json"));
  p.cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x128.json"));
  p.parallel.tp = 8;
  p.parallel.pp = 16;
  p.parallel.dp = 8;
  p.parallel.sequenceParallel = true;
  p.parallel.virtualStages = 3;
  p.schedule = Schedule::kInterleaved;
  p.microBatchSize = 1;
  p.globalBatchSize = 1536;
  p.seqLen = 2048;
  p.zeroStage = 1;
  p.stages = uniformStages(96, 48, RecomputePolicy::kSelective);
  p.precision = DType::kBf16;
  p.execution.flashAttention = false;
  p.execution.tpCommOverlap = true;
  p.execution.gradAccumulation = GradAccumulation::kFp32Copy;
  p.execution.hostMicrosecondsPerOp = 12.5;
  p.predictions.stepTimeSeconds = 12.5;
  p.predictions.fits = true;
  p.predictions.breakdown = Json{{"compute_s", 10.0}};
  p.provenance.toolVersion = "test";
  p.provenance.modelHash = contentHash(p.model.toJson());
  p.provenance.clusterHash = contentHash(clusterToJson(p.cluster));
  return p;
}

TEST(Plan, ValidPlanRoundTripsExactly) {
  const Plan p = megatronPlan();
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const Json doc = planToJson(p);
  auto back = planFromJson(doc, "plan.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(planToJson(*back), doc);
  EXPECT_EQ(back->parallel, p.parallel);
  EXPECT_EQ(back->stages, p.stages);
  EXPECT_EQ(back->predictions, p.predictions);
  EXPECT_EQ(back->execution, p.execution);
  EXPECT_EQ(back->numMicroBatches(), 192);
  EXPECT_EQ(*back->model.spec, *p.model.spec);
}

TEST(Plan, SavedFileLoadsAnywhere) {
  test::ScratchDir dir;
  const auto file = dir.path("plan.json");
  ASSERT_TRUE(writeJsonFileAtomic(file, planToJson(megatronPlan())));
  auto loaded = loadPlan(file);
  ASSERT_TRUE(loaded) << loaded.error().toString();
  EXPECT_EQ(loaded->cluster.totalGpus(), 1024);  // the cluster travels inside the plan
}

TEST(Plan, LayerToStageFollowsInterleavedChunks) {
  Plan p = megatronPlan();
  const auto map = p.layerToStage();
  ASSERT_EQ(map.size(), 96u);
  EXPECT_EQ(map[0], 0);
  EXPECT_EQ(map[2], 1);    // chunk 1 runs on stage 1
  EXPECT_EQ(map[32], 0);   // chunk 16 wraps to stage 0 (its second model chunk)
  EXPECT_EQ(map[95], 15);
  const auto uneven = uniformStages(10, 4, RecomputePolicy::kNone);
  EXPECT_EQ(uneven[0].layers + uneven[1].layers + uneven[2].layers + uneven[3].layers, 10);
  EXPECT_EQ(uneven[0].layers, 3);
  EXPECT_EQ(uneven[3].layers, 2);
}

struct RuleCase {
  const char* what;
  std::function<void(Plan&)> edit;
  const char* path;
  const char* fragment;
};

TEST(Plan, EveryConsistencyRuleNamesFieldAndValues) {
  const std::vector<RuleCase> cases = {
      {"gpu count", [](Plan& p) { p.parallel.dp = 4; }, "/parallel", "does not match the cluster's 1024 GPUs"},
      {"heads", [](Plan& p) { p.parallel.tp = 64; p.parallel.dp = 1; p.parallel.pp = 16; }, "/parallel/tp",
       "num_attention_heads 96 is not divisible by tp 64"},
      {"sp without tp", [](Plan& p) { p.parallel.tp = 1; p.parallel.dp = 64; }, "/parallel/sequence_parallel", "needs tp > 1"},
      {"batch", [](Plan& p) { p.globalBatchSize = 1540; }, "/batch/global_batch_size", "not divisible by micro_batch_size*dp"},
      {"stage count", [](Plan& p) { p.stages.pop_back(); }, "/stages", "needs pp*virtual_stages = 48 entries, got 47"},
      {"layer sum", [](Plan& p) { p.stages[0].layers = 3; }, "/stages", "hold 97 layers but the model has 96"},
      {"recompute layers", [](Plan& p) { p.stages[1].recomputeLayers = 5; }, "/stages/1/recompute_layers", "between 0 and"},
      {"vpp needs interleaved", [](Plan& p) { p.schedule = Schedule::kOneFOneB; }, "/schedule", "needs the \"interleaved\" schedule"},
      {"interleaved micro-batches", [](Plan& p) { p.globalBatchSize = 8 * 24; }, "/batch/global_batch_size",
       "multiple of pp 16"},
      {"zero stage", [](Plan& p) { p.zeroStage = 4; }, "/zero_stage", "must be 0, 1, 2 or 3, got 4"},
      {"param offload", [](Plan& p) { p.offload.paramsFraction = 0.5; }, "/offload/params_fraction", "needs zero_stage 3"},
      {"optimizer offload", [](Plan& p) { p.zeroStage = 0; p.offload.optimizerFraction = 1; },
       "/offload/optimizer_fraction", "needs zero_stage >= 1"},
      {"precision", [](Plan& p) { p.precision = DType::kFp8; }, "/precision", "has no fp8 peak"},
      {"expert parallel", [](Plan& p) { p.parallel.ep = 2; }, "/parallel/ep", "needs a mixture-of-experts model"},
      {"expert tensor parallel", [](Plan& p) { p.parallel.etp = 2; }, "/parallel/expert_tp", "needs a mixture-of-experts model"},
      {"context parallel", [](Plan& p) { p.parallel.cp = 2; p.parallel.dp = 4; p.seqLen = 2046; p.globalBatchSize = 64 * 4; },
       "/parallel/cp", "divisible by 2*cp"},
      {"sequence too long", [](Plan& p) { p.seqLen = 4096; }, "/batch/seq_len", "exceeds the learned position table"},
      {"rank order", [](Plan& p) { p.parallel.rankOrder = {"tp", "dp", "pp"}; }, "/parallel/rank_order", "once each"},
  };
  for (const auto& c : cases) {
    Plan p = megatronPlan();
    c.edit(p);
    auto r = validatePlan(p, "plan.json");
    ASSERT_FALSE(r) << c.what;
    EXPECT_EQ(r.error().code, ErrorCode::kBadInput) << c.what;
    EXPECT_EQ(r.error().file, "plan.json") << c.what;
    EXPECT_EQ(r.error().path, c.path) << c.what << ": " << r.error().toString();
    EXPECT_NE(r.error().message.find(c.fragment), std::string::npos) << c.what << ": " << r.error().toString();
  }
}

TEST(Plan, ExpertParallelismFoldsOverTensorParallelRanksWhenTheExpertsHaveTheirOwnTp) {
  // Megatron-Core's MoE parallel folding: the expert layers' expert_tp x ep x edp mesh covers the
  // stage's tp x cp x dp ranks, so with expert_tp 1 under tp 2, ep may be twice dp*cp.
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/mixtral-8x7b.json"));
  p.cluster = *scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json")), 16);
  p.parallel.tp = 2;
  p.parallel.pp = 2;
  p.parallel.dp = 4;
  p.parallel.ep = 8;
  p.microBatchSize = 1;
  p.globalBatchSize = 64;
  p.seqLen = 4096;
  p.zeroStage = 1;
  p.stages = uniformStages(32, 2, RecomputePolicy::kNone);
  auto folded = validatePlan(p);
  ASSERT_FALSE(folded);  // expert_tp = tp: ep 8 does not divide dp*cp 4
  EXPECT_EQ(folded.error().path, "/parallel/ep");
  EXPECT_NE(folded.error().message.find("ep must divide dp*cp 4"), std::string::npos) << folded.error().message;
  p.parallel.etp = 1;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  EXPECT_EQ(p.parallel.expertTp(), 1);
  EXPECT_EQ(p.parallel.expertDp(), 1);  // tp*cp*dp / (expert_tp*ep) = 8 / 8
  const Json j = planToJson(p);
  EXPECT_EQ(j["parallel"]["expert_tp"], 1);
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->parallel.etp, 1);
  p.parallel.etp = 0;  // absent from the file: tp, and older plans keep their form
  p.parallel.ep = 4;
  EXPECT_FALSE(planToJson(p)["parallel"].contains("expert_tp"));
}

TEST(Plan, TheContextParallelExchangeIsWrittenOnlyWhenNotTheDefault) {
  Plan p = megatronPlan();
  EXPECT_FALSE(planToJson(p)["execution"].contains("cp_comm_type"));
  p.execution.cpCommType = CpCommType::kAllToAll;
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["cp_comm_type"], "a2a");
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->execution.cpCommType, CpCommType::kAllToAll);
  Json bad = j;
  bad["execution"]["cp_comm_type"] = "ring";
  auto refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/cp_comm_type");
}

TEST(Plan, ActivationOffloadNeedsOneStageNoRecomputeAndALayerKept) {
  // Megatron-Core's --cpu-offloading-num-layers: its TransformerConfig refuses pipeline parallelism,
  // recompute and as many offloaded layers as the model has; so does validatePlan, by field.
  Plan p = megatronPlan();
  p.parallel = Parallelism{};
  p.parallel.dp = 1024;
  p.globalBatchSize = 2048;
  p.schedule = Schedule::kOneFOneB;
  p.stages = uniformStages(96, 1, RecomputePolicy::kNone);
  p.offload.activationLayers = 40;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  EXPECT_EQ(planToJson(p)["offload"]["activation_layers"], 40);
  auto back = planFromJson(planToJson(p), "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->offload.activationLayers, 40);
  EXPECT_FALSE(checkRunnable(p)) << "colo-run does not offload activations";
  p.offload.activationLayers = 0;
  EXPECT_FALSE(planToJson(p)["offload"].contains("activation_layers"));  // older plans keep their form

  auto refusedWith = [](Plan q, const std::string& words) {
    auto r = validatePlan(q, "p.json");
    ASSERT_FALSE(r) << words;
    EXPECT_EQ(r.error().path, "/offload/activation_layers");
    EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
  };
  Plan gpipe = p;
  gpipe.schedule = Schedule::kGpipe;
  gpipe.offload.activationLayers = 8;
  refusedWith(gpipe, "not gpipe");
  Plan all = p;
  all.offload.activationLayers = 96;
  refusedWith(all, "at most 95");
  Plan recomputed = p;
  recomputed.offload.activationLayers = 8;
  recomputed.stages = uniformStages(96, 1, RecomputePolicy::kFull);
  refusedWith(recomputed, "recompute (full)");
  Plan piped = megatronPlan();
  piped.stages = uniformStages(96, 48, RecomputePolicy::kNone);
  piped.offload.activationLayers = 8;
  refusedWith(piped, "pp 1 without virtual stages, got pp 16 x 3");
  Json negative = planToJson(p);
  negative["offload"]["activation_layers"] = -1;
  auto refused = planFromJson(negative, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/offload/activation_layers");
}

TEST(Plan, HierarchicalContextParallelSizesRoundTrip) {
  Plan p = megatronPlan();
  p.parallel.cp = 8;  // 96 heads over tp 8: 12 per rank, over an all-to-all level of 4
  p.parallel.dp = 1;
  p.globalBatchSize = 192;
  p.execution.cpCommType = CpCommType::kA2aP2p;
  p.execution.hierarchicalCpSizes = {4, 2};
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["cp_comm_type"], "a2a+p2p");
  EXPECT_EQ(j["execution"]["hierarchical_cp_sizes"], Json::array({4, 2}));
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->execution.cpCommType, CpCommType::kA2aP2p);
  EXPECT_EQ(back->execution.hierarchicalCpSizes, (std::vector<std::int64_t>{4, 2}));
  Json bad = j;
  bad["execution"]["hierarchical_cp_sizes"] = Json::array({4, 0});
  auto refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().path.find("hierarchical_cp_sizes"), std::string::npos) << refused.error().path;
}

TEST(Plan, TheTensorParallelOverlapMethodIsWrittenOnlyWhenNotTheDefault) {
  Plan p = megatronPlan();
  p.execution.tpCommOverlap = true;
  EXPECT_FALSE(planToJson(p)["execution"].contains("tp_overlap"));  // userbuffers: older plans keep their hash
  p.execution.tpOverlap = TpOverlap::kMicroPipeline;
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["tp_overlap"], "micro_pipeline");
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->execution, p.execution);
  Json bad = j;
  bad["execution"]["tp_overlap"] = "flux";
  auto refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/tp_overlap");
}

TEST(Plan, FusedBiasGradientsAreWrittenOnlyWhenSet) {
  Plan p = megatronPlan();
  EXPECT_FALSE(planToJson(p)["execution"].contains("fused_bias_grad"));
  p.execution.fusedBiasGrad = true;
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["fused_bias_grad"], true);
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.fusedBiasGrad);
}

TEST(Plan, TransformerEngineGroupedGemmsAreWrittenOnlyWhenSet) {
  Plan p = megatronPlan();
  EXPECT_FALSE(planToJson(p)["execution"].contains("te_grouped_gemm"));
  p.execution.teGroupedGemm = true;
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["te_grouped_gemm"], true);
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.teGroupedGemm);
  Json bad = j;
  bad["execution"]["te_grouped_gemm"] = "yes";
  EXPECT_FALSE(planFromJson(bad, "p.json"));
}

TEST(Plan, AFusedCrossEntropyIsWrittenOnlyWhenSet) {
  Plan p = megatronPlan();
  EXPECT_FALSE(planToJson(p)["execution"].contains("fused_cross_entropy"));
  p.execution.fusedCrossEntropy = true;
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["fused_cross_entropy"], true);
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.fusedCrossEntropy);
  Json bad = j;
  bad["execution"]["fused_cross_entropy"] = 1;
  auto refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/fused_cross_entropy");
}

TEST(Plan, UnfusedKernelsAreANamedListWrittenOnlyWhenSet) {
  Plan p = megatronPlan();
  EXPECT_FALSE(planToJson(p)["execution"].contains("unfused_kernels"));
  ASSERT_TRUE(addUnfusedKernel(p.execution.unfused, "rmsnorm"));  // every RMSNorm, the final one too
  EXPECT_TRUE(p.execution.unfused.finalNorm);
  p.execution.unfused.gatedActivation = true;
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["unfused_kernels"], Json::array({"rmsnorm", "gated_activation"}));
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->execution.unfused, p.execution.unfused);
  Json bad = j;
  bad["execution"]["unfused_kernels"] = Json::array({"rmsnorm", "layernorm"});
  auto refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/unfused_kernels/1");
  EXPECT_NE(refused.error().message.find("layernorm"), std::string::npos);
  bad["execution"]["unfused_kernels"] = Json::array({"rotary", ""});
  refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/unfused_kernels/1");
  bad["execution"]["unfused_kernels"] = "all";
  refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/unfused_kernels");
  // The command line's form: all, none, or a comma list.
  EXPECT_EQ(parseUnfusedKernels("all").value(), UnfusedKernels::all());
  EXPECT_FALSE(parseUnfusedKernels("none")->any());
  EXPECT_TRUE(parseUnfusedKernels("rotary,rmsnorm")->rotary);
  EXPECT_FALSE(parseUnfusedKernels("rotary,gelu"));
  EXPECT_FALSE(parseUnfusedKernels("rotary,"));
  EXPECT_FALSE(parseUnfusedKernels(""));
  // The final norm alone (torchtitan's compiled blocks) has a name of its own.
  const auto finalOnly = parseUnfusedKernels("final_rmsnorm");
  ASSERT_TRUE(finalOnly);
  EXPECT_TRUE(finalOnly->finalNorm && !finalOnly->rmsNorm && finalOnly->any());
  Plan q = megatronPlan();
  q.execution.unfused = *finalOnly;
  EXPECT_EQ(planToJson(q)["execution"]["unfused_kernels"], Json::array({"final_rmsnorm"}));
  const auto qBack = planFromJson(planToJson(q), "q.json");
  ASSERT_TRUE(qBack) << qBack.error().toString();
  EXPECT_EQ(qBack->execution.unfused, *finalOnly);
  EXPECT_EQ(parseUnfusedKernels("final_rmsnorm,rmsnorm").value(), parseUnfusedKernels("rmsnorm").value());
  // Every norm eager, with or without the final one spelled out, is one choice.
  UnfusedKernels normsOnly;
  normsOnly.rmsNorm = true;
  EXPECT_EQ(normsOnly, parseUnfusedKernels("rmsnorm").value());
  EXPECT_NE(normsOnly, UnfusedKernels{.finalNorm = true});
  // The headline's label: the names in their fixed order, "/"-joined.
  EXPECT_EQ(unfusedKernelsLabel(p.execution.unfused), "rmsnorm/gated_activation");
  EXPECT_EQ(unfusedKernelsLabel(UnfusedKernels{}), "none");
}

TEST(Plan, TransformerEnginePlaceholderWgradsAreWrittenOnlyWhenSetAndNeedFusedAccumulation) {
  Plan p = megatronPlan();
  EXPECT_FALSE(planToJson(p)["execution"].contains("te_dummy_wgrads"));
  p.execution.gradAccumulation = GradAccumulation::kFused;
  p.execution.teDummyWgrads = true;
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["te_dummy_wgrads"], true);
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.teDummyWgrads);
  // TE hands autograd a placeholder only when the weight-gradient GEMM accumulates into main_grad.
  p.execution.gradAccumulation = GradAccumulation::kAutograd;
  auto refused = validatePlan(p, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/te_dummy_wgrads");
  EXPECT_NE(refused.error().message.find("autograd"), std::string::npos) << refused.error().message;
}

TEST(Plan, MegatronsNativeLossFusionIsWrittenOnlyWhenSetAndExcludesTheOtherLosses) {
  Plan p = megatronPlan();
  EXPECT_FALSE(planToJson(p)["execution"].contains("native_fused_cross_entropy"));
  p.execution.nativeFusedCrossEntropy = true;
  ASSERT_TRUE(validatePlan(p, "p.json")) << validatePlan(p, "p.json").error().toString();
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["native_fused_cross_entropy"], true);
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.nativeFusedCrossEntropy);
  for (const bool torch : {false, true}) {
    Plan two = p;
    (torch ? two.execution.torchCrossEntropy : two.execution.fusedCrossEntropy) = true;
    auto refused = validatePlan(two, "p.json");
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().path, "/execution/native_fused_cross_entropy");
    EXPECT_NE(refused.error().message.find(torch ? "torch_cross_entropy" : "fused_cross_entropy"), std::string::npos)
        << refused.error().message;
  }
}

TEST(Plan, PerParameterGathersAreWrittenOnlyWhenSetAndReadBack) {
  Plan p = megatronPlan();
  EXPECT_FALSE(planToJson(p)["execution"].contains("per_parameter_gathers"));
  p.zeroStage = 3;
  p.execution.perParameterGathers = true;
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["per_parameter_gathers"], true);
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.perParameterGathers);
  Json bad = j;
  bad["execution"]["per_parameter_gathers"] = "yes";
  auto refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/per_parameter_gathers");
}

TEST(Plan, Fp32ParametersAreWrittenOnlyWhenSet) {
  Plan p = megatronPlan();
  EXPECT_FALSE(planToJson(p)["execution"].contains("fp32_params"));
  p.execution.fp32Params = true;
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["fp32_params"], true);
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.fp32Params);
  Json bad = j;
  bad["execution"]["fp32_params"] = "yes";
  auto refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/fp32_params");
}

TEST(Plan, GradientSyncOncePerStepIsWrittenOnlyWhenSetAndColoRunRefusesIt) {
  Plan p = megatronPlan();
  p.zeroStage = 2;
  EXPECT_FALSE(planToJson(p)["execution"].contains("grad_sync"));  // older plans keep their hash
  EXPECT_TRUE(checkRunnable(p)) << checkRunnable(p).error().message;
  p.execution.gradSync = GradSync::kStep;
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["grad_sync"], "step");
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->execution.gradSync, GradSync::kStep);
  auto runs = checkRunnable(*back);
  ASSERT_FALSE(runs);
  EXPECT_NE(runs.error().message.find("grad_sync"), std::string::npos) << runs.error().message;
  Json bad = j;
  bad["execution"]["grad_sync"] = "sometimes";
  auto refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/grad_sync");
}

TEST(Plan, Float8RecipeIsWrittenOnlyWhenTorchaosAndNeedsFp8) {
  Plan p = megatronPlan();
  p.cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x2048.json"));  // fp8 needs Hopper
  p.parallel.dp = 128;
  p.globalBatchSize = 2048;  // 16 micro-batches a replica, a multiple of pp
  p.provenance.clusterHash = contentHash(clusterToJson(p.cluster));
  p.precision = DType::kFp8;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  EXPECT_FALSE(planToJson(p)["execution"].contains("float8_recipe"));
  p.execution.float8Recipe = Float8Recipe::kRowwiseGwHp;
  Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["float8_recipe"], "rowwise_with_gw_hp");
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->execution.float8Recipe, Float8Recipe::kRowwiseGwHp);
  Json unknown = j;
  unknown["execution"]["float8_recipe"] = "nvfp8";
  auto refused = planFromJson(unknown, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/float8_recipe");
  // MXFP8 is Transformer Engine's Blackwell recipe: refused on Hopper, by name.
  Json mx = j;
  mx["execution"]["float8_recipe"] = "mxfp8";
  auto hopper = planFromJson(mx, "p.json");
  ASSERT_FALSE(hopper);
  EXPECT_EQ(hopper.error().path, "/execution/float8_recipe");
  EXPECT_NE(hopper.error().message.find("Blackwell"), std::string::npos) << hopper.error().message;
  Json bf16 = j;
  bf16["precision"] = "bf16";
  auto notFp8 = planFromJson(bf16, "p.json");
  ASSERT_FALSE(notFp8);
  EXPECT_EQ(notFp8.error().path, "/execution/float8_recipe");
  EXPECT_NE(notFp8.error().message.find("bf16"), std::string::npos) << notFp8.error().message;
}

TEST(Plan, QuantizedParamsAreWrittenOnlyWhenSetAndNeedTransformerEnginesFp8OrFp4AndTheDistributedOptimizer) {
  Plan p = megatronPlan();
  auto blackwell = scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-b200-x64.json")), 512);  // MXFP8 needs Blackwell
  ASSERT_TRUE(blackwell) << blackwell.error().toString();
  p.cluster = *blackwell;
  p.parallel.dp = 4;
  p.globalBatchSize = 1536;
  p.provenance.clusterHash = contentHash(clusterToJson(p.cluster));
  p.precision = DType::kFp8;
  EXPECT_FALSE(planToJson(p)["execution"].contains("quantized_params"));
  p.execution.float8Recipe = Float8Recipe::kMxfp8;
  p.execution.quantizedParams = true;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["quantized_params"], true);
  EXPECT_EQ(j["execution"]["float8_recipe"], "mxfp8");
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.quantizedParams);
  EXPECT_EQ(back->execution.float8Recipe, Float8Recipe::kMxfp8);
  auto refusedWith = [&](const std::function<void(Plan&)>& change, const std::string& word) {
    Plan q = p;
    change(q);
    auto r = validatePlan(q);
    ASSERT_FALSE(r) << word;
    EXPECT_EQ(r.error().path, "/execution/quantized_params") << r.error().toString();
    EXPECT_NE(r.error().message.find(word), std::string::npos) << r.error().message;
  };
  refusedWith([](Plan& q) { q.precision = DType::kBf16; q.execution.float8Recipe = Float8Recipe::kTransformerEngine; }, "bf16");
  refusedWith([](Plan& q) { q.execution.float8Recipe = Float8Recipe::kTensorwise; }, "tensorwise");
  refusedWith([](Plan& q) { q.zeroStage = 0; }, "zero_stage 0");
  refusedWith([](Plan& q) { q.zeroStage = 3; }, "zero_stage 3");
  refusedWith([](Plan& q) { q.execution.fp32Params = true; }, "fp32_params");
  // fp4 (NVFP4) keeps its weights quantized as Megatron's --fp4-param-gather does.
  Plan fp4 = p;
  fp4.precision = DType::kFp4;
  fp4.execution.float8Recipe = Float8Recipe::kTransformerEngine;
  EXPECT_TRUE(validatePlan(fp4)) << validatePlan(fp4).error().toString();
}

TEST(Plan, MoeDispatchAndExpertOverlapAreWrittenOnlyWhenSetAndColoRunRefusesThem) {
  Plan p = megatronPlan();
  EXPECT_FALSE(planToJson(p)["execution"].contains("moe_dispatcher"));
  EXPECT_FALSE(planToJson(p)["execution"].contains("ep_comm_overlap"));
  p.execution.moeDispatcher = MoeDispatcher::kDeepEp;
  Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["moe_dispatcher"], "deepep");
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->execution.moeDispatcher, MoeDispatcher::kDeepEp);
  EXPECT_FALSE(checkRunnable(*back));
  // NVIDIA's HybridEP, the flex dispatcher's other hierarchical backend, reads back as itself.
  Json hybrid = j;
  hybrid["execution"]["moe_dispatcher"] = "hybridep";
  auto hybridBack = planFromJson(hybrid, "p.json");
  ASSERT_TRUE(hybridBack) << hybridBack.error().toString();
  EXPECT_EQ(hybridBack->execution.moeDispatcher, MoeDispatcher::kHybridEp);
  EXPECT_EQ(planToJson(*hybridBack)["execution"]["moe_dispatcher"], "hybridep");
  Json bad = j;
  bad["execution"]["moe_dispatcher"] = "nvshmem";
  auto refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/moe_dispatcher");
  // The overlap is written when set, and refused where Megatron-Core refuses it (no expert parallelism).
  p.execution.epCommOverlap = true;
  j = planToJson(p);
  EXPECT_EQ(j["execution"]["ep_comm_overlap"], true);
  auto noExperts = planFromJson(j, "p.json");
  ASSERT_FALSE(noExperts);
  EXPECT_EQ(noExperts.error().path, "/execution/ep_comm_overlap");
}

TEST(Plan, TheOptimizerIsWrittenOnlyWhenNotAdamW) {
  Plan p = megatronPlan();
  EXPECT_FALSE(planToJson(p).contains("optimizer"));  // older plans keep their hash
  for (const Optimizer o : {Optimizer::kLamb, Optimizer::kLars}) {
    p.optimizer = o;
    auto back = planFromJson(planToJson(p), "p.json");
    ASSERT_TRUE(back) << back.error().toString();
    EXPECT_EQ(back->optimizer, o);
  }
  Json bad = planToJson(p);
  bad["optimizer"] = "sgd";
  auto refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/optimizer");
  EXPECT_NE(refused.error().message.find("adamw, lamb, lars"), std::string::npos);
}

TEST(Plan, KvHeadsMustSplitAcrossTensorParallelRanks) {
  Plan p = megatronPlan();
  p.model = test::loadModelOrFail(test::dataFile("models/llama2-70b.json"));
  p.seqLen = 4096;
  p.parallel = Parallelism{};
  p.parallel.tp = 16;  // 64 heads divide, 8 kv heads do not
  p.parallel.dp = 64;
  p.schedule = Schedule::kOneFOneB;
  p.stages = uniformStages(80, 1, RecomputePolicy::kNone);
  p.provenance = {};
  p.globalBatchSize = 1024;
  auto r = validatePlan(p);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("num_kv_heads 8 is not divisible by tp 16"), std::string::npos);
}

TEST(Plan, EditedEmbeddedModelIsDetected) {
  Json doc = planToJson(megatronPlan());
  doc["model"]["num_layers"] = 48;
  doc["stages"] = Json::array();
  for (int i = 0; i < 48; ++i) doc["stages"].push_back({{"layers", 1}});
  auto r = planFromJson(doc, "plan.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().path, "/provenance/model_hash");
}

TEST(Plan, EveryRecomputePolicyRoundTrips) {
  for (const RecomputePolicy policy :
       {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull, RecomputePolicy::kOp}) {
    Plan p = megatronPlan();
    for (auto& st : p.stages) {
      st.recompute = policy;
      st.recomputeLayers = policy == RecomputePolicy::kNone ? 0 : st.layers;
    }
    auto back = planFromJson(planToJson(p), "plan.json");
    ASSERT_TRUE(back) << back.error().toString();
    EXPECT_EQ(back->stages, p.stages) << toString(policy);
  }
  Json doc = planToJson(megatronPlan());
  doc["stages"][0]["recompute"] = "sometimes";
  auto bad = planFromJson(doc, "plan.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().toString().find("none, selective, full, op"), std::string::npos) << bad.error().toString();
}

TEST(Plan, BadFieldsInsideTheFileNameTheirPath) {
  Json doc = planToJson(megatronPlan());
  doc["model"]["hidden_size"] = -1;
  auto embedded = planFromJson(doc, "plan.json");
  ASSERT_FALSE(embedded);
  EXPECT_EQ(embedded.error().path, "/model/hidden_size");

  doc = planToJson(megatronPlan());
  doc["cluster"]["links"][0]["latency_us"] = -2;
  auto cluster = planFromJson(doc, "plan.json");
  ASSERT_FALSE(cluster);
  EXPECT_EQ(cluster.error().path, "/cluster/links/0/latency_us");

  doc = planToJson(megatronPlan());
  doc["schedule"] = "pipedream";
  auto schedule = planFromJson(doc, "plan.json");
  ASSERT_FALSE(schedule);
  EXPECT_EQ(schedule.error().path, "/schedule");

  doc = planToJson(megatronPlan());
  doc["parallel"]["tensor_parallel"] = 8;
  auto unknown = planFromJson(doc, "plan.json");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().path, "/parallel/tensor_parallel");

  doc = planToJson(megatronPlan());
  doc["execution"]["grad_accumulation"] = "lazy";
  auto accumulation = planFromJson(doc, "plan.json");
  ASSERT_FALSE(accumulation);
  EXPECT_EQ(accumulation.error().path, "/execution/grad_accumulation");

  doc = planToJson(megatronPlan());
  doc["execution"].erase("grad_accumulation");  // older plan files: the fused default, the eager host
  doc["execution"].erase("host_us_per_op");
  auto older = planFromJson(doc, "plan.json");
  ASSERT_TRUE(older) << older.error().toString();
  EXPECT_EQ(older->execution.gradAccumulation, GradAccumulation::kFused);
  EXPECT_EQ(older->execution.hostMicrosecondsPerOp, kEagerHostMicrosecondsPerOp);

  doc = planToJson(megatronPlan());
  doc["execution"]["host_us_per_op"] = -1;
  auto negative = planFromJson(doc, "plan.json");
  ASSERT_FALSE(negative);
  EXPECT_EQ(negative.error().path, "/execution/host_us_per_op");
}

TEST(Plan, StagesDefaultToAnEvenSplitOnlyWhenItIsEven) {
  Json doc = planToJson(megatronPlan());
  doc.erase("stages");
  doc["provenance"].erase("model_hash");
  EXPECT_TRUE(planFromJson(doc, "p.json"));
  doc["parallel"]["virtual_stages"] = 5;  // 96 layers into 80 chunks
  auto r = planFromJson(doc, "p.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().path, "/stages");
}

TEST(Plan, RecomputeModulesAreMegatronsNamesWrittenOnlyWhenNotTheAttentionCoreAlone) {
  // Megatron-Core's --recompute-modules: core_attn when unset, so the default writes nothing.
  Plan p = megatronPlan();  // selective recompute in every chunk
  EXPECT_TRUE(p.execution.recomputeModules.coreAttn);
  EXPECT_FALSE(planToJson(p)["execution"].contains("recompute_modules"));
  // A dense model's MLP and norms: read back as written, in Megatron's order.
  auto modules = parseRecomputeModules("mlp,layernorm");
  ASSERT_TRUE(modules) << modules.error().toString();
  EXPECT_FALSE(modules->coreAttn);  // a list replaces the default, as in Megatron
  p.execution.recomputeModules = *modules;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const Json j = planToJson(p);
  EXPECT_EQ(j["execution"]["recompute_modules"], Json::array({"layernorm", "mlp"}));
  auto back = planFromJson(j, "p.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->execution.recomputeModules, p.execution.recomputeModules);
  EXPECT_EQ(recomputeModulesLabel(back->execution.recomputeModules), "layernorm+mlp");
  // The empty list (selective recompute of nothing) is kept apart from the default.
  p.execution.recomputeModules = *parseRecomputeModules("none");
  EXPECT_EQ(planToJson(p)["execution"]["recompute_modules"], Json::array());
  EXPECT_EQ(planFromJson(planToJson(p), "p.json")->execution.recomputeModules, RecomputeModules::none());
  // Unknown names: the file, its element and the name.
  Json bad = j;
  bad["execution"]["recompute_modules"] = Json::array({"mlp", "attention"});
  auto refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/recompute_modules/1");
  EXPECT_NE(refused.error().message.find("attention"), std::string::npos);
  bad["execution"]["recompute_modules"] = "mlp";
  refused = planFromJson(bad, "p.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().path, "/execution/recompute_modules");
  EXPECT_FALSE(parseRecomputeModules("mlp,"));
  EXPECT_FALSE(parseRecomputeModules("mlp,gelu"));
  // Megatron-Core's rules: moe_act needs an MoE model, mla_up_proj latent attention.
  auto refusedWith = [](Plan q, const std::string& words) {
    auto r = validatePlan(q, "p.json");
    ASSERT_FALSE(r) << words;
    EXPECT_EQ(r.error().path, "/execution/recompute_modules");
    EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
  };
  Plan dense = megatronPlan();
  dense.execution.recomputeModules = *parseRecomputeModules("moe_act");
  refusedWith(dense, "mixture-of-experts");
  dense.execution.recomputeModules = *parseRecomputeModules("mla_up_proj");
  refusedWith(dense, "latent attention");
  // colo-run re-runs the attention core only.
  Plan runnable = megatronPlan();
  ASSERT_TRUE(checkRunnable(runnable)) << checkRunnable(runnable).error().message;
  runnable.execution.recomputeModules = *parseRecomputeModules("mlp");
  auto why = checkRunnable(runnable);
  ASSERT_FALSE(why);
  EXPECT_NE(why.error().message.find("recompute_modules = mlp"), std::string::npos) << why.error().message;
}

}  // namespace
}  // namespace colo
