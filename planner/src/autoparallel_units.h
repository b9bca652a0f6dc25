#pragma once
// Private: a block of the op graph (one transformer layer, the embedding, the head) regrouped into the
// units the operator-level solver gives strategies to, and every strategy of a unit on a mesh with its
// compute, communication and memory for one micro-batch (docs/autoparallel.md).

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "colo/core/op_graph.h"
#include "colo/costmodel/hardware.h"
#include "colo/planner/sharding.h"

namespace colo::planner::detail {

enum class UnitKind { kGemm, kNorm, kPointwise, kAttention, kMoe, kEmbedding, kLoss };

/// What one mesh axis does inside a unit. kOut splits a GEMM's output columns (and a pointwise op's
/// features, attention's heads, the vocabulary of an embedding or loss); kIn a GEMM's reduction
/// dimension; kExpert MoE experts (tokens split alike); kInner the experts' own hidden width; kFsdp
/// splits tokens like kBatch and shards the weights too, gathered before each use and their gradients
/// reduce-scattered (ZeRO-3 / FSDP).
enum class Role : std::uint8_t { kNone, kBatch, kSeq, kOut, kIn, kExpert, kInner, kFsdp };

/// One unit: a GEMM, a norm, a pointwise op, fused attention (scores, softmax, dropout, context and
/// rotary), a whole MoE block, an embedding lookup or the loss. Figures are for one sample.
struct Unit {
  std::string name;                 // graph op name without its layer prefix ("attn.qkv", "attn.core")
  UnitKind kind = UnitKind::kPointwise;
  OpKind opKind = OpKind::kElementwise;
  Shard shard = Shard::kReplicated;  // how Megatron's tensor parallelism splits its first op
  std::vector<int> inputs;          // producing units of this block; -1 is the block's input
  TensorDims out;                   // the tensor it produces (f = 0: nothing, the loss)
  std::int64_t m = 0, n = 0, k = 0; // GEMM
  double params = 0;                // weights it owns
  double tiedParams = 0;            // a tied head: the embedding's weight it multiplies by (its own copy, unless shared)
  double expertParams = 0;          // MoE: the routed experts' part of params
  double traffic = 0;               // pointwise and norms: forward bytes read and written
  double flops = 0;                 // attention: forward score and context FLOPs after the mask
  double kvFraction = 0;            // attention: share of its input that is keys and values
  double inputSaved = 0;            // bytes kept of its input(s) for backward (0: needs none)
  double ownSaved = 0;              // bytes kept of its own (dropout mask, softmax statistics, MoE internals)
  std::vector<std::array<double, 4>> gemms;  // MoE: {groups, rows, n, k} of each GEMM inside; attention: {heads, m, n, k} of its products
  double unfusedSaved = 0;          // attention without fused kernels: bytes its ops keep (scores included)
  double topK = 1;                  // MoE: experts per token
  std::vector<std::string> ops;     // the graph ops it stands for
};

struct Block {
  std::string name;                 // "layer" (or "layer class N"), "embedding", "head"
  std::vector<Unit> units;          // in topological order
  bool hasInput = false;            // the residual stream enters (every block but the embedding)
  TensorDims input;                 // [s, hidden]
};

/// The ops of layer `layer` (-1: embedding, numLayers: head) regrouped into units.
[[nodiscard]] Block makeBlock(const OpGraph& graph, std::int64_t layer, const std::string& name);

/// One way to run a unit on the mesh: a role per axis and what follows from it, per micro-batch.
struct Strategy {
  std::array<Role, 2> role{Role::kNone, Role::kNone};
  Layout in, out, gradIn;           // required input layout, produced layout, layout of the input's gradient
  double fwd = 0, bwd = 0;          // kernels, seconds
  double opsFwd = 0, opsBwd = 0;    // kernels and collectives the host issues (the host floor)
  double commFwd = 0, commBwd = 0;  // collectives inside the unit (attention's key/value gathers, MoE all-to-alls, the loss's reductions)
  std::string comm;                 // what they are, e.g. "all-to-all(1) x4"
  double syncBytes[3] = {0, 0, 0};  // gradient bytes reduced once per step over axis 0, axis 1, both
  double stateParams = 0;           // parameters held (after weight sharding)
  double optimizerShard = 1;        // ranks the optimizer states of those parameters are split over (ZeRO-1)
  double inputSaved = 0;            // bytes of its input kept for backward, in layout `in`
  double ownSaved = 0;
};

struct CostContext {
  const DeviceMesh* mesh = nullptr;
  costmodel::DeviceModel device;
  std::int64_t samples = 1;         // micro-batch over the whole mesh
  std::int64_t dtypeBytes = 2;
  bool flash = true;                // fused attention; false: scores, softmax, dropout and context apart
  double mainGradBytes = 4;         // Megatron's main gradients (fp32; 16-bit under fp16)
  std::int64_t replicas = 1;        // data-parallel copies of the mesh: its gradients are reduced across them too
};

/// Every valid strategy of `unit` for the micro-batch (a unit that splits nothing always has one).
/// `inputDims` are the tensors it reads (same order as unit.inputs).
[[nodiscard]] std::vector<Strategy> strategies(const Unit& unit, const std::vector<TensorDims>& inputDims,
                                               const CostContext& context);

[[nodiscard]] std::string toString(Role role);
[[nodiscard]] std::string describeRoles(const Strategy& s, int axes);

}  // namespace colo::planner::detail
