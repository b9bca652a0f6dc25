// The decoder, Megatron-style: column-parallel linears split their output features across the tensor-
// parallel group, row-parallel linears their input features followed by a reduction; the embedding and
// the loss are split along the vocabulary. With sequence parallelism the reductions become reduce-
// scatters along the sequence and the column-parallel inputs all-gathers.
#include "model.h"
#include "ring_attention.h"
#include "colo/kernels/torch_ops.h"

#include <ATen/CPUGeneratorImpl.h>
#if defined(COLO_TORCH_CUDA)
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif
#include <torch/version.h>

#include <cmath>
#include <mutex>

namespace colo::executor::detail {
namespace torch_ops = colo::kernels::torch_ops;
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Comm* commOf(AutogradContext* ctx) { return reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt()); }
void keep(AutogradContext* ctx, Comm* comm) { ctx->saved_data["comm"] = reinterpret_cast<std::int64_t>(comm); }

// Reduce-scatter along dim 1 (the sequence): Gloo has no reduce-scatter in every LibTorch version, so
// all-reduce and keep this rank's slice (the same numbers, more traffic).
Tensor reduceScatterSeq(Comm* comm, const Tensor& x) {
  Tensor sum = x.contiguous().clone();
  comm->allReduce(sum);
  const std::int64_t part = x.size(1) / comm->size();
  return sum.narrow(1, comm->rank() * part, part).contiguous();
}

// f: identity forward, all-reduce backward (the input of a column-parallel linear).
struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static Tensor forward(AutogradContext* ctx, Tensor x, Comm* comm) {
    keep(ctx, comm);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Tensor grad = g[0].contiguous().clone();
    commOf(ctx)->allReduce(grad);
    return {grad, Tensor()};
  }
};

// g: all-reduce forward, identity backward (the output of a row-parallel linear).
struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static Tensor forward(AutogradContext* ctx, Tensor x, Comm* comm) {
    (void)ctx;
    Tensor sum = x.contiguous().clone();
    comm->allReduce(sum);
    return sum;
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], Tensor()}; }
};

// All-gather along the sequence forward, reduce-scatter backward.
struct GatherSeq : torch::autograd::Function<GatherSeq> {
  static Tensor forward(AutogradContext* ctx, Tensor x, Comm* comm) {
    keep(ctx, comm);
    return comm->allGather(x, 1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) { return {reduceScatterSeq(commOf(ctx), g[0]), Tensor()}; }
};

// Reduce-scatter along the sequence forward, all-gather backward.
struct ScatterSeq : torch::autograd::Function<ScatterSeq> {
  static Tensor forward(AutogradContext* ctx, Tensor x, Comm* comm) {
    keep(ctx, comm);
    return reduceScatterSeq(comm, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) { return {commOf(ctx)->allGather(g[0], 1), Tensor()}; }
};

// Cross-entropy over a vocabulary split across the tensor-parallel group: logits [n, V/tp] of this
// rank's vocabulary slice starting at `start`; returns the per-token loss [n].
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static Tensor forward(AutogradContext* ctx, Tensor logits, Tensor target, std::int64_t start, Comm* comm) {
    keep(ctx, comm);
    Tensor x = logits.to(torch::kFloat32);
    Tensor max = std::get<0>(x.max(-1)).contiguous();
    comm->allReduce(max, c10d::ReduceOp::MAX);
    Tensor shifted = x - max.unsqueeze(1);
    Tensor exp = shifted.exp();
    Tensor sum = exp.sum(-1).contiguous();
    comm->allReduce(sum);
    const std::int64_t width = x.size(1);
    Tensor inRange = (target >= start).logical_and(target < start + width);
    Tensor local = (target - start).masked_fill(inRange.logical_not(), 0);
    Tensor predicted = shifted.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill(inRange.logical_not(), 0.0).contiguous();
    comm->allReduce(predicted);
    Tensor loss = sum.log() - predicted;
    ctx->save_for_backward({exp / sum.unsqueeze(1), local, inRange});
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(logits.scalar_type());
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    Tensor grad = saved[0].clone();
    grad.scatter_add_(1, saved[1].unsqueeze(1), -saved[2].to(grad.scalar_type()).unsqueeze(1));
    grad.mul_(g[0].unsqueeze(1));
    return {grad.to(static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt())), Tensor(), Tensor(), Tensor()};
  }
};

// Recompute: the forward runs without keeping activations; the backward runs it again with autograd
// on and backpropagates through that (parameter gradients accumulate as usual).
using Fn = std::function<variable_list(const variable_list&)>;
struct Recompute : torch::autograd::Function<Recompute> {
  // `inputs` must be a TensorList (not a variable_list, which autograd would not see as inputs).
  static variable_list forward(AutogradContext* ctx, Fn* fn, at::TensorList inputs) {
    ctx->saved_data["fn"] = reinterpret_cast<std::int64_t>(fn);
    variable_list in(inputs.begin(), inputs.end());
    ctx->save_for_backward(in);
    return (*fn)(in);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Fn* fn = reinterpret_cast<Fn*>(ctx->saved_data["fn"].toInt());
    variable_list inputs;
    for (const auto& x : ctx->get_saved_variables()) inputs.push_back(x.detach().requires_grad_(x.requires_grad()));
    variable_list outputs;
    {
      torch::AutoGradMode on(true);
      outputs = (*fn)(inputs);
    }
    variable_list roots, rootGrads;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outputs[i]);
        rootGrads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, rootGrads);
    variable_list out{Tensor()};
    for (const auto& x : inputs) out.push_back(x.requires_grad() ? x.grad() : Tensor());
    return out;
  }
};

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 33);
}

std::uint64_t hashName(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = 1469598103934665603ULL ^ seed;
  for (const char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return mix(h, seed);
}

// y = x w^T whose backward, while its chunk defers, returns the input gradient only and hands (x, dy,
// w) to the chunk for the weight gradient later (zero-bubble's split of the backward: Megatron's
// WeightGradStore). Otherwise both gradients, as autograd's matmul.
struct DeferredLinear : torch::autograd::Function<DeferredLinear> {
  static Tensor forward(AutogradContext* ctx, Tensor x, Tensor w, Chunk* chunk) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["chunk"] = reinterpret_cast<std::int64_t>(chunk);
    return torch::matmul(x, w.t());
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    Chunk* chunk = reinterpret_cast<Chunk*>(ctx->saved_data["chunk"].toInt());
    const Tensor& x = saved[0];
    const Tensor& w = saved[1];
    Tensor dx = torch::matmul(g[0], w);
    if (chunk->deferring()) {
      chunk->defer(x, g[0], w);
      return {dx, Tensor(), Tensor()};
    }
    Tensor dw = g[0].reshape({-1, w.size(0)}).t().matmul(x.reshape({-1, w.size(1)}));
    return {dx, dw, Tensor()};
  }
};

}  // namespace

torch::Tensor Chunk::linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor* b) {
  if (m_deferredLinears && torch::GradMode::is_enabled()) {
    Tensor y = DeferredLinear::apply(x, w, this);
    return b ? y + *b : y;
  }
  // LibTorch's linear: with a bias, one GEMM whose epilogue adds it (cuBLASLt on a GPU) rather than a
  // GEMM and a broadcast add over the whole output (4.4 ms of a 350M GPT's 72 ms step on an H200).
  return b ? torch::linear(x, w, *b) : torch::matmul(x, w.t());
}

void Chunk::defer(torch::Tensor input, torch::Tensor outputGrad, torch::Tensor weight) {
  m_deferred[m_deferring].push_back({std::move(input), std::move(outputGrad), std::move(weight)});
}

void Chunk::weightGradients(std::int64_t microBatch, const WeightGradientSink& sink) {
  auto it = m_deferred.find(microBatch);
  if (it == m_deferred.end()) return;
  torch::NoGradGuard noGrad;
  for (auto& d : it->second) {
    const Tensor& w = d.weight;
    Tensor dw = d.outputGrad.reshape({-1, w.size(0)}).t().matmul(d.input.reshape({-1, w.size(1)}));
    if (w.is_leaf() && w.grad().defined()) {
      w.grad().add_(dw);
    } else if (!sink || !sink(w, dw)) {
      throw std::logic_error("zero-bubble: a deferred weight has no gradient buffer and no model state took its gradient");
    }
  }
  m_deferred.erase(it);
}

FusedKernelSet FusedKernelSet::all() { return {true, true, true, true, true, true, true}; }

FusedKernelSet FusedKernelSet::fasterOnGpu() {
  // colo-bench-kernels on an H200 (bf16, 8192 tokens, hidden 1024, vocabulary 50304; device time with
  // the host out of the way; docs/gpu.md): RMSNorm 4.3x, rotary 3.5x, cross-entropy 2.0x, LayerNorm
  // 1.6x (a warp a row since visit 7), SwiGLU 1.4x faster than LibTorch's operators; in a 350M GPT's
  // step every kernel on (LayerNorm too) ran 64.0 and 64.5 ms against 65.8 and 67.5 ms without
  // LayerNorm (visits 8 and 9). AdamW: one pass over the flat buffers instead of LibTorch's per-tensor
  // operators (4.0 ms against 8 ms for 355M parameters). The gradient norm's sum of squares: 9.4x
  // LibTorch's fp64 copy squared and summed (visit 11). So every kernel the model runs.
  return all();
}

FusedKernelSet FusedKernelSet::withoutEager(const UnfusedKernels& eager, bool torchCrossEntropy) const {
  FusedKernelSet s = *this;
  s.rmsNorm = rmsNorm && !eager.rmsNorm;
  s.rotary = rotary && !eager.rotary;
  s.swiglu = swiglu && !eager.gatedActivation;
  s.crossEntropy = crossEntropy && !torchCrossEntropy;
  return s;
}

FusedKernelSet FusedKernelSet::usedBy(const ModelSpec& spec, Optimizer optimizer) const {
  FusedKernelSet s = *this;
  s.rmsNorm = rmsNorm && spec.norm == NormKind::kRmsNorm;
  s.layerNorm = layerNorm && spec.norm == NormKind::kLayerNorm;
  s.swiglu = swiglu && spec.activation == Activation::kSwiGlu;
  s.rotary = rotary && spec.positionEmbedding == PositionEmbedding::kRope;
  s.adamw = adamw && optimizer == Optimizer::kAdamW;
  return s;
}

std::vector<std::string> FusedKernelSet::names() const {
  std::vector<std::string> out;
  for (const auto& [on, name] : {std::pair{rmsNorm, "rmsnorm"}, {layerNorm, "layernorm"}, {swiglu, "swiglu"}, {rotary, "rotary"},
                                 {crossEntropy, "cross_entropy"}, {adamw, "adamw"}, {gradNorm, "grad_norm"}}) {
    if (on) out.emplace_back(name);
  }
  return out;
}

std::int64_t paddedVocabulary(std::int64_t vocab, int tp) {
  const std::int64_t multiple = 128 * tp;
  return (vocab + multiple - 1) / multiple * multiple;
}

Chunk::Chunk(const ModelConfig& config, std::int64_t firstLayer, std::int64_t layers, bool first, bool last,
             const StagePlan& recompute)
    : m_cfg(config), m_first(firstLayer), m_layers(layers), m_isFirst(first), m_isLast(last), m_recompute(recompute) {
  const ModelSpec& s = m_cfg.spec;
  const std::int64_t h = s.hiddenSize, hd = s.headSize(), heads = s.numAttentionHeads, kv = s.kvHeads();
  const std::int64_t ffn = s.ffnHiddenSize;
  const bool layerNorm = s.norm == NormKind::kLayerNorm;
  const bool sp = m_cfg.sequenceParallel;
  auto addNorm = [&](const std::string& prefix) {
    add(prefix + ".weight", {h}, -1, '1', true, sp);
    if (layerNorm) add(prefix + ".bias", {h}, -1, '0', true, sp);
  };
  if (first) {
    m_addingUnit = kWordUnit;
    add("embedding.word", {m_cfg.paddedVocab, h}, 0, 'n', false, false);
    m_addingUnit = kInUnit;
    if (s.positionEmbedding == PositionEmbedding::kLearned) add("embedding.position", {s.maxPositionEmbeddings, h}, -1, 'n', true, sp);
  }
  for (std::int64_t i = firstLayer; i < firstLayer + layers; ++i) {
    const std::string L = "layers." + std::to_string(i) + ".";
    m_addingUnit = layerUnit(i - firstLayer);
    addNorm(L + "norm1");
    add(L + "attn.q.weight", {heads * hd, h}, 0, 'n', false, false);
    add(L + "attn.k.weight", {kv * hd, h}, 0, 'n', false, false);
    add(L + "attn.v.weight", {kv * hd, h}, 0, 'n', false, false);
    if (s.qkvBias) {
      add(L + "attn.q.bias", {heads * hd}, 0, '0', false, false);
      add(L + "attn.k.bias", {kv * hd}, 0, '0', false, false);
      add(L + "attn.v.bias", {kv * hd}, 0, '0', false, false);
    }
    add(L + "attn.o.weight", {h, heads * hd}, 1, 'o', false, false);
    if (s.attentionOutputBias) add(L + "attn.o.bias", {h}, -1, '0', true, sp);
    addNorm(L + "norm2");
    if (!s.moe.isMoeLayer(i)) {
      addMlp(L + "mlp.", ffn, s.mlpBias);
      continue;
    }
    // Router (every tp rank the same; its gradient a partial sum over tp, as the gates scale each rank's
    // slice of the experts), the shared expert, and this expert-parallel rank's routed experts.
    add(L + "moe.router.weight", {s.moe.numExperts, h}, -1, 'n', true, true);
    if (s.moe.sharedExpertFfnHiddenSize > 0) addMlp(L + "moe.shared.", s.moe.sharedExpertFfnHiddenSize, false);
    m_addingUnit = expertUnit(i - firstLayer);
    m_addingExpert = true;
    const std::int64_t perRank = s.moe.numExperts / m_cfg.ep;
    for (std::int64_t e = m_cfg.epRank * perRank; e < (m_cfg.epRank + 1) * perRank; ++e) {
      addMlp(L + "moe.experts." + std::to_string(e) + ".", s.moe.expertFfnHiddenSize > 0 ? s.moe.expertFfnHiddenSize : ffn, false);
    }
    m_addingExpert = false;
  }
  m_addingUnit = kOutUnit;
  if (last) {
    if (s.finalNorm) addNorm("final_norm");
    if (s.tieWordEmbeddings) {
      m_addingUnit = kWordUnit;
      if (!first) add("embedding.word", {m_cfg.paddedVocab, h}, 0, 'n', false, false).tiedCopy = true;
      m_addingUnit = kOutUnit;
    } else {
      add("head.weight", {m_cfg.paddedVocab, h}, 0, 'n', false, false);
    }
  }
  m_positions = contextParallelPositions(m_cfg.seqLen, m_cfg.cp, m_cfg.cpRank);
  if (s.positionEmbedding == PositionEmbedding::kRope) {
    std::int64_t rotary = static_cast<std::int64_t>(std::llround(static_cast<double>(hd) * s.rotaryFraction));
    rotary -= rotary % 2;
    auto inv = torch::pow(10000.0, -torch::arange(0, rotary, 2, torch::kFloat64) / static_cast<double>(rotary));
    auto angles = torch::outer(m_positions.to(torch::kFloat64), inv);
    auto both = torch::cat({angles, angles}, -1);
    m_cos = both.cos().to(torch::kFloat32).to(m_cfg.device);
    m_sin = both.sin().to(torch::kFloat32).to(m_cfg.device);
  }
  m_positions = m_positions.to(m_cfg.device);  // learned position embeddings index with it on the weights' device
}

Param& Chunk::add(const std::string& name, std::vector<std::int64_t> fullShape, int shardDim, char init, bool tpReplicated,
                  bool spPartial) {
  // The full tensor from a generator seeded by (seed, name): every plan initialises the same model.
  Tensor full;
  if (init == '1') {
    full = torch::ones(fullShape);
  } else if (init == '0') {
    full = torch::zeros(fullShape);
  } else {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(hashName(m_cfg.seed, name));
    double std = 0.02;
    if (init == 'o') std /= std::sqrt(2.0 * static_cast<double>(m_cfg.spec.numLayers));  // residual outputs
    full = at::normal(0.0, std, fullShape, gen);
  }
  Param prm;
  prm.name = name;
  prm.fullShape = fullShape;
  prm.tpReplicated = tpReplicated;
  prm.spPartial = spPartial && m_cfg.tp > 1;
  prm.unit = m_addingUnit;
  prm.expert = m_addingExpert;
  if (shardDim >= 0 && m_cfg.tp > 1) {
    prm.shardDim = shardDim;
    prm.shardIndex = m_cfg.tpRank;
    prm.shardCount = m_cfg.tp;
    const std::int64_t part = fullShape[static_cast<std::size_t>(shardDim)] / m_cfg.tp;
    full = full.narrow(shardDim, m_cfg.tpRank * part, part);
  }
  prm.tensor = full.contiguous().to(m_cfg.device, torch::kFloat32).requires_grad_(true);
  m_index[name] = m_params.size();
  m_params.push_back(std::move(prm));
  return m_params.back();
}

torch::Tensor& Chunk::p(const std::string& name) { return m_params[m_index.at(name)].tensor; }

void Chunk::addMlp(const std::string& prefix, std::int64_t ffn, bool biased) {
  const ModelSpec& s = m_cfg.spec;
  const std::int64_t h = s.hiddenSize;
  if (s.activation == Activation::kSwiGlu || s.activation == Activation::kGeGlu) add(prefix + "gate.weight", {ffn, h}, 0, 'n', false, false);
  add(prefix + "up.weight", {ffn, h}, 0, 'n', false, false);
  if (biased) add(prefix + "up.bias", {ffn}, 0, '0', false, false);
  add(prefix + "down.weight", {h, ffn}, 1, 'o', false, false);
  if (biased) add(prefix + "down.bias", {h}, -1, '0', true, m_cfg.sequenceParallel);
}

torch::Tensor Chunk::mlp(const std::string& prefix, const torch::Tensor& x) {
  auto bias = [&](const std::string& name) -> const Tensor* { return m_index.contains(name) ? &p(name) : nullptr; };
  Tensor up = linear(x, p(prefix + "up.weight"), bias(prefix + "up.bias"));
  Tensor a;
  switch (m_cfg.spec.activation) {
    case Activation::kSwiGlu: {
      Tensor gate = linear(x, p(prefix + "gate.weight"), nullptr);
      a = m_cfg.fused.swiglu ? torch_ops::swiglu(gate, up) : torch::silu(gate) * up;
      break;
    }
    case Activation::kGeGlu: a = torch::gelu(linear(x, p(prefix + "gate.weight"), nullptr)) * up; break;
    case Activation::kRelu: a = torch::relu(up); break;
    case Activation::kSilu: a = torch::silu(up); break;
    case Activation::kGelu: a = torch::gelu(up, "tanh"); break;
  }
  return linear(a, p(prefix + "down.weight"), nullptr);
}

torch::Tensor Chunk::done(int unit, const torch::Tensor& out) {
  UnitHooks* hooks = unit >= expertUnit(0) ? m_expertHooks : m_hooks;
  return hooks ? hooks->leave(unit, out) : out;
}

void Chunk::use(int unit) {
  UnitHooks* hooks = unit >= expertUnit(0) ? m_expertHooks : m_hooks;
  if (!hooks) return;
  std::vector<Tensor> bound = hooks->enter(unit);
  std::size_t next = 0;
  for (auto& prm : m_params) {
    if (prm.unit == unit) prm.tensor = bound.at(next++);
  }
}

torch::Tensor Chunk::norm(const torch::Tensor& x, const std::string& prefix) {
  if (m_cfg.spec.norm == NormKind::kLayerNorm) {
    if (m_cfg.fused.layerNorm) return torch_ops::layerNorm(x, p(prefix + ".weight"), p(prefix + ".bias"), 1e-5);
    return torch::layer_norm(x, {m_cfg.spec.hiddenSize}, p(prefix + ".weight"), p(prefix + ".bias"), 1e-5);
  }
  if (m_cfg.fused.rmsNorm) return torch_ops::rmsNorm(x, p(prefix + ".weight"), 1e-5);
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * p(prefix + ".weight");
}

std::uint64_t Chunk::dropoutKey(std::int64_t layer, int site, const ForwardContext& c) const {
  return mix(mix(mix(mix(m_cfg.seed, static_cast<std::uint64_t>(c.step)), static_cast<std::uint64_t>(c.microBatch)),
                 static_cast<std::uint64_t>(layer + 7)),
             static_cast<std::uint64_t>(site * 131 + m_cfg.tpRank));
}

torch::Tensor Chunk::dropout(const torch::Tensor& x, std::int64_t layer, int site, const ForwardContext& c) {
  const double rate = m_cfg.spec.dropout;
  if (rate <= 0) return x;
  // Seeded by (step, micro-batch, layer, site, tp rank) so a recompute draws the same mask.
  const std::uint64_t key = dropoutKey(layer, site, c);
#if defined(COLO_TORCH_CUDA)
  if (x.is_cuda()) {
    // On a GPU the mask is drawn there, from a CUDA generator seeded by the same key: a CPU mask of the
    // attention probabilities (b * heads * s * s) would cost seconds a layer and cross the PCIe bus.
    at::Generator onDevice = at::cuda::detail::createCUDAGenerator(x.device().index());
    onDevice.set_current_seed(key);
    return x * torch::empty_like(x).bernoulli_(1.0 - rate, onDevice) / (1.0 - rate);
  }
#endif
  auto gen = at::make_generator<at::CPUGeneratorImpl>(key);
  Tensor mask = at::bernoulli(torch::full(x.sizes(), 1.0 - rate, torch::kFloat32), gen).to(x.device(), x.scalar_type());
  return x * mask / (1.0 - rate);
}

torch::Tensor Chunk::attentionCore(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, std::int64_t layer,
                                   const ForwardContext& context) {
  // q [b, s, heads, d], k/v [b, s, kv heads, d] -> [b, s, heads * d]
  const std::int64_t heads = q.size(2), kvHeads = k.size(2), d = q.size(3), s = q.size(1);
  Tensor qh = q.permute({0, 2, 1, 3});
  Tensor kh = k.permute({0, 2, 1, 3});
  Tensor vh = v.permute({0, 2, 1, 3});
  if (m_cfg.cp > 1) {
    return ringAttention(qh, kh, vh, m_cfg.cpComm, m_cfg.seqLen).permute({0, 2, 1, 3}).reshape({q.size(0), s, heads * d});
  }
  if (kvHeads != heads) {
    kh = kh.repeat_interleave(heads / kvHeads, 1);
    vh = vh.repeat_interleave(heads / kvHeads, 1);
  }
#if TORCH_VERSION_MAJOR >= 2 && defined(COLO_TORCH_CUDA)
  // On a GPU with LibTorch 2.x: PyTorch's fused attention (FlashAttention or memory-efficient kernels),
  // causal, no probabilities kept. Their attention dropout draws its mask from the device's default
  // generator and keeps that generator's philox seed and offset for the backward; seeded here by this
  // site's key, a recompute of the layer draws the same mask, as the explicit path below does. (The
  // explicit path materialises b * heads * s * s scores, probabilities and mask: on an H200 it made a
  // 350M GPT's step 2.3 times eager PyTorch's.)
  if (q.is_cuda()) {
    const double rate = m_cfg.spec.dropout;
    if (rate > 0) {
      at::Generator onDevice = at::cuda::detail::getDefaultCUDAGenerator(q.device().index());
      std::lock_guard<std::mutex> lock(onDevice.mutex());  // released before the attention takes it
      onDevice.set_current_seed(dropoutKey(layer, 3, context));
    }
    return at::scaled_dot_product_attention(qh, kh, vh, {}, rate, /*is_causal=*/true).permute({0, 2, 1, 3}).reshape({q.size(0), s, heads * d});
  }
#endif
  Tensor scores = torch::matmul(qh, kh.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
  Tensor causal = torch::ones({s, s}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
  scores = scores.masked_fill(causal, -std::numeric_limits<float>::infinity());
  Tensor probs = torch::softmax(scores.to(torch::kFloat32), -1).to(q.scalar_type());
  probs = dropout(probs, layer, 3, context);
  return torch::matmul(probs, vh).permute({0, 2, 1, 3}).reshape({q.size(0), s, heads * d});
}

torch::Tensor Chunk::layer(std::int64_t i, const torch::Tensor& hIn, const ForwardContext& context, bool selective) {
  const ModelSpec& s = m_cfg.spec;
  const std::string L = "layers." + std::to_string(i) + ".";
  Comm* tp = m_cfg.tpComm;
  const bool sp = m_cfg.sequenceParallel && m_cfg.tp > 1;
  auto enter = [&](const Tensor& x) { return sp ? GatherSeq::apply(x, tp) : CopyToTp::apply(x, tp); };
  auto leave = [&](const Tensor& x) { return sp ? ScatterSeq::apply(x, tp) : ReduceFromTp::apply(x, tp); };
  auto bias = [&](const std::string& name) -> const Tensor* { return m_index.contains(name) ? &p(name) : nullptr; };
  const std::int64_t hd = s.headSize();
  const std::int64_t heads = s.numAttentionHeads / m_cfg.tp, kv = s.kvHeads() / m_cfg.tp;
  use(layerUnit(i - m_first));  // here, so a recompute binds the parameters again
  if (s.moe.isMoeLayer(i)) use(expertUnit(i - m_first));

  Tensor x = enter(norm(hIn, L + "norm1"));
  const std::int64_t b = x.size(0), n = x.size(1);
  Tensor q = linear(x, p(L + "attn.q.weight"), bias(L + "attn.q.bias")).view({b, n, heads, hd});
  Tensor k = linear(x, p(L + "attn.k.weight"), bias(L + "attn.k.bias")).view({b, n, kv, hd});
  Tensor v = linear(x, p(L + "attn.v.weight"), bias(L + "attn.v.bias")).view({b, n, kv, hd});
  if (m_cos.defined()) {
    auto rope = [&](const Tensor& t) {
      const std::int64_t r = m_cos.size(1);
      if (m_cfg.fused.rotary && r == t.size(3)) {  // the whole head turns: the fused kernel (cos, sin of each pair once)
        return torch_ops::rotary(t, m_cos.narrow(0, 0, n).narrow(1, 0, r / 2), m_sin.narrow(0, 0, n).narrow(1, 0, r / 2));
      }
      Tensor rot = t.narrow(3, 0, r);
      auto halves = rot.chunk(2, -1);
      Tensor rotated = torch::cat({-halves[1], halves[0]}, -1);
      Tensor cos = m_cos.narrow(0, 0, n).view({1, n, 1, r}).to(t.scalar_type());
      Tensor sin = m_sin.narrow(0, 0, n).view({1, n, 1, r}).to(t.scalar_type());
      Tensor out = rot * cos + rotated * sin;
      return r == t.size(3) ? out : torch::cat({out, t.narrow(3, r, t.size(3) - r)}, -1);
    };
    q = rope(q);
    k = rope(k);
  }
  Tensor context_;
  if (selective) {
    // Selective recompute: only the attention core (scores, softmax, dropout) is recomputed.
    m_live.push_back([this, i, context](const torch::autograd::variable_list& in) {
      return torch::autograd::variable_list{attentionCore(in[0], in[1], in[2], i, context)};
    });
    const std::vector<Tensor> in{q, k, v};
    context_ = Recompute::apply(&m_live.back(), at::TensorList(in))[0];
  } else {
    context_ = attentionCore(q, k, v, i, context);
  }
  Tensor attn = leave(linear(context_, p(L + "attn.o.weight"), nullptr));
  if (const Tensor* ob = bias(L + "attn.o.bias")) attn = attn + *ob;
  Tensor h = hIn + dropout(attn, i, 1, context);

  x = enter(norm(h, L + "norm2"));
  Tensor out = leave(s.moe.isMoeLayer(i) ? moe(i, x) : mlp(L + "mlp.", x));
  if (const Tensor* db = bias(L + "mlp.down.bias")) out = out + *db;
  return h + dropout(out, i, 2, context);
}

torch::Tensor Chunk::forward(const torch::Tensor& input, const torch::Tensor& labels, const ForwardContext& context) {
  const ModelSpec& s = m_cfg.spec;
  Comm* tp = m_cfg.tpComm;
  const bool sp = m_cfg.sequenceParallel && m_cfg.tp > 1;
  Tensor h = input;
  const bool wordAtEnd = m_isLast && s.tieWordEmbeddings;  // the head reads the word embedding
  if (m_isFirst) {
    use(kWordUnit);
    use(kInUnit);
    // Vocabulary-parallel embedding: each rank looks up the ids of its slice, the others give zeros.
    const Tensor& word = p("embedding.word");
    const std::int64_t part = word.size(0), start = m_cfg.tpRank * part;
    Tensor outside = (input < start).logical_or(input >= start + part);
    Tensor local = (input - start).masked_fill(outside, 0);
    Tensor e = torch::embedding(word, local).masked_fill(outside.unsqueeze(-1), 0.0);
    h = sp ? ScatterSeq::apply(e, tp) : ReduceFromTp::apply(e, tp);
    if (s.positionEmbedding == PositionEmbedding::kLearned) {
      const std::int64_t n = h.size(1);
      const std::int64_t offset = sp ? m_cfg.tpRank * n : 0;
      h = h + p("embedding.position").index_select(0, m_positions.narrow(0, offset, n)).unsqueeze(0);
    }
    h = dropout(h, -1, 0, context);
    h = done(kInUnit, h);
    if (!wordAtEnd) h = done(kWordUnit, h);
  }
  for (std::int64_t i = m_first; i < m_first + m_layers; ++i) {
    const bool recomputes = i - m_first < m_recompute.recomputeLayers;
    if (recomputes && m_recompute.recompute == RecomputePolicy::kFull) {
      m_live.push_back([this, i, context](const torch::autograd::variable_list& in) {
        return torch::autograd::variable_list{layer(i, in[0], context, false)};
      });
      const std::vector<Tensor> in{h};
      h = Recompute::apply(&m_live.back(), at::TensorList(in))[0];
    } else {
      h = layer(i, h, context, recomputes && m_recompute.recompute == RecomputePolicy::kSelective);
    }
    h = done(layerUnit(i - m_first), h);
    if (m_cfg.spec.moe.isMoeLayer(i)) h = done(expertUnit(i - m_first), h);
  }
  if (!m_isLast) return h;
  use(kOutUnit);
  if (wordAtEnd && !m_isFirst) use(kWordUnit);
  if (s.finalNorm) h = norm(h, "final_norm");
  h = sp ? GatherSeq::apply(h, tp) : CopyToTp::apply(h, tp);
  const Tensor& head = s.tieWordEmbeddings ? p("embedding.word") : p("head.weight");
  Tensor logits = torch::matmul(h, head.t());
  const std::int64_t part = head.size(0);
  Tensor loss;
  if (m_cfg.fused.crossEntropy) {
    loss = torch_ops::vocabParallelCrossEntropy(logits.reshape({-1, part}), labels.reshape({-1}), m_cfg.tpRank * part,
                                                [tp](at::Tensor& t, bool max) { tp->allReduce(t, max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM); });
  } else {
    loss = VocabParallelCrossEntropy::apply(logits.reshape({-1, part}), labels.reshape({-1}), m_cfg.tpRank * part, tp);
  }
  Tensor out = done(kOutUnit, loss.mean());
  return wordAtEnd ? done(kWordUnit, out) : out;
}

}  // namespace colo::executor::detail
