#include "colo/executor/runs_db.h"

#include <sqlite3.h>

#include <filesystem>

namespace colo::executor {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  started_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  plan_name TEXT NOT NULL, plan_hash TEXT NOT NULL, model TEXT NOT NULL, device TEXT NOT NULL, backend TEXT NOT NULL,
  world INTEGER NOT NULL, tp INTEGER NOT NULL, pp INTEGER NOT NULL, dp INTEGER NOT NULL, vpp INTEGER NOT NULL,
  first_step INTEGER NOT NULL, tokens_per_step INTEGER NOT NULL,
  step_time_s REAL NOT NULL, tokens_per_s REAL NOT NULL, peak_memory_bytes REAL NOT NULL,
  predicted_step_time_s REAL NOT NULL, predicted_peak_memory_bytes REAL NOT NULL,
  compute_s REAL NOT NULL, wall_s REAL NOT NULL, checkpoint TEXT NOT NULL DEFAULT ''
);
CREATE TABLE steps(
  run_id INTEGER NOT NULL REFERENCES runs(id),
  step INTEGER NOT NULL, loss REAL NOT NULL, seconds REAL NOT NULL, grad_norm REAL NOT NULL,
  PRIMARY KEY (run_id, step)
);
INSERT INTO meta VALUES ('format', 'colo.runs'), ('schema_version', '1');
)sql";

bool exec(sqlite3* db, const std::string& sql, std::string* why = nullptr) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) == SQLITE_OK) return true;
  if (why) *why = message ? message : sqlite3_errmsg(db);
  sqlite3_free(message);
  return false;
}

std::string text(sqlite3_stmt* st, int column) {
  const auto* p = sqlite3_column_text(st, column);
  return p ? reinterpret_cast<const char*>(p) : "";
}

}  // namespace

struct RunsDatabase::Impl {
  sqlite3* db = nullptr;
  std::string path;
  ~Impl() {
    if (db) sqlite3_close(db);
  }
};

RunsDatabase::RunsDatabase(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
RunsDatabase::RunsDatabase(RunsDatabase&&) noexcept = default;
RunsDatabase& RunsDatabase::operator=(RunsDatabase&&) noexcept = default;
RunsDatabase::~RunsDatabase() = default;

Result<RunsDatabase> RunsDatabase::open(const std::string& path) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  if (exists) {
    // Check read-only first: a foreign file is never touched.
    sqlite3* probe = nullptr;
    if (sqlite3_open_v2(path.c_str(), &probe, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      sqlite3_close(probe);
      return fail(Error::badInput("cannot open as SQLite", path));
    }
    sqlite3_stmt* st = nullptr;
    std::string format, version;
    if (sqlite3_prepare_v2(probe, "SELECT key, value FROM meta", -1, &st, nullptr) == SQLITE_OK) {
      while (sqlite3_step(st) == SQLITE_ROW) {
        if (text(st, 0) == "format") format = text(st, 1);
        if (text(st, 0) == "schema_version") version = text(st, 1);
      }
    }
    sqlite3_finalize(st);
    sqlite3_close(probe);
    if (format != "colo.runs") return fail(Error::badInput("not a colo runs database (meta.format is not colo.runs)", path));
    if (version != "1") return fail(Error::badInput("runs database schema version " + version + " is not 1", path));
  }
  if (sqlite3_open_v2(path.c_str(), &impl->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    return fail(Error::io(std::string("cannot open: ") + sqlite3_errmsg(impl->db), path));
  }
  sqlite3_busy_timeout(impl->db, 10000);
  std::string why;
  if (!exec(impl->db, "PRAGMA journal_mode=WAL;", &why)) return fail(Error::io("cannot enable WAL: " + why, path));
  if (!exists && !exec(impl->db, std::string("BEGIN;") + kSchema + "COMMIT;", &why)) {
    return fail(Error::io("cannot write the schema: " + why, path));
  }
  return RunsDatabase(std::move(impl));
}

Result<std::int64_t> RunsDatabase::add(const RunResult& r) {
  sqlite3* db = m_impl->db;
  auto failure = [&](const std::string& what) {
    const std::string why = sqlite3_errmsg(db);
    exec(db, "ROLLBACK");
    return fail(Error::io(what + ": " + why, m_impl->path));
  };
  if (!exec(db, "BEGIN IMMEDIATE")) return failure("cannot start a transaction");
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db,
                         "INSERT INTO runs(plan_name, plan_hash, model, device, backend, world, tp, pp, dp, vpp, first_step, "
                         "tokens_per_step, step_time_s, tokens_per_s, peak_memory_bytes, predicted_step_time_s, "
                         "predicted_peak_memory_bytes, compute_s, wall_s, checkpoint) VALUES "
                         "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                         -1, &st, nullptr) != SQLITE_OK) {
    return failure("cannot prepare");
  }
  int i = 1;
  for (const auto* s : {&r.planName, &r.planHash, &r.model, &r.device, &r.backend}) {
    sqlite3_bind_text(st, i++, s->c_str(), -1, SQLITE_TRANSIENT);
  }
  for (const auto v : {r.world, r.tp, r.pp, r.dp, r.vpp, r.firstStep, r.tokensPerStep}) sqlite3_bind_int64(st, i++, v);
  for (const auto v : {r.stepTimeSeconds, r.tokensPerSecond, r.peakMemoryBytes, r.predictedStepTimeSeconds,
                       r.predictedPeakMemoryBytes, r.computeSeconds, r.wallSeconds}) {
    sqlite3_bind_double(st, i++, v);
  }
  sqlite3_bind_text(st, i++, r.checkpoint.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_DONE) {
    sqlite3_finalize(st);
    return failure("cannot add the run");
  }
  sqlite3_finalize(st);
  const std::int64_t id = sqlite3_last_insert_rowid(db);
  if (sqlite3_prepare_v2(db, "INSERT INTO steps(run_id, step, loss, seconds, grad_norm) VALUES (?,?,?,?,?)", -1, &st,
                         nullptr) != SQLITE_OK) {
    return failure("cannot prepare");
  }
  for (std::size_t s = 0; s < r.losses.size(); ++s) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, r.firstStep + static_cast<std::int64_t>(s));
    sqlite3_bind_double(st, 3, r.losses[s]);
    sqlite3_bind_double(st, 4, s < r.stepSeconds.size() ? r.stepSeconds[s] : 0.0);
    sqlite3_bind_double(st, 5, s < r.gradNorms.size() ? r.gradNorms[s] : 0.0);
    if (sqlite3_step(st) != SQLITE_DONE) {
      sqlite3_finalize(st);
      return failure("cannot add a step");
    }
  }
  sqlite3_finalize(st);
  if (!exec(db, "COMMIT")) return failure("cannot commit");
  return id;
}

std::vector<RunRecord> RunsDatabase::runs() const {
  std::vector<RunRecord> out;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(m_impl->db,
                         "SELECT id, started_at, plan_name, plan_hash, model, device, backend, world, tp, pp, dp, vpp, "
                         "first_step, tokens_per_step, step_time_s, tokens_per_s, peak_memory_bytes, predicted_step_time_s, "
                         "predicted_peak_memory_bytes, compute_s, wall_s, checkpoint FROM runs ORDER BY id",
                         -1, &st, nullptr) != SQLITE_OK) {
    return out;
  }
  while (sqlite3_step(st) == SQLITE_ROW) {
    RunRecord rec;
    rec.id = sqlite3_column_int64(st, 0);
    rec.startedAt = text(st, 1);
    RunResult& r = rec.result;
    r.planName = text(st, 2);
    r.planHash = text(st, 3);
    r.model = text(st, 4);
    r.device = text(st, 5);
    r.backend = text(st, 6);
    r.world = sqlite3_column_int64(st, 7);
    r.tp = sqlite3_column_int64(st, 8);
    r.pp = sqlite3_column_int64(st, 9);
    r.dp = sqlite3_column_int64(st, 10);
    r.vpp = sqlite3_column_int64(st, 11);
    r.firstStep = sqlite3_column_int64(st, 12);
    r.tokensPerStep = sqlite3_column_int64(st, 13);
    r.stepTimeSeconds = sqlite3_column_double(st, 14);
    r.tokensPerSecond = sqlite3_column_double(st, 15);
    r.peakMemoryBytes = sqlite3_column_double(st, 16);
    r.predictedStepTimeSeconds = sqlite3_column_double(st, 17);
    r.predictedPeakMemoryBytes = sqlite3_column_double(st, 18);
    r.computeSeconds = sqlite3_column_double(st, 19);
    r.wallSeconds = sqlite3_column_double(st, 20);
    r.checkpoint = text(st, 21);
    out.push_back(std::move(rec));
  }
  sqlite3_finalize(st);
  if (sqlite3_prepare_v2(m_impl->db, "SELECT loss, seconds, grad_norm FROM steps WHERE run_id = ? ORDER BY step", -1, &st,
                         nullptr) != SQLITE_OK) {
    return out;
  }
  for (auto& rec : out) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, rec.id);
    while (sqlite3_step(st) == SQLITE_ROW) {
      rec.result.losses.push_back(sqlite3_column_double(st, 0));
      rec.result.stepSeconds.push_back(sqlite3_column_double(st, 1));
      rec.result.gradNorms.push_back(sqlite3_column_double(st, 2));
    }
  }
  sqlite3_finalize(st);
  return out;
}

}  // namespace colo::executor
