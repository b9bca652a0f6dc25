#pragma once
// Private: a Chrome-trace record of a rank's last steps (colo-run --trace FILE), by LibTorch's Kineto
// profiler: every operator on the host, every kernel and copy on a CUDA device, and colo's own phase
// scopes (forward, backward, gradient reduction, optimizer), to see where a step's time goes.
#include <string>

namespace colo::executor::detail {

/// The phase names the trainer marks (user scopes in the trace; scripts/gpu/trace_summary.py groups
/// the device's kernels by them).
inline constexpr const char* kPhaseForward = "colo:forward";
inline constexpr const char* kPhaseBackward = "colo:backward";
inline constexpr const char* kPhaseReduce = "colo:reduce";
inline constexpr const char* kPhaseOptimizer = "colo:optimizer";

class StepTrace {
 public:
  /// Records nothing when `file` is empty.
  StepTrace(std::string file, bool cuda) : m_file(std::move(file)), m_cuda(cuda) {}
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;
  ~StepTrace();

  /// Starts recording (once). A LibTorch without Kineto says so on stderr and the run goes on.
  void start();
  /// Stops and writes the file; returns a line saying where, or why not.
  std::string stop();
  [[nodiscard]] bool recording() const { return m_recording; }

 private:
  std::string m_file;
  bool m_cuda = false, m_recording = false, m_started = false;
};

}  // namespace colo::executor::detail
