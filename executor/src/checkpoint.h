#pragma once
// Private: checkpoint shards. Data-parallel rank 0 of each model shard writes one manifest (JSON) and
// one blob (fp32 weights, then the optimizer's two moments, per parameter); any plan of the same model
// reads them back, whatever tensor-parallel split wrote them.
#include <torch/torch.h>

#include <array>
#include <map>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/plan.h"
#include "colo/executor/executor.h"
#include "comm.h"
#include "state.h"

namespace colo::executor::detail {

[[nodiscard]] std::string stepDir(std::int64_t step);  ///< step-NNNNNNNN

/// Parameters to write: their slots and the full-layout fp32 weights and moments the slots index.
struct ShardPart {
  const std::vector<Slot>* slots = nullptr;
  torch::Tensor master, m, v;
};

/// Writes DIR/rank-R.{bin,json} (each to a temporary name, then renamed).
[[nodiscard]] Result<void> writeShard(const std::string& dir, int rank, const Plan& plan, std::int64_t step,
                                      const std::vector<ShardPart>& parts);

/// Every shard piece of every parameter in a checkpoint directory.
struct Piece {
  std::string blob;
  std::int64_t offset = 0, numel = 0;
  int shardDim = -1, shardIndex = 0, shardCount = 1;
  std::vector<std::int64_t> fullShape;
};
[[nodiscard]] Result<std::map<std::string, std::vector<Piece>>> readPieces(const std::string& dir, std::int64_t& step,
                                                                          std::string& model);

/// (weights, m, v) of parameter `prm` assembled from its pieces and cut to this rank's shard.
[[nodiscard]] Result<std::array<torch::Tensor, 3>> loadParam(const Param& prm, const std::vector<Piece>& all,
                                                            const std::string& dir);

/// A rank's model states: one, or the dense and the routed experts' (MoE with ep > 1).
using States = std::vector<std::unique_ptr<ModelState>>;

/// Weights and optimizer moments of every parameter from the newest checkpoint in --checkpoint-dir,
/// re-sharded from whatever plan wrote them; `dir` is set to it. Returns the checkpoint's step.
[[nodiscard]] Result<std::int64_t> resumeStates(const RunOptions& o, const ModelSpec& spec, States& states, std::string& dir);

/// The checkpoint of `step`: each parameter once (rank 0 of its data-parallel group writes it; the
/// routed experts' group is another), then `latest` once every shard is down. Sets `lastCheckpoint`.
[[nodiscard]] Result<void> writeCheckpoint(const RunOptions& o, const Plan& plan, Groups& g, int rank, std::int64_t step,
                                           States& states, std::string& lastCheckpoint);

}  // namespace colo::executor::detail
