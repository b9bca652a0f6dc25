#pragma once
// A Chrome-trace record of a stretch of work by LibTorch's Kineto profiler: every operator on the
// host, every kernel and copy on a CUDA device, and user scopes (RECORD_USER_SCOPE). colo-run --trace
// records its last steps with it, colo-bench-kernels --trace its repetitions; scripts/gpu/trace_summary.py
// sums a trace by kernel and scope.
#include <string>
#include <utility>

namespace colo::kernels::torch_ops {

class KinetoTrace {
 public:
  /// Records nothing when `file` is empty. `who` prefixes what start() prints (e.g. "colo-run").
  KinetoTrace(std::string file, bool cuda, std::string who) : m_file(std::move(file)), m_who(std::move(who)), m_cuda(cuda) {}
  KinetoTrace(const KinetoTrace&) = delete;
  KinetoTrace& operator=(const KinetoTrace&) = delete;
  ~KinetoTrace();

  /// Starts recording (once). A LibTorch without Kineto says so on stderr and the work goes on.
  void start();
  /// Stops and writes the file; returns a line saying where, or why not (empty when not recording).
  std::string stop();
  [[nodiscard]] bool recording() const { return m_recording; }

 private:
  std::string m_file, m_who;
  bool m_cuda = false, m_recording = false, m_started = false;
};

}  // namespace colo::kernels::torch_ops
