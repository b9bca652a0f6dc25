#include "inputs.h"

#include <unistd.h>

#include <filesystem>

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

Result<void> checkOutputPath(const Args& args, const std::string& option) {
  const auto file = args.value(option);
  if (!file) return {};
  namespace fs = std::filesystem;
  const fs::path path(*file);
  const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    return fail(Error::badInput("--" + option + " " + *file + ": the folder " + folder.string() + " does not exist"));
  }
  if (fs::is_directory(path, ec)) return fail(Error::badInput("--" + option + " " + *file + ": is a folder, not a file"));
  if (::access(folder.c_str(), W_OK) != 0) {
    return fail(Error::badInput("--" + option + " " + *file + ": the folder " + folder.string() + " is not writable"));
  }
  return {};
}

}  // namespace colo::app
