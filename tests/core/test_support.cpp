#include "core/test_support.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <random>

namespace colo::test {

std::string dataFile(const std::string& relative) { return std::string(COLO_SOURCE_DIR) + "/data/" + relative; }

ScratchDir::ScratchDir() {
  std::random_device rd;
  m_dir = std::filesystem::temp_directory_path() / ("colo-test-" + std::to_string(rd()) + std::to_string(rd()));
  std::filesystem::create_directories(m_dir);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(m_dir, ec);
}

std::string ScratchDir::path(const std::string& name) const { return (m_dir / name).string(); }

std::string ScratchDir::write(const std::string& name, const std::string& text) const {
  const auto p = path(name);
  std::filesystem::create_directories(std::filesystem::path(p).parent_path());
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

ProgramOutput runProgram(const std::string& program, const std::string& arguments) {
  ScratchDir dir;
  const std::string errFile = dir.path("stderr");
  const std::string command = std::string(COLO_BIN_DIR) + "/" + program + " " + arguments + " 2>" + errFile;
  ProgramOutput r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  const int status = pclose(pipe);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(errFile);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

Json loadJson(const std::string& file) {
  auto j = readJsonFile(file);
  EXPECT_TRUE(j.has_value()) << (j ? "" : j.error().toString());
  return j ? *j : Json();
}

Model loadModelOrFail(const std::string& file) {
  auto m = loadModel(file);
  if (!m) ADD_FAILURE() << m.error().toString();
  return m ? *m : Model{};
}

ClusterSpec loadClusterOrFail(const std::string& file) {
  auto c = loadCluster(file);
  if (!c) ADD_FAILURE() << c.error().toString();
  return c ? *c : ClusterSpec{};
}

}  // namespace colo::test
