// Non-GEMM kernels as the LibTorch training step runs them, timed forward and forward + backward.
#include <torch/version.h>

#include <cctype>
#include <chrono>
#include <functional>
#include <string>

#include "colo/kernels/torch_ops.h"
#include "kernels.h"
#include "torch_util.h"

namespace colo::profiler::detail {
namespace {

using torch::Tensor;
using Clock = std::chrono::steady_clock;

}  // namespace

Result<std::pair<Timing, std::optional<Timing>>> timeKernel(const std::string& key, std::int64_t elements, std::int64_t width,
                                                            DType dtype, const std::string& device, int warmup,
                                                            int repetitions) {
  auto dt = torchDtype(dtype);
  if (!dt) return fail(dt.error());
  auto dev = torchDevice(device);
  if (!dev) return fail(dev.error());
  if (elements < 1) return fail(Error::badInput("kernel " + key + " needs at least one element"));
  try {
    const auto o = torch::TensorOptions().dtype(*dt).device(*dev);
    const std::int64_t w = width > 0 ? width : 1;
    const std::int64_t rows = std::max<std::int64_t>(1, elements / w);
    auto input = [&](std::vector<std::int64_t> shape) { return torch::randn(shape, o).requires_grad_(true); };
    std::function<Tensor()> forward;
    bool differentiable = true;
    Tensor x, y, wgt, bias;
    std::vector<Tensor> keep;
    namespace ops = kernels::torch_ops;
    const bool fused = kernelImplementation(key, device) != "aten";
    if (key == "layernorm") {
      x = input({rows, w});
      wgt = torch::ones({w}, o).requires_grad_(true);
      bias = torch::zeros({w}, o).requires_grad_(true);
      forward = [&] { return fused ? ops::layerNorm(x, wgt, bias, 1e-5) : torch::layer_norm(x, {w}, wgt, bias, 1e-5); };
    } else if (key == "rmsnorm") {
      x = input({rows, w});
      wgt = torch::ones({w}, o).requires_grad_(true);
      forward = [&] { return fused ? ops::rmsNorm(x, wgt, 1e-5) : x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * wgt; };
    } else if (key == "softmax") {
      x = input({rows, w});
      forward = [&] { return torch::softmax(x, -1); };
    } else if (key == "dropout") {
      x = input({elements});
      forward = [&] { return torch::dropout(x, 0.1, true); };
    } else if (key == "add") {
      x = input({elements});
      y = input({elements});
      forward = [&] { return x + y; };
      differentiable = false;  // a residual's gradient passes through without a kernel
    } else if (key == "gelu" || key == "relu" || key == "silu") {
      x = input({elements});
      forward = [&] { return key == "gelu" ? torch::gelu(x) : key == "relu" ? torch::relu(x) : torch::silu(x); };
    } else if (key == "swiglu" || key == "geglu") {
      x = input({elements});
      y = input({elements});
      forward = [&] { return fused ? ops::swiglu(x, y) : (key == "swiglu" ? torch::silu(x) : torch::gelu(x)) * y; };
    } else if (key == "cross_entropy") {
      x = input({rows, w});
      auto targets = torch::randint(0, w, {rows}, torch::TensorOptions().dtype(torch::kLong).device(*dev));
      keep.push_back(targets);
      forward = [&, targets] {
        return fused ? ops::vocabParallelCrossEntropy(x, targets, 0, [](Tensor&, bool) {}).mean()
                     : torch::cross_entropy_loss(x.to(torch::kFloat32), targets);
      };
    } else if (key == "permute") {
      // Rows of `width` copied into a random order (the MoE dispatch's permutation); its backward
      // copies the gradient's rows back (index_select's backward, an index_add).
      x = input({rows, w});
      auto index = torch::randperm(rows, torch::TensorOptions().dtype(torch::kLong).device(*dev));
      keep.push_back(index);
      forward = [&, index] { return x.index_select(0, index); };
    } else if (key == "embedding") {
      // A lookup of `rows` tokens into a table of as many rows (the traffic of the lookup and of the
      // gradient's scatter-add; the dense zero-fill of a larger vocabulary is not in it).
      wgt = torch::randn({rows, w}, o).requires_grad_(true);
      auto index = torch::randint(0, rows, {rows}, torch::TensorOptions().dtype(torch::kLong).device(*dev));
      keep.push_back(index);
      forward = [&, index] { return torch::embedding(wgt, index); };
    } else if (key == "rotary") {
      // q or k rotated by position: x * cos + rotate_half(x) * sin over heads of 64.
      const std::int64_t head = 64;
      const std::int64_t r = std::max<std::int64_t>(1, elements / head);
      if (fused) {
        // colo's kernel: x [1, r, 1, 64] by cos and sin [r, 32].
        x = input({1, r, 1, head});
        auto cos = torch::rand({r, head / 2}, o.dtype(torch::kFloat32)), sin = torch::rand({r, head / 2}, o.dtype(torch::kFloat32));
        keep.insert(keep.end(), {cos, sin});
        forward = [&, cos, sin] { return ops::rotary(x, cos, sin); };
      } else {
        x = input({r, head});
        auto cos = torch::rand({r, head}, o);
        auto sin = torch::rand({r, head}, o);
        keep.push_back(cos);
        keep.push_back(sin);
        forward = [&, cos, sin] {
          auto halves = x.chunk(2, -1);
          return x * cos + torch::cat({-halves[1], halves[0]}, -1) * sin;
        };
      }
    } else if (key.rfind("flash_attention", 0) == 0) {
#if TORCH_VERSION_MAJOR >= 2
      // LibTorch's fused attention (FlashAttention or cuDNN's on a GPU) over elements / width heads of
      // width queries and keys: key "flash_attention[.causal].d<qk head dim>[.v<value head dim>][.dropout]"
      // (dropout of the probabilities at GPT's 0.1: the mask is drawn inside the kernel).
      const bool causal = key.find(".causal") != std::string::npos;
      const double rate = key.find(".dropout") != std::string::npos ? 0.1 : 0.0;
      // The number after `tag` (".d" not matching ".dropout": a digit must follow), or `otherwise`.
      const auto dimAfter = [&](const std::string& tag, std::int64_t otherwise) -> std::int64_t {
        for (auto at = key.find(tag); at != std::string::npos; at = key.find(tag, at + 1)) {
          const auto from = at + tag.size();
          std::int64_t value = 0;
          std::size_t digits = 0;
          while (from + digits < key.size() && std::isdigit(static_cast<unsigned char>(key[from + digits])) && digits < 9) {
            value = value * 10 + (key[from + digits] - '0');
            ++digits;
          }
          if (digits > 0) return value;
        }
        return otherwise;
      };
      const std::int64_t d = dimAfter(".d", 0), vd = dimAfter(".v", d);
      if (d <= 0 || width <= 0) return fail(Error::badInput("kernel " + key + ": no head dim or no keys"));
      x = input({1, rows, w, d});
      y = input({1, rows, w, d});
      auto values = input({1, rows, w, vd});
      keep.push_back(values);
      forward = [&, values, causal, rate] { return at::scaled_dot_product_attention(x, y, values, {}, rate, causal); };
#else
      return fail(Error::badInput("no LibTorch kernel for \"" + key + "\" before LibTorch 2"));
#endif
    } else if (key == "adam_step" && coloSteps(device)) {
      // One step of colo's fused AdamW over `elements` fp32 master weights (adamImplementation).
      x = torch::randn({elements}, o.dtype(torch::kFloat32));
      auto grad = torch::randn({elements}, o.dtype(torch::kFloat32)), m = torch::zeros_like(x), v = torch::zeros_like(x);
      keep.insert(keep.end(), {grad, m, v});
      forward = [&, grad, m, v]() mutable {
        kernels::torch_ops::adamwStep(x, grad, m, v, {1e-4, 0.9, 0.95, 1e-8, 0.1, 1});
        return x;
      };
      differentiable = false;
    } else if (key == "adam_step") {
      // One step of LibTorch's AdamW (what colo-run steps with on the CPU) over `elements` fp32 weights.
      x = torch::randn({elements}, o.dtype(torch::kFloat32)).requires_grad_(true);
      x.mutable_grad() = torch::randn({elements}, o.dtype(torch::kFloat32));
      auto optimizer = std::make_shared<torch::optim::AdamW>(std::vector<Tensor>{x}, torch::optim::AdamWOptions(1e-4));
      forward = [&, optimizer] {
        torch::NoGradGuard noGrad;
        optimizer->step();
        return x;
      };
      differentiable = false;
    } else {
      return fail(Error::badInput("no LibTorch kernel for \"" + key + "\""));
    }
    auto timeIt = [&](bool withBackward) {
      std::vector<double> samples;
      Stopwatch watch(*dev);
      for (int i = 0; i < warmup + repetitions; ++i) {
        watch.start(kHideHostSeconds);
        Tensor out = forward();
        if (withBackward) out.backward(out.dim() == 0 ? Tensor() : torch::ones_like(out));
        const double seconds = watch.seconds();
        if (i >= warmup) samples.push_back(seconds);
      }
      return summarize(samples);
    };
    const Timing fwd = timeIt(false);
    if (!differentiable) return std::pair{fwd, std::optional<Timing>{}};
    Timing both = timeIt(true);
    Timing bwd = both;
    bwd.median = std::max(1e-7, both.median - fwd.median);
    return std::pair{fwd, std::optional<Timing>{bwd}};
  } catch (const c10::Error& e) {
    return fail(Error::internal(std::string("LibTorch: ") + e.what_without_backtrace()));
  }
}

Result<Timing> timeCopy(const std::string& direction, bool pinned, std::int64_t bytes, const std::string& device, int warmup,
                        int repetitions) {
  auto dev = torchDevice(device);
  if (!dev) return fail(dev.error());
  if (!dev->is_cuda()) return fail(Error::badInput("host-device copies need a CUDA device, not " + device));
  if (direction != "h2d" && direction != "d2h") return fail(Error::badInput("copy direction must be h2d or d2h"));
  try {
    auto hostOptions = torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned);
    Tensor host = torch::empty({bytes}, hostOptions);
    Tensor onDevice = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(*dev));
    std::vector<double> samples;
    Stopwatch watch(*dev);
    for (int i = 0; i < warmup + repetitions; ++i) {
      synchronize(*dev);
      watch.start();
      if (direction == "h2d") onDevice.copy_(host, /*non_blocking=*/pinned);
      else host.copy_(onDevice, /*non_blocking=*/pinned);
      const double seconds = watch.seconds();
      if (i >= warmup) samples.push_back(seconds);
    }
    return summarize(samples);
  } catch (const c10::Error& e) {
    return fail(Error::internal(std::string("LibTorch: ") + e.what_without_backtrace()));
  }
}

bool coloSteps(const std::string& device) {
  return device.rfind("cuda", 0) == 0 && kernels::torch_ops::cudaAvailable();
}

std::string kernelImplementation(const std::string& key, const std::string& device) {
  const bool colo = key == "rmsnorm" || key == "layernorm" || key == "rotary" || key == "cross_entropy" || key == "swiglu";
  return colo && coloSteps(device) ? "colo fused" : "aten";
}

std::string adamImplementation(const std::string& device) {
  return coloSteps(device) ? "colo fused AdamW (multi-tensor kernel)" : "torch.optim.AdamW";
}

}  // namespace colo::profiler::detail
