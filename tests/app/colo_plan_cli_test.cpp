// End-to-end tests of the colo-plan program: run the built binary as a user would and check its exit
// code, stdout and stderr.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include <tuple>

#include <gtest/gtest.h>

#include "colo/core/json.h"
#include "core/test_support.h"

namespace colo {
namespace {

test::ProgramOutput run(const std::string& arguments) { return test::runProgram("colo-plan", arguments); }

// The predicted step of an `evaluate ... --json` command line (0 when it fails, which is reported).
double stepTimeOf(const std::string& arguments) {
  const auto r = run(arguments);
  EXPECT_EQ(r.exitCode, 0) << arguments << "\n" << r.err;
  return r.exitCode == 0 ? Json::parse(r.out)["step_time_s"].get<double>() : 0.0;
}

std::size_t lines(const std::string& text) {
  std::size_t n = 0;
  for (const char c : text) n += c == '\n';
  return n;
}

TEST(ColoPlanCli, InspectJsonHasTheContractKeys) {
  const auto r = run("inspect --model gpt3-175b --cluster dgx-a100-80gb-x128 --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["params"].get<std::int64_t>(), 174'604'259'328);
  EXPECT_EQ(j["active_params"].get<std::int64_t>(), 174'604'259'328);
  EXPECT_EQ(j["num_layers"].get<int>(), 96);
  EXPECT_EQ(j["hidden_size"].get<int>(), 12288);
  EXPECT_NEAR(j["flops_per_token_train"].get<double>(), 1.0764e12, 0.0005e12);
  EXPECT_EQ(j["cluster"]["total_gpus"].get<int>(), 1024);
  EXPECT_EQ(j["cluster"]["min_gpus_for_model_states"].get<int>(), 33);
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(ColoPlanCli, EvaluateOpsListsEveryOpsCompute) {
  const std::string plan = "--model gpt2-small --cluster dgx-a100-80gb --gpus 1 --mbs 4 --gbs 8";
  const auto text = run("evaluate " + plan + " --ops");
  ASSERT_EQ(text.exitCode, 0) << text.err;
  for (const char* expected : {"ops       compute per micro-batch", "attn.qkv", "attn.flash", "head.cross_entropy", "layer      12"}) {
    EXPECT_NE(text.out.find(expected), std::string::npos) << expected << "\n" << text.out;
  }
  EXPECT_EQ(text.out.find("attn.softmax"), std::string::npos) << "fused into FlashAttention: not listed";
  const auto json = run("evaluate " + plan + " --ops --json");
  ASSERT_EQ(json.exitCode, 0) << json.err;
  const Json j = Json::parse(json.out);
  ASSERT_TRUE(j.contains("ops"));
  double forward = 0;
  for (const auto& o : j["ops"]) forward += o["count"].get<double>() * o["forward_s"].get<double>();
  EXPECT_NEAR(forward, j["stages"][0]["forward_s"].get<double>(), 1e-12);
}

TEST(ColoPlanCli, AsyncTensorParallelismIsNamedAndCostedBetweenNoOverlapAndUserbuffers) {
  const std::string plan = "evaluate --model llama3-8b --cluster dgx-h100-x64 --gpus 64 --tp 8 --sp --dp 8 --gbs 64 --mbs 1 --json";
  auto step = [&](const std::string& extra) { return stepTimeOf(plan + extra); };
  const double serial = step("");
  const double userbuffers = step(" --tp-comm-overlap");
  const double async = step(" --tp-overlap micro_pipeline");
  EXPECT_LT(userbuffers, async);
  EXPECT_LT(async, serial);
  const auto text = run("evaluate --model llama3-8b --cluster dgx-h100-x64 --gpus 64 --tp 8 --sp --dp 8 --gbs 64 --tp-overlap micro_pipeline");
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find(", async TP"), std::string::npos) << text.out;
  // Without sequence parallelism there is nothing to micro-pipeline, and the plan line says so.
  const auto plain = run("evaluate --model llama3-8b --cluster dgx-h100-x64 --gpus 64 --tp 8 --dp 8 --gbs 64 --tp-overlap micro_pipeline");
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  EXPECT_NE(plain.out.find(", async TP (no effect without sp)"), std::string::npos) << plain.out;
  // --tp-overlap userbuffers turns the overlap on as --tp-comm-overlap does.
  EXPECT_DOUBLE_EQ(step(" --tp-overlap userbuffers"), userbuffers);
}

TEST(ColoPlanCli, ActivationOffloadIsAskedForByLayersAndRefusedWithPipelines) {
  // Llama 3 8B on one DGX H100, dp 8: the activations of its first 8 layers in host memory.
  const std::string plan = "evaluate --model llama3-8b --cluster dgx-h100 --gbs 64 --zero 1 --offload-activations 8";
  const auto text = run(plan);
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("activations of 8 layers offloaded"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("of offloaded activations per node"), std::string::npos) << text.out;
  const auto json = run(plan + " --json");
  ASSERT_EQ(json.exitCode, 0) << json.err;
  EXPECT_GT(Json::parse(json.out)["peak_memory_bytes"].get<double>(), 0);
  EXPECT_LT(Json::parse(json.out)["peak_memory_bytes"].get<double>(),
            Json::parse(run("evaluate --model llama3-8b --cluster dgx-h100 --gbs 64 --zero 1 --json").out)["peak_memory_bytes"].get<double>());
  // Megatron-Core offloads only at pp 1: one error naming the field, exit 2.
  const auto piped = run(plan + " --pp 2");
  EXPECT_EQ(piped.exitCode, 2);
  EXPECT_NE(piped.err.find("/offload/activation_layers"), std::string::npos) << piped.err;
  EXPECT_NE(piped.err.find("needs pp 1"), std::string::npos) << piped.err;
}

TEST(ColoPlanCli, PredictionsCarryTheErrorBandOfSimilarValidatedRuns) {
  // GPT-3 175B on 1,024 A100: the step time's likely range from the validated runs most like it, in
  // the text, the JSON and every search row.
  const std::string plan = "--model gpt3-175b --cluster dgx-a100-80gb-x128 --tp 8 --pp 16 --vpp 3 --sp --mbs 1 --gbs 1536 --zero 1";
  const auto text = run("evaluate " + plan);
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_TRUE(std::regex_search(text.out, std::regex(R"(step +[0-9.]+ s \([-+][0-9]+%\.\.[-+][0-9]+%, 20 similar validated runs\))")))
      << text.out;
  const auto json = run("evaluate " + plan + " --json");
  ASSERT_EQ(json.exitCode, 0) << json.err;
  const Json band = Json::parse(json.out)["error_band"];
  EXPECT_EQ(band["step"]["runs"].get<int>(), 20);
  EXPECT_LT(band["step"]["low"].get<double>(), band["step"]["high"].get<double>());
  EXPECT_FALSE(band["memory_at_risk"].get<bool>());
  const auto search = run("search --model gpt3-175b --cluster dgx-a100-80gb-x128 --gbs 1536 --top 3 --json");
  ASSERT_EQ(search.exitCode, 0) << search.err;
  const Json result = Json::parse(search.out);  // kept alive: the loop below walks into it
  ASSERT_FALSE(result["candidates"].empty());
  for (const auto& c : result["candidates"]) EXPECT_EQ(c["error_band"]["step"]["runs"].get<int>(), 20);
}

TEST(ColoPlanCli, ExplainNamesTheOptimizerTrafficOfThePlansPrecision) {
  // Megatron's accumulation (the default): the step over the shard without its zeroing, then the
  // gradient buffer zeroed whole (one GPU: not scaled). PyTorch's (autograd): the whole step over the shard.
  const std::string plan = "evaluate --model gpt2-small --cluster dgx-a100-80gb --gbs 8 --explain";
  const std::tuple<std::string, std::string, std::string> cases[] = {
      {" --gpus 1 --precision fp16", "52 bytes per parameter of the shard (fp16", "buffer zeroed whole, 2 bytes per local parameter"},
      {" --gpus 1 --precision bf16", "38 bytes per parameter of the shard (bf16", "buffer zeroed whole, 4 bytes per local parameter"},
      {" --gpus 1 --precision fp32", "32 bytes per parameter of the shard (fp32", "buffer zeroed whole, 4 bytes per local parameter"},
      {" --gpus 8 --tp 1 --pp 1 --dp 8 --zero 1 --precision bf16", "38 bytes per parameter of the shard (bf16",
       "buffer zeroed and scaled whole, 12 bytes per local parameter"},
      {" --gpus 8 --tp 1 --pp 1 --dp 8 --zero 1 --precision bf16 --grad-nan-check", "38 bytes per parameter of the shard (bf16",
       "12 bytes per local parameter; NaN check of the gradients, 4 bytes per local parameter and two host synchronizations per bucket"},
      {" --gpus 1 --precision bf16 --grad-accumulation autograd", "42 bytes per parameter of the shard (bf16", ""}};
  for (const auto& [options, step, buffer] : cases) {
    const auto r = run(plan + options);
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_NE(r.out.find(step), std::string::npos) << options << "\n" << r.out;
    if (buffer.empty()) {
      EXPECT_EQ(r.out.find("gradient buffer"), std::string::npos) << options << "\n" << r.out;
    } else {
      EXPECT_NE(r.out.find(buffer), std::string::npos) << options << "\n" << r.out;
    }
  }
}

TEST(ColoPlanCli, InspectTextShowsModelOpsAndCluster) {
  const auto r = run("inspect --model mixtral-8x7b --cluster dgx-h100-x64 --gpus 128 --seq-len 4096");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  for (const char* expected : {"46.7B total", "12.9B active per token", "moe.experts.gate_up", "grouped_matmul",
                               "16 nodes x 8 H100-SXM5-80GB = 128 GPUs", "4096 tokens"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  }
}

TEST(ColoPlanCli, HuggingFaceConfigAndFlagsWork) {
  const auto r = run("inspect --model " + test::dataFile("hf/llama-2-7b/config.json") + " --seq-len 2048 --batch 4 --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["params"].get<std::int64_t>(), 6'738'415'616);
  EXPECT_EQ(j["seq_len"].get<int>(), 2048);
  EXPECT_EQ(j["batch"].get<int>(), 4);
  EXPECT_EQ(j["model_source"].get<std::string>(), "Hugging Face config");
  EXPECT_TRUE(j["cluster"].is_null());
}

TEST(ColoPlanCli, RawOpGraphFromAnotherFramework) {
  const std::string graph = test::dataFile("opgraphs/tiny-mlp-lm.json");
  const auto r = run("inspect --model " + graph + " --batch 4 --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["model_source"].get<std::string>(), "colo.opgraph/1");
  EXPECT_EQ(j["params"].get<std::int64_t>(), 1000 * 256 + 2 * 2 * 256 * 1024 + 256 * 1000);
  EXPECT_EQ(j["batch"].get<int>(), 4);
  // Per token, forward: two layers of 2*(256*1024)*2 plus the head 2*256*1000.
  EXPECT_DOUBLE_EQ(j["flops_per_token_fwd"].get<double>(), 2 * 2.0 * 2 * 256 * 1024 + 2.0 * 256 * 1000);
  const auto other = run("inspect --model " + graph + " --seq-len 256");
  EXPECT_EQ(other.exitCode, 2);
  EXPECT_NE(other.err.find("recorded at sequence length 128"), std::string::npos) << other.err;
}

TEST(ColoPlanCli, BadInputExitsTwoWithOneLineNamingFileFieldAndValue) {
  test::ScratchDir dir;
  Json model = test::loadJson(test::dataFile("models/gpt2-small.json"));
  model["num_attention_heads"] = 7;
  const auto heads = dir.write("heads.json", model.dump());
  model = test::loadJson(test::dataFile("models/gpt2-small.json"));
  model["hidden_size"] = -768;
  const auto negative = dir.write("negative.json", model.dump());
  Json cluster = test::loadJson(test::dataFile("clusters/dgx-a100-80gb.json"));
  cluster["gpus_per_node"] = "eight";
  const auto clusterFile = dir.write("cluster.json", cluster.dump());
  const auto broken = dir.write("broken.json", "{\"format\": \"colo.model/1\",\n \"name\": }");

  struct Case {
    std::string args;
    std::string mustContain;
  };
  const std::vector<Case> cases = {
      {"inspect --model " + heads, heads + ": /num_attention_heads: hidden_size 768 is not divisible by num_attention_heads 7"},
      {"inspect --model " + negative, negative + ": /hidden_size: must be a positive integer, got -768"},
      {"inspect --model gpt2-small --cluster " + clusterFile, clusterFile + ": /gpus_per_node: must be an integer, got \"eight\""},
      {"inspect --model " + broken, broken + ": invalid JSON at line 2"},
      {"inspect --model " + dir.path("missing.json"), "missing.json: no such file"},
      {"inspect --model gpt3-17b", "did you mean \"gpt3-1"},
      {"inspect --model gpt2-small --seq-len 4096", "exceeds the learned position table"},
      {"inspect --model gpt2-small --seq-len abc", "--seq-len: expected a positive integer, got \"abc\""},
      {"inspect --model gpt2-small --precision int3", "--precision: unknown precision \"int3\""},
      {"evaluate --model gpt2-small --cluster dgx-a100-80gb --gpus 1 --gbs 8 --grad-accumulation lazy",
       "--grad-accumulation: unknown gradient accumulation \"lazy\" (expected one of: fused, main_grad, autograd, fp32_copy)"},
      {"evaluate --model gpt2-small --cluster dgx-a100-80gb --gpus 8 --tp 2 --sp --gbs 8 --tp-overlap flux",
       "--tp-overlap: unknown tensor-parallel overlap \"flux\" (expected userbuffers or micro_pipeline)"},
      {"inspect --model gpt2-small --cluster dgx-a100-80gb-x16 --gpus 12", "not a whole number of nodes"},
      {"inspect --modle gpt2-small", "unknown option --modle (did you mean --model?)"},
      {"inspect", "missing --model"},
      {"frobnicate", "unknown command \"frobnicate\""},
  };
  for (const auto& c : cases) {
    const auto r = run(c.args);
    EXPECT_EQ(r.exitCode, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1u) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.mustContain), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args;
  }
}

TEST(ColoPlanCli, ValidateAcceptsEveryShippedFileAndRejectsBadOnes) {
  std::string all;
  for (const char* folder : {"models", "clusters", "plans", "opgraphs"}) {
    for (const auto& entry : std::filesystem::directory_iterator(test::dataFile(folder))) all += " " + entry.path().string();
  }
  for (const auto& entry : std::filesystem::directory_iterator(test::dataFile("hf"))) {
    all += " " + (entry.path() / "config.json").string();
  }
  const auto ok = run("validate" + all);
  EXPECT_EQ(ok.exitCode, 0) << ok.err;
  EXPECT_GE(lines(ok.out), 37u);
  EXPECT_NE(ok.out.find("colo.plan/1 for gpt3-175b on 1024 GPUs"), std::string::npos);

  test::ScratchDir plans;
  Json plan = test::loadJson(test::dataFile("plans/gpt3-175b-megatron.json"));
  plan["parallel"]["tp"] = 64;
  const auto badPlan = plans.write("plan.json", plan.dump());
  const auto rejected = run("validate " + badPlan);
  EXPECT_EQ(rejected.exitCode, 2);
  EXPECT_NE(rejected.err.find(badPlan + ": /parallel: dp*tp*pp*cp = 8*64*16*1 = 8192 does not match the cluster's 1024 GPUs"),
            std::string::npos)
      << rejected.err;

  test::ScratchDir dir;
  const auto wrongKind = dir.write("w.json", R"({"format": "colo.recipe/1"})");
  const auto r = run("validate " + wrongKind);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("unknown document kind \"colo.recipe\""), std::string::npos) << r.err;
}

TEST(ColoPlanCli, ListAndHelp) {
  const auto list = run("list");
  ASSERT_EQ(list.exitCode, 0);
  EXPECT_NE(list.out.find("llama3-405b"), std::string::npos);
  EXPECT_NE(list.out.find("dgx-h100-x2048"), std::string::npos);
  EXPECT_EQ(run("--help").exitCode, 0);
  EXPECT_EQ(run("inspect --help").exitCode, 0);
  EXPECT_EQ(run("").exitCode, 2);
  EXPECT_NE(run("--version").out.find("colo-plan 0."), std::string::npos);
}

}  // namespace
}  // namespace colo

namespace colo {
namespace {

TEST(ColoPlanEvaluate, JsonHasTheContractKeysAndTheBreakdownSums) {
  const auto r = run("evaluate --model gpt3-175b --cluster dgx-a100-80gb-x128 --tp 8 --pp 16 --dp 8 --vpp 3 --sp --mbs 1 "
                     "--gbs 1536 --zero 1 --recompute selective --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const Json j = Json::parse(r.out);
  for (const char* key : {"step_time_s", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu",
                          "peak_memory_bytes", "fits", "bubble_fraction", "breakdown"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  double sum = 0;
  for (const auto& [kind, seconds] : j["breakdown"]["time_s"].items()) sum += seconds.get<double>();
  EXPECT_NEAR(sum, j["step_time_s"].get<double>(), 1e-9 * sum);
  double memory = 0;
  for (const auto& [kind, bytes] : j["breakdown"]["memory_bytes"].items()) memory += bytes.get<double>();
  EXPECT_NEAR(memory, j["peak_memory_bytes"].get<double>(), 1e-6 * memory);
  EXPECT_TRUE(j["fits"].get<bool>());
}

TEST(ColoPlanEvaluate, InconsistentDegreesAreBadInputWithTheReason) {
  struct Case {
    std::string args;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"--tp 8 --pp 16 --dp 4 --gbs 1536", "dp*tp*pp*cp = 4*8*16*1 = 512 does not match the cluster's 1024 GPUs"},
      {"--tp 64 --pp 16 --gbs 1536", "--tp: num_attention_heads 96 is not divisible by tp 64"},
      {"--tp 8 --pp 5 --gbs 1536", "tp*pp*cp = 40 does not divide the cluster's 1024 GPUs"},
      {"--tp 8 --pp 16 --gbs 1537", "--gbs: global batch 1537 is not divisible by micro_batch_size*dp"},
      {"--tp 8 --pp 16 --gbs 1536 --recompute sometimes", "--recompute: unknown recompute policy \"sometimes\""},
      {"--tp 8 --pp 16 --gbs 1536 --zero 4", "--zero: expected 0, 1, 2 or 3, got \"4\""},
      {"--tp 8 --pp 16 --vpp 3 --gbs 1544", "--gbs"},
      {"--tp 8 --pp 16", "missing --gbs"},
      {"--tp 8 --pp 16 --gbs 1536 --precision fp8", "--precision: A100-SXM4-80GB has no fp8 peak"},
      // Comma lists: an empty item, a trailing comma, a sign or a suffix is refused whole.
      {"--tp 8 --pp 2 --gbs 1536 --stages 48,", "--stages: expected layer counts (positive integers; the first and last may be 0) separated by commas, got \"48,\""},
      {"--tp 8 --pp 2 --gbs 1536 --stages 48,,48", "got \"48,,48\""},
      {"--tp 8 --pp 2 --gbs 1536 --stages 48,+48", "got \"48,+48\""},
      {"--tp 8 --pp 2 --gbs 1536 --stages 48,48x", "got \"48,48x\""},
      {"--tp 8 --pp 16 --cp 2 --gbs 1536 --cp-comm-type a2a+p2p --hierarchical-cp-sizes 2,0",
       "--hierarchical-cp-sizes: expected the all-to-all and ring sizes (positive integers up to 1000000) separated by commas, got \"2,0\""},
      {"--tp 8 --pp 16 --cp 2 --gbs 1536 --cp-comm-type a2a+p2p --hierarchical-cp-sizes 2",
       "--hierarchical-cp-sizes: a2a+p2p needs [all-to-all size, ring size] with a product of cp 2, got [2]"},
  };
  for (const auto& c : cases) {
    const auto r = run("evaluate --model gpt3-175b --cluster dgx-a100-80gb-x128 " + c.args);
    EXPECT_EQ(r.exitCode, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1u) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.reason), std::string::npos) << c.args << "\n" << r.err;
  }
  // Spaces around a list's items are fine.
  const auto spaced = run("evaluate --model gpt3-175b --cluster dgx-a100-80gb-x128 --tp 8 --pp 2 --gbs 1536 --stages '47, 49'");
  EXPECT_EQ(spaced.exitCode, 0) << spaced.err;
  // 96 layers do not split into pp 5: the GPU count check comes first, so ask for a layer split directly.
  const auto layers = run("evaluate --model gpt3-175b --cluster dgx-a100-80gb-x128 --gpus 640 --tp 8 --pp 5 --gbs 1536");
  EXPECT_EQ(layers.exitCode, 2);
  EXPECT_NE(layers.err.find("layers are not divisible by pp*vpp = 5"), std::string::npos) << layers.err;
}

// Every decimal option is read whole by one parser (Args::number): a suffix, an empty value or a value
// outside the option's range is refused with one line naming the option, the value and the range.
TEST(ColoPlanCli, DecimalOptionsAreReadWholeAndCheckedAgainstTheirRange) {
  struct Case {
    std::string args;
    std::string reason;
  };
  const std::string small = "--model gpt2-small --cluster dgx-a100-80gb --gbs 64";
  const std::vector<Case> cases = {
      {"search " + small + " --max-memory-fraction 0.9x", "--max-memory-fraction: expected a number in (0, 1], got \"0.9x\""},
      {"search " + small + " --max-memory-fraction 0", "--max-memory-fraction: expected a number in (0, 1], got \"0\""},
      {"compare " + small + " --max-memory-fraction 0.9x", "--max-memory-fraction: expected a number in (0, 1], got \"0.9x\""},
      {"autoparallel " + small + " --max-memory-fraction 2", "--max-memory-fraction: expected a number in (0, 1], got \"2\""},
      {"autoparallel " + small + " --memory-gib 12abc", "--memory-gib: expected a number in (0, 80], got \"12abc\" (the A100-SXM4-80GB's memory)"},
      {"autoparallel " + small + " --memory-gib ''", "--memory-gib: expected a number in (0, 80], got \"\""},
      {"autoparallel " + small + " --memory-gib 1000", "--memory-gib: expected a number in (0, 80], got \"1000\""},
      {"search " + small + " --train-tokens 1B --price-per-gpu-hour 2.5usd", "--price-per-gpu-hour: expected a number in (0, 1000000000], got \"2.5usd\""},
      {"evaluate " + small + " --tp 1 --pp 1 --dp 8 --host-us-per-op 5us", "--host-us-per-op: expected a number in [0, 1000000], got \"5us\""},
      {"evaluate " + small + " --tp 1 --pp 1 --dp 8 --offload-optimizer 1.5", "--offload-optimizer: expected a number in [0, 1], got \"1.5\""},
  };
  for (const auto& c : cases) {
    const auto r = run(c.args);
    EXPECT_EQ(r.exitCode, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1u) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.reason), std::string::npos) << c.args << "\n" << r.err;
  }
  const auto fine = run("autoparallel " + small + " --memory-gib 40 --max-memory-fraction 0.9 --json");
  EXPECT_EQ(fine.exitCode, 0) << fine.err;
}

// Planning a Megatron-Core job with Transformer Engine: its placeholder weight gradients and its
// in-place loss, as a user asks for them; the in-place loss alone is refused naming the field.
TEST(ColoPlanEvaluate, TransformerEngineMemoryFlagsChangeThePeak) {
  const std::string plan =
      "evaluate --model llama3-70b --cluster dgx-h100-x64 --tp 8 --pp 8 --sp --mbs 1 --gbs 64 --zero 1 --json";
  const auto plain = run(plan);
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  const auto te = run(plan + " --te-dummy-wgrads --fused-cross-entropy --cross-entropy-in-place");
  ASSERT_EQ(te.exitCode, 0) << te.err;
  const Json a = Json::parse(plain.out), b = Json::parse(te.out);
  // The first stage has no loss: only the placeholders, one layer's linear shards in bf16.
  const double oneLayer = ((8192.0 + 2 * 1024) / 8 * 8192 + 8192.0 * 8192 / 8 + 2 * 28672.0 / 8 * 8192 + 8192.0 * 28672 / 8) * 2;
  EXPECT_NEAR(b["stages"][0]["memory_bytes"]["gradients"].get<double>() - a["stages"][0]["memory_bytes"]["gradients"].get<double>(),
              oneLayer, 1.0);
  // The last stage also drops the fp32 logits and their buffers.
  EXPECT_LT(b["stages"][7]["memory_bytes"]["total"].get<double>(), a["stages"][7]["memory_bytes"]["total"].get<double>());
  const auto text = run("evaluate --model llama3-70b --cluster dgx-h100-x64 --tp 8 --pp 8 --sp --mbs 1 --gbs 64 --zero 1 "
                        "--te-dummy-wgrads --fused-cross-entropy --cross-entropy-in-place");
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("fused cross-entropy in place, TE placeholder wgrads"), std::string::npos) << text.out;
  const auto torch = run(plan + " --torch-cross-entropy");
  ASSERT_EQ(torch.exitCode, 0) << torch.err;
  EXPECT_GT(Json::parse(torch.out)["stages"][7]["memory_bytes"]["total"].get<double>(),
            a["stages"][7]["memory_bytes"]["total"].get<double>());
  const auto both = run(plan + " --torch-cross-entropy --fused-cross-entropy");
  EXPECT_EQ(both.exitCode, 2);
  EXPECT_NE(both.err.find("torch_cross_entropy"), std::string::npos) << both.err;
  EXPECT_EQ(lines(both.err), 1u) << both.err;
  const auto alone = run("evaluate --model llama3-70b --cluster dgx-h100-x64 --tp 8 --pp 8 --mbs 1 --gbs 64 --cross-entropy-in-place");
  EXPECT_EQ(alone.exitCode, 2);
  EXPECT_NE(alone.err.find("cross_entropy_in_place"), std::string::npos) << alone.err;
  EXPECT_EQ(lines(alone.err), 1u) << alone.err;
  // Megatron's native loss fusion: the last stage runs faster, holds the same memory, and is named.
  const auto native = run(plan + " --native-fused-cross-entropy");
  ASSERT_EQ(native.exitCode, 0) << native.err;
  const Json n = Json::parse(native.out);
  EXPECT_LT(n["step_time_s"].get<double>(), a["step_time_s"].get<double>());
  EXPECT_EQ(n["stages"][7]["memory_bytes"]["total"].get<double>(), a["stages"][7]["memory_bytes"]["total"].get<double>());
  const auto named = run("evaluate --model llama3-70b --cluster dgx-h100-x64 --tp 8 --pp 8 --sp --mbs 1 --gbs 64 --native-fused-cross-entropy");
  ASSERT_EQ(named.exitCode, 0) << named.err;
  EXPECT_NE(named.out.find("Megatron's fused cross-entropy"), std::string::npos) << named.out;
  const auto twoLosses = run(plan + " --native-fused-cross-entropy --torch-cross-entropy");
  EXPECT_EQ(twoLosses.exitCode, 2);
  EXPECT_NE(twoLosses.err.find("--native-fused-cross-entropy"), std::string::npos) << twoLosses.err;
  EXPECT_EQ(lines(twoLosses.err), 1u) << twoLosses.err;
}

TEST(ColoPlanEvaluate, UnfusedKernelsAreNamedCostedAndCheckedByName) {
  // --unfused-kernels: eager PyTorch's RMSNorm, rotary and SwiGLU cost more than the fused kernels, in
  // evaluate and in search; an unknown op name is one error line and exit 2.
  const std::string plan = "evaluate --model llama3-8b --cluster dgx-h100 --gbs 8 --zero 3 --json";
  auto step = [&](const std::string& extra) { return stepTimeOf(plan + extra); };
  const double fused = step("");
  const double norms = step(" --unfused-kernels rmsnorm");
  const double all = step(" --unfused-kernels all");
  EXPECT_GT(norms, fused);
  EXPECT_GT(all, norms);
  EXPECT_DOUBLE_EQ(step(" --unfused-kernels none"), fused);
  // The norm after the last block alone (torchtitan's compiled blocks): between fused and every norm.
  const double finalNorm = step(" --unfused-kernels final_rmsnorm");
  EXPECT_GT(finalNorm, fused);
  EXPECT_LT(finalNorm, norms);
  const auto finalText = run("evaluate --model llama3-8b --cluster dgx-h100 --gbs 8 --zero 3 --unfused-kernels final_rmsnorm");
  ASSERT_EQ(finalText.exitCode, 0) << finalText.err;
  EXPECT_NE(finalText.out.find("eager final_rmsnorm"), std::string::npos) << finalText.out;
  const auto text = run("evaluate --model llama3-8b --cluster dgx-h100 --gbs 8 --zero 3 --unfused-kernels rotary,gated_activation");
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("eager rotary/gated_activation"), std::string::npos) << text.out;
  const auto bad = run(plan + " --unfused-kernels rmsnorm,layernorm");
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--unfused-kernels"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("layernorm"), std::string::npos) << bad.err;
  EXPECT_EQ(lines(bad.err), 1u) << bad.err;
  const auto searchText = run("search --model llama3-8b --cluster dgx-h100 --gbs 64 --top 1 --unfused-kernels rmsnorm");
  ASSERT_EQ(searchText.exitCode, 0) << searchText.err;
  EXPECT_NE(searchText.out.find("bf16, eager rmsnorm, memory budget"), std::string::npos) << searchText.out;
  const auto search = run("search --model llama3-8b --cluster dgx-h100 --gbs 64 --top 1 --json --unfused-kernels all");
  ASSERT_EQ(search.exitCode, 0) << search.err;
  const auto fusedSearch = run("search --model llama3-8b --cluster dgx-h100 --gbs 64 --top 1 --json");
  ASSERT_EQ(fusedSearch.exitCode, 0) << fusedSearch.err;
  EXPECT_GT(Json::parse(search.out)["candidates"][0]["step_time_s"].get<double>(),
            Json::parse(fusedSearch.out)["candidates"][0]["step_time_s"].get<double>());
}

TEST(ColoPlanEvaluate, SavedPlanReproducesExactly) {
  test::ScratchDir dir;
  const std::string planFile = dir.path("plan.json");
  const auto first = run("evaluate --model llama2-70b --cluster dgx-h100-x64 --tp 8 --pp 4 --mbs 1 --gbs 512 --zero 1 "
                         "--recompute selective --sp --json --out " + planFile);
  ASSERT_EQ(first.exitCode, 0) << first.err;
  const auto again = run("evaluate --plan " + planFile + " --json");
  ASSERT_EQ(again.exitCode, 0) << again.err;
  EXPECT_EQ(Json::parse(first.out)["step_time_s"], Json::parse(again.out)["step_time_s"]);
  EXPECT_EQ(Json::parse(first.out)["peak_memory_bytes"], Json::parse(again.out)["peak_memory_bytes"]);
  const Json plan = test::loadJson(planFile);
  EXPECT_EQ(plan["predictions"]["step_time_s"], Json::parse(first.out)["step_time_s"]);
  EXPECT_FALSE(plan["provenance"]["model_hash"].get<std::string>().empty());
  const auto mixed = run("evaluate --plan " + planFile + " --tp 4");
  EXPECT_EQ(mixed.exitCode, 2);
  EXPECT_NE(mixed.err.find("cannot be combined with --plan"), std::string::npos);
}

TEST(ColoPlanEvaluate, SimulationDrawsTheTimeline) {
  const auto r = run("evaluate --model gpt3-175b --cluster dgx-a100-80gb-x128 --tp 8 --pp 8 --gbs 128 --simulate");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("timeline  simulated pipeline"), std::string::npos);
  EXPECT_NE(r.out.find("stage 7  |"), std::string::npos);
  const auto j = run("evaluate --model gpt3-175b --cluster dgx-a100-80gb-x128 --tp 8 --pp 8 --gbs 128 --simulate --json");
  ASSERT_EQ(j.exitCode, 0);
  const Json doc = Json::parse(j.out);
  EXPECT_NEAR(doc["simulated"]["pipeline_s"].get<double>(), doc["pipeline_time_s"].get<double>(),
              1e-6 * doc["pipeline_time_s"].get<double>());  // 1F1B: simulation and closed form agree
}

}  // namespace
}  // namespace colo

namespace colo {
namespace {

TEST(ColoPlanEvaluate, CostDatabaseIsReadOrRefusedClearly) {
  test::ScratchDir dir;
  const auto garbage = dir.write("bad.sqlite", "this is not a database, just text that is long enough to matter");
  const auto r = run("evaluate --model gpt2-small --cluster dgx-a100-80gb --gpus 1 --gbs 8 --costdb " + garbage);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find(garbage + ": "), std::string::npos) << r.err;
  const auto missing = run("evaluate --model gpt2-small --cluster dgx-a100-80gb --gpus 1 --gbs 8 --costdb " +
                           dir.path("none.sqlite"));
  EXPECT_EQ(missing.exitCode, 2);
  EXPECT_NE(missing.err.find("no such cost database"), std::string::npos) << missing.err;
}

TEST(ColoPlanEvaluate, APlanPredictedWithACostDatabaseSaysWhenItIsReCostedWithout) {
  // The shipped H200 database names its device, and a plan searched with it carries its hash: evaluate
  // --plan without it says the figures can differ (it said nothing, and printed other figures).
  test::ScratchDir dir;
  const std::string db = test::dataFile("costdb/h200-bf16.sqlite");
  const std::string file = dir.path("best.json");
  const auto found = run("search --model gpt2-small --cluster hgx-h200 --gpus 8 --gbs 64 --costdb " + db + " --out " + file);
  ASSERT_EQ(found.exitCode, 0) << found.err;
  EXPECT_NE(found.out.find("costdb    " + db + " (device \"cuda: NVIDIA H200\")"), std::string::npos) << found.out;
  const auto evaluated = run("evaluate --model gpt2-small --cluster hgx-h200 --gpus 1 --gbs 8 --costdb " + db);
  ASSERT_EQ(evaluated.exitCode, 0) << evaluated.err;
  EXPECT_NE(evaluated.out.find("(device \"cuda: NVIDIA H200\")"), std::string::npos) << evaluated.out;
  const auto without = run("evaluate --plan " + file);
  ASSERT_EQ(without.exitCode, 0) << without.err;
  EXPECT_NE(without.err.find("was predicted with a cost database (hash "), std::string::npos) << without.err;
  const auto with = run("evaluate --plan " + file + " --costdb " + db);
  ASSERT_EQ(with.exitCode, 0) << with.err;
  EXPECT_EQ(with.err.find("was predicted with a cost database"), std::string::npos) << with.err;
  // The shipped database by name, as models and clusters are ("no such cost database" before), and listed.
  const auto named = run("evaluate --plan " + file + " --costdb h200-bf16");
  ASSERT_EQ(named.exitCode, 0) << named.err;
  EXPECT_EQ(named.out, with.out);
  const auto listed = run("list costdbs");
  ASSERT_EQ(listed.exitCode, 0) << listed.err;
  EXPECT_NE(listed.out.find("h200-bf16             cuda: NVIDIA H200"), std::string::npos) << listed.out;
  const auto unknown = run("evaluate --plan " + file + " --costdb h200");
  EXPECT_EQ(unknown.exitCode, 2);
  EXPECT_NE(unknown.err.find("--costdb: \"h200\" is neither a file nor an entry of the costdb library"), std::string::npos) << unknown.err;
}

}  // namespace
}  // namespace colo

namespace colo {
namespace {

TEST(ColoPlanSearch, JsonContractAndTheSavedPlanReproducesExactly) {
  test::ScratchDir dir;
  const std::string planFile = dir.path("best.json");
  const auto r = run("search --model gpt3-175b --cluster dgx-a100-80gb-x128 --gbs 1536 --top 5 --json --out " + planFile);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const Json j = Json::parse(r.out);
  for (const char* key : {"step_time_s", "tokens_per_s", "model_tflops_per_gpu", "mfu", "peak_memory_bytes", "fits",
                          "bubble_fraction", "breakdown", "plan"}) {
    EXPECT_TRUE(j["best"].contains(key)) << key;
  }
  EXPECT_EQ(j["candidates"].size(), 5u);
  for (const char* key : {"generated", "pruned", "evaluated", "search_time_s"}) EXPECT_TRUE(j["stats"].contains(key)) << key;
  const auto again = run("evaluate --plan " + planFile + " --json");
  ASSERT_EQ(again.exitCode, 0) << again.err;
  EXPECT_EQ(Json::parse(again.out)["step_time_s"], j["best"]["step_time_s"]);
  EXPECT_EQ(Json::parse(again.out)["peak_memory_bytes"], j["best"]["peak_memory_bytes"]);
}

TEST(ColoPlanSearch, AFlexDispatcherIsCarriedByEveryCandidateAndIsNotForColoRun) {
  // Experts over two 8-GPU nodes: the flex dispatcher's hierarchical kernels send a token across once per
  // node, so the best plan with them is faster than with plain all-to-alls, and carries the dispatcher.
  const std::string search = "search --model qwen3-30b-a3b --cluster dgx-h100-x64 --gbs 256 --fix ep=16,tp=1 --top 1 --json --quiet";
  const auto plain = run(search);
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  const auto flex = run(search + " --moe-dispatcher hybridep");
  ASSERT_EQ(flex.exitCode, 0) << flex.err;
  const Json a = Json::parse(plain.out)["best"], b = Json::parse(flex.out)["best"];
  EXPECT_FALSE(a["plan"]["execution"].contains("moe_dispatcher"));
  EXPECT_EQ(b["plan"]["execution"]["moe_dispatcher"], "hybridep");
  EXPECT_LT(b["step_time_s"].get<double>(), a["step_time_s"].get<double>());
  const auto text = run("search --model qwen3-30b-a3b --cluster dgx-h100-x64 --gbs 256 --fix ep=16,tp=1 --top 1 --quiet --moe-dispatcher hybridep");
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("hybridep MoE dispatch"), std::string::npos) << text.out;
  // colo-run dispatches with plain all-to-alls: asking for both is one error naming them.
  const auto both = run(search + " --moe-dispatcher deepep --runnable");
  EXPECT_EQ(both.exitCode, 2);
  EXPECT_NE(both.err.find("--moe-dispatcher deepep"), std::string::npos) << both.err;
  const auto bad = run(search + " --moe-dispatcher nvshmem");
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("nvshmem"), std::string::npos) << bad.err;
  // A dense model has no tokens to dispatch.
  const auto dense = run("search --model llama3-8b --cluster dgx-h100 --gbs 64 --top 1 --quiet --moe-dispatcher deepep");
  EXPECT_EQ(dense.exitCode, 2);
  EXPECT_NE(dense.err.find("no mixture of experts"), std::string::npos) << dense.err;
}

TEST(ColoPlanSearch, TextShowsReasonsAndExplainShowsPruning) {
  const auto r = run("search --model llama2-70b --cluster dgx-h100-x64 --gbs 512 --top 4 --explain --quiet");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  for (const char* expected : {"best plans (fastest first)", "fastest that fits", "% step:", "pruned by rule",
                               "Pareto front", "candidates/s"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  }
}

TEST(ColoPlanSearch, InfeasibleExitsThreeWhenAskedWithTheBindingConstraint) {
  const auto r = run("search --model llama3-405b --cluster dgx-h100 --gbs 8 --no-offload --fail-if-infeasible --quiet");
  EXPECT_EQ(r.exitCode, 3) << r.err;
  EXPECT_NE(r.out.find("NO FEASIBLE PLAN: no plan fits: the model states alone need at least"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("allow optimizer offload"), std::string::npos) << r.out;
  const auto lenient = run("search --model llama3-405b --cluster dgx-h100 --gbs 8 --no-offload --quiet");
  EXPECT_EQ(lenient.exitCode, 0);
  const auto badFix = run("search --model gpt3-175b --cluster dgx-a100-80gb-x128 --gbs 1536 --fix tp=8,pipe=2");
  EXPECT_EQ(badFix.exitCode, 2);
  EXPECT_NE(badFix.err.find("--fix: unknown setting \"pipe\""), std::string::npos) << badFix.err;
  // Fixed degrees whose product overflows 64 bits (it crashed: a modulo by zero) are bad input.
  const auto huge = run("search --model gpt3-1.3b --cluster dgx-h100-x2048 --gpus 65536 --gbs 65536 --quiet "
                        "--fix tp=65536,pp=65536,dp=65536,cp=65536");
  EXPECT_EQ(huge.exitCode, 2) << huge.err;
  EXPECT_NE(huge.err.find("is more than the cluster's 65536 GPUs"), std::string::npos) << huge.err;
  // Across sizes, one the fixed degrees do not make is left out with a note; the others are ranked.
  const auto sizes = run("search --model llama3-8b --cluster dgx-h100-x64 --gpus 64,96 --gbs 192 --fix tp=8,dp=8 --quiet --top 2");
  EXPECT_EQ(sizes.exitCode, 0) << sizes.err;
  EXPECT_NE(sizes.err.find("--gpus 96 left out: --fix: tp=8*dp=8 = 64 does not divide the cluster's 96 GPUs"), std::string::npos)
      << sizes.err;
  EXPECT_NE(sizes.out.find("best plans"), std::string::npos) << sizes.out;
}

}  // namespace
}  // namespace colo

namespace colo {
namespace {

TEST(ColoPlanSearch, TrainingBudgetRanksClusterSizesByTimeOrCost) {
  // Llama 3 70B for 1.5T tokens on 128, 256 and 512 H100s: by time the largest cluster wins; by cost the
  // cheapest GPU-hours do, unless a deadline rules them out.
  const std::string common = "search --model llama3-70b --cluster dgx-h100-x64 --gpus 128,256,512 --gbs 512 "
                             "--train-tokens 1.5T --price-per-gpu-hour 2.5 --top 3 --json";
  auto best = [](const std::string& out) {
    const Json j = Json::parse(out);
    return std::pair{j["ranked"][0]["gpus"].get<int>(), j["ranked"][0]["training"]};
  };
  const auto time = run(common);
  ASSERT_EQ(time.exitCode, 0) << time.err;
  EXPECT_EQ(Json::parse(time.out)["searches"].size(), 3u);
  EXPECT_EQ(best(time.out).first, 512);
  const auto cost = run(common + " --objective cost");
  ASSERT_EQ(cost.exitCode, 0) << cost.err;
  const auto [cheapGpus, cheap] = best(cost.out);
  EXPECT_LT(cheapGpus, 512);
  EXPECT_LT(cheap["gpu_hours"].get<double>(), best(time.out).second["gpu_hours"].get<double>());
  EXPECT_NEAR(cheap["dollars"].get<double>(), 2.5 * cheap["gpu_hours"].get<double>(), 1e-6 * cheap["dollars"].get<double>());
  const auto deadline = run(common + " --objective cost --deadline-days 40");
  ASSERT_EQ(deadline.exitCode, 0) << deadline.err;
  EXPECT_EQ(best(deadline.out).first, 512);  // the only size that trains 1.5T tokens in 40 days
  EXPECT_TRUE(best(deadline.out).second["meets_deadline"].get<bool>());
  // The table shows the budget's columns and the GPU count.
  const auto text = run("search --model llama3-70b --cluster dgx-h100-x64 --gpus 256,512 --gbs 512 --train-tokens 1.5T "
                        "--price-per-gpu-hour 2 --objective cost --quiet");
  ASSERT_EQ(text.exitCode, 0) << text.err;
  for (const char* part : {"gpus", "days", "GPU-h", "cost", "cheapest first", "training  1.5T tokens at $2.00/GPU-hour"}) {
    EXPECT_NE(text.out.find(part), std::string::npos) << part << "\n" << text.out;
  }
  // evaluate and compare print the same figures; a price without tokens is refused.
  const auto ev = run("evaluate --model llama3-70b --cluster dgx-h100-x64 --tp 8 --pp 4 --gbs 512 --train-tokens 1.5T --json");
  ASSERT_EQ(ev.exitCode, 0) << ev.err;
  EXPECT_NEAR(Json::parse(ev.out)["training"]["steps"].get<double>(), std::ceil(1.5e12 / (512.0 * 8192)), 0.5);
  const auto cmp = run("compare --model llama3-70b --cluster dgx-h100-x64 --gbs 512 --train-tokens 15T --price-per-gpu-hour 2");
  ASSERT_EQ(cmp.exitCode, 0) << cmp.err;
  EXPECT_NE(cmp.out.find("days to train"), std::string::npos) << cmp.out;
  const auto bad = run("evaluate --model llama3-70b --cluster dgx-h100-x64 --tp 8 --gbs 512 --price-per-gpu-hour 2");
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--price-per-gpu-hour needs --train-tokens"), std::string::npos) << bad.err;
  EXPECT_EQ(run("search --model llama3-70b --cluster dgx-h100-x64 --gpus 256,x --gbs 512").exitCode, 2);
  EXPECT_EQ(run("search --model llama3-70b --cluster dgx-h100-x64 --gbs 512 --objective money").exitCode, 2);
}

TEST(ColoPlanTools, ImportTheJobYouRunThenSearchFromIt) {
  // Export a plan as Megatron-LM arguments, import them as a user's launch would be, then ask search
  // what would be faster; and a torchtitan TOML.
  test::ScratchDir dir;
  const std::string plan = dir.path("plan.json"), args = dir.path("args.txt"), imported = dir.path("imported.json");
  ASSERT_EQ(run("evaluate --model llama3-70b --cluster dgx-h100-x64 --gpus 64 --tp 8 --pp 2 --sp --gbs 128 --zero 1 "
                "--recompute selective --out " + plan).exitCode, 0);
  ASSERT_EQ(run("export --plan " + plan + " --format megatron --out " + args).exitCode, 0);
  const auto im = run("import --format megatron --launch " + args + " --cluster dgx-h100-x64 --gpus 64 --model llama3-70b --out " + imported);
  ASSERT_EQ(im.exitCode, 0) << im.err;
  EXPECT_NE(im.out.find("tp 8 pp 2 dp 4 +sp"), std::string::npos) << im.out;
  const Json a = test::loadJson(plan), b = test::loadJson(imported);
  EXPECT_EQ(a["parallel"], b["parallel"]);
  EXPECT_EQ(a["stages"], b["stages"]);
  // The imported file carries its predictions and the command that made it, as search --out writes them.
  EXPECT_GT(b["predictions"]["step_time_s"].get<double>(), 0.0);
  EXPECT_EQ(b["provenance"]["command"], "colo-plan import --format megatron --launch " + args +
                                            " --cluster dgx-h100-x64 --gpus 64 --model llama3-70b --out " + imported);
  EXPECT_FALSE(b["provenance"]["model_hash"].get<std::string>().empty());
  EXPECT_EQ(run("evaluate --plan " + plan + " --json").out.substr(0, 60), run("evaluate --plan " + imported + " --json").out.substr(0, 60));
  const auto better = run("search --from-plan " + imported + " --quiet --top 3");
  ASSERT_EQ(better.exitCode, 0) << better.err;
  EXPECT_NE(better.out.find("your plan llama3-70b"), std::string::npos) << better.out;
  EXPECT_NE(better.out.find("x as fast"), std::string::npos) << better.out;
  const std::string job = dir.path("job.json"), faster = dir.path("faster.json");
  const auto toml = run("import --format torchtitan --launch " + test::dataFile("examples/torchtitan-llama3-8b.toml") +
                        " --cluster dgx-h100 --out " + job);
  ASSERT_EQ(toml.exitCode, 0) << toml.err;
  EXPECT_EQ(test::loadJson(job)["zero_stage"], 3);
  // The job's execution (FSDP's fp32 parameters, autograd accumulation) carries over to the candidates.
  ASSERT_EQ(run("search --from-plan " + job + " --quiet --top 1 --out " + faster).exitCode, 0);
  EXPECT_EQ(test::loadJson(faster)["execution"].value("fp32_params", false), true);
  EXPECT_EQ(test::loadJson(faster)["execution"]["grad_accumulation"], "autograd");
  // A fused loss asked for is every candidate's.
  const std::string fusedLoss = dir.path("fused.json");
  ASSERT_EQ(run("search --from-plan " + job + " --fused-cross-entropy --fix tp=1,pp=1,mbs=1 --quiet --top 1 --out " + fusedLoss).exitCode, 0);
  EXPECT_EQ(test::loadJson(fusedLoss)["execution"].value("fused_cross_entropy", false), true);
  // A job's bf16 gradient buffer carries over in bf16 and is dropped at a precision without one: every
  // plan search writes evaluates.
  const std::string bf16Grads = dir.path("bf16grads.json"), inBf16 = dir.path("inbf16.json"), inFp16 = dir.path("infp16.json");
  ASSERT_EQ(run("evaluate --model llama3-8b --cluster dgx-h100 --gbs 64 --zero 1 --grad-reduce-in-bf16 --out " + bf16Grads).exitCode, 0);
  EXPECT_EQ(test::loadJson(bf16Grads)["execution"].value("grad_reduce_in_bf16", false), true);
  ASSERT_EQ(run("search --from-plan " + bf16Grads + " --quiet --top 1 --out " + inBf16).exitCode, 0);
  EXPECT_EQ(test::loadJson(inBf16)["execution"].value("grad_reduce_in_bf16", false), true);
  ASSERT_EQ(run("search --from-plan " + bf16Grads + " --precision fp16 --quiet --top 1 --out " + inFp16).exitCode, 0);
  EXPECT_EQ(test::loadJson(inFp16)["execution"].value("grad_reduce_in_bf16", false), false);
  EXPECT_EQ(run("evaluate --plan " + inFp16).exitCode, 0);
  // What is missing or wrong is named.
  const auto noCluster = run("import --format megatron --launch " + args);
  EXPECT_EQ(noCluster.exitCode, 2);
  EXPECT_NE(noCluster.err.find("--cluster"), std::string::npos);
  const auto wrongSize = run("import --format megatron --launch " + args + " --cluster dgx-h100-x64 --gpus 24 --model llama3-70b");
  EXPECT_EQ(wrongSize.exitCode, 2);
  EXPECT_NE(wrongSize.err.find("not a multiple of tp x pp x cp"), std::string::npos) << wrongSize.err;
}

TEST(ColoPlanTools, TheAttentionKernelsOfAPlanCarryOverToItsSearchUnlessAskedOtherwise) {
  // FlashAttention-2's kernels on an H100 cost more than the GPU's own fused kernels; a search from such a
  // plan keeps them, and --attention replaces them. Every plan written is valid.
  test::ScratchDir dir;
  const std::string fa2 = dir.path("fa2.json"), native = dir.path("native.json");
  const std::string base = "evaluate --model llama3-8b --cluster dgx-h100 --gpus 8 --zero 3 --mbs 2 --gbs 16 --seq-len 8192 --recompute op";
  ASSERT_EQ(run(base + " --attention flash2 --out " + fa2).exitCode, 0);
  ASSERT_EQ(run(base + " --out " + native).exitCode, 0);
  EXPECT_EQ(test::loadJson(fa2)["execution"]["attention"], "flash2");
  EXPECT_GT(test::loadJson(fa2)["predictions"]["step_time_s"].get<double>(),
            test::loadJson(native)["predictions"]["step_time_s"].get<double>());
  const std::string kept = dir.path("kept.json"), flash = dir.path("flash.json"), unfused = dir.path("unfused.json");
  ASSERT_EQ(run("search --from-plan " + fa2 + " --quiet --top 1 --out " + kept).exitCode, 0);
  EXPECT_EQ(test::loadJson(kept)["execution"]["attention"], "flash2");
  ASSERT_EQ(run("search --from-plan " + fa2 + " --attention flash --quiet --top 1 --out " + flash).exitCode, 0);
  EXPECT_EQ(test::loadJson(flash)["execution"]["attention"], "flash");
  ASSERT_EQ(run("search --from-plan " + fa2 + " --attention unfused --quiet --top 1 --out " + unfused).exitCode, 0);
  EXPECT_EQ(test::loadJson(unfused)["execution"]["attention"], "unfused");
  for (const auto& f : {kept, flash, unfused}) EXPECT_EQ(run("evaluate --plan " + f).exitCode, 0) << f;
  const auto bad = run(base + " --attention cudnn");
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("expected flash, flash2 or unfused"), std::string::npos) << bad.err;
}

TEST(ColoPlanTools, ImportADeepSpeedLaunchScriptAsItIs) {
  // The example launch: shell variables, the deepspeed launcher (2 nodes x 8 GPUs), pretrain_gpt.py's
  // arguments and --deepspeed_config naming the config beside it. Nothing else is given.
  test::ScratchDir dir;
  const std::string launch = test::dataFile("examples/megatron-deepspeed-launch.sh"), out = dir.path("ds.json");
  const auto im = run("import --format deepspeed --launch " + launch + " --cluster dgx-a100-80gb-x16 --out " + out);
  ASSERT_EQ(im.exitCode, 0) << im.err;
  const Json p = test::loadJson(out);
  EXPECT_EQ(p["parallel"]["tp"], 2);
  EXPECT_EQ(p["parallel"]["pp"], 2);
  EXPECT_EQ(p["parallel"]["dp"], 4);  // 16 GPUs from the launcher
  EXPECT_EQ(p["batch"]["global_batch_size"], 64);
  EXPECT_EQ(p["zero_stage"], 1);
  EXPECT_EQ(p["batch"]["seq_len"], 2048);  // ${SEQ_LEN:-2048}
  // --gpus wins over the launcher's count (scripts fix it for one node or read it from the scheduler),
  // with a note naming both figures.
  const std::string resized = dir.path("resized.json");
  // (As Megatron-LM arguments: the DeepSpeed config's batch arithmetic holds for 16 GPUs only.)
  const auto other = run("import --format megatron --launch " + launch + " --cluster dgx-a100-80gb-x16 --gpus 8 --out " + resized);
  ASSERT_EQ(other.exitCode, 0) << other.err;
  EXPECT_NE(other.err.find("note: --gpus 8 replaces the launch's 2 nodes x 8 GPUs per node = 16 GPUs"), std::string::npos) << other.err;
  EXPECT_EQ(test::loadJson(resized)["parallel"]["dp"], 2);  // tp 2 x pp 2 on 8 GPUs
  // A launch larger than the cluster can grow to, or than colo plans for, is named with the launcher's
  // own count: the file, the nodes and GPUs per node, and why the cluster cannot hold them.
  const std::string huge = dir.path("huge.sh"), big = dir.path("big.sh");
  {
    std::ofstream(huge) << "deepspeed --num_nodes 1000000 --num_gpus 8 pretrain_gpt.py --tensor-model-parallel-size 8\n";
    std::ofstream(big) << "torchrun --nnodes 2048 --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 8\n";
  }
  const auto tooMany = run("import --format megatron --launch " + huge + " --cluster dgx-h100-x2048");
  EXPECT_EQ(tooMany.exitCode, 2);
  EXPECT_NE(tooMany.err.find(huge + ": the launch asks for 8000000 GPUs (1000000 nodes x 8 GPUs per node): 8000000 is more than the"),
            std::string::npos)
      << tooMany.err;
  const auto oneNode = run("import --format megatron --launch " + big + " --cluster dgx-h100");
  EXPECT_EQ(oneNode.exitCode, 2);
  EXPECT_NE(oneNode.err.find(big + ": the launch asks for 16384 GPUs (2048 nodes x 8 GPUs per node): dgx-h100 has no network level"),
            std::string::npos)
      << oneNode.err;
  // A Megatron-Bridge config YAML, then what would be faster.
  const std::string bridge = dir.path("bridge.json");
  const auto mb = run("import --format megatron-bridge --launch " + test::dataFile("examples/megatron-bridge-llama3-8b.yaml") +
                      " --cluster dgx-h100-x64 --gpus 16 --out " + bridge);
  ASSERT_EQ(mb.exitCode, 0) << mb.err;
  EXPECT_NE(mb.out.find("tp 1 pp 1 dp 8 cp 2"), std::string::npos) << mb.out;
  EXPECT_EQ(run("search --from-plan " + bridge + " --quiet --top 1").exitCode, 0);
  EXPECT_EQ(mb.err.find("states no mixed_precision"), std::string::npos) << mb.err;
  // An override file that states no precision is read as Megatron-LM's fp32 default, and says so.
  const std::string overrides = dir.path("override.yaml");
  std::ofstream(overrides) << "model:\n  tensor_model_parallel_size: 2\n  num_layers: 32\n  hidden_size: 4096\n"
                              "  ffn_hidden_size: 14336\n  num_attention_heads: 32\n  num_query_groups: 8\n"
                              "  seq_length: 8192\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n";
  const auto plain = run("import --format megatron-bridge --launch " + overrides + " --cluster dgx-h100-x64 --gpus 16 --model llama3-8b");
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  EXPECT_NE(plain.err.find("states no mixed_precision, so the plan trains in fp32"), std::string::npos) << plain.err;
}

TEST(ColoPlanTools, CompareCheckAndExportEndToEnd) {
  const auto cmp = run("compare --model gpt3-175b --cluster dgx-a100-80gb-x128 --gbs 1536 --json");
  ASSERT_EQ(cmp.exitCode, 0) << cmp.err;
  const Json j = Json::parse(cmp.out);
  EXPECT_GE(j["speedup"].get<double>(), 1.0);  // never worse than the baseline
  EXPECT_EQ(j["baseline"]["configuration"]["tp"], 8);
  EXPECT_TRUE(j["differences"].is_string());

  test::ScratchDir dir;
  const std::string plan = dir.path("plan.json");
  ASSERT_EQ(run("search --model gpt3-175b --cluster dgx-a100-80gb-x128 --gbs 1536 --quiet --out " + plan).exitCode, 0);
  const auto pass = run("check --plan " + plan + " --min-mfu 0.3 --max-memory-fraction 0.95");
  EXPECT_EQ(pass.exitCode, 0) << pass.err;
  EXPECT_NE(pass.out.find("check passed"), std::string::npos);
  const auto regress = run("check --plan " + plan + " --min-mfu 0.99");
  EXPECT_EQ(regress.exitCode, 4);
  EXPECT_NE(regress.err.find("check failed: MFU"), std::string::npos) << regress.err;

  for (const char* format : {"megatron", "colossalai", "torchrun", "slurm"}) {
    const auto e = run("export --plan " + plan + " --format " + format);
    EXPECT_EQ(e.exitCode, 0) << format << ": " << e.err;
    EXPECT_FALSE(e.out.empty()) << format;
  }
  // The best plan interleaves its pipeline, which DeepSpeed's engine cannot: refused, naming the field.
  const auto interleaved = run("export --plan " + plan + " --format deepspeed");
  EXPECT_EQ(interleaved.exitCode, 2);
  EXPECT_NE(interleaved.err.find("parallel.virtual_stages"), std::string::npos) << interleaved.err;
  const std::string flat = dir.path("flat.json");
  ASSERT_EQ(run("search --model gpt3-175b --cluster dgx-a100-80gb-x128 --gbs 1536 --fix vpp=1,zero=1 --quiet --out " + flat).exitCode, 0);
  const auto ds = run("export --plan " + flat + " --format deepspeed");
  EXPECT_EQ(ds.exitCode, 0) << ds.err;
  EXPECT_FALSE(Json::parse(ds.out).contains("pipeline"));  // stages come from PipelineModule, not the config
  const auto bad = run("export --plan " + plan + " --format fairscale");
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("unknown export format \"fairscale\""), std::string::npos);
}

}  // namespace
}  // namespace colo

namespace colo {
namespace {

// The ranked table: no two rows read the same (settings no column shows are named in "why"), and a
// tie at the printed precision says what differs instead of "+0.0% step: compute +0.000 s".
TEST(ColoPlanCli, SearchRowsNeverReadAlike) {
  const auto r = run("search --model gpt3-175b --cluster dgx-a100-80gb-x128 --gbs 1536 --quiet");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  std::istringstream in(r.out);
  std::set<std::string> rows;
  std::string line;
  int ranked = 0;
  while (std::getline(in, line)) {
    static const std::regex rankedRow(R"(^\s+\d+\s+\d+\s+\d+\s+\d+\s)");  // "#  tp  pp  dp"
    if (!std::regex_search(line, rankedRow)) continue;
    const auto afterRank = line.find(' ', line.find_first_not_of(' '));
    ++ranked;
    EXPECT_TRUE(rows.insert(line.substr(afterRank)).second) << "two rows read alike:\n" << r.out;
    EXPECT_EQ(line.find("+0.0% step"), std::string::npos) << line;
  }
  EXPECT_EQ(ranked, 10) << r.out;
  EXPECT_NE(r.out.find("unlike #"), std::string::npos) << r.out;  // layouts that differ only in rank order
}

// A GPU without bf16 (V100) gets fp16 by default, and says so; bf16 asked for by name is refused.
TEST(ColoPlanCli, SearchOnV100DefaultsToFp16) {
  const auto r = run("search --model gpt3-1.3b --cluster dgx1-v100-x4 --gbs 64 --quiet");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("fp16 (this GPU has no bf16)"), std::string::npos) << r.out;
  const auto asked = run("search --model gpt3-1.3b --cluster dgx1-v100-x4 --gbs 64 --precision bf16 --quiet");
  EXPECT_EQ(asked.exitCode, 2) << asked.out;
  EXPECT_NE(asked.err.find("no bf16 peak"), std::string::npos) << asked.err;
}

// Famous configurations: compare prints the published runs of the model on that GPU, what was measured
// and what colo predicts for that very run, so its MFU can be judged.
TEST(ColoPlanCli, ComparePrintsThePublishedRunsOfTheModel) {
  const auto r = run("compare --model gpt3-175b --cluster dgx-a100-80gb-x128 --gbs 1536");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("korthikanti2022_table5_175B_present"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("measured 13.750 s, 51.4% MFU"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("this plan differs in: GPUs 64 -> 1024"), std::string::npos) << r.out;
  // No published run of this model on H100 in the shipped rows: nothing is printed for it.
  const auto h100 = run("compare --model gpt3-175b --cluster dgx-h100-x64 --gbs 512");
  ASSERT_EQ(h100.exitCode, 0) << h100.err;
  EXPECT_EQ(h100.out.find("published runs"), std::string::npos) << h100.out;
}

TEST(ColoPlanCli, ScaledClusterIsNamedOnce) {
  const auto r = run("evaluate --model gpt2-small --cluster dgx-a100-80gb --gpus 1 --mbs 4 --gbs 8");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("dgx-a100-80gb (scaled to 1 GPU):"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("GPUs) ("), std::string::npos) << r.out;
}

TEST(ColoPlanAutoParallel, PrintsThePerOperatorPlanBesideMegatrons) {
  const auto r = run("autoparallel --model gpt3-175b --cluster dgx-a100-80gb-x16 --gbs 1536 --mesh 8 --pp 16 "
                     "--memory-gib 36 --no-offload --solver-only");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  for (const char* expected : {"joint (per operator)", "megatron (column/row split", "16 stages x mesh 8",
                               "joint solve vs Megatron's split:", "layers 0-95 (x96, solved once):", "attn.qkv",
                               "[R, R, S0]", "reduce-scatter(0)", "all-gather(0)", "tp=8 dp=1 pp=16 sp"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  }
  const auto j = run("autoparallel --model tiny-llama --cluster dgx-a100-80gb --gbs 64 --json");
  ASSERT_EQ(j.exitCode, 0) << j.err;
  const Json doc = Json::parse(j.out);
  EXPECT_TRUE(doc["joint"]["fits"].get<bool>());
  EXPECT_LE(doc["joint"]["step_time_s"].get<double>(), doc["megatron"]["step_time_s"].get<double>());
  EXPECT_FALSE(doc["joint"]["blocks"].empty());
  EXPECT_TRUE(j.err.empty()) << j.err;
}

// The operator-level search counts what it leaves out, by rule, and prints it as the degree-level search
// prints its own (one SearchStats, one printer); the JSON carries the same counts.
TEST(ColoPlanAutoParallel, ExplainListsPrunedLayoutsByRuleAsSearchDoes) {
  const std::string job = "autoparallel --model gpt3-175b --cluster dgx-a100-80gb-x16 --gbs 1536";
  const auto r = run(job + " --explain");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("pruned by rule\n"), std::string::npos) << r.out;
  // 16 nodes: copies of meshes are searched from 32 nodes on, so that rule prunes some layouts.
  EXPECT_NE(r.out.find("copies of a mesh other than 2 to 8 whole nodes, or below 32 nodes (--replicas asks)"), std::string::npos) << r.out;
  const auto j = run(job + " --json");
  ASSERT_EQ(j.exitCode, 0) << j.err;
  const Json st = Json::parse(j.out)["stats"];
  std::int64_t byRule = 0;
  for (const auto& [rule, count] : st["pruned_by_rule"].items()) byRule += count.get<std::int64_t>();
  EXPECT_EQ(st["pruned"].get<std::int64_t>(), byRule);
  // Every layout generated is pruned by a rule or solved (the search was not cancelled).
  EXPECT_EQ(st["generated"].get<std::int64_t>(), st["pruned"].get<std::int64_t>() + st["costed"].get<std::int64_t>());
  EXPECT_GT(st["costed"].get<std::int64_t>(), 0);
  // Layouts left because they cannot beat the best plan are solved without a plan that fits.
  EXPECT_GT(st["feasible"].get<std::int64_t>(), 0);
  EXPECT_LT(st["feasible"].get<std::int64_t>(), st["costed"].get<std::int64_t>());
  const auto plain = run(job);
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  EXPECT_EQ(plain.out.find("pruned by rule\n"), std::string::npos);
  // Megatron's split is slower here, and says why as `search` ranks its plans ("+9.0% step: compute +7.980 s").
  const std::string why = Json::parse(j.out)["megatron_slower_by"].get<std::string>();
  EXPECT_EQ(why.rfind("+", 0), 0u) << why;
  EXPECT_NE(why.find("% step: "), std::string::npos) << why;
  EXPECT_NE(plain.out.find("  Megatron's split: " + why + "\n"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find(std::to_string(st["generated"].get<std::int64_t>()) + " layouts"), std::string::npos) << plain.out;
}

TEST(ColoPlanAutoParallel, InterleavesStagesUnlessTold) {
  // 16 stages with 32 micro-batches: interleaving shrinks the bubble, so the solve takes chunks; --vpp 1
  // keeps plain 1F1B; a chunk count the layers cannot take is named (exit 2).
  const std::string base = "autoparallel --model gpt3-175b --cluster dgx-a100-80gb-x16 --gbs 64 --mesh 8 --pp 16 --no-offload --json";
  const auto chunked = run(base);
  ASSERT_EQ(chunked.exitCode, 0) << chunked.err;
  const Json a = Json::parse(chunked.out);
  EXPECT_GT(a["joint"]["virtual_stages"].get<int>(), 1);
  const auto plain = run(base + " --vpp 1");
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  const Json b = Json::parse(plain.out);
  EXPECT_EQ(b["joint"]["virtual_stages"], 1);
  EXPECT_LT(a["joint"]["step_time_s"].get<double>(), b["joint"]["step_time_s"].get<double>());
  const auto text = run("autoparallel --model gpt3-175b --cluster dgx-a100-80gb-x16 --gbs 64 --mesh 8 --pp 16 --no-offload --vpp 2");
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("16 stages x mesh 8, 2 chunks each (interleaved)"), std::string::npos) << text.out;
  const auto bad = run(base + " --vpp 5");
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--vpp 5: chunks per stage must divide the model's 96 layers"), std::string::npos) << bad.err;
  // A plan that recomputes nothing says so.
  const auto none = run("autoparallel --model tiny-llama --cluster dgx-a100-80gb --gbs 64");
  ASSERT_EQ(none.exitCode, 0) << none.err;
  EXPECT_NE(none.out.find("per operator (nothing recomputed)"), std::string::npos) << none.out;
}

TEST(ColoPlanAutoParallel, NeverRecommendsASlowerPlanThanTheDegreeLevelSearch) {
  // Llama 3 8B on 64 H100s, one sample per GPU: the degree-level search's best uses ZeRO-2, which the
  // operator-level space has no place for, and is faster; the report says so and --out writes that plan.
  const std::string file = (std::filesystem::temp_directory_path() / "colo-autoparallel-degree.json").string();
  const std::string job = "autoparallel --model llama3-8b --cluster dgx-h100-x64 --gpus 64 --gbs 64";
  const auto r = run(job + " --out " + file);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  for (const char* expected : {"degree-level search (colo-plan search):", "the degree-level plan is faster: it uses ZeRO-2",
                               "the degree-level search's plan (faster than the joint solve)"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  }
  const Json written = test::loadJson(file);
  EXPECT_EQ(written["zero_stage"], 2);
  EXPECT_FALSE(written.contains("operator_plan"));
  // With its predictions and the time it was made, as search --out writes them (they were empty).
  EXPECT_TRUE(written["predictions"]["step_time_s"].is_number()) << written["predictions"].dump();
  EXPECT_FALSE(written["provenance"]["created_at"].get<std::string>().empty());
  const auto e = run("evaluate --plan " + file + " --json");
  ASSERT_EQ(e.exitCode, 0) << e.err;
  const auto j = run(job + " --json");
  ASSERT_EQ(j.exitCode, 0) << j.err;
  const Json doc = Json::parse(j.out);
  EXPECT_TRUE(doc["degree_search"]["faster_than_joint"].get<bool>());
  EXPECT_LT(doc["degree_search"]["step_time_s"].get<double>(), doc["joint"]["step_time_s"].get<double>());
  EXPECT_NEAR(Json::parse(e.out)["step_time_s"].get<double>(), doc["degree_search"]["step_time_s"].get<double>(), 1e-9);
  std::filesystem::remove(file);
}

TEST(ColoPlanAutoParallel, TheDegreeLevelSearchHasTheSameMemoryBudget) {
  // --memory-gib 60 on 8 H100s: the degree-level search ran at the default 95% of the GPU and its best
  // (66.5 GiB) was then dropped as over 60 GiB, so the report said "no plan fits this budget" where a
  // 7.1 s plan fits. It now searches under the same budget.
  const auto r = run("autoparallel --model llama3-8b --cluster dgx-h100 --gpus 8 --gbs 64 --memory-gib 60 --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const Json doc = Json::parse(r.out);
  ASSERT_TRUE(doc.contains("degree_search") && doc.at("degree_search").at("step_time_s").is_number()) << r.out;
  const std::string file = (std::filesystem::temp_directory_path() / "colo-autoparallel-budget.json").string();
  {
    std::ofstream f(file);
    f << doc["degree_search"]["plan"].dump();
  }
  const auto e = run("evaluate --plan " + file + " --json");
  ASSERT_EQ(e.exitCode, 0) << e.err;
  EXPECT_LE(Json::parse(e.out)["peak_memory_bytes"].get<double>(), 60.0 * 1024 * 1024 * 1024);
  std::filesystem::remove(file);
}

TEST(ColoPlanAutoParallel, OutWritesAPlanThatEvaluateReproduces) {
  const std::string file = (std::filesystem::temp_directory_path() / "colo-autoparallel-plan.json").string();
  const auto r = run("autoparallel --model llama3-8b --cluster dgx-h100 --gbs 64 --json --out " + file);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const Json solved = Json::parse(r.out);
  // Here the joint plan is the faster one, so --out holds it.
  ASSERT_TRUE(solved.contains("degree_search")) << r.out;
  ASSERT_FALSE(solved["degree_search"]["faster_than_joint"].get<bool>());
  const auto e = run("evaluate --plan " + file + " --json");
  ASSERT_EQ(e.exitCode, 0) << e.err;
  const Json again = Json::parse(e.out);
  EXPECT_NEAR(again["step_time_s"].get<double>(), solved["joint"]["step_time_s"].get<double>(), 1e-9);
  EXPECT_EQ(again["blocks"], solved["joint"]["blocks"]);
  const auto text = run("evaluate --plan " + file);
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("per-operator plan"), std::string::npos) << text.out;
  // check judges the same step as evaluate --plan, not the degree fields' form: a bound 1% above the
  // per-operator step passes, 1% below it fails.
  const double step = again["step_time_s"].get<double>();
  const auto pass = run("check --plan " + file + " --max-step-time " + std::to_string(step * 1.01));
  EXPECT_EQ(pass.exitCode, 0) << pass.out << pass.err;
  EXPECT_NE(pass.out.find(solved["joint"]["runnable"].get<bool>() ? "per-operator plan, step" : "per-operator plan (simulation-only), step"),
            std::string::npos)
      << pass.out;
  const auto miss = run("check --plan " + file + " --max-step-time " + std::to_string(step * 0.99));
  EXPECT_EQ(miss.exitCode, 4) << miss.out << miss.err;
  // search --from-plan judges it by the same figures (it printed the degree fields' 7.133 s and 82.86
  // GiB, "DOES NOT FIT", as the user's plan).
  const auto from = run("search --from-plan " + file);
  ASSERT_EQ(from.exitCode, 0) << from.err;
  char mine[64];
  std::snprintf(mine, sizeof mine, "(costed per operator, as evaluate --plan does): %.3f s a step", step);
  EXPECT_NE(from.out.find(mine), std::string::npos) << mine << "\n" << from.out;
  // export writes the degree fields and says so.
  const auto exported = run("export --plan " + file + " --format megatron");
  EXPECT_EQ(exported.exitCode, 0) << exported.err;
  EXPECT_NE(exported.err.find("is a per-operator plan"), std::string::npos) << exported.err;
  // This plan is simulation-only: a torchrun or SLURM launch would run colo-run on it, which refuses it on
  // every rank, so none is written (one was, exit 0).
  ASSERT_FALSE(solved["joint"]["runnable"].get<bool>());
  for (const char* format : {"torchrun", "slurm"}) {
    const auto launch = run("export --plan " + file + " --format " + format);
    EXPECT_EQ(launch.exitCode, 2) << format;
    EXPECT_TRUE(launch.out.empty()) << launch.out;
    EXPECT_NE(launch.err.find("simulation-only: "), std::string::npos) << launch.err;
    EXPECT_NE(launch.err.find("colo-run cannot run it"), std::string::npos) << launch.err;
  }
  std::filesystem::remove(file);
}

TEST(ColoPlanAutoParallel, ReplicasCopyTheMeshAndTheFileKeepsThem) {
  // 64 H100s as four copies of a 2x8 mesh: the layout says so, the JSON and the plan file carry the count,
  // and evaluate --plan gives the same step. A count that does not make the cluster is named (exit 2).
  const std::string file = (std::filesystem::temp_directory_path() / "colo-autoparallel-replicas.json").string();
  const std::string job = "autoparallel --model llama3-8b --cluster dgx-h100-x64 --gpus 64 --gbs 64 --mesh 2x8 --replicas 4";
  const auto text = run(job + " --solver-only");
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("1 stage x mesh 2x8 x 4 replicas"), std::string::npos) << text.out;
  const auto j = run(job + " --solver-only --json --out " + file);
  ASSERT_EQ(j.exitCode, 0) << j.err;
  const Json doc = Json::parse(j.out);
  EXPECT_EQ(doc["joint"]["replicas"], 4);
  EXPECT_EQ(doc["joint"]["micro_batches"].get<int>() * doc["joint"]["micro_batch_size"].get<int>() * 4, 64);
  EXPECT_EQ(test::loadJson(file)["operator_plan"]["replicas"], 4);
  const auto e = run("evaluate --plan " + file + " --json");
  ASSERT_EQ(e.exitCode, 0) << e.err;
  EXPECT_NEAR(Json::parse(e.out)["step_time_s"].get<double>(), doc["joint"]["step_time_s"].get<double>(), 1e-9);
  std::filesystem::remove(file);
  const auto odd = run("autoparallel --model llama3-8b --cluster dgx-h100-x64 --gpus 64 --gbs 64 --mesh 2x8 --replicas 3");
  EXPECT_EQ(odd.exitCode, 2);
  EXPECT_NE(odd.err.find("--replicas 3: copies of the mesh must divide the cluster's 64 GPUs"), std::string::npos) << odd.err;
  const auto zero = run("autoparallel --model llama3-8b --cluster dgx-h100-x64 --gpus 64 --gbs 64 --replicas 0");
  EXPECT_EQ(zero.exitCode, 2);
  EXPECT_NE(zero.err.find("--replicas"), std::string::npos) << zero.err;
}

TEST(ColoPlanAutoParallel, BadOptionsExitTwoNamingThem) {
  const auto mesh = run("autoparallel --model tiny-gpt --cluster dgx-a100-80gb --gbs 64 --mesh 3x3");
  EXPECT_EQ(mesh.exitCode, 2);
  // (It said "9 GPUs x 0 stages".)
  EXPECT_NE(mesh.err.find("--mesh 3x3: 9 GPUs do not divide the cluster's 8 GPUs"), std::string::npos) << mesh.err;
  // Refused before the solve, naming the option (a batch past colo's limit was accepted, and an --out
  // folder that does not exist failed after the whole solve, naming a temporary file).
  const auto huge = run("autoparallel --model tiny-gpt --cluster dgx-a100-80gb --gbs 1000000000");
  EXPECT_EQ(huge.exitCode, 2);
  EXPECT_NE(huge.err.find("--gbs: must be at most 16777216, got 1000000000"), std::string::npos) << huge.err;
  const auto nowhere = run("autoparallel --model tiny-gpt --cluster dgx-a100-80gb --gbs 64 --out /nonexistent/dir/p.json");
  EXPECT_EQ(nowhere.exitCode, 2);
  EXPECT_TRUE(nowhere.out.empty()) << nowhere.out;
  EXPECT_NE(nowhere.err.find("--out /nonexistent/dir/p.json: the folder /nonexistent/dir does not exist"), std::string::npos)
      << nowhere.err;
  const auto shape = run("autoparallel --model tiny-gpt --cluster dgx-a100-80gb --gbs 64 --mesh 2y4");
  EXPECT_EQ(shape.exitCode, 2);
  EXPECT_NE(shape.err.find("not a mesh shape"), std::string::npos) << shape.err;
  const auto gbs = run("autoparallel --model tiny-gpt --cluster dgx-a100-80gb");
  EXPECT_EQ(gbs.exitCode, 2);
  EXPECT_NE(gbs.err.find("--gbs"), std::string::npos) << gbs.err;
  const auto fit = run("autoparallel --model gpt3-175b --cluster dgx-a100-80gb --gbs 64 --no-offload");
  EXPECT_EQ(fit.exitCode, 3);
  EXPECT_NE(fit.err.find("no operator-level plan fits"), std::string::npos) << fit.err;
}

TEST(ColoPlanAutoParallel, EveryStageHoldsALayer) {
  // More stages than layers were solved and printed ("1024 stages x mesh 2x8, layers 0x898,1x126").
  const auto pp = run("autoparallel --model llama3-405b --cluster dgx-h100-x2048 --gbs 2048 --pp 1024");
  EXPECT_EQ(pp.exitCode, 2);
  EXPECT_NE(pp.err.find("--pp 1024: more pipeline stages than the model's 126 layers"), std::string::npos) << pp.err;
  // A mesh that one copy per stage would spread over 1,024 stages: the stages that keep a layer are
  // searched, each with the copies of the mesh that fill the cluster.
  const auto mesh = run("autoparallel --model llama3-405b --cluster dgx-h100-x2048 --gbs 2048 --mesh 2x8 --json");
  ASSERT_EQ(mesh.exitCode, 0) << mesh.err;
  const Json j = Json::parse(mesh.out);
  const Json& joint = j["joint"];
  EXPECT_EQ(joint["mesh"], "2x8");
  EXPECT_LE(joint["pipeline_stages"].get<int>(), 126);
  EXPECT_EQ(joint["pipeline_stages"].get<int>() * joint["replicas"].get<int>() * 16, 16384);
  // With the replicas given, the stages they leave must keep a layer too; a count that does not fill the
  // cluster says how replicas would.
  const auto few = run("autoparallel --model llama3-405b --cluster dgx-h100-x2048 --gbs 2048 --mesh 2x8 --replicas 2");
  EXPECT_EQ(few.exitCode, 2);
  EXPECT_NE(few.err.find("--mesh 2x8 x 2 replicas: 512 pipeline stages, more than the model's 126 layers"), std::string::npos) << few.err;
  // The stages left need not be a power of two: GPT-2 small's 12 layers on a 72-GPU NVLink domain with a
  // 4-GPU mesh are 9 stages of 2 copies (18 stages of one copy would leave 6 empty).
  const auto nine = run("autoparallel --model gpt2-small --cluster gb200-nvl72 --gbs 64 --mesh 4 --json");
  ASSERT_EQ(nine.exitCode, 0) << nine.err;
  const Json n = Json::parse(nine.out)["joint"];
  EXPECT_EQ(n["pipeline_stages"], 9);
  EXPECT_EQ(n["replicas"], 2);
  const auto short16 = run("autoparallel --model llama3-405b --cluster dgx-h100-x2048 --gbs 2048 --mesh 2x8 --pp 16");
  EXPECT_EQ(short16.exitCode, 2);
  EXPECT_NE(short16.err.find("(--replicas R puts R copies of the mesh in each stage)"), std::string::npos) << short16.err;
}

TEST(ColoPlanAutoParallel, OutKeepsTheLayoutTheUserFixed) {
  // The degree-level search is not held to --mesh: its faster plan (tp 4 pp 8 dp 4, another mesh) was
  // what --out wrote. Now the file holds the per-operator plan on the 2x8 mesh asked for.
  test::ScratchDir dir;
  const std::string file = dir.path("g.json");
  const auto r = run("autoparallel --model gpt3-175b --cluster dgx-a100-80gb-x16 --gbs 1536 --mesh 2x8 --out " + file);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("the degree-level plan is faster"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--out writes the per-operator plan, on the layout --mesh/--pp/--replicas fix"), std::string::npos) << r.out;
  const Json plan = test::loadJson(file);
  ASSERT_TRUE(plan.contains("operator_plan"));
  EXPECT_EQ(plan["operator_plan"]["mesh_shape"], Json::array({2, 8}));
}

TEST(ColoPlanAutoParallel, ASimulationOnlyPlanNamesTheOperatorThatLeavesTheSplit) {
  // Ulysses on a 1-D mesh: attention split by heads between operators split by sequence. It was "its
  // operators mix Megatron's data- and tensor-parallel rules across the mesh axes", on a mesh of one axis.
  const auto r = run("autoparallel --model llama3-8b --cluster dgx-h100 --gbs 8 --seq-len 65536 --mesh 8");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out.find("mix Megatron"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("simulation-only: layers 0-31 attn.core (0:out) leaves the split the other operators follow (cp on axis 0)"),
            std::string::npos)
      << r.out;
}

TEST(ColoPlanCli, RecomputeModulesAreAskedForByMegatronsNames) {
  // Qwen3-30B-A3B on one DGX H100, ep 8: the experts' activation and the MoE layers' pre-MLP norm
  // re-run (Megatron-Core's --recompute-modules moe_act layernorm), less memory than none.
  const std::string plan = "evaluate --model qwen3-30b-a3b --cluster dgx-h100 --gbs 64 --ep 8 --zero 1";
  const auto text = run(plan + " --recompute-modules moe_act,layernorm");
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("recompute selective (moe_act+layernorm)"), std::string::npos) << text.out;
  const auto with = run(plan + " --recompute-modules moe_act,layernorm --json");
  const auto without = run(plan + " --json");
  ASSERT_EQ(with.exitCode, 0) << with.err;
  ASSERT_EQ(without.exitCode, 0) << without.err;
  EXPECT_LT(Json::parse(with.out)["peak_memory_bytes"].get<double>(), Json::parse(without.out)["peak_memory_bytes"].get<double>());
  // They are what selective recompute re-runs: not with another policy.
  const auto full = run(plan + " --recompute full --recompute-modules moe_act");
  EXPECT_EQ(full.exitCode, 2);
  EXPECT_NE(full.err.find("--recompute-modules"), std::string::npos) << full.err;
  // A dense model has no experts' activation: one error naming the field, exit 2.
  const auto dense = run("evaluate --model llama3-8b --cluster dgx-h100 --gbs 64 --recompute-modules moe_act");
  EXPECT_EQ(dense.exitCode, 2);
  EXPECT_NE(dense.err.find("/execution/recompute_modules"), std::string::npos) << dense.err;
  const auto unknown = run("evaluate --model llama3-8b --cluster dgx-h100 --gbs 64 --recompute-modules mlp,attn");
  EXPECT_EQ(unknown.exitCode, 2);
  EXPECT_NE(unknown.err.find("unknown recompute module \"attn\""), std::string::npos) << unknown.err;
}

}  // namespace
}  // namespace colo
