#include "device.h"

#if defined(COLO_TORCH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace colo::executor::detail {


Result<Device> Device::forBackend(const std::string& backend, int localRank) {
  if (backend != "nccl") return Device(torch::Device(torch::kCPU));
#if defined(COLO_TORCH_CUDA)
  if (!torch::cuda::is_available() || torch::cuda::device_count() == 0) {
    return fail(Error::badInput("--backend nccl: no CUDA device is visible to this process (check CUDA_VISIBLE_DEVICES and the driver)"));
  }
  const auto index = static_cast<c10::DeviceIndex>(localRank % static_cast<int>(torch::cuda::device_count()));
  c10::cuda::set_device(index);
  return Device(torch::Device(torch::kCUDA, index));
#else
  (void)localRank;
  return fail(Error::badInput("--backend nccl: this build's LibTorch has no CUDA (build against the CUDA LibTorch of an installed "
                              "PyTorch: scripts/gpu-check.sh shows how); use --backend gloo"));
#endif
}

std::string Device::describe() const {
  if (!cuda()) return "cpu";
#if defined(COLO_TORCH_CUDA)
  const auto* p = at::cuda::getDeviceProperties(m_device.index());
  return "cuda:" + std::to_string(m_device.index()) + " (" + p->name + ")";
#else
  return m_device.str();
#endif
}

void Device::synchronize() const {
  if (cuda()) torch::cuda::synchronize(m_device.index());
}

void Device::startStep() { m_timer->start(); }

double Device::stepSeconds(double wallSeconds) {
  const double seconds = m_timer->seconds();
  return cuda() ? seconds : wallSeconds;
}

double Device::peakAllocatedBytes() const {
#if defined(COLO_TORCH_CUDA)
  if (cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(m_device.index());
    return static_cast<double>(stats.allocated_bytes[0].peak);  // [0]: the aggregate over pools
  }
#endif
  return 0;
}

double Device::allocatedBytes() const {
#if defined(COLO_TORCH_CUDA)
  if (cuda()) return static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(m_device.index()).allocated_bytes[0].current);
#endif
  return 0;
}

double Device::peakReservedBytes() const {
#if defined(COLO_TORCH_CUDA)
  if (cuda()) return static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(m_device.index()).reserved_bytes[0].peak);
#endif
  return 0;
}

void Device::resetPeak() const {
#if defined(COLO_TORCH_CUDA)
  if (cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(m_device.index());
#endif
}

}  // namespace colo::executor::detail
