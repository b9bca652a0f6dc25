#include "text_table.h"

#include <algorithm>

namespace colo::app {

TextTable::TextTable(std::vector<std::string> header, std::vector<bool> rightAligned)
    : m_header(std::move(header)), m_right(std::move(rightAligned)) {
  m_right.resize(m_header.size(), false);
}

void TextTable::addRow(std::vector<std::string> cells) {
  cells.resize(m_header.size());
  m_rows.push_back(std::move(cells));
}

std::string TextTable::render(const std::string& indent) const {
  std::vector<std::size_t> width(m_header.size());
  for (std::size_t c = 0; c < m_header.size(); ++c) {
    width[c] = m_header[c].size();
    for (const auto& row : m_rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = indent;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::size_t pad = width[c] - cells[c].size();
      if (m_right[c]) out += std::string(pad, ' ') + cells[c];
      else out += cells[c] + (c + 1 < cells.size() ? std::string(pad, ' ') : "");
      if (c + 1 < cells.size()) out += "  ";
    }
    return out + "\n";
  };
  std::string out = line(m_header);
  std::size_t total = 0;
  for (const auto w : width) total += w + 2;
  out += indent + std::string(total > 2 ? total - 2 : total, '-') + "\n";
  for (const auto& row : m_rows) out += line(row);
  return out;
}

}  // namespace colo::app
