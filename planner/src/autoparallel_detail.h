#pragma once
// Private: what the operator-level search (autoparallel.cpp) and its reporting (autoparallel_report.cpp)
// share: the solved blocks of one candidate and Megatron's rules as a strategy filter.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autoparallel_solver.h"
#include "colo/planner/autoparallel.h"

namespace colo::planner::detail {

/// A distinct transformer layer structure and the layers that have it.
struct LayerClass {
  Block block;
  std::vector<std::int64_t> layers;
};

/// Megatron-LM's split on a mesh: data parallel on the outer axis (a 2-D mesh) and tensor parallelism on
/// the inner one (on a 1-D mesh the one axis is either), sequence parallelism optional.
struct MegatronRule {
  int tpAxis = -1;  // -1: no tensor parallelism
  int dpAxis = -1;  // -1: no data parallelism; 2: both axes of a 2-D mesh
  bool sequenceParallel = false;
  bool fsdp = false;  // data parallelism with sharded weights (ZeRO-3): weight-bearing operators use kFsdp
  int cpAxis = -1;    // context parallelism: every operator splits the sequence over this axis
  // What a MoE block does on the data-parallel axes: -1 either (the search chooses), 0 split the batch
  // (ep 1), 1 split the experts (Megatron's expert parallelism over those ranks; a degree-level plan's view).
  int expertsOverDp = -1;
};
/// Whether `s` is the strategy Megatron's rule gives `unit`.
[[nodiscard]] bool megatronAllows(const MegatronRule& rule, const Unit& unit, const Strategy& s, const DeviceMesh& mesh);
/// The rules that can apply on a mesh of `axes` axes.
[[nodiscard]] std::vector<MegatronRule> megatronRules(int axes);

/// A block's solved plan, with what the report needs to print it.
struct SolvedBlock {
  const BlockSolver* solver = nullptr;
  BlockPlan plan;
  std::string name;
  std::int64_t count = 1;
  /// Kept activation bytes moved to host memory in this block (per micro-batch).
  double offloadedBytes = 0;
};

/// The per-operator tables of a plan's blocks (`replicas`: data-parallel copies of the mesh, which split
/// the optimizer states once more).
[[nodiscard]] std::vector<BlockAssignment> assignments(const std::vector<SolvedBlock>& blocks, const DeviceMesh& mesh,
                                                       const SolveWeights& weights, std::int64_t replicas = 1);

/// The degree-level plan a solved plan equals, or why it has none.
struct Equivalent {
  bool runnable = false;
  std::string text;  // "tp=8 dp=1 pp=16 sp, recompute none", or "simulation-only: ..."
  std::int64_t tp = 1, dp = 1, cp = 1;
  std::int64_t ep = 1;  // MoE experts split over the data-parallel axis (or axes)
  bool sequenceParallel = false;
  int zeroStage = 1;  // 3 when the data-parallel axis shards the weights
  std::string recompute = "none";
};
/// `replicas`: data-parallel copies of the mesh (their count multiplies the data-parallel degree).
/// Offloaded activations or weights make a plan simulation-only (colo-run offloads optimizer states only).
[[nodiscard]] Equivalent expressAs(const std::vector<SolvedBlock>& blocks, const DeviceMesh& mesh, std::int64_t pp,
                                   double activationOffload, double weightOffload = 0.0, std::int64_t replicas = 1);

/// A role's stored name (none, batch, seq, out, in, expert, inner) and back (false when unknown).
[[nodiscard]] std::string roleName(Role role);
[[nodiscard]] bool parseRole(const std::string& name, Role& role);

}  // namespace colo::planner::detail
