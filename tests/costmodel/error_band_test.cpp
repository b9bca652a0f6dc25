#include "colo/costmodel/error_band.h"

#include <cmath>

#include <gtest/gtest.h>

#include "colo/core/library.h"
#include "validation_residuals.h"

namespace colo::costmodel {
namespace {

Residual run(const std::string& id, const std::string& gpu, bool tp, double flops, double timeError,
             std::optional<double> memoryError = std::nullopt) {
  Residual r;
  r.id = id;
  r.features.gpuGeneration = gpu;
  r.features.tp = tp;
  r.features.flopsPerMicroBatch = flops;
  r.timeError = timeError;
  r.memoryError = memoryError;
  return r;
}

TEST(ErrorBands, ComeFromTheMostSimilarRuns) {
  // 25 H100 tensor-parallel runs with errors 0..+24%, and 10 A100 runs 40% slower than predicted: an
  // H100 tp plan's band comes from the 20 H100 runs of the closest work, not from the A100 ones.
  std::vector<Residual> rows;
  for (int i = 0; i < 25; ++i) rows.push_back(run("h" + std::to_string(i), "H100", true, 1e12 * (1 + i), 0.01 * i));
  for (int i = 0; i < 10; ++i) rows.push_back(run("a" + std::to_string(i), "A100", true, 1e12, 0.40, 0.05));
  const ResidualTable table(rows);
  RunFeatures plan;
  plan.gpuGeneration = "H100";
  plan.tp = true;
  plan.flopsPerMicroBatch = 1e12;
  const PredictionBands b = table.bandsFor(plan);
  ASSERT_TRUE(b.time);
  EXPECT_EQ(b.time->runs, 20u);
  EXPECT_NEAR(b.time->low, 0.019, 1e-9);   // the 10th percentile of 0.00..0.19
  EXPECT_NEAR(b.time->high, 0.171, 1e-9);  // the 90th
  EXPECT_EQ(b.time->describe(), "+2%..+17%, 20 similar validated runs");
  // Memory: only the A100 runs measured it, two GPU generations away but within reach.
  ASSERT_TRUE(b.memory);
  EXPECT_EQ(b.memory->runs, 10u);
  EXPECT_NEAR(b.memory->high, 0.05, 1e-12);
  EXPECT_EQ(b.memory->describe(), "+5%..+5%, 10 similar validated runs on other GPUs");
  // Nothing alike: no band rather than a made-up one.
  RunFeatures other = plan;
  other.gpuGeneration = "other";
  other.flopsPerMicroBatch = 1e20;
  EXPECT_FALSE(table.bandsFor(other).time);
}

TEST(ErrorBands, AFitWithinTheMemoryBandIsAtRisk) {
  Evaluation ev;
  ev.gpuMemoryBytes = 80e9;
  ev.peakMemoryBytes = 76e9;
  ev.fits = true;
  PredictionBands b;
  b.memory = ErrorBand{-0.02, 0.03, 10, 0.5};
  EXPECT_FALSE(b.memoryAtRisk(ev));  // 78.3 GB at the top of the band
  b.memory->high = 0.08;
  EXPECT_TRUE(b.memoryAtRisk(ev));  // 82.1 GB
  ev.fits = false;
  EXPECT_FALSE(b.memoryAtRisk(ev));  // it does not fit at all: not "at risk"
}

TEST(ErrorBands, TheTableRoundTripsAndABadOneIsNamed) {
  const ResidualTable table({run("x", "A100", false, 2e12, -0.1, 0.02)});
  auto back = ResidualTable::fromJson(table.toJson(), "r.json");
  ASSERT_TRUE(back) << back.error().toString();
  ASSERT_EQ(back->rows().size(), 1u);
  EXPECT_EQ(back->rows()[0].features, table.rows()[0].features);
  EXPECT_EQ(back->rows()[0].memoryError, 0.02);
  Json bad = table.toJson();
  bad["runs"][0]["time_error"] = "fast";
  auto e = ResidualTable::fromJson(bad, "r.json");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().toString(), "r.json: /runs/0/time_error: must be a finite number");
  bad = table.toJson();
  bad["runs"][0]["time_error"] = -1.5;
  EXPECT_FALSE(ResidualTable::fromJson(bad, "r.json"));
  bad = table.toJson();
  bad["format"] = "colo.plan/1";
  EXPECT_FALSE(ResidualTable::fromJson(bad, "r.json"));
}

TEST(ErrorBands, TheShippedTableIsTheDevelopmentSetsAsTheCostModelPredictsThemNow) {
  // data/validation/residuals.json must follow every change of the cost model: regenerate it with
  //   build/bin/colo-validate --residuals data/validation/residuals.json
  const ResidualTable* shipped = shippedResiduals();
  ASSERT_NE(shipped, nullptr) << "data/validation/residuals.json is missing or unreadable";
  const std::string root = dataDirectory() + "/validation";
  auto now = validation::residualsOfFolders({root + "/published", root + "/vtrain_single"});
  ASSERT_TRUE(now) << now.error().toString();
  ASSERT_EQ(now->rows().size(), shipped->rows().size()) << "regenerate data/validation/residuals.json";
  EXPECT_GT(now->rows().size(), 1500u);
  for (std::size_t i = 0; i < now->rows().size(); ++i) {
    const Residual& a = now->rows()[i];
    const Residual& b = shipped->rows()[i];
    ASSERT_EQ(a.id, b.id) << "regenerate data/validation/residuals.json";
    EXPECT_NEAR(a.timeError, b.timeError, 1e-9) << a.id << ": regenerate data/validation/residuals.json";
    EXPECT_EQ(a.memoryError.has_value(), b.memoryError.has_value()) << a.id;
    if (a.memoryError && b.memoryError) {
      EXPECT_NEAR(*a.memoryError, *b.memoryError, 1e-9) << a.id;
    }
    EXPECT_NEAR(a.features.flopsPerMicroBatch / b.features.flopsPerMicroBatch, 1.0, 1e-9) << a.id;
  }
}

}  // namespace
}  // namespace colo::costmodel
