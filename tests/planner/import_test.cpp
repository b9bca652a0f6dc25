#include "colo/planner/import.h"
#include "colo/planner/launch.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "colo/core/library.h"
#include "colo/costmodel/evaluator.h"
#include "colo/planner/export.h"
#include "colo/planner/export_check.h"
#include "core/test_support.h"

namespace colo::planner {
namespace {

Plan basePlan(const std::string& model, const std::string& cluster, std::int64_t gpus, std::int64_t tp, std::int64_t pp,
              std::int64_t cp, std::int64_t ep, std::int64_t vpp, std::int64_t gbs, RecomputePolicy recompute) {
  Plan p;
  p.name = model;
  p.model = test::loadModelOrFail(test::dataFile("models/" + model + ".json"));
  auto c = scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/" + cluster + ".json")), gpus);
  EXPECT_TRUE(c);
  p.cluster = *c;
  p.parallel.tp = tp;
  p.parallel.pp = pp;
  p.parallel.cp = cp;
  p.parallel.ep = ep;
  p.parallel.dp = gpus / (tp * pp * cp);
  p.parallel.virtualStages = vpp;
  p.parallel.sequenceParallel = tp > 1;
  if (vpp > 1) p.schedule = Schedule::kInterleaved;
  p.microBatchSize = 1;
  p.globalBatchSize = gbs;
  p.seqLen = p.model.defaultSeqLen();
  p.zeroStage = 1;
  p.stages = uniformStages(p.model.numLayers(), pp * vpp, recompute);
  EXPECT_TRUE(validatePlan(p)) << model << ": " << validatePlan(p).error().toString();
  return p;
}

// The rules of Megatron-LM's argument schema that `args` breaks on `gpus` GPUs, each with its message
// (empty: Megatron would start).
std::map<std::string, std::string> megatronRules(const std::string& args, std::int64_t gpus) {
  auto schema = loadExportSchema("megatron-lm");
  if (!schema) {
    ADD_FAILURE() << schema.error().toString();
    return {{"schema", schema.error().toString()}};
  }
  std::map<std::string, std::string> rules;
  for (const auto& problem : checkMegatronArguments(args, *schema, gpus)) rules.emplace(problem.rule, problem.message);
  return rules;
}

// What an export carries and an import must give back.
void expectSamePlan(const Plan& a, const Plan& b, const std::string& what, bool execution = true) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.offload.activationLayers, b.offload.activationLayers);
  EXPECT_EQ(a.parallel.tp, b.parallel.tp);
  EXPECT_EQ(a.parallel.pp, b.parallel.pp);
  EXPECT_EQ(a.parallel.dp, b.parallel.dp);
  EXPECT_EQ(a.parallel.cp, b.parallel.cp);
  EXPECT_EQ(a.parallel.ep, b.parallel.ep);
  EXPECT_EQ(a.parallel.expertTp(), b.parallel.expertTp());
  EXPECT_EQ(a.parallel.virtualStages, b.parallel.virtualStages);
  EXPECT_EQ(a.parallel.sequenceParallel, b.parallel.sequenceParallel);
  EXPECT_EQ(a.microBatchSize, b.microBatchSize);
  EXPECT_EQ(a.globalBatchSize, b.globalBatchSize);
  EXPECT_EQ(a.seqLen, b.seqLen);
  EXPECT_EQ(a.zeroStage, b.zeroStage);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.schedule, b.schedule);
  EXPECT_EQ(a.offload.optimizerFraction, b.offload.optimizerFraction);
  ASSERT_EQ(a.stages.size(), b.stages.size());
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    EXPECT_EQ(a.stages[s].layers, b.stages[s].layers) << "stage " << s;
    EXPECT_EQ(a.stages[s].recompute, b.stages[s].recompute) << "stage " << s;
    EXPECT_EQ(a.stages[s].recomputeLayers, b.stages[s].recomputeLayers) << "stage " << s;
  }
  if (!execution) return;
  EXPECT_EQ(a.execution.flashAttention, b.execution.flashAttention);
  EXPECT_EQ(a.execution.flashAttention2, b.execution.flashAttention2);
  EXPECT_EQ(a.execution.tpCommOverlap, b.execution.tpCommOverlap);
  EXPECT_EQ(a.execution.cpCommType, b.execution.cpCommType);
  EXPECT_EQ(a.execution.hierarchicalCpSizes, b.execution.hierarchicalCpSizes);
  EXPECT_EQ(a.execution.gradAccumulation, b.execution.gradAccumulation);
  EXPECT_EQ(a.execution.moeDispatcher, b.execution.moeDispatcher);
  EXPECT_EQ(a.execution.epCommOverlap, b.execution.epCommOverlap);
  EXPECT_EQ(a.execution.fusedBiasGrad, b.execution.fusedBiasGrad);
  EXPECT_EQ(a.execution.teGroupedGemm, b.execution.teGroupedGemm);
  EXPECT_EQ(a.execution.teDummyWgrads, b.execution.teDummyWgrads);
  EXPECT_EQ(a.execution.perParameterGathers, b.execution.perParameterGathers);
  EXPECT_EQ(a.execution.gradNanCheck, b.execution.gradNanCheck);
  EXPECT_EQ(a.execution.overlapP2pComm, b.execution.overlapP2pComm);
  EXPECT_EQ(a.execution.unfused, b.execution.unfused);
  EXPECT_EQ(a.execution.nativeFusedCrossEntropy, b.execution.nativeFusedCrossEntropy);
  EXPECT_EQ(a.execution.float8Recipe, b.execution.float8Recipe);
  EXPECT_EQ(a.execution.quantizedParams, b.execution.quantizedParams);
}

std::vector<Plan> roundTripPlans() {
  std::vector<Plan> plans{
      basePlan("llama3-8b", "dgx-h100", 8, 2, 2, 1, 1, 2, 64, RecomputePolicy::kNone),
      basePlan("gpt3-175b", "dgx-a100-80gb-x128", 1024, 8, 16, 1, 1, 1, 1536, RecomputePolicy::kFull),
      basePlan("mixtral-8x7b", "dgx-h100-x64", 64, 2, 2, 1, 8, 1, 256, RecomputePolicy::kSelective),
      basePlan("llama3-70b", "dgx-h100-x64", 64, 8, 1, 2, 1, 1, 64, RecomputePolicy::kSelective),
      basePlan("gemma-3-27b", "dgx-h100-x64", 64, 8, 2, 1, 1, 1, 64, RecomputePolicy::kFull),
  };
  // Uneven first and last stages, block recompute of some layers, all-gather CP, optimizer offload.
  plans[1].stages = {{4, RecomputePolicy::kFull, 2}};
  for (int s = 0; s < 14; ++s) plans[1].stages.push_back({6, RecomputePolicy::kFull, 2});
  plans[1].stages.push_back({8, RecomputePolicy::kFull, 2});
  plans[3].execution.cpCommType = CpCommType::kAllGather;
  // The flash-attn package's kernels (--attention-backend flash), not Transformer Engine's choice (auto).
  plans[2].execution.flashAttention2 = true;
  // Unequal middle stages (colo's balancing): Megatron's --pipeline-model-parallel-layout.
  Plan balanced = basePlan("llama3-70b", "dgx-h100-x64", 64, 8, 8, 1, 1, 1, 64, RecomputePolicy::kNone);
  const std::int64_t split[] = {9, 10, 10, 10, 10, 11, 11, 9};
  for (std::size_t st = 0; st < 8; ++st) balanced.stages[st].layers = split[st];
  plans.push_back(balanced);
  plans[4].offload.optimizerFraction = 0.5;
  // The Megatron export is a Transformer Engine job (Megatron-LM's default): its plans say so.
  for (auto& p : plans) p.execution.fusedBiasGrad = p.execution.teDummyWgrads = p.execution.gradNanCheck = true;
  // ... whose experts run through Transformer Engine's GroupedLinear (--moe-grouped-gemm).
  for (auto& p : plans) p.execution.teGroupedGemm = p.model.spec && p.model.spec->moe.enabled();
  for (auto& p : plans) EXPECT_TRUE(validatePlan(p)) << p.name << ": " << validatePlan(p).error().toString();
  return plans;
}

TEST(Import, MegatronExportThenImportGivesBackThePlan) {
  for (const auto& p : roundTripPlans()) {
    const auto args = exportPlan(p, ExportFormat::kMegatron, "plan.json");
    ASSERT_TRUE(args) << p.name << ": " << args.error().toString();
    ImportContext context{p.cluster, p.model, 0, 0};
    auto back = importMegatron(*args, context);
    ASSERT_TRUE(back) << p.name << ": " << back.error().toString() << "\n" << *args;
    expectSamePlan(p, *back, p.name);
  }
}

TEST(Import, ActivationOffloadRoundTripsThroughMegatronAndBridge) {
  // Megatron-Bridge's Llama 3 70B recipe on 64 GB200s: FSDP (ZeRO-3), pp 1, the activations of 40 of
  // its 80 layers offloaded (model.cpu_offloading_num_layers; Megatron-LM's --cpu-offloading-num-layers).
  Plan p = basePlan("llama3-70b", "gb200-nvl72", 64, 1, 1, 1, 1, 1, 128, RecomputePolicy::kNone);
  p.zeroStage = 1;
  p.execution.fusedBiasGrad = p.execution.teDummyWgrads = p.execution.gradNanCheck = true;  // Megatron-LM's defaults with TE
  p.offload.activationLayers = 40;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const auto args = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(args) << args.error().toString();
  EXPECT_NE(args->find("--cpu-offloading-num-layers 40"), std::string::npos);
  EXPECT_TRUE(megatronRules(*args, 64).empty()) << megatronRules(*args, 64).begin()->second;
  const ImportContext context{p.cluster, p.model, 0, 0};
  auto back = importMegatron(*args, context);
  ASSERT_TRUE(back) << back.error().toString();
  expectSamePlan(p, *back, "activation offload");
  EXPECT_EQ(back->offload.activationLayers, 40);
  // Megatron refuses it beside recompute or pipeline parallelism, and so does the export check.
  EXPECT_EQ(megatronRules(*args + " \\\n--recompute-activations\n", 64).count("activation_offload"), 1u);
  EXPECT_EQ(megatronRules(*args + " \\\n--cpu-offloading-num-layers 80\n", 64).count("activation_offload"), 1u);
  // Bridge's keys: cpu_offloading is the switch, without which the count does nothing (its GPT-OSS
  // defaults set a count alone), and cpu_offloading_activations false offloads no activation.
  const std::string job = "train:\n  global_batch_size: 128\n  micro_batch_size: 1\nmodel:\n  cpu_offloading_num_layers: 40\n";
  auto bridge = importMegatronBridge(job + "  cpu_offloading: true\n", context);
  ASSERT_TRUE(bridge) << bridge.error().toString();
  EXPECT_EQ(bridge->offload.activationLayers, 40);
  for (const std::string& without : {std::string(""), std::string("  cpu_offloading: false\n"),
                                     std::string("  cpu_offloading: true\n  cpu_offloading_activations: false\n")}) {
    auto none = importMegatronBridge(job + without + "  pipeline_model_parallel_size: 4\n", context);
    ASSERT_TRUE(none) << without << none.error().toString();
    EXPECT_EQ(none->offload.activationLayers, 0) << without;
  }
  // A distillation job (Bridge's examples/distillation override files) runs a teacher beside the
  // student: refused by name, not costed as the student alone.
  auto distill = importMegatronBridge(job + "  teacher:\n    tensor_model_parallel_size: 2\n  kd_config:\n    skip_lm_loss: true\n",
                                      context);
  ASSERT_FALSE(distill);
  EXPECT_NE(distill.error().message.find("model.teacher: knowledge distillation"), std::string::npos) << distill.error().message;
  // DeepSpeed has no such offload: its config says the job keeps them on the GPU.
  const auto ds = exportPlan(p, ExportFormat::kDeepSpeed, "plan.json");
  ASSERT_TRUE(ds) << ds.error().toString();
  EXPECT_NE(ds->find("offloads the activations of its first 40 layers"), std::string::npos);
}

TEST(Import, MegatronsEmbeddingAndLossMayHoldAPipelineChunkEach) {
  // Megatron-Bridge's Llama 3.1 405B recipes count the embedding and the loss as a layer each in the
  // pipeline split (account_for_embedding/loss_in_pipeline_split): 126 + 2 over pp 16 x 8 virtual
  // stages is one per chunk, so the first chunk holds the embedding alone and the last the loss alone.
  Plan p = basePlan("llama3-405b", "dgx-h100-x64", 512, 8, 16, 1, 1, 4, 512, RecomputePolicy::kNone);
  p.parallel.virtualStages = 8;
  p.stages.assign(128, StagePlan{1, RecomputePolicy::kNone, 0});
  p.stages.front().layers = p.stages.back().layers = 0;
  p.execution.fusedBiasGrad = p.execution.teDummyWgrads = p.execution.gradNanCheck = true;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const auto ev = costmodel::evaluatePlan(p);
  ASSERT_TRUE(ev) << ev.error().toString();
  EXPECT_GT(ev->stepSeconds, 0);
  EXPECT_TRUE(std::isfinite(ev->stepSeconds));
  // Only the chunks at the two ends may be empty.
  Plan hollow = p;
  hollow.stages[5].layers = 0;
  hollow.stages[6].layers = 2;
  ASSERT_FALSE(validatePlan(hollow));
  EXPECT_NE(validatePlan(hollow).error().toString().find("/stages/5/layers"), std::string::npos);
  // The export says it as a layout, which comes back as the same plan.
  const auto args = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(args) << args.error().toString();
  EXPECT_NE(args->find("\"E|t|t|"), std::string::npos);
  EXPECT_NE(args->find("|t|L\""), std::string::npos);
  const ImportContext context{p.cluster, p.model, 0, 0};
  auto back = importMegatron(*args, context);
  ASSERT_TRUE(back) << back.error().toString();
  expectSamePlan(p, *back, "layout");
  // Megatron's own flags give the same split, the virtual stages counted with the embedding and loss.
  std::string flags = *args;
  const std::size_t at = flags.find("--pipeline-model-parallel-layout");
  flags.erase(at, flags.find('\n', at) + 1 - at);
  flags += " \\\n--num-layers-per-virtual-pipeline-stage 1 \\\n--account-for-embedding-in-pipeline-split \\\n--account-for-loss-in-pipeline-split\n";
  auto accounted = importMegatron(flags, context);
  ASSERT_TRUE(accounted) << accounted.error().toString();
  expectSamePlan(p, *accounted, "account flags");
  // The embedding alone over pp 16 without virtual stages: 127 does not split, as Megatron asserts.
  std::string uneven = *args;
  uneven.erase(uneven.find("--pipeline-model-parallel-layout"), uneven.find('\n', uneven.find("--pipeline-model-parallel-layout")) + 1 -
                                                                   uneven.find("--pipeline-model-parallel-layout"));
  auto refused = importMegatron(uneven + " \\\n--account-for-embedding-in-pipeline-split\n", context);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("do not split evenly over pp 16"), std::string::npos) << refused.error().toString();
}

// Megatron-LM's rank layouts: tp-cp-dp-pp by default, tp-cp-pp-dp with --use-tp-pp-dp-mapping; any other
// order goes out with a note and comes back as the default.
TEST(Import, MegatronRankOrderSurvivesExportAndImport) {
  Plan p = roundTripPlans()[0];
  p.parallel.rankOrder = {"tp", "cp", "pp", "dp"};
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const auto args = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(args);
  EXPECT_NE(args->find("--use-tp-pp-dp-mapping"), std::string::npos) << *args;
  auto problems = checkExport(p, ExportFormat::kMegatron, *args);
  ASSERT_TRUE(problems);
  EXPECT_TRUE(problems->empty()) << problems->front().rule << ": " << problems->front().message;
  auto back = importMegatron(*args, ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->parallel.rankOrder, p.parallel.rankOrder);
  p.parallel.rankOrder = {"cp", "tp", "dp", "pp"};
  const auto other = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(other);
  EXPECT_NE(other->find("# note: Megatron-LM lays ranks out tp-cp-dp-pp"), std::string::npos) << *other;
  EXPECT_EQ(other->find("--use-tp-pp-dp-mapping \\\n"), std::string::npos) << *other;
  // With pipelining, Megatron-Core takes the pp-before-dp order only where the experts' data-parallel
  // size equals the dense one: Mixtral at tp 2, pp 2, ep 8 does not, so a note instead of the flag.
  Plan moe = roundTripPlans()[2];
  moe.parallel.rankOrder = {"tp", "cp", "pp", "dp"};
  ASSERT_TRUE(validatePlan(moe)) << validatePlan(moe).error().toString();
  const auto moeArgs = exportPlan(moe, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(moeArgs);
  EXPECT_EQ(moeArgs->find("--use-tp-pp-dp-mapping \\\n"), std::string::npos) << *moeArgs;
  EXPECT_NE(moeArgs->find("the plan's tp-cp-pp-dp is neither"), std::string::npos) << *moeArgs;
}

TEST(Import, MegatronMoeDispatchAndExpertOverlapSurviveExportAndImport) {
  // DeepEP through the flex dispatcher and Megatron-Core's expert all-to-all overlap: emitted, accepted
  // by the argument schema, read back.
  Plan p = basePlan("mixtral-8x7b", "dgx-h100-x64", 64, 2, 1, 1, 8, 1, 256, RecomputePolicy::kSelective);
  p.execution.moeDispatcher = MoeDispatcher::kDeepEp;
  p.execution.epCommOverlap = true;
  p.execution.teGroupedGemm = true;                                // --moe-grouped-gemm: TE's GroupedLinear
  p.execution.fusedBiasGrad = p.execution.teDummyWgrads = true;  // Megatron's default Transformer Engine
  p.execution.gradNanCheck = true;                                 // and NaN check
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const auto args = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(args) << args.error().toString();
  for (const char* flag : {"--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep", "--overlap-moe-expert-parallel-comm",
                           "--moe-grouped-gemm"}) {
    EXPECT_NE(args->find(flag), std::string::npos) << flag << "\n" << *args;
  }
  EXPECT_EQ(megatronRules(*args, p.cluster.totalGpus()), (std::map<std::string, std::string>{}));
  auto back = importMegatron(*args, ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_TRUE(back) << back.error().toString();
  expectSamePlan(p, *back, "mixtral deepep");
  // Megatron-LM's own linears, or the legacy grouped GEMM: one grouped kernel, not TE's GroupedLinear.
  for (const char* extra : {" --transformer-impl local", " --moe-use-legacy-grouped-gemm"}) {
    auto other = importMegatron(*args + extra, ImportContext{p.cluster, p.model, 0, 0});
    ASSERT_TRUE(other) << extra << ": " << other.error().toString();
    EXPECT_FALSE(other->execution.teGroupedGemm) << extra;
  }
  // The schema's rules: the overlap needs virtual stages under pipelining; DeepEP needs flex.
  std::string piped = *args;
  piped.replace(piped.find("--pipeline-model-parallel-size 1"), 32, "--pipeline-model-parallel-size 2");
  EXPECT_TRUE(megatronRules(piped, 64).contains("ep_overlap"));
  std::string plainA2a = *args;
  plainA2a.replace(plainA2a.find("--moe-token-dispatcher-type flex"), 32, "--moe-token-dispatcher-type alltoall --moe-enable-deepep");
  EXPECT_TRUE(megatronRules(plainA2a, 64).contains("deepep_flex"));
  // HybridEP, the flex dispatcher's other hierarchical backend, round-trips as itself; ncclep reads as
  // plain all-to-alls.
  p.execution.moeDispatcher = MoeDispatcher::kHybridEp;
  const auto hybrid = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(hybrid) << hybrid.error().toString();
  EXPECT_NE(hybrid->find("--moe-flex-dispatcher-backend hybridep"), std::string::npos) << *hybrid;
  EXPECT_EQ(megatronRules(*hybrid, p.cluster.totalGpus()), (std::map<std::string, std::string>{}));
  auto hybridBack = importMegatron(*hybrid, ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_TRUE(hybridBack) << hybridBack.error().toString();
  expectSamePlan(p, *hybridBack, "mixtral hybridep");
  std::string nccl = *hybrid;
  nccl.replace(nccl.find("--moe-flex-dispatcher-backend hybridep"), 38, "--moe-flex-dispatcher-backend ncclep");
  auto ncclBack = importMegatron(nccl, ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_TRUE(ncclBack) << ncclBack.error().toString();
  EXPECT_EQ(ncclBack->execution.moeDispatcher, MoeDispatcher::kAllToAll);
  // --moe-enable-deepep sets the backend to deepep (over ncclep) and is refused beside hybridep, by the
  // import and by the checker.
  auto forced = importMegatron(nccl + " \\\n--moe-enable-deepep", ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_TRUE(forced) << forced.error().toString();
  EXPECT_EQ(forced->execution.moeDispatcher, MoeDispatcher::kDeepEp);
  auto twoBackends = importMegatron(*hybrid + " \\\n--moe-enable-deepep", ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_FALSE(twoBackends);
  EXPECT_NE(twoBackends.error().message.find("--moe-enable-deepep"), std::string::npos) << twoBackends.error().toString();
  EXPECT_TRUE(megatronRules(*hybrid + " \\\n--moe-enable-deepep", 64).contains("deepep_flex"));
}

TEST(Import, MegatronHierarchicalContextParallelismSurvivesExportAndImport) {
  // --cp-comm-type a2a+p2p with --hierarchical-context-parallel-sizes: emitted, accepted by the schema
  // and its rule (the sizes multiply to cp), read back.
  Plan p = basePlan("llama3-70b", "dgx-h100-x64", 64, 4, 1, 4, 1, 1, 64, RecomputePolicy::kSelective);
  p.execution.cpCommType = CpCommType::kA2aP2p;
  p.execution.hierarchicalCpSizes = {2, 2};
  p.execution.fusedBiasGrad = p.execution.teDummyWgrads = p.execution.gradNanCheck = true;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const auto args = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(args) << args.error().toString();
  EXPECT_NE(args->find("--cp-comm-type a2a+p2p"), std::string::npos) << *args;
  EXPECT_NE(args->find("--hierarchical-context-parallel-sizes 2 2"), std::string::npos) << *args;
  EXPECT_EQ(megatronRules(*args, p.cluster.totalGpus()), (std::map<std::string, std::string>{}));
  auto back = importMegatron(*args, ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_TRUE(back) << back.error().toString();
  expectSamePlan(p, *back, "hierarchical cp");
  EXPECT_EQ(back->execution.hierarchicalCpSizes, p.execution.hierarchicalCpSizes);
  // Megatron reads the sizes only for a2a+p2p: beside the default ring they are left out.
  std::string ringWithSizes = *args;
  ringWithSizes.replace(ringWithSizes.find("--cp-comm-type a2a+p2p"), 22, "--cp-comm-type p2p");
  auto ringBack = importMegatron(ringWithSizes, ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_TRUE(ringBack) << ringBack.error().toString();
  EXPECT_EQ(ringBack->execution.cpCommType, CpCommType::kP2p);
  EXPECT_TRUE(ringBack->execution.hierarchicalCpSizes.empty());
  // Colossal-AI has no such mode: its export says the ring stands in for it.
  const auto colossal = exportPlan(p, ExportFormat::kColossalAi, "plan.json");
  ASSERT_TRUE(colossal) << colossal.error().toString();
  EXPECT_NE(colossal->find("# note: Colossal-AI's sequence modes are ring_attn and all_to_all; the plan's a2a+p2p"), std::string::npos) << *colossal;
  EXPECT_NE(colossal->find("sequence_parallelism_mode=\"ring_attn\""), std::string::npos) << *colossal;
  // Without the sizes Megatron refuses a2a+p2p; with sizes that do not multiply to cp too.
  std::string missing = *args;
  missing.replace(missing.find("--hierarchical-context-parallel-sizes 2 2"), 41, "");
  EXPECT_TRUE(megatronRules(missing, 64).contains("cp_a2ap2p"));
  std::string odd = *args;
  odd.replace(odd.find("--hierarchical-context-parallel-sizes 2 2"), 41, "--hierarchical-context-parallel-sizes 2 3");
  EXPECT_TRUE(megatronRules(odd, 64).contains("cp_a2ap2p"));
}

TEST(Import, MegatronsTransformerEngineLossFusionIsTheInPlaceFusedLoss) {
  // --cross-entropy-loss-fusion --cross-entropy-fusion-impl te: Transformer Engine's in-place loss; the
  // native implementation (the flag alone) keeps the fp32 softmax, colo's default loss.
  const Plan p = roundTripPlans()[0];
  const std::string args = *exportPlan(p, ExportFormat::kMegatron, "plan.json");
  const ImportContext context{p.cluster, p.model, 0, 0};
  auto te = importMegatron(args + " \\\n--cross-entropy-loss-fusion \\\n--cross-entropy-fusion-impl te\n", context);
  ASSERT_TRUE(te) << te.error().toString();
  EXPECT_TRUE(te->execution.fusedCrossEntropy);
  EXPECT_TRUE(te->execution.crossEntropyInPlace);
  auto native = importMegatron(args + " \\\n--cross-entropy-loss-fusion\n", context);
  ASSERT_TRUE(native) << native.error().toString();
  EXPECT_FALSE(native->execution.fusedCrossEntropy);
  EXPECT_FALSE(native->execution.crossEntropyInPlace);
  EXPECT_TRUE(native->execution.nativeFusedCrossEntropy);
  EXPECT_FALSE(te->execution.nativeFusedCrossEntropy);
  // The native fusion goes back out as the flag, which Megatron-LM's arguments accept, and comes back.
  const std::string nativeArgs = *exportPlan(*native, ExportFormat::kMegatron, "plan.json");
  EXPECT_NE(nativeArgs.find("\n--cross-entropy-loss-fusion \\\n"), std::string::npos) << nativeArgs;
  EXPECT_EQ(megatronRules(nativeArgs, p.cluster.totalGpus()), (std::map<std::string, std::string>{}));
  auto again = importMegatron(nativeArgs, context);
  ASSERT_TRUE(again) << again.error().toString();
  EXPECT_TRUE(again->execution.nativeFusedCrossEntropy);
  EXPECT_EQ(args.find("--cross-entropy-loss-fusion"), std::string::npos) << args;  // the unfused plan has no flag
  // Exported, such a plan says that the Megatron-LM its arguments are checked against refuses TE's fusion.
  const std::string exported = *exportPlan(*te, ExportFormat::kMegatron, "plan.json");
  EXPECT_NE(exported.find("--cross-entropy-fusion-impl te), which this Megatron-LM refuses"), std::string::npos) << exported;
}

TEST(Import, MegatronLmChecksGradientsForNanUnlessToldNotToOrUnderADynamicLossScale) {
  // Megatron-LM's --no-check-for-nan-in-loss-and-grad (store_false, so the check is on by default);
  // validate_args turns it off under fp16 with a dynamic loss scale. Megatron-Bridge's recipes set
  // ddp.check_for_nan_in_grad.
  const Plan p = roundTripPlans()[0];
  const std::string args = *exportPlan(p, ExportFormat::kMegatron, "plan.json");
  const ImportContext context{p.cluster, p.model, 0, 0};
  auto checked = importMegatron(args, context);
  ASSERT_TRUE(checked) << checked.error().toString();
  EXPECT_TRUE(checked->execution.gradNanCheck);
  auto unchecked = importMegatron(args + " \\\n--no-check-for-nan-in-loss-and-grad\n", context);
  ASSERT_TRUE(unchecked) << unchecked.error().toString();
  EXPECT_FALSE(unchecked->execution.gradNanCheck);
  std::string fp16 = args;
  fp16.replace(fp16.find("--bf16"), 6, "--fp16");
  auto dynamic = importMegatron(fp16, context);
  ASSERT_TRUE(dynamic) << dynamic.error().toString();
  EXPECT_FALSE(dynamic->execution.gradNanCheck);
  auto fixed = importMegatron(fp16 + " \\\n--loss-scale 4096\n", context);
  ASSERT_TRUE(fixed) << fixed.error().toString();
  EXPECT_TRUE(fixed->execution.gradNanCheck);
  // The check costs time: a read of the gradient buffer and host synchronizations.
  const auto withCheck = costmodel::evaluatePlan(*checked);
  const auto without = costmodel::evaluatePlan(*unchecked);
  ASSERT_TRUE(withCheck && without);
  EXPECT_GT(withCheck->time.optimizer, without->time.optimizer);
  // Megatron-Bridge: its recipes' check, unless ddp.check_for_nan_in_grad is false.
  const std::string bridge = "model:\n  tensor_model_parallel_size: 2\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n";
  auto recipe = importMegatronBridge(bridge, context);
  ASSERT_TRUE(recipe) << recipe.error().toString();
  EXPECT_TRUE(recipe->execution.gradNanCheck);
  auto off = importMegatronBridge(bridge + "ddp:\n  check_for_nan_in_grad: false\n", context);
  ASSERT_TRUE(off) << off.error().toString();
  EXPECT_FALSE(off->execution.gradNanCheck);
}

TEST(Import, MegatronOverlapsTheInterleavedSchedulesPipelineSendsUnlessToldNotTo) {
  // --no-overlap-p2p-communication (store_false): with virtual stages the sends and receives run beside
  // the other chunks by default. A plan that waits for them exports the flag (accepted at pp > 2) and
  // comes back the same; the overlapped plan is the cheaper one.
  Plan p = basePlan("llama3-70b", "dgx-h100-x64", 64, 8, 4, 1, 1, 2, 64, RecomputePolicy::kNone);
  p.execution.fusedBiasGrad = p.execution.teDummyWgrads = p.execution.gradNanCheck = true;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  ASSERT_EQ(p.schedule, Schedule::kInterleaved);
  const ImportContext context{p.cluster, p.model, 0, 0};
  for (const bool overlap : {true, false}) {
    p.execution.overlapP2pComm = overlap;
    const auto args = exportPlan(p, ExportFormat::kMegatron, "plan.json");
    ASSERT_TRUE(args) << args.error().toString();
    EXPECT_EQ(args->find("\n--no-overlap-p2p-communication") != std::string::npos, !overlap) << *args;
    const auto problems = checkExport(p, ExportFormat::kMegatron, *args);
    ASSERT_TRUE(problems) << problems.error().toString();
    EXPECT_TRUE(problems->empty()) << problems->front().rule << ": " << problems->front().message;
    auto back = importMegatron(*args, context);
    ASSERT_TRUE(back) << back.error().toString();
    expectSamePlan(p, *back, overlap ? "overlapped" : "waiting");
  }
  p.execution.overlapP2pComm = true;
  const auto overlapped = costmodel::evaluatePlan(p);
  p.execution.overlapP2pComm = false;
  const auto waiting = costmodel::evaluatePlan(p);
  ASSERT_TRUE(overlapped && waiting);
  EXPECT_LT(overlapped->time.ppComm, waiting->time.ppComm);
  // At pp 2 Megatron refuses virtual stages without the overlap: the export keeps it on and says so,
  // and the checker refuses the flag written by hand.
  Plan two = basePlan("llama3-70b", "dgx-h100-x64", 64, 8, 2, 1, 1, 2, 64, RecomputePolicy::kNone);
  two.execution.overlapP2pComm = false;
  ASSERT_TRUE(validatePlan(two)) << validatePlan(two).error().toString();
  const auto twoArgs = exportPlan(two, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(twoArgs) << twoArgs.error().toString();
  EXPECT_EQ(twoArgs->find("\n--no-overlap-p2p-communication"), std::string::npos) << *twoArgs;
  EXPECT_NE(twoArgs->find("# note: the plan waits for its pipeline sends"), std::string::npos) << *twoArgs;
  const auto refused = checkExport(two, ExportFormat::kMegatron, *twoArgs + " \\\n--no-overlap-p2p-communication");
  ASSERT_TRUE(refused) << refused.error().toString();
  EXPECT_TRUE(std::any_of(refused->begin(), refused->end(), [](const ExportProblem& x) { return x.rule == "vpp_pp_size"; }));
}

TEST(Import, MegatronBridgeOverlapsPipelineSendsAsItsCommOverlapConfigDoes) {
  // comm_overlap.overlap_p2p_comm when set; else, with a comm_overlap section, CommOverlapConfig's rule
  // (on with virtual stages); without the section, Megatron-Core's model config (default off).
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json"));
  const Model llama = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  const ImportContext context{cluster, llama, 0, 0};
  const std::string job = "model:\n  tensor_model_parallel_size: 2\n  pipeline_model_parallel_size: 2\n"
                          "  virtual_pipeline_model_parallel_size: 2\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n";
  auto plain = importMegatronBridge(job, context);
  ASSERT_TRUE(plain) << plain.error().toString();
  EXPECT_EQ(plain->schedule, Schedule::kInterleaved);
  EXPECT_FALSE(plain->execution.overlapP2pComm);
  auto section = importMegatronBridge(job + "comm_overlap:\n  tp_comm_overlap: false\n", context);
  ASSERT_TRUE(section) << section.error().toString();
  EXPECT_TRUE(section->execution.overlapP2pComm);
  auto off = importMegatronBridge(job + "comm_overlap:\n  overlap_p2p_comm: false\n", context);
  ASSERT_TRUE(off) << off.error().toString();
  EXPECT_FALSE(off->execution.overlapP2pComm);
}

TEST(Import, MegatronBridgeFusesItsLossAsItsModelProviderDoes) {
  // GPTModelProvider's cross_entropy_loss_fusion = True with Megatron-Core's native implementation; a
  // config may turn it off or pick Transformer Engine's in-place kernel.
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json"));
  const Model llama = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  const ImportContext context{cluster, llama, 0, 0};
  const std::string job = "model:\n  tensor_model_parallel_size: 2\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n";
  auto plain = importMegatronBridge(job, context);
  ASSERT_TRUE(plain) << plain.error().toString();
  EXPECT_TRUE(plain->execution.nativeFusedCrossEntropy);
  EXPECT_FALSE(plain->execution.fusedCrossEntropy);
  const std::string model = "model:\n  tensor_model_parallel_size: 2\n";
  const std::string train = "train:\n  global_batch_size: 64\n  micro_batch_size: 1\n";
  auto off = importMegatronBridge(model + "  cross_entropy_loss_fusion: false\n" + train, context);
  ASSERT_TRUE(off) << off.error().toString();
  EXPECT_FALSE(off->execution.nativeFusedCrossEntropy);
  EXPECT_FALSE(off->execution.fusedCrossEntropy);
  auto te = importMegatronBridge(model + "  cross_entropy_fusion_impl: te\n" + train, context);
  ASSERT_TRUE(te) << te.error().toString();
  EXPECT_FALSE(te->execution.nativeFusedCrossEntropy);
  EXPECT_TRUE(te->execution.fusedCrossEntropy && te->execution.crossEntropyInPlace);
}

TEST(Import, MegatronsDefaultTransformerEngineFusesBiasGradientsAndKeepsPlaceholderWgrads) {
  // Megatron-LM runs Transformer Engine unless --transformer-impl says otherwise: the attention input
  // projection's bias gradient comes from its GEMM, and under gradient-accumulation fusion TE keeps a
  // placeholder weight gradient per weight shape. Megatron's own linears (local) do neither.
  const Plan p = roundTripPlans()[1];  // GPT-3 175B: biased linears
  const std::string args = *exportPlan(p, ExportFormat::kMegatron, "plan.json");
  const ImportContext context{p.cluster, p.model, 0, 0};
  auto te = importMegatron(args, context);
  ASSERT_TRUE(te) << te.error().toString();
  EXPECT_TRUE(te->execution.fusedBiasGrad);
  EXPECT_TRUE(te->execution.teDummyWgrads);
  auto local = importMegatron(args + " \\\n--transformer-impl local\n", context);
  ASSERT_TRUE(local) << local.error().toString();
  EXPECT_FALSE(local->execution.fusedBiasGrad);
  EXPECT_FALSE(local->execution.teDummyWgrads);
  auto unfused = importMegatron(args + " \\\n--no-gradient-accumulation-fusion\n", context);
  ASSERT_TRUE(unfused) << unfused.error().toString();
  EXPECT_TRUE(unfused->execution.fusedBiasGrad);
  EXPECT_FALSE(unfused->execution.teDummyWgrads);  // placeholders only under the fusion
  // The cost follows: TE's job is cheaper by the fused reductions (GPT-3's qkv bias gradients).
  const auto withTe = costmodel::evaluatePlan(*te);
  const auto withLocal = costmodel::evaluatePlan(*local);
  ASSERT_TRUE(withTe && withLocal);
  EXPECT_LT(withTe->time.compute, withLocal->time.compute);
  // fp8 takes effect only through Transformer Engine: with Megatron's own linears the job trains in bf16.
  const Plan h100 = roundTripPlans()[0];  // Llama 3 8B on H100s, which have an fp8 peak
  const std::string h100Args = *exportPlan(h100, ExportFormat::kMegatron, "plan.json");
  const ImportContext h100Context{h100.cluster, h100.model, 0, 0};
  auto fp8Local = importMegatron(h100Args + " \\\n--fp8-format hybrid \\\n--transformer-impl local\n", h100Context);
  ASSERT_TRUE(fp8Local) << fp8Local.error().toString();
  EXPECT_EQ(fp8Local->precision, DType::kBf16);
  auto fp8Te = importMegatron(h100Args + " \\\n--fp8-format hybrid\n", h100Context);
  ASSERT_TRUE(fp8Te) << fp8Te.error().toString();
  EXPECT_EQ(fp8Te->precision, DType::kFp8);
  // A 4-bit recipe (--fp4-format e2m1, NVFP4) trains in fp4 through Transformer Engine; with Megatron's
  // own linears, in bf16.
  // An H100 has no 4-bit tensor cores: the plan is refused, naming the precision.
  const ImportContext b200Context{test::loadClusterOrFail(test::dataFile("clusters/dgx-b200.json")), h100.model, 0, 0};
  auto fp4Te = importMegatron(h100Args + " \\\n--fp4-format e2m1\n", b200Context);
  ASSERT_TRUE(fp4Te) << fp4Te.error().toString();
  EXPECT_EQ(fp4Te->precision, DType::kFp4);
  const auto fp4Args = exportPlan(*fp4Te, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(fp4Args) << fp4Args.error().toString();
  EXPECT_NE(fp4Args->find("--fp4-format e2m1"), std::string::npos);
  EXPECT_EQ(fp4Args->find("--fp8-format"), std::string::npos);  // Megatron refuses both
  auto fp4Back = importMegatron(*fp4Args, b200Context);
  ASSERT_TRUE(fp4Back) << fp4Back.error().toString();
  EXPECT_EQ(fp4Back->precision, DType::kFp4);
  auto fp4Hopper = importMegatron(h100Args + " \\\n--fp4-format e2m1\n", h100Context);
  ASSERT_FALSE(fp4Hopper);
  EXPECT_NE(fp4Hopper.error().toString().find("no fp4 peak"), std::string::npos) << fp4Hopper.error().toString();
  auto fp4Local = importMegatron(h100Args + " \\\n--fp4-format e2m1 \\\n--transformer-impl local\n", h100Context);
  ASSERT_TRUE(fp4Local) << fp4Local.error().toString();
  EXPECT_EQ(fp4Local->precision, DType::kBf16);
  auto bogus = importMegatron(args + " \\\n--transformer-impl apex\n", context);
  ASSERT_FALSE(bogus);
  EXPECT_NE(bogus.error().message.find("--transformer-impl: 'apex'"), std::string::npos) << bogus.error().toString();
}

TEST(Import, TransformerEnginesQuantizedWeightsAndMxfp8RoundTripAndBridgesPresetsSetThem) {
  // Megatron-LM: --fp8-param-gather (--fp4-param-gather) and --fp8-recipe mxfp8, written and read back.
  Plan hopper = roundTripPlans()[0];  // Llama 3 8B on H100s, distributed optimizer
  ASSERT_EQ(hopper.zeroStage, 1);
  hopper.precision = DType::kFp8;
  hopper.execution.quantizedParams = true;
  Plan blackwell = hopper;
  blackwell.cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-b200.json"));
  blackwell.execution.float8Recipe = Float8Recipe::kMxfp8;
  Plan fp4 = blackwell;
  fp4.precision = DType::kFp4;
  fp4.execution.float8Recipe = Float8Recipe::kTransformerEngine;
  for (const Plan& p : {hopper, blackwell, fp4}) {
    ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
    const auto args = exportPlan(p, ExportFormat::kMegatron, "plan.json");
    ASSERT_TRUE(args) << args.error().toString();
    EXPECT_NE(args->find(p.precision == DType::kFp4 ? "--fp4-param-gather" : "--fp8-param-gather"), std::string::npos) << *args;
    EXPECT_EQ(args->find("--fp8-recipe mxfp8") != std::string::npos, p.execution.float8Recipe == Float8Recipe::kMxfp8) << *args;
    // MXFP8's all-gather is staged in the gradient buffer, as colo costs it (and TE needs it).
    EXPECT_EQ(args->find("--reuse-grad-buf-for-mxfp8-param-ag") != std::string::npos, p.execution.float8Recipe == Float8Recipe::kMxfp8)
        << *args;
    EXPECT_TRUE(checkMegatronArguments(*args, *loadExportSchema("megatron-lm"), 8).empty()) << *args;
    auto back = importMegatron(*args, ImportContext{p.cluster, p.model, 0, 0});
    ASSERT_TRUE(back) << back.error().toString() << "\n" << *args;
    expectSamePlan(p, *back, toString(p.precision) + " " + p.cluster.gpu.name);
  }
  // The checker names what Megatron and Transformer Engine refuse: MXFP8 quantized weights without the
  // gradient-buffer all-gather, optimizer CPU offload with quantized weights under another recipe than
  // delayed scaling.
  const Json schema = *loadExportSchema("megatron-lm");
  auto rulesOf = [&](const std::string& text) {
    std::set<std::string> out;
    for (const auto& problem : checkMegatronArguments(text, schema, 8)) out.insert(problem.rule);
    return out;
  };
  std::string mx = *exportPlan(blackwell, ExportFormat::kMegatron, "plan.json");
  mx.replace(mx.find("--reuse-grad-buf-for-mxfp8-param-ag"), std::string("--reuse-grad-buf-for-mxfp8-param-ag").size(), "--bf16");
  EXPECT_TRUE(rulesOf(mx).contains("mxfp8_param_gather_reuse")) << mx;
  const std::string offloaded = *exportPlan(hopper, ExportFormat::kMegatron, "plan.json") +
                                " \\\n--optimizer-cpu-offload \\\n--use-precision-aware-optimizer";
  EXPECT_FALSE(rulesOf(offloaded).contains("cpu_offload_fp8_param_gather")) << offloaded;  // delayed, the default
  EXPECT_TRUE(rulesOf(offloaded + " \\\n--fp8-recipe tensorwise").contains("cpu_offload_fp8_param_gather"));
  // MXFP8 launched onto a Hopper cluster: one error naming the launch's flag and the GPU.
  auto onHopper = importMegatron(mx, ImportContext{hopper.cluster, hopper.model, 0, 0});
  ASSERT_FALSE(onHopper);
  EXPECT_EQ(onHopper.error().code, ErrorCode::kBadInput);
  EXPECT_NE(onHopper.error().message.find("--fp8-recipe mxfp8"), std::string::npos) << onHopper.error().toString();
  EXPECT_NE(onHopper.error().message.find(hopper.cluster.gpu.name), std::string::npos) << onHopper.error().toString();
  // Megatron-LM refuses the flag without the distributed optimizer; so does the import, naming it.
  std::string args = *exportPlan(hopper, ExportFormat::kMegatron, "plan.json");
  args.replace(args.find("--use-distributed-optimizer"), std::string("--use-distributed-optimizer").size(), "--no-gradient-accumulation-fusion");
  args.replace(args.find("--overlap-param-gather"), std::string("--overlap-param-gather").size(), "--overlap-grad-reduce");
  auto refused = importMegatron(args, ImportContext{hopper.cluster, hopper.model, 0, 0});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("--fp8-param-gather needs --use-distributed-optimizer"), std::string::npos) << refused.error().toString();
  // Megatron-Bridge: the delayed, current-scaling and MXFP8 presets keep the weights quantized, the
  // sub-channel one does not, NVFP4's does (fp4_param_gather); the section's own key wins.
  const Model llama = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  const std::string base = "model_config:\n  tensor_model_parallel_size: 2\ntrain_config:\n  global_batch_size: 64\n  micro_batch_size: 1\n"
                           "ddp:\n  use_distributed_optimizer: true\n";
  struct Case {
    std::string precision;
    DType dtype;
    Float8Recipe recipe;
    bool quantized;
  };
  const Case cases[] = {
      {"mixed_precision: bf16_with_fp8_current_scaling_mixed\n", DType::kFp8, Float8Recipe::kTransformerEngine, true},
      {"mixed_precision: bf16-with-fp8-current-scaling-mixed\n", DType::kFp8, Float8Recipe::kTransformerEngine, true},
      {"mixed_precision: bf16_with_fp8_delayed_scaling_mixed\n", DType::kFp8, Float8Recipe::kTransformerEngine, true},
      {"mixed_precision: bf16_with_mxfp8_mixed\n", DType::kFp8, Float8Recipe::kMxfp8, true},
      {"mixed_precision: bf16_with_fp8_subchannel_scaling_mixed\n", DType::kFp8, Float8Recipe::kTransformerEngine, false},
      {"mixed_precision: bf16_with_nvfp4_mixed\n", DType::kFp4, Float8Recipe::kTransformerEngine, true},
      {"mixed_precision:\n  bf16: true\n  fp8: hybrid\n", DType::kFp8, Float8Recipe::kTransformerEngine, false},
      {"mixed_precision:\n  bf16: true\n  fp8: e4m3\n  fp8_recipe: mxfp8\n  fp8_param_gather: true\n", DType::kFp8, Float8Recipe::kMxfp8, true},
  };
  const ClusterSpec b200 = test::loadClusterOrFail(test::dataFile("clusters/dgx-b200.json"));
  for (const Case& c : cases) {
    auto q = importMegatronBridge(base + c.precision, ImportContext{b200, llama, 0, 0});
    ASSERT_TRUE(q) << c.precision << q.error().toString();
    EXPECT_EQ(q->precision, c.dtype) << c.precision;
    EXPECT_EQ(q->execution.float8Recipe, c.recipe) << c.precision;
    EXPECT_EQ(q->execution.quantizedParams, c.quantized) << c.precision;
  }
  // The MXFP8 preset on Hopper: one error naming the config's own preset.
  const ClusterSpec h100 = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json"));
  auto mxOnHopper = importMegatronBridge(base + "mixed_precision: bf16_with_mxfp8_mixed\n", ImportContext{h100, llama, 0, 0});
  ASSERT_FALSE(mxOnHopper);
  EXPECT_NE(mxOnHopper.error().message.find("mixed_precision: bf16_with_mxfp8_mixed"), std::string::npos) << mxOnHopper.error().toString();
  // Without the distributed optimizer a preset's setting is not read (Megatron-Core would refuse it).
  auto plain = importMegatronBridge("model_config:\n  tensor_model_parallel_size: 2\ntrain_config:\n  global_batch_size: 64\n"
                                    "  micro_batch_size: 1\nmixed_precision: bf16_with_fp8_current_scaling_mixed\n",
                                    ImportContext{b200, llama, 0, 0});
  ASSERT_TRUE(plain) << plain.error().toString();
  EXPECT_FALSE(plain->execution.quantizedParams);
}

TEST(Import, MegatronBridgesFp8OutputProjRunsTheOutputLayerInMxfp8) {
  // model.fp8_output_proj (Megatron-Core's TransformerConfig) with the MXFP8 preset: the output layer is
  // a TE linear under MXFP8; with another recipe Megatron-Core refuses it, and so does the import.
  const Model llama = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  const ClusterSpec b200 = test::loadClusterOrFail(test::dataFile("clusters/dgx-b200.json"));
  const std::string base = "model:\n  tensor_model_parallel_size: 2\n  fp8_output_proj: true\ntrain:\n  global_batch_size: 64\n"
                           "  micro_batch_size: 1\nddp:\n  use_distributed_optimizer: true\n";
  auto mx = importMegatronBridge(base + "mixed_precision: bf16_with_mxfp8_mixed\n", ImportContext{b200, llama, 0, 0});
  ASSERT_TRUE(mx) << mx.error().toString();
  EXPECT_TRUE(mx->execution.fp8OutputProj);
  auto plainMx = importMegatronBridge("model:\n  tensor_model_parallel_size: 2\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n"
                                      "mixed_precision: bf16_with_mxfp8_mixed\n",
                                      ImportContext{b200, llama, 0, 0});
  ASSERT_TRUE(plainMx) << plainMx.error().toString();
  EXPECT_FALSE(plainMx->execution.fp8OutputProj);
  auto refused = importMegatronBridge(base + "mixed_precision: bf16_with_fp8_current_scaling_mixed\n", ImportContext{b200, llama, 0, 0});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kBadInput);
  EXPECT_NE(refused.error().message.find("model.fp8_output_proj"), std::string::npos) << refused.error().toString();
  // What Megatron-Core's TE head refuses beside the recipe is refused at import, not later by evaluate:
  // userbuffers at tp > 1 (the head has no buffer of its own).
  auto overlapped = importMegatronBridge(base + "mixed_precision: bf16_with_mxfp8_mixed\ncomm_overlap:\n  tp_comm_overlap: true\n",
                                         ImportContext{b200, llama, 0, 0});
  ASSERT_FALSE(overlapped);
  EXPECT_EQ(overlapped.error().code, ErrorCode::kBadInput);
  EXPECT_NE(overlapped.error().message.find("model.fp8_output_proj"), std::string::npos) << overlapped.error().toString();
  EXPECT_NE(overlapped.error().message.find("userbuffers"), std::string::npos) << overlapped.error().toString();
  // Megatron-LM's argument (--fp8-output-proj, from the TransformerConfig field): written, checked and
  // read back; without the MXFP8 recipe both the checker and the import refuse it.
  const auto args = exportPlan(*mx, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(args) << args.error().toString();
  EXPECT_NE(args->find("--fp8-output-proj"), std::string::npos) << *args;
  const Json schema = *loadExportSchema("megatron-lm");
  EXPECT_TRUE(checkMegatronArguments(*args, schema, 8).empty()) << *args;
  auto back = importMegatron(*args, ImportContext{b200, llama, 0, 0});
  ASSERT_TRUE(back) << back.error().toString() << "\n" << *args;
  EXPECT_TRUE(back->execution.fp8OutputProj);
  std::string tensorwise = *args;
  tensorwise.replace(tensorwise.find("--fp8-recipe mxfp8"), std::string("--fp8-recipe mxfp8").size(), "--fp8-recipe tensorwise");
  bool flagged = false;
  for (const auto& problem : checkMegatronArguments(tensorwise, schema, 8)) flagged = flagged || problem.rule == "fp8_output_proj";
  EXPECT_TRUE(flagged) << tensorwise;
  auto refusedImport = importMegatron(tensorwise, ImportContext{b200, llama, 0, 0});
  ASSERT_FALSE(refusedImport);
  EXPECT_NE(refusedImport.error().message.find("--fp8-output-proj"), std::string::npos) << refusedImport.error().toString();
}

TEST(Import, MegatronArgumentsAloneStateTheArchitecture) {
  // Without --model: the architecture from the arguments; the vocabulary from --vocab-size.
  const Plan p = roundTripPlans()[0];
  std::string args = "torchrun --nproc-per-node 8 pretrain_gpt.py \\\n" + *exportPlan(p, ExportFormat::kMegatron, "plan.json") +
                     " \\\n--vocab-size 128256\n";
  auto back = importMegatron(args, ImportContext{p.cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(back) << back.error().toString();
  const ModelSpec& a = *p.model.spec;
  const ModelSpec& b = *back->model.spec;
  EXPECT_EQ(countParameters(a).total, countParameters(b).total);
  EXPECT_EQ(b.kvHeads(), a.kvHeads());
  EXPECT_EQ(b.ropeTheta, 500000);
  EXPECT_EQ(b.activation, Activation::kSwiGlu);
  EXPECT_FALSE(b.tieWordEmbeddings);
  // Without a vocabulary it says what to pass; a model that differs from the arguments is named.
  auto noVocab = importMegatron(*exportPlan(p, ExportFormat::kMegatron, "plan.json"), ImportContext{p.cluster, std::nullopt, 0, 0});
  ASSERT_FALSE(noVocab);
  EXPECT_NE(noVocab.error().message.find("--vocab-size"), std::string::npos);
  auto wrong = importMegatron(args, ImportContext{p.cluster, test::loadModelOrFail(test::dataFile("models/llama2-7b.json")), 0, 0});
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("does not match the model"), std::string::npos);
  // Shell variables left in a launch are named.
  auto unexpanded = importMegatron("--tensor-model-parallel-size $TP --num-layers 32", ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_FALSE(unexpanded);
  EXPECT_NE(unexpanded.error().message.find("--tensor-model-parallel-size"), std::string::npos);
}

TEST(Import, MegatronArrayElementsAndMegatronFsdpAreRead) {
  // NVIDIA's example scripts keep arguments in bash arrays of quoted "--flag value" elements, expanded
  // unquoted (${DTYPE_ARGS[@]}): word splitting hands argparse the flag and its value apart.
  const Plan p = roundTripPlans()[0];  // Llama 3 8B
  const std::string base = *exportPlan(p, ExportFormat::kMegatron, "plan.json");
  const std::string arrays = "DISTRIBUTED_ARGS=(\n    --nproc_per_node 8\n    --nnodes 1\n)\nDTYPE_ARGS+=(\n    \"--fp8-format hybrid\"\n    \"--fp8-amax-history-len 1024\"\n)\n"
                             "DATA_ARGS=(\n    \"--vocab-size 128256\"\n)\n"
                             "torchrun pretrain_gpt.py \\\n" + base + " \\\n    ${DTYPE_ARGS[@]} ${DATA_ARGS[@]}\n";
  auto expanded = expandShellVariables(arrays);  // as colo-plan import reads a launch
  ASSERT_TRUE(expanded) << expanded.error().toString();
  auto fp8 = importMegatron(*expanded, ImportContext{p.cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(fp8) << fp8.error().toString();
  EXPECT_EQ(fp8->precision, DType::kFp8);
  EXPECT_EQ(fp8->model.spec->vocabSize, 128256);
  // A flag inside a quoted assignment (Megatron-DeepSpeed's ds_args=" --deepspeed ${ds_args}") is not
  // where the argument list starts: the launch line that expands it is.
  const std::string assigned = "ds_args=\" --deepspeed --zero-stage=1 ${ds_args}\"\n"
                               "torchrun pretrain_gpt.py \\\n" + base + " \\\n    --vocab-size 128256 $ds_args\n";
  auto quoted = importMegatron(assigned, ImportContext{p.cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(quoted) << quoted.error().toString();
  EXPECT_EQ(quoted->parallel.tp, p.parallel.tp);
  EXPECT_EQ(quoted->model.spec->vocabSize, 128256);
  // Multi-token prediction is the launch's: a model file's MTP layer is trained only with --mtp-num-layers.
  {
    Model withMtp = p.model;
    withMtp.spec->mtpLayers = 1;
    auto without = importMegatron(base, ImportContext{p.cluster, withMtp, 0, 0});
    ASSERT_TRUE(without) << without.error().toString();
    EXPECT_EQ(without->model.spec->mtpLayers, 0);
    auto with = importMegatron(base + " \\\n--mtp-num-layers 1", ImportContext{p.cluster, p.model, 0, 0});
    ASSERT_TRUE(with) << with.error().toString();
    EXPECT_EQ(with->model.spec->mtpLayers, 1);
    // The position table is the launch's too.
    auto longer = importMegatron(base + " \\\n--max-position-embeddings 65536", ImportContext{p.cluster, p.model, 0, 0});
    ASSERT_TRUE(longer) << longer.error().toString();
    EXPECT_EQ(longer->model.spec->maxPositionEmbeddings, 65536);
  }
  // A one-line quoted launcher assignment, then the script's arguments in a quoted value over lines:
  // the arguments are those the training script receives.
  {
    const std::string mixed = "DISTRIBUTED_ARGS=\"--nproc_per_node 8 --nnodes 1\"\nGPT_ARGS=\"\n    --tensor-model-parallel-size 2 \\\n"
                              "    --pipeline-model-parallel-size 2 \\\n    --micro-batch-size 1 \\\n    --global-batch-size 16 \\\n"
                              "    --seq-length 2048 \\\n    --bf16\n\"\ntorchrun $DISTRIBUTED_ARGS pretrain_gpt.py \\\n    $GPT_ARGS \\\n"
                              "    --distributed-backend nccl\n";
    auto text = expandShellVariables(mixed);
    ASSERT_TRUE(text) << text.error().toString();
    auto q = importMegatron(*text, ImportContext{p.cluster, p.model, 0, 0});
    ASSERT_TRUE(q) << q.error().toString() << "\n" << *text;
    EXPECT_EQ(q->parallel.tp, 2);
    EXPECT_EQ(q->parallel.pp, 2);
    EXPECT_EQ(q->precision, DType::kBf16);
    EXPECT_EQ(q->globalBatchSize, 16);
  }
  // Megatron-FSDP shards as its strategy says (default: optimizer, gradients and parameters).
  const ImportContext context{p.cluster, p.model, 0, 0};
  auto zero = [&](const std::string& extra) {
    auto q = importMegatron(base + " \\\n" + extra, context);
    EXPECT_TRUE(q) << q.error().toString() << "\n" << extra;
    return q ? q->zeroStage : -1;
  };
  EXPECT_EQ(zero("--use-megatron-fsdp"), 3);
  EXPECT_EQ(zero("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads"), 2);
  EXPECT_EQ(zero("--use-custom-fsdp --data-parallel-sharding-strategy optim"), 1);
  EXPECT_EQ(zero("--use-torch-fsdp2"), 3);
  auto bad = importMegatron(base + " --use-megatron-fsdp --data-parallel-sharding-strategy most", context);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("--data-parallel-sharding-strategy: expected no_shard, optim, optim_grads or optim_grads_params, got \"most\""),
            std::string::npos)
      << bad.error().message;
}

TEST(Import, MegatronsMoeLayerPatternIsReadAsMegatronEvaluatesIt) {
  // --moe-layer-freq as a Python list expression (DeepSeek-V3's "([0]*3+[1]*58)"), a list, or 1.
  const ClusterSpec cluster = roundTripPlans()[0].cluster;
  const std::string model = "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --seq-length 2048 "
                            "--vocab-size 32000 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 1024 --bf16 "
                            "--micro-batch-size 1 --global-batch-size 8 --moe-layer-freq ";
  auto read = [&](const std::string& freq) { return importMegatron(model + freq, ImportContext{cluster, std::nullopt, 0, 0}); };
  auto deepseek = read("\"([0]*3+[1]*5)\"");
  ASSERT_TRUE(deepseek) << deepseek.error().toString();
  EXPECT_EQ(deepseek->model.spec->moe.firstDenseLayers, 3);  // was read as 1 (the characters before the first 1)
  EXPECT_EQ(deepseek->model.spec->moe.layerFrequency, 1);
  auto interleaved = read("[0,1,0,1,0,1,0,1]");
  ASSERT_TRUE(interleaved) << interleaved.error().toString();
  EXPECT_EQ(interleaved->model.spec->moe.firstDenseLayers, 1);
  EXPECT_EQ(interleaved->model.spec->moe.layerFrequency, 2);
  auto every = read("1");
  ASSERT_TRUE(every) << every.error().toString();
  EXPECT_EQ(every->model.spec->moe.firstDenseLayers, 0);
  EXPECT_EQ(every->model.spec->moe.layerFrequency, 1);
  // An integer N above 1: Megatron makes layers 0, N, 2N, ... MoE (i % N == 0), the first of each period.
  auto second = read("2");
  ASSERT_TRUE(second) << second.error().toString();
  const MoeSpec& m = second->model.spec->moe;
  EXPECT_EQ(m.firstDenseLayers, 0);
  EXPECT_EQ(m.layerFrequency, 2);
  EXPECT_EQ(m.layerPhase, 0);
  for (std::int64_t l = 0; l < 8; ++l) EXPECT_EQ(m.isMoeLayer(l), l % 2 == 0) << l;
  // ... and the Megatron export writes the same layers back, as a list.
  const auto args = exportPlan(*second, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(args);
  EXPECT_NE(args->find("--moe-layer-freq \"[1,0,1,0,1,0,1,0]\""), std::string::npos) << *args;
  Model withoutPattern = second->model;  // the export's vocabulary comes from a tokenizer: the model is given
  withoutPattern.spec->moe.layerFrequency = 1;
  withoutPattern.spec->moe.layerPhase = -1;
  auto back = importMegatron(*args, ImportContext{cluster, withoutPattern, 0, 0});
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->model.spec->moe, m);
  auto third = read("\"[0]*2+[1,0,0]*2\"");  // dense 2, then layers 2 and 5
  ASSERT_TRUE(third) << third.error().toString();
  for (std::int64_t l = 0; l < 8; ++l) EXPECT_EQ(third->model.spec->moe.isMoeLayer(l), l == 2 || l == 5) << l;
  for (const auto& [freq, why] : {std::pair{"\"[0]*3+[1]*4\"", "gives 7 layers, the model has 8"},
                                  std::pair{"\"[0]*3+\"", "expected an integer or a list expression"},
                                  std::pair{"[1,0,0,1,1,0,0,0]", "not this pattern"}}) {
    auto bad = read(freq);
    ASSERT_FALSE(bad) << freq;
    EXPECT_NE(bad.error().message.find(why), std::string::npos) << bad.error().message;
  }
}

TEST(Import, MegatronsBf16GradientReductionSurvivesExportImportAndThePlanFile) {
  Plan p = roundTripPlans()[0];  // Llama 3 8B, bf16
  ASSERT_TRUE(p.precision == DType::kBf16 || p.precision == DType::kFp8);
  p.execution.gradReduceBf16 = true;
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const auto args = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(args);
  EXPECT_NE(args->find("--grad-reduce-in-bf16"), std::string::npos);
  auto problems = checkExport(p, ExportFormat::kMegatron, *args);
  ASSERT_TRUE(problems) << problems.error().toString();
  for (const auto& problem : *problems) ADD_FAILURE() << problem.rule << ": " << problem.message;
  auto back = importMegatron(*args, ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->execution.gradReduceBf16);
  auto file = planFromJson(planToJson(p), "plan.json");
  ASSERT_TRUE(file) << file.error().toString();
  EXPECT_TRUE(file->execution.gradReduceBf16);
  p.execution.gradReduceBf16 = false;
  auto plain = importMegatron(*exportPlan(p, ExportFormat::kMegatron, "plan.json"), ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_TRUE(plain) << plain.error().toString();
  EXPECT_FALSE(plain->execution.gradReduceBf16);
}

TEST(Import, DeepSpeedConfigWithItsArgumentsGivesBackThePlan) {
  for (const auto& p : roundTripPlans()) {
    const auto config = exportPlan(p, ExportFormat::kDeepSpeed, "plan.json");
    if (!config) continue;  // interleaving, Ulysses with tp, partial offload below ZeRO-3: refused on export
    const auto args = exportPlan(p, ExportFormat::kMegatron, "plan.json");
    auto back = importDeepSpeed(Json::parse(*config), *args, ImportContext{p.cluster, p.model, 0, 0});
    ASSERT_TRUE(back) << p.name << ": " << back.error().toString();
    expectSamePlan(p, *back, p.name, /*execution=*/false);
    // Megatron-DeepSpeed's own linears (its --transformer-impl defaults to local): no fused bias
    // gradients, no placeholder weight gradients.
    EXPECT_FALSE(back->execution.fusedBiasGrad);
    EXPECT_FALSE(back->execution.teDummyWgrads);
  }
  // A config whose batch numbers disagree with the data-parallel size is refused with DeepSpeed's rule.
  const Plan p = roundTripPlans()[2];
  Json config = Json::parse(*exportPlan(p, ExportFormat::kDeepSpeed, "plan.json"));
  config["gradient_accumulation_steps"] = 3;
  auto bad = importDeepSpeed(config, *exportPlan(p, ExportFormat::kMegatron, "plan.json"), ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("DeepSpeed's batch check"), std::string::npos);
  // "auto" batch keys (Hugging Face's Trainer fills them in) take the launch's figures.
  config["gradient_accumulation_steps"] = "auto";
  config["train_batch_size"] = "auto";
  config["train_micro_batch_size_per_gpu"] = "auto";
  auto autoBatch = importDeepSpeed(config, *exportPlan(p, ExportFormat::kMegatron, "plan.json"), ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_TRUE(autoBatch) << autoBatch.error().toString();
  EXPECT_EQ(autoBatch->globalBatchSize, p.globalBatchSize);
  EXPECT_EQ(autoBatch->microBatchSize, p.microBatchSize);
  // Megatron-DeepSpeed's own semantics: CoreAttention's unfused softmax unless --use-flash-attn*
  // says otherwise, --checkpoint-activations recomputes every layer, no gradient NaN check.
  {
    const std::string args = *exportPlan(p, ExportFormat::kMegatron, "plan.json");
    auto plain = importDeepSpeed(config, args, ImportContext{p.cluster, p.model, 0, 0});
    ASSERT_TRUE(plain) << plain.error().toString();
    EXPECT_FALSE(plain->execution.flashAttention);
    EXPECT_FALSE(plain->execution.gradNanCheck);
    auto v2 = importDeepSpeed(config, args + " \\\n--use-flash-attn-v2 --checkpoint-activations\n", ImportContext{p.cluster, p.model, 0, 0});
    ASSERT_TRUE(v2) << v2.error().toString();
    EXPECT_TRUE(v2->execution.flashAttention);
    EXPECT_TRUE(v2->execution.flashAttention2);
    for (const auto& st : v2->stages) {
      EXPECT_EQ(st.recompute, RecomputePolicy::kFull);
      EXPECT_EQ(st.recomputeLayers, st.layers);
    }
  }
  // Its model arguments: grouped-query attention as --num-key-value-heads, rmsnorm in lower case,
  // rotary embeddings by switch.
  {
    const std::string model = "--num-layers 16 --hidden-size 2048 --ffn-hidden-size 5504 --num-attention-heads 16 "
                              "--num-key-value-heads 4 --seq-length 4096 --max-position-embeddings 4096 --swiglu "
                              "--normalization rmsnorm --use-rotary-position-embeddings --untie-embeddings-and-output-weights "
                              "--disable-bias-linear --vocab-size 32000 --micro-batch-size 1 --global-batch-size 64 --bf16 --use-flash-attn-v2";
    Json small = config;
    small.erase("train_batch_size");
    small.erase("train_micro_batch_size_per_gpu");
    small.erase("gradient_accumulation_steps");
    auto llama = importDeepSpeed(small, model, ImportContext{p.cluster, std::nullopt, 0, 0});
    ASSERT_TRUE(llama) << llama.error().toString();
    const ModelSpec& m = *llama->model.spec;
    EXPECT_EQ(m.kvHeads(), 4);
    EXPECT_EQ(m.norm, NormKind::kRmsNorm);
    EXPECT_EQ(m.positionEmbedding, PositionEmbedding::kRope);
    EXPECT_EQ(m.activation, Activation::kSwiGlu);
  }
  // A launch that asks for fp8 with Megatron-DeepSpeed's own linears, and a config naming no 16-bit
  // section, trains at the launch's 16-bit precision: fp8 acts only through Transformer Engine.
  Json plainConfig = Json::parse(*exportPlan(p, ExportFormat::kDeepSpeed, "plan.json"));
  plainConfig.erase("bf16");
  plainConfig.erase("fp16");
  const std::string fp8Args = *exportPlan(p, ExportFormat::kMegatron, "plan.json") + " \\\n--fp8-format hybrid\n";
  auto fp8 = importDeepSpeed(plainConfig, fp8Args, ImportContext{p.cluster, p.model, 0, 0});
  ASSERT_TRUE(fp8) << fp8.error().toString();
  EXPECT_NE(p.precision, DType::kFp8);
  EXPECT_EQ(fp8->precision, p.precision);
  // A ZeRO-3 plan costed with DeepSpeed's 2021 per-parameter gathers exports today's DeepSpeed, and says
  // so; the import does not bring the setting back.
  Plan z3 = basePlan("llama3-70b", "dgx-h100-x64", 64, 1, 1, 1, 1, 1, 64, RecomputePolicy::kFull);
  z3.zeroStage = 3;
  ASSERT_TRUE(validatePlan(z3)) << validatePlan(z3).error().toString();
  EXPECT_EQ(Json::parse(*exportPlan(z3, ExportFormat::kDeepSpeed, "plan.json"))["comment"].get<std::string>().find("v0.5.5"), std::string::npos);
  z3.execution.perParameterGathers = true;
  const Json z3Config = Json::parse(*exportPlan(z3, ExportFormat::kDeepSpeed, "plan.json"));
  EXPECT_NE(z3Config["comment"].get<std::string>().find("batches its gathers"), std::string::npos) << z3Config.dump();
  auto z3Back = importDeepSpeed(z3Config, *exportPlan(z3, ExportFormat::kMegatron, "plan.json"), ImportContext{z3.cluster, z3.model, 0, 0});
  ASSERT_TRUE(z3Back) << z3Back.error().toString();
  EXPECT_EQ(z3Back->zeroStage, 3);
  EXPECT_FALSE(z3Back->execution.perParameterGathers);
}

TEST(Import, ColossalAiPluginGivesBackThePlan) {
  for (const auto& p : roundTripPlans()) {
    const auto source = exportPlan(p, ExportFormat::kColossalAi, "plan.json");
    ASSERT_TRUE(source);
    auto back = importColossalAi(*source, ImportContext{p.cluster, p.model, 0, 0});
    ASSERT_TRUE(back) << p.name << ": " << back.error().toString() << "\n" << *source;
    Plan expected = p;
    // What the plugin cannot say: uneven model chunks (num_layers_per_stage takes one count per stage,
    // which it does say), block recompute counts per stage, CP's type.
    expected.stages = uniformStages(p.model.numLayers(), p.parallel.pp * p.parallel.virtualStages, p.stages.front().recompute);
    if (p.parallel.virtualStages == 1) {
      for (std::size_t st = 0; st < p.stages.size(); ++st) expected.stages[st].layers = p.stages[st].layers;
    }
    std::int64_t most = 0;
    for (const auto& st : p.stages) most = std::max(most, st.recomputeLayers);
    for (auto& st : expected.stages) st.recomputeLayers = p.stages.front().recompute == RecomputePolicy::kNone ? 0 : std::min(most, st.layers);
    if (expected.offload.optimizerFraction > 0) expected.offload.optimizerFraction = 1.0;  // cpu_offload is all or nothing
    expectSamePlan(expected, *back, p.name, /*execution=*/false);
  }
  // Colossal-AI's own examples: enable_all_optimization turns flash attention on, and None is the
  // plugin's default micro-batching (examples/language/gpt/hybridparallelism/finetune.py).
  {
    const Plan q = roundTripPlans()[0];
    const std::string example = "plugin = HybridParallelPlugin(\n    tp_size=1,\n    pp_size=2,\n    num_microbatches=None,\n"
                                "    microbatch_size=1,\n    enable_all_optimization=True,\n    zero_stage=1,\n    precision=\"fp16\",\n"
                                "    initial_scale=1,\n)\n";
    auto all = importColossalAi(example, ImportContext{q.cluster, q.model, 64, 2048});
    ASSERT_TRUE(all) << all.error().toString();
    EXPECT_TRUE(all->execution.flashAttention);
    EXPECT_EQ(all->parallel.pp, 2);
    EXPECT_EQ(all->microBatchSize, 1);
    std::string plain = example;
    plain.replace(plain.find("enable_all_optimization=True"), 28, "enable_all_optimization=False");
    auto off = importColossalAi(plain, ImportContext{q.cluster, q.model, 64, 2048});
    ASSERT_TRUE(off) << off.error().toString();
    EXPECT_FALSE(off->execution.flashAttention);
  }
  auto noModel = importColossalAi("plugin = HybridParallelPlugin(tp_size=2)", ImportContext{roundTripPlans()[0].cluster, std::nullopt, 0, 0});
  ASSERT_FALSE(noModel);
  EXPECT_NE(noModel.error().message.find("--model"), std::string::npos);
  // The balanced split goes out as num_layers_per_stage (it was dropped, and the even split did not fit).
  const Plan balanced = roundTripPlans()[5];
  const auto source = exportPlan(balanced, ExportFormat::kColossalAi, "plan.json");
  ASSERT_TRUE(source);
  EXPECT_NE(source->find("num_layers_per_stage=[9, 10, 10, 10, 10, 11, 11, 9]"), std::string::npos) << *source;
  // A list Colossal-AI would refuse (not pp_size counts, or not summing to the layers) is refused naming it.
  std::string wrong = *source;
  wrong.replace(wrong.find("[9, 10"), 2, "[8");
  auto bad = importColossalAi(wrong, ImportContext{balanced.cluster, balanced.model, 0, 0});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("num_layers_per_stage=[8, 10, 10, 10, 10, 11, 11, 9]: expected pp_size 8 layer counts summing to "
                                     "the model's 80 layers"),
            std::string::npos)
      << bad.error().message;
}

TEST(Import, TorchtitanRunsNormsRotaryAndSwiGluEagerUnlessCompiled) {
  // torchtitan compiles only when asked (training.compile until 2025-08, then [compile] enable with
  // components); eager, nn.RMSNorm, the rotary embedding and SwiGLU are PyTorch's decompositions.
  std::ifstream in(test::dataFile("examples/torchtitan-llama3-8b.toml"));
  std::stringstream text;
  text << in.rdbuf();
  auto cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json"));
  auto import = [&](const std::string& extra) {
    auto p = importTorchtitan(text.str() + extra, ImportContext{cluster, std::nullopt, 0, 0});
    EXPECT_TRUE(p) << p.error().toString();
    return p.value_or(Plan{}).execution.unfused;
  };
  EXPECT_EQ(import(""), UnfusedKernels::all());
  // Its loss, F.cross_entropy on fp32 logits, unless compile.components holds "loss" (its default).
  auto loss = [&](const std::string& extra) {
    auto p = importTorchtitan(text.str() + extra, ImportContext{cluster, std::nullopt, 0, 0});
    EXPECT_TRUE(p) << p.error().toString();
    return p.value_or(Plan{}).execution.torchCrossEntropy;
  };
  EXPECT_TRUE(loss(""));
  EXPECT_FALSE(loss("\n[compile]\nenable = true\n"));
  EXPECT_TRUE(loss("\n[compile]\nenable = true\ncomponents = [\"model\"]\n"));
  // Compile wraps each transformer block: the norm after the last one stays eager.
  const UnfusedKernels finalNormOnly{.finalNorm = true};
  EXPECT_EQ(import("\n[compile]\nenable = true\n"), finalNormOnly);
  EXPECT_EQ(import("\n[compile]\nenable = true\ncomponents = [\"loss\"]\n"), UnfusedKernels::all());
  EXPECT_EQ(import("\n[training]\ncompile = true\n"), finalNormOnly);
  UnfusedKernels tritonNorm = UnfusedKernels::all();
  tritonNorm.rmsNorm = tritonNorm.finalNorm = false;
  EXPECT_EQ(import("\n[model]\nnorm_type = \"fused_rmsnorm\"\n"), tritonNorm);
  EXPECT_EQ(import("\n[model]\nnorm_type = \"fused_rmsnorm\"\n[compile]\nenable = true\n"), UnfusedKernels{});
  // The eager plan is slower than the compiled one on the same layout.
  auto eager = importTorchtitan(text.str(), ImportContext{cluster, std::nullopt, 0, 0});
  auto compiled = importTorchtitan(text.str() + "\n[compile]\nenable = true\n", ImportContext{cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(eager && compiled);
  const auto slow = costmodel::evaluatePlan(*eager);
  const auto fast = costmodel::evaluatePlan(*compiled);
  ASSERT_TRUE(slow && fast);
  EXPECT_GT(slow->stepSeconds, fast->stepSeconds);
}

TEST(Import, MegatronReadsItsRopeAndSwiGluFusionSwitchesAndExportsThem) {
  const Plan p = roundTripPlans()[0];  // Llama 3 8B
  const std::string args = *exportPlan(p, ExportFormat::kMegatron, "plan.json");
  const ImportContext context{p.cluster, p.model, 0, 0};
  auto fused = importMegatron(args, context);
  ASSERT_TRUE(fused) << fused.error().toString();
  EXPECT_FALSE(fused->execution.unfused.any());
  auto unfused = importMegatron(args + " \\\n--no-rope-fusion \\\n--no-bias-swiglu-fusion\n", context);
  ASSERT_TRUE(unfused) << unfused.error().toString();
  EXPECT_TRUE(unfused->execution.unfused.rotary);
  EXPECT_TRUE(unfused->execution.unfused.gatedActivation);
  EXPECT_FALSE(unfused->execution.unfused.rmsNorm);  // Transformer Engine's fused RMSNorm
  const std::string again = *exportPlan(*unfused, ExportFormat::kMegatron, "plan.json");
  EXPECT_NE(again.find("\n--no-rope-fusion"), std::string::npos);
  EXPECT_NE(again.find("\n--no-bias-swiglu-fusion"), std::string::npos);
  auto back = importMegatron(again, context);
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->execution.unfused, unfused->execution.unfused);
  // An eager RMSNorm has no Megatron flag: the export says so.
  Plan eagerNorm = p;
  eagerNorm.execution.unfused.finalNorm = true;
  EXPECT_NE(exportPlan(eagerNorm, ExportFormat::kMegatron, "plan.json")->find("eager RMSNorm after the last block"), std::string::npos);
  ASSERT_TRUE(addUnfusedKernel(eagerNorm.execution.unfused, "rmsnorm"));
  const std::string eagerNorms = *exportPlan(eagerNorm, ExportFormat::kMegatron, "plan.json");
  EXPECT_NE(eagerNorms.find("eager RMSNorm;"), std::string::npos) << eagerNorms;
  // Megatron-Bridge: the providers fuse both unless the model config turns them off.
  const std::string bridge = "model:\n  tensor_model_parallel_size: 2\n  apply_rope_fusion: false\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n";
  auto bridged = importMegatronBridge(bridge, context);
  ASSERT_TRUE(bridged) << bridged.error().toString();
  EXPECT_TRUE(bridged->execution.unfused.rotary);
  EXPECT_FALSE(bridged->execution.unfused.gatedActivation);
  std::string noActivationFusion = bridge;
  noActivationFusion.replace(noActivationFusion.find("apply_rope_fusion: false"), 24, "bias_activation_fusion: false");
  auto unfusedActivation = importMegatronBridge(noActivationFusion, context);
  ASSERT_TRUE(unfusedActivation) << unfusedActivation.error().toString();
  EXPECT_FALSE(unfusedActivation->execution.unfused.rotary);
  EXPECT_TRUE(unfusedActivation->execution.unfused.gatedActivation);
  // Megatron's local layer spec builds torch.nn.RMSNorm: an eager norm (Transformer Engine's otherwise).
  auto local = importMegatron(args + " \\\n--transformer-impl local\n", context);
  ASSERT_TRUE(local) << local.error().toString();
  EXPECT_TRUE(local->execution.unfused.rmsNorm);
  EXPECT_FALSE(local->execution.unfused.rotary);
  // Megatron-DeepSpeed has neither fusion.
  const Plan q = roundTripPlans()[2];
  const auto config = exportPlan(q, ExportFormat::kDeepSpeed, "plan.json");
  ASSERT_TRUE(config) << config.error().toString();
  auto deepspeed = importDeepSpeed(Json::parse(*config), *exportPlan(q, ExportFormat::kMegatron, "plan.json"),
                                   ImportContext{q.cluster, q.model, 0, 0});
  ASSERT_TRUE(deepspeed) << deepspeed.error().toString();
  EXPECT_TRUE(deepspeed->execution.unfused.rotary);
  EXPECT_TRUE(deepspeed->execution.unfused.gatedActivation);
}

TEST(Import, TorchtitanReadsItsExpertParallelCommBackend) {
  // [parallelism] expert_parallel_comm_backend: standard all-to-alls, or DeepEP's or HybridEP's kernels;
  // another value is one error naming the key and the value.
  const auto cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json"));
  const Model qwen = test::loadModelOrFail(test::dataFile("models/qwen3-30b-a3b.json"));
  const std::string base = "[parallelism]\nexpert_parallel_degree = 8\n";
  const std::string tail = "\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n";
  const std::pair<const char*, MoeDispatcher> cases[] = {{"", MoeDispatcher::kAllToAll},
                                                         {"expert_parallel_comm_backend = \"standard\"", MoeDispatcher::kAllToAll},
                                                         {"expert_parallel_comm_backend = \"deepep\"", MoeDispatcher::kDeepEp},
                                                         {"expert_parallel_comm_backend = \"hybridep\"", MoeDispatcher::kHybridEp}};
  for (const auto& [line, dispatcher] : cases) {
    auto p = importTorchtitan(base + line + tail, ImportContext{cluster, qwen, 0, 0});
    ASSERT_TRUE(p) << line << ": " << p.error().toString();
    EXPECT_EQ(p->parallel.ep, 8) << line;
    EXPECT_EQ(p->execution.moeDispatcher, dispatcher) << line;
  }
  auto bad = importTorchtitan(base + "expert_parallel_comm_backend = \"nvshmem\"" + tail, ImportContext{cluster, qwen, 0, 0});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("parallelism.expert_parallel_comm_backend"), std::string::npos) << bad.error().toString();
  EXPECT_NE(bad.error().message.find("nvshmem"), std::string::npos) << bad.error().toString();
  // As torchtitan, DeepEP without expert parallelism is refused.
  auto noEp = importTorchtitan("[parallelism]\nexpert_parallel_degree = 1\nexpert_parallel_comm_backend = \"deepep\"" + tail,
                               ImportContext{cluster, qwen, 0, 0});
  ASSERT_FALSE(noEp);
  EXPECT_NE(noEp.error().message.find("expert_parallel_degree"), std::string::npos) << noEp.error().toString();
}

TEST(Import, TorchtitanRefusesTensorParallelismWithoutLossParallel) {
  // colo costs torchtitan's loss on each rank's vocabulary shard; a job that turns loss parallel off
  // under TP (either key torchtitan has used) is refused by name. Without TP the flag changes nothing.
  const auto cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json"));
  const Model llama = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  const std::string tail = "\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n";
  auto on = importTorchtitan("[parallelism]\ntensor_parallel_degree = 2" + tail, ImportContext{cluster, llama, 0, 0});
  ASSERT_TRUE(on) << on.error().toString();
  EXPECT_TRUE(on->execution.torchCrossEntropy);
  auto off = importTorchtitan("[parallelism]\ntensor_parallel_degree = 2\ndisable_loss_parallel = true" + tail,
                              ImportContext{cluster, llama, 0, 0});
  ASSERT_FALSE(off);
  EXPECT_NE(off.error().message.find("parallelism.disable_loss_parallel"), std::string::npos) << off.error().toString();
  auto legacy = importTorchtitan("[training]\ntensor_parallel_degree = 2\ndisable_loss_parallel = true\nbatch_size = 1\nseq_len = 4096\n",
                                 ImportContext{cluster, llama, 0, 0});
  ASSERT_FALSE(legacy);
  EXPECT_NE(legacy.error().message.find("training.disable_loss_parallel"), std::string::npos) << legacy.error().toString();
  auto noTp = importTorchtitan("[parallelism]\ndisable_loss_parallel = true" + tail, ImportContext{cluster, llama, 0, 0});
  EXPECT_TRUE(noTp) << noTp.error().toString();
}

TEST(Import, TorchtitanTomlReadsFsdpAndPerOpCheckpointing) {
  std::ifstream in(test::dataFile("examples/torchtitan-llama3-8b.toml"));
  std::stringstream text;
  text << in.rdbuf();
  auto cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100.json"));
  auto p = importTorchtitan(text.str(), ImportContext{cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(p) << p.error().toString();
  EXPECT_EQ(p->model.name(), "llama3-8b");  // [model] llama3 / 8B is the library's
  EXPECT_EQ(p->parallel.dp, 8);              // data_parallel_shard_degree -1: every GPU
  EXPECT_EQ(p->zeroStage, 3);                // FSDP2
  EXPECT_TRUE(p->execution.fp32Params);
  EXPECT_EQ(p->stages.front().recompute, RecomputePolicy::kOp);
  EXPECT_EQ(p->globalBatchSize, 8);
  EXPECT_EQ(p->seqLen, 8192);
  // tp 2 with async TP and float8; degrees that do not multiply to the cluster are named.
  std::string tp = text.str();
  tp.replace(tp.find("tensor_parallel_degree = 1"), 26, "tensor_parallel_degree = 2\nenable_async_tensor_parallel = true");
  tp.replace(tp.find("name = \"llama3\""), 15, "name = \"llama3\"\nconverters = [\"float8\"]");
  auto async = importTorchtitan(tp, ImportContext{cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(async) << async.error().toString();
  EXPECT_EQ(async->parallel.tp, 2);
  EXPECT_EQ(async->parallel.dp, 4);
  EXPECT_TRUE(async->execution.tpCommOverlap);
  EXPECT_EQ(async->execution.tpOverlap, TpOverlap::kMicroPipeline);  // PyTorch's async TP, not userbuffers
  EXPECT_EQ(p->execution.tpOverlap, TpOverlap::kUserbuffers);        // off: the default, as Megatron writes it
  EXPECT_EQ(async->precision, DType::kFp8);
  EXPECT_EQ(async->execution.float8Recipe, Float8Recipe::kTensorwise);  // torchao's default recipe
  std::string rowwise = tp;
  rowwise += "\n[float8]\nrecipe_name = \"rowwise\"\n";
  auto rows = importTorchtitan(rowwise, ImportContext{cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(rows) << rows.error().toString();
  EXPECT_EQ(rows->execution.float8Recipe, Float8Recipe::kRowwise);
  auto unknown = importTorchtitan(tp + "\n[float8]\nrecipe_name = \"mxfp8\"\n", ImportContext{cluster, std::nullopt, 0, 0});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("float8.recipe_name"), std::string::npos);
  EXPECT_NE(unknown.error().message.find("mxfp8"), std::string::npos);
  EXPECT_EQ(async->execution.gradSync, GradSync::kMicroBatch);
  // With pipeline parallelism PyTorch's pipelining syncs the FSDP gradients once per step.
  std::string piped = text.str();
  piped.replace(piped.find("pipeline_parallel_degree = 1"), 28, "pipeline_parallel_degree = 2");
  auto pp = importTorchtitan(piped, ImportContext{cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(pp) << pp.error().toString();
  EXPECT_EQ(pp->parallel.pp, 2);
  EXPECT_EQ(pp->execution.gradSync, GradSync::kStep);
  std::string bad = text.str();
  bad.replace(bad.find("data_parallel_shard_degree = -1"), 31, "data_parallel_shard_degree = 3");
  auto refused = importTorchtitan(bad, ImportContext{cluster, std::nullopt, 0, 0});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("multiply to"), std::string::npos);
}

// torchtitan's TOML as each release spelled it: until 2025-03 the degrees under [training] and
// [experimental], the local batch as training.batch_size, a count of pipeline micro-batches (the
// pipeline degree by default) and float8 as float8.enable_float8_linear; then [parallelism] with
// that count; from 2025-04 a micro-batch size. Each is the same job (Llama 3.1 405B on 512 H100s,
// torchtitan's 3D benchmark); a key the reader does not know must not silently become tp 1.
TEST(Import, TorchtitanReadsEveryKeyLayoutItHasUsed) {
  auto base = test::loadClusterOrFail(test::dataFile("clusters/h100-hbm2e-500w-x64.json"));
  auto cluster = scaleCluster(base, 512);
  ASSERT_TRUE(cluster) << cluster.error().toString();
  const ImportContext context{*cluster, std::nullopt, 0, 0};
  const std::string model = "[model]\nname = \"llama3\"\nflavor = \"405B\"\n";
  const std::string end2024 = model +
                              "[training]\nbatch_size = 32\nseq_len = 8192\ndata_parallel_shard_degree = -1\n"
                              "tensor_parallel_degree = 8  # 8-way TP\ncompile = true\n"
                              "[experimental]\npipeline_parallel_degree = 8\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"
                              "enable_async_tensor_parallel = true\ncontext_parallel_degree = 1\n"
                              "[activation_checkpoint]\nmode = 'full' # ['none', 'selective', 'full']\n"
                              "[float8]\nenable_float8_linear = true\nenable_fsdp_float8_all_gather = true\n";
  const std::string march2025 = model + "converters = \"float8\"\n"
                                "[training]\nbatch_size = 32\nseq_len = 8192\ncompile = true\n"
                                "[parallelism]\ndata_parallel_shard_degree = -1\ntensor_parallel_degree = 8\n"
                                "pipeline_parallel_degree = 8\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"
                                "pipeline_parallel_microbatches = 8\nenable_async_tensor_parallel = true\n"
                                "[activation_checkpoint]\nmode = \"full\"\n";
  const std::string later = model + "converters = [\"float8\"]\n"
                            "[training]\nlocal_batch_size = 32\nseq_len = 8192\ncompile = true\n"
                            "[parallelism]\ndata_parallel_shard_degree = -1\ntensor_parallel_degree = 8\n"
                            "pipeline_parallel_degree = 8\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"
                            "pipeline_parallel_microbatch_size = 4\nenable_async_tensor_parallel = true\n"
                            "[activation_checkpoint]\nmode = \"full\"\n";
  for (const auto& toml : {end2024, march2025, later}) {
    auto p = importTorchtitan(toml, context);
    ASSERT_TRUE(p) << p.error().toString() << "\n" << toml;
    EXPECT_EQ(p->parallel.tp, 8) << toml;
    EXPECT_EQ(p->parallel.pp, 8) << toml;
    EXPECT_EQ(p->parallel.dp, 8) << toml;
    EXPECT_EQ(p->parallel.virtualStages, 2) << toml;
    EXPECT_EQ(p->schedule, Schedule::kInterleaved) << toml;
    EXPECT_EQ(p->microBatchSize, 4) << toml;  // 32 samples in 8 micro-batches
    EXPECT_EQ(p->globalBatchSize, 256) << toml;
    EXPECT_EQ(p->precision, DType::kFp8) << toml;
    EXPECT_EQ(p->execution.float8Recipe, Float8Recipe::kTensorwise) << toml;
    EXPECT_TRUE(p->execution.tpCommOverlap) << toml;
    EXPECT_EQ(p->execution.unfused, UnfusedKernels{.finalNorm = true}) << toml;  // compiled blocks
    // Each layout (training.compile included) predates October 2025: SDPA's FlashAttention-2 kernels.
    EXPECT_TRUE(p->execution.flashAttention2) << toml;
    for (const auto& st : p->stages) {
      EXPECT_EQ(st.recompute, RecomputePolicy::kFull) << toml;
      EXPECT_EQ(st.recomputeLayers, st.layers) << toml;
    }
  }
  // Without pipelining the schedule a TOML names is not built (torchtitan's DeepSeek-V3 config).
  std::string flat = later;
  flat.replace(flat.find("pipeline_parallel_degree = 8"), 28, "pipeline_parallel_degree = 1");
  flat.replace(flat.find("tensor_parallel_degree = 8"), 26, "tensor_parallel_degree = 4");
  auto unpiped = importTorchtitan(flat, context);
  ASSERT_TRUE(unpiped) << unpiped.error().toString();
  EXPECT_EQ(unpiped->parallel.pp, 1);
  EXPECT_EQ(unpiped->parallel.virtualStages, 1);
  EXPECT_EQ(unpiped->schedule, Schedule::kOneFOneB);
  EXPECT_EQ(unpiped->microBatchSize, 32);  // the whole local batch at once
  // A layout torchtitan still reads after cuDNN's attention went first says nothing of the kernels.
  std::string current = later;
  current.replace(current.find("compile = true"), 14, "[compile]\nenable = true");
  auto now = importTorchtitan(current, context);
  ASSERT_TRUE(now) << now.error().toString();
  EXPECT_FALSE(now->execution.flashAttention2);
  // FSDP shards over the shard and context-parallel ranks together: with cp 8 and no shard degree
  // left, the parameters are still sharded eight ways.
  std::string contextParallel = later;
  contextParallel.replace(contextParallel.find("pipeline_parallel_degree = 8"), 28,
                          "pipeline_parallel_degree = 8\ncontext_parallel_degree = 8");
  auto cp = importTorchtitan(contextParallel, context);
  ASSERT_TRUE(cp) << cp.error().toString();
  EXPECT_EQ(cp->parallel.cp, 8);
  EXPECT_EQ(cp->parallel.dp, 1);
  EXPECT_EQ(cp->zeroStage, 3);
  // A [parallelism] TOML that leaves the batch at its defaults is the newer layout: micro-batches of 1.
  auto defaults = importTorchtitan(model + "[parallelism]\npipeline_parallel_degree = 4\n[training]\nseq_len = 8192\n", context);
  ASSERT_TRUE(defaults) << defaults.error().toString();
  EXPECT_EQ(defaults->microBatchSize, 1);
  // The older count of micro-batches defaults to the pipeline degree and must divide the local batch.
  std::string counted = march2025;
  counted.replace(counted.find("pipeline_parallel_microbatches = 8"), 34, "pipeline_parallel_microbatches = 16");
  auto sixteen = importTorchtitan(counted, context);
  ASSERT_TRUE(sixteen) << sixteen.error().toString();
  EXPECT_EQ(sixteen->microBatchSize, 2);
  counted.replace(counted.find("pipeline_parallel_microbatches = 16"), 35, "pipeline_parallel_microbatches = 5");
  auto five = importTorchtitan(counted, context);
  ASSERT_FALSE(five);
  EXPECT_NE(five.error().message.find("parallelism.pipeline_parallel_microbatches: the local batch 32 is not divisible by 5"),
            std::string::npos)
      << five.error().message;
  // A checkpointing mode torchtitan does not have is named, not read as its default.
  std::string odd = later;
  odd.replace(odd.find("mode = \"full\""), 13, "mode = \"sometimes\"");
  auto refused = importTorchtitan(odd, context);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("activation_checkpoint.mode: expected none, selective or full, got \"sometimes\""),
            std::string::npos)
      << refused.error().message;
  odd = later;
  odd.replace(odd.find("mode = \"full\""), 13, "mode = \"selective\"\nselective_ac_option = \"half\"");
  refused = importTorchtitan(odd, context);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("selective_ac_option: expected op or a positive integer, got \"half\""), std::string::npos)
      << refused.error().message;
}

}  // namespace
}  // namespace colo::planner

namespace colo::planner {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Import, MegatronBridgeConfigStatesTheWholeJob) {
  // The example ConfigContainer dump: Llama 3 8B's shape from the model section, cp 2, the distributed
  // optimizer with its overlaps, bf16, the batch from the train section.
  auto cluster = scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json")), 16);
  ASSERT_TRUE(cluster);
  auto p = importMegatronBridge(readFile(test::dataFile("examples/megatron-bridge-llama3-8b.yaml")), ImportContext{*cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(p) << p.error().toString();
  EXPECT_EQ(p->parallel.cp, 2);
  EXPECT_EQ(p->parallel.dp, 8);
  EXPECT_EQ(p->globalBatchSize, 128);
  EXPECT_EQ(p->seqLen, 8192);
  EXPECT_EQ(p->zeroStage, 1);
  EXPECT_EQ(p->precision, DType::kBf16);
  EXPECT_TRUE(p->execution.overlapGradReduce);
  EXPECT_TRUE(p->execution.overlapParamGather);
  const Model llama = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  EXPECT_EQ(countParameters(*p->model.spec).total, countParameters(*llama.spec).total);
  EXPECT_EQ(p->model.spec->kvHeads(), 8);
  EXPECT_EQ(p->model.spec->activation, Activation::kSwiGlu);
  EXPECT_FALSE(p->model.spec->tieWordEmbeddings);
  // Transformer Engine and gradient-accumulation fusion unless the config switches them off.
  EXPECT_TRUE(p->execution.fusedBiasGrad);
  const std::string yaml = readFile(test::dataFile("examples/megatron-bridge-llama3-8b.yaml"));
  const std::size_t model = yaml.find("\nmodel:\n");
  ASSERT_NE(model, std::string::npos);
  std::string local = yaml;
  local.insert(model + 8, "  transformer_impl: local\n  gradient_accumulation_fusion: False\n");
  auto own = importMegatronBridge(local, ImportContext{*cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(own) << own.error().toString();
  EXPECT_FALSE(own->execution.fusedBiasGrad);
  EXPECT_FALSE(own->execution.teDummyWgrads);
  EXPECT_NE(own->execution.gradAccumulation, GradAccumulation::kFused);
}

TEST(Import, MegatronBridgeOverridesAndMixtureOfExperts) {
  // An override file (the older *_config section names) on a library model.
  auto cluster = scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json")), 16);
  ASSERT_TRUE(cluster);
  const Model llama = test::loadModelOrFail(test::dataFile("models/llama3-8b.json"));
  const std::string overrides =
      "# override example\nmodel_config:\n  tensor_model_parallel_size: 2\n  pipeline_model_parallel_size: 2\n"
      "  sequence_parallel: true  # with tp\ntrain_config:\n  global_batch_size: 256\n  micro_batch_size: 4\n"
      "profiling_config:\n  profile_ranks: [0, 1]\nmixed_precision: bf16_mixed\n";
  auto p = importMegatronBridge(overrides, ImportContext{*cluster, llama, 0, 0});
  ASSERT_TRUE(p) << p.error().toString();
  EXPECT_EQ(p->parallel.tp, 2);
  EXPECT_EQ(p->parallel.pp, 2);
  EXPECT_EQ(p->parallel.dp, 4);
  EXPECT_TRUE(p->parallel.sequenceParallel);
  EXPECT_EQ(p->microBatchSize, 4);
  EXPECT_EQ(p->precision, DType::kBf16);
  // Megatron-Bridge's precision presets by name (src/megatron/bridge/training/mixed_precision.py): the
  // fp8 ones (delayed, current and sub-channel scaling, MXFP8) train in fp8, the NVFP4 one in fp4, the
  // plain ones at 16 bits; a section's own fp8 or fp4 key says the same.
  const std::pair<const char*, DType> presets[] = {{"bf16_with_fp8_current_scaling_mixed", DType::kFp8},
                                                   {"bf16_with_mxfp8_mixed", DType::kFp8},
                                                   {"bf16_with_fp8_delayed_scaling_mixed", DType::kFp8},
                                                   {"bf16_with_nvfp4_mixed", DType::kFp4},
                                                   {"fp16_mixed", DType::kFp16},
                                                   {"bf16_mixed", DType::kBf16}};
  auto blackwell = scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-b200-x64.json")), 16);
  ASSERT_TRUE(blackwell);
  for (const auto& [preset, expected] : presets) {
    std::string named = overrides;
    named.replace(named.find("bf16_mixed"), std::string("bf16_mixed").size(), preset);
    auto q = importMegatronBridge(named, ImportContext{*blackwell, llama, 0, 0});
    ASSERT_TRUE(q) << preset << ": " << q.error().toString();
    EXPECT_EQ(q->precision, expected) << preset;
  }
  for (const auto& [section, expected] : std::vector<std::pair<std::string, DType>>{
           {"mixed_precision:\n  bf16: true\n  fp8: null\n  fp4: e2m1\n", DType::kFp4},
           {"mixed_precision:\n  bf16: true\n  fp8: null\n  fp4: null\n", DType::kBf16},
           {"mixed_precision:\n  bf16: true\n  fp8: False\n  fp4: FALSE\n", DType::kBf16},
           {"mixed_precision:\n  bf16: true\n  fp8: None\n", DType::kBf16},
           {"mixed_precision:\n  bf16: true\n  fp8: hybrid\n", DType::kFp8}}) {
    std::string stated = overrides;
    stated.replace(stated.find("mixed_precision: bf16_mixed\n"), std::string("mixed_precision: bf16_mixed\n").size(), section);
    auto q = importMegatronBridge(stated, ImportContext{*blackwell, llama, 0, 0});
    ASSERT_TRUE(q) << section << ": " << q.error().toString();
    EXPECT_EQ(q->precision, expected) << section;
  }
  // A MoE model: experts, top-k and the dense first layers from a block list.
  const std::string moe =
      "model:\n  num_layers: 4\n  hidden_size: 1024\n  ffn_hidden_size: 4096\n  num_attention_heads: 16\n  seq_length: 2048\n"
      "  vocab_size: 32000\n  normalization: RMSNorm\n  gated_linear_unit: true\n  position_embedding_type: rope\n"
      "  num_moe_experts: 8\n  moe_router_topk: 2\n  moe_ffn_hidden_size: 1024\n  expert_model_parallel_size: 4\n  moe_layer_freq:\n"
      "  - 0\n  - 1\n  - 1\n  - 1\n  tensor_model_parallel_size: 1\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n";
  auto m = importMegatronBridge(moe, ImportContext{*cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(m) << m.error().toString();
  EXPECT_EQ(m->model.spec->moe.numExperts, 8);
  EXPECT_EQ(m->model.spec->moe.topK, 2);
  EXPECT_EQ(m->model.spec->moe.firstDenseLayers, 1);
  EXPECT_EQ(m->parallel.ep, 4);
  // Megatron-Bridge's MoE providers set moe_grouped_gemm (Transformer Engine's GroupedLinear): a config
  // without the key keeps that default; one that turns it off runs one expert after another.
  EXPECT_TRUE(m->execution.teGroupedGemm);
  std::string sequential = moe;
  sequential.insert(sequential.find("  num_moe_experts"), "  moe_grouped_gemm: false\n");
  auto off = importMegatronBridge(sequential, ImportContext{*cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(off) << off.error().toString();
  EXPECT_FALSE(off->execution.teGroupedGemm);
  // Hierarchical context parallelism's sizes, a list in the config.
  std::string hierarchical = moe;
  hierarchical.insert(hierarchical.find("  num_moe_experts"),
                      "  context_parallel_size: 4\n  cp_comm_type: a2a+p2p\n  hierarchical_context_parallel_sizes: [2, 2]\n");
  hierarchical.replace(hierarchical.find("global_batch_size: 64"), 21, "global_batch_size: 16");
  auto nested = importMegatronBridge(hierarchical, ImportContext{*cluster, std::nullopt, 0, 0});
  ASSERT_TRUE(nested) << nested.error().toString();
  EXPECT_EQ(nested->execution.cpCommType, CpCommType::kA2aP2p);
  EXPECT_EQ(nested->execution.hierarchicalCpSizes, (std::vector<std::int64_t>{2, 2}));
  // What the reader cannot read is named with its line.
  auto flow = importMegatronBridge("model:\n  tensor_model_parallel_size: 2\ntrain: {global_batch_size: 8}\n", ImportContext{*cluster, llama, 0, 0});
  ASSERT_FALSE(flow);
  EXPECT_NE(flow.error().message.find("line 3"), std::string::npos) << flow.error().message;
  auto orphan = importMegatronBridge("- 1\n", ImportContext{*cluster, llama, 0, 0});
  ASSERT_FALSE(orphan);
  auto tab = importMegatronBridge("model:\n\ttensor_model_parallel_size: 2\n", ImportContext{*cluster, llama, 0, 0});
  ASSERT_FALSE(tab);
  EXPECT_NE(tab.error().message.find("tabs"), std::string::npos) << tab.error().message;
}

TEST(Import, RecomputeModulesRoundTripThroughMegatronAndBridge) {
  // Megatron-Bridge's MoE recipes name what selective recompute re-runs (GPT-OSS: layernorm and moe_act;
  // here on Mixtral): Megatron's --recompute-modules, emitted, accepted by the argument schema, read back.
  Plan p = basePlan("mixtral-8x7b", "dgx-h100-x64", 64, 2, 1, 1, 8, 1, 256, RecomputePolicy::kSelective);
  p.execution.teGroupedGemm = true;
  p.execution.fusedBiasGrad = p.execution.teDummyWgrads = p.execution.gradNanCheck = true;
  p.execution.recomputeModules = parseRecomputeModules("moe_act,layernorm").value();
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const auto args = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(args) << args.error().toString();
  EXPECT_NE(args->find("--recompute-modules moe_act layernorm"), std::string::npos) << *args;
  EXPECT_EQ(megatronRules(*args, p.cluster.totalGpus()), (std::map<std::string, std::string>{}));
  const ImportContext context{p.cluster, p.model, 0, 0};
  auto back = importMegatron(*args, context);
  ASSERT_TRUE(back) << back.error().toString();
  expectSamePlan(p, *back, "recompute modules");
  EXPECT_EQ(back->execution.recomputeModules, p.execution.recomputeModules);
  // DeepSpeed and Colossal-AI checkpoint whole layers: their exports say so.
  for (const auto format : {ExportFormat::kDeepSpeed, ExportFormat::kColossalAi}) {
    const auto other = exportPlan(p, format, "plan.json");
    ASSERT_TRUE(other) << other.error().toString();
    EXPECT_NE(other->find("recomputes Megatron-Core's modules moe_act+layernorm"), std::string::npos) << *other;
  }
  // The default (the attention core) writes no list; the deprecated --moe-layer-recompute adds moe.
  Plan plain = p;
  plain.execution.recomputeModules = {};
  EXPECT_EQ(exportPlan(plain, ExportFormat::kMegatron, "plan.json")->find("--recompute-modules"), std::string::npos);
  auto legacy = importMegatron(*exportPlan(plain, ExportFormat::kMegatron, "plan.json") + " --moe-layer-recompute", context);
  ASSERT_TRUE(legacy) << legacy.error().toString();
  EXPECT_TRUE(legacy->execution.recomputeModules.moe && legacy->execution.recomputeModules.coreAttn);
  // Megatron's rules: moe_act needs the grouped GEMM; an unknown module is refused by the schema and the import.
  std::string ungrouped = *args;
  ungrouped.erase(ungrouped.find("--moe-grouped-gemm"), 18);
  EXPECT_EQ(megatronRules(ungrouped, p.cluster.totalGpus()).count("recompute_modules"), 1u);
  // Under fp8 Megatron refuses moe_act and layernorm recompute with its default delayed scaling: the
  // export asks for current scaling.
  Plan fp8 = p;
  fp8.precision = DType::kFp8;
  const auto fp8Args = exportPlan(fp8, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(fp8Args) << fp8Args.error().toString();
  EXPECT_NE(fp8Args->find("--fp8-recipe tensorwise"), std::string::npos) << *fp8Args;
  EXPECT_EQ(megatronRules(*fp8Args, p.cluster.totalGpus()), (std::map<std::string, std::string>{}));
  std::string delayed = *fp8Args;
  delayed.replace(delayed.find("--fp8-recipe tensorwise"), 23, "--fp8-recipe delayed");
  EXPECT_EQ(megatronRules(delayed, p.cluster.totalGpus()).count("recompute_modules"), 1u);
  auto unknown = importMegatron(*args + " --recompute-modules mlp attention", context);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("'attention'"), std::string::npos) << unknown.error().message;
  // Bridge's YAML: a block list or a flow list under model.
  const std::string job = "train:\n  global_batch_size: 256\n  micro_batch_size: 1\nmodel:\n  recompute_granularity: selective\n";
  auto block = importMegatronBridge(job + "  recompute_modules:\n  - moe_act\n  - layernorm\n", context);
  ASSERT_TRUE(block) << block.error().toString();
  EXPECT_EQ(block->execution.recomputeModules, p.execution.recomputeModules);
  auto flow = importMegatronBridge(job + "  recompute_modules: [layernorm, 'moe_act']\n", context);
  ASSERT_TRUE(flow) << flow.error().toString();
  EXPECT_EQ(flow->execution.recomputeModules, p.execution.recomputeModules);
  // An empty list turns selective recompute off (Bridge's recipes set [] so): no recompute, and no
  // flag in the export, as Megatron's --recompute-modules takes at least one name.
  auto empty = importMegatronBridge(job + "  recompute_modules: []\n", context);
  ASSERT_TRUE(empty) << empty.error().toString();
  EXPECT_EQ(empty->stages.front().recomputeLayers, 0);
  Plan nothing = p;
  nothing.execution.recomputeModules = RecomputeModules::none();
  const auto nothingArgs = exportPlan(nothing, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(nothingArgs) << nothingArgs.error().toString();
  EXPECT_EQ(nothingArgs->find("--recompute"), std::string::npos) << *nothingArgs;
  EXPECT_FALSE(importMegatron(*args + " --recompute-modules", context));
}

}  // namespace
}  // namespace colo::planner
