// The runs-database inputs of tests/fuzz_regressions/runs_db (kept as SQL), replayed through
// RunsDatabase::open: each refused as the user's error naming the file, and nothing written beside it.
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "colo/executor/runs_db.h"
#include "core/test_support.h"

namespace colo::executor {
namespace {

namespace fs = std::filesystem;

TEST(FuzzRegressions, RunsDatabasesAreRefusedByNameAndLeftAlone) {
  std::vector<fs::path> inputs;
  for (const auto& e : fs::directory_iterator(fs::path(COLO_SOURCE_DIR) / "tests/fuzz_regressions/runs_db")) {
    if (e.path().extension() == ".sql") inputs.push_back(e.path());
  }
  ASSERT_FALSE(inputs.empty());
  for (const auto& input : inputs) {
    SCOPED_TRACE(input.string());
    test::ScratchDir dir;
    const std::string file = dir.path(input.stem().string() + ".sqlite");
    std::ifstream in(input);
    std::stringstream script;
    script << in.rdbuf();
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, script.str().c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    {
      auto runs = RunsDatabase::open(file);
      ASSERT_FALSE(runs.has_value()) << file << " was accepted";
      EXPECT_EQ(exitCodeFor(runs.error().code), 2) << runs.error().toString();
      EXPECT_NE(runs.error().toString().find(file), std::string::npos) << runs.error().toString();
    }
    for (const char* suffix : {"-wal", "-shm", "-journal"}) EXPECT_FALSE(fs::exists(file + suffix)) << suffix;
  }
}

// Reading a good database that a writer left in WAL mode creates nothing beside it; a missing file
// stays missing until a run is added.
TEST(FuzzRegressions, ReadingARunsDatabaseLeavesNothingBesideIt) {
  test::ScratchDir dir;
  const std::string file = dir.path("runs.sqlite");
  {
    auto missing = RunsDatabase::open(file);
    ASSERT_TRUE(missing.has_value()) << missing.error().toString();
    EXPECT_TRUE(missing->runs().empty());
  }
  EXPECT_FALSE(fs::exists(file));
  {
    auto db = RunsDatabase::open(file);
    ASSERT_TRUE(db.has_value());
    RunResult r;
    r.planName = "p";
    r.world = r.tp = r.pp = r.dp = r.vpp = 1;
    r.losses = {1.0};
    ASSERT_TRUE(db->add(r).has_value());
  }
  {
    auto db = RunsDatabase::open(file);
    ASSERT_TRUE(db.has_value()) << db.error().toString();
    EXPECT_EQ(db->runs().size(), 1u);
    for (const char* suffix : {"-wal", "-shm"}) EXPECT_FALSE(fs::exists(file + suffix)) << suffix;
  }
}

}  // namespace
}  // namespace colo::executor
