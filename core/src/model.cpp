#include "colo/core/model.h"

#include <algorithm>
#include <cstdio>

#include "colo/core/cluster.h"
#include "colo/core/hf_config.h"

namespace colo {

std::string Model::name() const { return spec ? spec->name : graph->info().name; }

std::int64_t Model::numLayers() const { return spec ? spec->numLayers : graph->info().numLayers; }

std::int64_t Model::defaultSeqLen() const { return spec ? spec->defaultSeqLen() : graph->info().seqLen; }

Result<void> Model::checkExpand(const GraphOptions& options) const {
  if (spec) {
    if (auto ok = checkGraphOptions(*spec, options); !ok) return fail(ok.error());
    return {};
  }
  const GraphInfo& info = graph->info();
  if (options.seqLen > 0 && options.seqLen != info.seqLen) {
    return fail(Error::badInput("the op graph " + info.name + " was recorded at sequence length " +
                                    std::to_string(info.seqLen) + "; it cannot be re-expanded to " +
                                    std::to_string(options.seqLen),
                                file));
  }
  if (options.batch == info.batch) return {};
  const double factor = static_cast<double>(options.batch) / static_cast<double>(info.batch);
  for (std::size_t v = 0; v < graph->size(); ++v) {
    const Op& op = graph->op(v);
    if (static_cast<double>(std::max({op.bytesRead, op.bytesWritten, op.savedBytes})) * factor > 4.0e18) {
      return fail(Error::badInput("batch " + std::to_string(options.batch) + " is too large to describe (op \"" +
                                      op.name + "\" would exceed 2^61 bytes)",
                                  file));
    }
  }
  return {};
}

Result<OpGraph> Model::expand(const GraphOptions& options) const {
  if (spec) return buildOpGraph(*spec, options);
  if (auto ok = checkExpand(options); !ok) return fail(ok.error());
  const GraphInfo& info = graph->info();
  if (options.batch == info.batch) return *graph;
  // Every op's work is linear in the batch; parameters are not.
  OpGraph scaled(info);
  scaled.info().batch = options.batch;
  const double factor = static_cast<double>(options.batch) / static_cast<double>(info.batch);
  auto scale = [&](std::int64_t v) { return static_cast<std::int64_t>(static_cast<double>(v) * factor); };
  for (std::size_t v = 0; v < graph->size(); ++v) {
    Op op = graph->op(v);
    op.flopsFwd *= factor;
    op.flopsBwd *= factor;
    op.bytesRead = scale(op.bytesRead);
    op.bytesWritten = scale(op.bytesWritten);
    op.savedBytes = scale(op.savedBytes);
    scaled.addOp(std::move(op));
  }
  for (const auto& [from, to] : graph->edges()) scaled.addEdge(from, to);
  return scaled;
}

Json Model::toJson() const { return spec ? modelSpecToJson(*spec) : opGraphToJson(*graph); }

Result<Model> modelFromJson(const Json& document, const std::string& file) {
  if (!document.is_object()) {
    return fail(Error::badInput("expected a JSON object at the top level, got " + describeJsonValue(document), file));
  }
  Model model;
  model.file = file;
  if (!document.contains("format") && document.contains("model_type")) {
    auto spec = modelSpecFromHfConfig(document, file);
    if (!spec) return fail(spec.error());
    model.source = ModelSource::kHfConfig;
    model.spec = std::move(*spec);
    return model;
  }
  if (!document.contains("format")) {
    return fail(Error::badInput("not a model file: no \"format\" (colo.model/1, colo.opgraph/1) and no "
                                "\"model_type\" (Hugging Face config.json)",
                                file));
  }
  auto tag = readFormatTag(document, file);
  if (!tag) return fail(tag.error());
  if (tag->kind != "model" && tag->kind != "opgraph") {
    return fail(Error::badInput("expected a model (colo.model/1 or colo.opgraph/1), got a colo." + tag->kind +
                                    " document",
                                file, "/format"));
  }
  if (auto format = requireFormat(document, file, tag->kind, 1); !format) return fail(format.error());
  if (tag->kind == "model") {
    auto spec = modelSpecFromJson(document, file);
    if (!spec) return fail(spec.error());
    model.source = ModelSource::kSpec;
    model.spec = std::move(*spec);
  } else {
    auto graph = opGraphFromJson(document, file);
    if (!graph) return fail(graph.error());
    model.source = ModelSource::kOpGraph;
    model.graph = std::move(*graph);
  }
  return model;
}

Result<Model> loadModel(const std::string& file) {
  auto document = readJsonFile(file);
  if (!document) return fail(document.error());
  return modelFromJson(*document, file);
}

Result<ClusterSpec> loadCluster(const std::string& file) {
  auto document = readJsonFile(file);
  if (!document) return fail(document.error());
  if (auto format = requireFormat(*document, file, "cluster", 1); !format) return fail(format.error());
  return clusterFromJson(*document, file);
}

std::string contentHash(const Json& document) {
  std::uint64_t hash = 1469598103934665603ULL;
  for (const unsigned char c : document.dump()) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(hash));
  return out;
}

}  // namespace colo
