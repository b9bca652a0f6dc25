#pragma once
/// \file
/// Checks colo's exports against the tools' own argument and config schemas, kept as data with their
/// source and version in data/export-schemas/ (megatron-lm.json, deepspeed.json): every Megatron-LM
/// argument known, of its type and among its choices, the arguments pretrain_gpt.py needs present,
/// and validate_args's rules met; every DeepSpeed key known and DeepSpeed's batch and pipeline rules
/// met. `colo-plan export --check` and the tests run it on every export.

#include <cstdint>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/plan.h"

namespace colo::planner {

/// What an export gets wrong: the schema's rule id (or the argument) and why.
struct ExportProblem {
  std::string rule;
  std::string message;
};

/// Reads data/export-schemas/<name>.json ("megatron-lm", "deepspeed"). Errors: kIo, kBadInput.
[[nodiscard]] Result<Json> loadExportSchema(const std::string& name);

/// The arguments of an argument list as a shell would split them (comments, `\` continuations,
/// quotes), each flag with its values. A `${NAME:?...}` placeholder counts as a value the user fills.
struct ParsedArguments {
  std::vector<std::pair<std::string, std::vector<std::string>>> flags;  ///< in order
  [[nodiscard]] const std::vector<std::string>* find(const std::string& flag) const;
  [[nodiscard]] bool has(const std::string& flag) const { return find(flag) != nullptr; }
};
[[nodiscard]] Result<ParsedArguments> parseArgumentList(const std::string& text);

/// Megatron-LM pretrain_gpt.py on `worldSize` processes. Empty when the arguments would start.
[[nodiscard]] std::vector<ExportProblem> checkMegatronArguments(const std::string& text, const Json& schema,
                                                                std::int64_t worldSize);

/// A DeepSpeed config for `plan` (the data-parallel size Megatron-DeepSpeed gives DeepSpeed).
[[nodiscard]] std::vector<ExportProblem> checkDeepSpeedConfig(const Json& config, const Json& schema, const Plan& plan);

}  // namespace colo::planner
