// The cost model against published, measured runs (data/validation). The bounds are regression guards at
// what the model achieves today (bench/colo-validate prints the table); the issue's targets are tighter
// and reported in the closing notes until met.
#include <algorithm>
#include <cmath>
#include <map>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "colo/core/library.h"
#include "colo/costmodel/evaluator.h"
#include "colo/planner/search.h"

#include "core/test_support.h"
#include "validation_harness.h"
#include "validation_ranking.h"

namespace colo {
namespace {

TEST(Validation, PredictionsStayCloseToPublishedMeasurements) {
  auto cases = validation::loadCases(test::dataFile("validation"));
  ASSERT_TRUE(cases) << cases.error().toString();
  ASSERT_GE(cases->size(), 10u);
  std::vector<double> errors, published;
  for (const auto& c : *cases) {
    auto o = validation::evaluateCase(c);
    ASSERT_TRUE(o) << c.id << ": " << o.error().toString();
    const double e = std::fabs(o->stepError);
    errors.push_back(e);
    if (c.fullyPublished) published.push_back(e);
    if (c.layerOnly) {
      // One layer alone (its difference to the same model with one more layer): forward and backward
      // each within 5% of the source's timings.
      ASSERT_TRUE(o->predictedForwardSeconds && o->predictedBackwardSeconds) << c.id;
      EXPECT_NEAR(*o->predictedForwardSeconds / *c.measuredForwardSeconds, 1.0, 0.05) << c.id << " forward";
      EXPECT_NEAR(*o->predictedBackwardSeconds / *c.measuredBackwardSeconds, 1.0, 0.05) << c.id << " backward";
    }
    EXPECT_LT(e, c.layerOnly ? 0.10 : 0.20) << c.id << ": predicted " << o->predictedStepSeconds << " s, measured "
                                            << o->measuredSeconds << " s";
    if (o->memoryError) {
      // The allocator's figures within the 10% target. nvidia-smi's also hold what no tensor accounts for
      // (DLPerf's tensor-parallel V100 runs show 2-6 GiB more than their live tensors can; docs/costmodel.md):
      // guarded at today's level there.
      const double bound = c.memoryMeasure == validation::MemoryMeasure::kDevice ? 0.25 : 0.10;
      EXPECT_LT(std::fabs(*o->memoryError), bound) << c.id << " memory (guard " << bound * 100 << "%; target: within 10%)";
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return (v[v.size() / 2] + v[(v.size() - 1) / 2]) / 2;
  };
  // The issue's targets: median <= 10% over all runs, <= 5% over the fully published ones.
  EXPECT_LT(median(errors), 0.10);
  ASSERT_FALSE(published.empty());
  EXPECT_LE(median(published), 0.05);
}

TEST(Validation, RecomputeOrderingMatchesKorthikanti) {
  auto cases = validation::loadCases(test::dataFile("validation"));
  ASSERT_TRUE(cases);
  std::map<std::string, double> predicted;
  for (const auto& c : *cases) {
    if (!c.layerOnly) continue;
    auto o = validation::evaluateCase(c);
    ASSERT_TRUE(o);
    predicted[c.id.substr(c.id.rfind("layer_") + 6)] = o->predictedStepSeconds;
  }
  // Measured: sequence parallel 19.0 < baseline 19.6 < selective 20.9 < full 27.2 ms.
  EXPECT_LT(predicted.at("sequence_parallel_only"), predicted.at("baseline_no_recompute"));
  EXPECT_LT(predicted.at("baseline_no_recompute"), predicted.at("selective_recompute"));
  EXPECT_LT(predicted.at("selective_recompute"), predicted.at("full_recompute"));
}

// A Megatron-Core MoE row on 8 B200 as SimuMax publishes it: DeepSeek-V3's shape cut to 4 layers (1 dense,
// 3 MoE), expert-parallel over the node.
void deepSeekV3OnB200(Json& row) {
  row["model"] = Json::parse(R"J({"name": "DeepSeek-V3 shape, 4 layers", "arch": "DeepSeek-V3 (MLA, DeepSeekMoE)",
      "num_layers": 4, "hidden_size": 7168, "num_attention_heads": 128, "ffn_hidden_size": 18432,
      "moe_ffn_hidden_size": 2048, "num_experts": 256, "top_k": 8, "vocab_size": 129280, "seq_len": 4096,
      "moe_layer_freq": "([0]*1+[1]*3)", "shared_expert_intermediate_size": 2048, "q_lora_rank": 1536,
      "kv_lora_rank": 512, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128})J");
  row["hardware"] = Json::parse(R"({"gpu": "B200 SXM", "gpu_memory_gb": 180, "gpus_per_node": 8, "num_gpus": 8})");
  row["parallel"] = Json::parse(R"({"tp": 1, "pp": 1, "dp": 8, "ep": 8, "zero_stage": 1})");
}

// A row the repository has never seen, with no entry of its own in assumptions.json: everything must
// come from the row, the framework keywords and the defaults (the held-out set is read this way).
Json unseenRow() {
  return Json::parse(R"({
    "id": "unseen_v100_run",
    "source": {"citation": "Some benchmark", "location": "table 2"},
    "model": {"name": "GPT h1536 L16", "arch": "GPT", "num_layers": 16, "hidden_size": 1536, "num_attention_heads": 16,
              "ffn_hidden_size": null, "seq_len": 2048, "vocab_size": 51200},
    "hardware": {"gpu": "V100-SXM2-16GB", "gpu_memory_gb": 16, "gpus_per_node": 8, "num_gpus": 16,
                 "inter_node": "1x InfiniBand EDR 100 Gb/s per node"},
    "parallel": {"tp": 2, "pp": 1, "dp": null, "zero_stage": 0},
    "training": {"precision": "mixed precision 16-bit", "recompute": "full", "micro_batch_size": 4, "global_batch_size": 64},
    "measured": {"samples_per_s": 32.0}
  })");
}

Json assumptionsFile() {
  auto a = readJsonFile(test::dataFile("validation/assumptions.json"));
  EXPECT_TRUE(a) << (a ? "" : a.error().toString());
  return a ? *a : Json::object();
}

TEST(Validation, AnUnseenRowIsInferredFromItsOwnHardwareAndThroughput) {
  auto c = validation::caseFromRow(unseenRow(), assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  const Plan& p = c->plan;
  EXPECT_NE(p.cluster.gpu.name.find("V100"), std::string::npos);
  EXPECT_NEAR(p.cluster.gpu.memoryBytes, 16.0 * 1024 * 1024 * 1024, 1);
  EXPECT_EQ(p.cluster.totalGpus(), 16);
  ASSERT_EQ(p.cluster.links.size(), 2u);
  EXPECT_NEAR(p.cluster.links.back().bytesPerSecond, 100e9 / 8 / 8, 1);  // one EDR NIC shared by 8 GPUs
  EXPECT_EQ(p.parallel.dp, 8);                                          // 16 GPUs / tp 2
  EXPECT_EQ(p.precision, DType::kFp16);                                 // "16-bit" on Volta
  EXPECT_EQ(p.model.spec->ffnHiddenSize, 4 * 1536);
  EXPECT_EQ(p.stages.front().recompute, RecomputePolicy::kFull);
  ASSERT_TRUE(c->measuredStepSeconds);
  EXPECT_NEAR(*c->measuredStepSeconds, 64.0 / 32.0, 1e-12);  // global batch / samples per second
  EXPECT_TRUE(c->fullyPublished);
  auto o = validation::evaluateCase(*c);
  ASSERT_TRUE(o) << o.error().toString();
  EXPECT_GT(o->predictedStepSeconds, 0);
}

TEST(Validation, FrameworkKeywordsNetworkTextTflopsAndUnevenStages) {
  Json row = unseenRow();
  row["source"]["citation"] = "NVIDIA NeMo performance tables (Megatron-Core)";
  row["hardware"] = Json::parse(R"({"gpu": "H100 SXM", "gpu_memory_gb": 80, "gpus_per_node": 8, "num_gpus": 64,
                                    "inter_node": "8x 400 Gb/s NDR InfiniBand per node"})");
  row["model"]["num_layers"] = 30;
  row["parallel"] = Json::parse(R"({"tp": 2, "pp": 4, "dp": 8, "overlap": "--tp-comm-overlap"})");
  row["training"] = Json::parse(R"({"precision": "bf16", "recompute": "none", "micro_batch_size": 1, "global_batch_size": 256})");
  row["measured"] = Json::parse(R"({"tflops_per_gpu": 400.0})");
  row["flop_convention"] = "Narayanan Eq.3 (96-coefficient)";
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  const Plan& p = c->plan;
  EXPECT_NE(p.cluster.gpu.name.find("H100"), std::string::npos);
  EXPECT_NEAR(p.cluster.links.back().bytesPerSecond, 50e9, 1);  // 8 x 400 Gb/s per node of 8
  EXPECT_TRUE(p.execution.flashAttention);                       // the Megatron-Core entry of 'frameworks'
  EXPECT_EQ(p.zeroStage, 1);
  EXPECT_TRUE(p.parallel.sequenceParallel);
  EXPECT_TRUE(p.execution.tpCommOverlap);  // stated in parallel.overlap
  EXPECT_EQ(p.precision, DType::kBf16);
  // 30 layers over 4 stages: the embedding and the head count as a layer each (32 / 4 = 8).
  ASSERT_EQ(p.stages.size(), 4u);
  EXPECT_EQ(p.stages[0].layers, 7);
  EXPECT_EQ(p.stages[1].layers, 8);
  EXPECT_EQ(p.stages[2].layers, 8);
  EXPECT_EQ(p.stages[3].layers, 7);
  EXPECT_FALSE(c->fullyPublished);
  const double B = 256, s = 2048, l = 30, h = 1536, V = 51200;
  const double flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  ASSERT_TRUE(c->measuredStepSeconds);
  EXPECT_NEAR(*c->measuredStepSeconds, flops / (400e12 * 64), 1e-9);
}

TEST(Validation, ABadRowIsSkippedWithItsFieldAndTheOthersStillLoad) {
  const auto dir = std::filesystem::temp_directory_path() / ("colo_validation_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  // Each variant: the unseen row with one field changed (a JSON pointer and its new value).
  auto variant = [](const char* id, const char* pointer, const Json& value) {
    Json row = unseenRow();
    row["id"] = id;
    row[Json::json_pointer(pointer)] = value;
    return row;
  };
  Json runs = Json::array({unseenRow(), variant("bad_gpu", "/hardware/gpu", "TPU v4"),
                           variant("no_time", "/measured", Json::object()),
                           variant("mcore", "/source/citation", "Megatron-Core scaling study"),
                           variant("typo", "/parallel/tp", "2")});
  std::ofstream(dir / "public_runs.json") << runs.dump(2);
  std::vector<validation::Skipped> skipped;
  auto cases = validation::loadCases(dir.string(), &skipped);
  ASSERT_TRUE(cases) << cases.error().toString();
  ASSERT_EQ(cases->size(), 2u);
  EXPECT_EQ(cases->front().id, "unseen_v100_run");
  // No assumptions.json in the folder: the repository's framework entries apply.
  EXPECT_EQ(cases->back().id, "mcore");
  EXPECT_TRUE(cases->back().plan.execution.flashAttention);
  ASSERT_EQ(skipped.size(), 3u);
  EXPECT_NE(skipped[2].reason.find("parallel.tp: expected a number, got \"2\""), std::string::npos) << skipped[2].reason;
  EXPECT_EQ(skipped[0].id, "bad_gpu");
  EXPECT_NE(skipped[0].reason.find("hardware.gpu"), std::string::npos) << skipped[0].reason;
  EXPECT_NE(skipped[0].reason.find("TPU v4"), std::string::npos) << skipped[0].reason;
  EXPECT_NE(skipped[1].reason.find("measured"), std::string::npos) << skipped[1].reason;
  auto strict = validation::loadCases(dir.string());
  ASSERT_FALSE(strict);
  EXPECT_NE(strict.error().toString().find("bad_gpu"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Validation, OpenRecomputeAndVirtualStagesAreTheCheapestThatFit) {
  // Llama 3 405B on 16,384 H100s (Meta 2024, Table 4): the paper states the degrees and batch but not the
  // recompute policy or the chunks per stage of its interleaved schedule. The run happened, so it fitted:
  // the harness takes the cheapest recompute that fits and the fastest chunk count.
  const Json row = Json::parse(R"({
    "id": "llama3_405b", "source": {"citation": "The Llama 3 Herd of Models", "location": "Table 4"},
    "model": {"name": "Llama 3 405B", "arch": "llama, GQA, SwiGLU, RoPE", "num_layers": 126, "hidden_size": 16384,
              "num_attention_heads": 128, "num_key_value_heads": 8, "ffn_hidden_size": 53248, "seq_len": 8192,
              "vocab_size": 128256},
    "hardware": {"gpu": "H100-SXM5-80GB", "gpu_memory_gb": 80, "gpus_per_node": 8, "num_gpus": 16384,
                 "inter_node": "RoCE 400 Gb/s per GPU"},
    "parallel": {"tp": 8, "pp": 16, "dp": 128, "cp": 1},
    "training": {"precision": "bf16", "recompute": null, "micro_batch_size": 1, "global_batch_size": 2048},
    "measured": {"tflops_per_gpu": 400}, "flop_convention": "Megatron-Core model FLOPs"
  })");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  const Plan& p = c->plan;
  EXPECT_EQ(p.schedule, Schedule::kInterleaved);  // the 'llama 3' framework entry
  EXPECT_GT(p.parallel.virtualStages, 1);
  EXPECT_EQ(p.cluster.links.back().kind, LinkKind::kRoce);
  EXPECT_EQ(p.model.spec->numKvHeads, 8);
  EXPECT_FALSE(c->fullyPublished);
  auto chosen = costmodel::evaluatePlan(p);
  ASSERT_TRUE(chosen) << chosen.error().toString();
  EXPECT_TRUE(chosen->fits);
  if (p.stages.front().recompute != RecomputePolicy::kNone) {
    Plan none = p;
    for (auto& st : none.stages) {
      st.recompute = RecomputePolicy::kNone;
      st.recomputeLayers = 0;
    }
    auto ev = costmodel::evaluatePlan(none);
    ASSERT_TRUE(ev);
    EXPECT_FALSE(ev->fits) << "recompute was assumed although the plan fits without it";
  }
}

TEST(Validation, ARowThatStatesNoLayoutRunsColosBestPlan) {
  // Megatron-LM's README states its strong-scaling runs' batch and GPUs but no layout: a published
  // benchmark runs a tuned layout, so the harness predicts colo's own best plan for the row.
  Json row = Json::parse(R"({
    "id": "no_layout", "source": {"citation": "Some README", "location": "scaling text"},
    "model": {"name": "GPT 20B", "arch": "GPT", "num_layers": 44, "hidden_size": 6144, "num_attention_heads": 48,
              "ffn_hidden_size": null, "seq_len": 2048, "vocab_size": 51200},
    "hardware": {"gpu": "H100", "gpu_memory_gb": 80, "gpus_per_node": 8, "num_gpus": 64},
    "parallel": {"tp": null, "pp": null, "dp": null, "cp": null},
    "training": {"precision": "bf16", "global_batch_size": 256},
    "measured": {"mfu_pct": 45}, "flop_convention": "Megatron model FLOPs", "peak_tflops_per_gpu_used_by_source": 989
  })");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  const Plan& p = c->plan;
  EXPECT_FALSE(c->fullyPublished);
  EXPECT_EQ(p.parallel.tp * p.parallel.pp * p.parallel.dp * p.parallel.cp, 64);
  EXPECT_GT(p.parallel.tp * p.parallel.pp, 1) << "20B in bf16 with Adam does not fit 80 GB by data parallelism alone";
  auto chosen = costmodel::evaluatePlan(p);
  ASSERT_TRUE(chosen) << chosen.error().toString();
  EXPECT_TRUE(chosen->fits);
  // It is the best of colo's own search for that job.
  planner::SearchOptions options;
  options.globalBatchSize = 256;
  options.seqLen = 2048;
  options.execution = p.execution;
  options.flashAttention = p.execution.flashAttention;
  options.fixed["zero"] = p.zeroStage;
  options.fixed["cp"] = 1;
  options.fixed["ep"] = 1;
  options.allowOffload = false;
  auto found = planner::search(p.model, p.cluster, options);
  ASSERT_TRUE(found && !found->top.empty());
  auto direct = costmodel::evaluatePlan(found->top.front().plan);
  ASSERT_TRUE(direct);
  EXPECT_NEAR(chosen->stepSeconds, direct->stepSeconds, 1e-9 * chosen->stepSeconds);
  // What the row does state holds: its micro-batch and recompute policy.
  Json some = row;
  some["training"]["micro_batch_size"] = 2;
  some["training"]["recompute"] = "full";
  auto kept = validation::caseFromRow(some, assumptionsFile());
  ASSERT_TRUE(kept) << kept.error().toString();
  EXPECT_EQ(kept->plan.microBatchSize, 2);
  for (const auto& st : kept->plan.stages) EXPECT_EQ(st.recompute, RecomputePolicy::kFull);
  // A pipelined row without a global batch: the fallback (one micro-batch per replica) cannot run the
  // interleaved schedule, and the error says the batch is what is missing.
  Json noBatch = row;
  noBatch["parallel"] = Json::parse(R"({"tp": 8, "pp": 4, "dp": 2, "virtual_pipeline_stages": 11, "schedule": "interleaved 1F1B"})");
  noBatch["training"].erase("global_batch_size");
  auto refused = validation::caseFromRow(noBatch, assumptionsFile());
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("training.global_batch_size: not published"), std::string::npos) << refused.error().toString();
  // A row that states any degree keeps it, the rest read as before.
  row["parallel"]["tp"] = 8;
  auto stated = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(stated) << stated.error().toString();
  EXPECT_EQ(stated->plan.parallel.tp, 8);
  EXPECT_EQ(stated->plan.parallel.pp, 1);
}

TEST(Validation, TheRowsOwnScheduleBeatsItsFrameworksUsualOne) {
  // A Megatron-LM run of a Llama 3 model: the 'llama 3' framework entry (Meta's interleaved schedule)
  // matches the architecture, but the row states its schedule, and "non-interleaved" is plain 1F1B.
  Json row = unseenRow();
  row["model"]["arch"] = "Llama 3 (RMSNorm, SwiGLU, RoPE, GQA)";
  row["parallel"] = Json::parse(R"({"tp": 1, "pp": 2, "dp": 4, "schedule": "1F1B (non-interleaved), no P2P overlap"})");
  row["training"] = Json::parse(R"({"precision": "bf16", "recompute": "none", "micro_batch_size": 1, "global_batch_size": 16})");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.schedule, Schedule::kOneFOneB);
  EXPECT_EQ(c->plan.parallel.virtualStages, 1);
  // Without a stated schedule the framework's interleaved one stands (its chunk count left open).
  row["parallel"].erase("schedule");
  auto open = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(open) << open.error().toString();
  EXPECT_EQ(open->plan.schedule, Schedule::kInterleaved);
}

TEST(Validation, TorchtitansInterleavedScheduleRunsTwoStagesPerRank) {
  // torchtitan splits the model into two stages per rank for its multi-stage schedules unless the job
  // splits it itself; a row saying "interleaved 1F1B" without a count runs that, not the fastest count.
  Json row = unseenRow();
  row["source"]["citation"] = "pytorch/torchtitan benchmarks";
  row["model"]["arch"] = "Llama 3 (RMSNorm, SwiGLU, RoPE, GQA)";
  row["model"]["hidden_size"] = 4096;
  row["model"]["num_attention_heads"] = 32;
  row["parallel"] = Json::parse(R"({"tp": 1, "pp": 4, "dp": 4, "schedule": "Interleaved 1F1B"})");
  row["training"] = Json::parse(R"({"precision": "bf16", "recompute": "full", "micro_batch_size": 1, "global_batch_size": 16})");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.schedule, Schedule::kInterleaved);
  EXPECT_EQ(c->plan.parallel.virtualStages, 2);
  EXPECT_EQ(c->plan.stages.size(), 8u);
  EXPECT_FALSE(c->fullyPublished);
  // Its plain 1F1B keeps one stage per rank; the row's own count wins.
  row["parallel"]["schedule"] = "1F1B";
  auto plain = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(plain) << plain.error().toString();
  EXPECT_EQ(plain->plan.schedule, Schedule::kOneFOneB);
  EXPECT_EQ(plain->plan.parallel.virtualStages, 1);
  row["parallel"]["schedule"] = "Interleaved 1F1B";
  row["parallel"]["virtual_pipeline_stages"] = 4;
  auto stated = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(stated) << stated.error().toString();
  EXPECT_EQ(stated->plan.parallel.virtualStages, 4);
}

TEST(Validation, TorchtitansSelectiveCheckpointingIsPerOp) {
  // torchtitan's activation_checkpoint mode "selective" defaults to per-op checkpointing; Megatron's
  // "selective" is its attention-core recompute. A torchtitan row saying only "selective" is per-op.
  Json row = unseenRow();
  row["source"]["citation"] = "pytorch/torchtitan docs/performance.md";
  row["model"]["arch"] = "Llama 3 (RMSNorm, SwiGLU, RoPE, GQA)";
  row["parallel"] = Json::parse(R"({"tp": 1, "pp": 1, "dp": 8})");
  row["training"] = Json::parse(R"({"precision": "bf16", "recompute": "Selective activation checkpointing",
                                    "micro_batch_size": 2, "global_batch_size": 16})");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.stages.front().recompute, RecomputePolicy::kOp);
  EXPECT_EQ(c->plan.zeroStage, 3);  // FSDP2
  // SDPA with FLASH_ATTENTION first on Hopper (torchtitan, May to October 2025): FlashAttention-2's kernels.
  EXPECT_TRUE(c->plan.execution.flashAttention);
  EXPECT_TRUE(c->plan.execution.flashAttention2);
  row["source"]["citation"] = "NVIDIA Megatron-Core performance table";
  auto megatron = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(megatron) << megatron.error().toString();
  EXPECT_EQ(megatron->plan.stages.front().recompute, RecomputePolicy::kSelective);
  // Transformer Engine's fused attention: the GPU's own fastest kernel.
  EXPECT_TRUE(megatron->plan.execution.flashAttention);
  EXPECT_FALSE(megatron->plan.execution.flashAttention2);
}

TEST(Validation, AsyncTensorParallelismOverlapsItsCollectives) {
  Json row = unseenRow();
  row["source"]["citation"] = "pytorch/torchtitan benchmarks";
  row["parallel"] = Json::parse(R"({"tp": 8, "pp": 1, "dp": 1, "async_tp": false})");
  row["training"] = Json::parse(R"({"precision": "bf16", "recompute": "none", "micro_batch_size": 1, "global_batch_size": 8})");
  auto vanilla = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(vanilla) << vanilla.error().toString();
  EXPECT_FALSE(vanilla->plan.execution.tpCommOverlap);
  row["parallel"]["async_tp"] = true;
  auto overlapped = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(overlapped) << overlapped.error().toString();
  EXPECT_TRUE(overlapped->plan.execution.tpCommOverlap);
  EXPECT_EQ(overlapped->plan.execution.tpOverlap, TpOverlap::kMicroPipeline);
}

TEST(Validation, ContextParallelismExchangesAsEachFrameworkDoesUnlessTheRowSays) {
  // torchtitan all-gathers the key and value shards (context_parallel_rotate_method, default allgather);
  // Megatron rings them (--cp-comm-type p2p); a row naming its exchange keeps it.
  Json row = unseenRow();
  row["source"]["citation"] = "pytorch/torchtitan long-context benchmarks";
  row["model"]["arch"] = "Llama 3 (RMSNorm, SwiGLU, RoPE, GQA)";
  row["parallel"] = Json::parse(R"({"tp": 1, "pp": 1, "dp": 2, "cp": 4})");
  row["training"] = Json::parse(R"({"precision": "bf16", "recompute": "full", "micro_batch_size": 1, "global_batch_size": 16})");
  auto titan = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(titan) << titan.error().toString();
  EXPECT_EQ(titan->plan.execution.cpCommType, CpCommType::kAllGather);
  row["parallel"]["cp_comm_type"] = "a2a";
  auto stated = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(stated) << stated.error().toString();
  EXPECT_EQ(stated->plan.execution.cpCommType, CpCommType::kAllToAll);
  row["parallel"].erase("cp_comm_type");
  row["source"]["citation"] = "NVIDIA Megatron-Core performance table";
  auto megatron = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(megatron) << megatron.error().toString();
  EXPECT_EQ(megatron->plan.execution.cpCommType, CpCommType::kP2p);
}

TEST(Validation, RowsWrittenOtherwiseStillReadRight) {
  const Json assumptions = assumptionsFile();
  // Recompute as a boolean or as free text; FSDP's sharding strategy; MFU alone; another time key.
  Json row = unseenRow();
  row["training"]["recompute"] = true;
  row["parallel"]["fsdp"] = "FULL_SHARD";
  row["parallel"].erase("zero_stage");
  row["measured"] = Json::parse(R"({"time_per_iteration_ms": 1500})");
  auto c = validation::caseFromRow(row, assumptions);
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.stages.front().recompute, RecomputePolicy::kFull);
  EXPECT_EQ(c->plan.zeroStage, 3);
  EXPECT_NEAR(*c->measuredStepSeconds, 1.5, 1e-12);

  row["training"]["recompute"] = "activation checkpointing (selective)";
  row["parallel"]["fsdp"] = "SHARD_GRAD_OP";
  row["measured"] = Json::parse(R"({"mfu_pct": 40})");
  row["flop_convention"] = "Narayanan Eq.3 (96)";
  c = validation::caseFromRow(row, assumptions);
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.stages.front().recompute, RecomputePolicy::kSelective);
  EXPECT_EQ(c->plan.zeroStage, 2);
  for (const char* text : {"selective, per-op SAC", "selective (op)", "op-level selective AC", "selective_ac_option op"}) {
    Json opRow = row;
    opRow["training"]["recompute"] = text;
    auto o = validation::caseFromRow(opRow, assumptions);
    ASSERT_TRUE(o) << o.error().toString();
    EXPECT_EQ(o->plan.stages.front().recompute, RecomputePolicy::kOp) << text;
  }
  const double B = 64, s = 2048, l = 16, h = 1536, V = 51200;
  const double flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(*c->measuredStepSeconds, flops / (0.40 * 125e12 * 16), 1e-9);  // V100 fp16 peak, 16 GPUs

  row["hardware"]["gpu"] = "A800-SXM4-80GB";
  row["hardware"]["gpu_memory_gb"] = 80;
  c = validation::caseFromRow(row, assumptions);
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_NE(c->plan.cluster.gpu.name.find("A100"), std::string::npos);
  EXPECT_EQ(c->plan.precision, DType::kBf16);  // "16-bit" after Volta
}

TEST(Validation, AMemoryFigureIsComparedWithWhatItMeasured) {
  // nvidia-smi counts the CUDA context, NCCL buffers and the allocator's cache; max_memory_reserved
  // leaves out the context; max_memory_allocated also the allocator's slack.
  Json row = unseenRow();
  auto device = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(device) << device.error().toString();
  EXPECT_FALSE(device->measuredMemoryBytes);
  row["measured"]["memory_per_gpu_mib_nvidia_smi"] = 9000;
  device = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(device && device->measuredMemoryBytes);
  EXPECT_EQ(device->memoryMeasure, validation::MemoryMeasure::kDevice);
  EXPECT_NEAR(*device->measuredMemoryBytes, 9000.0 * 1024 * 1024, 1);
  row["measured"]["max_memory_reserved_gib"] = 8.0;
  row["measured"]["peak_memory_allocated_GB"] = 7.5;  // the most specific figure wins
  auto allocated = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(allocated && allocated->measuredMemoryBytes);
  EXPECT_EQ(allocated->memoryMeasure, validation::MemoryMeasure::kAllocated);
  EXPECT_EQ(allocated->memoryKey, "peak_memory_allocated_GB");
  EXPECT_NEAR(*allocated->measuredMemoryBytes, 7.5e9, 1);
  row["measured"].erase("peak_memory_allocated_GB");
  auto reserved = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(reserved && reserved->measuredMemoryBytes);
  EXPECT_EQ(reserved->memoryMeasure, validation::MemoryMeasure::kReserved);

  const auto ev = costmodel::evaluatePlan(device->plan);
  ASSERT_TRUE(ev) << ev.error().toString();
  const auto& m = ev->stages.front().memory;
  ASSERT_GT(m.context, 0);
  ASSERT_GT(m.allocator, 0);
  auto od = validation::evaluateCase(*device);
  auto orr = validation::evaluateCase(*reserved);
  auto oa = validation::evaluateCase(*allocated);
  ASSERT_TRUE(od && orr && oa);
  EXPECT_NEAR(*od->predictedMemoryBytes, ev->peakMemoryBytes, 1);
  EXPECT_NEAR(*orr->predictedMemoryBytes, m.total() - m.context, 1);
  EXPECT_NEAR(*oa->predictedMemoryBytes, m.total() - m.context - m.allocator, 1);
  // A run giving both allocated and reserved is judged on both.
  ASSERT_TRUE(allocated->measuredReservedBytes);
  EXPECT_NEAR(*allocated->measuredReservedBytes, 8.0 * 1024 * 1024 * 1024, 1);
  ASSERT_TRUE(oa->reservedError && oa->predictedReservedBytes);
  EXPECT_NEAR(*oa->predictedReservedBytes, m.total() - m.context, 1);
  EXPECT_FALSE(orr->reservedError);  // reserved is already its main figure

  row["measured"]["memory_per_gpu_gib"] = "12";  // a typo is named, not skipped silently
  auto bad = validation::caseFromRow(row, assumptionsFile());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().toString().find("measured.memory_per_gpu_gib"), std::string::npos) << bad.error().toString();
}

TEST(Validation, GradientAccumulationFollowsTheFrameworkAndItsEra) {
  // Megatron-LM before 2022: main_grad hooks (the defaults); Megatron-Core and Megatron-LM from 2022:
  // fused into the weight-gradient GEMM; DeepSpeed: fp32 copies with bf16, autograd with fp16.
  const Json assumptions = assumptionsFile();
  auto modeOf = [&](const Json& row) {
    auto c = validation::caseFromRow(row, assumptions);
    EXPECT_TRUE(c) << (c ? "" : c.error().toString());
    return c ? c->plan.execution.gradAccumulation : GradAccumulation::kFused;
  };
  Json row = unseenRow();
  EXPECT_EQ(modeOf(row), GradAccumulation::kMainGrad);
  row["source"]["citation"] = "NVIDIA NeMo performance tables";
  EXPECT_EQ(modeOf(row), GradAccumulation::kFused);
  {
    // NeMo's recipes overlap tensor-parallel communication with the GEMMs; Megatron-Core's scripts
    // only when the row says so.
    auto nemo = validation::caseFromRow(row, assumptions);
    ASSERT_TRUE(nemo) << nemo.error().toString();
    EXPECT_TRUE(nemo->plan.execution.tpCommOverlap);
    Json mcore = row;
    mcore["source"]["citation"] = "NVIDIA/Megatron-LM README (Megatron-Core)";
    auto plain = validation::caseFromRow(mcore, assumptions);
    ASSERT_TRUE(plain) << plain.error().toString();
    EXPECT_FALSE(plain->plan.execution.tpCommOverlap);
    EXPECT_EQ(plain->plan.execution.gradAccumulation, GradAccumulation::kFused);
    // Both run Transformer Engine's linears, whose GEMMs return the bias gradient; Megatron-DeepSpeed's
    // own linears reduce it apart.
    EXPECT_TRUE(nemo->plan.execution.fusedBiasGrad);
    EXPECT_TRUE(plain->plan.execution.fusedBiasGrad);
    Json deepspeed = row;
    deepspeed["source"]["citation"] = "BigScience, Megatron-DeepSpeed training logs";
    auto legacy = validation::caseFromRow(deepspeed, assumptions);
    ASSERT_TRUE(legacy) << legacy.error().toString();
    EXPECT_FALSE(legacy->plan.execution.fusedBiasGrad);
    Json korthikanti = row;
    korthikanti["source"]["citation"] = "Korthikanti et al., 'Reducing Activation Recomputation in Large Transformer Models', MLSys 2022";
    auto megatron2022 = validation::caseFromRow(korthikanti, assumptions);
    ASSERT_TRUE(megatron2022) << megatron2022.error().toString();
    EXPECT_FALSE(megatron2022->plan.execution.fusedBiasGrad);  // Megatron-LM's own linears then
    Json mlperf = row;
    mlperf["source"]["citation"] = "MLCommons MLPerf Training v4.1, NVIDIA GPT-3 175B";
    auto nemoGpt3 = validation::caseFromRow(mlperf, assumptions);
    ASSERT_TRUE(nemoGpt3) << nemoGpt3.error().toString();
    EXPECT_TRUE(nemoGpt3->plan.execution.fusedBiasGrad);
    // Megatron-LM's pretrain_gpt.py (Megatron-Core's published scripts) checks gradients for NaN before
    // reducing them; NeMo's and Megatron-DeepSpeed's rows are not assumed to.
    EXPECT_TRUE(plain->plan.execution.gradNanCheck);
    EXPECT_FALSE(nemo->plan.execution.gradNanCheck);
    EXPECT_FALSE(legacy->plan.execution.gradNanCheck);
    EXPECT_FALSE(megatron2022->plan.execution.gradNanCheck);
    // Megatron-LM (since 2023-10) overlaps the interleaved schedule's pipeline sends; NeMo's rows and
    // the older ones are not assumed to.
    EXPECT_TRUE(plain->plan.execution.overlapP2pComm);
    EXPECT_FALSE(nemo->plan.execution.overlapP2pComm);
    EXPECT_FALSE(megatron2022->plan.execution.overlapP2pComm);
  }
  row["source"]["citation"] = "Korthikanti et al., 'Reducing Activation Recomputation in Large Transformer Models', MLSys 2022";
  EXPECT_EQ(modeOf(row), GradAccumulation::kFused);
  row["source"]["citation"] = "BigScience BLOOM training logs (Megatron-DeepSpeed)";
  row["hardware"] = Json::parse(R"({"gpu": "A100-SXM4-80GB", "gpu_memory_gb": 80, "gpus_per_node": 8, "num_gpus": 16})");
  row["training"]["precision"] = "bf16";
  EXPECT_EQ(modeOf(row), GradAccumulation::kFp32Copy);
  row["training"]["precision"] = "fp16";
  EXPECT_EQ(modeOf(row), GradAccumulation::kAutograd);

  Json broken = assumptions;
  broken["defaults"]["grad_accumulation"] = "lazy";
  auto bad = validation::caseFromRow(unseenRow(), broken);
  ASSERT_FALSE(bad);
  // Refused where it is written (the assumptions' pointer), before any row uses it.
  EXPECT_EQ(bad.error().path, "/defaults/grad_accumulation");
  EXPECT_NE(bad.error().message.find("unknown gradient accumulation \"lazy\""), std::string::npos) << bad.error().toString();
}

TEST(Validation, MeasuredFiguresAreReadFromTheWordsOfTheirNames) {
  // 64 samples of 2048 tokens per step on 16 GPUs; each spelling gives the same 2.0 s step.
  const std::pair<const char*, double> spellings[] = {
      {"elapsed_time_per_iteration_ms", 2000.0}, {"iter_time_s", 2.0},           {"seconds_per_step", 2.0},
      {"steps_per_s", 0.5},                       {"it_per_sec", 0.5},            {"throughput_samples_per_sec", 32.0},
      {"seqs_per_second", 32.0},                  {"tokens_per_sec_per_gpu", 64.0 * 2048 / 2.0 / 16},
      {"throughput_tokens_per_s", 64.0 * 2048 / 2.0}};
  for (const auto& [key, value] : spellings) {
    Json row = unseenRow();
    row["measured"] = Json::object();
    row["measured"][key] = value;
    row["measured"]["time_to_train_min"] = 1e4;  // a whole training run, never a step
    row["measured"]["peak_tflops"] = 125;         // the GPU's, not the run's
    auto c = validation::caseFromRow(row, assumptionsFile());
    ASSERT_TRUE(c) << key << ": " << c.error().toString();
    ASSERT_TRUE(c->measuredStepSeconds) << key;
    EXPECT_NEAR(*c->measuredStepSeconds, 2.0, 1e-9) << key;
  }
  // TFLOP/s per GPU and the job's aggregate PFLOP/s give the same step; so does MFU in percent.
  Json row = unseenRow();
  row["flop_convention"] = "PaLM 6N";
  row["measured"] = Json::parse(R"({"model_tflops": 40.0})");
  auto perGpu = validation::caseFromRow(row, assumptionsFile());
  row["measured"] = Json::parse(R"({"aggregate_pflops": 0.64})");
  auto aggregate = validation::caseFromRow(row, assumptionsFile());
  row["measured"] = Json::parse(R"({"mfu_percent": 32.0})");
  row["peak_tflops_per_gpu_used_by_source"] = 125;
  auto mfu = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(perGpu && aggregate && mfu);
  EXPECT_NEAR(*perGpu->measuredStepSeconds, *aggregate->measuredStepSeconds, 1e-9);
  EXPECT_NEAR(*perGpu->measuredStepSeconds, *mfu->measuredStepSeconds, 1e-9);
  // Only a whole-training time: nothing to compare a step with.
  row.erase("peak_tflops_per_gpu_used_by_source");
  row["measured"] = Json::parse(R"({"time_to_train_min": 28.0})");
  auto none = validation::caseFromRow(row, assumptionsFile());
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().toString().find("measured"), std::string::npos);
  row["measured"] = Json::parse(R"({"iteration_time_ms": "2000"})");
  auto typo = validation::caseFromRow(row, assumptionsFile());
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().toString().find("measured.iteration_time_ms"), std::string::npos);
}

TEST(Validation, AModelGivenOnlyByNameIsTheLibrarysModel) {
  Json row = unseenRow();
  row["model"] = Json::parse(R"({"name": "LLaMA-2 13B", "params_b": 13, "seq_len": 4096})");
  row["hardware"] = Json::parse(R"({"gpu": "A100-SXM4-80GB", "gpu_memory_gb": 80, "gpus_per_node": 8, "num_gpus": 16})");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.model.spec->numLayers, 40);
  EXPECT_EQ(c->plan.model.spec->hiddenSize, 5120);
  EXPECT_EQ(c->plan.model.spec->seqLen, 4096);
  EXPECT_FALSE(c->fullyPublished);
  row["model"]["name"] = "Some 13B model";  // no library model of that name: the missing field is named
  auto unknown = validation::caseFromRow(row, assumptionsFile());
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().toString().find("model.num_layers"), std::string::npos) << unknown.error().toString();
}

TEST(Validation, DegreesAndBatchesThatDisagreeAreReconciledOrNamed) {
  // 16 GPUs at tp 2 with a stated dp of 4 (a source counting differently): dp follows the GPUs.
  Json row = unseenRow();
  row["parallel"]["dp"] = 4;
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.parallel.dp, 8);
  EXPECT_FALSE(c->fullyPublished);
  // A global batch of 96 over dp 8 does not take micro-batches of 5: the largest that divides, 4.
  row = unseenRow();
  row["training"]["micro_batch_size"] = 5;
  row["training"]["global_batch_size"] = 96;
  c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.microBatchSize, 4);
  EXPECT_EQ(c->plan.numMicroBatches(), 3);
  // No GPU count: nodes x GPUs per node, else the product of the degrees.
  {
    Json counted = unseenRow();
    counted["hardware"].erase("num_gpus");
    counted["hardware"]["num_nodes"] = 2;
    auto byNodes = validation::caseFromRow(counted, assumptionsFile());
    ASSERT_TRUE(byNodes) << byNodes.error().toString();
    EXPECT_EQ(byNodes->plan.cluster.totalGpus(), 16);
    counted["hardware"].erase("num_nodes");
    counted["parallel"]["dp"] = 4;
    auto byDegrees = validation::caseFromRow(counted, assumptionsFile());
    ASSERT_TRUE(byDegrees) << byDegrees.error().toString();
    EXPECT_EQ(byDegrees->plan.cluster.totalGpus(), 8);
    EXPECT_EQ(byDegrees->plan.parallel.dp, 4);
  }
  // 100 samples cannot split over 8 replicas at all: the row is refused with the field.
  row["training"]["global_batch_size"] = 100;
  auto bad = validation::caseFromRow(row, assumptionsFile());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().toString().find("global_batch_size"), std::string::npos) << bad.error().toString();
}

TEST(Validation, PrecisionIsReadFromItsCommonSpellings) {
  const std::pair<const char*, DType> spellings[] = {
      {"bfloat16 mixed precision", DType::kBf16}, {"torch.float16 (AMP)", DType::kFp16}, {"half", DType::kFp16},
      {"FP8 (Transformer Engine, e4m3/e5m2 hybrid)", DType::kFp8}, {"fp32", DType::kFp32}, {"TF32", DType::kTf32},
      {"mixed precision 16-bit", DType::kBf16}};
  for (const auto& [text, expected] : spellings) {
    Json row = unseenRow();
    row["hardware"] = Json::parse(R"({"gpu": "H100 SXM", "gpu_memory_gb": 80, "gpus_per_node": 8, "num_gpus": 16})");
    row["training"]["precision"] = text;
    auto c = validation::caseFromRow(row, assumptionsFile());
    ASSERT_TRUE(c) << text << ": " << c.error().toString();
    EXPECT_EQ(c->plan.precision, expected) << text;
  }
}

TEST(Validation, NetworkRatesInTheirCommonSpellings) {
  // Per-GPU bandwidth of the network level, 8 GPUs per node.
  const std::pair<const char*, double> spellings[] = {
      {"8x400G NDR InfiniBand", 50e9},          {"3.2 Tbps per node", 50e9},       {"8 x 200 Gb/s HDR", 25e9},
      {"400 Gbps per GPU (rail-optimized)", 50e9}, {"4x 100GbE RoCEv2 per node", 6.25e9}, {"NDR", 50e9}};
  for (const auto& [text, perGpu] : spellings) {
    Json row = unseenRow();
    row["hardware"]["inter_node"] = text;
    auto c = validation::caseFromRow(row, assumptionsFile());
    ASSERT_TRUE(c) << text << ": " << c.error().toString();
    EXPECT_NEAR(c->plan.cluster.links.back().bytesPerSecond, perGpu, 1) << text;
  }
}

TEST(Validation, RecomputeIsReadFromMegatronsFlagsAndOtherWords) {
  struct Spelling {
    Json value;
    RecomputePolicy policy;
    std::int64_t layers;  // recomputed layers of the single 16-layer chunk
  };
  const Spelling spellings[] = {
      {"--recompute-activations", RecomputePolicy::kSelective, 16},
      {"--recompute-granularity full --recompute-method block --recompute-num-layers 4", RecomputePolicy::kFull, 4},
      {"gradient checkpointing", RecomputePolicy::kFull, 16},
      {"off", RecomputePolicy::kNone, 0},
      {true, RecomputePolicy::kFull, 16}};
  for (const auto& sp : spellings) {
    Json row = unseenRow();
    row["training"]["recompute"] = sp.value;
    auto c = validation::caseFromRow(row, assumptionsFile());
    ASSERT_TRUE(c) << sp.value.dump() << ": " << c.error().toString();
    ASSERT_EQ(c->plan.stages.size(), 1u);
    EXPECT_EQ(c->plan.stages[0].recompute, sp.policy) << sp.value.dump();
    EXPECT_EQ(c->plan.stages[0].recomputeLayers, sp.layers) << sp.value.dump();
  }
  Json row = unseenRow();
  row["training"]["recompute"] = "full";
  row["training"]["recompute_num_layers"] = 2;
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.stages[0].recomputeLayers, 2);
}

TEST(Validation, CheckpointingEveryNthBlockRecomputesThatShareOfTheLayers) {
  // IBM's fms-fsdp "selective" checkpointing wraps every n-th block: full recompute of 1/n of them. n from
  // the words, else from the row's own HFU against MFU (HFU counts the recomputed forward: 1 + share/3).
  struct Case {
    const char* words;
    std::optional<double> hfu;
    std::int64_t layers;  // of the single 16-layer chunk
    bool inferred;  // n read from HFU / MFU: the row no longer counts as fully published
  };
  auto base = validation::caseFromRow(unseenRow(), assumptionsFile());
  ASSERT_TRUE(base) << base.error().toString();
  const Case cases[] = {{"selective (checkpoint every 4th block)", std::nullopt, 4, false},
                        {"checkpointing every other block", std::nullopt, 8, false},
                        {"selective (checkpoint every n blocks)", 0.59, 8, true},  // 0.59 / 0.51: share 0.47
                        {"selective (checkpoint every n blocks)", 0.51, 0, true}};
  for (const auto& k : cases) {
    Json row = unseenRow();
    row["training"]["recompute"] = k.words;
    if (k.hfu) {
      row["measured"]["hfu"] = *k.hfu;
      row["measured"]["mfu"] = 0.51;
    }
    auto c = validation::caseFromRow(row, assumptionsFile());
    ASSERT_TRUE(c) << k.words << ": " << c.error().toString();
    ASSERT_EQ(c->plan.stages.size(), 1u);
    EXPECT_EQ(c->plan.stages[0].recompute, RecomputePolicy::kFull) << k.words;
    EXPECT_EQ(c->plan.stages[0].recomputeLayers, k.layers) << k.words;
    EXPECT_EQ(c->fullyPublished, base->fullyPublished && !k.inferred) << k.words;
  }
  // Without n and without both figures it stays the framework's selective policy.
  Json row = unseenRow();
  row["training"]["recompute"] = "selective (checkpoint every n blocks)";
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.stages[0].recompute, RecomputePolicy::kSelective);
}

TEST(Validation, ActivationRecomputationWithoutSelectiveIsFullRecompute) {
  // Before selective recompute (Korthikanti et al. 2022) Megatron's papers call full recompute
  // "activation recomputation"; the words are no longer left open for the cheapest policy that fits.
  for (const char* words : {"activation recomputation (paper-wide FLOP convention)", "activation recomputation"}) {
    Json row = unseenRow();
    row["training"]["recompute"] = words;
    auto c = validation::caseFromRow(row, assumptionsFile());
    ASSERT_TRUE(c) << words << ": " << c.error().toString();
    EXPECT_EQ(c->plan.stages[0].recompute, RecomputePolicy::kFull) << words;
    EXPECT_TRUE(c->fullyPublished) << words;
  }
  for (const char* words : {"no activation recomputation", "trained without activation recomputation"}) {
    Json row = unseenRow();
    row["training"]["recompute"] = words;
    auto c = validation::caseFromRow(row, assumptionsFile());
    ASSERT_TRUE(c) << words << ": " << c.error().toString();
    EXPECT_EQ(c->plan.stages[0].recompute, RecomputePolicy::kNone) << words;
  }
  Json row = unseenRow();
  row["training"]["recompute"] = "selective activation recomputation";
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.stages[0].recompute, RecomputePolicy::kSelective);
}

TEST(Validation, ARowWithoutASourceIsReadAsOneThatNamesNoCompile) {
  // Found by fuzz_validation: the compile reading looked up the row's source without asking whether it
  // has one (a read past the end of the row's keys under AddressSanitizer).
  Json row = unseenRow();
  row.erase("source");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_FALSE(c->plan.execution.unfused.any());
  // Its training words still count: a torchtitan run (named by its architecture) that compiled.
  row["model"]["arch"] = "Llama (torchtitan)";
  c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.execution.unfused, UnfusedKernels::all());
  row["training"]["notes"] = "torch.compile";
  c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.execution.unfused, UnfusedKernels{.finalNorm = true});
}

TEST(Validation, TorchtitanAndFsdpRowsRunEagerKernelsUnlessTheyCompiled) {
  // assumptions.json: torchtitan (compile off by default) and PyTorch FSDP's Llama runs run RMSNorm,
  // rotary and SwiGLU as eager decompositions; a row that says it compiled runs them fused (torchtitan's
  // final norm aside); Megatron's
  // rows are fused whatever they say.
  Json row = unseenRow();
  row["source"]["citation"] = "pytorch/torchtitan benchmark";
  row["hardware"]["gpu"] = "H100 SXM 80GB";
  row["hardware"]["gpu_memory_gb"] = 80;
  auto eager = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(eager) << eager.error().toString();
  EXPECT_EQ(eager->plan.execution.unfused, UnfusedKernels::all());
  EXPECT_TRUE(eager->plan.execution.torchCrossEntropy);  // F.cross_entropy on fp32 logits
  row["training"]["torch_compile"] = true;
  auto compiled = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(compiled) << compiled.error().toString();
  // torchtitan compiles each block: its final norm stays eager (compiled_unfused_kernels).
  EXPECT_EQ(compiled->plan.execution.unfused, UnfusedKernels{.finalNorm = true});
  row["source"]["citation"] = "Maximizing training throughput using PyTorch FSDP";
  row["training"].erase("torch_compile");
  auto fsdp = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(fsdp) << fsdp.error().toString();
  EXPECT_EQ(fsdp->plan.execution.unfused, UnfusedKernels::all());
  // On Hopper their attention is FlashAttention-2's kernels (SDPA's flash backend).
  EXPECT_TRUE(fsdp->plan.execution.flashAttention2);
  // A row that names torch.compile ran compiled (IBM and Meta's "... PyTorch FSDP and Torch.compile").
  row["source"]["citation"] = "Maximizing training throughput using PyTorch FSDP and Torch.compile";
  auto named = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(named) << named.error().toString();
  EXPECT_FALSE(named->plan.execution.unfused.any());
  row["training"]["notes"] = "eager, without torch.compile";
  auto negated = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(negated) << negated.error().toString();
  EXPECT_EQ(negated->plan.execution.unfused, UnfusedKernels::all());
  row["training"]["torch_compile"] = false;
  row["training"]["notes"] = "torch.compile off";
  auto stated = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(stated) << stated.error().toString();
  EXPECT_EQ(stated->plan.execution.unfused, UnfusedKernels::all());  // the boolean wins over the words
  row["training"].erase("torch_compile");
  row["training"].erase("notes");
  row["source"]["citation"] = "Megatron-Core benchmark";
  auto megatron = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(megatron) << megatron.error().toString();
  EXPECT_FALSE(megatron->plan.execution.unfused.any());
}

TEST(Validation, AnMptRowHasNoBiasesAndNoNormAfterItsEmbedding) {
  // MPT is ALiBi like BLOOM (the preset the harness starts from) but drops every bias (llm-foundry's
  // no_bias) and BLOOM's norm after the embedding.
  Json row = unseenRow();
  row["model"]["arch"] = "MPT (ALiBi, GeLU, expansion 4, no bias)";
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  const ModelSpec& s = *c->plan.model.spec;
  EXPECT_EQ(s.positionEmbedding, PositionEmbedding::kAlibi);
  EXPECT_FALSE(s.qkvBias || s.attentionOutputBias || s.mlpBias);
  EXPECT_FALSE(s.embeddingNorm);
  row["model"]["arch"] = "BLOOM (ALiBi)";
  c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_TRUE(c->plan.model.spec->embeddingNorm && c->plan.model.spec->mlpBias);
}

TEST(Validation, FieldsUnderOtherNamesAreReadAsTheirCanonicalOnes) {
  // Megatron argument names, Hugging Face config names and short forms.
  Json row = Json::parse(R"({
    "id": "other_names",
    "source": {"citation": "Some benchmark", "location": "table 2"},
    "model": {"name": "m", "arch": "GPT", "n_layer": 16, "n_embd": 1536, "n_head": 16, "seq_length": 2048, "vocab": 51200},
    "hardware": {"gpu": "A100-SXM4-80GB", "gpu_memory_gb": 80, "gpus_per_node": 8, "world_size": 16},
    "parallel": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "num_layers_per_virtual_pipeline_stage": 4,
                 "distributed_optimizer": true},
    "training": {"precision": "bf16", "recompute": "none", "mbs": 2, "gbs": 64},
    "measured": {"elapsed_time_per_iteration_ms": 900}
  })");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  const Plan& p = c->plan;
  EXPECT_EQ(p.model.spec->numLayers, 16);
  EXPECT_EQ(p.model.spec->hiddenSize, 1536);
  EXPECT_EQ(p.cluster.totalGpus(), 16);
  EXPECT_EQ(p.parallel.tp, 2);
  EXPECT_EQ(p.parallel.pp, 2);
  EXPECT_EQ(p.parallel.dp, 4);
  EXPECT_EQ(p.parallel.virtualStages, 2);  // 16 layers / (pp 2 x 4 per chunk)
  EXPECT_EQ(p.zeroStage, 1);
  EXPECT_EQ(p.microBatchSize, 2);
  EXPECT_EQ(p.globalBatchSize, 64);
  EXPECT_NEAR(*c->measuredStepSeconds, 0.9, 1e-12);
}

TEST(Validation, BlackwellRowsAndDeepSeekStyleExpertsAreRead) {
  // A Megatron-Core MoE row on B200 as SimuMax publishes it: expert width apart from the dense FFN,
  // the first layers dense ("([0]*1+[1]*3)"), SwiGLU/RMSNorm implied by the architecture's name.
  Json row = unseenRow();
  row["id"] = "unseen_b200_moe";
  deepSeekV3OnB200(row);
  row["training"] = Json::parse(R"({"precision": "bf16", "recompute": "none", "micro_batch_size": 1, "global_batch_size": 32})");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  const ModelSpec& s = *c->plan.model.spec;
  EXPECT_NE(c->plan.cluster.gpu.name.find("B200"), std::string::npos);
  EXPECT_EQ(s.moe.expertFfnHiddenSize, 2048);
  EXPECT_EQ(s.moe.firstDenseLayers, 1);
  EXPECT_FALSE(s.moe.isMoeLayer(0));
  EXPECT_TRUE(s.moe.isMoeLayer(1));
  EXPECT_EQ(s.norm, NormKind::kRmsNorm);
  // Megatron's names for latent attention (--qk-head-dim is the part without rotary) and shared experts.
  EXPECT_EQ(s.moe.sharedExpertFfnHiddenSize, 2048);
  EXPECT_EQ(s.mla.qLoraRank, 1536);
  EXPECT_EQ(s.mla.kvLoraRank, 512);
  EXPECT_EQ(s.mla.qkNopeHeadDim, 128);
  EXPECT_EQ(s.mla.qkRopeHeadDim, 64);
  EXPECT_EQ(s.mla.vHeadDim, 128);
  auto o = validation::evaluateCase(*c);
  ASSERT_TRUE(o) << o.error().toString();
  EXPECT_GT(o->predictedStepSeconds, 0);
  EXPECT_EQ(c->plan.execution.moeDispatcher, MoeDispatcher::kAllToAll);
  // The same row saying Megatron-Core's flex dispatcher with DeepEP, node-limited routing and the
  // expert all-to-all overlap.
  row["model"]["moe_router_num_groups"] = 8;
  row["model"]["moe_router_group_topk"] = 4;
  row["parallel"]["moe_token_dispatcher_type"] = "flex";
  row["parallel"]["moe_enable_deepep"] = true;
  row["parallel"]["overlap"] = "--overlap-grad-reduce --overlap-moe-expert-parallel-comm";
  auto deepep = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(deepep) << deepep.error().toString();
  EXPECT_EQ(deepep->plan.model.spec->moe.routingGroups, 8);
  EXPECT_EQ(deepep->plan.model.spec->moe.routingGroupTopK, 4);
  EXPECT_EQ(deepep->plan.execution.moeDispatcher, MoeDispatcher::kDeepEp);
  EXPECT_TRUE(deepep->plan.execution.epCommOverlap);
  // A row naming the flex dispatcher's HybridEP backend.
  row["parallel"].erase("moe_enable_deepep");
  row["parallel"]["moe_flex_dispatcher_backend"] = "hybridep";
  auto hybrid = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(hybrid) << hybrid.error().toString();
  EXPECT_EQ(hybrid->plan.execution.moeDispatcher, MoeDispatcher::kHybridEp);
  // NCCL EP runs plain all-to-alls, though its key names the flex dispatcher.
  row["parallel"]["moe_flex_dispatcher_backend"] = "ncclep";
  auto nccl = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(nccl) << nccl.error().toString();
  EXPECT_EQ(nccl->plan.execution.moeDispatcher, MoeDispatcher::kAllToAll);
}

TEST(Validation, RowsSayHeadWidthWindowsQkNormAndWhichLayersAreMoe) {
  // GPT-OSS 120B as a row gives it: 64-wide heads on a 2,880-wide model, a 128-token window on every
  // second layer (Hugging Face's layer_types, as a list or in words), and its experts on every layer.
  Json row = unseenRow();
  row["id"] = "unseen_gpt_oss";
  row["model"] = Json::parse(R"J({"name": "gpt-oss-120b", "num_layers": 36, "hidden_size": 2880, "num_attention_heads": 64,
      "num_query_groups": 8, "head_dim": 64, "ffn_hidden_size": 2880, "num_experts": 128, "top_k": 4,
      "vocab_size": 201088, "seq_len": 4096, "sliding_window": 128, "qk_layernorm": true,
      "layer_types": "sliding_attention/full_attention alternating (18 each)"})J");
  row["hardware"] = Json::parse(R"({"gpu": "H100 SXM", "gpu_memory_gb": 80, "gpus_per_node": 8, "num_gpus": 64})");
  row["parallel"] = Json::parse(R"({"tp": 1, "pp": 4, "dp": 16, "ep": 8})");
  row["training"] = Json::parse(R"({"precision": "bf16", "micro_batch_size": 1, "global_batch_size": 1280})");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  const ModelSpec& s = *c->plan.model.spec;
  EXPECT_EQ(s.headDim, 64);
  EXPECT_EQ(s.slidingWindow, 128);
  EXPECT_EQ(s.globalAttentionEvery, 2);  // in words; without them every layer would be windowed
  EXPECT_TRUE(s.qkNorm);
  row["model"]["layer_types"] = Json::parse(R"(["sliding_attention", "sliding_attention", "full_attention"])");
  auto list = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(list) << list.error().toString();
  EXPECT_EQ(list->plan.model.spec->globalAttentionEvery, 3);
  row["model"].erase("layer_types");
  row["model"]["window_attn_skip_freq"] = 4;  // Megatron's name
  auto skip = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(skip) << skip.error().toString();
  EXPECT_EQ(skip->plan.model.spec->globalAttentionEvery, 4);
  // Which layers are MoE: Megatron's integer --moe-layer-freq N is layers 0, N, 2N, ...; Hugging Face's
  // decoder_sparse_step N the last of every N.
  row["model"]["moe_layer_freq"] = 2;
  auto megatron = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(megatron) << megatron.error().toString();
  EXPECT_TRUE(megatron->plan.model.spec->moe.isMoeLayer(0));
  EXPECT_FALSE(megatron->plan.model.spec->moe.isMoeLayer(1));
  // Beside first_k_dense_replace it is DeepSeek's config field: the dense layers stay.
  row["model"]["first_k_dense_replace"] = 3;
  row["model"]["moe_layer_freq"] = 1;
  auto deepseek = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(deepseek) << deepseek.error().toString();
  EXPECT_EQ(deepseek->plan.model.spec->moe.firstDenseLayers, 3);
  EXPECT_TRUE(deepseek->plan.model.spec->moe.isMoeLayer(3));
  row["model"].erase("first_k_dense_replace");
  row["model"].erase("moe_layer_freq");
  row["model"]["decoder_sparse_step"] = 2;
  auto hf = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(hf) << hf.error().toString();
  EXPECT_FALSE(hf->plan.model.spec->moe.isMoeLayer(0));
  EXPECT_TRUE(hf->plan.model.spec->moe.isMoeLayer(1));
}

TEST(Validation, BlackwellUltraRowsRunOnTheirOwnPartsAndFourBitRecipesInFp4) {
  // Megatron-Bridge's performance tables name DGX-GB300 and B300 systems and NVFP4 or MXFP8 recipes.
  const std::tuple<const char*, const char*, double> parts[] = {
      {"DGX-GB300", "GB300", 276.0}, {"B300 SXM", "B300-SXM", 267.5}, {"DGX-GB200", "GB200", 184.0}, {"DGX-B200", "B200-SXM", 178.4}};
  for (const auto& [gpu, name, memory] : parts) {
    Json row = unseenRow();
    row["hardware"] = Json{{"gpu", gpu}, {"gpus_per_node", 8}, {"num_gpus", 64}};
    row["training"]["precision"] = "NVFP4";
    auto c = validation::caseFromRow(row, assumptionsFile());
    ASSERT_TRUE(c) << gpu << ": " << c.error().toString();
    EXPECT_NE(c->plan.cluster.gpu.name.find(name), std::string::npos) << gpu << " ran on " << c->plan.cluster.gpu.name;
    EXPECT_NEAR(c->plan.cluster.gpu.memoryBytes / (1024.0 * 1024 * 1024), memory, 0.01) << gpu;
    EXPECT_EQ(c->plan.precision, DType::kFp4) << gpu;
  }
  auto rowOn = [](const char* gpu, int perNode, const char* precision) {
    Json row = unseenRow();
    row["hardware"] = Json{{"gpu", gpu}, {"gpus_per_node", perNode}, {"num_gpus", 64}};
    row["training"]["precision"] = precision;
    return row;
  };
  // A GPU without 4-bit tensor cores runs such a recipe's nearest: fp8.
  auto h = validation::caseFromRow(rowOn("H100 SXM", 8, "NVFP4"), assumptionsFile());
  ASSERT_TRUE(h) << h.error().toString();
  EXPECT_EQ(h->plan.precision, DType::kFp8);
  Json row = rowOn("GB300", 4, "MXFP8");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.precision, DType::kFp8);
  EXPECT_DOUBLE_EQ(c->plan.cluster.gpu.peakFlopsPerSecond.at(DType::kBf16), 2500e12);
  EXPECT_DOUBLE_EQ(c->plan.cluster.gpu.hbmBytesPerSecond, 8000e9);
  row["hardware"]["gpu"] = "GB400";
  auto unknown = validation::caseFromRow(row, assumptionsFile());
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().toString().find("GB300"), std::string::npos) << unknown.error().toString();
}

TEST(Validation, MegatronBridgeRowsMayOffloadActivationsWhereRecomputeIsUnstated) {
  // Megatron-Bridge's Llama 3 70B on 64 GB200s: FSDP at pp 1, micro-batch 2, recompute not stated. Its
  // performance recipes offload some layers' activations to host memory instead of recomputing; the
  // framework entry says so (activation_offload), and the harness picks the fastest offload that fits.
  Json row = Json::parse(R"({
    "id": "bridge_llama3_70b_gb200",
    "source": {"citation": "NVIDIA-NeMo/Megatron-Bridge performance summary", "location": "DGX-GB200"},
    "model": {"name": "LLAMA3_70B", "arch": "Llama 3", "num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
              "num_query_groups": 8, "ffn_hidden_size": 28672, "seq_len": 8192, "vocab_size": 128256},
    "hardware": {"gpu": "DGX-GB200", "gpus_per_node": 4, "num_gpus": 64},
    "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "fsdp": true, "zero_stage": 3},
    "training": {"precision": "FP8", "recompute": "not stated", "micro_batch_size": 2, "global_batch_size": 256},
    "measured": {"tokens_per_s_per_gpu": 4224}
  })");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  const Plan& p = c->plan;
  EXPECT_GT(p.offload.activationLayers, 0);
  EXPECT_LT(p.offload.activationLayers, 80);
  EXPECT_EQ(p.stages.front().recomputeLayers, 0);
  const auto offloaded = costmodel::evaluatePlan(p);
  ASSERT_TRUE(offloaded) << offloaded.error().toString();
  EXPECT_TRUE(offloaded->fits);
  // One layer fewer does not fit: the smallest offload that fits is the fastest.
  Plan fewer = p;
  fewer.offload.activationLayers -= 1;
  const auto tight = costmodel::evaluatePlan(fewer);
  ASSERT_TRUE(tight);
  EXPECT_FALSE(tight->fits);
  // Another framework's row (no activation offload) recomputes instead, and runs slower.
  row["source"]["citation"] = "Some benchmark";
  auto other = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(other) << other.error().toString();
  EXPECT_EQ(other->plan.offload.activationLayers, 0);
  EXPECT_GT(other->plan.stages.front().recomputeLayers, 0);
  const auto recomputed = costmodel::evaluatePlan(other->plan);
  ASSERT_TRUE(recomputed);
  EXPECT_GT(recomputed->time.recompute, 0);
}

TEST(Validation, SimuMaxsB200RunsReduceTheirGradientsAfterTheBackward) {
  // SimuMax's launcher passes neither --overlap-grad-reduce nor --overlap-param-gather (Megatron-LM's
  // defaults: off), where Megatron-Core's published scripts turn both on: the same row under the two
  // citations differs by exactly the exposed data-parallel traffic.
  Json row = unseenRow();
  row["source"]["citation"] = "MooreThreads/SimuMax, B200 release v1.2 validation ('real' Megatron-LM measurements)";
  row["model"] = Json::parse(R"J({"name": "Llama 3 70B (truncated to 12 layers)", "arch": "Llama 3", "num_layers": 12,
      "hidden_size": 8192, "num_attention_heads": 64, "num_query_groups": 8, "ffn_hidden_size": 28672,
      "vocab_size": 128256, "seq_len": 4096})J");
  row["hardware"] = Json::parse(R"({"gpu": "B200 SXM", "gpu_memory_gb": 180, "gpus_per_node": 8, "num_gpus": 8})");
  row["parallel"] = Json::parse(R"({"tp": 2, "pp": 1, "dp": 4, "sequence_parallel": true, "distributed_optimizer": true})");
  row["training"] = Json::parse(R"J({"precision": "bf16 (TransformerEngine)", "recompute": "none", "micro_batch_size": 1,
      "global_batch_size": 32})J");
  row["measured"] = Json::parse(R"({"iteration_time_ms": 1387.0})");
  auto simumax = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(simumax) << simumax.error().toString();
  EXPECT_FALSE(simumax->plan.execution.overlapGradReduce);
  EXPECT_FALSE(simumax->plan.execution.overlapParamGather);
  row["source"]["citation"] = "Megatron-Core performance scripts";
  auto mcore = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(mcore) << mcore.error().toString();
  EXPECT_TRUE(mcore->plan.execution.overlapGradReduce);
  // SimuMax's rows also run Transformer Engine 2.11's in-place fused loss and keep its placeholder weight
  // gradients (the framework entry); give the Megatron-Core case the same so that only the overlaps differ.
  EXPECT_TRUE(simumax->plan.execution.fusedCrossEntropy && simumax->plan.execution.crossEntropyInPlace);
  EXPECT_TRUE(simumax->plan.execution.teDummyWgrads);
  EXPECT_FALSE(mcore->plan.execution.fusedCrossEntropy);
  mcore->plan.execution.fusedCrossEntropy = mcore->plan.execution.crossEntropyInPlace = true;
  mcore->plan.execution.teDummyWgrads = true;
  auto exposed = validation::evaluateCase(*simumax);
  auto hidden = validation::evaluateCase(*mcore);
  ASSERT_TRUE(exposed && hidden);
  EXPECT_GT(exposed->predictedStepSeconds, hidden->predictedStepSeconds * 1.01);
}

TEST(Validation, MegatronBridgeRowsKeepTransformerEnginesPlaceholderGradientsAndNeMo2024RowsDoNot) {
  // Transformer Engine caches its placeholder weight gradients from 2.3 (April 2025): Megatron-Bridge
  // (2025 on) runs it, NeMo's 2024 containers ran TE 1.x, whose placeholders died at once.
  Json row = unseenRow();
  row["source"]["citation"] = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md (Megatron-Bridge performance summary)";
  auto bridge = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(bridge) << bridge.error().toString();
  EXPECT_TRUE(bridge->plan.execution.teDummyWgrads);
  EXPECT_TRUE(bridge->plan.execution.tpCommOverlap);  // otherwise NeMo's settings
  row["source"]["citation"] = "NVIDIA NeMo docs, performance_summary.md (NeMo 24.07 container)";
  auto nemo = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(nemo) << nemo.error().toString();
  EXPECT_FALSE(nemo->plan.execution.teDummyWgrads);
  // Bridge's recipes check the gradients for NaN and its model provider fuses the loss natively; NeMo
  // 1.x did neither by default. Compare placeholders only.
  EXPECT_TRUE(bridge->plan.execution.gradNanCheck);
  EXPECT_FALSE(nemo->plan.execution.gradNanCheck);
  EXPECT_TRUE(bridge->plan.execution.nativeFusedCrossEntropy);
  EXPECT_FALSE(nemo->plan.execution.nativeFusedCrossEntropy);
  bridge->plan.execution.gradNanCheck = false;
  bridge->plan.execution.nativeFusedCrossEntropy = false;
  auto withPlaceholders = costmodel::evaluatePlan(bridge->plan);
  auto without = costmodel::evaluatePlan(nemo->plan);
  ASSERT_TRUE(withPlaceholders && without);
  EXPECT_GT(withPlaceholders->stages.front().memory.gradients, without->stages.front().memory.gradients);
  EXPECT_NEAR(withPlaceholders->stepSeconds, without->stepSeconds, 1e-12);
}

TEST(Validation, MlperfGpt3RowsRunTheInterleavedScheduleUnlessTheySayOtherwise) {
  // NVIDIA's MLPerf GPT-3 implementations interleave their pipeline (v3.1: 12 chunks by default, v4.1
  // configs: 6): a row that does not say how many chunks gets the fastest that fits; NeMo's own
  // performance rows keep 1F1B unless they say so.
  Json row = unseenRow();
  row["source"]["citation"] = "MLCommons Training v4.1 results, NVIDIA GPT-3 175B submission (NeMo Megatron, FP8)";
  row["model"] = Json::parse(R"({"name": "GPT-3 175B", "arch": "GPT-3", "num_layers": 96, "hidden_size": 12288,
      "num_attention_heads": 96, "seq_len": 2048, "vocab_size": 51200})");
  row["hardware"] = Json::parse(R"({"gpu": "H100 SXM", "gpu_memory_gb": 80, "gpus_per_node": 8, "num_gpus": 512})");
  row["parallel"] = Json::parse(R"({"tp": 4, "pp": 8, "dp": 16, "virtual_pipeline_stages": null})");
  row["training"] = Json::parse(R"J({"precision": "FP8 (Transformer Engine)", "micro_batch_size": 1, "global_batch_size": 256})J");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  EXPECT_EQ(c->plan.schedule, Schedule::kInterleaved);
  EXPECT_GT(c->plan.parallel.virtualStages, 1);
  EXPECT_TRUE(c->plan.execution.tpCommOverlap);
  row["source"]["citation"] = "NeMo 24.07 performance summary";
  auto nemo = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(nemo) << nemo.error().toString();
  EXPECT_EQ(nemo->plan.schedule, Schedule::kOneFOneB);
}

TEST(Validation, Float8RowsNameTheirCastingRecipe) {
  // torchtitan's float8 rows name torchao and its recipe; an fp8 row without torchao is Transformer
  // Engine's (Megatron, NeMo), whose casts are fused into the kernels before the GEMMs.
  Json row = unseenRow();
  row["hardware"] = Json::parse(R"({"gpu": "H100 SXM", "gpu_memory_gb": 80, "gpus_per_node": 8, "num_gpus": 16})");
  auto recipeOf = [&](const std::string& precision) {
    row["training"]["precision"] = precision;
    auto c = validation::caseFromRow(row, assumptionsFile());
    EXPECT_TRUE(c) << (c ? "" : c.error().toString());
    EXPECT_TRUE(!c || c->plan.precision == DType::kFp8) << precision;
    return c ? c->plan.execution.float8Recipe : Float8Recipe::kTransformerEngine;
  };
  EXPECT_EQ(recipeOf("bf16 + float8 tensorwise Linear (torchao)"), Float8Recipe::kTensorwise);
  EXPECT_EQ(recipeOf("bf16 + float8 rowwise Linear (torchao)"), Float8Recipe::kRowwise);
  EXPECT_EQ(recipeOf("float8 rowwise_with_gw_hp (torchao)"), Float8Recipe::kRowwiseGwHp);
  EXPECT_EQ(recipeOf("float8 (torchao)"), Float8Recipe::kTensorwise);
  EXPECT_EQ(recipeOf("FP8 hybrid (Transformer Engine)"), Float8Recipe::kTransformerEngine);
}

TEST(Validation, PowerLimitedHbm2eH100sAreNotTheDatasheetPart) {
  // torchtitan's benchmarks ran on Meta's H100s: 96 GB HBM2e, 500 W, 800 TFLOP/s bf16 and 2.4 TB/s. The
  // same row on the SXM5 datasheet part (700 W, HBM3) is predicted faster by about the ratio of peaks.
  Json row = unseenRow();
  row["hardware"] = Json::parse(R"J({"gpu": "H100 SXM 96GB HBM2e (500 W power limit, Meta Grand Teton)", "gpu_memory_gb": 96,
                                    "gpus_per_node": 8, "num_gpus": 8})J");
  row["model"] = Json::parse(R"({"name": "GPT h8192 L8", "arch": "GPT", "num_layers": 8, "hidden_size": 8192, "num_attention_heads": 64,
                                 "ffn_hidden_size": 32768, "seq_len": 4096, "vocab_size": 51200})");
  row["parallel"] = Json::parse(R"({"tp": 8, "pp": 1, "dp": 1, "zero_stage": 1})");
  row["training"]["micro_batch_size"] = 1;
  auto capped = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(capped) << capped.error().toString();
  EXPECT_DOUBLE_EQ(capped->plan.cluster.gpu.peakFlopsPerSecond.at(DType::kBf16), 800e12);
  EXPECT_DOUBLE_EQ(capped->plan.cluster.gpu.hbmBytesPerSecond, 2400e9);
  row["hardware"]["gpu"] = "H100 SXM5 80GB";
  row["hardware"]["gpu_memory_gb"] = 80;
  auto datasheet = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(datasheet) << datasheet.error().toString();
  EXPECT_DOUBLE_EQ(datasheet->plan.cluster.gpu.peakFlopsPerSecond.at(DType::kBf16), 989.4e12);
  auto slow = validation::evaluateCase(*capped), fast = validation::evaluateCase(*datasheet);
  ASSERT_TRUE(slow && fast);
  EXPECT_GT(slow->predictedStepSeconds, 1.1 * fast->predictedStepSeconds);
  EXPECT_LT(slow->predictedStepSeconds, 1.45 * fast->predictedStepSeconds);
}

TEST(Validation, LayoutsAreRankedAgainstTheMeasuredOrderPerModelAndCluster) {
  EXPECT_DOUBLE_EQ(validation::kendallTau({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(validation::kendallTau({1, 2, 3, 4}, {40, 30, 20, 10}), -1.0);
  EXPECT_DOUBLE_EQ(validation::kendallTau({1, 2, 3}, {1, 3, 2}), 1.0 / 3.0);  // 2 concordant, 1 discordant
  EXPECT_DOUBLE_EQ(validation::kendallTau({1, 1}, {1, 2}), 0.0);             // only a tied pair

  // Three layouts of one model on one cluster, and one run of another model (no group of its own).
  auto base = validation::caseFromRow(unseenRow(), assumptionsFile());
  ASSERT_TRUE(base) << base.error().toString();
  std::vector<validation::Case> cases(4, *base);
  cases[3].plan.model.spec->numLayers = 8;
  const double predicted[] = {1.0, 2.0, 3.0, 1.0};
  const double measured[] = {2.2, 2.0, 3.5, 1.0};  // colo's fastest (the first) is 10% slower than the second
  std::vector<validation::Outcome> outcomes;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    cases[i].id = "unseen_" + std::to_string(i);
    validation::Outcome o;
    o.source = &cases[i];
    o.predictedStepSeconds = predicted[i];
    o.measuredSeconds = measured[i];
    outcomes.push_back(o);
  }
  const auto groups = validation::rankLayouts(outcomes);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].runs, 3u);
  EXPECT_EQ(groups[0].group.rfind("Some_benchmark h1536 L16", 0), 0u) << groups[0].group;
  EXPECT_DOUBLE_EQ(groups[0].kendallTau, 1.0 / 3.0);
  EXPECT_NEAR(groups[0].pickSlowdown, 0.1, 1e-12);
}

TEST(Validation, RowsNamingMegatronRecomputeModulesRecomputeThoseModules) {
  // Megatron-Bridge's DeepSeek-V3 recipes name what selective recompute re-runs (H100: mla_up_proj and
  // mlp). A row may say so in its recompute text or as a recompute_modules list; either way the plan
  // re-runs those modules, not the attention core, and frees their activations.
  Json row = unseenRow();
  row["id"] = "unseen_moe_recompute_modules";
  deepSeekV3OnB200(row);
  row["training"] = Json::parse(R"J({"precision": "bf16", "recompute": "selective (recompute_modules: mla_up_proj, mlp)",
      "micro_batch_size": 1, "global_batch_size": 32})J");
  auto named = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(named) << named.error().toString();
  EXPECT_EQ(named->plan.stages.front().recompute, RecomputePolicy::kSelective);
  EXPECT_EQ(named->plan.execution.recomputeModules, parseRecomputeModules("mla_up_proj,mlp").value());
  // The same as a list, with no policy named: selective is the only recompute the modules belong to.
  row["training"]["recompute"] = "not stated";
  row["training"]["recompute_modules"] = Json::array({"mla_up_proj", "mlp"});
  auto listed = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(listed) << listed.error().toString();
  EXPECT_EQ(listed->plan.stages.front().recompute, RecomputePolicy::kSelective);
  EXPECT_EQ(listed->plan.stages.front().recomputeLayers, 4);
  EXPECT_EQ(listed->plan.execution.recomputeModules, named->plan.execution.recomputeModules);
  // Plain selective recompute is the attention core's, as before.
  row["training"].erase("recompute_modules");
  row["training"]["recompute"] = "selective";
  auto plain = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(plain) << plain.error().toString();
  EXPECT_TRUE(plain->plan.execution.recomputeModules.isDefault());
  // Against no recompute, the modules free memory and take time.
  row["training"]["recompute"] = "none";
  auto none = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(none) << none.error().toString();
  const auto a = costmodel::evaluatePlan(named->plan);
  const auto b = costmodel::evaluatePlan(none->plan);
  ASSERT_TRUE(a && b);
  EXPECT_LT(a->peakMemoryBytes, b->peakMemoryBytes);
  EXPECT_GT(a->time.recompute, 0);
  EXPECT_EQ(b->time.recompute, 0);
  // Full recompute's text may say "modules" without naming any: it stays full.
  row["training"]["recompute"] = "full (all modules, --recompute-granularity full)";
  auto full = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(full) << full.error().toString();
  EXPECT_EQ(full->plan.stages.front().recompute, RecomputePolicy::kFull);
  EXPECT_TRUE(full->plan.execution.recomputeModules.isDefault());
}

TEST(Validation, MegatronBridgeMoeRowsRecomputeTheCheapModulesWhereRecomputeIsUnstated) {
  // Megatron-Bridge's DeepSeek-V3 on 256 GB200s (its performance summary, 26.04.01: tp 1, pp 4, vp 4,
  // ep 64, MXFP8, recompute not in the table). Without recompute it does not fit; Bridge's MoE recipes
  // recompute Megatron-Core's output-discarding modules, not whole layers (the framework entry's
  // selective_recompute_modules), and with them it fits.
  Json row = Json::parse(R"J({
    "id": "bridge_dsv3_gb200",
    "source": {"citation": "NVIDIA-NeMo/Megatron-Bridge performance summary, 26.04.01", "location": "DGX-GB200"},
    "model": {"name": "DeepSeekV3", "arch": "DeepSeek-V3 (MLA, DeepSeekMoE, SwiGLU, RMSNorm, RoPE)", "num_layers": 61,
              "hidden_size": 7168, "num_attention_heads": 128, "num_query_groups": 128, "ffn_hidden_size": 18432,
              "moe_ffn_hidden_size": 2048, "num_experts": 256, "top_k": 8, "shared_expert_intermediate_size": 2048,
              "moe_layer_freq": "([0]*3+[1]*58)", "moe_router_num_groups": 8, "moe_router_group_topk": 4,
              "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128,
              "vocab_size": 129280, "seq_len": 4096},
    "hardware": {"gpu": "GB200 (DGX-GB200, GB200 NVL72)", "gpus_per_node": 4, "num_gpus": 256},
    "parallel": {"tp": 1, "pp": 4, "dp": 64, "cp": 1, "ep": 64, "virtual_pipeline_stages": 4, "etp": 1},
    "training": {"precision": "MXFP8", "recompute": "not stated", "micro_batch_size": 1, "global_batch_size": 4096},
    "measured": {"tokens_per_s_per_gpu": 4256}
  })J");
  auto c = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(c) << c.error().toString();
  const Plan& p = c->plan;
  ASSERT_EQ(p.stages.front().recompute, RecomputePolicy::kSelective);
  const RecomputeModules& m = p.execution.recomputeModules;
  EXPECT_TRUE(m.moeAct && m.layernorm && m.mlaUpProj && !m.moe && !m.mlp) << recomputeModulesLabel(m);
  // Its performance scripts reduce gradients in bf16 (grad_reduce_in_fp32 False): half the buffer.
  EXPECT_TRUE(p.execution.gradReduceBf16);
  const auto chosen = costmodel::evaluatePlan(p);
  ASSERT_TRUE(chosen) << chosen.error().toString();
  EXPECT_TRUE(chosen->fits);
  Plan none = p;
  for (auto& st : none.stages) st = StagePlan{st.layers, RecomputePolicy::kNone, 0};
  none.execution.recomputeModules = {};
  const auto kept = costmodel::evaluatePlan(none);
  ASSERT_TRUE(kept);
  EXPECT_FALSE(kept->fits);
  // Another framework's row recomputes whole layers instead, and runs slower.
  row["source"]["citation"] = "Some benchmark";
  auto other = validation::caseFromRow(row, assumptionsFile());
  ASSERT_TRUE(other) << other.error().toString();
  EXPECT_TRUE(other->plan.execution.recomputeModules.isDefault());
  EXPECT_FALSE(other->plan.execution.gradReduceBf16);
  const auto whole = costmodel::evaluatePlan(other->plan);
  ASSERT_TRUE(whole);
  EXPECT_GT(whole->time.recompute, chosen->time.recompute);
}

}  // namespace
}  // namespace colo
