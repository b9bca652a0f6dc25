#pragma once
/// \file
/// Unit constants and human-readable formatting. Quantities in colo carry their unit in the name
/// (`memoryBytes`, `latencySeconds`); these helpers turn them into text for people.

#include <cstdint>
#include <string>

namespace colo {

inline constexpr double kKiB = 1024.0;
inline constexpr double kMiB = 1024.0 * kKiB;
inline constexpr double kGiB = 1024.0 * kMiB;
inline constexpr double kTiB = 1024.0 * kGiB;

/// Binary units: "1.50 GiB", "812 B".
[[nodiscard]] std::string formatBytes(double bytes);
/// Counts with SI suffixes as parameter counts are quoted: "174.6B", "124.4M", "4.1K".
[[nodiscard]] std::string formatCount(double count);
/// FLOPs with SI prefixes: "1.08 TFLOP", "350.0 GFLOP".
[[nodiscard]] std::string formatFlops(double flops);
/// A rate with SI prefixes and the given unit: formatRate(3.12e14, "FLOP/s") gives "312.0 TFLOP/s".
[[nodiscard]] std::string formatRate(double perSecond, const std::string& unit);
/// Fixed decimals without locale surprises.
[[nodiscard]] std::string formatFixed(double value, int decimals);

}  // namespace colo
