// Megatron-LM's launch arguments read into a colo plan (import.h): the model, the parallel layout, the
// execution settings and the stages, each as Megatron-LM documents it, refusing by name what a plan
// cannot represent. The DeepSpeed and Megatron-Bridge readers (import_deepspeed.cpp, import_bridge.cpp)
// build on it; import_common.h shares its argument list and typed reads.
#include "colo/planner/import.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <sstream>

#include "colo/core/library.h"
#include "colo/planner/export_check.h"
#include "import_common.h"

namespace colo::planner {
namespace detail {

// The argument list of a launch: comment lines dropped, everything before the first --flag (the
// launcher and script) ignored.
Result<ParsedArguments> launchArguments(const std::string& text) {
  std::string kept;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] == '#') continue;
    kept += line + "\n";
  }
  // The training script's own arguments, when the launch runs one (`torchrun ... pretrain_gpt.py ARGS`):
  // what follows the first `.py` word that three or more flags follow.
  // (A hand scan over the words, not std::regex: its recursion overflows the stack on a long word.)
  int scripts = 0;
  for (std::size_t at = 0; at < kept.size() && scripts < 8;) {
    while (at < kept.size() && std::isspace(static_cast<unsigned char>(kept[at]))) ++at;
    std::size_t end = at;
    while (end < kept.size() && !std::isspace(static_cast<unsigned char>(kept[end]))) ++end;
    if (end > at + 3 && end < kept.size() && kept.compare(end - 3, 3, ".py") == 0) {
      ++scripts;
      auto parsed = parseArgumentList(kept.substr(end));
      if (parsed && parsed->flags.size() >= 3) return parsed;
    }
    at = end;
  }
  // Else the list starts at the first --flag from which the rest reads as an argument list: a flag inside
  // a quoted assignment (ds_args=" --deepspeed ...", expanded again on the launch line) leaves a quote
  // open, so the next flag is tried (a few of them: each try reads the rest of the file).
  std::optional<Error> first;
  int tries = 0;
  for (std::size_t at = 0; tries < 8 && (at = kept.find("--", at)) != std::string::npos; at += 2) {
    if (at > 0 && !std::isspace(static_cast<unsigned char>(kept[at - 1])) && kept[at - 1] != '"') continue;
    ++tries;
    auto parsed = parseArgumentList(kept.substr(at));
    if (parsed) return parsed;
    if (!first) first = parsed.error();
  }
  if (first) return fail(*first);
  return fail(Error::badInput("no --arguments found in the launch"));
}


// The precision a Megatron launch trains at. fp8 takes effect only through Transformer Engine's modules
// (Megatron-LM's fp8 context is a no-op without them): Megatron's own linears train at the 16-bit
// precision the launch names.
// --fp4-format: NVFP4 (or MXFP4) GEMMs through Transformer Engine (Megatron refuses it with --fp8-format).
DType launchPrecision(const Reader& r, bool transformerEngine) {
  if (transformerEngine && r.has("--fp4-format")) return DType::kFp4;
  if (transformerEngine && r.has("--fp8-format")) return DType::kFp8;
  return r.has("--bf16") ? DType::kBf16 : r.has("--fp16") ? DType::kFp16 : DType::kFp32;
}

}  // namespace detail

namespace {

using detail::launchArguments;
using detail::launchPrecision;
using detail::Reader;

using detail::kMaxDegree;
using detail::kMaxLaunchInteger;

// Megatron's --moe-layer-freq as one flag per layer (1: MoE): an integer N (layer i is MoE when i % N
// is 0), or a Python list expression such as "([0]*3+[1]*58)" or "[0,1,0,1]" (arguments.py evaluates it).
Result<std::vector<int>> moeLayerPattern(const std::string& text, std::int64_t layers) {
  auto bad = [&](const std::string& why) { return Error::badInput("--moe-layer-freq " + text + ": " + why); };
  std::string t;
  for (const char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c)) && c != '"' && c != '\'') t += c;
  }
  if (!t.empty() && std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (t.size() > 6 || std::stoll(t) < 1) return fail(bad("expected a positive integer"));
    const std::int64_t every = std::stoll(t);
    std::vector<int> out;
    for (std::int64_t i = 0; i < layers; ++i) out.push_back(i % every == 0 ? 1 : 0);
    return out;
  }
  std::size_t at = 0;
  const std::size_t limit = static_cast<std::size_t>(std::max<std::int64_t>(layers, 1)) * 4;
  auto number = [&]() -> std::optional<std::int64_t> {
    const std::size_t from = at;
    while (at < t.size() && std::isdigit(static_cast<unsigned char>(t[at])) && at - from < 7) ++at;
    if (at == from) return std::nullopt;
    return std::stoll(t.substr(from, at - from));
  };
  std::function<std::optional<std::vector<int>>(int)> expression = [&](int depth) -> std::optional<std::vector<int>> {
    if (depth > 16) return std::nullopt;
    std::vector<int> out;
    while (true) {
      std::vector<int> atom;
      if (at < t.size() && t[at] == '(') {
        ++at;
        auto inner = expression(depth + 1);
        if (!inner || at >= t.size() || t[at] != ')') return std::nullopt;
        ++at;
        atom = *inner;
      } else if (at < t.size() && t[at] == '[') {
        ++at;
        while (true) {
          const auto v = number();
          if (!v) return std::nullopt;
          atom.push_back(*v != 0 ? 1 : 0);
          if (at < t.size() && t[at] == ',') {
            ++at;
            continue;
          }
          break;
        }
        if (at >= t.size() || t[at] != ']') return std::nullopt;
        ++at;
      } else {
        return std::nullopt;
      }
      if (at < t.size() && t[at] == '*') {
        ++at;
        const auto n = number();
        if (!n || atom.size() * static_cast<std::size_t>(*n) > limit) return std::nullopt;
        std::vector<int> repeated;
        for (std::int64_t k = 0; k < *n; ++k) repeated.insert(repeated.end(), atom.begin(), atom.end());
        atom = std::move(repeated);
      }
      if (out.size() + atom.size() > limit) return std::nullopt;
      out.insert(out.end(), atom.begin(), atom.end());
      if (at < t.size() && t[at] == '+') {
        ++at;
        continue;
      }
      return out;
    }
  };
  auto out = expression(0);
  if (!out || at != t.size()) return fail(bad("expected an integer or a list expression such as ([0]*3+[1]*58)"));
  if (static_cast<std::int64_t>(out->size()) != layers) {
    return fail(bad("gives " + std::to_string(out->size()) + " layers, the model has " + std::to_string(layers)));
  }
  return *out;
}

// The architecture stated by Megatron's arguments (when no model is given).
Result<ModelSpec> megatronModel(const Reader& r) {
  // Megatron-LM spells it RMSNorm, Megatron-DeepSpeed rmsnorm.
  std::string normalization = r.text("--normalization").value_or("LayerNorm");
  std::transform(normalization.begin(), normalization.end(), normalization.begin(), [](unsigned char c) { return std::tolower(c); });
  const bool rmsNorm = normalization == "rmsnorm";
  const bool llama = r.has("--swiglu") && rmsNorm;
  auto preset = familyPreset(llama ? "llama" : "gpt");
  ModelSpec s = *preset;
  s.name = "imported";
  s.source = "imported from Megatron-LM arguments";
  COLO_TRY(layers, r.integer("--num-layers", 0));
  COLO_TRY(hidden, r.integer("--hidden-size", 0));
  COLO_TRY(heads, r.integer("--num-attention-heads", 0));
  if (layers == 0 || hidden == 0 || heads == 0) {
    return fail(Error::badInput("the arguments do not state the model (--num-layers, --hidden-size, --num-attention-heads): pass --model"));
  }
  s.numLayers = layers;
  s.hiddenSize = hidden;
  s.numAttentionHeads = heads;
  COLO_TRY(ffn, r.integer("--ffn-hidden-size", 4 * hidden));
  s.ffnHiddenSize = ffn;
  if (r.has("--group-query-attention")) {
    COLO_TRY(groups, r.integer("--num-query-groups", heads));
    s.numKvHeads = groups;
  } else if (r.has("--num-key-value-heads")) {  // Megatron-DeepSpeed's grouped-query attention
    COLO_TRY(groups, r.integer("--num-key-value-heads", heads));
    s.numKvHeads = groups;
  }
  COLO_TRY(kvChannels, r.integer("--kv-channels", 0));
  s.headDim = kvChannels;
  COLO_TRY(vocab, r.integer("--vocab-size", 0));
  COLO_TRY(padded, r.integer("--padded-vocab-size", vocab));
  if (padded == 0) {
    return fail(Error::badInput("the arguments do not state the vocabulary (Megatron reads it from the tokenizer): pass --model, "
                                "or add --vocab-size to the arguments"));
  }
  s.vocabSize = padded;
  // Megatron's validate_args: without --max-position-embeddings, the sequence length.
  COLO_TRY(seqLength, r.integer("--seq-length", 0));
  COLO_TRY(maxPos, r.integer("--max-position-embeddings", seqLength));
  s.maxPositionEmbeddings = maxPos;
  // Megatron-DeepSpeed: --use-rotary-position-embeddings, its theta --rotary-position-embeddings-theta.
  const std::string position =
      r.text("--position-embedding-type").value_or(r.has("--use-rotary-position-embeddings") ? "rope" : "learned_absolute");
  s.positionEmbedding = position == "rope" ? PositionEmbedding::kRope : position == "none" ? PositionEmbedding::kNone
                                                                                           : PositionEmbedding::kLearned;
  COLO_TRY(deepspeedBase, r.number("--rotary-position-embeddings-theta", 10000));
  COLO_TRY(base, r.number("--rotary-base", deepspeedBase));
  s.ropeTheta = base;
  COLO_TRY(percent, r.number("--rotary-percent", 1.0));
  s.rotaryFraction = percent;
  s.norm = rmsNorm ? NormKind::kRmsNorm : NormKind::kLayerNorm;
  // --quick-geglu: a gated unit with quick GELU (gated_linear_unit, GPT-OSS's examples/gptoss).
  s.activation = r.has("--swiglu") ? Activation::kSwiGlu : r.has("--quick-geglu") ? Activation::kGeGlu : Activation::kGelu;
  const bool bias = !r.has("--disable-bias-linear");
  s.qkvBias = s.attentionOutputBias = s.mlpBias = bias;
  s.tieWordEmbeddings = !r.has("--untie-embeddings-and-output-weights");
  COLO_TRY(dropout, r.number("--hidden-dropout", 0.1));
  s.dropout = dropout;
  s.qkNorm = r.has("--qk-layernorm");
  s.attentionSinks = r.text("--softmax-type") == "learnable";
  if (const auto window = r.text("--window-size")) {
    // (left, right): a query sees `left` keys before it and itself, Hugging Face's sliding_window of
    // left + 1 (GPT-OSS: 128 there, --window-size 127,0 in Megatron-LM's examples/gptoss).
    const long long left = std::strtoll(window->c_str(), nullptr, 10);
    s.slidingWindow = left >= 0 && left < (1LL << 40) ? left + 1 : left;  // out of range: validateModelSpec names it
    COLO_TRY(every, r.integer("--window-attn-skip-freq", 0));
    s.globalAttentionEvery = every;
  }
  if (r.has("--num-experts")) {
    COLO_TRY(experts, r.integer("--num-experts", 0));
    COLO_TRY(topk, r.integer("--moe-router-topk", 2));
    COLO_TRY(expertFfn, r.integer("--moe-ffn-hidden-size", 0));
    COLO_TRY(shared, r.integer("--moe-shared-expert-intermediate-size", 0));
    s.moe.numExperts = experts;
    s.moe.topK = topk;
    s.moe.expertFfnHiddenSize = expertFfn;
    s.moe.sharedExpertFfnHiddenSize = shared;
    COLO_TRY(groups, r.integer("--moe-router-num-groups", 0));
    COLO_TRY(groupTopK, r.integer("--moe-router-group-topk", 0));
    s.moe.routingGroups = groups;
    s.moe.routingGroupTopK = groupTopK;
    if (const auto freq = r.text("--moe-layer-freq")) {
      if (auto set = setMegatronMoeLayers(s.moe, *freq, layers); !set) return fail(set.error());
    }
  }
  COLO_TRY(mtp, r.integer("--mtp-num-layers", 0));
  s.mtpLayers = mtp;
  if (r.has("--multi-latent-attention")) {
    COLO_TRY(q, r.integer("--q-lora-rank", 0));
    COLO_TRY(kv, r.integer("--kv-lora-rank", 512));
    COLO_TRY(qk, r.integer("--qk-head-dim", 128));
    COLO_TRY(rope, r.integer("--qk-pos-emb-head-dim", 64));
    COLO_TRY(v, r.integer("--v-head-dim", 128));
    s.mla = MlaSpec{q, kv, qk, rope, v};
    s.numKvHeads = 0;
  }
  if (auto valid = validateModelSpec(s, "the imported arguments"); !valid) return fail(valid.error());
  return s;
}

// The stated model must be the one the arguments describe.
Result<void> matchesModel(const Reader& r, const ModelSpec& s) {
  for (const auto& [flag, value] : {std::pair{"--num-layers", s.numLayers}, std::pair{"--hidden-size", s.hiddenSize},
                                    std::pair{"--num-attention-heads", s.numAttentionHeads},
                                    std::pair{"--ffn-hidden-size", s.ffnHiddenSize},
                                    std::pair{"--num-query-groups", s.kvHeads()}}) {
    COLO_TRY(given, r.integer(flag, value));
    if (given != value) {
      return fail(Error::badInput(std::string(flag) + " " + std::to_string(given) + " does not match the model " + s.name +
                                  " (" + std::to_string(value) + ")"));
    }
  }
  return {};
}

// Layers per chunk of a --pipeline-model-parallel-layout ("Et*9|t*10|...|t*9L"; E, L and m carry no
// decoder layers). Groups "(...)*N" are expanded.
Result<std::vector<std::int64_t>> layoutChunks(const std::string& layout) {
  std::string flat;
  // Expand "(x)*N" groups (innermost first).
  flat = layout;
  for (std::size_t open; (open = flat.rfind('(')) != std::string::npos;) {
    const auto close = flat.find(')', open);
    if (close == std::string::npos || close + 1 >= flat.size() || flat[close + 1] != '*') {
      return fail(Error::badInput("--pipeline-model-parallel-layout: unbalanced group in \"" + layout + "\""));
    }
    char* end = nullptr;
    const long long n = std::strtoll(flat.c_str() + close + 2, &end, 10);
    if (n <= 0 || n > 100000) return fail(Error::badInput("--pipeline-model-parallel-layout: bad repeat in \"" + layout + "\""));
    std::string body = flat.substr(open + 1, close - open - 1), repeated;
    if (body.size() * static_cast<std::size_t>(n) > 100000) {
      return fail(Error::badInput("--pipeline-model-parallel-layout: \"" + layout + "\" expands to more than 100,000 characters"));
    }
    for (long long k = 0; k < n; ++k) repeated += body;
    flat = flat.substr(0, open) + repeated + std::string(end);
  }
  std::vector<std::int64_t> chunks{0};
  for (std::size_t i = 0; i < flat.size(); ++i) {
    const char c = flat[i];
    if (c == '|') {
      if (i + 1 < flat.size()) chunks.push_back(0);  // a trailing "|" ends the last chunk
    } else if (c == 't') {
      std::int64_t n = 1;
      if (i + 1 < flat.size() && flat[i + 1] == '*') {
        char* end = nullptr;
        n = std::strtoll(flat.c_str() + i + 2, &end, 10);
        i = static_cast<std::size_t>(end - flat.c_str()) - 1;
      }
      if (n < 0 || n > kMaxLaunchInteger || chunks.back() > kMaxLaunchInteger) {
        return fail(Error::badInput("--pipeline-model-parallel-layout: a repeat of " + std::to_string(n) + " layers in \"" + layout + "\""));
      }
      chunks.back() += n;
    } else if (c != 'E' && c != 'L' && c != 'm' && c != ' ') {
      return fail(Error::badInput("--pipeline-model-parallel-layout: unknown item '" + std::string(1, c) + "' in \"" + layout + "\""));
    }
  }
  return chunks;
}

// What Megatron splits over the pipeline: the layers, and the embedding and the loss as a layer each
// under --account-for-embedding/loss-in-pipeline-split (get_num_layers_to_build).
std::int64_t splitUnits(const Reader& r, std::int64_t layers) {
  return layers + (r.has("--account-for-embedding-in-pipeline-split") ? 1 : 0) + (r.has("--account-for-loss-in-pipeline-split") ? 1 : 0);
}

// The plan's stages: a layout, Megatron's uneven first/last stage, else even; recompute as the arguments say.
Result<std::vector<StagePlan>> megatronStages(const Reader& r, const Plan& p) {
  const std::int64_t layers = p.model.numLayers();
  const std::int64_t chunks = p.parallel.pp * p.parallel.virtualStages;
  RecomputePolicy policy = RecomputePolicy::kNone;
  // --checkpoint-activations (Megatron-LM until 2021, Megatron-DeepSpeed still: its _checkpointed_forward
  // runs before any --recompute-granularity) recomputes every layer whole.
  const std::string granularity = r.has("--checkpoint-activations")
                                      ? "full"
                                      : r.text("--recompute-granularity").value_or(
                                            r.has("--recompute-activations") || r.has("--moe-layer-recompute") ? "selective" : "");
  if (granularity == "selective") policy = RecomputePolicy::kSelective;
  if (granularity == "full") policy = RecomputePolicy::kFull;
  std::vector<StagePlan> stages = uniformStages(layers, chunks, policy);
  // --account-for-embedding/loss-in-pipeline-split: the embedding and the loss each count as a layer
  // in the split, and the first (last) chunk builds one transformer layer fewer, none when it holds
  // only that (megatron/core/transformer/transformer_block.py, get_num_layers_to_build).
  const bool embeddingCounts = r.has("--account-for-embedding-in-pipeline-split");
  const bool lossCounts = r.has("--account-for-loss-in-pipeline-split");
  if ((embeddingCounts || lossCounts) && p.parallel.pp > 1 && !r.has("--pipeline-model-parallel-layout")) {
    const std::int64_t units = splitUnits(r, layers);
    if (units % p.parallel.pp != 0 || (units / p.parallel.pp) % p.parallel.virtualStages != 0) {
      return fail(Error::badInput("--account-for-embedding/loss-in-pipeline-split: " + std::to_string(layers) + " layers and " +
                                  std::to_string(units - layers) + " more for the embedding and loss do not split evenly over pp " +
                                  std::to_string(p.parallel.pp) + " x virtual stages " + std::to_string(p.parallel.virtualStages) +
                                  " (Megatron asserts it)"));
    }
    for (auto& st : stages) st.layers = units / chunks;
    if (embeddingCounts) stages.front().layers -= 1;
    if (lossCounts) stages.back().layers -= 1;
  }
  if (const auto layout = r.text("--pipeline-model-parallel-layout")) {
    COLO_TRY(perChunk, layoutChunks(*layout));
    if (static_cast<std::int64_t>(perChunk.size()) != chunks) {
      return fail(Error::badInput("--pipeline-model-parallel-layout has " + std::to_string(perChunk.size()) + " chunks, pp x virtual stages is " +
                                  std::to_string(chunks)));
    }
    for (std::size_t c = 0; c < perChunk.size(); ++c) stages[c].layers = perChunk[c];
  }
  COLO_TRY(first, r.integer("--decoder-first-pipeline-num-layers", 0));
  COLO_TRY(last, r.integer("--decoder-last-pipeline-num-layers", 0));
  if ((first > 0 || last > 0) && p.parallel.virtualStages == 1 && p.parallel.pp > 1) {
    const std::int64_t middleStages = p.parallel.pp - (first > 0) - (last > 0);
    const std::int64_t middleLayers = layers - first - last;
    if (middleLayers < 0 || (middleStages > 0 && middleLayers % middleStages != 0)) {
      return fail(Error::badInput("--decoder-first/last-pipeline-num-layers " + std::to_string(first) + "/" + std::to_string(last) +
                                  " leave " + std::to_string(middleLayers) + " layers that do not split over " +
                                  std::to_string(middleStages) + " stages"));
    }
    for (std::int64_t s = 0; s < p.parallel.pp; ++s) {
      std::int64_t n = middleStages > 0 ? middleLayers / middleStages : 0;
      if (s == 0 && first > 0) n = first;
      if (s == p.parallel.pp - 1 && last > 0) n = last;
      stages[static_cast<std::size_t>(s)].layers = n;
    }
  }
  COLO_TRY(recomputeLayers, r.integer("--recompute-num-layers", 0));
  for (auto& st : stages) {
    st.recompute = policy;
    st.recomputeLayers = policy == RecomputePolicy::kNone ? 0
                         : policy == RecomputePolicy::kFull && recomputeLayers > 0 && r.text("--recompute-method") == "block"
                             ? std::min(recomputeLayers, st.layers)
                             : st.layers;
  }
  return stages;
}


}  // namespace

Result<void> setMegatronMoeLayers(MoeSpec& moe, const std::string& freq, std::int64_t layers) {
  COLO_TRY(pattern, moeLayerPattern(freq, layers));
  // colo's form: leading dense layers, then one MoE layer in every period of layerFrequency layers, at
  // layerPhase (Megatron's integer N: layers 0, N, 2N, ...). The leading dense layers are those before
  // the first MoE one; the first frequency and phase that give the pattern are kept.
  const std::int64_t dense = std::find(pattern.begin(), pattern.end(), 1) - pattern.begin();
  for (std::int64_t every = 1; every <= std::min<std::int64_t>(layers, 64); ++every) {
    for (std::int64_t phase = -1; phase < every - 1; ++phase) {  // phase every - 1 is the default, -1
      MoeSpec m = moe;
      m.firstDenseLayers = dense;
      m.layerFrequency = every;
      m.layerPhase = phase;
      bool same = true;
      for (std::int64_t l = 0; l < layers && same; ++l) same = m.isMoeLayer(l) == (pattern[static_cast<std::size_t>(l)] != 0);
      if (same) {
        moe = m;
        return {};
      }
    }
  }
  return fail(Error::badInput("--moe-layer-freq " + freq + ": colo holds leading dense layers then one MoE layer in every n, "
                              "not this pattern"));
}

Result<ImportFormat> parseImportFormat(const std::string& name) {
  if (name == "megatron") return ImportFormat::kMegatron;
  if (name == "megatron-bridge") return ImportFormat::kMegatronBridge;
  if (name == "deepspeed") return ImportFormat::kDeepSpeed;
  if (name == "colossalai") return ImportFormat::kColossalAi;
  if (name == "torchtitan") return ImportFormat::kTorchtitan;
  return fail(Error::badInput("unknown import format \"" + name + "\" (expected megatron, megatron-bridge, deepspeed, colossalai or torchtitan)"));
}

namespace {

// Megatron-LM's parallel degrees, the data-parallel size the cluster leaves, virtual stages and schedule.
Result<void> megatronParallel(const Reader& r, Plan& p) {
  auto& q = p.parallel;
  COLO_TRY(tp, r.integer("--tensor-model-parallel-size", 1, kMaxDegree));
  COLO_TRY(pp, r.integer("--pipeline-model-parallel-size", 1, kMaxDegree));
  COLO_TRY(cp, r.integer("--context-parallel-size", 1, kMaxDegree));
  COLO_TRY(ep, r.integer("--expert-model-parallel-size", 1, kMaxDegree));
  COLO_TRY(sp, r.integer("--ds-sequence-parallel-size", 1, kMaxDegree));  // Megatron-DeepSpeed's Ulysses
  q.tp = std::max<std::int64_t>(1, tp);
  q.pp = std::max<std::int64_t>(1, pp);
  q.cp = std::max<std::int64_t>(1, std::max(cp, sp));
  q.ep = std::max<std::int64_t>(1, ep);
  if (sp > 1) p.execution.cpCommType = CpCommType::kAllToAll;
  COLO_TRY(etp, r.integer("--expert-tensor-parallel-size", 0, kMaxDegree));
  if (etp > 0 && etp != q.tp) q.etp = etp;
  q.sequenceParallel = r.has("--sequence-parallel") && q.tp > 1;
  if (r.has("--use-tp-pp-dp-mapping")) q.rankOrder = {"tp", "cp", "pp", "dp"};
  const std::int64_t world = p.cluster.totalGpus();
  if (world % (q.tp * q.pp * q.cp) != 0) {
    return fail(Error::badInput("the cluster's " + std::to_string(world) + " GPUs are not a multiple of tp x pp x cp = " +
                                std::to_string(q.tp * q.pp * q.cp) + " (--gpus sets the job's size)"));
  }
  q.dp = world / (q.tp * q.pp * q.cp);
  const std::int64_t layers = p.model.numLayers();
  COLO_TRY(perVirtual, r.integer("--num-layers-per-virtual-pipeline-stage", 0));
  COLO_TRY(virtualStages, r.integer("--num-virtual-stages-per-pipeline-rank", 1, kMaxDegree));
  // Megatron counts the embedding and the loss among the layers here when they count in the split.
  const std::int64_t units = splitUnits(r, layers);
  q.virtualStages = perVirtual > 0 && units % (q.pp * perVirtual) == 0 ? units / (q.pp * perVirtual) : std::max<std::int64_t>(1, virtualStages);
  if (const auto layout = r.text("--pipeline-model-parallel-layout")) {
    auto perChunk = layoutChunks(*layout);
    if (!perChunk) return fail(perChunk.error());
    const auto n = static_cast<std::int64_t>(perChunk->size());
    if (n % q.pp != 0) {
      return fail(Error::badInput("--pipeline-model-parallel-layout: " + std::to_string(n) + " chunks are not a multiple of pp " + std::to_string(q.pp)));
    }
    q.virtualStages = n / q.pp;
  }
  p.schedule = q.virtualStages > 1 ? Schedule::kInterleaved : Schedule::kOneFOneB;
  // Megatron-LM overlaps the interleaved schedule's sends and receives unless told not to.
  p.execution.overlapP2pComm = !r.has("--no-overlap-p2p-communication");
  return {};
}

// The attention kernels, the overlaps and the MoE dispatcher, as Megatron-LM's defaults leave them.
Result<void> megatronOverlaps(const Reader& r, Plan& p) {
  const std::string backend = r.text("--attention-backend").value_or("auto");
  p.execution.flashAttention = backend != "unfused" && backend != "local";
  // flash: the flash-attn package's kernels (FlashAttention-2 as pip installs it); auto and fused:
  // Transformer Engine's choice, cuDNN's fused attention from Hopper on.
  p.execution.flashAttention2 = backend == "flash";
  p.execution.overlapGradReduce = r.has("--overlap-grad-reduce");
  p.execution.overlapParamGather = r.has("--overlap-param-gather");
  p.execution.tpCommOverlap = r.has("--tp-comm-overlap");
  // The flex dispatcher runs DeepEP (its default backend, or --moe-enable-deepep) or NVIDIA's HybridEP,
  // both hierarchical (one network copy per token and node); ncclep is costed as plain all-to-alls.
  // Megatron-Core's --moe-enable-deepep sets the backend to deepep and refuses it beside hybridep.
  std::string flexBackend = r.text("--moe-flex-dispatcher-backend").value_or("deepep");
  if (r.has("--moe-enable-deepep")) {
    if (flexBackend == "hybridep") {
      return fail(Error::badInput("--moe-enable-deepep with --moe-flex-dispatcher-backend hybridep: Megatron-Core runs one flex "
                                  "backend (the flag sets deepep)"));
    }
    flexBackend = "deepep";
  }
  if (r.text("--moe-token-dispatcher-type").value_or("allgather") == "flex") {
    // A backend colo does not cost apart (ncclep) stays plain all-to-alls.
    if (auto dispatcher = parseMoeDispatcher(flexBackend)) p.execution.moeDispatcher = *dispatcher;
  }
  p.execution.epCommOverlap = r.has("--overlap-moe-expert-parallel-comm");
  return {};
}

// Gradient accumulation and its checks, and what Transformer Engine (or the local layer spec) fuses.
Result<void> megatronKernels(const Reader& r, Plan& p) {
  p.execution.gradAccumulation = r.has("--no-gradient-accumulation-fusion") ? GradAccumulation::kMainGrad : GradAccumulation::kFused;
  // Megatron-LM checks each gradient bucket for NaN before reducing it unless told not to, and turns the
  // check off under fp16 with a dynamic loss scale (no --loss-scale), whose overflows are expected
  // (megatron/training/arguments.py, validate_args).
  p.execution.gradNanCheck = !r.has("--no-check-for-nan-in-loss-and-grad") && !(r.has("--fp16") && !r.has("--loss-scale"));
  // Megatron-LM builds its layers from Transformer Engine unless told otherwise (--transformer-impl,
  // default transformer_engine): TE returns the attention input projection's bias gradient from its
  // GEMM, and (TE 2.3 on, April 2025) keeps one placeholder weight gradient per weight shape under
  // gradient-accumulation fusion (docs/costmodel.md, "Bias gradients" and "Placeholder weight gradients").
  const std::string impl = r.text("--transformer-impl").value_or("transformer_engine");
  if (impl != "transformer_engine" && impl != "local" && impl != "inference_optimized") {
    return fail(Error::badInput("--transformer-impl: '" + impl + "' is not one of local, transformer_engine, inference_optimized"));
  }
  p.execution.fusedBiasGrad = impl == "transformer_engine";
  // --moe-grouped-gemm runs the experts through Transformer Engine's GroupedLinear ("launch multiple
  // local GEMM kernels in multiple streams", its help text); the legacy GroupedMLP is one grouped kernel.
  p.execution.teGroupedGemm = impl == "transformer_engine" && r.has("--moe-grouped-gemm") && !r.has("--moe-use-legacy-grouped-gemm");
  // Megatron-LM fuses the rotary embedding and the bias-SwiGLU unless told not to (--no-rope-fusion,
  // --no-bias-swiglu-fusion): unfused, they run as eager elementwise kernels. Its RMSNorm is Transformer
  // Engine's fused kernel, but the local layer spec builds torch.nn.RMSNorm (WrappedTorchNorm: its
  // LocalSpecProvider picks it for RMSNorm), PyTorch's eager composite.
  p.execution.unfused.rotary = r.has("--no-rope-fusion");
  p.execution.unfused.gatedActivation = r.has("--no-bias-swiglu-fusion");
  p.execution.unfused.rmsNorm = p.execution.unfused.finalNorm =
      impl == "local" && r.text("--normalization").value_or("LayerNorm") == "RMSNorm";
  p.execution.teDummyWgrads = p.execution.fusedBiasGrad && p.execution.gradAccumulation == GradAccumulation::kFused;
  return {};
}

// Precision and Transformer Engine's recipe, quantized weights, the gradient buffer's type, the loss.
Result<void> megatronPrecision(const Reader& r, Plan& p) {
  p.precision = launchPrecision(r, p.execution.fusedBiasGrad);
  // Transformer Engine's recipe: --fp8-recipe mxfp8 is MXFP8 block scaling (Blackwell); delayed (the
  // default), tensorwise and blockwise keep weight copies colo counts alike (docs/costmodel.md,
  // "Transformer Engine's quantized weights").
  if (p.precision == DType::kFp8 && r.text("--fp8-recipe").value_or("delayed") == "mxfp8") {
    if (!p.cluster.gpu.hasPeak(DType::kFp4)) {
      return fail(Error::badInput("--fp8-recipe mxfp8: MXFP8 block scaling needs a Blackwell GPU (Transformer Engine runs it on "
                                  "compute capability 10.0 or later), and the cluster's GPU is " + p.cluster.gpu.name));
    }
    p.execution.float8Recipe = Float8Recipe::kMxfp8;
  }
  // --fp8-output-proj (TransformerConfig.fp8_output_proj): the output layer is a TE linear under MXFP8.
  // What Megatron-Core refuses with it is checked once the whole plan is read (fp8OutputProjRefusal).
  p.execution.fp8OutputProj = r.has("--fp8-output-proj");
  // --fp8-param-gather (--fp4-param-gather under fp4): the weights are TE's quantized tensors. Megatron-LM
  // refuses it without the distributed optimizer or FSDP (arguments.py). colo's ZeRO-3 keeps 16-bit
  // weights, so under FSDP the flag is not represented (PyTorch's FSDP2 with TE 2 turns it off anyway).
  const char* gatherFlag = p.precision == DType::kFp8 ? "--fp8-param-gather" : p.precision == DType::kFp4 ? "--fp4-param-gather" : nullptr;
  if (gatherFlag && r.has(gatherFlag)) {
    if (p.zeroStage == 0) {
      return fail(Error::badInput(std::string(gatherFlag) + " needs --use-distributed-optimizer (or FSDP): Megatron-LM refuses it without"));
    }
    p.execution.quantizedParams = p.zeroStage < 3;
  }
  // --grad-reduce-in-bf16: the gradient buffer in bf16 (bf16 training; fp16's is 16-bit anyway).
  p.execution.gradReduceBf16 =
      r.has("--grad-reduce-in-bf16") && (p.precision == DType::kBf16 || quantizedGemms(p.precision));
  // --cross-entropy-loss-fusion runs Megatron-Core's native fusion (the unfused loss's fp32 passes,
  // compiled) unless --cross-entropy-fusion-impl te picks Transformer Engine's, which writes the
  // gradient over the 16-bit logits in place (Megatron-LM refuses that pair from mid-2026 on).
  if (r.has("--cross-entropy-loss-fusion")) {
    if (r.text("--cross-entropy-fusion-impl").value_or("native") == "te") p.execution.fusedCrossEntropy = p.execution.crossEntropyInPlace = true;
    else p.execution.nativeFusedCrossEntropy = true;
  }
  return {};
}

// The context-parallel exchange, what selective recompute re-runs, and offload.
Result<void> megatronRecomputeAndOffload(const Reader& r, Plan& p) {
  if (const auto type = r.text("--cp-comm-type")) {
    auto parsedType = parseCpCommType(*type);
    if (!parsedType) return fail(Error::badInput("--cp-comm-type: " + parsedType.error().message));
    p.execution.cpCommType = *parsedType;
  }
  // Megatron reads the sizes only for a2a+p2p (and checks their product either way).
  const auto* sizes = r.args.find("--hierarchical-context-parallel-sizes");
  if (sizes && p.execution.cpCommType == CpCommType::kA2aP2p) {
    for (const auto& s : *sizes) {
      char* end = nullptr;
      const long long n = std::strtoll(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || n < 1) return fail(Error::badInput("--hierarchical-context-parallel-sizes: '" + s + "' is not a positive size"));
      p.execution.hierarchicalCpSizes.push_back(n);
    }
  }
  // --recompute-modules (any number of names; core_attn when absent) says what selective recompute
  // re-runs; the deprecated --moe-layer-recompute adds moe (TransformerConfig.__post_init__).
  const auto* modules = r.args.find("--recompute-modules");
  if (modules || r.has("--moe-layer-recompute")) {
    RecomputeModules m = modules ? RecomputeModules::none() : RecomputeModules{};
    if (modules) {
      if (modules->empty()) return fail(Error::badInput("--recompute-modules: needs at least one module name (Megatron's nargs '+')"));
      for (const auto& name : *modules) {
        // Modules of layers colo does not model (gated delta nets, hyper-connections): nothing to re-run.
        if (name == "gdn_norm_out" || name == "gdp_in_proj" || name == "gdp_qkv" || name == "mhc") continue;
        if (!addRecomputeModule(m, name)) {
          return fail(Error::badInput("--recompute-modules: '" + name + "' is not one of core_attn, moe_act, layernorm, "
                                      "mla_up_proj, mlp, moe, shared_experts"));
        }
      }
    }
    if (r.has("--moe-layer-recompute")) m.moe = true;
    p.execution.recomputeModules = m;
  }
  if (r.has("--optimizer-cpu-offload")) {
    COLO_TRY(fraction, r.number("--optimizer-offload-fraction", 1.0));
    p.offload.optimizerFraction = fraction;
  }
  // Activation offload of the first N layers (Megatron-LM turns cpu_offloading on when N > 0).
  COLO_TRY(offloadedLayers, r.integer("--cpu-offloading-num-layers", 0, 1 << 20));
  p.offload.activationLayers = offloadedLayers;
  return {};
}

// Kernels, overlaps, MoE dispatch, gradient accumulation and checks, Transformer Engine, precision, the
// loss, context-parallel exchange and optimizer offload, each as Megatron-LM's defaults leave it.
Result<void> megatronExecution(const Reader& r, Plan& p) {
  for (auto read : {megatronOverlaps, megatronKernels, megatronPrecision, megatronRecomputeAndOffload}) {
    if (auto ok = read(r, p); !ok) return ok;
  }
  return {};
}

}  // namespace

Result<Plan> importMegatron(const std::string& arguments, const ImportContext& context) {
  auto parsed = launchArguments(arguments);
  if (!parsed) return fail(parsed.error());
  const Reader r{*parsed, "Megatron-LM argument"};
  Plan p;
  p.cluster = context.cluster;
  if (context.model) {
    p.model = *context.model;
    if (p.model.spec) {
      if (auto ok = matchesModel(r, *p.model.spec); !ok) return fail(ok.error());
      // Multi-token prediction is the launch's to train (--mtp-num-layers; none without it), whatever the
      // model file carries.
      COLO_TRY(mtp, r.integer("--mtp-num-layers", 0));
      p.model.spec->mtpLayers = mtp;
      // So is the position table's length (--max-position-embeddings): a 2,048-position GPT trained at
      // 32k tokens (Megatron-DeepSpeed's long-sequence examples) has a 32k table.
      COLO_TRY(positions, r.integer("--max-position-embeddings", p.model.spec->maxPositionEmbeddings));
      p.model.spec->maxPositionEmbeddings = positions;
      // And which layers are MoE (--moe-layer-freq), where the launch says.
      if (const auto freq = r.text("--moe-layer-freq"); freq && p.model.spec->moe.enabled()) {
        if (auto set = setMegatronMoeLayers(p.model.spec->moe, *freq, p.model.spec->numLayers); !set) return fail(set.error());
      }
    }
  } else {
    auto spec = megatronModel(r);
    if (!spec) return fail(spec.error());
    p.model.source = ModelSource::kSpec;
    p.model.spec = *spec;
  }
  if (auto parallel = megatronParallel(r, p); !parallel) return fail(parallel.error());
  COLO_TRY(mbs, r.integer("--micro-batch-size", 1));
  COLO_TRY(gbs, r.integer("--global-batch-size", mbs * p.parallel.dp));
  COLO_TRY(seq, r.integer("--seq-length", p.model.defaultSeqLen()));
  p.microBatchSize = std::max<std::int64_t>(1, mbs);
  p.globalBatchSize = gbs;
  p.seqLen = seq;
  p.zeroStage = r.has("--use-distributed-optimizer") ? 1 : 0;
  // Megatron-FSDP (--use-megatron-fsdp, before it --use-custom-fsdp) shards as
  // --data-parallel-sharding-strategy says (Megatron-LM arguments.py; default optim_grads_params):
  // the optimizer states (ZeRO-1), also the gradients (ZeRO-2), also the parameters (ZeRO-3).
  // PyTorch's FSDP2 (--use-torch-fsdp2) shards all three.
  if (r.has("--use-megatron-fsdp") || r.has("--use-custom-fsdp")) {
    const std::string strategy = r.text("--data-parallel-sharding-strategy").value_or("optim_grads_params");
    const std::map<std::string, int> stages{{"no_shard", 0}, {"optim", 1}, {"optim_grads", 2}, {"optim_grads_params", 3}};
    if (!stages.contains(strategy)) {
      return fail(Error::badInput("--data-parallel-sharding-strategy: expected no_shard, optim, optim_grads or optim_grads_params, got \"" +
                                  strategy + "\""));
    }
    p.zeroStage = stages.at(strategy);
  }
  if (r.has("--use-torch-fsdp2")) p.zeroStage = 3;
  if (auto execution = megatronExecution(r, p); !execution) return fail(execution.error());
  auto stages = megatronStages(r, p);
  if (!stages) return fail(stages.error());
  p.stages = *stages;
  p.name = p.model.name() + " (imported from Megatron-LM arguments)";
  if (p.execution.fp8OutputProj) {
    if (auto why = fp8OutputProjRefusal(p)) return fail(Error::badInput("--fp8-output-proj " + *why));
  }
  if (auto valid = validatePlan(p); !valid) return fail(valid.error());
  return p;
}

}  // namespace colo::planner
