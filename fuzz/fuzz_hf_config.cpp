// Hugging Face config.json (colo-plan --model path/config.json): map onto a spec, then build its graph.
#include "colo/core/hf_config.h"
#include "colo/core/op_graph.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file = "config.json";
  auto json = colo::parseJson(colo::fuzz::text(data, size), file);
  if (!json) {
    colo::fuzz::requireNamedUserError(json.error(), file);
    return 0;
  }
  auto spec = colo::modelSpecFromHfConfig(*json, file);
  if (!spec) {
    colo::fuzz::requireNamedUserError(spec.error(), file);
    return 0;
  }
  (void)colo::buildOpGraph(*spec);
  return 0;
}
