#pragma once
// The subcommands of colo-plan. Each takes its arguments (after the subcommand name) and returns
// the process exit code: 0 ok, 2 bad input (one line on stderr), 1 internal error.

#include "colo/costmodel/run_calibration.h"
#include <ostream>
#include <string>
#include <vector>

#include "args.h"
#include "colo/core/cluster.h"
#include "colo/core/error.h"
#include "colo/core/plan.h"
#include "colo/planner/autoparallel.h"
#include "colo/planner/budget.h"

namespace colo::app {

int runInspect(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runValidate(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runEvaluate(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runSearch(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runCompare(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runCheck(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runExport(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runImport(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runAutoParallel(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runList(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);

/// --precision, or without it the cluster's default (bf16 where the GPU has it, else fp16; bf16 with no
/// cluster). Errors: kBadInput naming --precision.
[[nodiscard]] Result<DType> precisionOption(const Args& args, const ClusterSpec* cluster);

/// "name (N GPUs)", or the name alone when it already says its size ("... (scaled to 8 GPUs)").
[[nodiscard]] std::string clusterLabel(const ClusterSpec& cluster);

/// Lines naming the published runs of `plan`'s model on its kind of GPU (the shipped validation rows),
/// each with the measured step and MFU, colo's prediction for that run, and how `plan` differs from
/// it; empty when there are none.
[[nodiscard]] std::string publishedRunsOf(const Plan& plan);

/// The summary and per-operator tables of an operator plan (autoparallel, evaluate --plan).
void printOperatorPlan(const planner::OperatorPlan& plan, std::ostream& out);
void printOperatorBlocks(const planner::OperatorPlan& plan, std::ostream& out);

/// Prints `error` as one line on `err` and returns its exit code.
int reportError(const Error& error, std::ostream& err);

/// The --calibration FILE of evaluate and search (colo-profile calibrate), which must have been fitted on
/// the cluster's GPU. Errors: kBadInput/kIo naming the file.
[[nodiscard]] Result<costmodel::RunCalibration> loadCalibration(const std::string& file, const ClusterSpec& cluster);

/// The training-budget options evaluate, search and compare share (--train-tokens, --price-per-gpu-hour,
/// --deadline-days), for their option lists.
[[nodiscard]] std::vector<OptionSpec> budgetOptions();
/// Reads them; a price or deadline without --train-tokens is an error naming the option.
[[nodiscard]] Result<planner::TrainingBudget> budgetOption(const Args& args);

}  // namespace colo::app
