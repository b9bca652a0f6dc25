#include "colo/core/hf_config.h"

#include <gtest/gtest.h>

#include "colo/core/model.h"
#include "core/test_support.h"

namespace colo {
namespace {

ModelSpec hf(const std::string& name) {
  auto m = test::loadModelOrFail(test::dataFile("hf/" + name + "/config.json"));
  EXPECT_EQ(m.source, ModelSource::kHfConfig);
  return m.spec.value_or(ModelSpec{});
}

// Parameter counts as the transformers library reports them (sum of p.numel()) for these configs.
TEST(HfConfig, EverySupportedTypeMapsToTheTransformersParameterCount) {
  struct Row {
    const char* dir;
    const char* type;
    std::int64_t params;
  };
  const Row rows[] = {
      {"gpt2", "gpt2", 124'439'808},
      {"pythia-1b", "gpt_neox", 1'011'781'632},
      {"llama-2-7b", "llama", 6'738'415'616},
      {"mistral-7b", "mistral", 7'241'732'096},
      {"mixtral-8x7b", "mixtral", 46'702'792'704},
      {"qwen2-7b", "qwen2", 7'615'616'512},
      {"opt-1.3b", "opt", 1'315'758'080},
      {"opt-350m", "opt", 331'196'416},
      {"bloom-560m", "bloom", 559'214'592},
      {"vit-large-patch16-224", "vit", 304'326'632},
  };
  for (const auto& row : rows) {
    const ModelSpec s = hf(row.dir);
    EXPECT_EQ(s.family, row.type);
    EXPECT_EQ(countParameters(s).total, row.params) << row.dir;
  }
  // BertForMaskedLM: BertModel without pooler... colo keeps the pooler and the MLM head; the pooler-less
  // count of transformers' BertForMaskedLM is 335,174,458; with the pooler (h*h + h) it is ours.
  EXPECT_EQ(countParameters(hf("bert-large-uncased")).total, 335'174'458 + 1024 * 1024 + 1024);
}

TEST(HfConfig, KeysAreMappedPerModelType) {
  const ModelSpec gpt2 = hf("gpt2");
  EXPECT_EQ(gpt2.hiddenSize, 768);  // n_embd
  EXPECT_EQ(gpt2.numLayers, 12);    // n_layer
  EXPECT_EQ(gpt2.ffnHiddenSize, 3072);  // n_inner absent: 4 * n_embd
  EXPECT_TRUE(gpt2.tieWordEmbeddings);
  EXPECT_EQ(gpt2.name, "gpt2");

  const ModelSpec mixtral = hf("mixtral-8x7b");
  EXPECT_EQ(mixtral.kvHeads(), 8);  // num_key_value_heads
  EXPECT_EQ(mixtral.moe.numExperts, 8);
  EXPECT_EQ(mixtral.moe.topK, 2);
  EXPECT_EQ(mixtral.slidingWindow, 0);  // "sliding_window": null

  const ModelSpec mistral = hf("mistral-7b");
  EXPECT_EQ(mistral.slidingWindow, 4096);
  const ModelSpec qwen = hf("qwen2-7b");
  EXPECT_TRUE(qwen.qkvBias);
  EXPECT_FALSE(qwen.attentionOutputBias);
  EXPECT_EQ(qwen.slidingWindow, 0);  // use_sliding_window false

  const ModelSpec neox = hf("pythia-1b");
  EXPECT_DOUBLE_EQ(neox.rotaryFraction, 0.25);
  EXPECT_FALSE(neox.tieWordEmbeddings);

  const ModelSpec opt = hf("opt-350m");
  EXPECT_EQ(opt.embedSize(), 512);  // word_embed_proj_dim
  EXPECT_FALSE(opt.finalNorm);      // do_layer_norm_before false
  EXPECT_EQ(opt.activation, Activation::kRelu);

  const ModelSpec bloom = hf("bloom-560m");
  EXPECT_EQ(bloom.positionEmbedding, PositionEmbedding::kAlibi);
  EXPECT_EQ(bloom.defaultSeqLen(), 2048);

  const ModelSpec vit = hf("vit-large-patch16-224");
  EXPECT_EQ(vit.image.numClasses, 1000);  // from id2label
}

TEST(HfConfig, TheModelsOf2025MapToTheirPublishedCounts) {
  // Published totals (and activated parameters): DeepSeek-V3 671B (37B), DeepSeek-V2-Lite 15.7B (2.4B
  // without embeddings), Qwen3-30B-A3B 30.5B (3.3B), Qwen3-8B 8.2B. transformers also counts Qwen3's
  // per-head query/key norms (2 x 128 per layer), which colo leaves out.
  const ModelSpec v3 = hf("deepseek-v3");
  EXPECT_EQ(v3.family, "deepseek_v3");
  EXPECT_EQ(v3.mla.qLoraRank, 1536);
  EXPECT_EQ(v3.mla.kvLoraRank, 512);
  EXPECT_EQ(v3.mla.qkHeadDim(), 192);
  EXPECT_EQ(v3.mla.vHeadDim, 128);
  EXPECT_EQ(v3.moe.numExperts, 256);
  EXPECT_EQ(v3.moe.topK, 8);
  EXPECT_EQ(v3.moe.firstDenseLayers, 3);
  EXPECT_EQ(v3.moe.sharedExpertFfnHiddenSize, 2048);  // n_shared_experts x moe_intermediate_size
  EXPECT_NEAR(static_cast<double>(countParameters(v3).total), 671e9, 0.002 * 671e9);
  EXPECT_NEAR(static_cast<double>(countParameters(v3).active), 37e9, 0.02 * 37e9);
  EXPECT_EQ(countParameters(v3).total,
            countParameters(*test::loadModelOrFail(test::dataFile("models/deepseek-v3.json")).spec).total);

  const ModelSpec lite = hf("deepseek-v2-lite");
  EXPECT_EQ(lite.mla.qLoraRank, 0);  // "q_lora_rank": null
  EXPECT_EQ(lite.moe.sharedExpertFfnHiddenSize, 2 * 1408);
  const ParamCount liteCount = countParameters(lite);
  EXPECT_NEAR(static_cast<double>(liteCount.total), 15.7e9, 0.005 * 15.7e9);
  EXPECT_NEAR(static_cast<double>(liteCount.active - liteCount.embedding), 2.4e9, 0.03 * 2.4e9);

  const ModelSpec a3b = hf("qwen3-30b-a3b");
  EXPECT_EQ(a3b.moe.numExperts, 128);
  EXPECT_EQ(a3b.moe.expertFfnHiddenSize, 768);
  EXPECT_EQ(a3b.moe.sharedExpertFfnHiddenSize, 0);
  EXPECT_EQ(a3b.headSize(), 128);  // head_dim, not hidden / heads = 64
  EXPECT_NEAR(static_cast<double>(countParameters(a3b).total), 30.5e9, 0.005 * 30.5e9);
  EXPECT_NEAR(static_cast<double>(countParameters(a3b).active), 3.3e9, 0.03 * 3.3e9);
  EXPECT_NEAR(static_cast<double>(countParameters(hf("qwen3-8b")).total), 8.2e9, 0.005 * 8.2e9);

  // Qwen2-MoE: a shared expert of its own size, q/k/v biases; only leading dense layers are modelled.
  Json qwen2moe = test::loadJson(test::dataFile("hf/qwen3-30b-a3b/config.json"));
  qwen2moe["model_type"] = "qwen2_moe";
  qwen2moe["shared_expert_intermediate_size"] = 5632;
  qwen2moe["mlp_only_layers"] = Json::parse("[0, 1]");
  auto q2 = modelSpecFromHfConfig(qwen2moe, "qwen2moe/config.json");
  ASSERT_TRUE(q2) << q2.error().toString();
  EXPECT_TRUE(q2->qkvBias);
  EXPECT_EQ(q2->moe.sharedExpertFfnHiddenSize, 5632);
  EXPECT_EQ(q2->moe.firstDenseLayers, 2);
  qwen2moe["mlp_only_layers"] = Json::parse("[5]");
  auto scattered = modelSpecFromHfConfig(qwen2moe, "qwen2moe/config.json");
  ASSERT_FALSE(scattered);
  EXPECT_EQ(scattered.error().path, "/mlp_only_layers");
  Json freq = test::loadJson(test::dataFile("hf/deepseek-v3/config.json"));
  freq["moe_layer_freq"] = 2;
  auto badFreq = modelSpecFromHfConfig(freq, "v3/config.json");
  ASSERT_FALSE(badFreq);
  EXPECT_EQ(badFreq.error().path, "/moe_layer_freq");
}

TEST(HfConfig, TieWordEmbeddingsOverridesTheDefault) {
  Json config = test::loadJson(test::dataFile("hf/llama-2-7b/config.json"));
  config["tie_word_embeddings"] = true;
  auto tied = modelSpecFromHfConfig(config, "c.json");
  ASSERT_TRUE(tied);
  EXPECT_EQ(countParameters(*tied).total, 6'738'415'616 - 32000LL * 4096);
}

TEST(HfConfig, UnknownModelTypeAndBadKeysAreNamed) {
  auto unknown = modelSpecFromHfConfig(Json::parse(R"({"model_type": "t5", "d_model": 512})"), "t5/config.json");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().path, "/model_type");
  EXPECT_NE(unknown.error().message.find("unsupported model_type \"t5\""), std::string::npos);
  EXPECT_NE(unknown.error().message.find("mixtral"), std::string::npos);  // lists the supported ones

  Json config = test::loadJson(test::dataFile("hf/llama-2-7b/config.json"));
  config.erase("intermediate_size");
  auto missing = modelSpecFromHfConfig(config, "c.json");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().path, "/intermediate_size");

  config = test::loadJson(test::dataFile("hf/gpt2/config.json"));
  config["n_head"] = 7;  // 768 is not divisible by 7
  auto indivisible = modelSpecFromHfConfig(config, "c.json");
  ASSERT_FALSE(indivisible);
  EXPECT_NE(indivisible.error().message.find("not divisible"), std::string::npos);

  config = test::loadJson(test::dataFile("hf/gpt2/config.json"));
  config["n_embd"] = "768";
  auto wrongType = modelSpecFromHfConfig(config, "c.json");
  ASSERT_FALSE(wrongType);
  EXPECT_EQ(wrongType.error().path, "/n_embd");
}

TEST(HfConfig, NameComesFromTheFolderWhenTheConfigHasNone) {
  Json config = test::loadJson(test::dataFile("hf/gpt2/config.json"));
  config.erase("_name_or_path");
  auto spec = modelSpecFromHfConfig(config, "/models/my-gpt/config.json");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->name, "my-gpt");
}

}  // namespace
}  // namespace colo
