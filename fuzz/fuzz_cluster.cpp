// colo.cluster/1 documents (colo-plan --cluster FILE), then scaled as --gpus does.
#include "colo/core/cluster.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file = "cluster.json";
  auto json = colo::parseJson(colo::fuzz::text(data, size), file);
  if (!json) {
    colo::fuzz::requireNamedUserError(json.error(), file);
    return 0;
  }
  auto cluster = colo::clusterFromJson(*json, file);
  if (!cluster) {
    colo::fuzz::requireNamedUserError(cluster.error(), file);
    return 0;
  }
  (void)colo::scaleCluster(*cluster, 2 * cluster->totalGpus());
  (void)cluster->levelBetween(0, cluster->totalGpus() - 1);
  return 0;
}
