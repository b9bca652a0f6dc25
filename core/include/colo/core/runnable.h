#pragma once
// What colo-run executes: one capability list, read by the executor (which refuses anything else before
// a rank starts) and by the planner (search --runnable, the GUI's marks), so they cannot disagree.
#include "colo/core/error.h"
#include "colo/core/plan.h"

namespace colo {

/// Nothing, or kBadInput naming the first plan or model field colo-run cannot execute and why. Runs:
/// decoder language models (GPT- and LLaMA-style: learned or rotary positions, MHA/GQA, GeLU/SwiGLU and
/// friends); tp with or without sequence parallelism, pp with gpipe, 1f1b or interleaved schedules, dp
/// with ZeRO 0-3 (FSDP's fp32 parameters with ZeRO-3); full and selective recompute; fp32 and bf16 mixed
/// precision; AdamW, LAMB and LARS.
[[nodiscard]] Result<void> checkRunnable(const Plan& plan);
/// The model's part of the list (its architecture and traits), whatever the plan.
[[nodiscard]] Result<void> checkRunnableModel(const Model& model);
[[nodiscard]] bool runnable(const Plan& plan);
/// Nothing when colo-run started by hand runs the plan on this machine; kBadInput when the plan spans
/// several multi-GPU nodes (every rank would run here): such a job is started on each node by torchrun
/// or SLURM. colo-run (without --nproc-per-node) and colo-studio's Run button both ask.
[[nodiscard]] Result<void> checkStartedByHand(const Plan& plan);

}  // namespace colo
