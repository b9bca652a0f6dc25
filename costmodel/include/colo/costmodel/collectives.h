#pragma once
/// \file
/// Collective communication over the cluster's link levels: where a parallel group's members sit
/// (from the rank layout) and how long each collective takes on the links it crosses.

#include <cstdint>
#include <string>

#include "colo/core/cluster.h"
#include "colo/core/plan.h"

namespace colo::costmodel {

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kAllToAll, kSendRecv };

/// Where the members of one communication group sit.
struct GroupPlacement {
  std::int64_t size = 1;          ///< members
  std::int64_t stride = 1;        ///< rank distance between consecutive members
  std::int64_t perNode = 1;       ///< members that share a node
  const LinkLevel* inner = nullptr;  ///< the level joining members inside a node (null: one per node)
  const LinkLevel* outer = nullptr;  ///< the level joining nodes (null: the group fits in a node)
  [[nodiscard]] bool crossesNodes() const { return outer != nullptr; }
  friend bool operator==(const GroupPlacement&, const GroupPlacement&) = default;
};

/// The parallel dimensions a group can be formed over. kExpert is the expert-parallel group of the
/// expert layers' mesh (expert_tp-ep-edp over a stage's ranks, innermost first); kExpertData its
/// expert-data-parallel group: the ranks that hold the same experts, over which their gradients are
/// reduced and their optimizer states sharded.
enum class Dim { kTp, kCp, kDp, kPp, kExpert, kExpertData };

/// Placement of a group of dimension `dim` under the plan's rank order (innermost first).
[[nodiscard]] GroupPlacement placeGroup(const ClusterSpec& cluster, const Parallelism& parallel, Dim dim);

/// Placement of `size` ranks spaced `stride` apart (a sub-group of a placed group: hierarchical context
/// parallelism's all-to-all level is `a` consecutive members of the cp group, its ring every a-th).
[[nodiscard]] GroupPlacement placeRanks(const ClusterSpec& cluster, std::int64_t size, std::int64_t stride);

/// Time of one collective of `bytes` (the full buffer: the all-reduced tensor, the gathered output, the
/// scattered input, the all-to-all send buffer, the message) over a placed group. Ring algorithm inside a
/// level; across nodes the per-GPU network rails of the members of a node work in parallel
/// (hierarchical bandwidth = min(inner, perNode x outer)). Latency grows with the ring's steps.
[[nodiscard]] double collectiveSeconds(Collective kind, double bytes, const GroupPlacement& group);
/// An all-to-all whose traffic leaving each node is `offNodeShare` of every member's buffer and whose
/// traffic inside the node is `onNodeShare` of it (a plain all-to-all: (n - perNode)/n and
/// (perNode - 1)/n; a deduplicating MoE dispatcher sends less across nodes and forwards inside).
[[nodiscard]] double allToAllSeconds(double bytes, const GroupPlacement& g, double offNodeShare, double onNodeShare);

}  // namespace colo::costmodel
