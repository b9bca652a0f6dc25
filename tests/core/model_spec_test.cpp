#include "colo/core/model_spec.h"

#include <cmath>

#include <gtest/gtest.h>

#include "colo/core/library.h"
#include "colo/core/model.h"
#include "core/test_support.h"

namespace colo {
namespace {

ModelSpec libraryModel(const std::string& name) {
  auto m = test::loadModelOrFail(test::dataFile("models/" + name + ".json"));
  EXPECT_TRUE(m.spec.has_value());
  return m.spec.value_or(ModelSpec{});
}

double relativeError(double value, double published) { return std::fabs(value - published) / published; }

// Published parameter counts (papers and model cards): within 0.5% as issue 2 requires.
TEST(ModelSpec, LibraryMatchesPublishedParameterCounts) {
  // Figures quoted to two significant digits (GPT-3's "1.3B", "2.7B", "6.7B", "13B") only bound the count
  // to their rounding; the others are quoted precisely.
  struct Row {
    const char* name;
    double total;
    double active;
    double tolerance = 0.005;
  };
  const Row rows[] = {
      {"gpt3-175b", 174.6e9, 174.6e9},     {"llama2-7b", 6.74e9, 6.74e9},       {"mixtral-8x7b", 46.7e9, 12.9e9},
      {"gpt2-small", 124.4e6, 124.4e6},    {"gpt2-medium", 354.8e6, 354.8e6},   {"gpt2-large", 774.0e6, 774.0e6},
      {"gpt2-xl", 1557.6e6, 1557.6e6},     {"llama2-13b", 13.016e9, 13.016e9},  {"llama2-70b", 68.98e9, 68.98e9},
      {"llama3-8b", 8.03e9, 8.03e9},       {"llama3-70b", 70.55e9, 70.55e9},    {"llama3-405b", 405.85e9, 405.85e9},
      {"vit-large", 304.3e6, 304.3e6},     {"gpt3-1.3b", 1.3e9, 1.3e9, 0.04},   {"gpt3-2.7b", 2.7e9, 2.7e9, 0.02},
      {"gpt3-6.7b", 6.7e9, 6.7e9, 0.01},   {"gpt3-13b", 13e9, 13e9, 0.04},      {"bert-large", 336.2e6, 336.2e6},
      // DeepSeek-V3 report: 671B total, 37B activated (quoted to two digits); Qwen3 report: 30.5B total,
      // 3.3B activated; 8.2B.
      {"deepseek-v3", 671e9, 37e9, 0.02},  {"qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02}, {"qwen3-8b", 8.2e9, 8.2e9, 0.01},
      // Qwen3 report: 235B, 22B activated; Mistral: 141B, 39B active; Phi-3 report: 3.8B; Gemma 3
      // report, Table 1: 1,416M embedding + 25,600M non-embedding (the text model). GPT-OSS and Llama 4
      // are checked with their vision tower and embeddings below.
      {"qwen3-235b-a22b", 235e9, 22e9, 0.01}, {"mixtral-8x22b", 141e9, 39e9, 0.01}, {"phi3-mini", 3.8e9, 3.8e9, 0.01},
      {"gemma-3-27b", 27.016e9, 27.016e9, 0.002},
  };
  for (const auto& row : rows) {
    const ParamCount count = countParameters(libraryModel(row.name));
    EXPECT_LT(relativeError(static_cast<double>(count.total), row.total), row.tolerance) << row.name << " " << count.total;
    EXPECT_LT(relativeError(static_cast<double>(count.active), row.active), row.tolerance) << row.name << " " << count.active;
  }
}

TEST(ModelSpec, TheModelsOf2025CountAsPublished) {
  // OpenAI's model card: 117B total, 5.1B active (the active count leaves the input embedding out,
  // which a token only looks up).
  const ParamCount oss = countParameters(libraryModel("gpt-oss-120b"));
  EXPECT_LT(relativeError(static_cast<double>(oss.total), 116.83e9), 0.001) << oss.total;
  EXPECT_LT(relativeError(static_cast<double>(oss.active - oss.embedding), 5.13e9), 0.01) << oss.active;
  // Meta's Llama 4 card: 109B total with the vision encoder, 17B active.
  const ParamCount scout = countParameters(libraryModel("llama4-scout"));
  EXPECT_GT(scout.vision, 0);
  EXPECT_LT(relativeError(static_cast<double>(scout.total + scout.vision), 109e9), 0.01) << scout.total + scout.vision;
  EXPECT_LT(relativeError(static_cast<double>(scout.active), 17e9), 0.02) << scout.active;
  // Gemma 3 report, Table 1: a 417M vision encoder (colo adds the 6M projector).
  EXPECT_LT(relativeError(static_cast<double>(countParameters(libraryModel("gemma-3-27b")).vision), 417e6), 0.02);
}

TEST(ModelSpec, LocalAttentionFollowsItsLayerPattern) {
  ModelSpec gemma = libraryModel("gemma-3-27b");
  EXPECT_TRUE(gemma.localAttention(0));
  EXPECT_TRUE(gemma.localAttention(4));
  EXPECT_FALSE(gemma.localAttention(5));  // every sixth layer attends the whole sequence
  EXPECT_TRUE(gemma.localAttention(6));
  gemma.globalAttentionEvery = 0;         // Mistral: every layer slides
  EXPECT_TRUE(gemma.localAttention(5));
  gemma.slidingWindow = 0;
  EXPECT_FALSE(gemma.localAttention(0));
  const ModelSpec scout = libraryModel("llama4-scout");
  EXPECT_TRUE(scout.localAttention(2));
  EXPECT_FALSE(scout.localAttention(3));
}

TEST(ModelSpec, ExactCountsOfWellKnownModels) {
  EXPECT_EQ(countParameters(libraryModel("gpt3-175b")).total, 174'604'259'328);
  EXPECT_EQ(countParameters(libraryModel("llama2-7b")).total, 6'738'415'616);
  EXPECT_EQ(countParameters(libraryModel("mixtral-8x7b")).total, 46'702'792'704);
  EXPECT_EQ(countParameters(libraryModel("mixtral-8x7b")).active, 12'879'925'248);
  EXPECT_EQ(countParameters(libraryModel("gpt2-small")).total, 124'439'808);
  ModelSpec bertBase = libraryModel("bert-large");
  bertBase.lmHead = false;  // BertModel (with pooler), as transformers counts it
  EXPECT_EQ(countParameters(bertBase).total, 335'141'888);
}

TEST(ModelSpec, EveryLibraryModelRoundTrips) {
  const auto entries = libraryEntries(LibraryKind::kModels);
  ASSERT_GE(entries.size(), 18u);
  for (const auto& name : entries) {
    const ModelSpec spec = libraryModel(name);
    const Json written = modelSpecToJson(spec);
    auto back = modelSpecFromJson(written, "roundtrip");
    ASSERT_TRUE(back) << name << ": " << back.error().toString();
    EXPECT_EQ(*back, spec) << name;
    EXPECT_EQ(modelSpecToJson(*back), written) << name;
  }
}

struct BadSpecCase {
  const char* patch;       // JSON merged into a valid GPT-2 spec
  const char* path;        // expected JSON pointer
  const char* fragment;    // expected in the message
};

class BadSpec : public ::testing::TestWithParam<BadSpecCase> {};

TEST_P(BadSpec, IsRejectedWithPathAndValue) {
  Json doc = test::loadJson(test::dataFile("models/gpt2-small.json"));
  doc.merge_patch(Json::parse(GetParam().patch));
  auto r = modelSpecFromJson(doc, "bad.json");
  ASSERT_FALSE(r) << GetParam().patch;
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(r.error().file, "bad.json");
  EXPECT_EQ(r.error().path, GetParam().path) << r.error().toString();
  EXPECT_NE(r.error().message.find(GetParam().fragment), std::string::npos) << r.error().toString();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadSpec,
    ::testing::Values(BadSpecCase{R"({"hidden_size": -5})", "/hidden_size", "got -5"},
                      BadSpecCase{R"({"hidden_size": "768"})", "/hidden_size", "must be an integer"},
                      BadSpecCase{R"({"hidden_size": 770})", "/num_attention_heads", "not divisible"},
                      BadSpecCase{R"({"num_layers": null})", "/num_layers", "missing required field"},  // merge_patch removes it
                      BadSpecCase{R"({"num_layers": 1.5})", "/num_layers", "whole number"},
                      BadSpecCase{R"({"num_kv_heads": 5})", "/num_kv_heads", "not a multiple"},
                      BadSpecCase{R"({"hiden_size": 768})", "/hiden_size", "did you mean \"hidden_size\""},
                      BadSpecCase{R"({"family": "gpt5"})", "/family", "unknown family \"gpt5\""},
                      BadSpecCase{R"({"norm": "batchnorm"})", "/norm", "unknown value \"batchnorm\""},
                      BadSpecCase{R"({"moe": {"num_experts": 4, "top_k": 6}})", "/moe/top_k", "between 1 and num_experts 4"},
                      BadSpecCase{R"({"moe": {"num_experts": 4, "top_k": 1, "layer_frequency": 99}})",
                                  "/moe/layer_frequency", "between 1 and num_layers"},
                      BadSpecCase{R"({"moe": {"num_experts": 4, "top_k": 1, "first_dense_layers": 999}})",
                                  "/moe/first_dense_layers", "from 0 to num_layers - 1"},
                      BadSpecCase{R"({"moe": {"num_experts": 4, "top_k": 1, "routers": 2}})", "/moe/routers",
                                  "unknown field"},
                      BadSpecCase{R"({"dropout": 1.5})", "/dropout", "must be in [0, 1)"},
                      BadSpecCase{R"({"vocab_size": 0})", "/vocab_size", "positive"},
                      BadSpecCase{R"({"family": "vit"})", "/image", "missing required field \"image\""},
                      BadSpecCase{R"({"name": ""})", "/name", "must not be empty"},
                      BadSpecCase{R"({"moe": {"num_experts": 4, "top_k": 1, "shared_expert_ffn_hidden_size": -1}})",
                                  "/moe/shared_expert_ffn_hidden_size", "-1"},
                      BadSpecCase{R"({"position_embedding": "rope", "mla": {"kv_lora_rank": 64, "v_head_dim": 0}})",
                                  "/mla/v_head_dim", "positive"},
                      BadSpecCase{R"({"position_embedding": "rope", "num_kv_heads": 4,
                                      "mla": {"kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}})",
                                  "/num_kv_heads", "every head its own keys and values"},
                      BadSpecCase{R"({"mla": {"kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}})",
                                  "/mla/qk_rope_head_dim", "rotary"},
                      BadSpecCase{R"({"position_embedding": "rope", "mla": {"kv_lora_rank": 64, "v_head_dim": 32, "q_rank": 8}})",
                                  "/mla/q_rank", "unknown field"},
                      BadSpecCase{R"({"sliding_window": 512, "attention_chunk_size": 1024})", "/attention_chunk_size",
                                  "not both"},
                      BadSpecCase{R"({"global_attention_every": 4})", "/global_attention_every", "needs local attention"},
                      BadSpecCase{R"({"attention_chunk_size": -8})", "/attention_chunk_size", "-8"},
                      BadSpecCase{R"({"vision_tower_params": -1})", "/vision_tower_params", "-1"},
                      BadSpecCase{R"({"qk_norm": "yes"})", "/qk_norm", "true or false"}));

TEST(ModelSpec, MissingFieldIsNamed) {
  Json doc = test::loadJson(test::dataFile("models/llama2-7b.json"));
  doc.erase("ffn_hidden_size");
  auto r = modelSpecFromJson(doc, "m.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().path, "/ffn_hidden_size");
  EXPECT_NE(r.error().message.find("missing required field"), std::string::npos);
}

TEST(ModelSpec, FamilyPresetsSetArchitecture) {
  const ModelSpec llama = libraryModel("llama2-70b");
  EXPECT_EQ(llama.norm, NormKind::kRmsNorm);
  EXPECT_EQ(llama.activation, Activation::kSwiGlu);
  EXPECT_EQ(llama.positionEmbedding, PositionEmbedding::kRope);
  EXPECT_FALSE(llama.tieWordEmbeddings);
  EXPECT_EQ(llama.kvHeads(), 8);
  const ModelSpec gpt = libraryModel("gpt3-175b");
  EXPECT_EQ(gpt.norm, NormKind::kLayerNorm);
  EXPECT_TRUE(gpt.tieWordEmbeddings);
  EXPECT_EQ(gpt.headSize(), 128);
  const ModelSpec vit = libraryModel("vit-large");
  EXPECT_EQ(vit.defaultSeqLen(), 197);
}

}  // namespace
}  // namespace colo
