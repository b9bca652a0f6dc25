#pragma once
/// \file
/// The shipped model, cluster and cost-database libraries (data/models, data/clusters, data/costdb). A
/// user may name a library entry ("gpt3-175b", "h200-bf16") wherever a file path is accepted.

#include <string>
#include <vector>

#include "colo/core/error.h"

namespace colo {

enum class LibraryKind { kModels, kClusters, kCostDbs };

/// The data folder: $COLO_DATA_DIR when set, else the repository's data/ this build came from.
[[nodiscard]] std::string dataDirectory();

/// Entry names (file stems) of a library, sorted.
[[nodiscard]] std::vector<std::string> libraryEntries(LibraryKind kind);

/// A path as given when it names an existing file (or looks like a path: contains '/' or ends in the
/// library's extension, .json or .sqlite), else the library entry of that name. Errors: kBadInput for an unknown name, suggesting the
/// closest entries.
[[nodiscard]] Result<std::string> resolveLibraryFile(LibraryKind kind, const std::string& nameOrPath);

}  // namespace colo
