// colo.plan/1 documents (colo-plan evaluate --plan FILE, colo-run): load, then evaluate.
#include "colo/core/plan.h"
#include "colo/costmodel/evaluator.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file = "plan.json";
  auto json = colo::parseJson(colo::fuzz::text(data, size), file);
  if (!json) {
    colo::fuzz::requireNamedUserError(json.error(), file);
    return 0;
  }
  auto plan = colo::planFromJson(*json, file);
  if (!plan) {
    colo::fuzz::requireNamedUserError(plan.error(), file);
    return 0;
  }
  (void)colo::costmodel::evaluatePlan(*plan);
  return 0;
}
