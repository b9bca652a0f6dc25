#include "colo/core/units.h"

#include <cmath>
#include <cstdio>

namespace colo {

std::string formatFixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string formatBytes(double bytes) {
  const double a = std::fabs(bytes);
  if (a >= kTiB) return formatFixed(bytes / kTiB, 2) + " TiB";
  if (a >= kGiB) return formatFixed(bytes / kGiB, 2) + " GiB";
  if (a >= kMiB) return formatFixed(bytes / kMiB, 2) + " MiB";
  if (a >= kKiB) return formatFixed(bytes / kKiB, 2) + " KiB";
  return formatFixed(bytes, 0) + " B";
}

namespace {
std::string si(double value, int decimals, const char* space) {
  const double a = std::fabs(value);
  const char* prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int i = 0;
  double v = value;
  while (i < 6 && std::fabs(v) >= 1000.0) {
    v /= 1000.0;
    ++i;
  }
  if (a < 1000.0) return formatFixed(value, a == std::floor(a) ? 0 : decimals) + space;
  return formatFixed(v, decimals) + space + prefixes[i];
}
}  // namespace

std::string formatCount(double count) {
  std::string s = si(count, 1, "");
  // Parameter counts are quoted with B for billions.
  if (!s.empty() && s.back() == 'G') s.back() = 'B';
  return s;
}

std::string formatFlops(double flops) { return si(flops, 2, " ") + "FLOP"; }

std::string formatRate(double perSecond, const std::string& unit) { return si(perSecond, 1, " ") + unit; }

}  // namespace colo
