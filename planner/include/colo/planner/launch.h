#pragma once
/// What the launcher line of a job says besides the training script's own arguments: how many GPUs it
/// starts (DeepSpeed's `deepspeed` launcher, PyTorch's `torchrun`) and which DeepSpeed config the script
/// reads. And the shell variables launch scripts define before they use them (`GPUS_PER_NODE=8`,
/// `WORLD_SIZE=$(($GPUS_PER_NODE*$NNODES))`), expanded so that the arguments read as numbers.
#include <cstdint>
#include <optional>
#include <string>

#include "colo/core/error.h"

namespace colo::planner {

/// `NAME=value` and `export NAME=value` lines (values quoted or bare, `$NAME`/`${NAME}` of earlier ones,
/// and `$(( ))` integer arithmetic with + - * / and parentheses) substituted into the rest of the text.
/// Names the script does not define stay as written. Errors: kBadInput for arithmetic that does not
/// parse or divides by zero, naming the variable.
[[nodiscard]] Result<std::string> expandShellVariables(const std::string& script);

struct LaunchFacts {
  std::int64_t nodes = 0;        ///< --num_nodes (deepspeed), --nnodes (torchrun); 0: not said
  std::int64_t gpusPerNode = 0;  ///< --num_gpus/--num_accelerators (deepspeed), --nproc_per_node (torchrun)
  std::int64_t included = 0;     ///< GPUs listed by deepspeed --include host:0,1@host2:0,1; 0: none
  std::optional<std::string> hostfile;         ///< deepspeed --hostfile (its slots give the GPUs)
  std::optional<std::string> deepspeedConfig;  ///< the script's --deepspeed_config / --deepspeed-config
  /// The processes the launch starts, where it says (else 0): the listed GPUs, or nodes x GPUs per node
  /// (one node when only the per-node count is given).
  [[nodiscard]] std::int64_t world() const;
  /// How world() was read, for messages ("--num_nodes 2 x --num_gpus 8").
  [[nodiscard]] std::string describe() const;
};

/// The launcher's options in a launch (script or command line, after expandShellVariables).
/// Errors: kBadInput naming the option for a count that is not a positive integer (an elastic range
/// such as --nnodes 1:4, or a variable the script does not define).
[[nodiscard]] Result<LaunchFacts> launchFacts(const std::string& launch);

/// The GPUs of a DeepSpeed hostfile: the sum of its `host slots=N` lines (comments and blank lines
/// skipped). Errors: kBadInput naming the line for one without a positive slot count.
[[nodiscard]] Result<std::int64_t> hostfileSlots(const std::string& text);

}  // namespace colo::planner
