// Calibration from the user's own runs (docs/costmodel.md, "Calibration from your runs").
#include "colo/costmodel/run_calibration.h"

#include <algorithm>
#include <cmath>

namespace colo::costmodel {
namespace {

constexpr double kLeast = 0.2;
constexpr double kMost = 5.0;

double clampScale(double s) { return std::clamp(s, kLeast, kMost); }

// The one scale s minimising sum((s * predicted / measured - 1)^2).
double commonScale(const std::vector<RunObservation>& runs) {
  double num = 0, den = 0;
  for (const auto& r : runs) {
    const double x = (r.predictedComputeSeconds + r.predictedOtherSeconds) / r.measuredStepSeconds;
    num += x;
    den += x * x;
  }
  return den > 0 ? clampScale(num / den) : 1.0;
}

Error bad(const std::string& file, const std::string& path, const std::string& message) {
  return Error::badInput(message, file, path);
}

}  // namespace

RunObservation observe(const std::string& id, const Evaluation& ev, double measuredStepSeconds) {
  RunObservation o;
  o.id = id;
  o.predictedComputeSeconds = ev.time.compute + ev.time.recompute;
  o.predictedOtherSeconds = std::max(0.0, ev.stepSeconds - o.predictedComputeSeconds);
  o.measuredStepSeconds = measuredStepSeconds;
  return o;
}

void RunCalibration::apply(Evaluation& ev) const {
  TimeBreakdown& t = ev.time;
  t.compute *= computeScale;
  t.recompute *= computeScale;
  for (double* part : {&t.tpComm, &t.cpComm, &t.epComm, &t.ppComm, &t.dpComm, &t.bubble, &t.gradAccum, &t.optimizer}) {
    *part *= otherScale;
  }
  const double step = t.compute + t.recompute + t.tpComm + t.cpComm + t.epComm + t.ppComm + t.dpComm + t.bubble +
                      t.gradAccum + t.optimizer;
  const double ratio = ev.stepSeconds > 0 ? step / ev.stepSeconds : 1.0;
  ev.pipelineSeconds *= ratio;
  ev.stepSeconds = step;
  if (ratio > 0) {
    ev.tokensPerSecond /= ratio;
    ev.modelTflopsPerGpu /= ratio;
    ev.hardwareTflopsPerGpu /= ratio;
    ev.mfu /= ratio;
  }
  ev.bubbleFraction = step > 0 ? t.bubble / step : 0.0;
  ev.peakMemoryBytes = 0;
  for (auto& s : ev.stages) {
    MemoryBreakdown& m = s.memory;
    for (double* part : {&m.weights, &m.gradients, &m.optimizer, &m.activations, &m.buffers, &m.allocator, &m.context}) {
      *part *= memoryScale;
    }
    ev.peakMemoryBytes = std::max(ev.peakMemoryBytes, m.total());
  }
  ev.fits = ev.peakMemoryBytes <= ev.gpuMemoryBytes && ev.fitsHost;
}

Json RunCalibration::toJson() const {
  return {{"format", "colo.calibration/1"},
          {"gpu", gpu},
          {"compute_scale", computeScale},
          {"other_scale", otherScale},
          {"memory_scale", memoryScale},
          {"runs", runs},
          {"memory_runs", memoryRuns}};
}

Result<RunCalibration> RunCalibration::fromJson(const Json& doc, const std::string& file) {
  if (!doc.is_object() || doc.value("format", Json()) != Json("colo.calibration/1")) {
    return fail(bad(file, "/format", "expected \"colo.calibration/1\""));
  }
  RunCalibration c;
  if (!doc.contains("gpu") || !doc["gpu"].is_string()) return fail(bad(file, "/gpu", "must be a string"));
  c.gpu = doc["gpu"].get<std::string>();
  for (auto [key, field] : {std::pair{"compute_scale", &c.computeScale}, {"other_scale", &c.otherScale},
                            {"memory_scale", &c.memoryScale}}) {
    if (!doc.contains(key) || !doc[key].is_number()) return fail(bad(file, std::string("/") + key, "must be a number"));
    const double v = doc[key].get<double>();
    if (!(v >= kLeast && v <= kMost)) {
      return fail(bad(file, std::string("/") + key, "must be between 0.2 and 5, got " + std::to_string(v)));
    }
    *field = v;
  }
  for (auto [key, field] : {std::pair{"runs", &c.runs}, {"memory_runs", &c.memoryRuns}}) {
    if (!doc.contains(key) || !doc[key].is_number_unsigned() || doc[key].get<std::uint64_t>() > 1000000000) {
      return fail(bad(file, std::string("/") + key, "must be a count of runs"));
    }
    *field = static_cast<std::size_t>(doc[key].get<std::uint64_t>());
  }
  return c;
}

Result<RunCalibration> RunCalibration::load(const std::string& file) {
  auto doc = readJsonFile(file);
  if (!doc) return fail(doc.error());
  return fromJson(*doc, file);
}

Result<RunCalibration> fitRunCalibration(const std::vector<RunObservation>& all, const std::string& gpu) {
  std::vector<RunObservation> runs;
  for (const auto& r : all) {
    if (r.measuredStepSeconds > 0 && r.predictedComputeSeconds + r.predictedOtherSeconds > 0) runs.push_back(r);
  }
  if (runs.empty()) return fail(Error::badInput("no run with a measured and a predicted step time to calibrate on"));
  RunCalibration c;
  c.gpu = gpu;
  c.runs = runs.size();
  c.computeScale = c.otherScale = commonScale(runs);
  if (runs.size() >= 3) {
    // Normal equations of min sum((a x_i + b y_i - 1)^2), x = compute / measured, y = other / measured.
    double xx = 0, xy = 0, yy = 0, x1 = 0, y1 = 0;
    for (const auto& r : runs) {
      const double x = r.predictedComputeSeconds / r.measuredStepSeconds;
      const double y = r.predictedOtherSeconds / r.measuredStepSeconds;
      xx += x * x;
      xy += x * y;
      yy += y * y;
      x1 += x;
      y1 += y;
    }
    const double det = xx * yy - xy * xy;
    // The runs tell compute from the rest only when their mixes differ (det well away from 0).
    if (det > 1e-3 * xx * yy) {
      const double a = (x1 * yy - y1 * xy) / det;
      const double b = (y1 * xx - x1 * xy) / det;
      if (a >= kLeast && a <= kMost && b >= kLeast && b <= kMost) {
        c.computeScale = a;
        c.otherScale = b;
      }
    }
  }
  double ratio = 0;
  for (const auto& r : runs) {
    if (r.measuredMemoryBytes && r.predictedMemoryBytes && *r.predictedMemoryBytes > 0) {
      ratio += *r.measuredMemoryBytes / *r.predictedMemoryBytes;
      ++c.memoryRuns;
    }
  }
  if (c.memoryRuns > 0) c.memoryScale = clampScale(ratio / static_cast<double>(c.memoryRuns));
  return c;
}

CrossValidation leaveOneOut(const std::vector<RunObservation>& runs) {
  CrossValidation cv;
  if (runs.size() < 2) return cv;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunObservation& r = runs[i];
    if (r.measuredStepSeconds <= 0) continue;
    std::vector<RunObservation> others;
    for (std::size_t j = 0; j < runs.size(); ++j) {
      if (j != i) others.push_back(runs[j]);
    }
    auto fitted = fitRunCalibration(others, "");
    if (!fitted) continue;
    const double predicted = r.predictedComputeSeconds + r.predictedOtherSeconds;
    cv.before.push_back(std::abs(predicted - r.measuredStepSeconds) / r.measuredStepSeconds);
    cv.after.push_back(std::abs(fitted->step(r) - r.measuredStepSeconds) / r.measuredStepSeconds);
  }
  return cv;
}

}  // namespace colo::costmodel
