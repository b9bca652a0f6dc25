#pragma once
// Private: the decoder in LibTorch, one pipeline chunk at a time, with Megatron-style tensor and
// sequence parallelism and per-layer recompute.
#include <torch/torch.h>

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "colo/core/model_spec.h"
#include "colo/core/plan.h"
#include "comm.h"

namespace colo::executor::detail {

/// A parameter of this rank: its shard of the full tensor `fullShape` (split along `shardDim` into
/// `shardCount` equal parts, this being part `shardIndex`; shardDim -1: not split).
struct Param {
  std::string name;
  std::vector<std::int64_t> fullShape;
  int shardDim = -1;
  int shardIndex = 0;
  int shardCount = 1;
  bool tpReplicated = false;  ///< the same on every tensor-parallel rank (norms, biases after a reduction)
  bool spPartial = false;     ///< its gradient is a partial sum over the sequence shards (sequence parallelism)
  bool tiedCopy = false;      ///< the last stage's copy of the tied word embedding
  bool expert = false;        ///< a routed expert's weight: on this expert-parallel rank only
  int unit = 0;               ///< the chunk's unit it belongs to (see Chunk::kWordUnit)
  torch::Tensor tensor;       ///< what the model computes with (a view of the rank's weights)
};

/// Units are what ZeRO-3 gathers and frees together (and ZeRO-2 reduces together): the word embedding
/// (alone, so the first and last stage lay out their tied copies alike), the learned positions, the
/// final norm with the head, and each layer. A tied word embedding on a chunk that is first and last
/// stays in use from the lookup to the head; every other unit only around its own forward.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  /// Before the unit's forward: the tensors its parameters are read from, in the unit's order.
  virtual std::vector<torch::Tensor> enter(int unit) = 0;
  /// After the unit's forward: `out` (its output) wrapped so that its backward first brings the unit's
  /// parameters back; the unit may release them now.
  virtual torch::Tensor leave(int unit, const torch::Tensor& out) = 0;
};

/// Which of colo's fused kernels (kernels/) a run uses in place of LibTorch's operators.
struct FusedKernelSet {
  bool rmsNorm = false, layerNorm = false, swiglu = false, rotary = false, crossEntropy = false, adamw = false;
  bool gradNorm = false;  ///< the global gradient norm's sum of squares (every model and optimizer)
  /// Every kernel (--fused-kernels on).
  [[nodiscard]] static FusedKernelSet all();
  /// Those measured faster than LibTorch's operators on a GPU (--fused-kernels auto on CUDA).
  [[nodiscard]] static FusedKernelSet fasterOnGpu();
  /// This set less the kernels a plan says its framework runs as PyTorch's eager operators (its
  /// execution.unfused and torch_cross_entropy): --fused-kernels auto runs a plan as it was costed, so that
  /// measured and predicted steps compare like with like. (The final norm alone, torchtitan's compiled
  /// runs, keeps the fused norm: colo's model has one norm kernel for every norm.)
  [[nodiscard]] FusedKernelSet withoutEager(const UnfusedKernels& eager, bool torchCrossEntropy) const;
  /// The kernels of this set that a model with this spec and optimizer runs (LayerNorm only where the
  /// model has LayerNorms, and so on).
  [[nodiscard]] FusedKernelSet usedBy(const ModelSpec& spec, Optimizer optimizer) const;
  [[nodiscard]] std::vector<std::string> names() const;
};

struct ModelConfig {
  ModelSpec spec;
  std::int64_t seqLen = 0;
  std::int64_t paddedVocab = 0;
  int tp = 1, tpRank = 0;
  bool sequenceParallel = false;
  Comm* tpComm = nullptr;
  int cp = 1, cpRank = 0;  ///< context parallelism: this rank holds two chunks of the sequence
  Comm* cpComm = nullptr;
  int ep = 1, epRank = 0;  ///< expert parallelism: this rank holds experts [epRank, epRank + 1) x E / ep
  Comm* epComm = nullptr;
  /// The load-balancing loss's gradient scale: its coefficient over the micro-batches a step sums (the
  /// language-model loss is divided alike) and over tp (every tensor-parallel rank adds it).
  double auxLossScale = 0;
  torch::Device device = torch::kCPU;
  torch::Dtype dtype = torch::kFloat32;
  FusedKernelSet fused;  ///< which of colo's fused kernels the model uses
  std::uint64_t seed = 0;
};

/// The vocabulary padded to a multiple of 128 x tp (Megatron's rule), so it splits evenly.
[[nodiscard]] std::int64_t paddedVocabulary(std::int64_t vocab, int tp);

/// Which micro-batch a forward belongs to (seeds dropout so a recompute draws the same mask).
struct ForwardContext {
  std::int64_t step = 0;
  std::int64_t microBatch = 0;
};

/// One pipeline chunk: consecutive layers [firstLayer, firstLayer + layers), with the embedding when it
/// is the first chunk and the final norm, LM head and loss when it is the last.
class Chunk {
 public:
  Chunk(const ModelConfig& config, std::int64_t firstLayer, std::int64_t layers, bool first, bool last,
        const StagePlan& recompute);
  /// First chunk: `input` is [b, s] token ids. Others: [b, s / (tp if SP), h] hidden states. Last chunk
  /// returns the mean cross-entropy over the micro-batch's `labels` ([b, s]); others the hidden states.
  torch::Tensor forward(const torch::Tensor& input, const torch::Tensor& labels, const ForwardContext& context);
  std::vector<Param>& params() { return m_params; }
  static constexpr int kWordUnit = 0, kInUnit = 1, kOutUnit = 2;
  static int layerUnit(std::int64_t localLayer) { return 3 + static_cast<int>(localLayer); }
  /// A MoE layer's routed experts (on this rank) are a unit of their own.
  [[nodiscard]] int expertUnit(std::int64_t localLayer) const { return 3 + static_cast<int>(m_layers + localLayer); }
  [[nodiscard]] int units() const { return 3 + 2 * static_cast<int>(m_layers); }
  /// ZeRO-2/3: parameters come from `hooks` per unit (nullptr: each parameter is its own leaf); the
  /// routed experts' from `expertHooks` (their gradients reduce over another group).
  void setHooks(UnitHooks* hooks, bool experts) { (experts ? m_expertHooks : m_hooks) = hooks; }
  /// Zero-bubble: while `microBatch` >= 0, the backward of the layers' linear layers computes input
  /// gradients only and keeps what their weight gradients need; `weightGradients` computes those later.
  void deferWeightGradients(std::int64_t microBatch) { m_deferring = microBatch; }
  /// Where a weight has no gradient buffer (ZeRO-2/3 bind weights per unit), its gradient goes to
  /// `sink(weight, gradient)`, which says whether it took it.
  using WeightGradientSink = std::function<bool(const torch::Tensor& weight, const torch::Tensor& gradient)>;
  void weightGradients(std::int64_t microBatch, const WeightGradientSink& sink);
  void useDeferredLinears(bool on) { m_deferredLinears = on; }
  /// Called by the linear layers' backward (the deferred part of a zero-bubble backward).
  [[nodiscard]] bool deferring() const { return m_deferring >= 0; }
  void defer(torch::Tensor input, torch::Tensor outputGrad, torch::Tensor weight);
  /// Drops the closures recompute keeps for backward (call after the step's backward passes).
  void endStep() { m_live.clear(); }

 private:
  using Fn = std::function<torch::autograd::variable_list(const torch::autograd::variable_list&)>;
  Param& add(const std::string& name, std::vector<std::int64_t> fullShape, int shardDim, char init, bool tpReplicated,
             bool spPartial);
  torch::Tensor& p(const std::string& name);
  torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor* b);
  void use(int unit);  // binds the unit's parameters (hooks) before its forward
  torch::Tensor done(int unit, const torch::Tensor& out);
  void addMlp(const std::string& prefix, std::int64_t ffn, bool biased);
  torch::Tensor mlp(const std::string& prefix, const torch::Tensor& x);  // without the down bias
  torch::Tensor moe(std::int64_t layer, const torch::Tensor& x);          // tp-partial output, like mlp's
  torch::Tensor layer(std::int64_t index, const torch::Tensor& h, const ForwardContext& context, bool selective);
  torch::Tensor attentionCore(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, std::int64_t layer,
                              const ForwardContext& context);
  torch::Tensor norm(const torch::Tensor& x, const std::string& prefix);
  torch::Tensor dropout(const torch::Tensor& x, std::int64_t layer, int site, const ForwardContext& context);
  /// The seed of one dropout site's mask: (seed, step, micro-batch, layer, site, tp rank).
  std::uint64_t dropoutKey(std::int64_t layer, int site, const ForwardContext& context) const;
  torch::autograd::variable_list recompute(Fn fn, const torch::autograd::variable_list& inputs);

  ModelConfig m_cfg;
  std::int64_t m_first = 0, m_layers = 0;
  bool m_isFirst = false, m_isLast = false;
  StagePlan m_recompute;
  std::vector<Param> m_params;
  UnitHooks* m_hooks = nullptr;
  UnitHooks* m_expertHooks = nullptr;
  bool m_addingExpert = false;
  bool m_deferredLinears = false;
  std::int64_t m_deferring = -1;
  struct Deferred {
    torch::Tensor input, outputGrad, weight;
  };
  std::map<std::int64_t, std::vector<Deferred>> m_deferred;  // by micro-batch
  int m_addingUnit = kInUnit;
  std::map<std::string, std::size_t> m_index;
  std::deque<Fn> m_live;
  torch::Tensor m_cos, m_sin;  // rotary tables [local s, rotary dims], at this rank's positions
  torch::Tensor m_positions;   // global positions of this rank's tokens (context parallelism)
};

}  // namespace colo::executor::detail
