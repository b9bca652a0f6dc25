#pragma once
// Private to the import readers (import.cpp, import_deepspeed.cpp, import_python_toml.cpp,
// import_bridge.cpp): the bounds on what a launch may state, a launch's argument list and its reader,
// and the early return the readers share.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "colo/core/error.h"
#include "colo/core/cluster.h"
#include "colo/planner/export_check.h"

namespace colo::planner::detail {

// Bounds on what a launch may state, so that products of sizes stay inside 64 bits: parallel degrees
// (each at most 32,768-way; four multiply to under 2^60) and every other count.
constexpr std::int64_t kMaxDegree = 1 << 15;
constexpr std::int64_t kMaxLaunchInteger = 1 << 24;

// The argument list of a launch (Megatron-LM, Megatron-DeepSpeed): comment lines dropped, everything
// before the first --flag (the launcher and script) ignored.
Result<ParsedArguments> launchArguments(const std::string& text);

// Typed reads of a launch's flags, with messages that name the flag.
struct Reader {
  const ParsedArguments& args;
  std::string what;  // "Megatron-LM argument" for messages

  [[nodiscard]] bool has(const std::string& flag) const { return args.has(flag); }
  [[nodiscard]] std::optional<std::string> text(const std::string& flag) const {
    const auto* v = args.find(flag);
    if (!v || v->empty()) return std::nullopt;
    return v->front();
  }
  Result<std::int64_t> integer(const std::string& flag, std::int64_t fallback, std::int64_t maximum = kMaxLaunchInteger) const {
    const auto v = text(flag);
    if (!v) return fallback;
    char* end = nullptr;
    const long long n = std::strtoll(v->c_str(), &end, 10);
    if (v->empty() || *end != '\0' || n < 0 || n > maximum) {
      return fail(Error::badInput(flag + ": expected an integer from 0 to " + std::to_string(maximum) + ", got \"" + *v +
                                  "\" (expand the launch's shell variables first)"));
    }
    return static_cast<std::int64_t>(n);
  }
  Result<double> number(const std::string& flag, double fallback) const {
    const auto v = text(flag);
    if (!v) return fallback;
    char* end = nullptr;
    const double x = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0') return fail(Error::badInput(flag + ": expected a number, got \"" + *v + "\""));
    return x;
  }
};

// The precision a Megatron launch trains at (fp8 and fp4 only through Transformer Engine's modules).
DType launchPrecision(const Reader& r, bool transformerEngine);

}  // namespace colo::planner::detail

// `var` = the value of a Result-returning `expr`, or return its error.
#define COLO_TRY(var, expr)                     \
  auto var##_r = (expr);                        \
  if (!var##_r) return fail(var##_r.error());   \
  const auto var = *var##_r
