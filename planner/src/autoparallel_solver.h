#pragma once
// Private: the exact per-block solve of the operator-level auto-parallel search. A dynamic programme
// over the block's units in topological order whose state is the layout of every live tensor (and
// whether its producer will recompute it), so residual branches are handled exactly; each unit picks a
// strategy, whether to recompute, and for each converted input whether to keep it before or after the
// conversion. Objective: time per micro-batch + lambda x memory (docs/autoparallel.md, "Solver").

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "autoparallel_units.h"

namespace colo::planner::detail {

class BlockDp;

/// Which recompute choices the solve may make: per unit (the joint solve), or one choice for the whole
/// block as layer-level recompute does (none, full: every unit but the first, selective: attention's core).
enum class RecomputeMode { kPerUnit, kNone, kFull, kSelective };

struct SolveWeights {
  double lambda = 0;             ///< seconds per byte of per-GPU memory
  double activationCopies = 1;   ///< micro-batches whose activations are held at once (pipeline in flight)
  double microBatches = 1;       ///< per step: gradient reductions are amortised over them
  double syncExposed = 0.1;      ///< share of a gradient reduction left exposed after overlap with the backward
  double stateBytesPerParam = 6; ///< weights and gradients on the GPU
  double optimizerBytesPerParam = 12;  ///< fp32 master weights and moments, split over the replicas (ZeRO-1)
  RecomputeMode recompute = RecomputeMode::kPerUnit;
  /// Strategies the solve may use (null: all), by block, unit index and strategy.
  std::function<bool(const Block&, std::size_t, const Strategy&)> allow;
  /// A recompute choice imposed on a unit (null, or -1 for a unit: the mode decides; 0 keep; 1 recompute).
  std::function<int(const Block&, std::size_t)> forceRecompute;
};

struct UnitChoice {
  int strategy = -1;
  bool recompute = false;
  std::vector<bool> keepBeforeConversion;  ///< per input: saved in the producer's layout, converted again backward
};

struct BlockPlan {
  Layout entry, exit;
  double objective = std::numeric_limits<double>::infinity();
  double seconds = 0;          ///< per micro-batch: kernels, exposed collectives, recompute, amortised gradient reduction
  double computeSeconds = 0;   ///< kernels forward and backward
  double commSeconds = 0;      ///< layout conversions and collectives inside units
  double recomputeSeconds = 0;
  double activationBytes = 0;  ///< kept for backward, one micro-batch
  double stateBytes = 0;       ///< weights, gradients, optimizer states
  double params = 0;           ///< held after weight sharding
  double optimizerParams = 0;  ///< parameters whose optimizer states this GPU holds (after ZeRO-1)
  double forwardSeconds = 0;   ///< the forward part of seconds (kernels, collectives), for the host floor
  double opsForward = 0, opsBackward = 0, opsRecompute = 0;  ///< kernels and collectives the host issues forward, backward, recomputing
  double syncBytes[3] = {0, 0, 0};    ///< gradient bytes reduced per step over axis 0, axis 1, both
  std::vector<UnitChoice> units;
  [[nodiscard]] bool valid() const { return objective < std::numeric_limits<double>::infinity(); }
};

/// Seconds of one step's gradient reductions: `syncBytes` over axis 0, axis 1 and both (reduce-scatter
/// inside the inner axis, all-reduce across the outer, all-gather back). With `replicas` data-parallel
/// copies of the mesh (placed outside it, docs/autoparallel.md "Replicas"), `heldBytes` is every gradient
/// byte the GPU holds: the outer axis and the replicas reduce as one group, an inner-axis reduction's
/// shard is reduced across the replicas, and what the mesh does not reduce across the replicas alone.
[[nodiscard]] double gradientSyncSeconds(const DeviceMesh& mesh, const double syncBytes[3], std::int64_t replicas = 1,
                                         double heldBytes = 0);

class BlockSolver {
 public:
  BlockSolver(const Block& block, const CostContext& context, LayoutConverter& converter);
  /// What a caller adds to a plan for leaving the block by `exit` having entered by `entry` (infinite:
  /// not wanted), when it wants one plan per entry.
  using ExitCost = std::function<double(Layout entry, Layout exit)>;
  /// The best plan for every (entry, exit) pair reachable from `entries` (ignored for a block without
  /// an input), in order of entry and then exit. With `exitCost`, only each entry's plan of least
  /// objective + exitCost (the first such in that order), and no entry whose every sum is infinite: the
  /// plans a caller would pick from the whole list, without the work of describing the others.
  [[nodiscard]] std::vector<BlockPlan> solve(const std::vector<Layout>& entries, const SolveWeights& weights,
                                             const ExitCost& exitCost = nullptr) const;
  [[nodiscard]] const Block& block() const { return *m_block; }
  [[nodiscard]] const std::vector<std::vector<Strategy>>& strategies() const { return m_strategies; }
  /// The forward conversion of input `input` of unit `unit` from `from` to what strategy `s` needs.
  [[nodiscard]] const Conversion& conversion(std::size_t unit, std::size_t input, std::size_t s, Layout from) const;
  /// Share of unit `unit`'s saved input bytes that input `input` holds.
  [[nodiscard]] double inputShare(std::size_t unit, std::size_t input) const { return m_inputShare[unit][input]; }

 private:
  friend class BlockDp;
  // The constructor's steps (autoparallel_tables.cpp): unit u's inputs (dimensions, shares, bytes); its
  // strategies with their hot figures and gradient reductions; its inputs' conversion tables; then,
  // for the whole block, which unit last uses and last keeps each tensor and what a unit can keep.
  void readInputs(std::size_t u);
  void costStrategies(std::size_t u);
  void fillConversions(std::size_t u);
  void findUses();
  const Block* m_block;
  CostContext m_context;
  LayoutConverter* m_converter;
  std::vector<std::vector<Strategy>> m_strategies;              // per unit
  std::vector<std::vector<TensorDims>> m_inputDims;             // per unit, per input
  std::vector<std::vector<double>> m_inputShare;                // per unit, per input: share of its saved input bytes
  std::vector<std::vector<double>> m_inputBytes;                // per unit, per input: its whole bytes per micro-batch
  // Per unit, strategy: the figures the solve's inner loop reads, together (sums as the solve adds them).
  struct Hot {
    double fwdBwd = 0;      // fwd + bwd
    double commBoth = 0;    // commFwd + commBwd
    double fwdAgain = 0;    // fwd + commFwd: what recomputing runs again
    double inputSaved = 0, ownSaved = 0;
    double inShare = 0;     // the share of its input layout one GPU holds
    int outCode = 0;        // its output layout's code, recompute bit clear
  };
  std::vector<std::vector<Hot>> m_hot;
  // Per unit, input, strategy, producer layout: forward and backward conversion seconds.
  std::vector<std::vector<std::vector<std::array<float, kLayouts>>>> m_convFwd, m_convBwd;
  std::vector<std::vector<std::vector<std::array<std::uint8_t, kLayouts>>>> m_convOps;  // collectives of both conversions
  std::vector<std::vector<double>> m_syncSeconds;                 // per unit, strategy: one step's gradient reduction
  std::array<double, kLayouts> m_share{};                          // per layout: the share of a tensor one GPU holds
  std::array<bool, kLayouts> m_partial{};                          // per layout: whether it holds partial sums
  std::vector<int> m_lastUse;                                   // per unit output (and the input, index 0 = -1): last consumer
  std::vector<int> m_lastSaver;                                 // the same: last consumer that keeps it for backward (-1: none)
  // Per unit, per input: the most bytes the unit can keep of that input, over its strategies, when it
  // keeps its output ([0]) and when it recomputes ([1]): what recomputing the input's producer spares it.
  std::vector<std::vector<std::array<double, 2>>> m_inputKept;
};

}  // namespace colo::planner::detail
