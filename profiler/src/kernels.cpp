// Non-GEMM kernels as the LibTorch training step runs them, timed forward and forward + backward.
#include <chrono>
#include <functional>

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
    if (key == "layernorm") {
      x = input({rows, w});
      wgt = torch::ones({w}, o).requires_grad_(true);
      bias = torch::zeros({w}, o).requires_grad_(true);
      forward = [&] { return torch::layer_norm(x, {w}, wgt, bias, 1e-5); };
    } else if (key == "rmsnorm") {
      x = input({rows, w});
      wgt = torch::ones({w}, o).requires_grad_(true);
      forward = [&] { return x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * wgt; };
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
      forward = [&] { return (key == "swiglu" ? torch::silu(x) : torch::gelu(x)) * y; };
    } else if (key == "cross_entropy") {
      x = input({rows, w});
      auto targets = torch::randint(0, w, {rows}, torch::TensorOptions().dtype(torch::kLong).device(*dev));
      keep.push_back(targets);
      forward = [&, targets] { return torch::cross_entropy_loss(x.to(torch::kFloat32), targets); };
    } else {
      return fail(Error::badInput("no LibTorch kernel for \"" + key + "\""));
    }
    auto timeIt = [&](bool withBackward) {
      std::vector<double> samples;
      for (int i = 0; i < warmup + repetitions; ++i) {
        const auto start = Clock::now();
        Tensor out = forward();
        if (withBackward) out.backward(out.dim() == 0 ? Tensor() : torch::ones_like(out));
        synchronize(*dev);
        if (i >= warmup) samples.push_back(std::chrono::duration<double>(Clock::now() - start).count());
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

}  // namespace colo::profiler::detail
