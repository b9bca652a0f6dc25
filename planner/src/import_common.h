#pragma once
// Private to the import readers (import.cpp, import_python_toml.cpp, import_bridge.cpp): the bounds on
// what a launch may state, and the early return the readers share.
#include <cstdint>

namespace colo::planner::detail {

// Bounds on what a launch may state, so that products of sizes stay inside 64 bits: parallel degrees
// (each at most 32,768-way; four multiply to under 2^60) and every other count.
constexpr std::int64_t kMaxDegree = 1 << 15;
constexpr std::int64_t kMaxLaunchInteger = 1 << 24;

}  // namespace colo::planner::detail

// `var` = the value of a Result-returning `expr`, or return its error.
#define COLO_TRY(var, expr)                     \
  auto var##_r = (expr);                        \
  if (!var##_r) return fail(var##_r.error());   \
  const auto var = *var##_r
