#include "json_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "colo/core/limits.h"

namespace colo::detail {

std::string escapePointer(std::string_view key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

JsonReader::JsonReader(const Json& object, std::string file, std::string path)
    : m_json(object), m_file(std::move(file)), m_path(std::move(path)) {
  if (!m_json.is_object()) failHere("expected an object, got " + describeJsonValue(m_json));
}

std::string JsonReader::pathOf(std::string_view key) const { return m_path + "/" + escapePointer(key); }

void JsonReader::fail(std::string_view key, const std::string& message) const {
  throw LoadFailure{Error::badInput(message, m_file, pathOf(key))};
}

void JsonReader::failAt(const std::string& relativePointer, const std::string& message) const {
  throw LoadFailure{Error::badInput(message, m_file, m_path + "/" + relativePointer)};
}

void JsonReader::failHere(const std::string& message) const {
  throw LoadFailure{Error::badInput(message, m_file, m_path.empty() ? std::string() : m_path)};
}

bool JsonReader::has(std::string_view key) const {
  const auto it = m_json.find(key);
  return it != m_json.end() && !it->is_null();
}

const Json& JsonReader::required(std::string_view key) const {
  m_seen.emplace(key);
  const auto it = m_json.find(key);
  if (it == m_json.end()) fail(key, "missing required field \"" + std::string(key) + "\"");
  if (it->is_null()) fail(key, "required field \"" + std::string(key) + "\" is null");
  return *it;
}

const Json* JsonReader::optional(std::string_view key) const {
  m_seen.emplace(key);
  const auto it = m_json.find(key);
  if (it == m_json.end() || it->is_null()) return nullptr;
  return &*it;
}

namespace {

// An integer within +-2^53, or nothing: the one check every integer of every colo file passes.
std::optional<std::int64_t> boundedJsonInteger(const Json& value) {
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(limits::kMaxJsonInteger)) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (value.is_number_integer()) {
    const auto i = value.get<std::int64_t>();
    if (i > limits::kMaxJsonInteger || i < -limits::kMaxJsonInteger) return std::nullopt;
    return i;
  }
  return std::nullopt;
}

std::string tooLarge(const Json& value) {
  return "integer out of range (at most 2^53 in magnitude), got " + describeJsonValue(value);
}

}  // namespace

std::int64_t JsonReader::toInteger(std::string_view key, const Json& value) const {
  if (value.is_number_integer()) {
    const auto i = boundedJsonInteger(value);
    if (!i) fail(key, tooLarge(value));
    return *i;
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<std::int64_t>(d);
    fail(key, "must be a whole number, got " + describeJsonValue(value));
  }
  fail(key, "must be an integer, got " + describeJsonValue(value));
}

double JsonReader::toNumber(std::string_view key, const Json& value) const {
  if (!value.is_number()) fail(key, "must be a number, got " + describeJsonValue(value));
  const double d = value.get<double>();
  if (!std::isfinite(d)) fail(key, "must be finite, got " + describeJsonValue(value));
  if (std::fabs(d) > limits::kMaxQuantity) {
    fail(key, "out of range (at most 1e30 in magnitude), got " + describeJsonValue(value));
  }
  return d;
}

std::string JsonReader::string(std::string_view key) const {
  const Json& v = required(key);
  if (!v.is_string()) fail(key, "must be a string, got " + describeJsonValue(v));
  auto s = v.get<std::string>();
  if (s.empty()) fail(key, "must not be empty");
  return s;
}

std::int64_t JsonReader::integer(std::string_view key) const { return toInteger(key, required(key)); }

std::int64_t JsonReader::positiveInteger(std::string_view key) const {
  const Json& v = required(key);
  const auto i = toInteger(key, v);
  if (i <= 0) fail(key, "must be a positive integer, got " + describeJsonValue(v));
  return i;
}

std::int64_t JsonReader::nonNegativeInteger(std::string_view key) const {
  const Json& v = required(key);
  const auto i = toInteger(key, v);
  if (i < 0) fail(key, "must be zero or a positive integer, got " + describeJsonValue(v));
  return i;
}

double JsonReader::number(std::string_view key) const { return toNumber(key, required(key)); }

double JsonReader::positiveNumber(std::string_view key) const {
  const Json& v = required(key);
  const double d = toNumber(key, v);
  if (d <= 0) fail(key, "must be positive, got " + describeJsonValue(v));
  return d;
}

double JsonReader::nonNegativeNumber(std::string_view key) const {
  const Json& v = required(key);
  const double d = toNumber(key, v);
  if (d < 0) fail(key, "must not be negative, got " + describeJsonValue(v));
  return d;
}

bool JsonReader::boolean(std::string_view key) const {
  const Json& v = required(key);
  if (!v.is_boolean()) fail(key, "must be true or false, got " + describeJsonValue(v));
  return v.get<bool>();
}

JsonReader JsonReader::object(std::string_view key) const {
  const Json& v = required(key);
  if (!v.is_object()) fail(key, "must be an object, got " + describeJsonValue(v));
  return JsonReader(v, m_file, pathOf(key));
}

std::vector<JsonReader> JsonReader::arrayOfObjects(std::string_view key) const {
  const Json& v = required(key);
  if (!v.is_array()) fail(key, "must be an array, got " + describeJsonValue(v));
  std::vector<JsonReader> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string elementPath = pathOf(key) + "/" + std::to_string(i);
    if (!v[i].is_object()) {
      throw LoadFailure{Error::badInput("must be an object, got " + describeJsonValue(v[i]), m_file, elementPath)};
    }
    out.emplace_back(v[i], m_file, elementPath);
  }
  return out;
}

std::vector<std::int64_t> JsonReader::integerArray(std::string_view key, std::int64_t minimum) const {
  const Json& v = required(key);
  if (!v.is_array()) fail(key, "must be an array of integers, got " + describeJsonValue(v));
  std::vector<std::int64_t> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string at = escapePointer(key) + "/" + std::to_string(i);
    if (!v[i].is_number_integer()) failAt(at, "must be an integer, got " + describeJsonValue(v[i]));
    const auto bounded = boundedJsonInteger(v[i]);
    if (!bounded) failAt(at, tooLarge(v[i]));
    const auto value = *bounded;
    if (value < minimum) failAt(at, "must be at least " + std::to_string(minimum) + ", got " + describeJsonValue(v[i]));
    out.push_back(value);
  }
  return out;
}

std::int64_t JsonReader::boundedInteger(std::string_view key, std::int64_t minimum, std::int64_t maximum) const {
  const Json& v = required(key);
  const auto i = toInteger(key, v);
  if (i < minimum) {
    fail(key, (minimum == 1   ? std::string("must be a positive integer")
               : minimum == 0 ? std::string("must be zero or a positive integer")
                              : "must be at least " + std::to_string(minimum)) +
                  ", got " + describeJsonValue(v));
  }
  if (i > maximum) fail(key, "must be at most " + std::to_string(maximum) + ", got " + describeJsonValue(v));
  return i;
}

std::int64_t JsonReader::boundedInteger(std::string_view key, std::int64_t minimum, std::int64_t maximum,
                                        std::int64_t fallback) const {
  return optional(key) ? boundedInteger(key, minimum, maximum) : fallback;
}

std::string JsonReader::string(std::string_view key, std::string fallback) const {
  const Json* v = optional(key);
  if (!v) return fallback;
  if (!v->is_string()) fail(key, "must be a string, got " + describeJsonValue(*v));
  return v->get<std::string>();
}

std::int64_t JsonReader::positiveInteger(std::string_view key, std::int64_t fallback) const {
  return optional(key) ? positiveInteger(key) : fallback;
}

std::int64_t JsonReader::nonNegativeInteger(std::string_view key, std::int64_t fallback) const {
  return optional(key) ? nonNegativeInteger(key) : fallback;
}

double JsonReader::number(std::string_view key, double fallback) const { return optional(key) ? number(key) : fallback; }

double JsonReader::positiveNumber(std::string_view key, double fallback) const {
  return optional(key) ? positiveNumber(key) : fallback;
}

double JsonReader::nonNegativeNumber(std::string_view key, double fallback) const {
  return optional(key) ? nonNegativeNumber(key) : fallback;
}

double JsonReader::fraction(std::string_view key, double fallback) const {
  const Json* v = optional(key);
  if (!v) return fallback;
  const double d = toNumber(key, *v);
  if (d < 0 || d > 1) fail(key, "must be a fraction between 0 and 1, got " + describeJsonValue(*v));
  return d;
}

bool JsonReader::boolean(std::string_view key, bool fallback) const { return optional(key) ? boolean(key) : fallback; }

std::optional<std::int64_t> JsonReader::optionalPositiveInteger(std::string_view key) const {
  if (!optional(key)) return std::nullopt;
  return positiveInteger(key);
}

std::string JsonReader::choice(std::string_view key, std::initializer_list<std::string_view> choices) const {
  const std::string value = string(key);
  for (const auto c : choices) {
    if (c == value) return value;
  }
  std::string list;
  for (const auto c : choices) list += (list.empty() ? "" : ", ") + std::string(c);
  fail(key, "unknown value \"" + value + "\" (expected one of: " + list + ")");
}

std::string JsonReader::choice(std::string_view key, std::initializer_list<std::string_view> choices,
                               std::string fallback) const {
  return optional(key) ? choice(key, choices) : fallback;
}

void JsonReader::accept(std::initializer_list<std::string_view> keys) const {
  for (const auto k : keys) m_seen.emplace(k);
}

void JsonReader::rejectUnknownKeys() const {
  std::vector<std::string> known(m_seen.begin(), m_seen.end());
  for (const auto& [key, value] : m_json.items()) {
    if (m_seen.contains(key)) continue;
    std::string message = "unknown field \"" + key + "\"";
    if (auto suggestion = closestMatch(key, known)) message += " (did you mean \"" + *suggestion + "\"?)";
    fail(key, message);
  }
}

}  // namespace colo::detail
