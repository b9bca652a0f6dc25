#pragma once
// Private: the table of states the operator-level solver's dynamic programme keeps per step
// (autoparallel_solver.cpp).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace colo::planner::detail {

/// The states of one step of the operator-level solver's DP by packed key, in insertion order (a solve
/// does not depend on hashing), indexed by open addressing: linear probing over a power-of-two table of
/// positions, Fibonacci-hashed. The solver's hottest structure.
template <class Value>
class StateMap {
 public:
  using Item = std::pair<std::uint64_t, Value>;
  /// The value of `key` (default-constructed when new) and whether it was inserted. The pointer holds until
  /// the next insertion.
  std::pair<Value*, bool> tryEmplace(std::uint64_t key) {
    if ((m_items.size() + 1) * 2 > m_index.size()) rehash(std::max<std::size_t>(16, m_index.size() * 2));
    for (std::size_t i = slot(key);; i = (i + 1) & m_mask) {
      const std::uint32_t at = m_index[i];
      if (at == kEmpty) {
        m_index[i] = static_cast<std::uint32_t>(m_items.size());
        m_items.emplace_back(key, Value{});
        return {&m_items.back().second, true};
      }
      if (m_items[at].first == key) return {&m_items[at].second, false};
    }
  }
  [[nodiscard]] const Value& at(std::uint64_t key) const {
    if (!m_index.empty()) {
      for (std::size_t i = slot(key);; i = (i + 1) & m_mask) {
        const std::uint32_t at = m_index[i];
        if (at == kEmpty) break;
        if (m_items[at].first == key) return m_items[at].second;
      }
    }
    throw std::out_of_range("autoparallel solver: no state " + std::to_string(key));
  }
  void reserve(std::size_t n) {
    m_items.reserve(n);
    std::size_t size = 16;
    while (size < 2 * n) size *= 2;
    if (size > m_index.size()) rehash(size);
  }
  void clear() {
    m_items.clear();
    std::fill(m_index.begin(), m_index.end(), kEmpty);
  }
  /// Empty, with no table, keeping what both vectors have allocated (a reused map does not touch fresh
  /// pages again: the solver runs thousands of solves with the same shape of steps).
  void reset() {
    m_items.clear();
    m_index.clear();
    m_mask = 0;
    m_shift = 64;
  }
  [[nodiscard]] std::size_t size() const { return m_items.size(); }
  /// The value of the `i`-th key inserted.
  [[nodiscard]] Value& valueAt(std::size_t i) { return m_items[i].second; }
  [[nodiscard]] std::vector<Item>::const_iterator begin() const { return m_items.begin(); }
  [[nodiscard]] std::vector<Item>::const_iterator end() const { return m_items.end(); }

 private:
  static constexpr std::uint32_t kEmpty = std::numeric_limits<std::uint32_t>::max();
  [[nodiscard]] std::size_t slot(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> m_shift) & m_mask;
  }
  void rehash(std::size_t size) {
    m_index.assign(size, kEmpty);
    m_mask = size - 1;
    m_shift = 64;
    for (std::size_t s = size; s > 1; s /= 2) --m_shift;
    for (std::size_t k = 0; k < m_items.size(); ++k) {
      std::size_t i = slot(m_items[k].first);
      while (m_index[i] != kEmpty) i = (i + 1) & m_mask;
      m_index[i] = static_cast<std::uint32_t>(k);
    }
  }
  std::vector<Item> m_items;
  std::vector<std::uint32_t> m_index;
  std::size_t m_mask = 0;
  int m_shift = 64;
};

}  // namespace colo::planner::detail
