#include "colo/core/op_graph.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>

#include <algorithm>
#include <iterator>

namespace colo {

using BoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, Op>;

struct OpGraph::Impl {
  GraphInfo info;
  BoostGraph graph;
};

std::int64_t Op::dim(const std::string& key, std::int64_t fallback) const {
  for (const auto& [dimName, value] : dims) {
    if (dimName == key) return value;
  }
  return fallback;
}

void OpTotals::add(const Op& op) {
  params += op.params;
  activeParams += op.activeParams;
  if (op.isGemm()) {
    gemmFlopsFwd += op.flopsFwd;
    gemmFlopsBwd += op.flopsBwd;
  } else {
    otherFlopsFwd += op.flopsFwd;
    otherFlopsBwd += op.flopsBwd;
  }
  bytesRead += op.bytesRead;
  bytesWritten += op.bytesWritten;
  savedBytes += op.savedBytes;
  ++ops;
}

OpGraph::OpGraph() : m_impl(std::make_unique<Impl>()) {}
OpGraph::OpGraph(GraphInfo info) : m_impl(std::make_unique<Impl>()) { m_impl->info = std::move(info); }
OpGraph::OpGraph(const OpGraph& other) : m_impl(std::make_unique<Impl>(*other.m_impl)) {}
OpGraph::OpGraph(OpGraph&& other) noexcept = default;
OpGraph& OpGraph::operator=(const OpGraph& other) {
  if (this != &other) m_impl = std::make_unique<Impl>(*other.m_impl);
  return *this;
}
OpGraph& OpGraph::operator=(OpGraph&& other) noexcept = default;
OpGraph::~OpGraph() = default;

const GraphInfo& OpGraph::info() const { return m_impl->info; }
GraphInfo& OpGraph::info() { return m_impl->info; }

std::size_t OpGraph::addOp(Op op) { return boost::add_vertex(std::move(op), m_impl->graph); }

void OpGraph::addEdge(std::size_t from, std::size_t to) { boost::add_edge(from, to, m_impl->graph); }

std::size_t OpGraph::size() const { return boost::num_vertices(m_impl->graph); }

const Op& OpGraph::op(std::size_t id) const { return m_impl->graph[id]; }

std::vector<std::size_t> OpGraph::successors(std::size_t id) const {
  std::vector<std::size_t> out;
  for (auto [it, end] = boost::adjacent_vertices(id, m_impl->graph); it != end; ++it) out.push_back(*it);
  return out;
}

std::vector<std::size_t> OpGraph::predecessors(std::size_t id) const {
  std::vector<std::size_t> out;
  for (auto [it, end] = boost::in_edges(id, m_impl->graph); it != end; ++it) {
    out.push_back(boost::source(*it, m_impl->graph));
  }
  return out;
}

std::vector<std::pair<std::size_t, std::size_t>> OpGraph::edges() const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (auto [it, end] = boost::edges(m_impl->graph); it != end; ++it) {
    out.emplace_back(boost::source(*it, m_impl->graph), boost::target(*it, m_impl->graph));
  }
  return out;
}

Result<std::vector<std::size_t>> OpGraph::topologicalOrder() const {
  std::vector<std::size_t> reversed;
  try {
    boost::topological_sort(m_impl->graph, std::back_inserter(reversed));
  } catch (const boost::not_a_dag&) {
    // Find an op on a cycle to name: repeatedly strip ops with no remaining inputs (Kahn); what is
    // left lies on or behind a cycle.
    std::vector<std::size_t> indegree(size(), 0);
    for (const auto& [from, to] : edges()) ++indegree[to];
    std::vector<std::size_t> ready;
    for (std::size_t v = 0; v < size(); ++v) {
      if (indegree[v] == 0) ready.push_back(v);
    }
    while (!ready.empty()) {
      const std::size_t v = ready.back();
      ready.pop_back();
      for (const auto next : successors(v)) {
        if (--indegree[next] == 0) ready.push_back(next);
      }
    }
    for (std::size_t v = 0; v < size(); ++v) {
      if (indegree[v] > 0) {
        return fail(Error::badInput("the op graph has a cycle through op " + std::to_string(v) + " (\"" +
                                    op(v).name + "\")"));
      }
    }
    return fail(Error::badInput("the op graph has a cycle"));
  }
  return std::vector<std::size_t>(reversed.rbegin(), reversed.rend());
}

OpTotals OpGraph::totals() const {
  OpTotals t;
  for (std::size_t v = 0; v < size(); ++v) t.add(op(v));
  return t;
}

OpTotals OpGraph::layerTotals(std::int64_t layer) const {
  OpTotals t;
  for (std::size_t v = 0; v < size(); ++v) {
    if (op(v).layer == layer) t.add(op(v));
  }
  return t;
}

std::vector<std::size_t> OpGraph::layerOps(std::int64_t layer) const {
  std::vector<std::size_t> out;
  for (std::size_t v = 0; v < size(); ++v) {
    if (op(v).layer == layer) out.push_back(v);
  }
  return out;
}

bool OpGraph::operator==(const OpGraph& other) const {
  if (!(info() == other.info()) || size() != other.size()) return false;
  for (std::size_t v = 0; v < size(); ++v) {
    if (!(op(v) == other.op(v))) return false;
  }
  auto a = edges();
  auto b = other.edges();
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

std::string toString(OpKind kind) {
  switch (kind) {
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kLayerNorm: return "layernorm";
    case OpKind::kRmsNorm: return "rmsnorm";
    case OpKind::kMatMul: return "matmul";
    case OpKind::kBatchedMatMul: return "bmm";
    case OpKind::kGroupedMatMul: return "grouped_matmul";
    case OpKind::kSoftmax: return "softmax";
    case OpKind::kActivation: return "activation";
    case OpKind::kGatedActivation: return "gated_activation";
    case OpKind::kDropout: return "dropout";
    case OpKind::kRotary: return "rotary";
    case OpKind::kAdd: return "add";
    case OpKind::kTopK: return "topk";
    case OpKind::kCrossEntropy: return "cross_entropy";
    case OpKind::kPermute: return "permute";
    case OpKind::kElementwise: return "elementwise";
  }
  return "elementwise";
}

std::string toString(Shard shard) {
  switch (shard) {
    case Shard::kReplicated: return "replicated";
    case Shard::kSequence: return "sequence";
    case Shard::kColumn: return "column";
    case Shard::kRow: return "row";
    case Shard::kHeads: return "heads";
    case Shard::kInner: return "inner";
    case Shard::kVocab: return "vocab";
    case Shard::kExpert: return "expert";
  }
  return "replicated";
}

}  // namespace colo
