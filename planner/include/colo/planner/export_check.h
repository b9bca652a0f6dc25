#pragma once
/// \file
/// Checks colo's exports against the tools' own argument and config schemas, kept as data with their
/// source and version in data/export-schemas/ (megatron-lm.json, deepspeed.json): every Megatron-LM
/// argument known, of its type and among its choices, the arguments pretrain_gpt.py needs present,
/// and validate_args's rules met; every DeepSpeed key known and DeepSpeed's batch and pipeline rules
/// met; Colossal-AI's plugin parameters and constructor checks; torchrun's and sbatch's options.
/// `colo-plan export` runs them before writing, and the tests run them on every export.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/plan.h"
#include "colo/planner/export.h"

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
  /// The values of the flag's last occurrence (argparse's rule for a flag given twice), or null.
  [[nodiscard]] const std::vector<std::string>* find(const std::string& flag) const;
  [[nodiscard]] bool has(const std::string& flag) const { return find(flag) != nullptr; }
};
[[nodiscard]] Result<ParsedArguments> parseArgumentList(const std::string& text);
/// The words of a launch as a shell splits them: comment lines dropped, `\` continuations joined,
/// quotes grouping (and removed). `unterminated`, when given, says whether a quote was left open (the
/// open word is kept).
[[nodiscard]] std::vector<std::string> shellWords(const std::string& text, bool* unterminated = nullptr);

/// Megatron-LM pretrain_gpt.py on `worldSize` processes. Empty when the arguments would start.
[[nodiscard]] std::vector<ExportProblem> checkMegatronArguments(const std::string& text, const Json& schema,
                                                                std::int64_t worldSize);

/// A DeepSpeed config for `plan` (the data-parallel size Megatron-DeepSpeed gives DeepSpeed).
[[nodiscard]] std::vector<ExportProblem> checkDeepSpeedConfig(const Json& config, const Json& schema, const Plan& plan);

/// Every check that applies to an export of `plan` in `format` (Megatron-LM, DeepSpeed, Colossal-AI,
/// torchrun, SLURM), with the schemas loaded from data/export-schemas/. Errors: a schema that cannot be read.
[[nodiscard]] Result<std::vector<ExportProblem>> checkExport(const Plan& plan, ExportFormat format, const std::string& text);

/// The keyword arguments of a Python call's body (`tp_size=2, precision="bf16", ...`): comments dropped,
/// strings unquoted, nested brackets kept whole.
[[nodiscard]] std::map<std::string, std::string> pythonKeywordArguments(const std::string& callBody);

/// A Colossal-AI HybridParallelPlugin / MoeHybridParallelPlugin call in Python source, for `worldSize`
/// processes: parameters the plugin takes, their values, and its constructor's checks.
[[nodiscard]] std::vector<ExportProblem> checkColossalAiPlugin(const std::string& source, const Json& schema,
                                                               std::int64_t worldSize);

/// A launch script's `#SBATCH` lines and its torchrun invocation, against sbatch's and torchrun's options.
[[nodiscard]] std::vector<ExportProblem> checkLaunchScript(const std::string& script, const Json& torchrunSchema,
                                                           const Json& sbatchSchema);

}  // namespace colo::planner
