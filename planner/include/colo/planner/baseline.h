#pragma once
/// \file
/// The configurations experts set by hand, to compare colo's plans against: Megatron-LM's published rules
/// (Narayanan et al. 2021, Korthikanti et al. 2022), ZeRO-3 data parallelism, and plain data parallelism.

#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/plan.h"
#include "colo/costmodel/evaluator.h"

namespace colo::planner {

enum class Baseline { kMegatron, kZero3, kDdp };
[[nodiscard]] Result<Baseline> parseBaseline(const std::string& name);  ///< megatron, zero3, ddp
[[nodiscard]] std::string toString(Baseline baseline);

struct BaselinePlan {
  Plan plan;
  costmodel::Evaluation evaluation;
  std::string rules;  ///< how the configuration was chosen
};

/// The baseline for a model on a cluster. Megatron: tensor parallelism inside a node up to 8 (the
/// largest power of two dividing the heads and key/value groups), pipeline parallelism as small as
/// fits the memory budget, data parallelism for the rest, the interleaved schedule with at least two
/// layers per chunk, selective recompute with sequence parallelism, the distributed optimizer (ZeRO-1),
/// micro-batch 1. ZeRO-3: all GPUs data-parallel, ZeRO-3, full recompute. DDP: all GPUs data-parallel,
/// full recompute. The result may not fit; `evaluation.fits` says. Errors: kBadInput when the global
/// batch does not divide over the data-parallel ranks. The baseline runs the attention kernels of
/// `kernels` (flash, flash2 or unfused), its eager elementwise kernels and its loss (unfused,
/// torchCrossEntropy, fusedCrossEntropy, crossEntropyInPlace), so that it compares like with like with a
/// plan that names them.
[[nodiscard]] Result<BaselinePlan> baselinePlan(Baseline baseline, const Model& model, const ClusterSpec& cluster,
                                                std::int64_t globalBatchSize, std::int64_t seqLen, DType precision,
                                                double maxMemoryFraction, const Execution& kernels = {});

/// The recompute of a plan in words: "none", "selective", "full 40/96" (layers recomputed of all).
[[nodiscard]] std::string recomputeSummary(const Plan& plan);
/// Layers per pipeline stage, runs written once with a count: "7,6x14,7" for 7, fourteen 6s and 7.
[[nodiscard]] std::string stagesSummary(const Plan& plan);
/// The same for layer counts given directly (an operator plan's stageLayers).
[[nodiscard]] std::string stagesSummary(const std::vector<std::int64_t>& layers);

/// The settings in which two plans differ (GPUs, batch, sequence, precision, attention kernel, eager
/// kernels, loss (torch, fused, fused-in-place or vocab-parallel), degrees,
/// schedule, layout, ZeRO, recompute, offload, layers per stage), e.g. "tp 8 -> 4; recompute selective -> none".
[[nodiscard]] std::string planDifferences(const Plan& from, const Plan& to);

}  // namespace colo::planner
