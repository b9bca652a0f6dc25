// colo.opgraph/1 reading and writing.
#include <map>

#include "colo/core/op_graph.h"

#include "colo/core/limits.h"
#include "json_reader.h"

namespace colo {
namespace {

using detail::JsonReader;

const std::initializer_list<std::string_view> kKinds = {
    "embedding", "layernorm", "rmsnorm", "matmul", "bmm", "grouped_matmul", "softmax", "activation",
    "gated_activation", "dropout", "rotary", "add", "topk", "cross_entropy", "permute", "elementwise"};
const std::initializer_list<std::string_view> kShards = {"replicated", "sequence", "column", "row",
                                                             "heads",      "inner",    "vocab",  "expert"};

OpKind parseKind(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(OpKind::kElementwise); ++i) {
    if (toString(static_cast<OpKind>(i)) == s) return static_cast<OpKind>(i);
  }
  return OpKind::kElementwise;
}

Shard parseShard(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(Shard::kExpert); ++i) {
    if (toString(static_cast<Shard>(i)) == s) return static_cast<Shard>(i);
  }
  return Shard::kReplicated;
}

// A GEMM's dims decide its cost; a raw graph that omits them cannot be costed.
void requireDims(const JsonReader& r, const Op& op) {
  std::vector<std::string> needed;
  if (op.kind == OpKind::kMatMul) needed = {"m", "n", "k"};
  if (op.kind == OpKind::kBatchedMatMul) needed = {"batch", "m", "n", "k"};
  if (op.kind == OpKind::kGroupedMatMul) needed = {"groups", "m", "n", "k"};
  for (const auto& key : needed) {
    if (op.dim(key, -1) < 0) {
      r.fail("dims", "a " + toString(op.kind) + " op needs dims " + [&] {
        std::string list;
        for (const auto& k : needed) list += (list.empty() ? "" : ", ") + k;
        return list;
      }() + "; \"" + key + "\" is missing");
    }
  }
}

}  // namespace

Result<OpGraph> opGraphFromJson(const Json& document, const std::string& file) {
  auto graph = detail::catchLoad(file, [&]() -> OpGraph {
    const JsonReader r(document, file);
    r.accept({"format"});
    GraphInfo info;
    info.name = r.string("name");
    info.seqLen = r.boundedInteger("seq_len", 1, limits::kMaxSeqLen);
    info.batch = r.boundedInteger("batch", 1, limits::kMaxBatch, 1);
    info.dtypeBytes = r.boundedInteger("dtype_bytes", 1, 8, 2);
    info.numLayers = r.boundedInteger("num_layers", 1, limits::kMaxLayers);
    info.hiddenSize = r.boundedInteger("hidden_size", 0, limits::kMaxWidth, 0);
    info.numAttentionHeads = r.boundedInteger("num_attention_heads", 0, limits::kMaxHeads, 0);
    info.numKvHeads = r.boundedInteger("num_kv_heads", 0, limits::kMaxHeads, info.numAttentionHeads);
    info.vocabSize = r.boundedInteger("vocab_size", 0, limits::kMaxVocab, 0);
    OpGraph g(info);

    std::map<std::int64_t, std::size_t> idToIndex;
    const auto ops = r.arrayOfObjects("ops");
    if (ops.empty()) r.fail("ops", "an op graph needs at least one op");
    if (static_cast<std::int64_t>(ops.size()) > limits::kMaxOps) {
      r.fail("ops", "at most " + std::to_string(limits::kMaxOps) + " ops, got " + std::to_string(ops.size()));
    }
    // Sizes an op may state: the evaluator multiplies them by micro-batch and degrees, so they are bounded
    // well inside 64 bits (2^40 bytes is a terabyte per op).
    constexpr std::int64_t kMaxDim = 1LL << 32;
    constexpr std::int64_t kMaxBytes = 1LL << 40;
    for (const auto& o : ops) {
      const std::int64_t id = o.boundedInteger("id", 0, limits::kMaxJsonInteger);
      if (idToIndex.contains(id)) o.fail("id", "duplicate op id " + std::to_string(id));
      Op op;
      op.name = o.string("name");
      op.kind = parseKind(o.choice("kind", kKinds));
      op.layer = o.integer("layer");
      if (op.layer < -1 || op.layer > info.numLayers) {
        o.fail("layer", "must be between -1 and num_layers " + std::to_string(info.numLayers) + ", got " +
                            std::to_string(op.layer));
      }
      op.block = o.string("block", "");
      op.shard = parseShard(o.choice("shard", kShards, "replicated"));
      if (o.has("dims")) {
        const JsonReader dims = o.object("dims");
        for (const auto& [key, value] : o.json().at("dims").items()) {
          op.dims.emplace_back(key, dims.boundedInteger(key, 0, kMaxDim));
        }
      } else {
        o.accept({"dims"});
      }
      op.params = o.boundedInteger("params", 0, limits::kMaxParameters, 0);
      op.activeParams = o.boundedInteger("active_params", 0, limits::kMaxParameters, op.params);
      if (op.activeParams > op.params) {
        o.fail("active_params", "must not exceed params " + std::to_string(op.params) + ", got " +
                                    std::to_string(op.activeParams));
      }
      op.flopsFwd = o.nonNegativeNumber("flops_fwd", 0.0);
      op.flopsBwd = o.nonNegativeNumber("flops_bwd", 0.0);
      op.bytesRead = o.boundedInteger("bytes_read", 0, kMaxBytes, 0);
      op.bytesWritten = o.boundedInteger("bytes_written", 0, kMaxBytes, 0);
      op.savedBytes = o.boundedInteger("saved_bytes", 0, kMaxBytes, 0);
      op.causal = o.boolean("causal", false);
      requireDims(o, op);
      o.rejectUnknownKeys();
      idToIndex[id] = g.addOp(std::move(op));
    }

    if (r.has("edges")) {
      const Json& edges = document.at("edges");
      if (!edges.is_array()) r.fail("edges", "must be an array of [from, to] pairs, got " + describeJsonValue(edges));
      for (std::size_t i = 0; i < edges.size(); ++i) {
        const std::string at = "edges/" + std::to_string(i);
        const Json& e = edges[i];
        if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number_integer()) {
          r.failAt(at, "must be a pair of op ids [from, to], got " + describeJsonValue(e));
        }
        for (int side = 0; side < 2; ++side) {
          if (!idToIndex.contains(e[side].get<std::int64_t>())) {
            r.failAt(at + "/" + std::to_string(side), "no op has id " + e[side].dump());
          }
        }
        const auto from = idToIndex.at(e[0].get<std::int64_t>());
        const auto to = idToIndex.at(e[1].get<std::int64_t>());
        if (from == to) r.failAt(at, "an op cannot feed itself (id " + e[0].dump() + ")");
        g.addEdge(from, to);
      }
    }
    r.accept({"edges"});
    r.rejectUnknownKeys();
    if (auto order = g.topologicalOrder(); !order) r.fail("edges", order.error().message);
    return g;
  });
  return graph;
}

Json opGraphToJson(const OpGraph& graph) {
  const GraphInfo& info = graph.info();
  Json j;
  j["format"] = "colo.opgraph/1";
  j["name"] = info.name;
  j["seq_len"] = info.seqLen;
  j["batch"] = info.batch;
  j["dtype_bytes"] = info.dtypeBytes;
  j["num_layers"] = info.numLayers;
  j["hidden_size"] = info.hiddenSize;
  j["num_attention_heads"] = info.numAttentionHeads;
  j["num_kv_heads"] = info.numKvHeads;
  j["vocab_size"] = info.vocabSize;
  Json ops = Json::array();
  for (std::size_t v = 0; v < graph.size(); ++v) {
    const Op& op = graph.op(v);
    Json o;
    o["id"] = v;
    o["name"] = op.name;
    o["kind"] = toString(op.kind);
    o["layer"] = op.layer;
    o["block"] = op.block;
    o["shard"] = toString(op.shard);
    Json dims = Json::object();
    for (const auto& [key, value] : op.dims) dims[key] = value;
    o["dims"] = dims;
    o["params"] = op.params;
    o["active_params"] = op.activeParams;
    o["flops_fwd"] = op.flopsFwd;
    o["flops_bwd"] = op.flopsBwd;
    o["bytes_read"] = op.bytesRead;
    o["bytes_written"] = op.bytesWritten;
    o["saved_bytes"] = op.savedBytes;
    o["causal"] = op.causal;
    ops.push_back(std::move(o));
  }
  j["ops"] = std::move(ops);
  Json edges = Json::array();
  for (const auto& [from, to] : graph.edges()) edges.push_back({from, to});
  j["edges"] = std::move(edges);
  return j;
}

}  // namespace colo
