// Device queries, error names and event timing.
#include <string>

#include "common.cuh"

namespace colo::kernels::cuda {

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return count;
}

std::string unavailableReason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  cudaGetLastError();
  if (status != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device: the driver sees none";
  return "";
}

std::string errorString(Status status) { return cudaGetErrorString(static_cast<cudaError_t>(status)); }

std::string describeDevice(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "unknown CUDA device " + std::to_string(device);
  return std::string(p.name) + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs, " + std::to_string(p.totalGlobalMem >> 20) + " MiB";
}

EventTimer::EventTimer() {
  cudaEvent_t a = nullptr, b = nullptr;
  if (cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess) {
    m_start = a;
    m_stop = b;
  } else {
    if (a) cudaEventDestroy(a);
    cudaGetLastError();
  }
}

EventTimer::~EventTimer() {
  if (m_start) cudaEventDestroy(static_cast<cudaEvent_t>(m_start));
  if (m_stop) cudaEventDestroy(static_cast<cudaEvent_t>(m_stop));
}

Status EventTimer::start(Stream stream) {
  if (!m_start) return static_cast<Status>(cudaErrorNoDevice);
  return static_cast<Status>(cudaEventRecord(static_cast<cudaEvent_t>(m_start), static_cast<cudaStream_t>(stream)));
}

Status EventTimer::stop(Stream stream) {
  if (!m_stop) return static_cast<Status>(cudaErrorNoDevice);
  return static_cast<Status>(cudaEventRecord(static_cast<cudaEvent_t>(m_stop), static_cast<cudaStream_t>(stream)));
}

float EventTimer::milliseconds() {
  if (!m_stop || cudaEventSynchronize(static_cast<cudaEvent_t>(m_stop)) != cudaSuccess) return -1.0f;
  float ms = -1.0f;
  if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(m_start), static_cast<cudaEvent_t>(m_stop)) != cudaSuccess) return -1.0f;
  return ms;
}

}  // namespace colo::kernels::cuda
