// colo.model/1 and colo.opgraph/1 documents (colo-plan --model FILE): load, then expand to an op graph.
#include "colo/core/model.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file = "model.json";
  auto json = colo::parseJson(colo::fuzz::text(data, size), file);
  if (!json) {
    colo::fuzz::requireNamedUserError(json.error(), file);
    return 0;
  }
  auto model = colo::modelFromJson(*json, file);
  if (!model) {
    colo::fuzz::requireNamedUserError(model.error(), file);
    return 0;
  }
  auto graph = model->expand(colo::GraphOptions{});
  (void)graph;  // a valid model may still refuse a sequence length; it must not crash
  return 0;
}
