#pragma once
// Helpers shared by the test suites: paths to shipped data, scratch folders, and loading shorthands
// that fail the test with the error's text.

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "colo/core/cluster.h"
#include "colo/core/json.h"
#include "colo/core/model.h"

namespace colo::test {

/// A file under the repository's data/ folder.
std::string dataFile(const std::string& relative);

/// A fresh, empty folder for one test, removed when the object goes away.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] std::string path(const std::string& name) const;
  /// Writes `text` to `name` inside the folder and returns the full path.
  std::string write(const std::string& name, const std::string& text) const;

 private:
  std::filesystem::path m_dir;
};

/// What a program printed and how it ended.
struct ProgramOutput {
  int exitCode = -1;
  std::string out;
  std::string err;
};

/// Runs build/bin/`program` with `arguments` (a shell-quoted string), as a user would.
ProgramOutput runProgram(const std::string& program, const std::string& arguments);

Json loadJson(const std::string& file);
Model loadModelOrFail(const std::string& file);
ClusterSpec loadClusterOrFail(const std::string& file);

}  // namespace colo::test
