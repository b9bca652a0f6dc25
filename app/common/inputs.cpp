#include "inputs.h"

#include "colo/core/library.h"

namespace colo::app {

Result<std::pair<Model, ClusterSpec>> loadModelAndCluster(const Args& args, bool applyGpus) {
  const auto modelName = args.value("model");
  const auto clusterName = args.value("cluster");
  if (!modelName) return fail(Error::badInput("missing --model (a library name or a file)"));
  if (!clusterName) return fail(Error::badInput("missing --cluster (a library name or a file)"));
  auto modelFile = resolveLibraryFile(LibraryKind::kModels, *modelName);
  if (!modelFile) return fail(modelFile.error());
  auto model = loadModel(*modelFile);
  if (!model) return fail(model.error());
  auto clusterFile = resolveLibraryFile(LibraryKind::kClusters, *clusterName);
  if (!clusterFile) return fail(clusterFile.error());
  auto cluster = loadCluster(*clusterFile);
  if (!cluster) return fail(cluster.error());
  if (applyGpus && args.has("gpus")) {
    auto gpus = args.positiveInteger("gpus", 0);
    if (!gpus) return fail(gpus.error());
    auto scaled = scaleCluster(*cluster, *gpus);
    if (!scaled) return fail(scaled.error());
    cluster = std::move(*scaled);
  }
  return std::pair{std::move(*model), std::move(*cluster)};
}

}  // namespace colo::app
