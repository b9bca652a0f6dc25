#include "colo/planner/baseline.h"

#include <set>

#include <gtest/gtest.h>

#include "colo/planner/export.h"
#include "colo/planner/export_check.h"
#include "colo/planner/search.h"
#include "core/test_support.h"

namespace colo::planner {
namespace {

TEST(Baseline, MegatronRulesPutTensorParallelInsideANode) {
  const Model model = test::loadModelOrFail(test::dataFile("models/gpt3-175b.json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb-x128.json"));
  auto b = baselinePlan(Baseline::kMegatron, model, cluster, 1536, 0, DType::kBf16, 0.95);
  ASSERT_TRUE(b) << b.error().toString();
  EXPECT_EQ(b->plan.parallel.tp, 8);
  EXPECT_TRUE(b->plan.parallel.sequenceParallel);
  EXPECT_EQ(b->plan.zeroStage, 1);
  EXPECT_EQ(b->plan.stages.front().recompute, RecomputePolicy::kSelective);
  EXPECT_TRUE(b->evaluation.fits);
  // The smallest pp that fits: one less would not.
  EXPECT_GT(b->plan.parallel.pp, 1);
  EXPECT_TRUE(validatePlan(b->plan));
  EXPECT_NE(b->rules.find("the smallest pp that fits (" + std::to_string(b->plan.parallel.pp) + ")"), std::string::npos) << b->rules;
  // When no pp fits, the rules say so (they claimed "the smallest pp that fits").
  const ClusterSpec node = test::loadClusterOrFail(test::dataFile("clusters/dgx-a100-80gb.json"));
  auto none = baselinePlan(Baseline::kMegatron, model, node, 8, 0, DType::kBf16, 0.95);
  ASSERT_TRUE(none) << none.error().toString();
  EXPECT_FALSE(none->evaluation.fits);
  EXPECT_NE(none->rules.find("no pp that fits (the largest tried"), std::string::npos) << none->rules;
}

TEST(Baseline, LlamaGroupsLimitTensorParallelism) {
  const Model model = test::loadModelOrFail(test::dataFile("models/llama2-70b.json"));
  const ClusterSpec cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json"));
  auto b = baselinePlan(Baseline::kMegatron, model, cluster, 512, 0, DType::kBf16, 0.95);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->plan.parallel.tp, 8);  // 8 kv groups allow 8
  auto z = baselinePlan(Baseline::kZero3, model, cluster, 512, 0, DType::kBf16, 0.95);
  ASSERT_TRUE(z);
  EXPECT_EQ(z->plan.parallel.dp, 512);
  EXPECT_EQ(z->plan.zeroStage, 3);
  auto bad = baselinePlan(Baseline::kDdp, model, cluster, 100, 0, DType::kBf16, 0.95);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("does not divide"), std::string::npos);
}

TEST(Baseline, DifferencesNameEachChangedSetting) {
  Plan a;
  a.parallel.tp = 8;
  a.parallel.pp = 4;
  a.stages = uniformStages(8, 4, RecomputePolicy::kSelective);
  Plan b = a;
  b.parallel.tp = 4;
  b.stages = uniformStages(8, 4, RecomputePolicy::kNone);
  const std::string d = planDifferences(a, b);
  EXPECT_NE(d.find("tp 8 -> 4"), std::string::npos) << d;
  EXPECT_NE(d.find("recompute selective -> none"), std::string::npos) << d;
  EXPECT_EQ(planDifferences(a, a), "identical");
  // The kernels and the loss a framework runs are settings too.
  Plan eager = a;
  eager.execution.unfused = UnfusedKernels::all();
  eager.execution.torchCrossEntropy = true;
  const std::string e = planDifferences(a, eager);
  EXPECT_NE(e.find("eager kernels none -> rmsnorm/rotary/gated_activation"), std::string::npos) << e;
  EXPECT_NE(e.find("loss vocab-parallel -> torch"), std::string::npos) << e;
  Plan inPlace = a;
  inPlace.execution.fusedCrossEntropy = inPlace.execution.crossEntropyInPlace = true;
  EXPECT_NE(planDifferences(a, inPlace).find("loss vocab-parallel -> fused-in-place"), std::string::npos);
}

TEST(Export, MegatronArgumentsCarryLatentAttentionAndSharedExperts) {
  Plan p;
  p.name = "dsv3";
  p.model = test::loadModelOrFail(test::dataFile("models/deepseek-v3.json"));
  ModelSpec small = *p.model.spec;
  small.numLayers = 5;
  p.model.spec = small;
  p.cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-b200.json"));
  p.parallel.dp = 8;
  p.parallel.ep = 8;
  p.microBatchSize = 1;
  p.globalBatchSize = 64;
  p.seqLen = 4096;
  p.zeroStage = 1;
  p.stages = uniformStages(5, 1, RecomputePolicy::kNone);
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const auto megatron = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(megatron) << megatron.error().toString();
  for (const char* flag : {"--multi-latent-attention", "--q-lora-rank 1536", "--kv-lora-rank 512", "--qk-head-dim 128",
                           "--qk-pos-emb-head-dim 64", "--v-head-dim 128", "--num-experts 256", "--moe-router-topk 8",
                           "--moe-ffn-hidden-size 2048", "--moe-shared-expert-intermediate-size 2048",
                           "--moe-layer-freq \"[0,0,0,1,1]\"", "--expert-model-parallel-size 8",
                           "--moe-router-num-groups 8", "--moe-router-group-topk 4", "--moe-token-dispatcher-type alltoall"}) {
    EXPECT_NE(megatron->find(flag), std::string::npos) << flag << "\n" << *megatron;
  }
  EXPECT_EQ(megatron->find("--group-query-attention"), std::string::npos);
}

TEST(Export, EveryFormatCarriesThePlansSettings) {
  Plan p;
  p.name = "llama";
  p.model = test::loadModelOrFail(test::dataFile("models/llama2-70b.json"));
  p.cluster = test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json"));
  p.parallel.tp = 8;
  p.parallel.pp = 4;
  p.parallel.dp = 16;
  p.parallel.sequenceParallel = true;
  p.microBatchSize = 1;
  p.globalBatchSize = 512;
  p.seqLen = 4096;
  p.zeroStage = 1;
  p.stages = {{19, RecomputePolicy::kFull, 4}, {21, RecomputePolicy::kNone, 0}, {21, RecomputePolicy::kNone, 0},
              {19, RecomputePolicy::kFull, 4}};
  ASSERT_TRUE(validatePlan(p)) << validatePlan(p).error().toString();
  const auto megatron = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(megatron);
  for (const char* flag : {"--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 4", "--sequence-parallel",
                           "--num-query-groups 8", "--swiglu", "--normalization RMSNorm", "--untie-embeddings-and-output-weights",
                           "--decoder-first-pipeline-num-layers 19", "--decoder-last-pipeline-num-layers 19",
                           "--recompute-granularity full", "--recompute-num-layers 4", "--use-distributed-optimizer",
                           "--global-batch-size 512"}) {
    EXPECT_NE(megatron->find(flag), std::string::npos) << flag << "\n" << *megatron;
  }
  EXPECT_EQ(megatron->find("\\\n\n"), std::string::npos);  // no dangling continuation
  EXPECT_EQ(megatron->find("--no-gradient-accumulation-fusion"), std::string::npos);  // fused: Megatron's default
  p.execution.gradAccumulation = GradAccumulation::kMainGrad;
  const auto unfused = exportPlan(p, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(unfused);
  EXPECT_NE(unfused->find("--no-gradient-accumulation-fusion"), std::string::npos) << *unfused;
  p.execution.gradAccumulation = GradAccumulation::kFused;
  const auto ds = exportPlan(p, ExportFormat::kDeepSpeed, "plan.json");
  ASSERT_TRUE(ds);
  const Json j = Json::parse(*ds);
  EXPECT_EQ(j["train_batch_size"], 512);
  EXPECT_EQ(j["gradient_accumulation_steps"], 32);
  EXPECT_EQ(j["zero_optimization"]["stage"], 1);
  Plan fsdp = p;  // FSDP2 with pipelining: valid, but no DeepSpeed pipeline config expresses it
  fsdp.zeroStage = 3;
  ASSERT_TRUE(validatePlan(fsdp));
  const auto refused = exportPlan(fsdp, ExportFormat::kDeepSpeed, "plan.json");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("zero_stage 3 with pp 4"), std::string::npos) << refused.error().message;
  const auto cai = exportPlan(p, ExportFormat::kColossalAi, "plan.json");
  ASSERT_TRUE(cai);
  EXPECT_NE(cai->find("tp_size=8"), std::string::npos);
  EXPECT_NE(cai->find("pp_size=4"), std::string::npos);
  EXPECT_NE(cai->find("num_microbatches=32"), std::string::npos);
  const auto slurm = exportPlan(p, ExportFormat::kSlurm, "plan.json");
  ASSERT_TRUE(slurm);
  EXPECT_NE(slurm->find("#SBATCH --nodes=64"), std::string::npos);
  EXPECT_NE(slurm->find("--nproc-per-node 8"), std::string::npos);
  EXPECT_NE(slurm->find("colo-run \"plan.json\""), std::string::npos);
  EXPECT_FALSE(parseExportFormat("fairscale"));
}

// Every export of a representative set of plans passes the tools' own schemas (argument types and
// choices, required arguments, validate_args's rules; DeepSpeed's keys and batch rules), and the checker
// catches what the tools would refuse.
Plan exportPlanOf(const std::string& model, const std::string& cluster, std::int64_t gpus, std::int64_t tp, std::int64_t pp,
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
  return p;
}

TEST(Export, EveryExportPassesTheToolsSchemas) {
  auto megatronSchema = loadExportSchema("megatron-lm");
  ASSERT_TRUE(megatronSchema) << megatronSchema.error().toString();
  auto deepspeedSchema = loadExportSchema("deepspeed");
  ASSERT_TRUE(deepspeedSchema) << deepspeedSchema.error().toString();
  EXPECT_EQ((*megatronSchema)["source"]["repository"], "github.com/NVIDIA/Megatron-LM");
  const std::vector<Plan> plans{
      exportPlanOf("llama3-8b", "dgx-h100", 8, 2, 2, 1, 1, 2, 64, RecomputePolicy::kNone),
      exportPlanOf("llama3-70b", "dgx-h100-x64", 64, 8, 1, 2, 1, 1, 64, RecomputePolicy::kSelective),
      exportPlanOf("gpt3-175b", "dgx-a100-80gb-x128", 1024, 8, 16, 1, 1, 1, 1536, RecomputePolicy::kFull),
      exportPlanOf("mixtral-8x7b", "dgx-h100-x64", 64, 2, 2, 1, 8, 1, 256, RecomputePolicy::kNone),
      exportPlanOf("gemma-3-27b", "dgx-h100-x64", 64, 8, 2, 1, 1, 1, 64, RecomputePolicy::kFull),
      exportPlanOf("gpt-oss-120b", "dgx-h100-x64", 64, 1, 1, 1, 8, 1, 256, RecomputePolicy::kFull),
      exportPlanOf("llama4-scout", "dgx-h100-x64", 64, 4, 1, 1, 8, 1, 256, RecomputePolicy::kFull),
      [] {  // 61 layers: 5 on the first stage, 8 on each of the others (Megatron's uneven first stage)
        Plan p = exportPlanOf("deepseek-v3", "dgx-h100-x64", 512, 1, 8, 1, 64, 1, 1024, RecomputePolicy::kFull);
        p.stages = {{5, RecomputePolicy::kFull, 5}};
        for (int s = 0; s < 7; ++s) p.stages.push_back({8, RecomputePolicy::kFull, 8});
        return p;
      }(),
      exportPlanOf("qwen3-30b-a3b", "dgx-h100-x64", 64, 1, 1, 2, 8, 1, 128, RecomputePolicy::kSelective),
      [] {  // Half the optimizer states on the host (Megatron's --optimizer-cpu-offload chain of flags)
        Plan p = exportPlanOf("llama3-8b", "dgx-h100", 8, 1, 1, 1, 1, 1, 64, RecomputePolicy::kFull);
        p.offload.optimizerFraction = 0.5;
        return p;
      }(),
  };
  for (const auto& p : plans) {
    ASSERT_TRUE(validatePlan(p)) << p.name << ": " << validatePlan(p).error().toString();
    const auto megatron = exportPlan(p, ExportFormat::kMegatron, "plan.json");
    ASSERT_TRUE(megatron) << p.name;
    for (const auto& problem : checkMegatronArguments(*megatron, *megatronSchema, p.cluster.totalGpus())) {
      ADD_FAILURE() << p.name << " megatron " << problem.rule << ": " << problem.message << "\n" << *megatron;
    }
    const auto ds = exportPlan(p, ExportFormat::kDeepSpeed, "plan.json");
    if (ds) {  // else refused with a reason (interleaving, Ulysses with tp or pp); checked below
      for (const auto& problem : checkDeepSpeedConfig(Json::parse(*ds), *deepspeedSchema, p)) {
        ADD_FAILURE() << p.name << " deepspeed " << problem.rule << ": " << problem.message << "\n" << *ds;
      }
    }
    // Colossal-AI's plugin signatures and constructor checks, torchrun's and sbatch's options.
    for (const ExportFormat format : {ExportFormat::kColossalAi, ExportFormat::kTorchrun, ExportFormat::kSlurm}) {
      const auto text = exportPlan(p, format, "plan.json");
      if (!text) continue;  // refused naming the field (e.g. ZeRO-3 or zero bubble for Colossal-AI)
      auto problems = checkExport(p, format, *text);
      ASSERT_TRUE(problems) << problems.error().toString();
      for (const auto& problem : *problems) ADD_FAILURE() << p.name << " " << problem.rule << ": " << problem.message << "\n" << *text;
    }
  }
  // Llama 3's rotary base, Gemma's window pattern and QK-norm reach Megatron.
  EXPECT_NE(exportPlan(plans[0], ExportFormat::kMegatron, "p")->find("--rotary-base 500000"), std::string::npos);
  const auto gemma = *exportPlan(plans[4], ExportFormat::kMegatron, "p");
  for (const char* flag : {"--window-size 1023,0", "--window-attn-skip-freq 6", "--qk-layernorm"}) {  // 1,024 keys with its own
    EXPECT_NE(gemma.find(flag), std::string::npos) << flag;
  }
  // A split the plain flags cannot say (unequal middle stages, as colo's balancing makes) goes out as
  // Megatron-Core's --pipeline-model-parallel-layout, and passes the checks.
  Plan uneven = plans[7];
  uneven.stages = {{8, RecomputePolicy::kFull, 8}, {7, RecomputePolicy::kFull, 7}, {8, RecomputePolicy::kFull, 8},
                   {8, RecomputePolicy::kFull, 8}, {7, RecomputePolicy::kFull, 7}, {8, RecomputePolicy::kFull, 8},
                   {8, RecomputePolicy::kFull, 8}, {7, RecomputePolicy::kFull, 7}};
  ASSERT_TRUE(validatePlan(uneven)) << validatePlan(uneven).error().toString();
  const auto layout = exportPlan(uneven, ExportFormat::kMegatron, "p");
  ASSERT_TRUE(layout);
  EXPECT_NE(layout->find("--pipeline-model-parallel-layout \"Et*8|t*7|t*8|t*8|t*7|t*8|t*8|t*7L\""), std::string::npos) << *layout;
  EXPECT_EQ(layout->find("--decoder-first-pipeline-num-layers"), std::string::npos);
  EXPECT_TRUE(checkMegatronArguments(*layout, *megatronSchema, uneven.cluster.totalGpus()).empty());
  // DeepSpeed refuses what its engine cannot run, naming the plan's field.
  const auto interleaved = exportPlan(plans[0], ExportFormat::kDeepSpeed, "p");
  ASSERT_FALSE(interleaved);
  EXPECT_NE(interleaved.error().message.find("parallel.virtual_stages"), std::string::npos);
  const auto ulysses = exportPlan(plans[1], ExportFormat::kDeepSpeed, "p");
  ASSERT_FALSE(ulysses);
  EXPECT_NE(ulysses.error().message.find("tp 1 and pp 1"), std::string::npos);
  Plan cpOnly = exportPlanOf("llama3-8b", "dgx-h100", 8, 1, 1, 2, 1, 1, 64, RecomputePolicy::kNone);
  const auto cpConfig = exportPlan(cpOnly, ExportFormat::kDeepSpeed, "p");
  ASSERT_TRUE(cpConfig) << cpConfig.error().toString();
  EXPECT_TRUE(checkDeepSpeedConfig(Json::parse(*cpConfig), *deepspeedSchema, cpOnly).empty()) << *cpConfig;
  EXPECT_EQ(Json::parse(*cpConfig)["gradient_accumulation_steps"], 16);  // 64 / (1 x dp 4): sp ranks excluded
}

TEST(Export, TheBestPlanOfEveryNewFamilyPassesTheToolsChecks) {
  // Search each 2025-26 library model on 512 H100s and export the best plan: Megatron-LM's arguments
  // pass every check; DeepSpeed's config passes or is refused with the plan field it cannot express.
  const Json megatronSchema = *loadExportSchema("megatron-lm");
  const Json deepspeedSchema = *loadExportSchema("deepspeed");
  auto cluster = scaleCluster(test::loadClusterOrFail(test::dataFile("clusters/dgx-h100-x64.json")), 512);
  ASSERT_TRUE(cluster);
  for (const char* name : {"gemma-3-27b", "gpt-oss-120b", "llama4-scout", "phi3-mini", "qwen3-235b-a22b", "mixtral-8x22b",
                           "deepseek-v3", "qwen3-30b-a3b", "qwen3-8b"}) {
    SCOPED_TRACE(name);
    const Model model = test::loadModelOrFail(test::dataFile(std::string("models/") + name + ".json"));
    SearchOptions o;
    o.globalBatchSize = 1024;
    o.seqLen = 4096;
    o.topK = 1;
    auto found = search(model, *cluster, o);
    ASSERT_TRUE(found);
    ASSERT_TRUE(found->feasible()) << found->infeasibleReason;
    const Plan& best = found->top.front().plan;
    const auto megatron = exportPlan(best, ExportFormat::kMegatron, "plan.json");
    ASSERT_TRUE(megatron) << megatron.error().toString();
    for (const auto& problem : checkMegatronArguments(*megatron, megatronSchema, best.cluster.totalGpus())) {
      ADD_FAILURE() << problem.rule << ": " << problem.message << "\n" << *megatron;
    }
    const auto ds = exportPlan(best, ExportFormat::kDeepSpeed, "plan.json");
    if (!ds) {
      EXPECT_TRUE(ds.error().message.find("parallel.") != std::string::npos || ds.error().message.find("zero_stage") != std::string::npos ||
                  ds.error().message.find("offload") != std::string::npos)
          << ds.error().message;
      continue;
    }
    for (const auto& problem : checkDeepSpeedConfig(Json::parse(*ds), deepspeedSchema, best)) {
      ADD_FAILURE() << problem.rule << ": " << problem.message << "\n" << *ds;
    }
    for (const ExportFormat format : {ExportFormat::kColossalAi, ExportFormat::kTorchrun, ExportFormat::kSlurm}) {
      const auto text = exportPlan(best, format, "plan.json");
      if (!text) continue;
      const auto problems = checkExport(best, format, *text);
      ASSERT_TRUE(problems) << problems.error().toString();
      for (const auto& problem : *problems) ADD_FAILURE() << problem.rule << ": " << problem.message << "\n" << *text;
    }
  }
}

TEST(Export, NvlinkRacksLaunchByHostsAndLowBitPlansSayWhatTheToolsCannot) {
  // 128 GPUs of GB300 NVL72 racks run in two NVLink domains of 64, but torchrun and SLURM count hosts:
  // 32 compute trays of 4, each domain's 16 kept in one rack.
  Plan rack = exportPlanOf("llama3-70b", "gb300-nvl72-x8", 128, 4, 2, 1, 1, 1, 256, RecomputePolicy::kNone);
  ASSERT_TRUE(validatePlan(rack)) << validatePlan(rack).error().toString();
  EXPECT_EQ(rack.cluster.nodes, 2);
  const auto slurm = exportPlan(rack, ExportFormat::kSlurm, "plan.json");
  ASSERT_TRUE(slurm) << slurm.error().toString();
  for (const char* line : {"#SBATCH --nodes=32", "#SBATCH --gpus-per-node=4", "--nnodes 32 --nproc-per-node 4", "--segment=16"}) {
    EXPECT_NE(slurm->find(line), std::string::npos) << line << "\n" << *slurm;
  }
  const auto torchrun = exportPlan(rack, ExportFormat::kTorchrun, "plan.json");
  ASSERT_TRUE(torchrun);
  EXPECT_NE(torchrun->find("NODE_RANK on each node (0..31)"), std::string::npos) << *torchrun;
  // A first or last chunk without a layer goes to Megatron as a layout (it refuses a first or last
  // stage of 0 layers), and passes the checks.
  Plan ends = exportPlanOf("llama3-8b", "dgx-h100", 8, 1, 4, 1, 1, 1, 64, RecomputePolicy::kNone);
  ends.stages = {{0, RecomputePolicy::kNone, 0}, {16, RecomputePolicy::kNone, 0}, {16, RecomputePolicy::kNone, 0}, {0, RecomputePolicy::kNone, 0}};
  ASSERT_TRUE(validatePlan(ends)) << validatePlan(ends).error().toString();
  const auto megatron = exportPlan(ends, ExportFormat::kMegatron, "plan.json");
  ASSERT_TRUE(megatron) << megatron.error().toString();
  EXPECT_EQ(megatron->find("--decoder-first-pipeline-num-layers"), std::string::npos) << *megatron;
  EXPECT_NE(megatron->find("--pipeline-model-parallel-layout \"E|t*16|t*16|L\""), std::string::npos) << *megatron;
  auto problems = checkExport(ends, ExportFormat::kMegatron, *megatron);
  ASSERT_TRUE(problems) << problems.error().toString();
  for (const auto& problem : *problems) ADD_FAILURE() << problem.rule << ": " << problem.message;
  // An fp4 plan: Megatron runs it (--fp4-format e2m1); a DeepSpeed config and a Colossal-AI plugin cannot
  // say 4-bit GEMMs, so they train in bf16 and say so.
  Plan fp4 = exportPlanOf("llama3-8b", "dgx-b200", 8, 1, 1, 1, 1, 1, 64, RecomputePolicy::kNone);
  fp4.precision = DType::kFp4;
  ASSERT_TRUE(validatePlan(fp4)) << validatePlan(fp4).error().toString();
  const auto ds = exportPlan(fp4, ExportFormat::kDeepSpeed, "plan.json");
  ASSERT_TRUE(ds);
  const Json config = Json::parse(*ds);
  EXPECT_TRUE(config["bf16"]["enabled"].get<bool>());
  EXPECT_NE(config["comment"].get<std::string>().find("in fp4 (Transformer Engine)"), std::string::npos) << *ds;
  const auto cai = exportPlan(fp4, ExportFormat::kColossalAi, "plan.json");
  ASSERT_TRUE(cai);
  EXPECT_NE(cai->find("precision=\"bf16\""), std::string::npos);
  EXPECT_NE(cai->find("# note: the plan runs its linear layers' GEMMs in fp4"), std::string::npos) << *cai;
}

TEST(Export, TheCheckerCatchesWhatTheToolsRefuse) {
  const Json megatronSchema = *loadExportSchema("megatron-lm");
  const Plan p = exportPlanOf("llama3-8b", "dgx-h100", 8, 2, 2, 1, 1, 1, 64, RecomputePolicy::kNone);
  const std::string good = *exportPlan(p, ExportFormat::kMegatron, "p");
  ASSERT_TRUE(checkMegatronArguments(good, megatronSchema, 8).empty());
  auto rules = [&](const std::string& text, std::int64_t world = 8) {
    std::set<std::string> out;
    for (const auto& problem : checkMegatronArguments(text, megatronSchema, world)) out.insert(problem.rule);
    return out;
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  EXPECT_TRUE(rules(replaced("--global-batch-size 64", "--global-batch-size 63")).contains("gbs_div"));
  EXPECT_TRUE(rules(replaced("--lr \"${LR:?set LR: the peak learning rate}\" \\\n", "")).contains("req_lr"));
  EXPECT_TRUE(rules(replaced("--normalization RMSNorm", "--normalization BatchNorm")).contains("argparse"));
  EXPECT_TRUE(rules(replaced("--swiglu", "--swiglu-gate")).contains("argparse"));
  EXPECT_TRUE(rules(replaced("--num-layers 32", "--num-layers 31")).contains("pp_layers_div"));
  EXPECT_TRUE(rules(replaced("--num-query-groups 8", "--num-query-groups 3")).contains("groups_vs_tp"));
  EXPECT_TRUE(rules(replaced("--tokenizer-type HuggingFaceTokenizer", "--tokenizer-type GPT2BPETokenizer")).contains("req_tokenizer"));
  EXPECT_TRUE(rules(replaced("--use-distributed-optimizer", "--no-gradient-accumulation-fusion")).contains("opg_needs_distopt"));
  EXPECT_TRUE(rules(good, 10).contains("world_div_model"));  // 10 processes are not a multiple of tp x pp = 4
  EXPECT_TRUE(rules(good, 12).contains("gbs_div"));          // 12: dp 3 does not divide the global batch 64
  // DeepSpeed: a config whose batch numbers disagree with the data-parallel size, a key it does not know.
  const Json dsSchema = *loadExportSchema("deepspeed");
  Json ds = Json::parse(*exportPlan(p, ExportFormat::kDeepSpeed, "p"));
  ASSERT_TRUE(checkDeepSpeedConfig(ds, dsSchema, p).empty());
  ds["gradient_accumulation_steps"] = 7;
  ds["zero_optimization"]["stages"] = 1;
  std::set<std::string> dsRules;
  for (const auto& problem : checkDeepSpeedConfig(ds, dsSchema, p)) dsRules.insert(problem.rule);
  EXPECT_TRUE(dsRules.contains("batch_identity"));
  EXPECT_TRUE(dsRules.contains("zero_extra_forbid"));
  // Colossal-AI: ep_size is the MoE plugin's only; ZeRO-3 is not a hybrid-plugin stage. Launchers:
  // options sbatch and torchrun do not have.
  const Json caiSchema = *loadExportSchema("colossalai");
  std::string cai = *exportPlan(p, ExportFormat::kColossalAi, "p");
  ASSERT_TRUE(checkColossalAiPlugin(cai, caiSchema, 8).empty()) << cai;
  auto caiRules = [&](const std::string& text) {
    std::set<std::string> out;
    for (const auto& problem : checkColossalAiPlugin(text, caiSchema, 8)) out.insert(problem.rule);
    return out;
  };
  std::string withEp = cai;
  withEp.replace(withEp.find("    pp_size=2,\n"), 14, "    pp_size=2,\n    ep_size=2,\n");
  EXPECT_TRUE(caiRules(withEp).contains("no_ep_size")) << withEp;
  std::string zero3 = cai;
  zero3.replace(zero3.find("zero_stage=1"), 12, "zero_stage=3");
  EXPECT_TRUE(caiRules(zero3).contains("zero_stage_range"));
  const Json torchrunSchema = *loadExportSchema("torchrun");
  const Json sbatchSchema = *loadExportSchema("sbatch");
  std::string slurm = *exportPlan(p, ExportFormat::kSlurm, "p");
  ASSERT_TRUE(checkLaunchScript(slurm, torchrunSchema, sbatchSchema).empty()) << slurm;
  std::string badSlurm = slurm;
  badSlurm.replace(badSlurm.find("#SBATCH --exclusive"), 19, "#SBATCH --gpus-per-nod=8");
  badSlurm.replace(badSlurm.find("--nproc-per-node"), 16, "--nprocs-per-node");
  const auto launchProblems = checkLaunchScript(badSlurm, torchrunSchema, sbatchSchema);
  ASSERT_EQ(launchProblems.size(), 2u);
  EXPECT_NE(launchProblems[0].message.find("--gpus-per-nod"), std::string::npos);
  EXPECT_NE(launchProblems[1].message.find("--nprocs-per-node"), std::string::npos);
}

}  // namespace
}  // namespace colo::planner
