#pragma once
/// \file
/// The SQLite runs database: one row per run (plan hash, world, step time, tokens/s, peak memory,
/// predictions) and one per step (loss, time). Written in one transaction per run; a foreign or newer
/// file is refused and left untouched.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/executor/executor.h"

namespace colo::executor {

struct RunRecord {
  std::int64_t id = 0;
  std::string startedAt;
  RunResult result;
  /// The plan that ran (`colo.plan/1`, compact JSON), for calibrating the cost model on this machine's
  /// runs (`colo-profile calibrate --runs runs.db`); empty for runs recorded before schema version 2.
  std::string plan;
};

class RunsDatabase {
 public:
  /// 2 adds each run's plan and tensor memory; a version-1 file is read as it is and migrated in one
  /// transaction by the first add().
  static constexpr int kSchemaVersion = 2;
  /// Opens for reading: read-only and immutable, nothing is created or changed (a missing file reads as
  /// no runs); the first add() creates the file or reopens it for writing. Every row is checked here.
  /// Errors: kIo, kBadInput naming the file and the table.column at fault (not SQLite, not a runs
  /// database, newer, a value of the wrong type or out of range).
  [[nodiscard]] static Result<RunsDatabase> open(const std::string& path);
  RunsDatabase(RunsDatabase&&) noexcept;
  RunsDatabase& operator=(RunsDatabase&&) noexcept;
  ~RunsDatabase();
  /// Adds a run, its steps and the plan it ran (`colo.plan/1` JSON text) in one transaction; returns its id.
  [[nodiscard]] Result<std::int64_t> add(const RunResult& run, const std::string& plan = "");
  [[nodiscard]] std::vector<RunRecord> runs() const;

 private:
  struct Impl;
  explicit RunsDatabase(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace colo::executor
