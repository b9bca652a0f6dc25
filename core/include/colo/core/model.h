#pragma once
/// \file
/// Model: whatever a user hands colo as "the model" — a `colo.model/1` spec, a Hugging Face
/// config.json, or a raw `colo.opgraph/1` — and the one entry point that loads any of them.

#include <optional>
#include <string>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/cluster.h"
#include "colo/core/model_spec.h"
#include "colo/core/op_graph.h"

namespace colo {

enum class ModelSource { kSpec, kHfConfig, kOpGraph };

struct Model {
  ModelSource source = ModelSource::kSpec;
  std::string file;               ///< where it was loaded from (empty when built in memory)
  std::optional<ModelSpec> spec;  ///< set for kSpec and kHfConfig
  std::optional<OpGraph> graph;   ///< set for kOpGraph

  [[nodiscard]] std::string name() const;
  [[nodiscard]] std::int64_t numLayers() const;
  /// The sequence length used when none is asked for.
  [[nodiscard]] std::int64_t defaultSeqLen() const;
  /// The op graph at the given sequence length and batch. A raw op graph cannot change its sequence
  /// length (errors: kBadInput naming both lengths); its batch scales linearly.
  [[nodiscard]] Result<OpGraph> expand(const GraphOptions& options) const;
  /// Whether expand() would succeed (the same errors), without building the graph.
  [[nodiscard]] Result<void> checkExpand(const GraphOptions& options) const;
  /// The embeddable document: the spec as `colo.model/1` (an HF config is stored mapped), or the graph.
  [[nodiscard]] Json toJson() const;
};

/// Loads a model file of any supported kind, told apart by `"format"` (colo.model/1,
/// colo.opgraph/1) or `"model_type"` (HF). Errors: kIo, kBadInput naming file, field and value.
[[nodiscard]] Result<Model> loadModel(const std::string& file);
/// The same for an already parsed document; `file` labels errors.
[[nodiscard]] Result<Model> modelFromJson(const Json& document, const std::string& file);

/// Loads a `colo.cluster/1` file. Errors: kIo, kBadInput.
[[nodiscard]] Result<ClusterSpec> loadCluster(const std::string& file);

/// A short stable hash of a JSON document (FNV-1a 64 over its compact dump), as 16 hex digits.
[[nodiscard]] std::string contentHash(const Json& document);

}  // namespace colo
