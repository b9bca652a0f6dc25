// Error bands from the residuals of validated runs (docs/costmodel.md, "Error bands").
#include "colo/costmodel/error_band.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "colo/core/library.h"
#include "colo/core/units.h"

namespace colo::costmodel {
namespace {

constexpr std::size_t kTimeNeighbours = 20;
constexpr std::size_t kMemoryNeighbours = 10;
constexpr std::size_t kLeastRuns = 5;
constexpr double kFarthest = 3.0;  // beyond this a run says little about the plan

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

std::string generationOf(const std::string& gpu) {
  if (contains(gpu, "V100")) return "V100";
  if (contains(gpu, "A100") || contains(gpu, "A800")) return "A100";
  if (contains(gpu, "H100") || contains(gpu, "H200") || contains(gpu, "H800") || contains(gpu, "GH200")) return "H100";
  if (contains(gpu, "B200") || contains(gpu, "B100") || contains(gpu, "B300")) return "B200";
  return "other";
}

// The p-quantile (0..1) of sorted values, linearly interpolated.
double quantile(const std::vector<double>& sorted, double p) {
  const double at = p * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(at));
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (at - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

// The band of the `limit` runs least unlike `features` that `errorOf` gives a value for.
template <class ErrorOf>
std::optional<ErrorBand> bandOf(const std::vector<Residual>& rows, const RunFeatures& features, std::size_t limit,
                                ErrorOf errorOf) {
  std::vector<std::pair<double, double>> near;  // (dissimilarity, error)
  for (const auto& r : rows) {
    const std::optional<double> e = errorOf(r);
    if (!e) continue;
    const double d = dissimilarity(features, r.features);
    if (d <= kFarthest) near.emplace_back(d, *e);
  }
  if (near.size() < kLeastRuns) return std::nullopt;
  std::sort(near.begin(), near.end());
  near.resize(std::min(near.size(), limit));
  std::vector<double> errors;
  double distance = 0;
  for (const auto& [d, e] : near) {
    errors.push_back(e);
    distance += d;
  }
  std::sort(errors.begin(), errors.end());
  return ErrorBand{quantile(errors, 0.1), quantile(errors, 0.9), errors.size(), distance / static_cast<double>(near.size())};
}

std::string percent(double fraction) {
  const double p = std::round(100 * fraction);
  return (p > 0 ? "+" : "") + formatFixed(p == 0 ? 0.0 : p, 0) + "%";
}

Error bad(const std::string& file, const std::string& path, const std::string& message) {
  return Error::badInput(message, file, path);
}

}  // namespace

RunFeatures featuresOf(const Plan& plan, const Evaluation& evaluation) {
  RunFeatures f;
  f.gpuGeneration = generationOf(plan.cluster.gpu.name);
  const auto& p = plan.parallel;
  f.tp = p.tp > 1;
  f.pp = p.pp > 1;
  f.cp = p.cp > 1;
  f.moe = plan.model.spec ? plan.model.spec->moe.enabled() : p.ep > 1;
  f.sharded = plan.zeroStage >= 3 && p.dp * p.cp > 1;
  const double flopsPerGpuPerStep = evaluation.modelTflopsPerGpu * 1e12 * evaluation.stepSeconds;
  f.flopsPerMicroBatch = flopsPerGpuPerStep / static_cast<double>(std::max<std::int64_t>(1, evaluation.microBatches));
  return f;
}

double dissimilarity(const RunFeatures& a, const RunFeatures& b) {
  double d = a.gpuGeneration == b.gpuGeneration ? 0.0 : 2.0;
  for (const auto& [x, y] : {std::pair{a.tp, b.tp}, {a.pp, b.pp}, {a.cp, b.cp}, {a.moe, b.moe}, {a.sharded, b.sharded}}) {
    if (x != y) d += 0.5;
  }
  if (a.flopsPerMicroBatch > 0 && b.flopsPerMicroBatch > 0) d += std::abs(std::log10(a.flopsPerMicroBatch / b.flopsPerMicroBatch));
  return d;
}

std::string ErrorBand::describe() const {
  // Runs two or more apart on average differ in GPU generation (or in several traits): say so.
  return percent(low) + ".." + percent(high) + ", " + std::to_string(runs) + " similar validated run" + (runs == 1 ? "" : "s") +
         (meanDissimilarity >= 2.0 ? " on other GPUs" : "");
}

bool PredictionBands::memoryAtRisk(const Evaluation& evaluation) const {
  return evaluation.fits && memory && evaluation.peakMemoryBytes * (1.0 + memory->high) > evaluation.gpuMemoryBytes;
}

PredictionBands ResidualTable::bandsFor(const RunFeatures& features) const {
  PredictionBands b;
  b.time = bandOf(m_rows, features, kTimeNeighbours, [](const Residual& r) { return std::optional<double>(r.timeError); });
  b.memory = bandOf(m_rows, features, kMemoryNeighbours, [](const Residual& r) { return r.memoryError; });
  return b;
}

Json ResidualTable::toJson() const {
  Json runs = Json::array();
  for (const auto& r : m_rows) {
    Json j = {{"id", r.id},
              {"gpu_generation", r.features.gpuGeneration},
              {"tp", r.features.tp},
              {"pp", r.features.pp},
              {"cp", r.features.cp},
              {"moe", r.features.moe},
              {"sharded", r.features.sharded},
              {"flops_per_micro_batch", r.features.flopsPerMicroBatch},
              {"time_error", r.timeError}};
    if (r.memoryError) j["memory_error"] = *r.memoryError;
    runs.push_back(std::move(j));
  }
  return {{"format", "colo.residuals/1"},
          {"about", "measured / predicted - 1 of each validated run (colo-validate --residuals); docs/costmodel.md, \"Error bands\""},
          {"runs", std::move(runs)}};
}

Result<ResidualTable> ResidualTable::fromJson(const Json& doc, const std::string& file) {
  if (!doc.is_object() || doc.value("format", Json()) != Json("colo.residuals/1")) {
    return fail(bad(file, "/format", "expected \"colo.residuals/1\""));
  }
  if (!doc.contains("runs") || !doc["runs"].is_array()) return fail(bad(file, "/runs", "must be an array"));
  std::vector<Residual> rows;
  for (std::size_t i = 0; i < doc["runs"].size(); ++i) {
    const Json& j = doc["runs"][i];
    const std::string at = "/runs/" + std::to_string(i);
    if (!j.is_object()) return fail(bad(file, at, "must be an object"));
    // A finite number, or an error naming the field (a Result<std::optional<double>> is avoided: libc++
    // 16's std::expected loses its flag in a trivially copyable value's tail padding, LLVM issue 70494).
    auto number = [&](const char* key) -> Result<double> {
      if (!j.contains(key)) return fail(bad(file, at + "/" + key, "is missing"));
      if (!j[key].is_number() || !std::isfinite(j[key].get<double>())) return fail(bad(file, at + "/" + key, "must be a finite number"));
      return j[key].get<double>();
    };
    auto flag = [&](const char* key) -> Result<bool> {
      if (!j.contains(key) || !j[key].is_boolean()) return fail(bad(file, at + "/" + key, "must be true or false"));
      return j[key].get<bool>();
    };
    Residual r;
    if (!j.contains("id") || !j["id"].is_string()) return fail(bad(file, at + "/id", "must be a string"));
    r.id = j["id"].get<std::string>();
    if (!j.contains("gpu_generation") || !j["gpu_generation"].is_string()) {
      return fail(bad(file, at + "/gpu_generation", "must be a string"));
    }
    r.features.gpuGeneration = j["gpu_generation"].get<std::string>();
    for (auto [key, field] : {std::pair{"tp", &r.features.tp}, {"pp", &r.features.pp}, {"cp", &r.features.cp},
                              {"moe", &r.features.moe}, {"sharded", &r.features.sharded}}) {
      auto v = flag(key);
      if (!v) return fail(v.error());
      *field = *v;
    }
    auto work = number("flops_per_micro_batch");
    if (!work) return fail(work.error());
    if (*work < 0) return fail(bad(file, at + "/flops_per_micro_batch", "must not be negative"));
    r.features.flopsPerMicroBatch = *work;
    auto time = number("time_error");
    if (!time) return fail(time.error());
    r.timeError = *time;
    if (j.contains("memory_error")) {
      auto memory = number("memory_error");
      if (!memory) return fail(memory.error());
      r.memoryError = *memory;
    }
    if (r.timeError <= -1 || (r.memoryError && *r.memoryError <= -1)) {
      return fail(bad(file, at, "an error of measured / predicted - 1 must be above -1"));
    }
    rows.push_back(std::move(r));
  }
  return ResidualTable(std::move(rows));
}

Result<ResidualTable> ResidualTable::load(const std::string& file) {
  auto doc = readJsonFile(file);
  if (!doc) return fail(doc.error());
  return fromJson(*doc, file);
}

const ResidualTable* shippedResiduals() {
  static const std::optional<ResidualTable> table = []() -> std::optional<ResidualTable> {
    const std::string file = (std::filesystem::path(dataDirectory()) / "validation" / "residuals.json").string();
    auto loaded = ResidualTable::load(file);
    if (!loaded) return std::nullopt;
    return std::move(*loaded);
  }();
  return table ? &*table : nullptr;
}

PredictionBands bandsOf(const Plan& plan, const Evaluation& evaluation) {
  const ResidualTable* table = shippedResiduals();
  return table ? table->bandsFor(featuresOf(plan, evaluation)) : PredictionBands{};
}

Json bandsToJson(const PredictionBands& bands, const Evaluation& evaluation) {
  Json j = Json::object();
  auto put = [&](const char* key, const std::optional<ErrorBand>& b) {
    if (b) j[key] = {{"low", b->low}, {"high", b->high}, {"runs", b->runs}};
  };
  put("step", bands.time);
  put("memory", bands.memory);
  j["memory_at_risk"] = bands.memoryAtRisk(evaluation);
  return j;
}

}  // namespace colo::costmodel
