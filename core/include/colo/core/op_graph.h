#pragma once
/// \file
/// OpGraph: a model expanded into operators with shapes, FLOPs, bytes, parameters and the activation
/// bytes each keeps for backward, plus the data-flow edges between them. Built from a ModelSpec
/// (buildOpGraph) or read from a `colo.opgraph/1` file, so a model from another framework can be
/// described directly. Boost.Graph holds the edges; this header exposes a plain API.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/model_spec.h"

namespace colo {

/// What an operator computes; decides how the cost model times it.
enum class OpKind {
  kEmbedding,        ///< table lookup
  kLayerNorm,
  kRmsNorm,
  kMatMul,           ///< activation x weight GEMM: dims m (rows), n (out), k (in)
  kBatchedMatMul,    ///< activation x activation GEMMs (attention): dims batch, m, n, k
  kGroupedMatMul,    ///< MoE experts: dims groups, m (routed rows, all groups), n, k
  kSoftmax,
  kActivation,       ///< gelu / relu / silu
  kGatedActivation,  ///< swiglu / geglu: act(gate) * up
  kDropout,
  kRotary,           ///< rotary position embedding applied to q and k
  kAdd,              ///< residual or embedding sum
  kTopK,             ///< MoE routing
  kCrossEntropy,
  kPermute,          ///< rows copied into another order by an index (MoE token dispatch); dims elements, groups
  kElementwise,      ///< anything else elementwise
};

/// How tensor (and expert) parallelism splits an operator, Megatron-style.
enum class Shard {
  kReplicated,  ///< every tensor-parallel rank does the whole op
  kSequence,    ///< works on full-width activations: replicated under TP, split under sequence parallel
  kColumn,      ///< weight split along its output dimension
  kRow,         ///< weight split along its input dimension; output needs a reduction
  kHeads,       ///< attention core: split by heads
  kInner,       ///< elementwise on a column-split activation: split by TP
  kVocab,       ///< embedding, LM head and loss split along the vocabulary
  kExpert,      ///< MoE experts: split by expert parallelism
};

/// One operator. FLOPs and bytes are for the whole graph's batch (GraphInfo::batch samples of
/// GraphInfo::seqLen tokens); everything scales linearly with the batch.
struct Op {
  std::string name;                 ///< e.g. "layers.3.attn.qkv"
  OpKind kind = OpKind::kElementwise;
  std::int64_t layer = -1;          ///< -1: before the first layer; numLayers: after the last
  std::string block;                ///< embedding, attention, mlp, moe, norm, head, loss
  Shard shard = Shard::kReplicated;
  std::vector<std::pair<std::string, std::int64_t>> dims;  ///< named sizes, e.g. {m, n, k}
  std::int64_t params = 0;          ///< parameters this op owns (a tied head owns none)
  std::int64_t activeParams = 0;    ///< parameters one token uses (MoE: top_k of num_experts)
  double flopsFwd = 0;              ///< forward FLOPs (GEMMs: 2mnk; no causal halving)
  double flopsBwd = 0;              ///< backward FLOPs (GEMMs with weights: 2x forward)
  std::int64_t bytesRead = 0;       ///< forward bytes read (inputs + weights)
  std::int64_t bytesWritten = 0;    ///< forward bytes written
  std::int64_t savedBytes = 0;      ///< activation bytes kept for backward without recompute
  bool causal = false;              ///< attention with a causal mask (half the scores are masked)

  [[nodiscard]] std::int64_t dim(const std::string& key, std::int64_t fallback = 0) const;
  [[nodiscard]] bool isGemm() const {
    return kind == OpKind::kMatMul || kind == OpKind::kBatchedMatMul || kind == OpKind::kGroupedMatMul;
  }
  friend bool operator==(const Op&, const Op&) = default;
};

/// Graph-wide facts.
struct GraphInfo {
  std::string name;
  std::int64_t seqLen = 0;       ///< tokens per sample
  std::int64_t batch = 1;        ///< samples the op figures are for
  std::int64_t dtypeBytes = 2;   ///< bytes per activation element (2 for bf16/fp16)
  std::int64_t numLayers = 0;
  std::int64_t hiddenSize = 0;   ///< 0 when unknown (raw graphs may omit the model facts)
  std::int64_t numAttentionHeads = 0;
  std::int64_t numKvHeads = 0;
  std::int64_t vocabSize = 0;
  friend bool operator==(const GraphInfo&, const GraphInfo&) = default;
};

/// Sums over a set of ops.
struct OpTotals {
  std::int64_t params = 0;
  std::int64_t activeParams = 0;
  double gemmFlopsFwd = 0;   ///< forward FLOPs of GEMMs (the model-FLOP conventions count these)
  double gemmFlopsBwd = 0;
  double otherFlopsFwd = 0;  ///< forward FLOPs of everything else (norms, softmax, ...)
  double otherFlopsBwd = 0;
  std::int64_t bytesRead = 0;
  std::int64_t bytesWritten = 0;
  std::int64_t savedBytes = 0;
  std::int64_t ops = 0;
  void add(const Op& op);
};

class OpGraph {
 public:
  OpGraph();
  explicit OpGraph(GraphInfo info);
  OpGraph(const OpGraph& other);
  OpGraph(OpGraph&& other) noexcept;
  OpGraph& operator=(const OpGraph& other);
  OpGraph& operator=(OpGraph&& other) noexcept;
  ~OpGraph();

  [[nodiscard]] const GraphInfo& info() const;
  GraphInfo& info();

  /// Adds an op and returns its id (ids are dense, in insertion order).
  std::size_t addOp(Op op);
  /// Adds a data-flow edge. Both ids must exist (programmer error otherwise).
  void addEdge(std::size_t from, std::size_t to);

  [[nodiscard]] std::size_t size() const;
  [[nodiscard]] const Op& op(std::size_t id) const;
  [[nodiscard]] std::vector<std::size_t> successors(std::size_t id) const;
  [[nodiscard]] std::vector<std::size_t> predecessors(std::size_t id) const;
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> edges() const;

  /// Ops in an order where every op follows its inputs. Errors: kBadInput naming an op on a cycle.
  [[nodiscard]] Result<std::vector<std::size_t>> topologicalOrder() const;

  /// Totals over all ops, or over the ops of one layer (-1 and numLayers for the outer ops).
  [[nodiscard]] OpTotals totals() const;
  [[nodiscard]] OpTotals layerTotals(std::int64_t layer) const;
  /// Ids of the ops of one layer, in insertion order.
  [[nodiscard]] std::vector<std::size_t> layerOps(std::int64_t layer) const;

  /// Same ops, edges and info.
  [[nodiscard]] bool operator==(const OpGraph& other) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

/// How to expand a spec: sequence length, samples, and activation bytes per element.
struct GraphOptions {
  std::int64_t seqLen = 0;     ///< 0: the spec's defaultSeqLen()
  std::int64_t batch = 1;
  std::int64_t dtypeBytes = 2;
};

/// Expands a validated spec into its op graph. Errors: kBadInput when the sequence length exceeds a
/// learned position table or is given for an image model, whose length is fixed by its patches.
[[nodiscard]] Result<OpGraph> buildOpGraph(const ModelSpec& spec, const GraphOptions& options = {});
/// Whether buildOpGraph would succeed, without building (its errors, word for word); the sequence length
/// it would use.
[[nodiscard]] Result<std::int64_t> checkGraphOptions(const ModelSpec& spec, const GraphOptions& options = {});

/// Reads a `colo.opgraph/1` document (unknown fields rejected, edges checked, cycles rejected).
[[nodiscard]] Result<OpGraph> opGraphFromJson(const Json& document, const std::string& file);
/// Writes a `colo.opgraph/1` document that reads back equal.
[[nodiscard]] Json opGraphToJson(const OpGraph& graph);

[[nodiscard]] std::string toString(OpKind kind);
[[nodiscard]] std::string toString(Shard shard);

}  // namespace colo
