#include "colo/executor/runs_db.h"

#include <sqlite3.h>

#include <cstdio>
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
  compute_s REAL NOT NULL, wall_s REAL NOT NULL, checkpoint TEXT NOT NULL DEFAULT '',
  plan TEXT NOT NULL DEFAULT '', tensor_memory_bytes REAL NOT NULL DEFAULT 0
);
CREATE TABLE steps(
  run_id INTEGER NOT NULL REFERENCES runs(id),
  step INTEGER NOT NULL, loss REAL NOT NULL, seconds REAL NOT NULL, grad_norm REAL NOT NULL,
  PRIMARY KEY (run_id, step)
);
INSERT INTO meta VALUES ('format', 'colo.runs'), ('schema_version', '2');
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

// Read-only and immutable: reading a runs database leaves no -wal/-shm file beside it. With a -wal file
// present (a run is being recorded) the plain read-only open reads it and creates nothing new.
int openForReading(const std::string& path, sqlite3** db) {
  std::error_code ec;
  if (std::filesystem::exists(path + "-wal", ec)) return sqlite3_open_v2(path.c_str(), db, SQLITE_OPEN_READONLY, nullptr);
  std::string uri = "file:";
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      char escaped[4];
      std::snprintf(escaped, sizeof escaped, "%%%02X", static_cast<unsigned char>(c));
      uri += escaped;
    } else {
      uri += c;
    }
  }
  uri += "?immutable=1";
  return sqlite3_open_v2(uri.c_str(), db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
}

// What every value of one column must be, checked once on open (as the cost database does), so that
// `colo-run runs` prints only real numbers and text.
struct ColumnRule {
  const char* table;
  const char* column;
  const char* valid;
  const char* expected;
};

#define COLO_TEXT(c) "typeof(" c ") = 'text' AND length(" c ") <= 4096"
#define COLO_COUNT(c, lo, hi) "typeof(" c ") = 'integer' AND " c " BETWEEN " lo " AND " hi
#define COLO_AMOUNT(c) "typeof(" c ") IN ('real', 'integer') AND " c " >= 0 AND " c " < 1e18"

constexpr ColumnRule kRules[] = {
    {"runs", "id", "typeof(id) = 'integer'", "an integer id"},
    {"runs", "started_at", COLO_TEXT("started_at"), "text"},
    {"runs", "plan_name", COLO_TEXT("plan_name"), "text"},
    {"runs", "plan_hash", COLO_TEXT("plan_hash"), "text"},
    {"runs", "model", COLO_TEXT("model"), "text"},
    {"runs", "device", COLO_TEXT("device"), "text"},
    {"runs", "backend", COLO_TEXT("backend"), "text"},
    {"runs", "world", COLO_COUNT("world", "1", "1048576"), "an integer from 1 to 2^20"},
    {"runs", "tp", COLO_COUNT("tp", "1", "1048576"), "an integer from 1 to 2^20"},
    {"runs", "pp", COLO_COUNT("pp", "1", "1048576"), "an integer from 1 to 2^20"},
    {"runs", "dp", COLO_COUNT("dp", "1", "1048576"), "an integer from 1 to 2^20"},
    {"runs", "vpp", COLO_COUNT("vpp", "1", "1048576"), "an integer from 1 to 2^20"},
    {"runs", "first_step", COLO_COUNT("first_step", "0", "9007199254740992"), "an integer from 0 to 2^53"},
    {"runs", "tokens_per_step", COLO_COUNT("tokens_per_step", "0", "9007199254740992"), "an integer from 0 to 2^53"},
    {"runs", "step_time_s", COLO_AMOUNT("step_time_s"), "a finite number from 0 to 1e18"},
    {"runs", "tokens_per_s", COLO_AMOUNT("tokens_per_s"), "a finite number from 0 to 1e18"},
    {"runs", "peak_memory_bytes", COLO_AMOUNT("peak_memory_bytes"), "a finite number from 0 to 1e18"},
    {"runs", "predicted_step_time_s", COLO_AMOUNT("predicted_step_time_s"), "a finite number from 0 to 1e18"},
    {"runs", "predicted_peak_memory_bytes", COLO_AMOUNT("predicted_peak_memory_bytes"), "a finite number from 0 to 1e18"},
    {"runs", "compute_s", COLO_AMOUNT("compute_s"), "a finite number from 0 to 1e18"},
    {"runs", "wall_s", COLO_AMOUNT("wall_s"), "a finite number from 0 to 1e18"},
    {"runs", "checkpoint", COLO_TEXT("checkpoint"), "text"},
    {"steps", "run_id", "run_id IN (SELECT id FROM runs)", "the id of a run"},
    {"steps", "step", COLO_COUNT("step", "0", "9007199254740992"), "an integer from 0 to 2^53"},
    // A diverged run records an infinite loss; that is a measurement, shown as it is.
    {"steps", "loss", "typeof(loss) IN ('real', 'integer')", "a number"},
    {"steps", "seconds", COLO_AMOUNT("seconds"), "a finite number from 0 to 1e18"},
    {"steps", "grad_norm", "typeof(grad_norm) IN ('real', 'integer')", "a number"},
};

// Columns of schema version 2.
constexpr ColumnRule kRulesV2[] = {
    {"runs", "plan", "typeof(plan) = 'text' AND length(plan) <= 67108864", "text of at most 64 MiB"},
    {"runs", "tensor_memory_bytes", COLO_AMOUNT("tensor_memory_bytes"), "a finite number from 0 to 1e18"},
};

// Version 1 -> 2: the plan and tensor memory of each run (empty and 0 for the runs already there).
constexpr const char* kMigrateV1 = R"sql(
ALTER TABLE runs ADD COLUMN plan TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN tensor_memory_bytes REAL NOT NULL DEFAULT 0;
UPDATE meta SET value = '2' WHERE key = 'schema_version';
)sql";

#undef COLO_TEXT
#undef COLO_COUNT
#undef COLO_AMOUNT

Result<void> checkContents(sqlite3* db, const std::string& path, int version) {
  std::vector<ColumnRule> rules(std::begin(kRules), std::end(kRules));
  if (version >= 2) rules.insert(rules.end(), std::begin(kRulesV2), std::end(kRulesV2));
  for (const auto& rule : rules) {
    const std::string where = std::string(rule.table) + "." + rule.column;
    const std::string sql = std::string("SELECT rowid, quote(") + rule.column + ") FROM " + rule.table + " WHERE NOT (" +
                            rule.valid + ") OR " + rule.column + " IS NULL LIMIT 1";
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      const std::string why = sqlite3_errmsg(db);
      sqlite3_finalize(st);
      return fail(Error::badInput("not a readable colo runs database table: " + why, path, where));
    }
    const int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
      std::string shown = text(st, 1);
      if (shown.empty() && sqlite3_column_type(st, 1) == SQLITE_NULL) shown = "NULL";
      if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
      const std::string row = std::to_string(sqlite3_column_int64(st, 0));
      sqlite3_finalize(st);
      return fail(Error::badInput("must be " + std::string(rule.expected) + ", got " + shown + " (row " + row + ")", path,
                                  where));
    }
    const std::string why = rc == SQLITE_DONE ? "" : sqlite3_errmsg(db);
    sqlite3_finalize(st);
    if (!why.empty()) return fail(Error::badInput("not a readable SQLite runs database: " + why, path, where));
  }
  return {};
}

}  // namespace

struct RunsDatabase::Impl {
  sqlite3* db = nullptr;
  std::string path;
  bool writable = false;
  int version = RunsDatabase::kSchemaVersion;  // of the file (a new one is written at the current)
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
  // Opening only reads: a missing file stays missing and an existing one untouched (no WAL switch, no
  // -wal/-shm files) until add() writes.
  if (!exists) return RunsDatabase(std::move(impl));
  if (!std::filesystem::is_regular_file(path, ec)) return fail(Error::io("not a regular file", path));
  if (openForReading(path, &impl->db) != SQLITE_OK) return fail(Error::badInput("cannot open as SQLite", path));
  sqlite3_stmt* st = nullptr;
  std::string format, version;
  if (sqlite3_prepare_v2(impl->db, "SELECT key, value FROM meta", -1, &st, nullptr) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      if (text(st, 0) == "format") format = text(st, 1);
      if (text(st, 0) == "schema_version") version = text(st, 1);
    }
  }
  sqlite3_finalize(st);
  if (format != "colo.runs") return fail(Error::badInput("not a colo runs database (meta.format is not colo.runs)", path));
  if (version != "1" && version != "2") {
    return fail(Error::badInput("must be 1 or 2, got '" + version.substr(0, 40) + "'", path, "meta.schema_version"));
  }
  impl->version = version == "1" ? 1 : 2;
  if (auto valid = checkContents(impl->db, path, impl->version); !valid) return fail(valid.error());
  return RunsDatabase(std::move(impl));
}

namespace {

// Reopens for writing on the first add(): creates the file and its schema when missing, and brings a
// version-1 file to version 2 in one transaction.
Result<void> makeWritable(sqlite3*& db, const std::string& path, int& version) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (db) sqlite3_close(db);
  db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    return fail(Error::io(std::string("cannot open: ") + sqlite3_errmsg(db), path));
  }
  sqlite3_busy_timeout(db, 10000);
  std::string why;
  if (!exec(db, "PRAGMA journal_mode=WAL;", &why)) return fail(Error::io("cannot enable WAL: " + why, path));
  if (!exists && !exec(db, std::string("BEGIN;") + kSchema + "COMMIT;", &why)) {
    return fail(Error::io("cannot write the schema: " + why, path));
  }
  if (exists && version == 1) {
    if (!exec(db, std::string("BEGIN IMMEDIATE;") + kMigrateV1 + "COMMIT;", &why)) {
      exec(db, "ROLLBACK");
      return fail(Error::io("cannot bring the runs database to schema version 2: " + why, path));
    }
  }
  version = RunsDatabase::kSchemaVersion;
  return {};
}

}  // namespace

Result<std::int64_t> RunsDatabase::add(const RunResult& r, const std::string& plan) {
  if (!m_impl->writable) {
    if (auto opened = makeWritable(m_impl->db, m_impl->path, m_impl->version); !opened) return fail(opened.error());
    m_impl->writable = true;
  }
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
                         "predicted_peak_memory_bytes, compute_s, wall_s, checkpoint, plan, tensor_memory_bytes) VALUES "
                         "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
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
  sqlite3_bind_text(st, i++, plan.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(st, i++, r.tensorMemoryBytes);
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
  if (!m_impl->db) return out;
  sqlite3_stmt* st = nullptr;
  const std::string sql =
      std::string("SELECT id, started_at, plan_name, plan_hash, model, device, backend, world, tp, pp, dp, vpp, "
                  "first_step, tokens_per_step, step_time_s, tokens_per_s, peak_memory_bytes, predicted_step_time_s, "
                  "predicted_peak_memory_bytes, compute_s, wall_s, checkpoint") +
      (m_impl->version >= 2 ? ", plan, tensor_memory_bytes" : "") + " FROM runs ORDER BY id";
  if (sqlite3_prepare_v2(m_impl->db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
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
    if (m_impl->version >= 2) {
      rec.plan = text(st, 22);
      r.tensorMemoryBytes = sqlite3_column_double(st, 23);
    }
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
