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
        unit.gemms.push_back({static_cast<double>(op.dim("batch")), m, static_cast<double>(op.dim("n")),
                              static_cast<double>(op.dim("k"))});
      } else {
        unit.traffic += bytes + (op.kind == OpKind::kDropout ? static_cast<double>(op.savedBytes) : 0.0);
      }
      unit.unfusedSaved += static_cast<double>(op.savedBytes);
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
      else if (p.kind == OpKind::kEmbedding && op.kind == OpKind::kMatMul) {  // a tied head's shared weight
        unit.tiedParams = static_cast<double>(p.params);
        continue;
      }
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
    case Role::kFsdp: return "fsdp";
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
    case UnitKind::kGemm: return {Role::kNone, Role::kBatch, Role::kSeq, Role::kOut, Role::kIn, Role::kFsdp};
    case UnitKind::kNorm: return {Role::kNone, Role::kBatch, Role::kSeq};
    case UnitKind::kPointwise:
    case UnitKind::kAttention:
    case UnitKind::kLoss: return {Role::kNone, Role::kBatch, Role::kSeq, Role::kOut};
    case UnitKind::kMoe: return {Role::kNone, Role::kBatch, Role::kSeq, Role::kExpert, Role::kInner, Role::kFsdp};
    case UnitKind::kEmbedding:
      if (unit.m == 1) return {Role::kNone, Role::kBatch, Role::kSeq, Role::kOut, Role::kFsdp};
      return {Role::kNone, Role::kBatch, Role::kSeq, Role::kFsdp};
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
    case Role::kExpert:
    case Role::kFsdp: return {kBatch, kBatch, kBatch};
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

// Costs one role assignment of a unit; false when it does not divide the unit's dimensions. One method
// per unit kind; the splits every kind uses are computed once.
class Coster {
 public:
  Coster(const Unit& unit, const std::vector<TensorDims>& inputDims, const CostContext& c, Strategy& s)
      : m_unit(unit), m_inputs(inputDims), m_c(c), m_s(s), m_mesh(*c.mesh), m_b(static_cast<double>(c.samples)),
        m_bytes(c.dtypeBytes) {
    for (int a = 0; a < m_mesh.axes(); ++a) {
      const double n = static_cast<double>(m_mesh.axisSize(a));
      const Role r = s.role[static_cast<std::size_t>(a)];
      switch (r) {
        case Role::kBatch: m_tokens *= n; break;
        case Role::kExpert: m_tokens *= n; m_expert *= n; break;
        case Role::kSeq: m_seq *= n; break;
        case Role::kOut: m_out *= n; break;
        case Role::kIn: m_in *= n; break;
        case Role::kInner: m_inner *= n; break;
        case Role::kFsdp: m_tokens *= n; m_fsdp *= n; break;
        case Role::kNone: break;
      }
      if (r == Role::kNone || r == Role::kBatch || r == Role::kSeq) m_replicated *= n;
      m_syncs[static_cast<std::size_t>(a)] = r == Role::kBatch || r == Role::kSeq;
    }
    for (const auto& dims : inputDims) m_inputBytes += dims.bytes(1);
    m_inShards = shardsOf(s.in, m_mesh);
  }

  bool run() {
    for (const auto& dims : m_inputs) {
      if (!fits(m_s.in, dims, m_c.samples, m_mesh)) return false;
    }
    if (m_unit.out.f > 0 && !fits(m_s.out, m_unit.out, m_c.samples, m_mesh)) return false;
    m_s.inputSaved = m_inputBytes > 0 ? m_unit.inputSaved * m_b / m_inShards : 0.0;
    bool ok = true;
    switch (m_unit.kind) {
      case UnitKind::kGemm: ok = gemm(); break;
      case UnitKind::kNorm:
      case UnitKind::kPointwise: pointwise(); break;
      case UnitKind::kAttention: attention(); break;
      case UnitKind::kMoe: ok = moe(); break;
      case UnitKind::kEmbedding: embedding(); break;
      case UnitKind::kLoss: loss(); break;
    }
    m_s.optimizerShard = m_replicated;
    if (ok && m_fsdp > 1) shardWeights();
    return ok;
  }

 private:
  [[nodiscard]] double tokenSplit() const { return m_tokens * m_seq; }
  void addSync(double gradBytes, std::array<bool, 2> over) {
    if (over[0] && over[1]) m_s.syncBytes[2] += gradBytes;
    else if (over[0]) m_s.syncBytes[0] += gradBytes;
    else if (over[1]) m_s.syncBytes[1] += gradBytes;
  }
  void replicatedWeights() {
    m_s.stateParams = m_unit.params;
    addSync(m_s.stateParams * static_cast<double>(m_bytes), m_syncs);
  }
  // A collective along every axis with `role`, `times` each way as given; named in the unit's comm.
  void axisCollective(Role role, costmodel::Collective kind, double bytes, double forward, double backward, const std::string& label) {
    for (int a = 0; a < m_mesh.axes(); ++a) {
      if (m_s.role[static_cast<std::size_t>(a)] != role) continue;
      const double t = costmodel::collectiveSeconds(kind, bytes, m_mesh.group(a));
      m_s.commFwd += forward * t;
      m_s.commBwd += backward * t;
      m_s.opsFwd += forward;
      m_s.opsBwd += backward;
      m_s.comm += (m_s.comm.empty() ? "" : ", ") + label + "(" + std::to_string(a) + ")";
    }
  }

  // Sharded weights (kFsdp axes): the unit holds 1/n of them, gathers them before its forward and again
  // before its backward, and reduce-scatters its gradients each micro-batch instead of reducing them
  // once a step. Prefetching overlaps up to 80% with the unit's kernels (the evaluator's ZeRO-3 cover),
  // the hidden part slowing them by the device's overlap slowdown.
  void shardWeights() {
    const double whole = m_s.stateParams * static_cast<double>(m_bytes);  // this unit's weights, gathered
    for (int a = 0; a < m_mesh.axes(); ++a) {
      if (m_s.role[static_cast<std::size_t>(a)] != Role::kFsdp) continue;
      const auto g = m_mesh.group(a);
      const double gather = costmodel::collectiveSeconds(costmodel::Collective::kAllGather, whole, g);
      const double scatter = costmodel::collectiveSeconds(costmodel::Collective::kReduceScatter, whole, g);
      auto exposed = [&](double comm, double cover) {
        const double e = std::max(0.1 * comm, comm - 0.8 * cover);
        return e + m_c.device.overlapSlowdown * (comm - e);
      };
      m_s.commFwd += exposed(gather, m_s.fwd);
      m_s.commBwd += exposed(gather + scatter, m_s.bwd);
      m_s.opsFwd += 1;
      m_s.opsBwd += 2;
      m_s.comm += (m_s.comm.empty() ? "" : ", ") + std::string("weights all-gather/reduce-scatter(") + std::to_string(a) + ")";
    }
    m_s.stateParams /= m_fsdp;
    // The gradient reduction over the sharded axes happened per micro-batch (above); the optimizer states
    // are already split with the weights.
    for (int k = 0; k < 3; ++k) m_s.syncBytes[k] /= m_fsdp;
  }

  bool gemm() {
    const bool vocabulary = m_unit.shard == Shard::kVocab;
    if ((!vocabulary && m_unit.n % static_cast<std::int64_t>(m_out) != 0) || m_unit.k % static_cast<std::int64_t>(m_in) != 0) return false;
    const double m = static_cast<double>(m_unit.m) * m_b / tokenSplit();
    // A split vocabulary is padded to 128 columns per rank.
    const double n = vocabulary && m_out > 1 ? 128.0 * std::ceil(static_cast<double>(m_unit.n) / m_out / 128.0)
                                             : static_cast<double>(m_unit.n) / m_out;
    const double k = static_cast<double>(m_unit.k) / m_in;
    m_s.fwd = costmodel::gemmSeconds(m, n, k, 1, m_bytes, m_c.device);
    m_s.bwd = costmodel::gemmSeconds(m, k, n, 1, m_bytes, m_c.device) + costmodel::gemmSeconds(k, n, m, 1, m_bytes, m_c.device);
    m_s.opsFwd = 1;
    m_s.opsBwd = 2;  // input and weight gradients
    // A tied head holds the embedding's weight in its own layout: a copy (Megatron's last stage keeps
    // one), unless the embedding's stage splits it alike (Solution::tiedShare takes it back).
    m_s.stateParams = (m_unit.params + m_unit.tiedParams) / (m_out * m_in);
    addSync(m_s.stateParams * static_cast<double>(m_bytes), m_syncs);
    return true;
  }

  void pointwise() {
    const double traffic = m_unit.traffic * m_b / (tokenSplit() * m_out);
    m_s.fwd = costmodel::streamSeconds(traffic, m_c.device);
    m_s.bwd = m_unit.opKind == OpKind::kAdd       ? 0.0
              : m_unit.opKind == OpKind::kDropout ? m_s.fwd
                                                  : costmodel::streamSeconds(1.5 * traffic, m_c.device);
    m_s.ownSaved = m_unit.ownSaved * m_b / (tokenSplit() * m_out);
    m_s.opsFwd = static_cast<double>(m_unit.ops.size());
    m_s.opsBwd = m_unit.opKind == OpKind::kAdd ? 0.0 : static_cast<double>(m_unit.ops.size());
    replicatedWeights();
  }

  void attention() {
    if (m_c.flash) {
      const auto t = costmodel::fusedAttentionSeconds(m_unit.flops * m_b / (tokenSplit() * m_out), m_c.device, m_unit.k);
      m_s.fwd = t.forward;
      m_s.bwd = t.backward;
      m_s.opsFwd = 1;  // one fused kernel each way
      m_s.opsBwd = 1;
      m_s.ownSaved = m_unit.ownSaved * m_b / (tokenSplit() * m_out);
    } else {
      unfusedAttention();
    }
    replicatedWeights();
    // Context parallelism over a sequence axis: keys and values gathered along it forward, gathered
    // again and their gradients reduce-scattered backward (all-gather context parallelism).
    const double qWidth = static_cast<double>(m_unit.n * m_unit.k);
    const double inWidth = m_inputs.empty() ? 0.0 : static_cast<double>(m_inputs[0].f);
    const double kvShare = inWidth > qWidth ? (inWidth - qWidth) / inWidth : 0.0;
    for (int a = 0; a < m_mesh.axes(); ++a) {
      if (m_s.role[static_cast<std::size_t>(a)] != Role::kSeq) continue;
      const double kv = m_inputBytes * m_b / m_inShards * kvShare * static_cast<double>(m_mesh.axisSize(a));
      const auto g = m_mesh.group(a);
      const double gather = costmodel::collectiveSeconds(costmodel::Collective::kAllGather, kv, g);
      m_s.commFwd += gather;
      m_s.commBwd += gather + costmodel::collectiveSeconds(costmodel::Collective::kReduceScatter, kv, g);
      m_s.opsFwd += 1;
      m_s.opsBwd += 2;
      m_s.comm += (m_s.comm.empty() ? "" : ", ") + std::string("kv all-gather(") + std::to_string(a) + ")";
    }
  }

  // Without fused kernels: the score and context products per head (queries split by a sequence axis,
  // keys whole), softmax and dropout streaming the scores, and every op's saved bytes (the scores too).
  void unfusedAttention() {
    const double heads = m_b / (m_tokens * m_out);
    for (const auto& g : m_unit.gemms) {
      const double count = g[0] * heads;
      const double m = g[1] / m_seq;
      m_s.fwd += costmodel::gemmSeconds(m, g[2], g[3], count, m_bytes, m_c.device);
      m_s.bwd += costmodel::gemmSeconds(m, g[3], g[2], count, m_bytes, m_c.device) +
                 costmodel::gemmSeconds(g[3], g[2], m, count, m_bytes, m_c.device);
    }
    const double traffic = m_unit.traffic * m_b / (tokenSplit() * m_out);
    m_s.fwd += costmodel::streamSeconds(traffic, m_c.device);
    m_s.bwd += costmodel::streamSeconds(1.5 * traffic, m_c.device);
    const double products = static_cast<double>(m_unit.gemms.size());
    const double others = static_cast<double>(m_unit.ops.size()) - products;
    m_s.opsFwd = products + others;
    m_s.opsBwd = 2 * products + others;
    m_s.inputSaved = 0;  // the products keep q, k and v among their saved bytes
    m_s.ownSaved = m_unit.unfusedSaved * m_b / (tokenSplit() * m_out);
  }

  bool moe() {
    for (const auto& g : m_unit.gemms) {
      const double groups = g[0];
      const bool routed = groups > 1;
      if (routed && std::fmod(groups, m_expert) != 0) return false;
      const double count = routed ? groups / m_expert : 1.0;
      const double rows = g[1] * m_b / tokenSplit() / count;
      double n = g[2], k = g[3];
      const bool router = !routed && n < static_cast<double>(m_unit.out.f) / 4;  // the router's few outputs
      if (!router && m_inner > 1) {
        // The experts' (and shared experts') hidden width splits: the up projection's output, the
        // down projection's input.
        double& width = n > k ? n : k;
        if (std::fmod(width, (n > k ? 2 : 1) * m_inner) != 0) return false;
        width /= m_inner;
      }
      m_s.fwd += costmodel::gemmSeconds(rows, n, k, count, m_bytes, m_c.device);
      m_s.opsFwd += 1;
      m_s.opsBwd += 2;
      m_s.bwd += costmodel::gemmSeconds(rows, k, n, count, m_bytes, m_c.device) +
                 costmodel::gemmSeconds(k, n, rows, count, m_bytes, m_c.device);
    }
    // Dispatch and combine: every token's k copies cross the expert axis each way.
    const double dispatch = m_b * static_cast<double>(m_unit.out.s) / tokenSplit() * m_unit.topK *
                            static_cast<double>(m_unit.out.f) * static_cast<double>(m_bytes);
    axisCollective(Role::kExpert, costmodel::Collective::kAllToAll, dispatch, 2, 2, "all-to-all");
    if (!m_s.comm.empty()) m_s.comm += " x4";
    // The block's other kernels (top-k, activation, combine), once each way.
    const double others = static_cast<double>(m_unit.ops.size()) - static_cast<double>(m_unit.gemms.size());
    m_s.opsFwd += others;
    m_s.opsBwd += others;
    const double dense = m_unit.params - m_unit.expertParams;
    m_s.stateParams = m_unit.expertParams / (m_expert * m_inner) + dense / m_inner;
    addSync(m_unit.expertParams / (m_expert * m_inner) * static_cast<double>(m_bytes), m_syncs);
    // The router and shared experts are replicated across the expert axis: reduced over it too.
    std::array<bool, 2> denseSync = m_syncs;
    for (int a = 0; a < m_mesh.axes(); ++a) {
      if (m_s.role[static_cast<std::size_t>(a)] == Role::kExpert) denseSync[static_cast<std::size_t>(a)] = true;
    }
    addSync(dense / m_inner * static_cast<double>(m_bytes), denseSync);
    m_s.ownSaved = m_unit.ownSaved * m_b / tokenSplit();
    return true;
  }

  void embedding() {
    const double written = m_b * static_cast<double>(m_unit.out.s * m_unit.k) * static_cast<double>(m_bytes) / tokenSplit();
    m_s.fwd = costmodel::streamSeconds(2 * written, m_c.device);
    m_s.stateParams = m_unit.params / m_out;
    // The dense gradient of the table shard, zero-filled, then added into the fp32 main gradients (the
    // evaluator's embedding backward, docs/costmodel.md).
    const double g = static_cast<double>(m_bytes);
    m_s.bwd = m_s.fwd + costmodel::streamSeconds(m_s.stateParams * (g + g + 2.0 * m_c.mainGradBytes), m_c.device);
    m_s.opsFwd = 1;
    m_s.opsBwd = 1;
    addSync(m_s.stateParams * static_cast<double>(m_bytes), m_syncs);
  }

  void loss() {
    const double traffic = m_unit.traffic * m_b / (tokenSplit() * m_out);
    m_s.fwd = costmodel::streamSeconds(traffic, m_c.device);
    m_s.bwd = costmodel::streamSeconds(1.5 * traffic, m_c.device);
    m_s.opsFwd = 1;
    m_s.opsBwd = 1;
    m_s.ownSaved = m_unit.ownSaved * m_b / (tokenSplit() * m_out);
    m_s.inputSaved = 0;
    // Vocabulary-parallel cross-entropy: the row maximum, the sum of exponentials and the target logit
    // are all-reduced over the vocabulary axis (4 bytes per token each).
    const double rows = static_cast<double>(m_unit.m) * m_b / tokenSplit() * 4.0;
    axisCollective(Role::kOut, costmodel::Collective::kAllReduce, rows, 3, 0, "all-reduce");
    if (!m_s.comm.empty()) m_s.comm += " x3";
  }

  const Unit& m_unit;
  const std::vector<TensorDims>& m_inputs;
  const CostContext& m_c;
  Strategy& m_s;
  const DeviceMesh& m_mesh;
  double m_b;
  std::int64_t m_bytes;
  double m_tokens = 1, m_seq = 1, m_out = 1, m_in = 1, m_expert = 1, m_inner = 1, m_fsdp = 1;
  double m_replicated = 1;  // ranks holding the same weights
  std::array<bool, 2> m_syncs{false, false};
  double m_inputBytes = 0, m_inShards = 1;
};

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
      if (Coster(unit, inputDims, context, s).run()) out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace colo::planner::detail
