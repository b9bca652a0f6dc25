// The CPU references against LibTorch's own operators and autograd: an implementation colo did not write.
#include <torch/torch.h>

#include "colo/kernels/reference.h"
#include "colo/kernels/torch_ops.h"
#include "kernels_test_support.h"

namespace colo::kernels {
namespace {

using namespace test;
using ref::Index;

torch::Tensor tensor(const Vec& v, std::vector<std::int64_t> shape) {
  return torch::tensor(v, torch::kFloat32).reshape(shape).clone().requires_grad_(true);
}
Vec values(const torch::Tensor& t) {
  auto c = t.detach().contiguous().to(torch::kFloat32);
  return Vec(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

constexpr Index kRows = 6, kCols = 40;

TEST(KernelsAgainstLibTorch, NormsEqualLibTorchsAndTheirAutogradGradients) {
  const Vec x = randomVec(kRows * kCols, 1, 2.0f, 1.0f), w = randomVec(kCols, 2, 0.3f, 1.0f), b = randomVec(kCols, 3);
  const Vec dy = randomVec(kRows * kCols, 4);
  auto tx = tensor(x, {kRows, kCols}), tw = tensor(w, {kCols}), tb = tensor(b, {kCols});
  auto ty = torch::layer_norm(tx, {kCols}, tw, tb, 1e-5);
  ty.backward(torch::tensor(dy).reshape({kRows, kCols}));
  Vec y(x.size()), mean(kRows), rstd(kRows), dx(x.size()), dw(kCols), db(kCols);
  ref::layernormForward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), kRows, kCols, 1e-5f);
  ref::layernormBackward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(), kRows, kCols);
  EXPECT_TRUE(near(y, values(ty), 1e-5f));
  EXPECT_TRUE(near(dx, values(tx.grad()), 1e-5f));
  EXPECT_TRUE(near(dw, values(tw.grad()), 1e-5f));
  EXPECT_TRUE(near(db, values(tb.grad()), 1e-5f));

  auto rx = tensor(x, {kRows, kCols}), rw = tensor(w, {kCols});
  auto ry = rx * torch::rsqrt(rx.pow(2).mean(-1, true) + 1e-5) * rw;  // RMSNorm as Llama's reference code
  ry.backward(torch::tensor(dy).reshape({kRows, kCols}));
  ref::rmsnormForward(x.data(), w.data(), y.data(), rstd.data(), kRows, kCols, 1e-5f);
  ref::rmsnormBackward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), kRows, kCols);
  EXPECT_TRUE(near(y, values(ry), 1e-5f));
  EXPECT_TRUE(near(dx, values(rx.grad()), 1e-5f));
  EXPECT_TRUE(near(dw, values(rw.grad()), 1e-5f));
}

TEST(KernelsAgainstLibTorch, ActivationsEqualLibTorchsSiluAndTanhGelu) {
  const Vec gateUp = randomVec(kRows * 2 * kCols, 5, 2.0f), dy = randomVec(kRows * kCols, 6);
  auto gu = tensor(gateUp, {kRows, 2 * kCols});
  auto halves = gu.chunk(2, -1);
  auto ts = torch::silu(halves[0]) * halves[1];
  ts.backward(torch::tensor(dy).reshape({kRows, kCols}));
  Vec y(kRows * kCols), dgu(gateUp.size());
  ref::swigluForward(gateUp.data(), y.data(), kRows, kCols);
  ref::swigluBackward(dy.data(), gateUp.data(), dgu.data(), kRows, kCols);
  EXPECT_TRUE(near(y, values(ts), 1e-5f));
  EXPECT_TRUE(near(dgu, values(gu.grad()), 1e-5f));

  const Vec x = randomVec(kRows * kCols, 7, 2.0f), b = randomVec(kCols, 8);
  auto tx = tensor(x, {kRows, kCols}), tb = tensor(b, {kCols});
  auto tg = torch::gelu(tx + tb, "tanh");
  tg.backward(torch::tensor(dy).reshape({kRows, kCols}));
  Vec dx(x.size()), db(kCols);
  ref::biasGeluForward(x.data(), b.data(), y.data(), kRows, kCols);
  ref::biasGeluBackward(dy.data(), x.data(), b.data(), dx.data(), db.data(), kRows, kCols);
  EXPECT_TRUE(near(y, values(tg), 1e-5f));
  EXPECT_TRUE(near(dx, values(tx.grad()), 1e-5f));
  EXPECT_TRUE(near(db, values(tb.grad()), 1e-5f));
}

TEST(KernelsAgainstLibTorch, CrossEntropyEqualsLibTorchsOnTheWholeVocabulary) {
  constexpr Index rows = 5, vocab = 300;
  const Vec logits = randomVec(rows * vocab, 9, 3.0f);
  const std::vector<Index> targets{7, 299, 0, -100, 150};
  auto tl = tensor(logits, {rows, vocab});
  auto tt = torch::tensor(std::vector<std::int64_t>(targets.begin(), targets.end()), torch::kLong);
  auto loss = torch::nn::functional::cross_entropy(tl, tt, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
  loss.backward();
  Vec mx(rows), se(rows), tg(rows), lse(rows), l(rows), d(logits.size());
  ref::crossEntropyShardStats(logits.data(), targets.data(), 0, mx.data(), se.data(), tg.data(), rows, vocab);
  const std::vector<const float*> m{mx.data()}, s{se.data()}, t{tg.data()};
  ref::crossEntropyCombine(m, s, t, targets.data(), lse.data(), l.data(), rows);
  const Vec grad(rows, 1.0f / 4);  // the mean over the four rows that count
  ref::crossEntropyShardBackward(logits.data(), targets.data(), 0, lse.data(), grad.data(), d.data(), rows, vocab);
  EXPECT_NEAR((l[0] + l[1] + l[2] + l[4]) / 4, loss.item<float>(), 1e-5);
  EXPECT_TRUE(near(d, values(tl.grad()), 1e-6f));
}

TEST(KernelsAgainstLibTorch, AdamwTakesTorchOptimAdamWsSteps) {
  const Vec p0 = randomVec(50, 10);
  auto tp = tensor(p0, {50});
  torch::optim::AdamW optimizer({tp}, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  Vec p = p0, m(50, 0.0f), v(50, 0.0f);
  for (int step = 1; step <= 3; ++step) {
    const Vec g = randomVec(50, 20 + step);
    tp.mutable_grad() = torch::tensor(g);
    optimizer.step();
    const std::vector<ref::FlatTensor<float>> list{{p.data(), g.data(), m.data(), v.data(), nullptr, 50}};
    ref::AdamWConfig c;
    c.lr = 1e-2f;
    c.weightDecay = 0.1f;
    c.step = step;
    ref::adamwStep<float>(list, c, 1.0f);
  }
  EXPECT_TRUE(near(p, values(tp), 1e-6f));
}

// The autograd operations (what the executor's model calls) on CPU tensors: forward and gradients equal
// LibTorch's unfused composition, in fp32 and, within bf16 rounding, in bf16.
TEST(KernelsTorchOps, FusedOperationsEqualTheUnfusedCompositionAndItsGradients) {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const double tol = dtype == torch::kFloat32 ? 1e-5 : 3e-2;
    auto leaf = [&](std::vector<std::int64_t> shape, int seed) {
      torch::manual_seed(seed);
      return torch::randn(shape).to(dtype).requires_grad_(true);
    };
    auto check = [&](const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& fused,
                     const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& plain, std::vector<std::vector<std::int64_t>> shapes,
                     const char* what) {
      std::vector<torch::Tensor> a, b;
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        a.push_back(leaf(shapes[i], static_cast<int>(i) + 1));
        b.push_back(a.back().detach().clone().requires_grad_(true));
      }
      auto ya = fused(a), yb = plain(b);
      const bool lossInFp32 = std::string(what) == "cross_entropy";
      ASSERT_EQ(ya.scalar_type(), lossInFp32 ? torch::kFloat32 : dtype) << what;
      EXPECT_TRUE(torch::allclose(ya.to(torch::kFloat32), yb.to(torch::kFloat32), tol, tol)) << what;
      auto dy = torch::randn(ya.sizes()).to(ya.scalar_type());
      ya.backward(dy);
      yb.backward(dy);
      for (std::size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(a[i].grad().defined()) << what << " input " << i;
        EXPECT_TRUE(torch::allclose(a[i].grad().to(torch::kFloat32), b[i].grad().to(torch::kFloat32), 2 * tol, 2 * tol)) << what << " input " << i;
      }
    };
    using V = const std::vector<torch::Tensor>&;
    check([](V t) { return torch_ops::rmsNorm(t[0], t[1], 1e-5); },
          [](V t) { return (t[0].to(torch::kFloat32) * torch::rsqrt(t[0].to(torch::kFloat32).pow(2).mean(-1, true) + 1e-5) * t[1].to(torch::kFloat32)).to(t[0].scalar_type()); },
          {{2, 5, 64}, {64}}, "rms_norm");
    check([](V t) { return torch_ops::layerNorm(t[0], t[1], t[2], 1e-5); },
          [](V t) { return torch::layer_norm(t[0].to(torch::kFloat32), {64}, t[1].to(torch::kFloat32), t[2].to(torch::kFloat32), 1e-5).to(t[0].scalar_type()); },
          {{2, 5, 64}, {64}, {64}}, "layer_norm");
    check([](V t) { return torch_ops::swiglu(t[0], t[1]); },
          [](V t) { return (torch::silu(t[0].to(torch::kFloat32)) * t[1].to(torch::kFloat32)).to(t[0].scalar_type()); }, {{3, 4, 48}, {3, 4, 48}},
          "swiglu");
    check([](V t) { return torch_ops::biasGelu(t[0], t[1]); },
          [](V t) { return torch::gelu(t[0].to(torch::kFloat32) + t[1].to(torch::kFloat32), "tanh").to(t[0].scalar_type()); }, {{3, 4, 48}, {48}},
          "bias_gelu");
    const auto angles = torch::outer(torch::arange(5, torch::kFloat64), torch::pow(10000.0, -torch::arange(0, 16, 2, torch::kFloat64) / 16.0));
    const auto cos = angles.cos().to(torch::kFloat32), sin = angles.sin().to(torch::kFloat32);
    check([&](V t) { return torch_ops::rotary(t[0], cos, sin); },
          [&](V t) {
            auto x = t[0].to(torch::kFloat32);
            auto halves = x.chunk(2, -1);
            auto c = torch::cat({cos, cos}, -1).view({1, 5, 1, 16}), s = torch::cat({sin, sin}, -1).view({1, 5, 1, 16});
            return (x * c + torch::cat({-halves[1], halves[0]}, -1) * s).to(t[0].scalar_type());
          },
          {{2, 5, 3, 16}}, "rotary");
    const auto target = torch::tensor(std::vector<std::int64_t>{3, -100, 99, 0, 42, 7});
    check([&](V t) { return torch_ops::vocabParallelCrossEntropy(t[0], target, 0, [](torch::Tensor&, bool) {}); },
          [&](V t) {
            return torch::nn::functional::cross_entropy(t[0].to(torch::kFloat32), target,
                                                        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kNone));
          },
          {{6, 100}}, "cross_entropy");
  }
  EXPECT_THROW(torch_ops::rmsNorm(torch::ones({2, 4}, torch::kFloat64), torch::ones({4}, torch::kFloat64), 1e-5), c10::Error);
}

// The executor's fused optimizer step equals torch.optim.AdamW over three steps, clipped gradients included.
TEST(KernelsTorchOps, FusedAdamwEqualsTorchOptimAdamW) {
  torch::manual_seed(3);
  auto reference = torch::randn({1000}).requires_grad_(true);
  torch::optim::AdamW optimizer({reference}, torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0.1));
  auto p = reference.detach().clone(), m = torch::zeros({1000}), v = torch::zeros({1000});
  for (std::int64_t step = 1; step <= 3; ++step) {
    auto g = torch::randn({1000});
    reference.mutable_grad() = g * 0.5;
    optimizer.step();
    torch_ops::adamwStep(p, g, m, v, {3e-3, 0.9, 0.95, 1e-8, 0.1, step}, 0.5);
  }
  EXPECT_TRUE(torch::allclose(p, reference.detach(), 1e-6, 1e-6));
  auto wrong = torch::zeros({10}, torch::kFloat64);
  EXPECT_THROW(torch_ops::adamwStep(wrong, wrong, wrong, wrong, {}), c10::Error);
}

// The executor's gradient-norm reduction: equal to LibTorch's fp64 sum of squares, added into `out`, on
// the CPU and, where this build runs CUDA kernels, on the GPU; a wrong `out` is refused.
TEST(KernelsTorchOps, SumOfSquaresAddsLibTorchsFp64SumIntoOut) {
  torch::manual_seed(5);
  std::vector<torch::Device> devices{torch::kCPU};
  if (torch_ops::cudaAvailable() && torch::cuda::is_available()) devices.emplace_back(torch::kCUDA);
  for (const auto& device : devices) {
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      const auto x = torch::randn({3, 1001}).to(dtype).to(device);
      auto out = torch::full({1}, 1.5, torch::TensorOptions().dtype(torch::kFloat64).device(device));
      torch_ops::addSumOfSquares(x, out);
      const double expected = 1.5 + x.to(torch::kFloat64).pow(2).sum().item<double>();
      EXPECT_NEAR(out.item<double>(), expected, 1e-12 * expected) << device << " " << dtype;
      // A non-contiguous view is read as its elements.
      auto viewOut = torch::zeros({1}, out.options());
      torch_ops::addSumOfSquares(x.t(), viewOut);
      EXPECT_NEAR(viewOut.item<double>(), expected - 1.5, 1e-12 * expected);
    }
  }
  auto wrong = torch::zeros({1}, torch::kFloat32);
  EXPECT_THROW(torch_ops::addSumOfSquares(torch::ones({4}), wrong), c10::Error);
}

}  // namespace
}  // namespace colo::kernels
