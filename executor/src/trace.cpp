#include "trace.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <iostream>
#include <set>

namespace colo::executor::detail {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

void StepTrace::start() {
  if (m_file.empty() || m_started) return;
  m_started = true;
  try {
    std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
    if (m_cuda) activities.insert(impl::ActivityType::CUDA);
    const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
    m_recording = true;
  } catch (const c10::Error& e) {
    std::cerr << "colo-run: --trace: this LibTorch cannot record a trace: " << e.what_without_backtrace() << "\n";
  }
}

std::string StepTrace::stop() {
  if (!m_recording) return {};
  m_recording = false;
  try {
    if (m_cuda) torch::cuda::synchronize();
    auto result = prof::disableProfiler();
    if (!result) return "--trace: the profiler returned no result";
    result->save(m_file);
    return "trace of the last steps in " + m_file + " (Chrome trace format: Perfetto or chrome://tracing)";
  } catch (const c10::Error& e) {
    return std::string("--trace: no trace written: ") + e.what_without_backtrace();
  }
}

StepTrace::~StepTrace() {
  if (m_recording) (void)stop();
}

}  // namespace colo::executor::detail
