#include "colo/kernels/trace.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <iostream>
#include <set>

namespace colo::kernels::torch_ops {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

void KinetoTrace::start() {
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
    std::cerr << m_who << ": --trace: this LibTorch cannot record a trace: " << e.what_without_backtrace() << "\n";
  }
}

std::string KinetoTrace::stop() {
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

KinetoTrace::~KinetoTrace() {
  if (m_recording) (void)stop();
}

}  // namespace colo::kernels::torch_ops
