#pragma once
// Command-line parsing shared by colo's programs: `--name value`, `--name=value` and flags, with
// errors that name the option and the value (exit 2), and generated help text.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "colo/core/error.h"

namespace colo::app {

struct OptionSpec {
  std::string name;        // without the leading dashes
  std::string valueName;   // empty: a flag that takes no value
  std::string help;
};

/// Where a number option's value must lie: [low, high], either end open (excluded) when asked.
struct NumberRange {
  double low = 0;
  double high = 0;
  bool openLow = false;
  bool openHigh = false;
  [[nodiscard]] bool contains(double v) const;
  /// "a number in (0, 1]", "a number above 0", "a number of at least 0", for error messages.
  [[nodiscard]] std::string describe() const;
};

/// A share of GPU memory: (0, 1].
inline constexpr NumberRange kFractionOfMemory{0, 1, true, false};

class Args {
 public:
  /// Parses `argv` (without the program and subcommand). Errors: kBadInput for an unknown option
  /// (suggesting the nearest), a missing value, or a repeated option.
  [[nodiscard]] static Result<Args> parse(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs);

  [[nodiscard]] bool has(const std::string& name) const { return m_values.contains(name); }
  [[nodiscard]] std::optional<std::string> value(const std::string& name) const;
  [[nodiscard]] std::string value(const std::string& name, const std::string& fallback) const;
  /// A positive integer option. Errors: kBadInput naming the option and value.
  [[nodiscard]] Result<std::int64_t> positiveInteger(const std::string& name, std::int64_t fallback) const;
  /// A comma-separated list of positive integers, each at most `max` ("4,4,8" or "4, 4, 8"); empty when
  /// the option is absent. Errors: kBadInput naming the option and the whole value (an empty item, a
  /// trailing comma, a sign or a suffix included), what the list is for in `what` ("layer counts").
  [[nodiscard]] Result<std::vector<std::int64_t>> positiveIntegers(const std::string& name, const std::string& what,
                                                                   std::int64_t max = INT64_MAX) const;
  /// A decimal number option, the whole value read (no suffix, not empty, finite) and inside `range`;
  /// `fallback` when the option is absent. Errors: kBadInput naming the option, the value and the range.
  [[nodiscard]] Result<double> number(const std::string& name, double fallback, const NumberRange& range) const;
  [[nodiscard]] const std::vector<std::string>& positional() const { return m_positional; }

 private:
  std::map<std::string, std::string> m_values;
  std::vector<std::string> m_positional;
};

/// "  --name VALUE   help" lines for a usage message.
[[nodiscard]] std::string describeOptions(const std::vector<OptionSpec>& specs);

}  // namespace colo::app
