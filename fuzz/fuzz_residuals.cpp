// colo.residuals/1 documents (data/validation/residuals.json, read for the error bands), then the bands
// of a plan-like set of features; and the same bytes as a colo.calibration/1 (--calibration FILE).
#include "colo/costmodel/error_band.h"
#include "colo/costmodel/run_calibration.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file = "residuals.json";
  auto json = colo::parseJson(colo::fuzz::text(data, size), file);
  if (!json) {
    colo::fuzz::requireNamedUserError(json.error(), file);
    return 0;
  }
  if (auto calibration = colo::costmodel::RunCalibration::fromJson(*json, file); !calibration) {
    colo::fuzz::requireNamedUserError(calibration.error(), file);
  }
  auto table = colo::costmodel::ResidualTable::fromJson(*json, file);
  if (!table) {
    colo::fuzz::requireNamedUserError(table.error(), file);
    return 0;
  }
  colo::costmodel::RunFeatures features;
  features.gpuGeneration = "A100";
  features.tp = true;
  features.flopsPerMicroBatch = 1e13;
  const auto bands = table->bandsFor(features);
  if (bands.time && (bands.time->low > bands.time->high || bands.time->runs < 5)) std::abort();
  return 0;
}
