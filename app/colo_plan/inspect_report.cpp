#include "inspect_report.h"

#include <cmath>
#include <map>
#include <sstream>

#include "colo/core/units.h"
#include "text_table.h"

namespace colo::app {
namespace {

// Bytes per parameter of the model states under mixed-precision Adam (VALIDATION.md): 16-bit
// weights and gradients with fp32 master weights and moments; fp32 training has no master copy.
Json modelStates(std::int64_t params, DType precision) {
  const bool mixed = bytesPerElement(precision) < 4;
  const double p = static_cast<double>(params);
  const double weights = p * (mixed ? 2 : 4);
  const double grads = p * (mixed ? 2 : 4);
  const double master = mixed ? p * 4 : 0;
  const double moments = p * 8;
  return {{"weights_bytes", weights},       {"gradients_bytes", grads},
          {"master_weights_bytes", master}, {"optimizer_moments_bytes", moments},
          {"total_bytes", weights + grads + master + moments},
          {"bytes_per_param", (weights + grads + master + moments) / p},
          {"convention", mixed ? "mixed precision Adam: 16-bit weights and grads, fp32 master, fp32 m and v"
                               : "fp32 Adam: fp32 weights, grads, m and v"}};
}

std::string dimsText(const Op& op) {
  std::string out;
  for (const auto& [key, value] : op.dims) out += (out.empty() ? "" : " ") + key + "=" + std::to_string(value);
  return out;
}

std::string leafName(const Op& op) {
  // "layers.12.attn.qkv" -> "attn.qkv"; "embed.tokens" stays.
  if (op.name.rfind("layers.", 0) == 0) {
    const auto dot = op.name.find('.', 7);
    if (dot != std::string::npos) return op.name.substr(dot + 1);
  }
  return op.name;
}

// Layers with the same ops (names, kinds, shapes, parameters) are reported once.
std::string layerSignature(const OpGraph& graph, std::int64_t layer) {
  std::ostringstream sig;
  for (const auto id : graph.layerOps(layer)) {
    const Op& op = graph.op(id);
    sig << leafName(op) << '|' << toString(op.kind) << '|' << dimsText(op) << '|' << op.params << ';';
  }
  return sig.str();
}

std::string rangesText(const std::vector<std::int64_t>& layers) {
  std::string out;
  std::size_t i = 0;
  while (i < layers.size()) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(layers[i]) + (j > i ? "-" + std::to_string(layers[j]) : "");
    i = j + 1;
  }
  if (layers.size() > 4 && out.size() > 40) {  // a regular stride (alternating MoE) reads better as one
    const std::int64_t step = layers[1] - layers[0];
    bool regular = true;
    for (std::size_t k = 1; k < layers.size(); ++k) regular = regular && layers[k] - layers[k - 1] == step;
    if (regular) out = std::to_string(layers.front()) + "-" + std::to_string(layers.back()) + " every " + std::to_string(step);
  }
  return out;
}

Json opJson(const Op& op) {
  Json dims = Json::object();
  for (const auto& [k, v] : op.dims) dims[k] = v;
  return {{"name", leafName(op)},    {"kind", toString(op.kind)},     {"shard", toString(op.shard)},
          {"dims", dims},            {"params", op.params},           {"flops_fwd", op.flopsFwd},
          {"flops_bwd", op.flopsBwd}, {"saved_bytes", op.savedBytes}, {"causal", op.causal}};
}

std::string describeModel(const Model& model) {
  if (!model.spec) return "raw op graph";
  const ModelSpec& s = *model.spec;
  std::string text = toString(s.architecture) + ", " + std::to_string(s.numLayers) + " layers, hidden " +
                     std::to_string(s.hiddenSize) + ", " + std::to_string(s.numAttentionHeads) + " heads";
  if (s.kvHeads() != s.numAttentionHeads) text += " (" + std::to_string(s.kvHeads()) + " kv)";
  if (s.mla.enabled()) {
    text += ", latent attention (q rank " + std::to_string(s.mla.qLoraRank) + ", kv rank " + std::to_string(s.mla.kvLoraRank) +
            ", qk head dim " + std::to_string(s.mla.qkHeadDim()) + ", v head dim " + std::to_string(s.mla.vHeadDim) + ")";
  } else {
    text += ", head dim " + std::to_string(s.headSize());
  }
  text += ", ffn " + std::to_string(s.ffnHiddenSize);
  if (s.input == InputKind::kTokens) text += ", vocab " + std::to_string(s.vocabSize);
  text += "\n          " + toString(s.positionEmbedding) + " positions, " + toString(s.norm) + ", " + toString(s.activation);
  if (s.input == InputKind::kTokens && s.lmHead) text += s.tieWordEmbeddings ? ", tied embeddings" : ", untied embeddings";
  if (s.moe.enabled()) {
    text += ", " + std::to_string(s.moe.numExperts) + " experts top-" + std::to_string(s.moe.topK);
    if (s.moe.layerFrequency > 1) {
      text += " every " + std::to_string(s.moe.layerFrequency) + " layers";
      if (s.moe.layerPhase >= 0) {
        text += " (layer i when i % " + std::to_string(s.moe.layerFrequency) + " = " + std::to_string(s.moe.layerPhase) + ")";
      }
    }
    if (s.moe.firstDenseLayers > 0) text += " after " + std::to_string(s.moe.firstDenseLayers) + " dense layers";
    if (s.moe.expertFfnHiddenSize > 0) text += ", expert ffn " + std::to_string(s.moe.expertFfnHiddenSize);
    if (s.moe.sharedExpertFfnHiddenSize > 0) text += ", shared experts ffn " + std::to_string(s.moe.sharedExpertFfnHiddenSize);
  }
  if (s.slidingWindow > 0 || s.attentionChunkSize > 0) {
    text += s.slidingWindow > 0 ? ", sliding window " + std::to_string(s.slidingWindow)
                                : ", chunked attention " + std::to_string(s.attentionChunkSize);
    if (s.globalAttentionEvery > 0) {
      text += " on " + std::to_string(s.globalAttentionEvery - 1) + " of every " + std::to_string(s.globalAttentionEvery) +
              " layers (the rest full)";
    }
  }
  if (s.mtpLayers > 0) text += ", " + std::to_string(s.mtpLayers) + " multi-token prediction module" + (s.mtpLayers > 1 ? "s" : "");
  if (s.qkNorm) text += ", qk-norm";
  if (s.sandwichNorm) text += ", post-norms";
  if (s.attentionSinks) text += ", attention sinks";
  if (s.input == InputKind::kImagePatches) {
    text += ", " + std::to_string(s.image.imageSize) + "px images in " + std::to_string(s.image.patchSize) + "px patches";
  }
  text += ", dropout " + formatFixed(s.dropout, 2);
  return text;
}

std::string sourceName(ModelSource source) {
  switch (source) {
    case ModelSource::kSpec: return "colo.model/1";
    case ModelSource::kHfConfig: return "Hugging Face config";
    case ModelSource::kOpGraph: return "colo.opgraph/1";
  }
  return "";
}

}  // namespace

Result<Json> buildInspectReport(const Model& model, const std::optional<ClusterSpec>& cluster,
                                const InspectOptions& options) {
  auto graph = model.expand(GraphOptions{options.seqLen, options.batch, bytesPerElement(options.precision)});
  if (!graph) return fail(graph.error());
  const GraphInfo& info = graph->info();
  const OpTotals totals = graph->totals();
  const double tokens = static_cast<double>(info.seqLen * info.batch);

  std::int64_t params = totals.params;
  std::int64_t active = totals.activeParams;
  std::int64_t embedding = 0;
  if (model.spec) {
    const ParamCount closed = countParameters(*model.spec);
    embedding = closed.embedding;
    if (closed.total != params || closed.active != active) {
      return fail(Error::internal("parameter count mismatch: op graph " + std::to_string(params) + ", closed form " +
                                  std::to_string(closed.total)));
    }
  }

  double layerGemmFwd = 0;
  double attentionCoreFwd = 0;
  std::int64_t layerInputBytes = 0;
  for (std::size_t v = 0; v < graph->size(); ++v) {
    const Op& op = graph->op(v);
    if (op.layer >= 0 && op.layer < info.numLayers && op.isGemm()) layerGemmFwd += op.flopsFwd;
    if (op.kind == OpKind::kBatchedMatMul) attentionCoreFwd += op.flopsFwd;
  }
  const OpTotals outer = [&] {
    OpTotals t = graph->layerTotals(-1);
    const OpTotals head = graph->layerTotals(info.numLayers);
    t.savedBytes += head.savedBytes;
    return t;
  }();
  layerInputBytes = info.hiddenSize * info.seqLen * info.batch * info.dtypeBytes;

  Json report;
  report["model"] = model.name();
  report["model_file"] = model.file;
  report["model_source"] = sourceName(model.source);
  if (model.spec) report["model_spec"] = modelSpecToJson(*model.spec);
  report["params"] = params;
  report["active_params"] = active;
  report["embedding_params"] = embedding;
  if (model.spec && model.spec->visionTowerParams > 0) report["vision_tower_params"] = model.spec->visionTowerParams;
  if (model.spec && model.spec->mtpLayers > 0) report["mtp_params"] = countParameters(*model.spec).mtp;
  report["num_layers"] = info.numLayers;
  report["hidden_size"] = info.hiddenSize;
  report["seq_len"] = info.seqLen;
  report["batch"] = info.batch;
  report["precision"] = toString(options.precision);
  const double fwd = totals.gemmFlopsFwd / tokens;
  const double train = (totals.gemmFlopsFwd + totals.gemmFlopsBwd) / tokens;
  report["flops_per_token_fwd"] = fwd;
  report["flops_per_token_train"] = train;
  report["flops_per_token_train_full_recompute"] = train + layerGemmFwd / tokens;
  report["flops_per_token_train_all_ops"] =
      (totals.gemmFlopsFwd + totals.gemmFlopsBwd + totals.otherFlopsFwd + totals.otherFlopsBwd) / tokens;
  report["attention_flops_fraction"] = totals.gemmFlopsFwd > 0 ? attentionCoreFwd / totals.gemmFlopsFwd : 0.0;
  report["flop_convention"] =
      "model FLOPs: GEMMs only, 2mnk forward, backward 2x forward, attention without causal halving, no recompute";
  report["model_state_bytes"] = modelStates(params, options.precision);
  report["activation_bytes"] = {
      {"no_recompute", totals.savedBytes},
      {"full_recompute", outer.savedBytes + layerInputBytes * info.numLayers},
      {"per_layer_no_recompute", info.numLayers > 0 ? graph->layerTotals(0).savedBytes : 0},
      {"scope", "one replica, no parallelism, batch " + std::to_string(info.batch) + " x " +
                    std::to_string(info.seqLen) + " tokens, " + toString(options.precision) + " activations"}};

  // Layers grouped by identical structure, plus the outer ops.
  Json groups = Json::array();
  auto groupJson = [&](const std::string& label, const std::vector<std::int64_t>& layers) {
    Json ops = Json::array();
    for (const auto id : graph->layerOps(layers.front())) ops.push_back(opJson(graph->op(id)));
    const OpTotals t = graph->layerTotals(layers.front());
    return Json{{"label", label},
                {"layers", layers},
                {"count", layers.size()},
                {"params_each", t.params},
                {"flops_fwd_each", t.gemmFlopsFwd + t.otherFlopsFwd},
                {"saved_bytes_each", t.savedBytes},
                {"ops", ops}};
  };
  groups.push_back(groupJson("embedding", {-1}));
  std::map<std::string, std::vector<std::int64_t>> bySignature;
  std::vector<std::string> order;
  for (std::int64_t layer = 0; layer < info.numLayers; ++layer) {
    const std::string sig = layerSignature(*graph, layer);
    if (!bySignature.contains(sig)) order.push_back(sig);
    bySignature[sig].push_back(layer);
  }
  for (const auto& sig : order) {
    const auto& layers = bySignature[sig];
    groups.push_back(groupJson("layers " + rangesText(layers), layers));
  }
  groups.push_back(groupJson("head", {info.numLayers}));
  report["layer_groups"] = groups;

  if (cluster) {
    // The cluster document itself, plus what follows from it for this model.
    Json c = clusterToJson(*cluster);
    c["total_gpus"] = cluster->totalGpus();
    c["total_memory_bytes"] = cluster->gpu.memoryBytes * static_cast<double>(cluster->totalGpus());
    const double states = report["model_state_bytes"]["total_bytes"].get<double>();
    const double perGpu = cluster->gpu.memoryBytes;
    c["min_gpus_for_model_states"] = static_cast<std::int64_t>(std::ceil(states / perGpu));
    c["model_states_fit"] = states <= perGpu * static_cast<double>(cluster->totalGpus());
    if (cluster->gpu.hasPeak(options.precision)) {
      const double peak = cluster->gpu.peakFlopsPerSecond.at(options.precision) * static_cast<double>(cluster->totalGpus());
      c["peak_flops_per_s"] = peak;
      // At 100% of peak, how many tokens a second the whole cluster could train: a bound, not a
      // prediction (the cost model predicts).
      c["tokens_per_s_at_peak"] = peak / train;
    }
    report["cluster"] = c;
  } else {
    report["cluster"] = nullptr;
  }
  report["model_description"] = describeModel(model);
  return report;
}

std::string renderInspectReport(const Json& r) {
  std::ostringstream out;
  const auto num = [](const Json& j) { return j.get<double>(); };
  out << "model     " << r["model"].get<std::string>() << "  (" << r["model_source"].get<std::string>();
  if (!r["model_file"].get<std::string>().empty()) out << ": " << r["model_file"].get<std::string>();
  out << ")\n          " << r["model_description"].get<std::string>() << "\n";
  out << "sequence  " << r["seq_len"].get<std::int64_t>() << " tokens x batch " << r["batch"].get<std::int64_t>()
      << ", " << r["precision"].get<std::string>() << "\n";
  const auto params = r["params"].get<std::int64_t>();
  const auto active = r["active_params"].get<std::int64_t>();
  out << "params    " << formatCount(static_cast<double>(params)) << " total (" << params << ")";
  if (active != params) out << ", " << formatCount(static_cast<double>(active)) << " active per token (" << active << ")";
  if (r["embedding_params"].get<std::int64_t>() > 0) {
    out << ", of which embeddings " << formatCount(num(r["embedding_params"]));
  }
  out << "\n";
  if (r.contains("mtp_params")) {
    out << "          of which multi-token prediction " << formatCount(num(r["mtp_params"])) << " (published counts leave it out: "
        << formatCount(static_cast<double>(params) - num(r["mtp_params"])) << " without it)\n";
  }
  if (r.contains("vision_tower_params")) {
    const auto vision = r["vision_tower_params"].get<std::int64_t>();
    out << "          vision tower " << formatCount(static_cast<double>(vision)) << " (" << vision
        << ") counted apart, not planned: " << formatCount(static_cast<double>(params + vision)) << " with it\n";
  }
  out << "FLOPs     per token: forward " << formatFlops(num(r["flops_per_token_fwd"])) << ", training "
      << formatFlops(num(r["flops_per_token_train"])) << " (model FLOPs)\n";
  out << "          with full recompute " << formatFlops(num(r["flops_per_token_train_full_recompute"]))
      << " (hardware FLOPs); attention score/context GEMMs " << formatFixed(100 * num(r["attention_flops_fraction"]), 1)
      << "% of forward; non-GEMM ops add "
      << formatFixed(100 * (num(r["flops_per_token_train_all_ops"]) / num(r["flops_per_token_train"]) - 1), 2) << "%\n";
  const Json& ms = r["model_state_bytes"];
  out << "memory    model states " << formatBytes(num(ms["total_bytes"])) << " ("
      << formatFixed(num(ms["bytes_per_param"]), 0) << " B/param, " << ms["convention"].get<std::string>() << ")\n"
      << "            weights " << formatBytes(num(ms["weights_bytes"])) << " | gradients "
      << formatBytes(num(ms["gradients_bytes"])) << " | fp32 master " << formatBytes(num(ms["master_weights_bytes"]))
      << " | Adam moments " << formatBytes(num(ms["optimizer_moments_bytes"])) << "\n";
  const Json& act = r["activation_bytes"];
  out << "          activations " << formatBytes(num(act["no_recompute"])) << " without recompute ("
      << formatBytes(num(act["per_layer_no_recompute"])) << " per layer), "
      << formatBytes(num(act["full_recompute"])) << " with full recompute\n"
      << "            (" << act["scope"].get<std::string>() << ")\n";

  out << "ops\n";
  for (const auto& g : r["layer_groups"]) {
    if (g["ops"].empty()) continue;
    out << "  " << g["label"].get<std::string>();
    if (g["count"].get<std::int64_t>() > 1) out << "  (x" << g["count"].get<std::int64_t>() << ", identical)";
    out << ": " << formatCount(num(g["params_each"])) << " params, " << formatFlops(num(g["flops_fwd_each"]))
        << " forward, " << formatBytes(num(g["saved_bytes_each"])) << " saved for backward"
        << (g["count"].get<std::int64_t>() > 1 ? " each" : "") << "\n";
    TextTable table({"op", "kind", "shard", "shape", "params", "fwd FLOPs", "bwd FLOPs", "saved"},
                    {false, false, false, false, true, true, true, true});
    for (const auto& op : g["ops"]) {
      std::string dims;
      for (const auto& [k, v] : op["dims"].items()) dims += (dims.empty() ? "" : " ") + k + "=" + std::to_string(v.get<std::int64_t>());
      table.addRow({op["name"].get<std::string>() + (op["causal"].get<bool>() ? " (causal)" : ""),
                    op["kind"].get<std::string>(), op["shard"].get<std::string>(), dims,
                    op["params"].get<std::int64_t>() ? formatCount(num(op["params"])) : "-",
                    num(op["flops_fwd"]) > 0 ? formatFlops(num(op["flops_fwd"])) : "-",
                    num(op["flops_bwd"]) > 0 ? formatFlops(num(op["flops_bwd"])) : "-",
                    num(op["saved_bytes"]) > 0 ? formatBytes(num(op["saved_bytes"])) : "-"});
    }
    out << table.render("    ");
  }

  if (!r["cluster"].is_null()) {
    const Json& c = r["cluster"];
    const Json& gpu = c["gpu"];
    out << "cluster   " << c["name"].get<std::string>() << ": " << c["nodes"].get<std::int64_t>() << " node"
        << (c["nodes"].get<std::int64_t>() > 1 ? "s" : "") << " x " << c["gpus_per_node"].get<std::int64_t>() << " "
        << gpu["name"].get<std::string>() << " = " << c["total_gpus"].get<std::int64_t>() << " GPUs\n";
    out << "          per GPU " << formatFixed(num(gpu["memory_GiB"]), 1) << " GiB, HBM "
        << formatFixed(num(gpu["hbm_bandwidth_GBps"]), 0) << " GB/s, peak";
    for (const auto& [dtype, tf] : gpu["peak_TFLOPs"].items()) out << " " << dtype << " " << formatFixed(tf.get<double>(), 1);
    out << " TFLOP/s\n";
    for (const auto& l : c["links"]) {
      out << "          link " << l["name"].get<std::string>() << " (" << l["kind"].get<std::string>() << "): "
          << l["span_gpus"].get<std::int64_t>() << " GPUs, " << formatFixed(num(l["bandwidth_GBps"]), 1)
          << " GB/s per GPU, " << formatFixed(num(l["latency_us"]), 1) << " us\n";
    }
    out << "          offload: host " << formatFixed(num(c["host_memory_GiB"]), 0) << " GiB/node, PCIe "
        << formatFixed(num(c["pcie_bandwidth_GBps"]), 0) << " GB/s/GPU";
    if (num(c["nvme_bandwidth_GBps"]) > 0) out << ", NVMe " << formatFixed(num(c["nvme_bandwidth_GBps"]), 1) << " GB/s/node";
    out << "\n          total " << formatBytes(num(c["total_memory_bytes"])) << " of GPU memory";
    if (c.contains("peak_flops_per_s")) {
      out << ", " << formatRate(num(c["peak_flops_per_s"]), "FLOP/s") << " " << r["precision"].get<std::string>()
          << " peak";
    }
    out << "\n";
    out << "fit       model states need at least " << c["min_gpus_for_model_states"].get<std::int64_t>()
        << " GPUs' memory even fully sharded (ZeRO-3); the cluster has " << c["total_gpus"].get<std::int64_t>() << ": "
        << (c["model_states_fit"].get<bool>() ? "they fit" : "they do NOT fit, even before activations") << "\n";
    if (c.contains("tokens_per_s_at_peak")) {
      out << "          at 100% of peak the cluster would train " << formatCount(num(c["tokens_per_s_at_peak"])) << " tokens/s"
          << " (an upper bound, not a prediction)\n";
    }
  }
  return out.str();
}

}  // namespace colo::app
