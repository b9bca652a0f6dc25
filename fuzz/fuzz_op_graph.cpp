// colo.opgraph/1 documents read directly (no format tag needed), then written back.
#include "colo/core/op_graph.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file = "graph.json";
  auto json = colo::parseJson(colo::fuzz::text(data, size), file);
  if (!json) {
    colo::fuzz::requireNamedUserError(json.error(), file);
    return 0;
  }
  auto graph = colo::opGraphFromJson(*json, file);
  if (!graph) {
    colo::fuzz::requireNamedUserError(graph.error(), file);
    return 0;
  }
  (void)colo::opGraphToJson(*graph).dump();
  (void)graph->totals();
  return 0;
}
