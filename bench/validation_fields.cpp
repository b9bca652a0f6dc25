// A row's hardware and model, read into a library cluster and a model spec (data/validation/README.md).
#include <algorithm>
#include <cmath>
#include <regex>

#include "colo/core/library.h"
#include "colo/core/limits.h"
#include "colo/core/model.h"
#include "colo/planner/import.h"
#include "validation_rows_detail.h"

namespace colo::validation::detail {

// ---- hardware ---------------------------------------------------------------------------------------

// The library cluster whose GPU (and node design) a row's `hardware.gpu` names, and the one whose GPU
// specification matches it best (memory size, PCIe vs SXM).
struct ClusterChoice {
  std::string cluster;
  std::string gpuFrom;
};

std::optional<ClusterChoice> clusterForGpu(const std::string& gpuText, double memoryGb) {
  const std::string g = lower(gpuText);
  if (has(g, "v100")) return ClusterChoice{"dgx1-v100-x4", "dgx1-v100-x4"};
  if (has(g, "a100") || has(g, "a800")) {  // A800: the export A100 (400 GB/s NVLink)
    if (has(g, "pcie")) return ClusterChoice{"dgx-a100-80gb-x128", "a100-pcie-8x"};
    const bool small = has(g, "40gb") || (memoryGb > 0 && memoryGb <= 48);
    return ClusterChoice{"dgx-a100-80gb-x128", small ? "dgx-a100-40gb" : "dgx-a100-80gb-x128"};
  }
  // Grace-Blackwell names hold the Blackwell name ("GB300" holds "B300"): they come first.
  if (has(g, "gb300")) return ClusterChoice{"gb300-nvl72-x8", "gb300-nvl72-x8"};
  if (has(g, "gb200")) return ClusterChoice{"gb200-nvl72-x8", "gb200-nvl72-x8"};
  if (has(g, "b300") || has(g, "blackwell ultra")) return ClusterChoice{"dgx-b300-x64", "dgx-b300-x64"};
  if (has(g, "b200")) return ClusterChoice{"dgx-b200-x64", "dgx-b200-x64"};
  if (has(g, "h200") || has(g, "gh200")) return ClusterChoice{"hgx-h200-x16", "hgx-h200-x16"};  // GH200: HBM3e like H200
  if (has(g, "4090")) return ClusterChoice{"rtx4090-8x", "rtx4090-8x"};
  if (has(g, "h100") || has(g, "h800")) {
    // Meta's Grand Teton H100s (torchtitan's benchmarks): 96 GB HBM2e at a 500 W power limit, an 800
    // TFLOP/s bf16 peak and 2.4 TB/s instead of the SXM5 datasheet's 989 and 3.35 (h100-hbm2e-500w-x64).
    const bool capped = has(g, "hbm2e") || has(g, "500 w") || has(g, "500w") || has(g, "lower tdp");
    return ClusterChoice{"dgx-h100-x64", capped ? "h100-hbm2e-500w-x64" : "dgx-h100-x64"};
  }
  return std::nullopt;
}

struct Network {
  double bytesPerSecondPerGpu = 0;
  LinkKind kind = LinkKind::kInfiniBand;
};

// Per-GPU network bandwidth from a row's `hardware.inter_node` text, e.g. "8x Mellanox 200 Gb/s HDR
// InfiniBand per node", "1x InfiniBand EDR 100 Gb/s per node", "Omni-Path (OPA), 4 links per node",
// "InfiniBand NDR presumed". Link rates: a number in Gb/s, else the named generation (FDR 56, EDR and
// Omni-Path 100, HDR 200, NDR 400 Gb/s). Several links, or "per node", are shared by the node's GPUs;
// a single unqualified link is one per GPU (DGX SuperPOD rail design).
std::optional<Network> parseNetwork(const std::string& raw, std::int64_t gpusPerNode) {
  const std::string t = lower(raw);
  if (t.empty()) return std::nullopt;
  double gbits = 0;
  std::smatch m;
  static const std::regex rate(R"((\d+(?:\.\d+)?)\s*gb(?:it)?(?:/|p)s)");
  static const std::regex terabits(R"((\d+(?:\.\d+)?)\s*tb(?:it)?(?:/|p)s)");  // "3.2 Tb/s per node"
  static const std::regex shortRate(R"((\d+)\s*g(?:be)?\b)");                  // "400G NDR", "100GbE"
  if (std::regex_search(t, m, rate)) gbits = std::stod(m[1]);
  else if (std::regex_search(t, m, terabits)) gbits = std::stod(m[1]) * 1000.0;
  else if (std::regex_search(t, m, shortRate)) gbits = std::stod(m[1]);
  else if (has(t, "ndr")) gbits = 400;
  else if (has(t, "hdr")) gbits = 200;
  else if (has(t, "edr") || has(t, "omni-path") || has(t, "opa")) gbits = 100;
  else if (has(t, "fdr")) gbits = 56;
  if (gbits <= 0) return std::nullopt;
  double count = 0;
  static const std::regex times(R"((\d+)\s*x(?![a-z]))");  // "8x HDR", "8 x 200", "8x400G"
  static const std::regex links(R"((\d+)\s*(?:links|nics|hcas|ports|adapters|rails))");
  if (std::regex_search(t, m, times)) count = std::stod(m[1]);
  else if (std::regex_search(t, m, links)) count = std::stod(m[1]);
  const bool perNode = has(t, "per node") || count > 1;
  if (count <= 0) count = 1;
  Network n;
  const double bytes = count * gbits * 1e9 / 8.0;
  n.bytesPerSecondPerGpu = perNode ? bytes / static_cast<double>(std::max<std::int64_t>(1, gpusPerNode)) : bytes;
  if (has(t, "roce")) n.kind = LinkKind::kRoce;
  else if (has(t, "ethernet") || has(t, "gbe")) n.kind = LinkKind::kEthernet;
  return n;
}

Result<ClusterSpec> clusterOf(const Json& hw, const Settings& set, const std::string& id, bool* assumed) {
  const double memoryGb = number(hw, "gpu_memory_gb").value_or(0);
  std::string clusterName;
  std::string gpuFrom;
  if (set.run.contains("cluster")) {
    clusterName = gpuFrom = set.run["cluster"].get<std::string>();
  } else if (auto choice = clusterForGpu(text(hw, "gpu"), memoryGb)) {
    clusterName = choice->cluster;
    gpuFrom = choice->gpuFrom;
  } else {
    return fail(rowError(id, "hardware.gpu", "'" + text(hw, "gpu") + "' matches no GPU of the cluster library (V100, A100, H100, H200, B200, GB200, B300, GB300)"));
  }
  auto load = [&](const std::string& name) -> Result<ClusterSpec> {
    auto file = resolveLibraryFile(LibraryKind::kClusters, name);
    if (!file) return fail(file.error());
    return loadCluster(*file);
  };
  auto cluster = load(clusterName);
  if (!cluster) {
    if (set.run.contains("cluster")) return fail(rowError(id, "cluster (assumptions)", cluster.error().toString()));
    return fail(cluster.error());
  }
  if (gpuFrom != clusterName) {
    auto other = load(gpuFrom);
    if (!other) return fail(other.error());
    cluster->gpu = other->gpu;
  }
  if (memoryGb > 0) cluster->gpu.memoryBytes = memoryGb * 1024.0 * 1024.0 * 1024.0;
  if (set.run.contains("gpu_memory_GiB")) cluster->gpu.memoryBytes = set.run["gpu_memory_GiB"].get<double>() * 1024 * 1024 * 1024;
  // A row's GPUs per node set the NVLink domain, but on an NVLink domain of several hosts (NVL72: its
  // compute trays of 4), whatever the row calls a node (scaleCluster sizes the domain to the job).
  const auto gpn = number(hw, "gpus_per_node");
  const bool rackDomain = cluster->hostGpus() < cluster->gpusPerNode;
  if (gpn && *gpn >= 1 && static_cast<std::int64_t>(*gpn) != cluster->gpusPerNode && !rackDomain) {
    cluster->gpusPerNode = static_cast<std::int64_t>(*gpn);
    for (auto& l : cluster->links) {
      // The network still joins every node.
      l.spanGpus = isNetwork(l.kind) ? cluster->nodes * cluster->gpusPerNode : std::min(l.spanGpus, cluster->gpusPerNode);
    }
  }
  if (cluster->links.size() > 1) {
    LinkLevel& net = cluster->links.back();
    if (set.run.contains("network_GBps")) {
      net.bytesPerSecond = set.run["network_GBps"].get<double>() * 1e9;
    } else if (auto n = parseNetwork(text(hw, "inter_node"), cluster->gpusPerNode)) {
      net.bytesPerSecond = n->bytesPerSecondPerGpu;
      net.kind = n->kind;
    } else if (number(hw, "num_gpus").value_or(1) > static_cast<double>(cluster->gpusPerNode)) {
      *assumed = true;  // the network is the library cluster's
    }
  }
  const auto gpus = number(hw, "num_gpus");
  if (!gpus || *gpus < 1) return fail(rowError(id, "hardware.num_gpus", "missing or not positive"));
  if (*gpus > static_cast<double>(limits::kMaxGpus)) {
    return fail(rowError(id, "hardware.num_gpus", "must be at most " + std::to_string(limits::kMaxGpus) + ", got " +
                                                      std::to_string(*gpus)));
  }
  auto scaled = scaleCluster(*cluster, static_cast<std::int64_t>(*gpus));
  if (!scaled) return fail(rowError(id, "hardware.num_gpus", scaled.error().message));
  return *scaled;
}

// ---- model ------------------------------------------------------------------------------------------

// Letters and digits of a name, lowercased: "LLaMA-2 13B" and "llama2-13b" both give "llama213b".
std::string nameKey(const std::string& name) {
  std::string k;
  for (const auto& w : keyWords(name)) k += w;
  return k;
}

// The library model a row names ("Llama 2 13B", "GPT-3 175B", "Mixtral 8x7B"), for a row that gives its
// model by name rather than by its shape.
std::optional<ModelSpec> libraryModelNamed(const std::string& name) {
  const std::string key = nameKey(name);
  if (key.empty()) return std::nullopt;
  for (const auto& entry : libraryEntries(LibraryKind::kModels)) {
    if (nameKey(entry) != key) continue;
    auto file = resolveLibraryFile(LibraryKind::kModels, entry);
    if (!file) return std::nullopt;
    auto model = loadModel(*file);
    if (!model || !model->spec) return std::nullopt;
    return *model->spec;
  }
  return std::nullopt;
}

namespace {

// A row that names a library model instead of giving its shape: that model, with whatever the row does
// give (sequence length, vocabulary) on top; nothing when the row gives its shape or names no model.
std::optional<Result<ModelSpec>> namedModelOf(const Json& m, const std::string& id, bool* assumed) {
  if (number(m, "num_layers") && number(m, "hidden_size") && number(m, "num_attention_heads")) return std::nullopt;
  auto named = libraryModelNamed(text(m, "name"));
  if (!named) return std::nullopt;
  ModelSpec s = *named;
  if (auto v = number(m, "seq_len"); v && *v >= 1) s.seqLen = static_cast<std::int64_t>(*v);
  if (auto v = number(m, "vocab_size"); v && *v >= 1) s.vocabSize = static_cast<std::int64_t>(*v);
  if (s.maxPositionEmbeddings > 0 && s.seqLen > s.maxPositionEmbeddings && s.positionEmbedding != PositionEmbedding::kLearned) {
    s.maxPositionEmbeddings = s.seqLen;
  }
  *assumed = true;
  if (auto valid = validateModelSpec(s, id); !valid) return Result<ModelSpec>(fail(valid.error()));
  return Result<ModelSpec>(s);
}

// What a row may state of attention beyond its heads: each head's width where it is not hidden/heads
// (Hugging Face's head_dim, Megatron's --kv-channels: Qwen3, GPT-OSS, Gemma), a sliding window with
// the period of its full-attention layers (sliding_window_pattern, Megatron's window_attn_skip_freq,
// the first "full_attention" of Hugging Face's layer_types, or those types in words saying they
// alternate), and QK-norm (qk_layernorm / qk_norm).
void readAttentionTraits(const Json& m, ModelSpec& s) {
  for (const char* key : {"head_dim", "kv_channels"}) {
    if (auto d = number(m, key); d && *d >= 1) s.headDim = static_cast<std::int64_t>(*d);
  }
  if (auto w = number(m, "sliding_window"); w && *w >= 1) {
    s.slidingWindow = static_cast<std::int64_t>(*w);
    for (const char* key : {"sliding_window_pattern", "window_attn_skip_freq"}) {
      if (auto every = number(m, key); every && *every >= 1) s.globalAttentionEvery = static_cast<std::int64_t>(*every);
    }
    // layer_types in words ("sliding_attention/full_attention alternating"): every second layer is full.
    if (const std::string words = text(m, "layer_types"); has(words, "alternat") && has(words, "full")) s.globalAttentionEvery = 2;
    if (m.contains("layer_types") && m["layer_types"].is_array()) {
      const Json& types = m["layer_types"];
      for (std::size_t i = 0; i < types.size(); ++i) {
        if (types[i].is_string() && types[i].get<std::string>() == "full_attention") {
          s.globalAttentionEvery = static_cast<std::int64_t>(i + 1);
          break;
        }
      }
    }
  }
  for (const char* key : {"qk_layernorm", "qk_norm"}) {
    if (m.contains(key) && m[key].is_boolean() && m[key].get<bool>()) s.qkNorm = true;
  }
}

// Mixture of experts: the experts, their width, which layers hold them, shared experts and group-limited
// routing, in the names Hugging Face and Megatron give them.
void readExperts(const Json& m, std::int64_t experts, ModelSpec& s) {
  s.moe.numExperts = experts;
  s.moe.topK = static_cast<std::int64_t>(number(m, "top_k").value_or(number(m, "moe_top_k").value_or(2)));
  // Expert width (Megatron's --moe-ffn-hidden-size, Hugging Face's moe_intermediate_size) when the
  // dense layers' differs.
  for (const char* key : {"moe_ffn_hidden_size", "moe_intermediate_size", "expert_ffn_hidden_size"}) {
    if (auto w = number(m, key); w && *w >= 1) s.moe.expertFfnHiddenSize = static_cast<std::int64_t>(*w);
  }
  // Which layers are MoE: Hugging Face's first_k_dense_replace (leading dense layers) and
  // decoder_sparse_step / interleave_moe_layer_step (the last layer of every N), or Megatron's
  // --moe-layer-freq as Megatron reads it (an integer N: layers 0, N, 2N, ...; or a list expression
  // such as "([0]*3+[1]*58)"). A list colo cannot hold keeps only its leading dense layers.
  if (auto k = number(m, "first_k_dense_replace"); k && *k >= 0) s.moe.firstDenseLayers = static_cast<std::int64_t>(*k);
  for (const char* key : {"decoder_sparse_step", "interleave_moe_layer_step"}) {
    if (auto n = number(m, key); n && *n >= 1 && *n <= static_cast<double>(s.numLayers)) s.moe.layerFrequency = static_cast<std::int64_t>(*n);
  }
  std::string freq = text(m, "moe_layer_freq");
  if (auto n = number(m, "moe_layer_freq"); n && *n >= 1 && *n <= static_cast<double>(s.numLayers)) {
    if (number(m, "first_k_dense_replace")) {  // a DeepSeek config's: layer % N == 0 after the dense ones
      s.moe.layerFrequency = static_cast<std::int64_t>(*n);
      s.moe.layerPhase = s.moe.layerFrequency > 1 ? 0 : -1;
    } else {
      freq = std::to_string(static_cast<std::int64_t>(*n));
    }
  }
  if (!freq.empty() && !planner::setMegatronMoeLayers(s.moe, freq, s.numLayers)) {
    static const std::regex leadingDense(R"(\[0\]\s*\*\s*(\d+)\s*\+\s*\[1\])");
    std::smatch dense;
    if (std::regex_search(freq, dense, leadingDense)) s.moe.firstDenseLayers = std::stoll(dense[1]);
  }
  // Shared experts: their total inner size (Hugging Face's shared_expert_intermediate_size, Megatron's
  // --moe-shared-expert-intermediate-size), or DeepSeek's count of expert-sized ones.
  for (const char* key : {"shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"}) {
    if (auto w = number(m, key); w && *w >= 1) s.moe.sharedExpertFfnHiddenSize = static_cast<std::int64_t>(*w);
  }
  if (auto n = number(m, "n_shared_experts"); n && *n >= 1 && s.moe.sharedExpertFfnHiddenSize == 0) {
    s.moe.sharedExpertFfnHiddenSize = static_cast<std::int64_t>(*n) * s.expertFfnSize();
  }
  // Group-limited routing (Hugging Face's n_group / topk_group, Megatron's router group arguments),
  // kept only when the groups divide the experts.
  const auto groups = number(m, "moe_router_num_groups") ? number(m, "moe_router_num_groups") : number(m, "n_group");
  const auto groupTopK = number(m, "moe_router_group_topk") ? number(m, "moe_router_group_topk") : number(m, "topk_group");
  if (groups && groupTopK && *groups > 1 && *groupTopK >= 1 && *groupTopK <= *groups &&
      s.moe.numExperts % static_cast<std::int64_t>(*groups) == 0) {
    s.moe.routingGroups = static_cast<std::int64_t>(*groups);
    s.moe.routingGroupTopK = static_cast<std::int64_t>(*groupTopK);
  }
}

// Multi-head latent attention (DeepSeek-V2/V3): Hugging Face's qk_nope/qk_rope head dims, Megatron's
// --qk-head-dim (the part without rotary) and --qk-pos-emb-head-dim.
void readLatentAttention(const Json& m, ModelSpec& s) {
  if (auto kv = number(m, "kv_lora_rank"); kv && *kv >= 1) {
    s.mla.kvLoraRank = static_cast<std::int64_t>(*kv);
    s.mla.qLoraRank = static_cast<std::int64_t>(number(m, "q_lora_rank").value_or(0));
    s.mla.qkNopeHeadDim = static_cast<std::int64_t>(number(m, "qk_nope_head_dim").value_or(number(m, "qk_head_dim").value_or(128)));
    s.mla.qkRopeHeadDim =
        static_cast<std::int64_t>(number(m, "qk_rope_head_dim").value_or(number(m, "qk_pos_emb_head_dim").value_or(64)));
    s.mla.vHeadDim = static_cast<std::int64_t>(number(m, "v_head_dim").value_or(128));
    s.numKvHeads = 0;
  }
}

}  // namespace

Result<ModelSpec> modelOf(const Json& m, const std::string& id, bool layerOnly, bool* assumed) {
  if (auto named = namedModelOf(m, id, assumed)) return *named;
  const std::string arch = lower(text(m, "arch") + " " + text(m, "name"));
  // colo's graphs are decoder-only or encoder-only: an encoder-decoder is costed as a decoder of its
  // layers, an assumption the table marks.
  if (has(arch, "encoder-decoder") || has(arch, "t5") || has(arch, "bart")) *assumed = true;
  const bool bloom = has(arch, "alibi") || has(arch, "bloom");
  const bool llama = !bloom && (has(arch, "llama") || has(arch, "swiglu") || has(arch, "rmsnorm") || has(arch, "rope") ||
                                has(arch, "rotary") || has(arch, "mistral") || has(arch, "qwen") || has(arch, "deepseek"));
  auto preset = familyPreset(bloom ? "bloom" : llama ? "llama" : "gpt");
  if (!preset) return fail(preset.error());
  ModelSpec s = *preset;
  s.name = text(m, "name").empty() ? id : text(m, "name");
  // What the row says against its family's preset: "no bias" (MPT, llm-foundry's `no_bias: true`), and
  // MPT's embedding goes straight into the first block (BLOOM's preset puts a norm there).
  if (has(arch, "no bias") || has(arch, "without bias")) s.qkvBias = s.attentionOutputBias = s.mlpBias = false;
  if (has(arch, "mpt")) s.embeddingNorm = false;
  auto need = [&](const char* key) -> Result<std::int64_t> {
    const auto v = number(m, key);
    if (!v || *v < 1) return fail(rowError(id, std::string("model.") + key, "missing or not positive"));
    return static_cast<std::int64_t>(*v);
  };
  for (auto [key, field] : {std::pair{"num_layers", &s.numLayers}, std::pair{"hidden_size", &s.hiddenSize},
                            std::pair{"num_attention_heads", &s.numAttentionHeads}, std::pair{"seq_len", &s.seqLen}}) {
    auto v = need(key);
    if (!v) return fail(v.error());
    *field = *v;
  }
  for (const char* key : {"num_query_groups", "num_key_value_heads", "num_kv_heads"}) {
    if (auto g = number(m, key)) s.numKvHeads = static_cast<std::int64_t>(*g);
  }
  readAttentionTraits(m, s);
  if (auto f = number(m, "ffn_hidden_size")) {
    s.ffnHiddenSize = static_cast<std::int64_t>(*f);
  } else if (llama) {  // LLaMA's rule: 2/3 of 4h, rounded up to a multiple of 256
    s.ffnHiddenSize = (8 * s.hiddenSize / 3 + 255) / 256 * 256;
    *assumed = true;
  } else {
    s.ffnHiddenSize = 4 * s.hiddenSize;
  }
  if (auto e = number(m, "num_experts"); e && *e > 1) readExperts(m, static_cast<std::int64_t>(*e), s);
  readLatentAttention(m, s);
  if (auto v = number(m, "vocab_size")) {
    s.vocabSize = static_cast<std::int64_t>(*v);
  } else if (layerOnly) {  // a single-layer measurement: no embedding table worth costing, no head
    s.vocabSize = 1;
    s.lmHead = false;
  } else {
    s.vocabSize = 51200;  // Megatron's padded GPT-2 vocabulary
    *assumed = true;
  }
  if (!bloom && !llama) s.maxPositionEmbeddings = s.seqLen;
  s.dropout = (bloom || llama) ? 0.0 : 0.1;
  if (auto valid = validateModelSpec(s, id); !valid) return fail(valid.error());
  return s;
}

// Layers over pipeline chunks: even when they divide; else the embedding and the head count as a layer
// each (DeepSpeed's 'type:transformer|embedding' partition, Llama 3's one layer fewer on the first and
// last stage, Megatron-Core's account_for_embedding/loss_in_pipeline_split, which may leave the first
// chunk the embedding alone and the last the loss alone), shared evenly, the remainder to the middle
// chunks.
std::vector<StagePlan> balancedStages(std::int64_t layers, std::int64_t chunks) {
  if (layers % chunks == 0) return uniformStages(layers, chunks, RecomputePolicy::kNone);
  auto spread = [&](std::int64_t units, std::int64_t trim) {
    std::vector<std::int64_t> n(static_cast<std::size_t>(chunks), units / chunks);
    for (std::int64_t r = 0; r < units % chunks; ++r) {
      n[static_cast<std::size_t>(chunks > 2 ? 1 + r % (chunks - 2) : r % chunks)] += 1;
    }
    n.front() -= trim;
    n.back() -= trim;
    return n;
  };
  auto n = spread(layers + 2, 1);
  // An end chunk may be empty only in Megatron's own split (the embedding and the loss make the count
  // divide); otherwise every chunk holds a layer.
  const bool megatronSplit = (layers + 2) % chunks == 0 && chunks > 2;
  const bool middleEmpty = chunks > 2 && *std::min_element(n.begin() + 1, n.end() - 1) < 1;
  if (middleEmpty || std::min(n.front(), n.back()) < (megatronSplit ? 0 : 1)) n = spread(layers, 0);
  std::vector<StagePlan> stages;
  for (const auto count : n) {
    StagePlan st;
    st.layers = count;
    stages.push_back(st);
  }
  return stages;
}


}  // namespace colo::validation::detail
