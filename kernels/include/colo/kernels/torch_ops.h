#pragma once
// The fused kernels as LibTorch autograd operations, for the executor's model and the profiler: a CUDA
// tensor runs the CUDA kernel (on LibTorch's current stream), a CPU tensor the CPU reference. float32
// and bfloat16 tensors; anything else is a c10::Error naming the operation. Library colo::kernels_torch,
// built with LibTorch; it runs CUDA tensors only when built against a CUDA LibTorch with the CUDA
// kernels (cudaAvailable()).
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>

namespace colo::kernels::torch_ops {

/// Times work on a device: CUDA events on LibTorch's current stream on a CUDA device (the GPU's clock; a
/// CUDA LibTorch build), the steady clock after synchronizing elsewhere.
class DeviceTimer {
 public:
  explicit DeviceTimer(const at::Device& device);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;
  /// On a CUDA device with `hideHostSeconds` > 0, the stream first spins that long (a sleep kernel),
  /// so the host can queue the timed work behind it: the time is then the device's alone, not bounded
  /// by how fast the host issues kernels (the cost model counts the host apart). Elsewhere ignored.
  void start(double hideHostSeconds = 0);
  /// Seconds since start(), after the device has finished the work.
  [[nodiscard]] double seconds();

 private:
  at::Device m_device;
  std::chrono::steady_clock::time_point m_start;
  struct Events;
  std::unique_ptr<Events> m_events;
};

/// Whether this build can run the fused kernels on CUDA tensors.
[[nodiscard]] bool cudaAvailable();

/// RMSNorm over the last dimension: x / rms(x) * weight.
at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);
/// LayerNorm over the last dimension.
at::Tensor layerNorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);
/// silu(gate) * up (same shapes).
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);
/// gelu_tanh(x + bias), bias over the last dimension.
at::Tensor biasGelu(const at::Tensor& x, const at::Tensor& bias);
/// Rotary embedding of x [batch, seq, heads, headDim] by cos and sin [seq, headDim / 2] (rotate-half).
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

/// One AdamW step (decoupled weight decay, bias-corrected moments) on flat fp32 tensors of one shape,
/// in place: the fused multi-tensor kernel on CUDA, its reference on the CPU. `grad` (fp32 or bf16) is
/// multiplied by gradScale first.
struct AdamW {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
  std::int64_t step = 1;
};
void adamwStep(at::Tensor& param, const at::Tensor& grad, at::Tensor& expAvg, at::Tensor& expAvgSq, const AdamW& config,
               double gradScale = 1.0);

/// Adds the sum of squares of `x` (float32 or bfloat16; read once, accumulated in fp64) into `out`, a
/// one-element float64 tensor on x's device: the CUDA kernels on CUDA (no host synchronisation), the
/// reference on the CPU.
void addSumOfSquares(const at::Tensor& x, at::Tensor& out);

/// Reduces a float tensor in place over the tensor-parallel group (max or sum); identity for one rank.
using AllReduce = std::function<void(at::Tensor&, bool max)>;
/// Per-row loss of logits [rows, shard] (this rank's vocabulary columns from `vocabStart`) against
/// target [rows] (negative: ignored), reduced over the shards by `allReduce`; no fp32 logits copy.
at::Tensor vocabParallelCrossEntropy(const at::Tensor& logits, const at::Tensor& target, std::int64_t vocabStart,
                                     AllReduce allReduce);

}  // namespace colo::kernels::torch_ops
