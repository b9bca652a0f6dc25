#pragma once
/// \file
/// The rules of the plan space that every search of the planner reads: the degree-level search
/// (`search()`), the operator-level search (`autoParallel()`) and the Megatron-style baselines. A rule
/// returns its name (what `colo-plan search --explain` counts) when it refuses a layout, or null; the
/// lists are the values each search tries. What colo-run executes is a separate list, the executor's own
/// (`colo/core/runnable.h`).

#include <cstdint>
#include <string>
#include <vector>

#include "colo/core/plan.h"

namespace colo::planner {

/// Model chunks per pipeline stage the searches try (1: plain 1F1B; above 1: Megatron's interleaved 1F1B).
inline const std::vector<std::int64_t> kChunkCounts{1, 2, 3, 4, 6, 8};

/// `pp` stages of a model of `layers` layers: each stage holds one at least.
[[nodiscard]] const char* stagesRule(std::int64_t layers, std::int64_t pp);
/// `chunks` model chunks per stage (Megatron's interleaved schedule): equal chunks, so pp x chunks
/// divides the layers, and pipelining (pp > 1).
[[nodiscard]] const char* chunksRule(std::int64_t layers, std::int64_t pp, std::int64_t chunks);
/// The interleaved schedule runs the micro-batches in groups of the stages (Megatron-LM's
/// `--num-layers-per-virtual-pipeline-stage` check).
[[nodiscard]] const char* interleavedBatchRule(std::int64_t microBatches, std::int64_t pp, std::int64_t chunks);
/// Tensor parallelism splits the attention heads and the key/value heads (0: the model has none).
[[nodiscard]] const char* headsRule(std::int64_t heads, std::int64_t kvHeads, std::int64_t tp);

/// The chunk counts of `wanted` (empty: kChunkCounts) that pass chunksRule and interleavedBatchRule for
/// `pp` stages of `layers` layers and `microBatches` micro-batches, in the order given.
[[nodiscard]] std::vector<std::int64_t> chunkCounts(const std::vector<std::int64_t>& wanted, std::int64_t layers, std::int64_t pp,
                                                    std::int64_t microBatches);

/// What a degree-level plan uses that the operator-level search's space (one 1-D or 2-D mesh per stage,
/// data-parallel replicas of meshes of whole nodes, 1F1B or interleaved 1F1B with kChunkCounts, ZeRO-0/1/3,
/// experts split beside tp) has no place for, as a comma-separated list; empty when it has a place.
[[nodiscard]] std::string outsideOperatorSpace(const Plan& plan);

}  // namespace colo::planner
