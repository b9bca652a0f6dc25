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
