#pragma once
// Plain-text tables for terminal output: left-aligned text columns, right-aligned numbers.

#include <string>
#include <vector>

namespace colo::app {

class TextTable {
 public:
  /// `rightAligned[i]` aligns column i to the right (numbers).
  TextTable(std::vector<std::string> header, std::vector<bool> rightAligned);
  void addRow(std::vector<std::string> cells);
  /// The table with a header rule, each line prefixed by `indent`.
  [[nodiscard]] std::string render(const std::string& indent = "") const;

 private:
  std::vector<std::string> m_header;
  std::vector<bool> m_right;
  std::vector<std::vector<std::string>> m_rows;
};

}  // namespace colo::app
