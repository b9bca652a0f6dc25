#pragma once
/// \file
/// A plan written as the launch settings of the tools users run today.

#include <string>

#include "colo/core/error.h"
#include "colo/core/plan.h"

namespace colo::planner {

enum class ExportFormat { kMegatron, kDeepSpeed, kColossalAi, kTorchrun, kSlurm };
[[nodiscard]] Result<ExportFormat> parseExportFormat(const std::string& name);  ///< megatron, deepspeed, colossalai, torchrun, slurm

/// The text of the export:
/// - megatron: Megatron-LM `pretrain_gpt.py` arguments (parallel degrees, batch, model shape, precision,
///   recompute, distributed optimizer, overlaps, uneven first/last pipeline stages);
/// - deepspeed: a DeepSpeed JSON config (batch sizes, ZeRO stage and offload, precision, checkpointing);
/// - colossalai: Python constructing Colossal-AI's `HybridParallelPlugin` with the plan's settings;
/// - torchrun / slurm: a launch script that runs `colo-run PLAN` on every node.
/// `planFile` is the path the scripts pass to colo-run. Errors: kBadInput for settings the target cannot
/// express (e.g. a raw op graph for Megatron, which needs the architecture).
[[nodiscard]] Result<std::string> exportPlan(const Plan& plan, ExportFormat format, const std::string& planFile);

}  // namespace colo::planner
