#pragma once
/// \file
/// Progress reporting and cancellation for long jobs (search, profiling, runs), free of any UI toolkit:
/// the CLI prints to stderr, the GUI forwards to a progress bar, tests record.

#include <atomic>
#include <string_view>

namespace colo {

/// Receives progress from a long job. Called from the job's thread.
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  /// `fraction` in [0, 1]; `what` says what is being done.
  virtual void progress(double fraction, std::string_view what) = 0;
};

/// Set from any thread to ask a long job to stop at its next check; the job then returns a
/// kInfeasible-free, partial result or a cancellation error as its API says.
class CancellationToken {
 public:
  void cancel() { m_cancelled.store(true, std::memory_order_relaxed); }
  [[nodiscard]] bool cancelled() const { return m_cancelled.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> m_cancelled{false};
};

}  // namespace colo
