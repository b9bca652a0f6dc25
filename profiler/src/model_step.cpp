// A decoder model's forward and backward in LibTorch, from its spec: the measurement the cost model's
// prediction is checked against (until the executor trains models for real).
#include <chrono>
#include <cmath>

#include "torch_util.h"

namespace colo::profiler {
namespace {

using torch::Tensor;

struct Layer {
  Tensor norm1w, norm1b, qkv, qkvBias, out, outBias, norm2w, norm2b, up, upBias, down, downBias;
};

Tensor norm(const Tensor& x, const Tensor& w, const Tensor& b, NormKind kind) {
  if (kind == NormKind::kLayerNorm) return torch::layer_norm(x, {x.size(-1)}, w, b, 1e-5);
  const auto rms = torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5);
  return x * rms * w;
}

}  // namespace

Result<Timing> timeModelStep(const ModelSpec& s, std::int64_t seq, std::int64_t batch, DType dtype,
                             const std::string& device, int warmup, int repetitions) {
  if (s.architecture != Architecture::kDecoder || s.input != InputKind::kTokens || s.moe.enabled()) {
    return fail(Error::badInput("the model step is measured for dense decoder models only, not " + s.name));
  }
  auto dt = detail::torchDtype(dtype);
  if (!dt) return fail(dt.error());
  auto dev = detail::torchDevice(device);
  if (!dev) return fail(dev.error());
  try {
    torch::manual_seed(0);
    const auto o = torch::TensorOptions().dtype(*dt).device(*dev);
    const std::int64_t h = s.hiddenSize, a = s.numAttentionHeads, g = s.kvHeads(), d = s.headSize();
    const std::int64_t f = s.ffnHiddenSize, v = s.vocabSize;
    const bool gated = s.gatedMlp();
    auto param = [&](std::vector<std::int64_t> shape, double scale) {
      return (torch::randn(shape, o) * scale).requires_grad_(true);
    };
    auto ones = [&](std::int64_t n) { return torch::ones({n}, o).requires_grad_(true); };
    auto zeros = [&](std::int64_t n, bool present) {
      return present ? torch::zeros({n}, o).requires_grad_(true) : Tensor();
    };
    const bool ln = s.norm == NormKind::kLayerNorm;
    Tensor wte = param({v, h}, 0.02);
    Tensor wpe = s.positionEmbedding == PositionEmbedding::kLearned ? param({s.maxPositionEmbeddings, h}, 0.02) : Tensor();
    std::vector<Layer> layers;
    for (std::int64_t i = 0; i < s.numLayers; ++i) {
      Layer l;
      l.norm1w = ones(h);
      l.norm1b = zeros(h, ln);
      l.qkv = param({h, (a + 2 * g) * d}, 0.02);
      l.qkvBias = zeros((a + 2 * g) * d, s.qkvBias);
      l.out = param({a * d, h}, 0.02);
      l.outBias = zeros(h, s.attentionOutputBias);
      l.norm2w = ones(h);
      l.norm2b = zeros(h, ln);
      l.up = param({h, gated ? 2 * f : f}, 0.02);
      l.upBias = zeros(gated ? 2 * f : f, s.mlpBias);
      l.down = param({f, h}, 0.02);
      l.downBias = zeros(h, s.mlpBias);
      layers.push_back(l);
    }
    Tensor normfw = ones(h), normfb = zeros(h, ln);
    Tensor head = s.tieWordEmbeddings ? wte : param({v, h}, 0.02);
    const auto ids = torch::randint(0, v, {batch, seq}, torch::TensorOptions().dtype(torch::kLong).device(*dev));
    const auto targets = torch::randint(0, v, {batch * seq}, torch::TensorOptions().dtype(torch::kLong).device(*dev));
    // The causal mask as an additive bias, folded into the score GEMM (baddbmm with alpha = 1/sqrt(d)), as
    // Megatron's unfused attention does: no separate scale or mask pass over the s x s scores.
    const auto maskBias = (torch::ones({seq, seq}, o).triu(1) * -1e4).expand({batch * a, seq, seq});
    const double p = s.dropout;

    auto step = [&]() {
      Tensor x = torch::embedding(wte, ids);
      if (wpe.defined()) x = x + wpe.narrow(0, 0, seq);
      if (p > 0) x = torch::dropout(x, p, true);
      for (const auto& l : layers) {
        Tensor hN = norm(x, l.norm1w, l.norm1b, s.norm);
        Tensor qkv = torch::matmul(hN, l.qkv);
        if (l.qkvBias.defined()) qkv = qkv + l.qkvBias;
        auto parts = qkv.split_with_sizes({a * d, g * d, g * d}, -1);
        Tensor q = parts[0].view({batch, seq, a, d}).transpose(1, 2);
        Tensor k = parts[1].view({batch, seq, g, d}).transpose(1, 2);
        Tensor val = parts[2].view({batch, seq, g, d}).transpose(1, 2);
        if (g != a) {
          k = k.repeat_interleave(a / g, 1);
          val = val.repeat_interleave(a / g, 1);
        }
        Tensor scores = torch::baddbmm(maskBias, q.reshape({batch * a, seq, d}), k.reshape({batch * a, seq, d}).transpose(1, 2),
                                       1.0, 1.0 / std::sqrt(static_cast<double>(d)));
        Tensor probs = torch::softmax(scores, -1);
        if (p > 0) probs = torch::dropout(probs, p, true);
        Tensor ctx = torch::bmm(probs, val.reshape({batch * a, seq, d}))
                         .view({batch, a, seq, d})
                         .transpose(1, 2)
                         .reshape({batch, seq, a * d});
        Tensor attn = torch::matmul(ctx, l.out);
        if (l.outBias.defined()) attn = attn + l.outBias;
        if (p > 0) attn = torch::dropout(attn, p, true);
        x = x + attn;
        hN = norm(x, l.norm2w, l.norm2b, s.norm);
        Tensor up = torch::matmul(hN, l.up);
        if (l.upBias.defined()) up = up + l.upBias;
        Tensor act;
        if (gated) {
          auto gu = up.chunk(2, -1);
          act = (s.activation == Activation::kSwiGlu ? torch::silu(gu[0]) : torch::gelu(gu[0])) * gu[1];
        } else {
          act = s.activation == Activation::kRelu ? torch::relu(up) : torch::gelu(up);
        }
        Tensor down = torch::matmul(act, l.down);
        if (l.downBias.defined()) down = down + l.downBias;
        if (p > 0) down = torch::dropout(down, p, true);
        x = x + down;
      }
      if (s.finalNorm) x = norm(x, normfw, normfb, s.norm);
      Tensor logits = torch::matmul(x, head.t()).view({batch * seq, v});
      Tensor loss = torch::cross_entropy_loss(logits.to(torch::kFloat32), targets);
      loss.backward();
    };
    for (int i = 0; i < warmup; ++i) step();
    detail::synchronize(*dev);
    std::vector<double> samples;
    detail::Stopwatch watch(*dev);
    for (int i = 0; i < repetitions; ++i) {
      watch.start();
      step();
      samples.push_back(watch.seconds());
    }
    return detail::summarize(samples);
  } catch (const c10::Error& e) {
    return fail(Error::internal(std::string("LibTorch: ") + e.what_without_backtrace()));
  }
}

}  // namespace colo::profiler
