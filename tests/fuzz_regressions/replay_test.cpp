// Replays every input the fuzzers (and the fuzzing of issue 14) found, each through the reader it broke:
// each must now be refused as the user's error (exit 2) on one line that names the file. A crash, an
// internal error, an unnamed file or an input that loads after all fails the test.
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <gtest/gtest.h>

#include "colo/core/cluster.h"
#include "colo/core/hf_config.h"
#include "colo/core/model.h"
#include "colo/core/op_graph.h"
#include "colo/core/plan.h"
#include "colo/costmodel/cost_db.h"
#include "core/test_support.h"
#include "colo/planner/export_check.h"
#include "colo/planner/import.h"
#include "validation_harness.h"

namespace colo {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputsOf(const std::string& reader) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(fs::path(COLO_SOURCE_DIR) / "tests/fuzz_regressions" / reader)) {
    if (entry.is_regular_file() && entry.path().extension() != ".md") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string readText(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The property of every replay: refused, exit 2, and the line names the file.
void expectNamedUserError(const Result<void>& result, const std::string& file) {
  ASSERT_FALSE(result.has_value()) << file << " was accepted";
  const Error& e = result.error();
  EXPECT_EQ(exitCodeFor(e.code), 2) << e.toString();
  EXPECT_NE(e.toString().find(file), std::string::npos) << "the error does not name " << file << ": " << e.toString();
}

template <class T>
Result<void> drop(const Result<T>& r) {
  if (!r) return std::unexpected(r.error());
  return {};
}

// Reads a JSON file the way the programs do, then hands the document to `load`.
void replayJson(const std::string& reader, const std::function<Result<void>(const Json&, const std::string&)>& load) {
  const auto inputs = inputsOf(reader);
  ASSERT_FALSE(inputs.empty());
  for (const auto& input : inputs) {
    SCOPED_TRACE(input.string());
    const std::string file = input.string();
    auto document = readJsonFile(file);
    expectNamedUserError(document ? load(*document, file) : Result<void>(std::unexpected(document.error())), file);
  }
}

TEST(FuzzRegressions, ModelFilesAreRefusedByName) {
  replayJson("model", [](const Json& j, const std::string& f) { return drop(modelFromJson(j, f)); });
}

TEST(FuzzRegressions, HfConfigsAreRefusedByName) {
  replayJson("hf_config", [](const Json& j, const std::string& f) { return drop(modelSpecFromHfConfig(j, f)); });
}

TEST(FuzzRegressions, OpGraphsAreRefusedByName) {
  replayJson("op_graph", [](const Json& j, const std::string& f) { return drop(opGraphFromJson(j, f)); });
}

TEST(FuzzRegressions, ClustersAreRefusedByName) {
  replayJson("cluster", [](const Json& j, const std::string& f) { return drop(clusterFromJson(j, f)); });
}

TEST(FuzzRegressions, PlansAreRefusedByName) {
  replayJson("plan", [](const Json& j, const std::string& f) { return drop(planFromJson(j, f)); });
}

// Database regressions are kept as SQL (small, readable, diffable) and built into a file here.
std::string buildDatabase(const test::ScratchDir& dir, const fs::path& script) {
  const std::string file = dir.path(script.stem().string() + ".sqlite");
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  char* message = nullptr;
  EXPECT_EQ(sqlite3_exec(db, readText(script).c_str(), nullptr, nullptr, &message), SQLITE_OK)
      << (message ? message : "");
  sqlite3_free(message);
  sqlite3_close(db);
  return file;
}

TEST(FuzzRegressions, CostDatabasesAreRefusedByNameAndLeftAlone) {
  const auto inputs = inputsOf("cost_db");
  ASSERT_FALSE(inputs.empty());
  for (const auto& input : inputs) {
    SCOPED_TRACE(input.string());
    test::ScratchDir dir;
    const std::string file = buildDatabase(dir, input);
    {
      auto db = costmodel::CostDatabase::open(file);
      expectNamedUserError(drop(db), file);
    }
    for (const char* suffix : {"-wal", "-shm", "-journal"}) EXPECT_FALSE(fs::exists(file + suffix)) << suffix;
  }
}

// colo-validate's rows (public_runs.json) read with the shipped assumptions, and assumptions read with
// the shipped rows.
void replayValidation(const std::string& reader, const std::string& asName, const std::string& shippedOther) {
  const auto inputs = inputsOf(reader);
  ASSERT_FALSE(inputs.empty());
  for (const auto& input : inputs) {
    SCOPED_TRACE(input.string());
    test::ScratchDir dir;
    const std::string file = dir.write(asName, readText(input));
    dir.write(shippedOther, readText(test::dataFile("validation/" + shippedOther)));
    expectNamedUserError(drop(validation::loadCases(fs::path(file).parent_path().string())), file);
  }
}

TEST(FuzzRegressions, ValidationRowsAreRefusedByName) {
  replayValidation("validation", "public_runs.json", "assumptions.json");
}

TEST(FuzzRegressions, ValidationAssumptionsAreRefusedByName) {
  replayValidation("assumptions", "assumptions.json", "public_runs.json");
}

TEST(FuzzRegressions, ImportedLaunchesAreRefusedAsBadInput) {
  // The import target's inputs: the first byte picks the reader (fuzz/fuzz_import.cpp). Under the GCC
  // build with sanitizers (scripts/sanitize.sh) a division by zero or overflow here fails the run.
  auto cluster = loadCluster(test::dataFile("clusters/dgx-h100.json"));
  auto model = loadModel(test::dataFile("models/tiny-llama.json"));
  ASSERT_TRUE(cluster && model);
  for (const auto& file : inputsOf("import")) {
    const std::string bytes = readText(file);
    if (bytes.empty()) continue;
    const std::string text = bytes.substr(1);
    const planner::ImportContext withModel{*cluster, *model, 0, 0};
    Result<Plan> plan = fail(Error::badInput("none"));
    switch (static_cast<unsigned char>(bytes[0]) % 4) {
      case 0: plan = planner::importMegatron(text, withModel); break;
      case 1: plan = planner::importMegatron(text, planner::ImportContext{*cluster, std::nullopt, 0, 0}); break;
      case 2: plan = planner::importTorchtitan(text, withModel); break;
      default: plan = planner::importColossalAi(text, withModel); break;
    }
    if (!plan) {
      EXPECT_EQ(exitCodeFor(plan.error().code), 2) << file << ": " << plan.error().toString();
    }
    // The checks the target runs on the same text must not fail either (their findings are problems).
    const auto schema = [](const char* name) { return *readJsonFile(test::dataFile(std::string("export-schemas/") + name + ".json")); };
    (void)planner::checkMegatronArguments(text, schema("megatron-lm"), 8);
    (void)planner::checkLaunchScript(text, schema("torchrun"), schema("sbatch"));
    (void)planner::checkColossalAiPlugin(text, schema("colossalai"), 8);
  }
}

}  // namespace
}  // namespace colo
