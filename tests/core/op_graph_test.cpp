#include "colo/core/op_graph.h"

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include <gtest/gtest.h>

#include "colo/core/library.h"
#include "colo/core/model.h"
#include "core/test_support.h"

namespace colo {
namespace {

ModelSpec libraryModel(const std::string& name) {
  return test::loadModelOrFail(test::dataFile("models/" + name + ".json")).spec.value_or(ModelSpec{});
}

OpGraph build(const ModelSpec& spec, std::int64_t seqLen = 0, std::int64_t batch = 1) {
  auto g = buildOpGraph(spec, GraphOptions{seqLen, batch, 2});
  EXPECT_TRUE(g) << (g ? "" : g.error().toString());
  return g ? *g : OpGraph{};
}

TEST(OpGraph, ParametersSumToTheClosedFormForEveryModel) {
  for (const auto& name : libraryEntries(LibraryKind::kModels)) {
    const ModelSpec spec = libraryModel(name);
    const OpGraph g = build(spec);
    const ParamCount closed = countParameters(spec);
    EXPECT_EQ(g.totals().params, closed.total) << name;
    EXPECT_EQ(g.totals().activeParams, closed.active) << name;
  }
}

// Korthikanti et al. 2022: training model FLOPs per iteration 72*B*s*l*h^2*(1 + s/6h + V/12lh).
TEST(OpGraph, Gpt3FlopsMatchTheMegatronFormula) {
  const ModelSpec spec = libraryModel("gpt3-175b");
  const double s = 2048, l = 96, h = 12288, V = 50257, B = 4;
  const OpGraph g = build(spec, 2048, 4);
  const OpTotals t = g.totals();
  const double expected = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  EXPECT_NEAR((t.gemmFlopsFwd + t.gemmFlopsBwd) / expected, 1.0, 1e-9);
  EXPECT_NEAR(t.gemmFlopsBwd / t.gemmFlopsFwd, 2.0, 1e-12);
}

// Korthikanti et al. 2022, section 4.1: s*b*h*(34 + 5*a*s/h) bytes per layer at 16 bits with dropout.
TEST(OpGraph, GptLayerActivationsMatchKorthikanti) {
  const ModelSpec spec = libraryModel("gpt3-175b");
  const double s = 2048, b = 2, h = 12288, a = 96;
  const OpGraph g = build(spec, 2048, 2);
  const double expected = s * b * h * (34 + 5 * a * s / h);
  EXPECT_DOUBLE_EQ(static_cast<double>(g.layerTotals(10).savedBytes), expected);
}

TEST(OpGraph, LlamaLayerActivationsFollowTheGeneralisation) {
  // No dropout (-2 sbh for masks, -as^2b mask, -2as^2b dropout output), GQA (K and V narrower), SwiGLU
  // (gate and up saved: 4 sb*ffn, down input 2 sb*ffn), RMSNorm (inputs 2 sbh each).
  const ModelSpec spec = libraryModel("llama2-70b");
  const double s = 4096, h = 8192, a = 64, g = 8, d = 128, f = 28672;
  const OpGraph graph = build(spec, 4096, 1);
  const double attention = 2 * s * h /*norm*/ + 2 * s * h /*qkv in*/ + 2 * s * (a * d + g * d) /*q,k*/ +
                           2 * a * s * s /*softmax out*/ + 2 * s * g * d /*v*/ + 2 * s * a * d /*out proj in*/;
  const double mlp = 2 * s * h /*norm*/ + 2 * s * h /*gate_up in*/ + 4 * s * f /*gate, up*/ + 2 * s * f /*down in*/;
  EXPECT_DOUBLE_EQ(static_cast<double>(graph.layerTotals(0).savedBytes), attention + mlp);
}

TEST(OpGraph, MoeLayersRouteTopKTokens) {
  const ModelSpec spec = libraryModel("mixtral-8x7b");
  const OpGraph g = build(spec, 4096, 1);
  bool sawExperts = false;
  for (const auto id : g.layerOps(3)) {
    const Op& op = g.op(id);
    if (op.kind == OpKind::kGroupedMatMul) {
      sawExperts = true;
      EXPECT_EQ(op.dim("groups"), 8);
      EXPECT_EQ(op.dim("m"), 4096 * 2);  // top-2
      EXPECT_EQ(op.activeParams * 8, op.params * 2);
      EXPECT_EQ(op.shard, Shard::kExpert);
    }
  }
  EXPECT_TRUE(sawExperts);
  // Active FLOPs per token track active parameters: 2 * active (dense part) per token forward, plus attention.
  const double s = 4096;
  const double attentionCore = 32 * (2 * 2 * s * 4096.0);  // scores + context per token, 32 layers
  const double perToken = g.totals().gemmFlopsFwd / s;
  const double embedding = 32000.0 * 4096;  // lookups cost no FLOPs
  EXPECT_NEAR(perToken, 2 * (12'879'925'248.0 - embedding) + attentionCore, 1e6);
}

TEST(OpGraph, LatentAttentionAndSharedExpertsHaveTheirOwnProducts) {
  // DeepSeek-V3: queries through a 1536-rank pair, keys and values from a 512-rank latent, attention at
  // 192-wide queries and keys and 128-wide values; every MoE layer also runs a shared expert.
  const ModelSpec spec = libraryModel("deepseek-v3");
  const OpGraph g = build(spec, 4096, 1);
  std::map<std::string, const Op*> ops;
  for (const auto id : g.layerOps(3)) ops[g.op(id).name.substr(g.op(id).name.find('.', 7) + 1)] = &g.op(id);
  ASSERT_TRUE(ops.count("attn.q_down") && ops.count("attn.q_up") && ops.count("attn.kv_down") && ops.count("attn.kv_up"));
  EXPECT_EQ(ops["attn.q_down"]->shard, Shard::kReplicated);  // duplicated on every tensor-parallel rank
  EXPECT_EQ(ops["attn.q_up"]->shard, Shard::kHeads);
  EXPECT_EQ(ops["attn.q_up"]->dim("n"), 128 * 192);
  EXPECT_EQ(ops["attn.kv_down"]->dim("n"), 512 + 64);  // the latent and the shared rotary key
  EXPECT_EQ(ops["attn.kv_up"]->dim("n"), 128 * (128 + 128));
  EXPECT_EQ(ops["attn.scores"]->dim("k"), 192);
  EXPECT_EQ(ops["attn.context"]->dim("n"), 128);
  EXPECT_EQ(ops["attn.out"]->dim("k"), 128 * 128);
  ASSERT_TRUE(ops.count("moe.shared.gate_up") && ops.count("moe.shared.down"));
  EXPECT_EQ(ops["moe.shared.gate_up"]->dim("n"), 2 * 2048);
  EXPECT_EQ(ops["moe.shared.down"]->shard, Shard::kRow);
  // Shared experts are active for every token: the active count includes them.
  EXPECT_EQ(g.totals().activeParams, countParameters(spec).active);
  for (const auto id : g.layerOps(0)) EXPECT_EQ(g.op(id).name.find("moe."), std::string::npos);  // first 3 dense
  // A model without a query down-projection (DeepSeek-V2-Lite) has one plain query projection.
  ModelSpec lite = spec;
  lite.mla.qLoraRank = 0;
  const OpGraph gl = build(lite, 1024, 1);
  bool plainQuery = false;
  for (const auto id : gl.layerOps(3)) plainQuery = plainQuery || gl.op(id).name.ends_with(".attn.q");
  EXPECT_TRUE(plainQuery);
  EXPECT_EQ(gl.totals().params, countParameters(lite).total);
}

TEST(OpGraph, SlidingWindowBoundsAttention) {
  ModelSpec spec = libraryModel("llama2-7b");
  spec.slidingWindow = 1024;
  const OpGraph g = build(spec, 4096, 1);
  for (const auto id : g.layerOps(0)) {
    if (g.op(id).name.ends_with("attn.scores")) {
      EXPECT_EQ(g.op(id).dim("n"), 1024);
    }
  }
}

TEST(OpGraph, LocalLayersAttendTheirWindowOrChunkAndGlobalLayersTheSequence) {
  const OpGraph gemma = build(libraryModel("gemma-3-27b"), 32768, 1);
  auto scores = [](const OpGraph& g, std::int64_t layer) -> const Op& {
    for (const auto id : g.layerOps(layer)) {
      if (g.op(id).name.ends_with("attn.scores")) return g.op(id);
    }
    throw std::runtime_error("no attn.scores");
  };
  EXPECT_EQ(scores(gemma, 0).dim("n"), 1024);
  EXPECT_EQ(scores(gemma, 0).dim("window"), 1024);  // a sliding window, costed as a band
  EXPECT_EQ(scores(gemma, 5).dim("n"), 32768);
  EXPECT_EQ(scores(gemma, 5).dim("window", 0), 0);
  // Llama 4: chunks of 8192 keys (a causal block each: no window), a full layer every fourth.
  const OpGraph scout = build(libraryModel("llama4-scout"), 32768, 1);
  EXPECT_EQ(scores(scout, 0).dim("n"), 8192);
  EXPECT_EQ(scores(scout, 0).dim("window", 0), 0);
  EXPECT_EQ(scores(scout, 3).dim("n"), 32768);
  // Gemma's extra norms and per-head query/key norms, GPT-OSS's sinks and router bias are parameters
  // of the graph (ParametersSumToTheClosedFormForEveryModel checks the totals).
  bool qkNorm = false, postNorm = false;
  for (const auto id : gemma.layerOps(0)) {
    qkNorm |= gemma.op(id).name.ends_with("attn.qk_norm");
    postNorm |= gemma.op(id).name.ends_with("mlp_post_norm");
  }
  EXPECT_TRUE(qkNorm);
  EXPECT_TRUE(postNorm);
}

TEST(OpGraph, MultiTokenPredictionAddsALayerAHeadAndALossAfterTheModel) {
  ModelSpec spec = libraryModel("deepseek-v3");
  spec.numLayers = 5;
  const OpGraph plain = build(spec, 4096, 1);
  spec.mtpLayers = 1;
  const OpGraph mtp = build(spec, 4096, 1);
  EXPECT_EQ(mtp.totals().params, countParameters(spec).total);
  EXPECT_EQ(mtp.totals().activeParams, countParameters(spec).active);
  // One MoE layer like the last, the 2h x h projection, and a second pass through the shared head.
  const OpTotals layer = plain.layerTotals(4);
  const double head = 2.0 * 4096 * 7168 * 129280;
  const double projection = 2.0 * 4096 * 7168 * 2 * 7168;
  EXPECT_NEAR(mtp.totals().gemmFlopsFwd - plain.totals().gemmFlopsFwd, layer.gemmFlopsFwd + head + projection,
              1e-9 * mtp.totals().gemmFlopsFwd);
  int losses = 0;
  for (std::size_t v = 0; v < mtp.size(); ++v) losses += mtp.op(v).kind == OpKind::kCrossEntropy;
  EXPECT_EQ(losses, 2);
}

TEST(OpGraph, EdgesFormADagInLayerOrder) {
  const OpGraph g = build(libraryModel("llama3-8b"));
  auto order = g.topologicalOrder();
  ASSERT_TRUE(order);
  ASSERT_EQ(order->size(), g.size());
  std::vector<std::size_t> position(g.size());
  for (std::size_t i = 0; i < order->size(); ++i) position[(*order)[i]] = i;
  for (const auto& [from, to] : g.edges()) EXPECT_LT(position[from], position[to]);
  // Residual edges: every residual add has two inputs.
  for (std::size_t v = 0; v < g.size(); ++v) {
    if (g.op(v).name.ends_with("_residual")) {
      EXPECT_EQ(g.predecessors(v).size(), 2u) << g.op(v).name;
    }
  }
  // Every op but the first is reachable from something.
  std::size_t roots = 0;
  for (std::size_t v = 0; v < g.size(); ++v) roots += g.predecessors(v).empty() ? 1 : 0;
  EXPECT_EQ(roots, 1u);  // the token embedding (RoPE: no position table)
}

TEST(OpGraph, RoundTripsThroughJson) {
  for (const char* name : {"gpt2-small", "mixtral-8x7b", "bert-large", "vit-large"}) {
    const OpGraph g = build(libraryModel(name), 0, 2);
    const Json doc = opGraphToJson(g);
    auto back = opGraphFromJson(doc, "g.json");
    ASSERT_TRUE(back) << back.error().toString();
    EXPECT_TRUE(*back == g) << name;
    EXPECT_EQ(opGraphToJson(*back), doc);
  }
}

TEST(OpGraph, SequenceLengthLimits) {
  auto tooLong = buildOpGraph(libraryModel("gpt2-small"), GraphOptions{2048, 1, 2});
  ASSERT_FALSE(tooLong);
  EXPECT_NE(tooLong.error().message.find("exceeds the learned position table"), std::string::npos);
  auto vit = buildOpGraph(libraryModel("vit-large"), GraphOptions{512, 1, 2});
  ASSERT_FALSE(vit);
  EXPECT_NE(vit.error().message.find("fixed by image_size/patch_size at 197"), std::string::npos);
  EXPECT_TRUE(buildOpGraph(libraryModel("llama2-7b"), GraphOptions{32768, 1, 2}));  // RoPE: any length
  auto huge = buildOpGraph(libraryModel("llama3-405b"), GraphOptions{1 << 20, 1 << 20, 2});
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().message.find("too large"), std::string::npos);
}

TEST(OpGraph, CheckingWithoutBuildingGivesBuildingsAnswer) {
  // validatePlan checks with checkGraphOptions; it must refuse exactly what buildOpGraph refuses.
  struct Case {
    const char* model;
    GraphOptions options;
  };
  for (const auto& [name, options] : std::vector<Case>{{"gpt2-small", {2048, 1, 2}}, {"gpt2-small", {1024, 4, 2}},
                                                       {"vit-large", {512, 1, 2}}, {"vit-large", {0, 8, 2}},
                                                       {"llama3-405b", {1 << 20, 1 << 20, 2}}, {"llama2-7b", {32768, 1, 2}},
                                                       {"llama2-7b", {-1, 1, 2}}, {"llama2-7b", {64, 0, 2}}}) {
    const ModelSpec spec = libraryModel(name);
    auto built = buildOpGraph(spec, options);
    auto checked = checkGraphOptions(spec, options);
    ASSERT_EQ(static_cast<bool>(built), static_cast<bool>(checked)) << name << " " << options.seqLen;
    if (!built) {
      EXPECT_EQ(built.error().message, checked.error().message);
    }
  }
}

Json tinyGraph() {
  return Json::parse(R"({
    "format": "colo.opgraph/1", "name": "tiny", "seq_len": 128, "num_layers": 1,
    "ops": [
      {"id": 10, "name": "in", "kind": "embedding", "layer": -1, "params": 1000, "saved_bytes": 512},
      {"id": 20, "name": "fc", "kind": "matmul", "layer": 0, "dims": {"m": 128, "n": 64, "k": 64},
       "params": 4096, "flops_fwd": 1048576, "flops_bwd": 2097152, "saved_bytes": 16384},
      {"id": 30, "name": "loss", "kind": "cross_entropy", "layer": 1, "flops_fwd": 100}
    ],
    "edges": [[10, 20], [20, 30]]
  })");
}

TEST(OpGraph, RawGraphsLoadAndScaleWithBatch) {
  auto model = modelFromJson(tinyGraph(), "tiny.json");
  ASSERT_TRUE(model) << model.error().toString();
  EXPECT_EQ(model->source, ModelSource::kOpGraph);
  EXPECT_EQ(model->graph->totals().params, 5096);
  auto scaled = model->expand(GraphOptions{0, 4, 2});
  ASSERT_TRUE(scaled);
  EXPECT_DOUBLE_EQ(scaled->totals().gemmFlopsFwd, 4 * 1048576.0);
  EXPECT_EQ(scaled->totals().params, 5096);  // parameters do not scale
  auto otherLength = model->expand(GraphOptions{256, 1, 2});
  ASSERT_FALSE(otherLength);
  EXPECT_NE(otherLength.error().message.find("recorded at sequence length 128"), std::string::npos);
}

TEST(OpGraph, BadRawGraphsAreRejectedPrecisely) {
  struct Case {
    std::function<void(Json&)> edit;
    std::string path;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j["edges"].push_back({20, 99}); }, "/edges/2/1", "no op has id 99"},
      {[](Json& j) { j["edges"].push_back({30, 10}); }, "/edges", "cycle"},
      {[](Json& j) { j["ops"][1]["id"] = 10; }, "/ops/1/id", "duplicate op id 10"},
      {[](Json& j) { j["ops"][1]["dims"].erase("k"); }, "/ops/1/dims", "\"k\" is missing"},
      {[](Json& j) { j["ops"][1]["kind"] = "conv"; }, "/ops/1/kind", "unknown value \"conv\""},
      {[](Json& j) { j["ops"][1]["layer"] = 5; }, "/ops/1/layer", "between -1 and num_layers 1"},
      {[](Json& j) { j["ops"][1]["flops_fwd"] = -1; }, "/ops/1/flops_fwd", "must not be negative"},
      {[](Json& j) { j["ops"][1]["active_params"] = 5000; }, "/ops/1/active_params", "must not exceed"},
      {[](Json& j) { j["ops"][1]["flop"] = 1; }, "/ops/1/flop", "unknown field"},
      {[](Json& j) { j["edges"][0] = {10}; }, "/edges/0", "pair of op ids"},
      {[](Json& j) { j["ops"] = Json::array(); }, "/ops", "at least one op"},
  };
  for (const auto& c : cases) {
    Json doc = tinyGraph();
    c.edit(doc);
    auto r = opGraphFromJson(doc, "g.json");
    ASSERT_FALSE(r) << c.path;
    EXPECT_EQ(r.error().path, c.path) << r.error().toString();
    EXPECT_NE(r.error().message.find(c.fragment), std::string::npos) << r.error().toString();
    EXPECT_EQ(r.error().file, "g.json");
  }
}

}  // namespace
}  // namespace colo

namespace colo {
namespace {

TEST(OpGraph, GemmaTwoCapsItsLogitsAndLlamaFourNormsQueriesAndKeysOnItsRopeLayers) {
  // Gemma 2: c * tanh(logits / c) over the whole [tokens x vocabulary] tensor, its output kept for the
  // backward; Gemma 3 configs set no cap. Llama 4: a weightless L2 norm of q and k on the chunked
  // (RoPE) layers only, not on every fourth (NoPE) layer.
  const ModelSpec gemma2 = test::loadModelOrFail(test::dataFile("hf/gemma-2-9b/config.json")).spec.value_or(ModelSpec{});
  const ModelSpec gemma3 = test::loadModelOrFail(test::dataFile("hf/gemma-3-27b/config.json")).spec.value_or(ModelSpec{});
  EXPECT_EQ(gemma2.finalLogitSoftcap, 30.0);
  EXPECT_EQ(gemma3.finalLogitSoftcap, 0.0);
  auto count = [](const OpGraph& g, const std::string& suffix, std::int64_t* saved) {
    int n = 0;
    for (std::size_t id = 0; id < g.size(); ++id) {
      if (!g.op(id).name.ends_with(suffix)) continue;
      ++n;
      if (saved) *saved = g.op(id).savedBytes;
    }
    return n;
  };
  std::int64_t capSaved = 0;
  EXPECT_EQ(count(build(gemma2, 4096), "logit_softcap", &capSaved), 1);
  EXPECT_EQ(capSaved, 4096LL * gemma2.vocabSize * 2);
  EXPECT_EQ(count(build(gemma3, 4096), "logit_softcap", nullptr), 0);
  const ModelSpec scout = test::loadModelOrFail(test::dataFile("hf/llama-4-scout-17b-16e/config.json")).spec.value_or(ModelSpec{});
  ASSERT_TRUE(scout.qkL2Norm);
  EXPECT_EQ(count(build(scout, 8192), "qk_l2_norm", nullptr), scout.numLayers * 3 / 4);
  // Weightless: no parameter, so the published count is unchanged; and the trait survives colo.model/1.
  ModelSpec plain = scout;
  plain.qkL2Norm = false;
  EXPECT_EQ(countParameters(plain).total, countParameters(scout).total);
  auto back = modelFromJson(Model{ModelSource::kSpec, "", scout, std::nullopt}.toJson(), "scout.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_TRUE(back->spec->qkL2Norm);
  auto gemmaBack = modelFromJson(Model{ModelSource::kSpec, "", gemma2, std::nullopt}.toJson(), "gemma2.json");
  ASSERT_TRUE(gemmaBack) << gemmaBack.error().toString();
  EXPECT_EQ(gemmaBack->spec->finalLogitSoftcap, 30.0);
  EXPECT_EQ(gemmaBack->spec->attentionLogitSoftcap, 50.0);
}

TEST(OpGraph, GemmaTwoCapsItsAttentionScoresInsideTheAttentionCore) {
  // attn_logit_softcapping 50: an elementwise pass over every layer's scores that keeps its output;
  // Gemma 3 configs set null. No parameter, so the published count is unchanged.
  const ModelSpec gemma2 = test::loadModelOrFail(test::dataFile("hf/gemma-2-9b/config.json")).spec.value_or(ModelSpec{});
  const ModelSpec gemma3 = test::loadModelOrFail(test::dataFile("hf/gemma-3-27b/config.json")).spec.value_or(ModelSpec{});
  EXPECT_EQ(gemma2.attentionLogitSoftcap, 50.0);
  EXPECT_EQ(gemma3.attentionLogitSoftcap, 0.0);
  ModelSpec plain = gemma2;
  plain.attentionLogitSoftcap = 0;
  EXPECT_EQ(countParameters(plain).total, countParameters(gemma2).total);
  const OpGraph capped = build(gemma2, 1024);
  int caps = 0;
  for (std::size_t id = 0; id < capped.size(); ++id) {
    const Op& op = capped.op(id);
    if (!op.name.ends_with("attn.softcap")) continue;
    ++caps;
    // Between the scores and the softmax, over the (possibly windowed) scores of its layer.
    ASSERT_GT(id, 0u);
    EXPECT_TRUE(capped.op(id - 1).name.ends_with("attn.scores"));
    EXPECT_TRUE(capped.op(id + 1).name.ends_with("attn.softmax"));
    EXPECT_EQ(op.savedBytes, capped.op(id + 1).savedBytes);  // the same scores tensor, 16 bits
  }
  EXPECT_EQ(caps, gemma2.numLayers);
}

}  // namespace
}  // namespace colo
