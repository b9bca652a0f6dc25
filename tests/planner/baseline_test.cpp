#include "colo/planner/baseline.h"

#include <gtest/gtest.h>

#include "colo/planner/export.h"
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
                           "--moe-layer-freq \"[0,0,0,1,1]\"", "--expert-model-parallel-size 8"}) {
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

}  // namespace
}  // namespace colo::planner
