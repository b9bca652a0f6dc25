#pragma once
/// \file
/// Comma-separated lists of whole numbers as people type them on a command line ("4,4,8", "256, 512").

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace colo {

/// The positive integers of `text`, each at most `max`, separated by commas with spaces or tabs around
/// them allowed. Nullopt for an empty text, an empty item (a trailing comma), a sign, a suffix or a value
/// out of range: callers name the option and the whole value in their own error.
[[nodiscard]] std::optional<std::vector<std::int64_t>> parsePositiveIntegerList(std::string_view text, std::int64_t max);

}  // namespace colo
