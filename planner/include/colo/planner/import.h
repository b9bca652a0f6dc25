#pragma once
/// \file
/// The job a user already runs, read into a colo plan on a given cluster, so that evaluate, compare and
/// search answer "what does my current job cost, and what would be faster" (`colo-plan import`). Each
/// reader takes what the launch states and refuses, naming the setting, what colo cannot represent.
/// Export then import gives back the same plan (tests/planner/import_test.cpp).

#include <optional>
#include <string>

#include "colo/core/cluster.h"
#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/model.h"
#include "colo/core/plan.h"

namespace colo::planner {

enum class ImportFormat { kMegatron, kMegatronBridge, kDeepSpeed, kColossalAi, kTorchtitan };
/// megatron, megatron-bridge, deepspeed, colossalai, torchtitan
[[nodiscard]] Result<ImportFormat> parseImportFormat(const std::string& name);

/// What the launch does not say and the user gives on the command line.
struct ImportContext {
  ClusterSpec cluster;                ///< the GPUs the job runs on (world size = its GPU count)
  std::optional<Model> model;         ///< required unless the launch states the whole architecture
  std::int64_t globalBatchSize = 0;   ///< when the launch does not state it (Colossal-AI)
  std::int64_t seqLen = 0;            ///< likewise
};

/// Megatron-LM (or Megatron-DeepSpeed) pretrain_gpt.py arguments: an argument list or a launch script
/// (everything before the first `--flag` is ignored). Without a model, the architecture comes from the
/// arguments and the vocabulary from --vocab-size/--padded-vocab-size.
[[nodiscard]] Result<Plan> importMegatron(const std::string& arguments, const ImportContext& context);
/// Megatron-LM's --moe-layer-freq (an integer N: layers 0, N, 2N, ... are MoE; or a Python list
/// expression such as "([0]*3+[1]*58)", one flag per layer) into `moe`'s leading dense layers, frequency
/// and phase. Errors: kBadInput naming the value when it is not one of those or gives a pattern colo
/// cannot hold (MoE layers not evenly spaced after the leading dense ones).
[[nodiscard]] Result<void> setMegatronMoeLayers(MoeSpec& moe, const std::string& freq, std::int64_t layers);
/// A Megatron-Bridge job YAML: its ConfigContainer as written by `to_yaml` (sections model, train, ddp,
/// mixed_precision, optimizer, comm_overlap, dataset) or an override file (model_config, train_config,
/// ...), read as the Megatron-LM arguments its fields stand for. Without the model's shape in it (an
/// override file), the context's model is required. Errors: kBadInput naming the YAML line it cannot
/// read, or what the Megatron-LM reader refuses.
[[nodiscard]] Result<Plan> importMegatronBridge(const std::string& yaml, const ImportContext& context);
/// A DeepSpeed config (batch, ZeRO stage, offload, precision) with Megatron-DeepSpeed's arguments
/// (model shape, tp, pp, --ds-sequence-parallel-size).
[[nodiscard]] Result<Plan> importDeepSpeed(const Json& config, const std::string& arguments, const ImportContext& context);
/// A Colossal-AI `HybridParallelPlugin(...)` call (Python source); needs the model, and the global batch
/// and sequence unless a `# micro-batch M, global batch G, sequence S` line states them.
[[nodiscard]] Result<Plan> importColossalAi(const std::string& source, const ImportContext& context);
/// A torchtitan job TOML ([model], [parallelism], [training], [activation_checkpoint], [float8]...);
/// needs the model unless [model] names a library one (llama3 8B/70B/405B).
[[nodiscard]] Result<Plan> importTorchtitan(const std::string& toml, const ImportContext& context);

}  // namespace colo::planner
