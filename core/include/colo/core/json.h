#pragma once
/// \file
/// JSON documents as colo reads and writes them: key order is kept, so files stay readable after a
/// round trip.

#include <string>

#include <nlohmann/json.hpp>

#include "colo/core/error.h"

namespace colo {

/// The JSON value type of every colo format (insertion-ordered objects).
using Json = nlohmann::ordered_json;

/// Reads and parses a JSON file. Errors: kIo when the file cannot be read, kBadInput with line and
/// column when it is not valid JSON.
[[nodiscard]] Result<Json> readJsonFile(const std::string& file);

/// Parses JSON text; `file` only labels errors. Errors: kBadInput with line and column.
[[nodiscard]] Result<Json> parseJson(const std::string& text, const std::string& file);

/// Writes `value` as indented JSON to `file` atomically (temporary file in the same folder, then
/// rename), so a crash never leaves a half-written file. Errors: kIo.
[[nodiscard]] Result<void> writeJsonFileAtomic(const std::string& file, const Json& value);

/// The `"format"` of a colo document split into kind and version: `colo.model/1` gives
/// {"model", 1}. Errors: kBadInput when `format` is missing, not a string or not of that shape.
struct FormatTag {
  std::string kind;
  int version = 0;
};
[[nodiscard]] Result<FormatTag> readFormatTag(const Json& document, const std::string& file);

/// Checks that `document` is a `colo.<kind>/<version>` document. Errors: kBadInput naming what it is
/// instead ("expected a cluster (colo.cluster/1), got a colo.plan document") or the unsupported version.
[[nodiscard]] Result<void> requireFormat(const Json& document, const std::string& file, const std::string& kind,
                                         int version);

/// A short rendering of a JSON value for error messages (strings quoted, long values cut).
[[nodiscard]] std::string describeJsonValue(const Json& value);

}  // namespace colo
