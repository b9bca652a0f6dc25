#include "colo/core/suggest.h"

#include <algorithm>
#include <limits>

namespace colo {

std::optional<std::string> closestMatch(std::string_view word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t bestDistance = std::numeric_limits<std::size_t>::max();
  for (const auto& candidate : candidates) {
    // Levenshtein distance, two rows.
    std::vector<std::size_t> previous(candidate.size() + 1);
    std::vector<std::size_t> current(candidate.size() + 1);
    for (std::size_t j = 0; j <= candidate.size(); ++j) previous[j] = j;
    for (std::size_t i = 1; i <= word.size(); ++i) {
      current[0] = i;
      for (std::size_t j = 1; j <= candidate.size(); ++j) {
        const std::size_t substitution = previous[j - 1] + (word[i - 1] == candidate[j - 1] ? 0 : 1);
        current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
      }
      std::swap(previous, current);
    }
    const std::size_t distance = previous[candidate.size()];
    if (distance < bestDistance) {
      bestDistance = distance;
      best = candidate;
    }
  }
  // A typo is a few edits away; anything further is a different word.
  if (best && bestDistance <= std::max<std::size_t>(2, word.size() / 3)) return best;
  return std::nullopt;
}

}  // namespace colo
