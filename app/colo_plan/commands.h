#pragma once
// The subcommands of colo-plan. Each takes its arguments (after the subcommand name) and returns
// the process exit code: 0 ok, 2 bad input (one line on stderr), 1 internal error.

#include <ostream>
#include <string>
#include <vector>

#include "colo/core/error.h"

namespace colo::app {

int runInspect(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runValidate(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runEvaluate(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runSearch(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runCompare(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runCheck(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runExport(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int runList(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);

/// Prints `error` as one line on `err` and returns its exit code.
int reportError(const Error& error, std::ostream& err);

}  // namespace colo::app
