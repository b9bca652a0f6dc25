#pragma once
// Private: LibTorch helpers. LibTorch errors (c10::Error) are caught where LibTorch is called and turned
// into colo errors; none leaves the module.

#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "colo/kernels/torch_ops.h"

#include "colo/core/cluster.h"
#include "colo/core/error.h"
#include "colo/profiler/profiler.h"

namespace colo::profiler::detail {

inline Result<torch::Dtype> torchDtype(DType d) {
  switch (d) {
    case DType::kFp32:
    case DType::kTf32:
      return torch::kFloat32;
    case DType::kFp16:
      return torch::kFloat16;
    case DType::kBf16:
      return torch::kBFloat16;
    case DType::kFp8:
    case DType::kFp4:
      break;
  }
  return fail(Error::badInput("fp8 kernels cannot be measured through LibTorch here"));
}

// OpenBLAS keeps a thread pool of its own besides LibTorch's intra-op threads; both at once
// oversubscribe the cores. Measure as the executor runs: OpenBLAS single-threaded, LibTorch's threads.
inline void singleThreadedBlas() {
  using SetThreads = void (*)(int);
  if (auto* set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
}

inline Result<torch::Device> torchDevice(const std::string& name) {
  singleThreadedBlas();
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name == "cuda") {
    if (!torch::cuda::is_available()) return fail(Error::badInput("--device cuda: no CUDA device is available"));
    return torch::Device(torch::kCUDA, 0);
  }
  return fail(Error::badInput("--device: expected cpu or cuda, got \"" + name + "\""));
}

inline void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

/// Times work on a device: CUDA events on a CUDA device, the steady clock on the CPU.
using Stopwatch = colo::kernels::torch_ops::DeviceTimer;

/// A kernel's time is the device's: on CUDA each timed call queues behind a spin this long
/// (Stopwatch::start), so a small kernel is not timed at the rate the host issues it. A training step
/// runs its kernels queued the same way; the cost model adds the host's issuing apart (host.wait).
inline constexpr double kHideHostSeconds = 2e-3;

inline Timing summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  Timing t;
  t.repetitions = static_cast<int>(samples.size());
  if (samples.empty()) return t;
  const std::size_t n = samples.size();
  t.median = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  t.spread = (samples[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1] - samples[n / 4]) / 2;
  return t;
}

}  // namespace colo::profiler::detail
