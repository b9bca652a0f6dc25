#include "colo/core/number_list.h"

#include <charconv>

namespace colo {

std::optional<std::vector<std::int64_t>> parsePositiveIntegerList(std::string_view text, std::int64_t max) {
  std::vector<std::int64_t> out;
  const char* item = text.data();
  const char* const last = text.data() + text.size();
  auto blank = [](char c) { return c == ' ' || c == '\t'; };
  while (true) {
    while (item != last && blank(*item)) ++item;
    std::int64_t n = 0;
    auto [end, ec] = std::from_chars(item, last, n);
    const char* digits = end;
    while (end != last && blank(*end)) ++end;
    if (ec != std::errc() || digits == item || n <= 0 || n > max || (end != last && *end != ',')) return std::nullopt;
    out.push_back(n);
    if (end == last) return out;
    item = end + 1;
  }
}

}  // namespace colo
