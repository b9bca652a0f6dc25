#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#if defined(COLO_TORCH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#endif

#include "colo/costmodel/evaluator.h"
#include "kernels.h"
#include "torch_util.h"

namespace colo::profiler {
namespace {

using Clock = std::chrono::steady_clock;

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

}  // namespace

Result<std::string> deviceName(const std::string& device) {
  auto d = detail::torchDevice(device);
  if (!d) return fail(d.error());
  if (d->is_cpu()) return "cpu: " + cpuModel();
  try {
#if defined(COLO_TORCH_CUDA)
    // The card's own name (what a cluster file's GPU is matched against): "cuda: NVIDIA H200".
    const auto* p = at::cuda::getDeviceProperties(d->has_index() ? d->index() : 0);
    return std::string("cuda: ") + p->name;
#else
    return std::string("cuda: device ") + std::to_string(d->index());
#endif
  } catch (const c10::Error& e) {
    return fail(Error::internal(std::string("cannot name the CUDA device: ") + e.what_without_backtrace()));
  }
}

std::string deviceFingerprint(const std::string& device) {
  std::ostringstream f;
  f << "libtorch " << TORCH_VERSION << "; threads " << at::get_num_threads();
  if (device == "cuda") {
    f << "; cuda devices " << static_cast<int>(torch::cuda::device_count());
#if defined(COLO_TORCH_CUDA)
    const auto* p = at::cuda::getDeviceProperties(0);
    f << "; sm_" << p->major << p->minor << "; " << p->multiProcessorCount << " SMs; " << (p->totalGlobalMem >> 20) << " MiB";
#endif
  }
  return f.str();
}

Result<Timing> timeGemm(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count, DType dtype,
                        const std::string& device, int warmup, int repetitions) {
  auto dt = detail::torchDtype(dtype);
  if (!dt) return fail(dt.error());
  auto dev = detail::torchDevice(device);
  if (!dev) return fail(dev.error());
  try {
    torch::NoGradGuard noGrad;
    const auto options = torch::TensorOptions().dtype(*dt).device(*dev);
    // Rotate inputs so a small GEMM does not run from a warm cache every time.
    constexpr int kBuffers = 3;
    std::vector<torch::Tensor> a, b;
    for (int i = 0; i < kBuffers; ++i) {
      a.push_back(count > 1 ? torch::randn({count, m, k}, options) : torch::randn({m, k}, options));
      b.push_back(count > 1 ? torch::randn({count, k, n}, options) : torch::randn({k, n}, options));
    }
    auto run = [&](int i) {
      return count > 1 ? torch::bmm(a[static_cast<std::size_t>(i % kBuffers)], b[static_cast<std::size_t>(i % kBuffers)])
                       : torch::mm(a[static_cast<std::size_t>(i % kBuffers)], b[static_cast<std::size_t>(i % kBuffers)]);
    };
    for (int i = 0; i < warmup; ++i) run(i);
    detail::synchronize(*dev);
    std::vector<double> samples;
    detail::Stopwatch watch(*dev);
    for (int i = 0; i < repetitions; ++i) {
      watch.start(detail::kHideHostSeconds);
      auto c = run(i);
      samples.push_back(watch.seconds() / static_cast<double>(count));
    }
    return detail::summarize(samples);
  } catch (const c10::Error& e) {
    return fail(Error::internal(std::string("LibTorch: ") + e.what_without_backtrace()));
  }
}

Result<ProfileReport> profileModel(const Model& model, costmodel::CostDatabase& db, const ProfileOptions& options,
                                   ProgressSink* progress, const CancellationToken* cancel) {
  if (options.threads > 0) at::set_num_threads(options.threads);
  const auto started = Clock::now();
  auto name = deviceName(options.device);
  if (!name) return fail(name.error());
  ProfileReport report;
  report.deviceName = *name;
  const std::int64_t seq = options.seqLen > 0 ? options.seqLen : model.defaultSeqLen();

  // The shapes the cost model will look up, for each tp and micro-batch: ask the evaluator itself.
  ClusterSpec local;
  local.name = "profile";
  local.gpusPerNode = 1;
  local.gpu.name = *name;
  local.gpu.memoryBytes = 1e12;
  local.gpu.peakFlopsPerSecond[options.dtype] = 1e12;
  local.gpu.hbmBytesPerSecond = 1e11;
  local.links.push_back(LinkLevel{"local", LinkKind::kPcie, 1, 1e10, 1e-6, 0, 0, {}});
  local.pcieBytesPerSecond = 1e10;
  auto evaluator = costmodel::Evaluator::create(model, local, seq);
  if (!evaluator) return fail(evaluator.error());
  std::set<costmodel::Evaluator::GemmShape> shapes;
  std::set<costmodel::Evaluator::KernelShape> kernelShapes;
  for (const auto tp : options.tensorParallel) {
    for (const auto mbs : options.microBatches) {
      Plan p;
      p.parallel.tp = tp;
      p.parallel.sequenceParallel = tp > 1;
      p.microBatchSize = mbs;
      p.seqLen = seq;
      p.execution.flashAttention = false;  // measure the unfused attention GEMMs too
      for (const auto& s : evaluator->gemmShapes(p)) shapes.insert(s);
      for (const auto& k : evaluator->kernelShapes(p)) kernelShapes.insert(k);
      p.execution.flashAttention = true;  // and the fused attention kernel
      for (const auto& k : evaluator->kernelShapes(p)) kernelShapes.insert(k);
    }
  }
  report.shapes = static_cast<std::int64_t>(shapes.size());

  std::vector<costmodel::GemmMeasurement> batch;
  std::int64_t done = 0;
  double measuredFlops = 0;
  double measuredSeconds = 0;
  auto flush = [&]() -> Result<void> {
    if (batch.empty()) return {};
    auto written = db.addGemms(*name, batch, deviceFingerprint(options.device));
    batch.clear();
    return written;
  };
  for (const auto& s : shapes) {
    if (cancel && cancel->cancelled()) {
      report.cancelled = true;
      break;
    }
    ++done;
    if (options.resume && db.hasGemm(*name, options.dtype, s.m, s.n, s.k)) {
      ++report.skipped;
      continue;
    }
    auto t = timeGemm(s.m, s.n, s.k, s.count, options.dtype, options.device, options.warmup, options.repetitions);
    if (!t) return fail(t.error());
    batch.push_back({s.m, s.n, s.k, options.dtype, t->median, t->spread, t->repetitions > 0 ? t->repetitions : options.repetitions});
    ++report.measured;
    measuredFlops += 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    measuredSeconds += t->median;
    if (static_cast<int>(batch.size()) >= options.batchRows) {
      if (auto w = flush(); !w) return fail(w.error());
    }
    if (progress) {
      std::ostringstream what;
      what << "GEMM " << s.m << "x" << s.n << "x" << s.k;
      if (s.count > 1) what << " (x" << s.count << ")";
      progress->progress(static_cast<double>(done) / static_cast<double>(shapes.size()), what.str());
    }
  }
  if (auto w = flush(); !w) return fail(w.error());

  // Non-GEMM kernels: forward and backward, one transaction for all.
  std::set<std::string> have;
  if (options.resume) {
    // Keyed by implementation too: a row of another implementation (LibTorch's where colo's kernel now
    // runs) does not stand for this one.
    for (const auto& k : db.kernelsFor(*name)) have.insert(k.op + "|" + toString(k.dtype) + "|" + k.shape + "|" + k.impl);
  }
  std::vector<costmodel::KernelMeasurement> kernels;
  std::int64_t kernelDone = 0;
  for (const auto& k : kernelShapes) {
    ++kernelDone;
    if (cancel && cancel->cancelled()) {
      report.cancelled = true;
      break;
    }
    const std::string shape = costmodel::kernelShape(k.elements, k.width);
    const std::string impl = detail::kernelImplementation(k.key, options.device);
    if (options.resume && have.contains(k.key + ".fwd|" + toString(options.dtype) + "|" + shape + "|" + impl)) {
      ++report.kernelsSkipped;
      continue;
    }
    auto t = detail::timeKernel(k.key, k.elements, k.width, options.dtype, options.device, options.warmup, options.repetitions);
    if (!t) {
      if (t.error().code == ErrorCode::kBadInput) continue;  // a kernel without a LibTorch twin: the roofline stays
      return fail(t.error());
    }
    kernels.push_back({k.key + ".fwd", options.dtype, shape, impl, t->first.median, t->first.spread, t->first.repetitions});
    if (t->second) {
      kernels.push_back({k.key + ".bwd", options.dtype, shape, impl, t->second->median, t->second->spread,
                         t->second->repetitions});
    }
    ++report.kernels;
    if (progress) {
      progress->progress(static_cast<double>(kernelDone) / static_cast<double>(kernelShapes.size()),
                         "kernel " + k.key + " " + shape);
    }
  }
  // The optimizer step: streaming, linear in the parameter count, so three sizes cover every plan.
  for (const std::int64_t params : {std::int64_t{1} << 20, std::int64_t{1} << 22, std::int64_t{1} << 24}) {
    if (report.cancelled || (cancel && cancel->cancelled())) {
      report.cancelled = true;
      break;
    }
    const std::string shape = costmodel::kernelShape(params, 0);
    if (options.resume && have.contains("adam_step.fwd|fp32|" + shape + "|" + detail::adamImplementation(options.device))) {
      ++report.kernelsSkipped;
      continue;
    }
    auto t = detail::timeKernel("adam_step", params, 0, DType::kFp32, options.device, 1, std::max(2, options.repetitions / 2));
    if (!t) return fail(t.error());
    kernels.push_back({"adam_step.fwd", DType::kFp32, shape, detail::adamImplementation(options.device), t->first.median, t->first.spread,
                       t->first.repetitions});
    ++report.kernels;
    if (progress) progress->progress(1.0, "kernel adam_step " + shape);
  }
  if (!kernels.empty()) {
    if (auto w = db.addKernels(*name, kernels, deviceFingerprint(options.device)); !w) return fail(w.error());
  }

  // Host-device copies (the offload path), on a CUDA device only: a CPU has no copy to measure.
  if (options.device.rfind("cuda", 0) == 0 && !report.cancelled) {
    std::vector<costmodel::CopyMeasurement> copies;
    for (const std::string direction : {"h2d", "d2h"}) {
      for (const bool pinned : {true, false}) {
        for (const std::int64_t bytes : {std::int64_t{1} << 16, std::int64_t{1} << 20, std::int64_t{1} << 24, std::int64_t{1} << 28}) {
          auto t = detail::timeCopy(direction, pinned, bytes, options.device, options.warmup, options.repetitions);
          if (!t) return fail(t.error());
          copies.push_back({direction, pinned, bytes, t->median, t->spread, t->repetitions});
          ++report.copies;
        }
      }
    }
    if (auto w = db.addCopies(*name, copies, deviceFingerprint(options.device)); !w) return fail(w.error());
  }
  (void)measuredFlops;
  (void)measuredSeconds;
  report.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (progress) progress->progress(1.0, "done");
  return report;
}

}  // namespace colo::profiler
