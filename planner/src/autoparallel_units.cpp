// Units of a block and their strategies on a mesh (autoparallel_units.h). The formulas per unit kind are
// described in docs/autoparallel.md, "Strategies".
#include "autoparallel_units.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "colo/costmodel/collectives.h"
#include "colo/costmodel/op_cost.h"

namespace colo::planner::detail {
namespace {

std::string leafName(const std::string& name) {
  // "layers.3.attn.qkv" -> "attn.qkv"; "embed.tokens" and "head.lm_head" keep their prefix.
  if (name.rfind("layers.", 0) == 0) {
    const auto dot = name.find('.', 7);
    if (dot != std::string::npos) return name.substr(dot + 1);
  }
  return name;
}

UnitKind kindOf(const Op& op) {
  switch (op.kind) {
    case OpKind::kMatMul: return UnitKind::kGemm;
    case OpKind::kLayerNorm:
    case OpKind::kRmsNorm: return UnitKind::kNorm;
    case OpKind::kEmbedding: return UnitKind::kEmbedding;
    case OpKind::kCrossEntropy: return UnitKind::kLoss;
    default: return UnitKind::kPointwise;
  }
}

bool inAttentionCore(const Op& op) { return op.shard == Shard::kHeads && op.kind != OpKind::kMatMul; }

// Adds `op` to `unit` (a new unit or one it joins).
void absorb(Unit& unit, const Op& op, std::int64_t seqLen) {
  unit.ops.push_back(op.name);
  unit.params += static_cast<double>(op.params);
  const double bytes = static_cast<double>(op.bytesRead + op.bytesWritten);
  switch (unit.kind) {
    case UnitKind::kGemm:
      unit.m = op.dim("m");
      unit.n = op.dim("n");
      unit.k = op.dim("k");
      unit.inputSaved = static_cast<double>(op.savedBytes);
      break;
    case UnitKind::kNorm:
    case UnitKind::kPointwise:
      unit.traffic += bytes;
      if (op.kind == OpKind::kDropout) unit.ownSaved += static_cast<double>(op.savedBytes);
      else unit.inputSaved += static_cast<double>(op.savedBytes);
      break;
    case UnitKind::kAttention:
      if (op.kind == OpKind::kBatchedMatMul) {
        const double m = static_cast<double>(op.dim("m"));
        const double window = static_cast<double>(op.dim("window"));
        const double density = !op.causal ? 1.0 : window > 0 ? 1.0 - (window - 1.0) / (2.0 * m) : 0.5;
        unit.flops += op.flopsFwd * density;
        if (unit.ops.size() == 1 || unit.n == 0) {
          unit.n = op.dim("batch");  // heads
          unit.k = op.dim("k");      // query-key width per head
        } else {
          unit.out.f = op.dim("batch") * op.dim("n");  // heads x value width
        }
      }
      break;
    case UnitKind::kMoe:
      if (op.kind == OpKind::kGroupedMatMul || op.kind == OpKind::kMatMul) {
        const bool grouped = op.kind == OpKind::kGroupedMatMul;
        unit.gemms.push_back({static_cast<double>(grouped ? op.dim("groups") : 1), static_cast<double>(op.dim("m")),
                              static_cast<double>(op.dim("n")), static_cast<double>(op.dim("k"))});
        if (grouped) {
          unit.expertParams += static_cast<double>(op.params);
          unit.topK = std::max(1.0, static_cast<double>(op.dim("m")) / static_cast<double>(seqLen));
        }
      }
      if (leafName(op.name) == "moe.router") unit.inputSaved += static_cast<double>(op.savedBytes);
      else unit.ownSaved += static_cast<double>(op.savedBytes);
      break;
    case UnitKind::kEmbedding:
      unit.n = op.dim("rows");
      unit.k = op.dim("width");
      unit.m = op.shard == Shard::kVocab ? 1 : 0;  // 1: the rows may be split (vocabulary-parallel)
      unit.out = {op.dim("tokens", seqLen), op.dim("width"), 1, 2};
      break;
    case UnitKind::kLoss:
      unit.traffic += bytes;
      unit.ownSaved += static_cast<double>(op.savedBytes);
      unit.m = op.dim("rows");
      break;
  }
}

}  // namespace

Block makeBlock(const OpGraph& graph, std::int64_t layer, const std::string& name) {
  const GraphInfo& info = graph.info();
  Block block;
  block.name = name;
  block.input = {info.seqLen, info.hiddenSize, 1, info.dtypeBytes};
  std::map<std::size_t, int> unitOf;
  for (const auto id : graph.layerOps(layer)) {
    const Op& op = graph.op(id);
    UnitKind kind = kindOf(op);
    if (inAttentionCore(op)) kind = UnitKind::kAttention;
    if (op.block == "moe") kind = UnitKind::kMoe;
    // Attention's core and a whole MoE block are one unit each; a previous unit of that kind fed by
    // this op's inputs is joined.
    int joined = -1;
    if ((kind == UnitKind::kAttention || kind == UnitKind::kMoe) && !block.units.empty() &&
        block.units.back().kind == kind) {
      joined = static_cast<int>(block.units.size()) - 1;
    }
    if (joined < 0) {
      Unit unit;
      unit.name = kind == UnitKind::kAttention ? "attn.core" : kind == UnitKind::kMoe ? "moe" : leafName(op.name);
      unit.kind = kind;
      unit.opKind = op.kind;
      unit.shard = op.shard;
      unit.out = {info.seqLen, 0, 1, info.dtypeBytes};
      block.units.push_back(std::move(unit));
      joined = static_cast<int>(block.units.size()) - 1;
    }
    Unit& unit = block.units[static_cast<std::size_t>(joined)];
    absorb(unit, op, info.seqLen);
    unitOf[id] = joined;
    // The tensor it produces, per sample.
    const std::int64_t elements = op.dim("elements");
    // A vocabulary is padded to the split (Megatron's --make-vocab-size-divisible-by): grain 0, any split.
    if (kind == UnitKind::kGemm) unit.out = {op.dim("m"), op.dim("n"), op.shard == Shard::kVocab ? 0 : 1, info.dtypeBytes};
    if ((kind == UnitKind::kNorm || kind == UnitKind::kPointwise) && elements > 0) {
      unit.out = {info.seqLen, elements / std::max<std::int64_t>(1, info.seqLen), 1, info.dtypeBytes};
    }
    if (kind == UnitKind::kMoe) unit.out = {info.seqLen, info.hiddenSize, 1, info.dtypeBytes};
    if (kind == UnitKind::kLoss) unit.out = {info.seqLen, 0, 1, info.dtypeBytes};
    for (const auto pred : graph.predecessors(id)) {
      const Op& p = graph.op(pred);
      int from = -1;
      if (const auto it = unitOf.find(pred); it != unitOf.end()) from = it->second;
      else if (p.kind == OpKind::kEmbedding && op.kind == OpKind::kMatMul) continue;  // a tied head's shared weight
      if (from == joined) continue;
      if (std::find(unit.inputs.begin(), unit.inputs.end(), from) == unit.inputs.end()) unit.inputs.push_back(from);
      if (from == -1) block.hasInput = true;
    }
  }
  // Attention's inputs split by whole key/value groups, its output by whole heads; flash keeps the
  // softmax statistics (4 bytes per head and token) beside its inputs.
  for (auto& unit : block.units) {
    if (unit.kind != UnitKind::kAttention) continue;
    const std::int64_t heads = std::max<std::int64_t>(1, unit.n);
    const std::int64_t kv = std::max<std::int64_t>(1, std::gcd(heads, info.numKvHeads > 0 ? info.numKvHeads : heads));
    unit.inputSaved = 0;
    for (const int input : unit.inputs) {
      auto& dims = input < 0 ? block.input : block.units[static_cast<std::size_t>(input)].out;
      if (dims.f % kv == 0) dims.featureGrain = dims.f / kv;
      unit.inputSaved += dims.bytes(1);  // flash keeps q, k and v
    }
    if (unit.out.f == 0) unit.out.f = heads * unit.k;
    unit.out.featureGrain = unit.out.f / heads;
    unit.ownSaved = static_cast<double>(heads * info.seqLen * 4);
  }
  return block;
}

std::string toString(Role role) {
  switch (role) {
    case Role::kNone: return "-";
    case Role::kBatch: return "batch";
    case Role::kSeq: return "seq";
    case Role::kOut: return "out";
    case Role::kIn: return "in";
    case Role::kExpert: return "expert";
    case Role::kInner: return "inner";
  }
  return "?";
}

std::string describeRoles(const Strategy& s, int axes) {
  std::string out;
  for (int a = 0; a < axes; ++a) out += (a ? " " : "") + std::to_string(a) + ":" + toString(s.role[static_cast<std::size_t>(a)]);
  return out;
}

namespace {

std::vector<Role> rolesOf(const Unit& unit) {
  switch (unit.kind) {
    case UnitKind::kGemm: return {Role::kNone, Role::kBatch, Role::kSeq, Role::kOut, Role::kIn};
    case UnitKind::kNorm: return {Role::kNone, Role::kBatch, Role::kSeq};
    case UnitKind::kPointwise:
    case UnitKind::kAttention:
    case UnitKind::kLoss: return {Role::kNone, Role::kBatch, Role::kSeq, Role::kOut};
    case UnitKind::kMoe: return {Role::kNone, Role::kBatch, Role::kSeq, Role::kExpert, Role::kInner};
    case UnitKind::kEmbedding:
      if (unit.m == 1) return {Role::kNone, Role::kBatch, Role::kSeq, Role::kOut};
      return {Role::kNone, Role::kBatch, Role::kSeq};
  }
  return {Role::kNone};
}

// The layout uses one axis role gives the unit's input, output and input gradient.
struct Uses {
  AxisUse in, out, grad;
};
Uses usesOf(UnitKind kind, Role role) {
  using enum AxisUse;
  switch (role) {
    case Role::kNone: return {kReplicate, kReplicate, kReplicate};
    case Role::kBatch:
    case Role::kExpert: return {kBatch, kBatch, kBatch};
    case Role::kSeq: return {kSeq, kSeq, kSeq};
    case Role::kIn: return {kFeature, kPartial, kFeature};
    case Role::kInner: return {kReplicate, kPartial, kPartial};
    case Role::kOut:
      if (kind == UnitKind::kGemm) return {kReplicate, kFeature, kPartial};
      if (kind == UnitKind::kEmbedding) return {kReplicate, kPartial, kReplicate};
      if (kind == UnitKind::kLoss) return {kFeature, kReplicate, kFeature};
      return {kFeature, kFeature, kFeature};
  }
  return {kReplicate, kReplicate, kReplicate};
}

double shardsOf(Layout layout, const DeviceMesh& mesh) { return 1.0 / localBytes(layout, 1.0, mesh); }

// Costs one role assignment; false when it does not divide the unit's dimensions.
bool cost(const Unit& unit, const std::vector<TensorDims>& inputDims, const CostContext& c, Strategy& s) {
  const DeviceMesh& mesh = *c.mesh;
  double tokens = 1, seq = 1, out = 1, in = 1, expert = 1, inner = 1;
  for (int a = 0; a < mesh.axes(); ++a) {
    const double n = static_cast<double>(mesh.axisSize(a));
    switch (s.role[static_cast<std::size_t>(a)]) {
      case Role::kBatch: tokens *= n; break;
      case Role::kExpert: tokens *= n; expert *= n; break;
      case Role::kSeq: seq *= n; break;
      case Role::kOut: out *= n; break;
      case Role::kIn: in *= n; break;
      case Role::kInner: inner *= n; break;
      case Role::kNone: break;
    }
  }
  for (const auto& dims : inputDims) {
    if (!fits(s.in, dims, c.samples, mesh)) return false;
  }
  if (unit.out.f > 0 && !fits(s.out, unit.out, c.samples, mesh)) return false;
  const double b = static_cast<double>(c.samples);
  const double tokenSplit = tokens * seq;
  const auto& dev = c.device;
  const std::int64_t bytes = c.dtypeBytes;
  double replicated = 1;  // ranks holding the same weights
  std::array<bool, 2> syncs{false, false};
  for (int a = 0; a < mesh.axes(); ++a) {
    const Role r = s.role[static_cast<std::size_t>(a)];
    if (r == Role::kNone || r == Role::kBatch || r == Role::kSeq) replicated *= static_cast<double>(mesh.axisSize(a));
    syncs[static_cast<std::size_t>(a)] = r == Role::kBatch || r == Role::kSeq;
  }
  auto addSync = [&](double gradBytes, std::array<bool, 2> over) {
    if (over[0] && over[1]) s.syncBytes[2] += gradBytes;
    else if (over[0]) s.syncBytes[0] += gradBytes;
    else if (over[1]) s.syncBytes[1] += gradBytes;
  };
  double inputBytes = 0;
  for (const auto& dims : inputDims) inputBytes += dims.bytes(1);
  const double inShards = shardsOf(s.in, mesh);
  s.inputSaved = inputBytes > 0 ? unit.inputSaved * b / inShards : 0.0;
  switch (unit.kind) {
    case UnitKind::kGemm: {
      const bool vocabulary = unit.shard == Shard::kVocab;
      if ((!vocabulary && unit.n % static_cast<std::int64_t>(out) != 0) || unit.k % static_cast<std::int64_t>(in) != 0) return false;
      const double m = static_cast<double>(unit.m) * b / tokenSplit;
      // A split vocabulary is padded to 128 columns per rank.
      const double n = vocabulary && out > 1 ? 128.0 * std::ceil(static_cast<double>(unit.n) / out / 128.0)
                                             : static_cast<double>(unit.n) / out;
      const double k = static_cast<double>(unit.k) / in;
      s.fwd = costmodel::gemmSeconds(m, n, k, 1, bytes, dev);
      s.bwd = costmodel::gemmSeconds(m, k, n, 1, bytes, dev) + costmodel::gemmSeconds(k, n, m, 1, bytes, dev);
      s.stateParams = unit.params / (out * in);
      addSync(s.stateParams * static_cast<double>(bytes), syncs);
      break;
    }
    case UnitKind::kNorm:
    case UnitKind::kPointwise: {
      const double traffic = unit.traffic * b / (tokenSplit * out);
      s.fwd = costmodel::streamSeconds(traffic, dev);
      s.bwd = unit.opKind == OpKind::kAdd ? 0.0 : unit.opKind == OpKind::kDropout ? s.fwd : costmodel::streamSeconds(1.5 * traffic, dev);
      s.ownSaved = unit.ownSaved * b / (tokenSplit * out);
      s.stateParams = unit.params;
      addSync(s.stateParams * static_cast<double>(bytes), syncs);
      break;
    }
    case UnitKind::kAttention: {
      const double flops = unit.flops * b / (tokenSplit * out);
      const auto t = costmodel::fusedAttentionSeconds(flops, dev);
      s.fwd = t.forward;
      s.bwd = t.backward;
      s.ownSaved = unit.ownSaved * b / (tokenSplit * out);
      s.stateParams = unit.params;
      addSync(s.stateParams * static_cast<double>(bytes), syncs);
      // Context parallelism over a sequence axis: keys and values gathered along it forward, gathered
      // again and their gradients reduce-scattered backward (all-gather context parallelism).
      const double qWidth = static_cast<double>(unit.n * unit.k);
      const double inWidth = inputDims.empty() ? 0.0 : static_cast<double>(inputDims[0].f);
      const double kvShare = inWidth > qWidth ? (inWidth - qWidth) / inWidth : 0.0;
      for (int a = 0; a < mesh.axes(); ++a) {
        if (s.role[static_cast<std::size_t>(a)] != Role::kSeq) continue;
        const double kv = inputBytes * b / inShards * kvShare * static_cast<double>(mesh.axisSize(a));
        const auto g = mesh.group(a);
        const double gather = costmodel::collectiveSeconds(costmodel::Collective::kAllGather, kv, g);
        s.commFwd += gather;
        s.commBwd += gather + costmodel::collectiveSeconds(costmodel::Collective::kReduceScatter, kv, g);
        s.comm += (s.comm.empty() ? "" : ", ") + std::string("kv all-gather(") + std::to_string(a) + ")";
      }
      break;
    }
    case UnitKind::kMoe: {
      double rowsPerToken = unit.topK;
      for (const auto& g : unit.gemms) {
        const double groups = g[0];
        const bool routed = groups > 1;
        if (routed && std::fmod(groups, expert) != 0) return false;
        const double count = routed ? groups / expert : 1.0;
        const double rows = g[1] * b / tokenSplit / count;
        double n = g[2], k = g[3];
        const bool router = !routed && n < static_cast<double>(unit.out.f) / 4;  // the router's few outputs
        if (!router && inner > 1) {
          // The experts' (and shared experts') hidden width splits: the up projection's output, the
          // down projection's input.
          if (n > k) {
            if (std::fmod(n, 2 * inner) != 0) return false;
            n /= inner;
          } else {
            if (std::fmod(k, inner) != 0) return false;
            k /= inner;
          }
        }
        s.fwd += costmodel::gemmSeconds(rows, n, k, count, bytes, dev);
        s.bwd += costmodel::gemmSeconds(rows, k, n, count, bytes, dev) + costmodel::gemmSeconds(k, n, rows, count, bytes, dev);
      }
      // Dispatch and combine: every token's k copies cross the expert axis each way.
      const double dispatch = b * static_cast<double>(unit.out.s) / tokenSplit * rowsPerToken *
                              static_cast<double>(unit.out.f) * static_cast<double>(bytes);
      for (int a = 0; a < mesh.axes(); ++a) {
        if (s.role[static_cast<std::size_t>(a)] != Role::kExpert) continue;
        const double t = costmodel::collectiveSeconds(costmodel::Collective::kAllToAll, dispatch, mesh.group(a));
        s.commFwd += 2 * t;
        s.commBwd += 2 * t;
        s.comm += (s.comm.empty() ? "" : ", ") + std::string("all-to-all(") + std::to_string(a) + ") x4";
      }
      const double dense = unit.params - unit.expertParams;
      s.stateParams = unit.expertParams / (expert * inner) + dense / inner;
      addSync(unit.expertParams / (expert * inner) * static_cast<double>(bytes), syncs);
      std::array<bool, 2> denseSync = syncs;
      for (int a = 0; a < mesh.axes(); ++a) {
        if (s.role[static_cast<std::size_t>(a)] == Role::kExpert) denseSync[static_cast<std::size_t>(a)] = true;
      }
      addSync(dense / inner * static_cast<double>(bytes), denseSync);
      s.ownSaved = unit.ownSaved * b / tokenSplit;
      break;
    }
    case UnitKind::kEmbedding: {
      const double written = b * static_cast<double>(unit.out.s * unit.k) * static_cast<double>(bytes) / tokenSplit;
      s.fwd = costmodel::streamSeconds(2 * written, dev);
      s.bwd = s.fwd;
      s.stateParams = unit.params / out;
      addSync(s.stateParams * static_cast<double>(bytes), syncs);
      break;
    }
    case UnitKind::kLoss: {
      const double traffic = unit.traffic * b / (tokenSplit * out);
      s.fwd = costmodel::streamSeconds(traffic, dev);
      s.bwd = costmodel::streamSeconds(1.5 * traffic, dev);
      s.ownSaved = unit.ownSaved * b / (tokenSplit * out);
      s.inputSaved = 0;
      // Vocabulary-parallel cross-entropy: the row maximum, the sum of exponentials and the target
      // logit are all-reduced over the vocabulary axis (4 bytes per token each).
      const double rows = static_cast<double>(unit.m) * b / tokenSplit * 4.0;
      for (int a = 0; a < mesh.axes(); ++a) {
        if (s.role[static_cast<std::size_t>(a)] != Role::kOut) continue;
        s.commFwd += 3 * costmodel::collectiveSeconds(costmodel::Collective::kAllReduce, rows, mesh.group(a));
        s.comm += (s.comm.empty() ? "" : ", ") + std::string("all-reduce(") + std::to_string(a) + ") x3";
      }
      break;
    }
  }
  s.optimizerShard = replicated;
  return true;
}

}  // namespace

std::vector<Strategy> strategies(const Unit& unit, const std::vector<TensorDims>& inputDims, const CostContext& context) {
  const DeviceMesh& mesh = *context.mesh;
  const auto roles = rolesOf(unit);
  std::vector<Strategy> out;
  const std::size_t second = mesh.axes() > 1 ? roles.size() : 1;
  for (std::size_t i = 0; i < roles.size(); ++i) {
    for (std::size_t j = 0; j < second; ++j) {
      Strategy s;
      s.role = {roles[i], mesh.axes() > 1 ? roles[j] : Role::kNone};
      for (std::size_t a = 0; a < 2; ++a) {
        const Uses u = usesOf(unit.kind, s.role[a]);
        s.in.use[a] = u.in;
        s.out.use[a] = u.out;
        s.gradIn.use[a] = u.grad;
      }
      if (cost(unit, inputDims, context, s)) out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace colo::planner::detail
