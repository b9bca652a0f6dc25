#pragma once
/// \file
/// How far off a prediction is likely to be: the errors colo made on validated runs that resemble the
/// plan (same GPU generation, similar parallel regime, similar work per GPU), read from a residual
/// table that `colo-validate --residuals` writes from the development runs (docs/costmodel.md,
/// "Error bands").

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/plan.h"
#include "colo/costmodel/evaluator.h"

namespace colo::costmodel {

/// What makes a validated run comparable with a plan.
struct RunFeatures {
  std::string gpuGeneration;  ///< "V100", "A100", "H100" (H100, H200, H800, GH200), "B200" (Blackwell), else "other"
  bool tp = false;            ///< tensor parallelism (degree > 1)
  bool pp = false;            ///< pipeline parallelism
  bool cp = false;            ///< context parallelism
  bool moe = false;           ///< mixture of experts (routed experts, any ep)
  bool sharded = false;       ///< ZeRO-3 / FSDP: weights gathered per layer
  double flopsPerMicroBatch = 0;  ///< model FLOPs one GPU runs per micro-batch (forward and backward)
  friend bool operator==(const RunFeatures&, const RunFeatures&) = default;
};

/// The features of `plan` as `evaluation` predicts it.
[[nodiscard]] RunFeatures featuresOf(const Plan& plan, const Evaluation& evaluation);

/// How unlike two runs are: 2 for another GPU generation, 0.5 for each regime trait one has and the
/// other lacks, plus the decades between their work per micro-batch. 0: alike.
[[nodiscard]] double dissimilarity(const RunFeatures& a, const RunFeatures& b);

/// One validated run: measured / predicted - 1, for its step and (when measured) its memory.
struct Residual {
  std::string id;
  RunFeatures features;
  double timeError = 0;
  std::optional<double> memoryError;
};

/// The likely range of the measured value around a prediction: it lies within
/// prediction * (1 + low) .. prediction * (1 + high) for the middle 80% of the similar runs.
struct ErrorBand {
  double low = 0;
  double high = 0;
  std::size_t runs = 0;      ///< similar validated runs the band comes from
  double meanDissimilarity = 0;  ///< how alike they are (0: the same regime and work)
  /// "-4%..+7%, 23 similar validated runs" (+ " on other GPUs" when they are, on average, that far).
  [[nodiscard]] std::string describe() const;
};

/// The bands of one prediction; empty when no validated run resembles it closely enough.
struct PredictionBands {
  std::optional<ErrorBand> time;
  std::optional<ErrorBand> memory;
  /// The plan fits by its prediction, but not at the upper end of its memory band.
  [[nodiscard]] bool memoryAtRisk(const Evaluation& evaluation) const;
};

/// The residuals of validated runs, and the bands they give a new prediction.
class ResidualTable {
 public:
  ResidualTable() = default;
  explicit ResidualTable(std::vector<Residual> rows) : m_rows(std::move(rows)) {}

  /// Reads a `colo.residuals/1` document. Errors: kBadInput naming `file` and the field.
  [[nodiscard]] static Result<ResidualTable> fromJson(const Json& document, const std::string& file);
  /// Reads `file` (JSON). Errors: kIo, kBadInput.
  [[nodiscard]] static Result<ResidualTable> load(const std::string& file);
  [[nodiscard]] Json toJson() const;

  /// Time: the 20 runs least unlike `features` (among those within a dissimilarity of 3); memory: the
  /// 10 such runs that measured it. A band needs at least 5 runs.
  [[nodiscard]] PredictionBands bandsFor(const RunFeatures& features) const;
  [[nodiscard]] const std::vector<Residual>& rows() const { return m_rows; }

 private:
  std::vector<Residual> m_rows;
};

/// The table shipped in the data directory (validation/residuals.json); nullopt when it is missing
/// or unreadable (then predictions carry no band). Read once per process.
[[nodiscard]] const ResidualTable* shippedResiduals();

/// The bands of a prediction from the shipped table (none without one).
[[nodiscard]] PredictionBands bandsOf(const Plan& plan, const Evaluation& evaluation);

/// `{"step": {"low", "high", "runs"}, "memory": {...}, "memory_at_risk"}`, the parts that exist.
[[nodiscard]] Json bandsToJson(const PredictionBands& bands, const Evaluation& evaluation);

}  // namespace colo::costmodel
