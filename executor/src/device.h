#pragma once
// Private: where a rank computes. Gloo ranks compute on the CPU; NCCL ranks on CUDA device
// LOCAL_RANK (mod the devices seen), which needs a CUDA LibTorch (COLO_TORCH_CUDA). Step times come
// from CUDA events on the current stream there, memory from LibTorch's CUDA caching allocator.
#include <torch/torch.h>

#include <memory>
#include <string>

#include "colo/core/error.h"
#include "colo/kernels/torch_ops.h"

namespace colo::executor::detail {

class Device {
 public:
  /// Errors: kBadInput for nccl in a build or on a machine without CUDA.
  [[nodiscard]] static Result<Device> forBackend(const std::string& backend, int localRank);

  [[nodiscard]] const torch::Device& device() const { return m_device; }
  [[nodiscard]] bool cuda() const { return m_device.is_cuda(); }
  /// "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3)".
  [[nodiscard]] std::string describe() const;
  void synchronize() const;
  /// Marks the start of a step (CUDA: an event on the current stream).
  void startStep();
  /// Seconds since startStep(): CUDA events where there is a GPU (after synchronizing), else
  /// `wallSeconds` as measured by the caller.
  [[nodiscard]] double stepSeconds(double wallSeconds);
  /// The allocator's peak of allocated bytes on this device since the last reset (0 on the CPU).
  [[nodiscard]] double peakAllocatedBytes() const;
  /// The allocator's allocated bytes on this device now (0 on the CPU).
  [[nodiscard]] double allocatedBytes() const;
  [[nodiscard]] double peakReservedBytes() const;
  void resetPeak() const;

 private:
  explicit Device(torch::Device d) : m_device(d), m_timer(std::make_shared<kernels::torch_ops::DeviceTimer>(d)) {}
  torch::Device m_device;
  std::shared_ptr<kernels::torch_ops::DeviceTimer> m_timer;
};

}  // namespace colo::executor::detail
