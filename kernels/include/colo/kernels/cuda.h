#pragma once
// The fused training kernels on a CUDA device: the same operations, arguments and formulas as
// colo/kernels/reference.h, on device pointers, launched on `stream` (a cudaStream_t; nullptr is the
// default stream, where LibTorch also launches unless told otherwise). Every call returns a CUDA status:
// 0 is success, anything else is named by errorString(). Built only when COLO_WITH_CUDA is on; the
// header itself needs no CUDA header, so C++ code of any standard can call it.
#include <cstdint>
#include <span>
#include <string>

#include "colo/kernels/bf16.h"
#include "colo/kernels/reference.h"

namespace colo::kernels::cuda {

using Index = std::int64_t;
using Stream = void*;
using Status = int;

/// CUDA devices this process sees; 0 when there is no device or no driver (never an error).
[[nodiscard]] int deviceCount();
/// "no CUDA device" or the driver's reason, for a test that skips.
[[nodiscard]] std::string unavailableReason();
[[nodiscard]] std::string errorString(Status status);
/// "NVIDIA H100 80GB HBM3, sm_90, 132 SMs" for device `device`.
[[nodiscard]] std::string describeDevice(int device);

/// Times work on a stream with CUDA events (start, then stop, then the milliseconds between them).
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  Status start(Stream stream = nullptr);
  Status stop(Stream stream = nullptr);
  /// Waits for the stop event; the milliseconds from start to stop, or a negative number on error.
  [[nodiscard]] float milliseconds();

 private:
  void* m_start = nullptr;
  void* m_stop = nullptr;
};

template <class T>
Status rmsnormForward(const T* x, const T* weight, T* y, float* rstd, Index rows, Index cols, float eps, Stream stream);
/// dweight is overwritten (the kernel clears it first).
template <class T>
Status rmsnormBackward(const T* dy, const T* x, const T* weight, const float* rstd, T* dx, float* dweight, Index rows,
                       Index cols, Stream stream);
template <class T>
Status layernormForward(const T* x, const T* weight, const T* bias, T* y, float* mean, float* rstd, Index rows, Index cols,
                        float eps, Stream stream);
template <class T>
Status layernormBackward(const T* dy, const T* x, const T* weight, const float* mean, const float* rstd, T* dx,
                         float* dweight, float* dbias, Index rows, Index cols, Stream stream);

template <class T>
Status swigluForward(const T* gateUp, T* y, Index rows, Index cols, Stream stream);
template <class T>
Status swigluBackward(const T* dy, const T* gateUp, T* dGateUp, Index rows, Index cols, Stream stream);
/// SwiGLU on gate and up as two [rows, cols] tensors (no [rows, 2 cols] copy of them); dy may not alias
/// dGate or dUp.
template <class T>
Status swigluForwardSplit(const T* gate, const T* up, T* y, Index rows, Index cols, Stream stream);
template <class T>
Status swigluBackwardSplit(const T* dy, const T* gate, const T* up, T* dGate, T* dUp, Index rows, Index cols, Stream stream);
template <class T>
Status biasGeluForward(const T* x, const T* bias, T* y, Index rows, Index cols, Stream stream);
template <class T>
Status biasGeluBackward(const T* dy, const T* x, const T* bias, T* dx, float* dbias, Index rows, Index cols, Stream stream);
template <class T>
Status rotaryForward(const T* x, const float* cos, const float* sin, T* y, Index tokens, Index heads, Index headDim,
                     Stream stream);
template <class T>
Status rotaryBackward(const T* dy, const float* cos, const float* sin, T* dx, Index tokens, Index heads, Index headDim,
                      Stream stream);

template <class T>
Status crossEntropyShardStats(const T* logits, const Index* targets, Index vocabStart, float* rowMax, float* sumExp,
                              float* targetLogit, Index rows, Index shardVocab, Stream stream);
template <class T>
Status crossEntropyShardBackward(const T* logits, const Index* targets, Index vocabStart, const float* logSumExp,
                                 const float* gradLoss, T* dlogits, Index rows, Index shardVocab, Stream stream);

/// Adds the sum of squares of x[0..n) (fp64 accumulation, one read of x) into *out, a device double:
/// per-block partial sums into `scratch` (sumOfSquaresScratch() device doubles), then one block adds
/// them in a fixed order, so the result does not depend on scheduling.
[[nodiscard]] Index sumOfSquaresScratch();
template <class T>
Status addSumOfSquares(const T* x, Index n, double* scratch, double* out, Stream stream);

/// The multi-tensor optimizers: `tensors` is a host list of device buffers (any length; launched in
/// groups). LAMB needs `scratch`, device memory of lambScratchFloats(tensors.size()) floats.
template <class G>
Status adamwStep(std::span<const ref::FlatTensor<G>> tensors, const ref::AdamWConfig& config, float gradScale, Stream stream);
[[nodiscard]] Index lambScratchFloats(std::size_t tensors);
template <class G>
Status lambStep(std::span<const ref::FlatTensor<G>> tensors, const ref::LambConfig& config, float gradScale, float* scratch,
                Stream stream);

}  // namespace colo::kernels::cuda
