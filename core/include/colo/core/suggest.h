#pragma once
/// \file
/// "Did you mean" suggestions for misspelt names (JSON fields, options, library entries).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace colo {

/// The candidate nearest to `word` by edit distance, when it is close enough to be a likely typo
/// (at most max(2, |word| / 3) edits); nullopt otherwise. Ties go to the earlier candidate.
[[nodiscard]] std::optional<std::string> closestMatch(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace colo
