#pragma once
// Private: a rank's model states (weights, fp32 master copies, gradients, optimizer moments) under its
// ZeRO stage, in one flat layout, with the reductions and the optimizer step that work on them.
#include <torch/torch.h>

#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "comm.h"
#include "model.h"

namespace colo::executor::detail {

/// Where one parameter lives in the rank's flat layout.
struct Slot {
  Param* param = nullptr;
  std::int64_t offset = 0, numel = 0;
  std::vector<std::int64_t> shape;  ///< this rank's (tensor-parallel) shape
};

/// The optimizer the plan trains with, and its settings (colo-run's options).
struct OptimizerSettings {
  using Norms = std::function<torch::Tensor(const torch::Tensor&)>;
  Optimizer kind = Optimizer::kAdamW;
  double lr = 0, beta1 = 0.9, beta2 = 0.95, epsilon = 1e-8, weightDecay = 0.1, momentum = 0.9, trust = 0.001;
  std::int64_t step = 1;  ///< 1-based, for Adam's bias correction
  double clip = 1;        ///< the factor the gradients are scaled by (global-norm clipping)
  bool fused = false;     ///< AdamW by colo's fused kernel (kernels/), not LibTorch's operators
};

/// One optimizer step on a shard: weights `p` (fp32, updated in place), gradients `g` (read, scaled by
/// `o.clip` where it is below 1, never written), moments `m` and `v` (LARS uses `m` only). `norms` gives
/// each element the norm of its whole parameter.
void optimizerStep(const OptimizerSettings& o, torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                   const OptimizerSettings::Norms& norms);

/// Model states by ZeRO stage (data-parallel degree dp > 1; with dp 1 every stage is stage 0):
/// - 0: every rank holds everything; gradients all-reduced in buckets after the step's backwards.
/// - 1: the fp32 master weights and the optimizer moments are split into dp shards; each rank steps
///      its shard and all-gathers the updated weights (Megatron's distributed optimizer).
/// - 2: also the gradients: each unit's gradients are reduce-scattered as its backward ends, into an
///      fp32 shard; no full gradient buffer exists.
/// - 3: also the weights: a unit's weights are all-gathered just before its forward and its backward
///      and released after them (FSDP); with pipeline parallelism they stay gathered from the first
///      micro-batch to the end of the step (no reshard between micro-batches, as torchtitan does).
/// Shards: with stage 0 and 1 the whole flat buffer is split in dp contiguous parts; with 2 and 3 each
/// unit (padded to a multiple of dp) is, and a rank's shard is its part of every unit, in unit order.
class ModelState final {
 public:
  struct Config {
    int zeroStage = 0;
    std::int64_t dp = 1;  ///< the ranks gradients are averaged over: dp x cp (Groups::dpCp)
    bool mixed = false;               ///< bf16 compute copies beside fp32 masters
    bool reshardAfterForward = true;  ///< ZeRO-3 releases weights between forward and backward
    torch::Device device = torch::kCPU;
    /// Which parameters: every one (reduced over Groups::dpCp), all but the routed experts, or only the
    /// routed experts (with ep > 1: reduced over Groups::expertDp and averaged over all dp x cp ranks,
    /// as each expert-parallel rank's experts saw every rank's tokens).
    enum class Params { kAll, kDense, kExperts } params = Params::kAll;
    double average = 0;  ///< the gradient divisor (0: dp)
    /// ZeRO-Offload: this share of the rank's optimizer shard (fp32 master and moments) lives in host
    /// memory and is stepped there; its gradients go out and its weights come back each step.
    double offloadFraction = 0;
    /// ZeRO-2/3: start the all-gather of the unit the forward (or backward) reaches next while this one
    /// computes, and leave gradient reduce-scatters in flight while the backward goes on (FSDP's
    /// prefetch and overlap). Off: each collective finishes where it starts (the same numbers).
    bool overlap = true;
  };
  /// Lays out every parameter of `chunks` (their initial values copied in) and, under ZeRO-2/3, becomes
  /// their unit hooks. `groups` must outlive the state.
  ModelState(const std::vector<Chunk*>& chunks, const Config& config, Groups& groups);
  ~ModelState();
  ModelState(const ModelState&) = delete;
  ModelState& operator=(const ModelState&) = delete;

  [[nodiscard]] const std::vector<Slot>& slots() const { return m_slots; }
  [[nodiscard]] int zeroStage() const { return m_cfg.zeroStage; }
  [[nodiscard]] bool experts() const { return m_cfg.params == Config::Params::kExperts; }

  void beginStep();
  /// After each backward: bf16 gradients (stages 0 and 1) added into the fp32 ones.
  void afterBackward();
  /// After the step's backwards: the tied-embedding, sequence-parallel and data-parallel reductions
  /// (averaged over dp).
  /// This rank's share of the squared gradient norm (summed over all ranks it is the global one).
  double reduceGradients(std::int64_t bucketBytes, bool tiedAcrossStages, bool fusedNorm);
  /// The optimizer step on this rank's shard, then the weights the next forward reads.
  void step(const OptimizerSettings& o);
  /// Releases what ZeRO-3 kept gathered across micro-batches.
  void endStep();

  /// Checkpoints (collective over the data-parallel group): fp32 weights and the two optimizer
  /// moments in the full flat layout; `load` takes the same and keeps this rank's shard.
  [[nodiscard]] std::array<torch::Tensor, 3> gatherFull();
  void load(const torch::Tensor& master, const torch::Tensor& m, const torch::Tensor& v);
  [[nodiscard]] std::int64_t flatSize() const { return m_flat; }

  /// Bytes of model states this rank held at most: the persistent buffers plus the largest set of
  /// gathered units and in-flight gradient buffers seen at once (counted, not sampled).
  [[nodiscard]] double peakModelStateBytes() const { return m_persistentBytes + m_peakTransient; }
  /// Offload: bytes held in host memory, and seconds spent copying to and from it and stepping there.
  [[nodiscard]] double hostBytes() const { return m_hostBytes; }
  [[nodiscard]] double copySeconds() const { return m_copySeconds; }
  [[nodiscard]] double hostStepSeconds() const { return m_hostStepSeconds; }
  /// ZeRO-2/3: seconds spent waiting for unit all-gathers and gradient reduce-scatters to finish (what
  /// the overlap did not hide).
  [[nodiscard]] double commWaitSeconds() const { return m_waitSeconds; }

  // Called by the unit hooks and their autograd functions.
  std::vector<torch::Tensor> bind(int unit);
  void materialize(int unit);
  /// ZeRO-3 with overlap: starts gathering the unit used after (direction +1) or before (-1) `unit`.
  void prefetch(int unit, int direction);
  void release(int unit);
  void reduceUnit(int unit, const std::vector<torch::Tensor>& grads);

  /// Zero-bubble under ZeRO-2/3: while `microBatch` >= 0 (its input-gradient backward), each unit's
  /// gradients are held rather than reduce-scattered, because its linear layers' weight gradients come
  /// later. `addWeightGradient` adds one of those (false: `weight` is not over this state's weights);
  /// `releaseHeld` reduce-scatters the micro-batch's units once they are complete.
  void holdGradients(std::int64_t microBatch) { m_holding = microBatch; }
  bool addWeightGradient(std::int64_t microBatch, const torch::Tensor& weight, const torch::Tensor& gradient);
  void releaseHeld(std::int64_t microBatch);
  [[nodiscard]] bool reshards() const { return m_cfg.zeroStage == 3 && m_cfg.reshardAfterForward; }

 private:
  struct Unit;
  class Hooks;
  struct Reduction {
    Pending pending;
    int unit = 0;
    double bytes = 0;
  };
  void startGather(Unit& u);
  /// Starts the reduce-scatter of a unit's gradients (`flat`, already counted), finishing the one in
  /// flight first (or this one at once, without overlap).
  void startReduction(int unit, torch::Tensor flat);
  /// The oldest reduce-scatter in flight, added into this rank's gradient shard.
  void finishReduction();
  /// Finishes every collective in flight (before anything reads the shards or the weights).
  void drain();
  [[nodiscard]] torch::Tensor toShard(const torch::Tensor& full) const;
  [[nodiscard]] torch::Tensor fromShards(const torch::Tensor& shard) const;
  void transient(double bytes);
  /// The shard of `host` (its first m_hostLen elements) and `device` (the rest) as one device tensor.
  [[nodiscard]] torch::Tensor joined(const torch::Tensor& host, const torch::Tensor& device);
  /// fp32 values of the master shard's elements [offset, offset + length), on the device.
  [[nodiscard]] torch::Tensor masterSlice(std::int64_t offset, std::int64_t length);
  /// Per element of the shard: the L2 norm of the whole parameter it belongs to (over its shards and
  /// tensor-parallel parts), for LAMB's and LARS's trust ratios.
  [[nodiscard]] torch::Tensor parameterNorms(const torch::Tensor& shardValues);
  [[nodiscard]] double gradNormSquared(const torch::Tensor& grads, bool sharded) const;

  Config m_cfg;
  Groups& m_g;
  Comm* m_group = nullptr;  ///< the data-parallel group of these parameters
  torch::Dtype m_compute = torch::kFloat32;
  std::vector<Slot> m_slots;
  std::vector<std::unique_ptr<Unit>> m_units;
  std::vector<std::unique_ptr<Hooks>> m_hooks;
  std::vector<std::pair<std::int64_t, std::int64_t>> m_ranges;  ///< (offset, numel) split over dp
  std::int64_t m_flat = 0, m_shard = 0;
  int m_ways = 1, m_way = 0;  ///< shards and this rank's (1 and 0 at stage 0)
  torch::Tensor m_weights;     ///< stages 0-2: the compute copy every parameter views
  torch::Tensor m_master;      ///< fp32: the full buffer (stage 0, the weights themselves in fp32) or this rank's
                               ///< shard; with offload only its part after the first m_hostLen elements
  torch::Tensor m_grads, m_gradsCompute;  ///< stages 0-1: full gradients (fp32, and bf16 when mixed)
  torch::Tensor m_gradShard;              ///< stages 2-3: this rank's reduced gradients
  torch::Tensor m_m, m_v;                 ///< optimizer moments on the shard (on the device: as m_master)
  torch::Tensor m_countMask, m_spMask;    ///< on the shard (stages 2-3): counted in the norm; sequence-parallel partial
  torch::Tensor m_segments;               ///< on the shard: the slot of each element (padding: slots().size())
  torch::Tensor m_tpSummed;               ///< per slot: 1 where its norm sums over the tensor-parallel group
  double m_persistentBytes = 0, m_transient = 0, m_peakTransient = 0;
  std::int64_t m_hostLen = 0;                          ///< offloaded: the shard's first elements
  torch::Tensor m_hostMaster, m_hostM, m_hostV;        ///< in host memory
  torch::Tensor m_hostOnDevice;                        ///< ZeRO-3: the offloaded part's weights, for gathers
  double m_hostBytes = 0, m_copySeconds = 0, m_hostStepSeconds = 0;
  std::deque<Reduction> m_reducing;  ///< reduce-scatters in flight, oldest first
  bool m_linked = false;             ///< units know their forward neighbours (after the first step)
  std::int64_t m_holding = -1;       ///< zero-bubble: the micro-batch whose unit gradients are held
  std::map<std::int64_t, std::vector<std::pair<int, torch::Tensor>>> m_held;  ///< by micro-batch: (unit, gradients)
  double m_waitSeconds = 0;
};

}  // namespace colo::executor::detail
