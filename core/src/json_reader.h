#pragma once
// Private helper of the loaders: reads fields of one JSON object with full context (file and JSON
// pointer), so that every rejection names file, field and value. Integers are bounded by
// limits::kMaxJsonInteger and numbers must be finite and at most limits::kMaxQuantity, so no reader can
// overflow on a value it accepted. Failures are thrown as LoadFailure
// inside a loader and turned into an Error at the loader's public entry point (catchLoad); no
// exception leaves the core module.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/suggest.h"

namespace colo::detail {

struct LoadFailure {
  Error error;
};

class JsonReader {
 public:
  JsonReader(const Json& object, std::string file, std::string path = {});

  [[nodiscard]] const std::string& file() const { return m_file; }
  [[nodiscard]] const std::string& path() const { return m_path; }
  [[nodiscard]] const Json& json() const { return m_json; }
  [[nodiscard]] std::string pathOf(std::string_view key) const;

  [[nodiscard]] bool has(std::string_view key) const;

  // Required fields. Each throws LoadFailure naming file, path and value on a missing field, a wrong
  // type or a value out of range.
  [[nodiscard]] std::string string(std::string_view key) const;
  [[nodiscard]] std::int64_t integer(std::string_view key) const;
  [[nodiscard]] std::int64_t positiveInteger(std::string_view key) const;
  [[nodiscard]] std::int64_t nonNegativeInteger(std::string_view key) const;
  [[nodiscard]] double number(std::string_view key) const;
  [[nodiscard]] double positiveNumber(std::string_view key) const;
  [[nodiscard]] double nonNegativeNumber(std::string_view key) const;
  [[nodiscard]] bool boolean(std::string_view key) const;
  [[nodiscard]] JsonReader object(std::string_view key) const;
  [[nodiscard]] std::vector<JsonReader> arrayOfObjects(std::string_view key) const;
  [[nodiscard]] std::vector<std::int64_t> integerArray(std::string_view key, std::int64_t minimum) const;
  /// An integer in [minimum, maximum]: counts and sizes whose products must not overflow (see
  /// colo/core/limits.h).
  [[nodiscard]] std::int64_t boundedInteger(std::string_view key, std::int64_t minimum, std::int64_t maximum) const;

  // Optional fields: the fallback when absent or null, the same checks otherwise.
  [[nodiscard]] std::string string(std::string_view key, std::string fallback) const;
  [[nodiscard]] std::int64_t positiveInteger(std::string_view key, std::int64_t fallback) const;
  [[nodiscard]] std::int64_t nonNegativeInteger(std::string_view key, std::int64_t fallback) const;
  [[nodiscard]] double number(std::string_view key, double fallback) const;
  [[nodiscard]] double positiveNumber(std::string_view key, double fallback) const;
  [[nodiscard]] double nonNegativeNumber(std::string_view key, double fallback) const;
  [[nodiscard]] double fraction(std::string_view key, double fallback) const;  // in [0, 1]
  [[nodiscard]] bool boolean(std::string_view key, bool fallback) const;
  [[nodiscard]] std::optional<std::int64_t> optionalPositiveInteger(std::string_view key) const;
  [[nodiscard]] std::int64_t boundedInteger(std::string_view key, std::int64_t minimum, std::int64_t maximum,
                                            std::int64_t fallback) const;

  /// A string that must be one of `choices`; the error lists them.
  [[nodiscard]] std::string choice(std::string_view key, std::initializer_list<std::string_view> choices) const;
  [[nodiscard]] std::string choice(std::string_view key, std::initializer_list<std::string_view> choices,
                                   std::string fallback) const;

  /// Marks keys as known without reading them (e.g. "format", read elsewhere).
  void accept(std::initializer_list<std::string_view> keys) const;

  /// Rejects any key that was not read or accepted: a typo in a colo file is an error that suggests
  /// the nearest known key, never a silently ignored setting.
  void rejectUnknownKeys() const;

  [[noreturn]] void fail(std::string_view key, const std::string& message) const;
  [[noreturn]] void failHere(const std::string& message) const;
  /// Fails at a pointer below this object given as already-escaped segments, e.g. "edges/2/1".
  [[noreturn]] void failAt(const std::string& relativePointer, const std::string& message) const;

 private:
  [[nodiscard]] const Json& required(std::string_view key) const;
  [[nodiscard]] const Json* optional(std::string_view key) const;
  [[nodiscard]] std::int64_t toInteger(std::string_view key, const Json& value) const;
  [[nodiscard]] double toNumber(std::string_view key, const Json& value) const;

  const Json& m_json;
  std::string m_file;
  std::string m_path;
  mutable std::set<std::string, std::less<>> m_seen;
};

/// Escapes a key for use in a JSON pointer (RFC 6901).
[[nodiscard]] std::string escapePointer(std::string_view key);

/// Runs a loader body and converts a thrown LoadFailure into an Error. nlohmann type errors that slip
/// through become internal errors (a loader bug), never a crash.
template <class F>
auto catchLoad(const std::string& file, F&& body) -> Result<decltype(body())> {
  try {
    return body();
  } catch (const LoadFailure& failure) {
    return std::unexpected(failure.error);
  } catch (const Json::exception& e) {
    // A value of an unexpected type reached an nlohmann accessor: still the file's fault, and named.
    return std::unexpected(Error::badInput(std::string("unexpected value: ") + e.what(), file));
  } catch (const std::exception& e) {
    return std::unexpected(Error::internal(file + ": unexpected error while loading: " + e.what()));
  }
}

}  // namespace colo::detail
