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
  // The published 671B leave out the multi-token prediction module (num_nextn_predict_layers 1: one
  // more MoE layer, its projection and norms; 685B on the model card with its own embedding and head).
  EXPECT_EQ(v3.mtpLayers, 1);
  const ParamCount v3Count = countParameters(v3);
  EXPECT_NEAR(static_cast<double>(v3Count.mtp), 11.6e9, 0.01 * 11.6e9);
  EXPECT_NEAR(static_cast<double>(v3Count.total - v3Count.mtp), 671e9, 0.002 * 671e9);
  ModelSpec mainModel = v3;
  mainModel.mtpLayers = 0;
  EXPECT_NEAR(static_cast<double>(countParameters(mainModel).active), 37e9, 0.02 * 37e9);
  EXPECT_EQ(v3Count.total - v3Count.mtp,
            countParameters(*test::loadModelOrFail(test::dataFile("models/deepseek-v3.json")).spec).total);

  // Node-limited routing: 8 groups, 4 per token ("noaux_tc"); V2-Lite routes greedily over all.
  EXPECT_EQ(v3.moe.routingGroups, 8);
  EXPECT_EQ(v3.moe.routingGroupTopK, 4);
  const ModelSpec lite = hf("deepseek-v2-lite");
  EXPECT_EQ(lite.moe.routingGroups, 0);
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
  Json groups = freq;
  groups["n_group"] = 3;  // 256 experts do not split into 3 groups
  auto badGroups = modelSpecFromHfConfig(groups, "v3/config.json");
  ASSERT_FALSE(badGroups);
  EXPECT_EQ(badGroups.error().path, "/moe/routing_groups");
  groups["n_group"] = 8;
  groups["topk_group"] = 9;
  ASSERT_FALSE(modelSpecFromHfConfig(groups, "v3/config.json"));
  // DeepSeek's moe_layer_freq N: layer i is MoE when i >= first_k_dense_replace and i % N == 0
  // (modeling_deepseek.py's rule), so with 3 dense layers and N = 2 the MoE layers are 4, 6, 8, ...
  freq["moe_layer_freq"] = 2;
  auto every2 = modelSpecFromHfConfig(freq, "v3/config.json");
  ASSERT_TRUE(every2) << every2.error().toString();
  for (std::int64_t l = 0; l < 10; ++l) EXPECT_EQ(every2->moe.isMoeLayer(l), l >= 4 && l % 2 == 0) << l;
  // The phase survives the model file.
  auto back = modelSpecFromJson(modelSpecToJson(*every2), "model.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->moe, every2->moe);
  Json last = modelSpecToJson(*every2);
  last["moe"]["layer_phase"] = 1;  // the last of each period: the default, held in one form
  auto same = modelSpecFromJson(last, "model.json");
  ASSERT_TRUE(same) << same.error().toString();
  EXPECT_EQ(same->moe.layerPhase, -1);
  Json bad = modelSpecToJson(*every2);
  bad["moe"]["layer_phase"] = 2;
  auto badPhase = modelSpecFromJson(bad, "model.json");
  ASSERT_FALSE(badPhase);
  EXPECT_EQ(badPhase.error().path, "/moe/layer_phase");
}

TEST(HfConfig, TheFamiliesOf2025And2026MapToTheirPublishedCounts) {
  // Gemma 2 report, Table 2 (9B: 917,962,752 embedding + 8,324,201,984 non-embedding, its vocabulary
  // padded to 256,128 rows; the config has 256,000).
  const ModelSpec gemma2 = hf("gemma-2-9b");
  EXPECT_EQ(gemma2.family, "gemma2");
  EXPECT_EQ(gemma2.slidingWindow, 4096);
  EXPECT_EQ(gemma2.globalAttentionEvery, 2);
  EXPECT_TRUE(gemma2.sandwichNorm);
  EXPECT_FALSE(gemma2.qkNorm);
  EXPECT_EQ(gemma2.headSize(), 256);
  EXPECT_EQ(countParameters(gemma2).total, 917'962'752 + 8'324'201'984 - 128 * 3584);

  // Gemma 3 27B: the multimodal wrapper; text_config planned, the SigLIP tower counted apart.
  const ModelSpec gemma3 = hf("gemma-3-27b");
  EXPECT_EQ(gemma3.family, "gemma3");
  EXPECT_EQ(gemma3.numLayers, 62);
  EXPECT_EQ(gemma3.vocabSize, 262208);  // the Gemma3TextConfig default; text_config leaves it out
  EXPECT_EQ(gemma3.slidingWindow, 1024);
  EXPECT_EQ(gemma3.globalAttentionEvery, 6);
  EXPECT_TRUE(gemma3.qkNorm);
  EXPECT_TRUE(gemma3.tieWordEmbeddings);
  EXPECT_EQ(countParameters(gemma3).total,
            countParameters(*test::loadModelOrFail(test::dataFile("models/gemma-3-27b.json")).spec).total);
  EXPECT_EQ(gemma3.visionTowerParams, countParameters(*test::loadModelOrFail(test::dataFile("models/gemma-3-27b.json")).spec).vision);

  // GPT-OSS: 117B / 21B total (model card); alternating sliding and full layers from layer_types.
  const ModelSpec oss = hf("gpt-oss-120b");
  EXPECT_EQ(oss.moe.numExperts, 128);
  EXPECT_EQ(oss.moe.topK, 4);
  EXPECT_EQ(oss.slidingWindow, 128);
  EXPECT_EQ(oss.globalAttentionEvery, 2);
  EXPECT_TRUE(oss.attentionSinks);
  EXPECT_TRUE(oss.mlpBias);
  EXPECT_EQ(countParameters(oss).total, countParameters(*test::loadModelOrFail(test::dataFile("models/gpt-oss-120b.json")).spec).total);
  EXPECT_NEAR(static_cast<double>(countParameters(hf("gpt-oss-20b")).total), 20.91e9, 0.005 * 20.91e9);

  // Llama 4 Scout: 109B with vision, 17B active; chunked attention, a NoPE full layer every fourth.
  const ModelSpec scout = hf("llama-4-scout-17b-16e");
  EXPECT_EQ(scout.attentionChunkSize, 8192);
  EXPECT_EQ(scout.globalAttentionEvery, 4);
  EXPECT_EQ(scout.moe.sharedExpertFfnHiddenSize, 8192);
  EXPECT_EQ(scout.ffnHiddenSize, 16384);  // intermediate_size_mlp (the dense layers Maverick interleaves)
  const ParamCount scoutCount = countParameters(scout);
  EXPECT_NEAR(static_cast<double>(scoutCount.total + scoutCount.vision), 109e9, 0.01 * 109e9);
  EXPECT_NEAR(static_cast<double>(scoutCount.active), 17e9, 0.02 * 17e9);
  EXPECT_EQ(scoutCount.total, countParameters(*test::loadModelOrFail(test::dataFile("models/llama4-scout.json")).spec).total);

  // Phi-3-mini 3.8B with its 2047-token window on every layer; Qwen3-235B-A22B; Mixtral 8x22B.
  const ModelSpec phi = hf("phi-3-mini-4k");
  EXPECT_EQ(phi.slidingWindow, 2047);
  EXPECT_EQ(phi.globalAttentionEvery, 0);
  EXPECT_NEAR(static_cast<double>(countParameters(phi).total), 3.82e9, 0.005 * 3.82e9);
  EXPECT_NEAR(static_cast<double>(countParameters(hf("qwen3-235b-a22b")).total), 235e9, 0.005 * 235e9);
  EXPECT_NEAR(static_cast<double>(countParameters(hf("qwen3-235b-a22b")).active), 22e9, 0.01 * 22e9);
  EXPECT_NEAR(static_cast<double>(countParameters(hf("mixtral-8x22b")).total), 141e9, 0.005 * 141e9);
}

TEST(HfConfig, LayerPatternsColoCannotRepresentAreNamed) {
  Json oss = test::loadJson(test::dataFile("hf/gpt-oss-120b/config.json"));
  oss["layer_types"][3] = "sliding_attention";  // no longer one full layer per period
  auto irregular = modelSpecFromHfConfig(oss, "oss/config.json");
  ASSERT_FALSE(irregular);
  EXPECT_EQ(irregular.error().path, "/layer_types");
  oss["layer_types"] = Json::array({"full_attention"});  // one entry for 36 layers
  auto short_ = modelSpecFromHfConfig(oss, "oss/config.json");
  ASSERT_FALSE(short_);
  EXPECT_EQ(short_.error().path, "/layer_types");
  // Every layer full: plain attention, no window.
  oss["layer_types"] = Json::array();
  for (int i = 0; i < 36; ++i) oss["layer_types"].push_back("full_attention");
  auto full = modelSpecFromHfConfig(oss, "oss/config.json");
  ASSERT_TRUE(full) << full.error().toString();
  EXPECT_EQ(full->slidingWindow, 0);
  // Llama 4's explicit no_rope_layers (1: chunked RoPE layer, 0: NoPE full layer) and a bad one.
  Json scout = test::loadJson(test::dataFile("hf/llama-4-scout-17b-16e/config.json"));
  Json flags = Json::array();
  for (int i = 0; i < 48; ++i) flags.push_back(i % 4 == 3 ? 0 : 1);
  scout["text_config"]["no_rope_layers"] = flags;
  auto listed = modelSpecFromHfConfig(scout, "scout/config.json");
  ASSERT_TRUE(listed) << listed.error().toString();
  EXPECT_EQ(listed->globalAttentionEvery, 4);
  scout["text_config"]["no_rope_layers"][0] = 2;
  auto bad = modelSpecFromHfConfig(scout, "scout/config.json");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().path, "/text_config/no_rope_layers");
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
