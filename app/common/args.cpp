#include "args.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>

#include "colo/core/number_list.h"
#include "colo/core/suggest.h"

namespace colo::app {
namespace {

std::optional<std::string> nearest(const std::string& word, const std::vector<OptionSpec>& specs) {
  std::vector<std::string> names;
  for (const auto& spec : specs) names.push_back(spec.name);
  return closestMatch(word, names);
}

std::string formatNumber(double v) {
  std::ostringstream out;
  out << std::setprecision(15) << v;
  return out.str();
}

}  // namespace

Result<Args> Args::parse(const std::vector<std::string>& argv, const std::vector<OptionSpec>& specs) {
  Args args;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& token = argv[i];
    if (token.size() < 3 || token.rfind("--", 0) != 0) {
      if (token.size() > 1 && token[0] == '-' && token != "-") {
        return fail(Error::badInput("unknown option \"" + token + "\" (options are spelled --name)"));
      }
      args.m_positional.push_back(token);
      continue;
    }
    std::string name = token.substr(2);
    std::optional<std::string> inlineValue;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      inlineValue = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const auto spec = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == name; });
    if (spec == specs.end()) {
      std::string message = "unknown option --" + name;
      if (auto close = nearest(name, specs)) message += " (did you mean --" + *close + "?)";
      return fail(Error::badInput(message));
    }
    if (args.m_values.contains(name)) return fail(Error::badInput("option --" + name + " given twice"));
    if (spec->valueName.empty()) {
      if (inlineValue) return fail(Error::badInput("option --" + name + " takes no value, got \"" + *inlineValue + "\""));
      args.m_values[name] = "";
    } else if (inlineValue) {
      args.m_values[name] = *inlineValue;
    } else {
      if (i + 1 >= argv.size()) return fail(Error::badInput("option --" + name + " needs a value (" + spec->valueName + ")"));
      args.m_values[name] = argv[++i];
    }
  }
  return args;
}

std::optional<std::string> Args::value(const std::string& name) const {
  const auto it = m_values.find(name);
  if (it == m_values.end()) return std::nullopt;
  return it->second;
}

std::string Args::value(const std::string& name, const std::string& fallback) const {
  return value(name).value_or(fallback);
}

Result<std::int64_t> Args::positiveInteger(const std::string& name, std::int64_t fallback) const {
  const auto text = value(name);
  if (!text) return fallback;
  std::int64_t out = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), out);
  if (ec != std::errc() || end != text->data() + text->size() || out <= 0) {
    return fail(Error::badInput("--" + name + ": expected a positive integer, got \"" + *text + "\""));
  }
  return out;
}

bool NumberRange::contains(double v) const {
  const bool aboveLow = openLow ? v > low : v >= low;
  const bool belowHigh = std::isinf(high) || (openHigh ? v < high : v <= high);
  return aboveLow && belowHigh;
}

std::string NumberRange::describe() const {
  if (std::isinf(high)) return std::string(openLow ? "a number above " : "a number of at least ") + formatNumber(low);
  return std::string("a number in ") + (openLow ? "(" : "[") + formatNumber(low) + ", " + formatNumber(high) + (openHigh ? ")" : "]");
}

Result<double> Args::number(const std::string& name, double fallback, const NumberRange& range) const {
  const auto text = value(name);
  if (!text) return fallback;
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);
  if (text->empty() || end != text->c_str() + text->size() || !std::isfinite(v) || !range.contains(v)) {
    return fail(Error::badInput("--" + name + ": expected " + range.describe() + ", got \"" + *text + "\""));
  }
  return v;
}

Result<std::vector<std::int64_t>> Args::positiveIntegers(const std::string& name, const std::string& what,
                                                         std::int64_t max) const {
  const auto text = value(name);
  if (!text) return std::vector<std::int64_t>{};
  auto list = parsePositiveIntegerList(*text, max);
  if (!list) {
    return fail(Error::badInput("--" + name + ": expected " + what + " (positive integers" +
                                (max < INT64_MAX ? " up to " + std::to_string(max) : std::string()) +
                                ") separated by commas, got \"" + *text + "\""));
  }
  return *list;
}

std::string describeOptions(const std::vector<OptionSpec>& specs) {
  std::string out;
  for (const auto& s : specs) {
    std::string left = "  --" + s.name + (s.valueName.empty() ? "" : " " + s.valueName);
    if (left.size() < 26) left.resize(26, ' ');
    else left += "  ";
    out += left + s.help + "\n";
  }
  return out;
}

}  // namespace colo::app
