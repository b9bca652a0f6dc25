// colo-bench-kernels: each fused kernel against LibTorch's unfused composition of the same operation,
// forward + backward, on the CPU or a CUDA device, at a ~350M GPT's shapes (or smaller, --tokens); and
// the optimizer's two (the gradients' fp64 sum of squares, AdamW) over flat fp32 buffers of 48 h^2.
//
//   colo-bench-kernels [--device cpu|cuda] [--dtype bf16|fp32] [--tokens N] [--hidden H] [--vocab V]
//                      [--repetitions R] [--only NAME] [--trace FILE] [--sync-debug] [--json]
//
// Prints, per kernel, the median milliseconds of each on the device's clock (CUDA events around one
// forward and backward queued behind a spin, so the host's issuing does not bound it), the median host
// milliseconds it takes to issue them, and the speed-up (unfused / fused); the JSON adds the device
// time as called one at a time (as_called), which the slower of device and host bounds. --trace records
// the timed repetitions in a Kineto trace, each side in a colo:fused-NAME or colo:unfused-NAME scope
// (scripts/gpu/trace_summary.py sums it); --sync-debug has LibTorch warn at each synchronising call.
// On the CPU the fused side runs the single-threaded references: the figures there only show that it runs.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "colo/kernels/torch_ops.h"
#include "colo/kernels/trace.h"
#if defined(COLO_TORCH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace {

namespace ops = colo::kernels::torch_ops;
using torch::Tensor;

struct Options {
  std::string device = "cpu", dtype = "bf16";
  std::int64_t tokens = 8192, hidden = 1024, vocab = 50304;
  int repetitions = 20;
  bool json = false, syncDebug = false;
  std::string only, trace;
};

struct Timing {
  double device = 0, host = 0, asCalled = 0;  // medians, seconds
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds of fn() (forward and backward) after warm-up: on the device's clock with the host out
// of the way (queued behind a spin, DeviceTimer::start), on the host's from the call to its return
// (what issuing the work costs; on the CPU the work itself), and on the device's clock as called one
// at a time (the longer of the two, roughly).
Timing medianSeconds(const torch::Device& device, int repetitions, const std::function<void()>& fn, const std::string& scope) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> onDevice, onHost, asCalled;
  ops::DeviceTimer timer(device);
  for (int i = 0; i < repetitions; ++i) {
    timer.start();
    fn();
    asCalled.push_back(timer.seconds());
  }
  for (int i = 0; i < repetitions; ++i) {
    timer.start(5e-3);
    const auto begin = std::chrono::steady_clock::now();
    {
      RECORD_USER_SCOPE(scope.c_str());
      fn();
    }
    onHost.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
    onDevice.push_back(timer.seconds());
  }
  return {median(onDevice), median(onHost), median(asCalled)};
}

int usage(const std::string& why) {
  std::cerr << "colo-bench-kernels: " << why << "\nusage: colo-bench-kernels [--device cpu|cuda] [--dtype bf16|fp32] [--tokens N] "
               "[--hidden H] [--vocab V] [--repetitions R] [--only NAME] [--trace FILE] [--sync-debug] [--json]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    auto number = [&](std::int64_t& into) {
      const std::string v = next();
      char* end = nullptr;
      into = std::strtoll(v.c_str(), &end, 10);
      return !v.empty() && *end == '\0' && into > 0 && into <= (std::int64_t{1} << 24);
    };
    std::int64_t reps = 0;
    if (a == "--device") o.device = next();
    else if (a == "--dtype") o.dtype = next();
    else if (a == "--tokens") { if (!number(o.tokens)) return usage("--tokens: expected a positive whole number"); }
    else if (a == "--hidden") { if (!number(o.hidden)) return usage("--hidden: expected a positive whole number"); }
    else if (a == "--vocab") { if (!number(o.vocab)) return usage("--vocab: expected a positive whole number"); }
    else if (a == "--repetitions") { if (!number(reps) || reps > 10000) return usage("--repetitions: expected 1..10000"); o.repetitions = static_cast<int>(reps); }
    else if (a == "--json") o.json = true;
    else if (a == "--only") o.only = next();
    else if (a == "--trace") o.trace = next();
    else if (a == "--sync-debug") o.syncDebug = true;
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: colo-bench-kernels [--device cpu|cuda] [--dtype bf16|fp32] [--tokens N] [--hidden H] [--vocab V]\n"
                   "                          [--repetitions R] [--only NAME] [--trace FILE] [--sync-debug] [--json]\n\n"
                   "Each fused kernel against LibTorch's unfused composition of the same operation, forward + backward,\n"
                   "and the optimizer's gradient norm and AdamW over flat fp32 buffers; median device and host times.\n";
      return 0;
    }
    else return usage("unknown argument \"" + a + "\"");
  }
  if (o.device != "cpu" && o.device != "cuda") return usage("--device: expected cpu or cuda, got \"" + o.device + "\"");
  if (o.dtype != "bf16" && o.dtype != "fp32") return usage("--dtype: expected bf16 or fp32, got \"" + o.dtype + "\"");
  if (o.hidden % 64 != 0) return usage("--hidden: expected a multiple of 64 (heads of 64)");
  if (o.device == "cuda" && (!torch::cuda::is_available() || !ops::cudaAvailable())) {
    std::cerr << "colo-bench-kernels: --device cuda needs a CUDA device and a build with the CUDA kernels (CUDA LibTorch + nvcc)\n";
    return 2;
  }
  try {
    const torch::Device device = o.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
    const auto dt = o.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
    const auto opt = torch::TensorOptions().dtype(dt).device(device);
    const std::int64_t t = o.tokens, h = o.hidden, heads = h / 64, ffn = 4 * h;
    auto leaf = [&](std::vector<std::int64_t> shape) { return torch::randn(shape, opt).requires_grad_(true); };
    Tensor x = leaf({t, h}), w = leaf({h}), b = leaf({h}), gate = leaf({t, ffn}), up = leaf({t, ffn}), ffnBias = leaf({ffn});
    Tensor q = leaf({1, t, heads, 64});
    auto angles = torch::outer(torch::arange(t, torch::kFloat32), torch::rand({32})).to(device);
    Tensor cos = angles.cos(), sin = angles.sin();
    Tensor logits = leaf({t, o.vocab});
    Tensor target = torch::randint(0, o.vocab, {t}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto backward = [](const Tensor& y) { y.backward(torch::ones_like(y)); };
    // The optimizer's flat fp32 buffers (master weights, gradients, moments) of 12 h^2 x 4 parameters
    // (four layers), whatever --dtype says, and the gradient norm's fp64 accumulator.
    const auto flat = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    const std::int64_t params = 48 * h * h;
    Tensor master = torch::randn({params}, flat), grads = torch::randn({params}, flat) * 1e-3;
    Tensor moment1 = torch::zeros({params}, flat), moment2 = torch::zeros({params}, flat);
    Tensor squares = torch::zeros({1}, flat.dtype(torch::kFloat64));
    const ops::AdamW adamw{1e-4, 0.9, 0.95, 1e-8, 0.1, 1};
    struct Case {
      std::string name;
      std::function<void()> fused, unfused;
    };
    const std::vector<Case> cases{
        {"rmsnorm", [&] { backward(ops::rmsNorm(x, w, 1e-5)); },
         [&] { backward(x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * w); }},
        {"layernorm", [&] { backward(ops::layerNorm(x, w, b, 1e-5)); }, [&] { backward(torch::layer_norm(x, {h}, w, b, 1e-5)); }},
        {"swiglu", [&] { backward(ops::swiglu(gate, up)); }, [&] { backward(torch::silu(gate) * up); }},
        {"bias_gelu", [&] { backward(ops::biasGelu(gate, ffnBias)); }, [&] { backward(torch::gelu(gate + ffnBias, "tanh")); }},
        {"rotary", [&] { backward(ops::rotary(q, cos, sin)); },
         [&] {
           auto halves = q.chunk(2, -1);
           auto c = torch::cat({cos, cos}, -1).view({1, t, 1, 64}).to(dt), s = torch::cat({sin, sin}, -1).view({1, t, 1, 64}).to(dt);
           backward(q * c + torch::cat({-halves[1], halves[0]}, -1) * s);
         }},
        {"cross_entropy", [&] { ops::vocabParallelCrossEntropy(logits, target, 0, [](Tensor&, bool) {}).mean().backward(); },
         [&] { torch::cross_entropy_loss(logits.to(torch::kFloat32), target).backward(); }},
        // The gradient norm's sum of squares in fp64: one read, against an fp64 copy squared and summed.
        {"sum_of_squares", [&] { ops::addSumOfSquares(grads, squares); },
         [&] { squares += grads.to(torch::kFloat64).pow(2).sum(); }},
        // AdamW with a clipping coefficient: one kernel, against LibTorch's operators (the executor's
        // unfused path: the clip multiply, the moments, decay, the bias-corrected update).
        {"adamw", [&] { ops::adamwStep(master, grads, moment1, moment2, adamw, 0.5); },
         [&] {
           Tensor g = grads * 0.5;
           moment1.mul_(adamw.beta1).add_(g, 1.0 - adamw.beta1);
           moment2.mul_(adamw.beta2).addcmul_(g, g, 1.0 - adamw.beta2);
           master.mul_(1.0 - adamw.lr * adamw.weightDecay);
           master.addcdiv_(moment1, (moment2 / (1.0 - adamw.beta2)).sqrt_().add_(adamw.eps), -adamw.lr / (1.0 - adamw.beta1));
         }},
    };
    if (!o.only.empty() && std::none_of(cases.begin(), cases.end(), [&](const Case& c) { return c.name == o.only; })) {
      return usage("--only: no kernel named \"" + o.only + "\"");
    }
#if defined(COLO_TORCH_CUDA)
    if (o.syncDebug) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
#endif
    ops::KinetoTrace trace(o.trace, device.is_cuda(), "colo-bench-kernels");
    trace.start();
    nlohmann::json out = {{"device", o.device}, {"dtype", o.dtype}, {"tokens", t}, {"hidden", h}, {"vocab", o.vocab}, {"kernels", nlohmann::json::array()}};
    if (!o.json) {
      std::cout << "kernel          fused ms  (host)   unfused ms  (host)   speed-up   (" << o.device << ", " << o.dtype << ", " << t
                << " tokens)\n";
    }
    for (const auto& c : cases) {
      if (!o.only.empty() && c.name != o.only) continue;
      const Timing fused = medianSeconds(device, o.repetitions, c.fused, "colo:fused-" + c.name);
      const Timing unfused = medianSeconds(device, o.repetitions, c.unfused, "colo:unfused-" + c.name);
      out["kernels"].push_back({{"kernel", c.name}, {"fused_s", fused.device}, {"unfused_s", unfused.device}, {"speedup", unfused.device / fused.device},
                                {"fused_host_s", fused.host}, {"unfused_host_s", unfused.host},
                                {"fused_as_called_s", fused.asCalled}, {"unfused_as_called_s", unfused.asCalled},
                                {"speedup_as_called", unfused.asCalled / fused.asCalled}});
      if (!o.json) {
        std::cout << std::left << std::setw(14) << c.name << std::right << std::fixed << std::setprecision(3) << std::setw(10)
                  << fused.device * 1e3 << std::setw(9) << fused.host * 1e3 << std::setw(13) << unfused.device * 1e3 << std::setw(9)
                  << unfused.host * 1e3 << std::setprecision(2) << std::setw(10) << unfused.device / fused.device << "x\n";
      }
    }
    if (const std::string traced = trace.stop(); !traced.empty()) std::cerr << "colo-bench-kernels: " << traced << "\n";
    if (o.json) std::cout << out.dump(2) << "\n";
    return 0;
  } catch (const c10::Error& e) {
    std::cerr << "colo-bench-kernels: LibTorch: " << e.what_without_backtrace() << "\n";
    return 1;
  }
}
