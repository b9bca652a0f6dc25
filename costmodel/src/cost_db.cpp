// SQLite access for the cost database. Reads open the file read-only and immutable (no journal, no
// -wal/-shm files beside it), check every row once, and refuse a corrupt or foreign file without
// modifying it; writes happen in one transaction per batch.
#include "colo/costmodel/cost_db.h"

#include <sqlite3.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>

namespace colo::costmodel {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Version 1.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE devices(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,          -- e.g. "NVIDIA H100 80GB HBM3" or "cpu: AMD EPYC ..."
  fingerprint TEXT NOT NULL DEFAULT '' -- driver/library versions, clocks
);
CREATE TABLE gemms(
  device_id INTEGER NOT NULL REFERENCES devices(id),
  dtype TEXT NOT NULL,
  m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL,
  median_s REAL NOT NULL CHECK (median_s > 0),
  spread_s REAL NOT NULL DEFAULT 0,
  repetitions INTEGER NOT NULL DEFAULT 1,
  measured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  PRIMARY KEY (device_id, dtype, m, n, k)
);
)sql";

// Version 2 adds non-GEMM kernels and collectives.
constexpr const char* kMigrationV2 = R"sql(
CREATE TABLE kernels(
  device_id INTEGER NOT NULL REFERENCES devices(id),
  op TEXT NOT NULL, dtype TEXT NOT NULL, shape TEXT NOT NULL, impl TEXT NOT NULL DEFAULT '',
  median_s REAL NOT NULL CHECK (median_s > 0),
  spread_s REAL NOT NULL DEFAULT 0,
  repetitions INTEGER NOT NULL DEFAULT 1,
  measured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  PRIMARY KEY (device_id, op, dtype, shape, impl)
);
CREATE TABLE collectives(
  device_id INTEGER NOT NULL REFERENCES devices(id),
  op TEXT NOT NULL, backend TEXT NOT NULL, world INTEGER NOT NULL CHECK (world > 0),
  link_level TEXT NOT NULL, bytes INTEGER NOT NULL CHECK (bytes >= 0),
  median_s REAL NOT NULL CHECK (median_s > 0),
  spread_s REAL NOT NULL DEFAULT 0,
  repetitions INTEGER NOT NULL DEFAULT 1,
  measured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  PRIMARY KEY (device_id, op, backend, world, link_level, bytes)
);
UPDATE meta SET value = '2' WHERE key = 'schema_version';
)sql";

// Version 3 adds host-device copies.
constexpr const char* kMigrationV3 = R"sql(
CREATE TABLE copies(
  device_id INTEGER NOT NULL REFERENCES devices(id),
  direction TEXT NOT NULL CHECK (direction IN ('h2d', 'd2h')),
  pinned INTEGER NOT NULL CHECK (pinned IN (0, 1)),
  bytes INTEGER NOT NULL CHECK (bytes > 0),
  median_s REAL NOT NULL CHECK (median_s > 0),
  spread_s REAL NOT NULL DEFAULT 0,
  repetitions INTEGER NOT NULL DEFAULT 1,
  measured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  PRIMARY KEY (device_id, direction, pinned, bytes)
);
UPDATE meta SET value = '3' WHERE key = 'schema_version';
)sql";

// One meta value: nullopt when the key is absent; an error (the SQLite reason) when the table cannot be
// read, "no meta table" when there is none.
Result<std::optional<std::string>> readMeta(sqlite3* db, const std::string& path, const char* key) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?", -1, &stmt, nullptr) != SQLITE_OK) {
    const std::string why = sqlite3_errmsg(db);
    sqlite3_finalize(stmt);
    if (why.find("no such table") != std::string::npos) {
      return fail(Error::badInput("not a colo cost database (no meta table)", path));
    }
    return fail(Error::badInput("not a readable SQLite cost database: " + why, path));
  }
  sqlite3_bind_text(stmt, 1, key, -1, SQLITE_STATIC);
  std::optional<std::string> value;
  if (sqlite3_step(stmt) == SQLITE_ROW) {
    const auto* text = sqlite3_column_text(stmt, 0);
    value = text ? reinterpret_cast<const char*>(text) : "";
  }
  sqlite3_finalize(stmt);
  return value;
}

// Reads meta.schema_version and, when the file has one, meta.format (every version writes 'colo.costdb':
// another colo database, a runs database's 'colo.runs', is named as what it is). Errors name the file and
// never write.
Result<int> readVersion(sqlite3* db, const std::string& path) {
  auto stored = readMeta(db, path, "schema_version");
  if (!stored) return fail(stored.error());
  if (!stored->has_value()) return fail(Error::badInput("not a colo cost database (no schema_version)", path));
  const std::string version = **stored;
  if (version.empty() || version.size() > 4 || version.find_first_not_of("0123456789") != std::string::npos) {
    return fail(Error::badInput("must be a whole number from 1 to " + std::to_string(CostDatabase::kSchemaVersion) +
                                    ", got '" + version.substr(0, 40) + "'",
                                path, "meta.schema_version"));
  }
  const int v = std::stoi(version);
  if (v > CostDatabase::kSchemaVersion) {
    return fail(Error::badInput("cost database schema version " + version + " is newer than this colo reads (" +
                                    std::to_string(CostDatabase::kSchemaVersion) + ")",
                                path));
  }
  if (v < 1) return fail(Error::badInput("cost database schema version " + version + " is not valid", path));
  auto format = readMeta(db, path, "format");
  if (!format) return fail(format.error());
  if (format->has_value() && **format != "colo.costdb") {
    return fail(Error::badInput("not a colo cost database: its format is '" + (**format).substr(0, 40) + "', not 'colo.costdb'", path,
                                "meta.format"));
  }
  return v;
}

// A text column, "" for NULL (sqlite3_column_text returns a null pointer then).
std::string columnText(sqlite3_stmt* stmt, int column) {
  const auto* text = sqlite3_column_text(stmt, column);
  return text ? reinterpret_cast<const char*>(text) : "";
}

bool exec(sqlite3* db, const std::string& sql, std::string* why = nullptr) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) == SQLITE_OK) return true;
  if (why) *why = message ? message : sqlite3_errmsg(db);
  sqlite3_free(message);
  return false;
}

// A SQLite URI that opens `path` read-only and immutable: no lock, no journal, no -wal or -shm file is
// created beside it. When a -wal file exists (a writer has the database open, or crashed), immutable
// would ignore its contents; the plain read-only open then reads them, and creates nothing new.
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

// What every value of one column must be. Checked once on open, so that the lookups, the evaluator
// and every program that prints a figure see only finite, positive, bounded numbers and real text.
struct ColumnRule {
  int minVersion;
  const char* table;
  const char* column;
  const char* valid;  // SQL condition on the column
  const char* expected;
};

#define COLO_SECONDS(c) "typeof(" c ") IN ('real', 'integer') AND " c " > 0 AND " c " < 1e6"
#define COLO_SPREAD(c) "typeof(" c ") IN ('real', 'integer') AND " c " >= 0 AND " c " < 1e6"
#define COLO_DTYPE(c) "typeof(" c ") = 'text' AND " c " IN ('fp32', 'tf32', 'fp16', 'bf16', 'fp8')"
#define COLO_TEXT(c) "typeof(" c ") = 'text' AND length(" c ") BETWEEN 1 AND 256"
#define COLO_COUNT(c, lo, hi) "typeof(" c ") = 'integer' AND " c " BETWEEN " lo " AND " hi

constexpr ColumnRule kRules[] = {
    {1, "devices", "id", "typeof(id) = 'integer'", "an integer id"},
    {1, "devices", "name", COLO_TEXT("name"), "a device name of 1 to 256 characters"},
    {1, "devices", "fingerprint", "typeof(fingerprint) = 'text' AND length(fingerprint) <= 4096", "text"},
    {1, "gemms", "device_id", "device_id IN (SELECT id FROM devices)", "the id of a device"},
    {1, "gemms", "dtype", COLO_DTYPE("dtype"), "one of fp32, tf32, fp16, bf16, fp8"},
    {1, "gemms", "m", COLO_COUNT("m", "1", "4294967296"), "an integer from 1 to 2^32"},
    {1, "gemms", "n", COLO_COUNT("n", "1", "4294967296"), "an integer from 1 to 2^32"},
    {1, "gemms", "k", COLO_COUNT("k", "1", "4294967296"), "an integer from 1 to 2^32"},
    {1, "gemms", "median_s", COLO_SECONDS("median_s"), "a finite number of seconds above 0 and below 1e6"},
    {1, "gemms", "spread_s", COLO_SPREAD("spread_s"), "a finite number of seconds from 0 to 1e6"},
    {1, "gemms", "repetitions", COLO_COUNT("repetitions", "1", "2147483647"), "a positive integer"},
    {2, "kernels", "device_id", "device_id IN (SELECT id FROM devices)", "the id of a device"},
    {2, "kernels", "op", COLO_TEXT("op"), "an op name of 1 to 256 characters"},
    {2, "kernels", "dtype", COLO_DTYPE("dtype"), "one of fp32, tf32, fp16, bf16, fp8"},
    {2, "kernels", "shape", "typeof(shape) = 'text' AND length(shape) <= 64 AND shape GLOB '[0-9]*x[0-9]*'",
     "a shape <elements>x<width>"},
    {2, "kernels", "impl", "typeof(impl) = 'text' AND length(impl) <= 256", "text"},
    {2, "kernels", "median_s", COLO_SECONDS("median_s"), "a finite number of seconds above 0 and below 1e6"},
    {2, "kernels", "spread_s", COLO_SPREAD("spread_s"), "a finite number of seconds from 0 to 1e6"},
    {2, "kernels", "repetitions", COLO_COUNT("repetitions", "1", "2147483647"), "a positive integer"},
    {2, "collectives", "device_id", "device_id IN (SELECT id FROM devices)", "the id of a device"},
    {2, "collectives", "op", COLO_TEXT("op"), "a collective name of 1 to 256 characters"},
    {2, "collectives", "backend", COLO_TEXT("backend"), "a backend name of 1 to 256 characters"},
    {2, "collectives", "world", COLO_COUNT("world", "1", "1048576"), "an integer from 1 to 2^20"},
    {2, "collectives", "link_level", COLO_TEXT("link_level"), "a link level name of 1 to 256 characters"},
    {2, "collectives", "bytes", COLO_COUNT("bytes", "0", "1125899906842624"), "an integer from 0 to 2^50"},
    {2, "collectives", "median_s", COLO_SECONDS("median_s"), "a finite number of seconds above 0 and below 1e6"},
    {2, "collectives", "spread_s", COLO_SPREAD("spread_s"), "a finite number of seconds from 0 to 1e6"},
    {2, "collectives", "repetitions", COLO_COUNT("repetitions", "1", "2147483647"), "a positive integer"},
    {3, "copies", "device_id", "device_id IN (SELECT id FROM devices)", "the id of a device"},
    {3, "copies", "direction", "typeof(direction) = 'text' AND direction IN ('h2d', 'd2h')", "h2d or d2h"},
    {3, "copies", "pinned", "typeof(pinned) = 'integer' AND pinned IN (0, 1)", "0 or 1"},
    {3, "copies", "bytes", COLO_COUNT("bytes", "1", "1125899906842624"), "an integer from 1 to 2^50"},
    {3, "copies", "median_s", COLO_SECONDS("median_s"), "a finite number of seconds above 0 and below 1e6"},
    {3, "copies", "spread_s", COLO_SPREAD("spread_s"), "a finite number of seconds from 0 to 1e6"},
    {3, "copies", "repetitions", COLO_COUNT("repetitions", "1", "2147483647"), "a positive integer"},
};

#undef COLO_SECONDS
#undef COLO_SPREAD
#undef COLO_DTYPE
#undef COLO_TEXT
#undef COLO_COUNT

// Runs `sql` (selecting a row id and a quoted value) and turns its first row into an error at `where`.
Result<void> firstViolation(sqlite3* db, const std::string& path, const std::string& where, const std::string& sql,
                            const std::string& expected) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    const std::string why = sqlite3_errmsg(db);
    sqlite3_finalize(stmt);
    return fail(Error::badInput("not a readable colo cost database table: " + why, path, where));
  }
  const int rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) {
    const auto* value = sqlite3_column_text(stmt, 1);
    std::string shown = value ? reinterpret_cast<const char*>(value) : "NULL";
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    const std::string row = std::to_string(sqlite3_column_int64(stmt, 0));
    sqlite3_finalize(stmt);
    return fail(Error::badInput("must be " + expected + ", got " + shown + " (row " + row + ")", path, where));
  }
  const std::string why = rc == SQLITE_DONE ? "" : sqlite3_errmsg(db);
  sqlite3_finalize(stmt);
  if (!why.empty()) return fail(Error::badInput("not a readable SQLite cost database: " + why, path, where));
  return {};
}

// Every rule of the file's version, then the keys the lookups rely on being unique.
Result<void> checkContents(sqlite3* db, const std::string& path, int version) {
  for (const auto& rule : kRules) {
    if (rule.minVersion > version) continue;
    const std::string where = std::string(rule.table) + "." + rule.column;
    const std::string sql = std::string("SELECT rowid, quote(") + rule.column + ") FROM " + rule.table + " WHERE NOT (" +
                            rule.valid + ") OR " + rule.column + " IS NULL LIMIT 1";
    if (auto r = firstViolation(db, path, where, sql, rule.expected); !r) return r;
  }
  // Duplicate devices (a file written by something else) would make every per-device query repeat per
  // copy: quadratic loading, and measurements counted twice.
  if (auto r = firstViolation(db, path, "devices.name",
                              "SELECT min(rowid), quote(name) FROM devices GROUP BY name HAVING count(*) > 1 LIMIT 1",
                              "unique (each device once)");
      !r) {
    return r;
  }
  return firstViolation(db, path, "devices.id",
                        "SELECT min(rowid), quote(id) FROM devices GROUP BY id HAVING count(*) > 1 LIMIT 1",
                        "unique (each id once)");
}

}  // namespace

struct CostDatabase::Impl {
  sqlite3* db = nullptr;
  std::string path;
  int version = 0;
  int migratedFrom = 0;
  ~Impl() {
    if (db) sqlite3_close(db);
  }
};

CostDatabase::CostDatabase(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
CostDatabase::CostDatabase(CostDatabase&&) noexcept = default;
CostDatabase& CostDatabase::operator=(CostDatabase&&) noexcept = default;
CostDatabase::~CostDatabase() = default;

const std::string& CostDatabase::path() const { return m_impl->path; }

Result<CostDatabase> CostDatabase::open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return fail(Error::io("no such cost database", path));
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  if (openForReading(path, &impl->db) != SQLITE_OK) {
    return fail(Error::badInput(std::string("cannot open as SQLite: ") + sqlite3_errmsg(impl->db), path));
  }
  // A file that is not SQLite fails on its first statement.
  auto version = readVersion(impl->db, path);
  if (!version) return fail(version.error());
  impl->version = *version;
  if (auto valid = checkContents(impl->db, path, *version); !valid) return fail(valid.error());
  return CostDatabase(std::move(impl));
}

Result<CostDatabase> CostDatabase::create(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return fail(Error::badInput("refusing to overwrite an existing file", path));
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  if (sqlite3_open_v2(path.c_str(), &impl->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    return fail(Error::io(std::string("cannot create: ") + sqlite3_errmsg(impl->db), path));
  }
  std::string why;
  const std::string script = std::string("PRAGMA journal_mode=WAL; BEGIN;") + kSchemaV1 +
                             "INSERT INTO meta VALUES ('format', 'colo.costdb'), ('schema_version', '1');" + kMigrationV2 +
                             kMigrationV3 + "COMMIT;";
  if (!exec(impl->db, script, &why)) return fail(Error::io("cannot write the schema: " + why, path));
  impl->version = kSchemaVersion;
  return CostDatabase(std::move(impl));
}

Result<CostDatabase> CostDatabase::openForWrite(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return create(path);
  {
    // Check it read-only first: a foreign file must not be touched, not even by a journal.
    auto probe = open(path);
    if (!probe) return fail(probe.error());
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  if (sqlite3_open_v2(path.c_str(), &impl->db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    return fail(Error::io(std::string("cannot open for writing: ") + sqlite3_errmsg(impl->db), path));
  }
  auto version = readVersion(impl->db, path);
  if (!version) return fail(version.error());
  std::string why;
  if (!exec(impl->db, "PRAGMA journal_mode=WAL;", &why)) return fail(Error::io("cannot enable WAL: " + why, path));
  // Every step from the file's version to this one in one transaction: all or nothing.
  if (*version < kSchemaVersion) {
    std::string script = "BEGIN IMMEDIATE;";
    if (*version < 2) script += kMigrationV2;
    if (*version < 3) script += kMigrationV3;
    script += "COMMIT;";
    if (!exec(impl->db, script, &why)) {
      exec(impl->db, "ROLLBACK");
      return fail(Error::io("cannot migrate the schema to version " + std::to_string(kSchemaVersion) + ": " + why, path));
    }
    impl->migratedFrom = *version;
  }
  impl->version = kSchemaVersion;
  return CostDatabase(std::move(impl));
}

int CostDatabase::schemaVersion() const { return m_impl->version; }

int CostDatabase::migratedFrom() const { return m_impl->migratedFrom; }

namespace {

// One batch of rows in one transaction: the device first, then every row through one prepared
// statement; any failure rolls the whole batch back, keeping what earlier batches committed.
template <class Row, class EnsureDevice, class Bind>
Result<void> insertBatch(sqlite3* db, const std::string& path, EnsureDevice&& ensureDevice, const char* sql,
                         const std::vector<Row>& rows, Bind&& bind, const char* what) {
  auto failure = [&](const std::string& step) {
    const std::string why = sqlite3_errmsg(db);
    exec(db, "ROLLBACK");
    return fail(Error::io(step + ": " + why, path));
  };
  if (!exec(db, "BEGIN IMMEDIATE")) return failure("cannot start a transaction");
  if (!ensureDevice()) return failure("cannot add the device");
  sqlite3_stmt* insert = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &insert, nullptr) != SQLITE_OK) return failure("cannot prepare");
  for (const auto& r : rows) {
    sqlite3_reset(insert);
    bind(insert, r);
    if (sqlite3_step(insert) != SQLITE_DONE) {
      sqlite3_finalize(insert);
      return failure(std::string("cannot add ") + what);
    }
  }
  sqlite3_finalize(insert);
  if (!exec(db, "COMMIT")) return failure("cannot commit");
  return {};
}

void bindText(sqlite3_stmt* stmt, int index, const std::string& text) {
  sqlite3_bind_text(stmt, index, text.c_str(), -1, SQLITE_TRANSIENT);
}

}  // namespace

Result<void> CostDatabase::addGemms(const std::string& deviceName, const std::vector<GemmMeasurement>& rows,
                                    const std::string& fingerprint) {
  return insertBatch(
      m_impl->db, m_impl->path, [&] { return ensureDevice(deviceName, fingerprint); },
      "INSERT OR REPLACE INTO gemms(device_id, dtype, m, n, k, median_s, spread_s, repetitions) SELECT id, ?, ?, ?, ?, ?, ?, ? "
      "FROM devices WHERE name = ?",
      rows,
      [&](sqlite3_stmt* st, const GemmMeasurement& r) {
        bindText(st, 1, toString(r.dtype));
        sqlite3_bind_int64(st, 2, r.m);
        sqlite3_bind_int64(st, 3, r.n);
        sqlite3_bind_int64(st, 4, r.k);
        sqlite3_bind_double(st, 5, r.seconds);
        sqlite3_bind_double(st, 6, r.spreadSeconds);
        sqlite3_bind_int64(st, 7, r.repetitions);
        bindText(st, 8, deviceName);
      },
      "a measurement");
}

bool CostDatabase::ensureDevice(const std::string& name, const std::string& fingerprint) {
  sqlite3_stmt* device = nullptr;
  if (sqlite3_prepare_v2(m_impl->db, "INSERT OR IGNORE INTO devices(name, fingerprint) VALUES (?, '')", -1, &device, nullptr) !=
      SQLITE_OK) {
    return false;
  }
  sqlite3_bind_text(device, 1, name.c_str(), -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(device);
  sqlite3_finalize(device);
  return rc == SQLITE_DONE && addFingerprint(name, fingerprint);
}

namespace {

// `history` (fingerprints one a line, the most recently written last) with `fingerprint`'s lines moved
// or added to the end, dropping the first lines past what the schema allows a fingerprint (4 KiB).
std::string withFingerprint(const std::string& history, const std::string& fingerprint) {
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start < text.size()) {
      const std::size_t end = std::min(text.find('\n', start), text.size());
      if (end > start) out.push_back(text.substr(start, end - start));
      start = end + 1;
    }
    return out;
  };
  std::vector<std::string> all = lines(history);
  for (auto& line : lines(fingerprint)) {
    all.erase(std::remove(all.begin(), all.end(), line), all.end());
    all.push_back(std::move(line));
  }
  auto joined = [&all] {
    std::string text;
    for (const auto& line : all) text += (text.empty() ? "" : "\n") + line;
    return text;
  };
  std::string text = joined();
  while (text.size() > 4096 && all.size() > 1) {
    all.erase(all.begin());
    text = joined();
  }
  return text.substr(0, 4096);
}

}  // namespace

bool CostDatabase::addFingerprint(const std::string& name, const std::string& fingerprint) {
  // A device's rows may come from several runs (threads, library versions): each run's fingerprint is
  // kept, not only the last writer's.
  if (fingerprint.empty()) return true;
  const auto history = readFingerprint(name);
  if (!history) return false;  // never overwrite a history that could not be read
  const std::string updated = withFingerprint(*history, fingerprint);
  if (updated == *history) return true;
  sqlite3_stmt* update = nullptr;
  if (sqlite3_prepare_v2(m_impl->db, "UPDATE devices SET fingerprint = ? WHERE name = ?", -1, &update, nullptr) != SQLITE_OK) {
    return false;
  }
  sqlite3_bind_text(update, 1, updated.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(update, 2, name.c_str(), -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(update);
  sqlite3_finalize(update);
  return rc == SQLITE_DONE;
}

std::optional<std::string> CostDatabase::readFingerprint(const std::string& name) const {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(m_impl->db, "SELECT fingerprint FROM devices WHERE name = ?", -1, &stmt, nullptr) != SQLITE_OK) {
    return std::nullopt;
  }
  sqlite3_bind_text(stmt, 1, name.c_str(), -1, SQLITE_TRANSIENT);
  std::optional<std::string> out;
  const int rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) {
    const auto* text = sqlite3_column_text(stmt, 0);
    out = text ? reinterpret_cast<const char*>(text) : "";
  } else if (rc == SQLITE_DONE) {
    out = "";  // no such device yet
  }
  sqlite3_finalize(stmt);
  return out;
}

std::string CostDatabase::fingerprintOf(const std::string& deviceName) const { return readFingerprint(deviceName).value_or(""); }

Result<void> CostDatabase::addKernels(const std::string& deviceName, const std::vector<KernelMeasurement>& rows,
                                   const std::string& fingerprint) {
  if (m_impl->version < 2) return fail(Error::badInput("kernels need schema version 2; open with openForWrite", m_impl->path));
  return insertBatch(
      m_impl->db, m_impl->path, [&] { return ensureDevice(deviceName, fingerprint); },
      "INSERT OR REPLACE INTO kernels(device_id, op, dtype, shape, impl, median_s, spread_s, repetitions) "
      "SELECT id, ?, ?, ?, ?, ?, ?, ? FROM devices WHERE name = ?",
      rows,
      [&](sqlite3_stmt* st, const KernelMeasurement& r) {
        bindText(st, 1, r.op);
        bindText(st, 2, toString(r.dtype));
        bindText(st, 3, r.shape);
        bindText(st, 4, r.impl);
        sqlite3_bind_double(st, 5, r.seconds);
        sqlite3_bind_double(st, 6, r.spreadSeconds);
        sqlite3_bind_int64(st, 7, r.repetitions);
        bindText(st, 8, deviceName);
      },
      "a kernel measurement");
}

Result<void> CostDatabase::addCollectives(const std::string& deviceName, const std::vector<CollectiveMeasurement>& rows,
                                   const std::string& fingerprint) {
  if (m_impl->version < 2) return fail(Error::badInput("collectives need schema version 2; open with openForWrite", m_impl->path));
  return insertBatch(
      m_impl->db, m_impl->path, [&] { return ensureDevice(deviceName, fingerprint); },
      "INSERT OR REPLACE INTO collectives(device_id, op, backend, world, link_level, bytes, median_s, spread_s, repetitions) "
      "SELECT id, ?, ?, ?, ?, ?, ?, ?, ? FROM devices WHERE name = ?",
      rows,
      [&](sqlite3_stmt* st, const CollectiveMeasurement& r) {
        bindText(st, 1, r.op);
        bindText(st, 2, r.backend);
        sqlite3_bind_int64(st, 3, r.world);
        bindText(st, 4, r.linkLevel);
        sqlite3_bind_int64(st, 5, r.bytes);
        sqlite3_bind_double(st, 6, r.seconds);
        sqlite3_bind_double(st, 7, r.spreadSeconds);
        sqlite3_bind_int64(st, 8, r.repetitions);
        bindText(st, 9, deviceName);
      },
      "a collective measurement");
}

Result<void> CostDatabase::addCopies(const std::string& deviceName, const std::vector<CopyMeasurement>& rows,
                                   const std::string& fingerprint) {
  if (m_impl->version < 3) return fail(Error::badInput("copies need schema version 3; open with openForWrite", m_impl->path));
  return insertBatch(
      m_impl->db, m_impl->path, [&] { return ensureDevice(deviceName, fingerprint); },
      "INSERT OR REPLACE INTO copies(device_id, direction, pinned, bytes, median_s, spread_s, repetitions) "
      "SELECT id, ?, ?, ?, ?, ?, ? FROM devices WHERE name = ?",
      rows,
      [&](sqlite3_stmt* st, const CopyMeasurement& r) {
        bindText(st, 1, r.direction);
        sqlite3_bind_int(st, 2, r.pinned ? 1 : 0);
        sqlite3_bind_int64(st, 3, r.bytes);
        sqlite3_bind_double(st, 4, r.seconds);
        sqlite3_bind_double(st, 5, r.spreadSeconds);
        sqlite3_bind_int64(st, 6, r.repetitions);
        bindText(st, 7, deviceName);
      },
      "a copy measurement");
}

bool CostDatabase::hasGemm(const std::string& deviceName, DType dtype, std::int64_t m, std::int64_t n, std::int64_t k) const {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(m_impl->db,
                         "SELECT 1 FROM gemms g JOIN devices d ON d.id = g.device_id WHERE d.name = ? AND g.dtype = ? "
                         "AND g.m = ? AND g.n = ? AND g.k = ?",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return false;
  }
  sqlite3_bind_text(stmt, 1, deviceName.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(stmt, 2, toString(dtype).c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(stmt, 3, m);
  sqlite3_bind_int64(stmt, 4, n);
  sqlite3_bind_int64(stmt, 5, k);
  const bool found = sqlite3_step(stmt) == SQLITE_ROW;
  sqlite3_finalize(stmt);
  return found;
}

std::vector<KernelMeasurement> CostDatabase::kernelsFor(const std::string& deviceName) const {
  std::vector<KernelMeasurement> out;
  if (m_impl->version < 2) return out;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(m_impl->db,
                         "SELECT k.op, k.dtype, k.shape, k.impl, k.median_s, k.spread_s, k.repetitions FROM kernels k "
                         "JOIN devices d ON d.id = k.device_id WHERE d.name = ? ORDER BY k.op, k.shape, k.impl",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return out;
  }
  sqlite3_bind_text(stmt, 1, deviceName.c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    auto dtype = parseDType(columnText(stmt, 1));
    out.push_back({columnText(stmt, 0), dtype.value_or(DType::kFp32),
                   columnText(stmt, 2),
                   columnText(stmt, 3), sqlite3_column_double(stmt, 4),
                   sqlite3_column_double(stmt, 5), sqlite3_column_int64(stmt, 6)});
  }
  sqlite3_finalize(stmt);
  return out;
}

std::vector<CollectiveMeasurement> CostDatabase::collectivesFor(const std::string& deviceName) const {
  std::vector<CollectiveMeasurement> out;
  if (m_impl->version < 2) return out;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(m_impl->db,
                         "SELECT c.op, c.backend, c.world, c.link_level, c.bytes, c.median_s, c.spread_s, c.repetitions "
                         "FROM collectives c JOIN devices d ON d.id = c.device_id WHERE d.name = ? ORDER BY c.op, c.bytes",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return out;
  }
  sqlite3_bind_text(stmt, 1, deviceName.c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    out.push_back({columnText(stmt, 0),
                   columnText(stmt, 1), sqlite3_column_int64(stmt, 2),
                   columnText(stmt, 3), sqlite3_column_int64(stmt, 4),
                   sqlite3_column_double(stmt, 5), sqlite3_column_double(stmt, 6), sqlite3_column_int64(stmt, 7)});
  }
  sqlite3_finalize(stmt);
  return out;
}

std::vector<CopyMeasurement> CostDatabase::copiesFor(const std::string& deviceName) const {
  std::vector<CopyMeasurement> out;
  if (m_impl->version < 3) return out;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(m_impl->db,
                         "SELECT c.direction, c.pinned, c.bytes, c.median_s, c.spread_s, c.repetitions FROM copies c "
                         "JOIN devices d ON d.id = c.device_id WHERE d.name = ? ORDER BY c.direction, c.pinned, c.bytes",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return out;
  }
  sqlite3_bind_text(stmt, 1, deviceName.c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    out.push_back({columnText(stmt, 0), sqlite3_column_int(stmt, 1) != 0,
                   sqlite3_column_int64(stmt, 2), sqlite3_column_double(stmt, 3), sqlite3_column_double(stmt, 4),
                   sqlite3_column_int64(stmt, 5)});
  }
  sqlite3_finalize(stmt);
  return out;
}

namespace {

std::vector<std::string> words(const std::string& name) {
  std::vector<std::string> out;
  std::string word;
  for (const char c : lower(name) + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += c;
    } else if (!word.empty()) {
      out.push_back(std::move(word));
      word.clear();
    }
  }
  return out;
}

bool hasDigit(const std::string& w) { return std::any_of(w.begin(), w.end(), [](unsigned char c) { return std::isdigit(c); }); }
bool hasAlpha(const std::string& w) { return std::any_of(w.begin(), w.end(), [](unsigned char c) { return std::isalpha(c); }); }
bool isMemory(const std::string& w) { return w.size() > 2 && w.ends_with("gb") && std::isdigit(static_cast<unsigned char>(w.front())); }

// The GPU's model among a name's words: the first with letters and digits that is no memory size or
// memory kind ("h100", "a100", "gb200"), else the first with digits ("4090").
std::string modelWord(const std::vector<std::string>& ws) {
  for (const auto& w : ws) {
    if (hasDigit(w) && hasAlpha(w) && !isMemory(w) && !w.starts_with("hbm") && !w.starts_with("sxm")) return w;
  }
  for (const auto& w : ws) {
    if (hasDigit(w) && !isMemory(w)) return w;
  }
  return {};
}

std::string memoryWord(const std::vector<std::string>& ws) {
  for (const auto& w : ws) {
    if (isMemory(w)) return w;
  }
  return {};
}

std::string formFactor(const std::vector<std::string>& ws) {
  for (const auto& w : ws) {
    if (w == "pcie") return "pcie";
    if (w.starts_with("sxm")) return "sxm";
  }
  return {};
}

}  // namespace

bool deviceMatchesGpu(const std::string& device, const std::string& gpu) {
  const std::string d = lower(device), g = lower(gpu);
  if (d.find(g) != std::string::npos || g.find(d) != std::string::npos) return true;
  const auto dw = words(device), gw = words(gpu);
  const std::string model = modelWord(dw);
  if (model.empty() || std::find(gw.begin(), gw.end(), model) == gw.end()) return false;
  const std::string dm = memoryWord(dw), gm = memoryWord(gw), df = formFactor(dw), gf = formFactor(gw);
  if (!dm.empty() && !gm.empty() && dm != gm) return false;
  return df.empty() || gf.empty() || df == gf;
}

std::vector<std::string> CostDatabase::devicesMatching(const std::string& gpuName) const {
  std::vector<std::string> out;
  for (auto& name : devices()) {
    if (deviceMatchesGpu(name, gpuName)) out.push_back(std::move(name));
  }
  return out;
}

std::vector<std::string> CostDatabase::devices() const {
  std::vector<std::string> out;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(m_impl->db, "SELECT name FROM devices ORDER BY name", -1, &stmt, nullptr) != SQLITE_OK) return out;
  while (sqlite3_step(stmt) == SQLITE_ROW) out.emplace_back(columnText(stmt, 0));
  sqlite3_finalize(stmt);
  return out;
}

Result<std::int64_t> CostDatabase::merge(const std::string& otherPath) {
  // Refuses foreign, corrupt or newer files before anything is written; version 1 files have GEMMs only.
  auto other = open(otherPath);
  if (!other) return fail(other.error());
  const int otherVersion = other->schemaVersion();
  sqlite3* db = m_impl->db;
  std::string why;
  auto quoted = [](const std::string& p) {
    std::string q = "'";
    for (const char c : p) q += c == '\'' ? std::string("''") : std::string(1, c);
    return q + "'";
  };
  const auto before = sqlite3_total_changes(db);
  std::string script = "ATTACH DATABASE " + quoted(otherPath) + " AS other; BEGIN IMMEDIATE;"
                       "INSERT OR IGNORE INTO devices(name, fingerprint) SELECT name, fingerprint FROM other.devices;"
                       "INSERT OR IGNORE INTO gemms(device_id, dtype, m, n, k, median_s, spread_s, repetitions, measured_at) "
                       "SELECT d.id, g.dtype, g.m, g.n, g.k, g.median_s, g.spread_s, g.repetitions, g.measured_at "
                       "FROM other.gemms g JOIN other.devices od ON od.id = g.device_id JOIN devices d ON d.name = od.name;";
  if (otherVersion >= 2) {
    script += "INSERT OR IGNORE INTO kernels(device_id, op, dtype, shape, impl, median_s, spread_s, repetitions, measured_at) "
              "SELECT d.id, k.op, k.dtype, k.shape, k.impl, k.median_s, k.spread_s, k.repetitions, k.measured_at "
              "FROM other.kernels k JOIN other.devices od ON od.id = k.device_id JOIN devices d ON d.name = od.name;"
              "INSERT OR IGNORE INTO collectives(device_id, op, backend, world, link_level, bytes, median_s, spread_s, "
              "repetitions, measured_at) SELECT d.id, c.op, c.backend, c.world, c.link_level, c.bytes, c.median_s, "
              "c.spread_s, c.repetitions, c.measured_at FROM other.collectives c JOIN other.devices od ON od.id = c.device_id "
              "JOIN devices d ON d.name = od.name;";
  }
  if (otherVersion >= 3) {
    script += "INSERT OR IGNORE INTO copies(device_id, direction, pinned, bytes, median_s, spread_s, repetitions, measured_at) "
              "SELECT d.id, c.direction, c.pinned, c.bytes, c.median_s, c.spread_s, c.repetitions, c.measured_at "
              "FROM other.copies c JOIN other.devices od ON od.id = c.device_id JOIN devices d ON d.name = od.name;";
  }
  // A device both files hold keeps both files' fingerprints, in the same transaction.
  bool fingerprints = exec(db, script, &why);
  const auto added = sqlite3_total_changes(db) - before;  // rows, not the fingerprints updated below
  if (fingerprints) {
    sqlite3_stmt* stmt = nullptr;
    fingerprints = sqlite3_prepare_v2(db, "SELECT name, fingerprint FROM other.devices", -1, &stmt, nullptr) == SQLITE_OK;
    std::vector<std::pair<std::string, std::string>> theirs;
    while (fingerprints && sqlite3_step(stmt) == SQLITE_ROW) {
      const auto* name = sqlite3_column_text(stmt, 0);
      const auto* fp = sqlite3_column_text(stmt, 1);
      theirs.emplace_back(name ? reinterpret_cast<const char*>(name) : "", fp ? reinterpret_cast<const char*>(fp) : "");
    }
    sqlite3_finalize(stmt);
    for (const auto& [name, fp] : theirs) fingerprints = fingerprints && addFingerprint(name, fp);
    if (!fingerprints && why.empty()) why = sqlite3_errmsg(db);
  }
  if (!fingerprints || !exec(db, "COMMIT;", &why)) {
    exec(db, "ROLLBACK");
    exec(db, "DETACH DATABASE other");
    return fail(Error::io("merge failed: " + why, m_impl->path));
  }
  exec(db, "DETACH DATABASE other");
  return static_cast<std::int64_t>(added);
}

std::vector<GemmMeasurement> CostDatabase::gemmsFor(const std::string& gpuName) const {
  return gemmsWhere([&gpuName](const std::string& device) { return deviceMatchesGpu(device, gpuName); });
}

std::vector<GemmMeasurement> CostDatabase::gemmsOfDevice(const std::string& deviceName) const {
  return gemmsWhere([&deviceName](const std::string& device) { return device == deviceName; });
}

std::vector<GemmMeasurement> CostDatabase::gemmsWhere(const std::function<bool(const std::string&)>& device) const {
  std::vector<GemmMeasurement> out;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(m_impl->db,
                         "SELECT d.name, g.dtype, g.m, g.n, g.k, g.median_s, g.spread_s, g.repetitions FROM gemms g JOIN devices d ON d.id = g.device_id",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return out;
  }
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    if (!device(columnText(stmt, 0))) continue;
    auto dtype = parseDType(columnText(stmt, 1));
    if (!dtype) continue;
    out.push_back({sqlite3_column_int64(stmt, 2), sqlite3_column_int64(stmt, 3), sqlite3_column_int64(stmt, 4), *dtype,
                   sqlite3_column_double(stmt, 5), sqlite3_column_double(stmt, 6), sqlite3_column_int64(stmt, 7)});
  }
  sqlite3_finalize(stmt);
  return out;
}

std::string CostDatabase::hash() const {
  std::uint64_t h = 1469598103934665603ULL;
  for (const auto& r : gemmsFor("")) {
    for (const double v : {static_cast<double>(r.m), static_cast<double>(r.n), static_cast<double>(r.k), r.seconds}) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(&v);
      for (std::size_t i = 0; i < sizeof v; ++i) {
        h ^= bytes[i];
        h *= 1099511628211ULL;
      }
    }
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

std::string kernelShape(std::int64_t elements, std::int64_t width) {
  return std::to_string(elements) + "x" + std::to_string(width);
}

bool isColoImplementation(const std::string& impl) { return impl.rfind("colo", 0) == 0; }

KernelTable::KernelTable(const std::vector<KernelMeasurement>& rows, DType dtype) {
  // One row per (op, shape): where a device holds two implementations of a kernel, the one colo-run runs.
  // The profiler records colo's own kernel only where colo-run can run it on that device, so its row
  // wins over LibTorch's; between two of the same kind, the first (kernelsFor orders by implementation).
  std::map<std::pair<std::string, std::string>, std::pair<std::size_t, bool>> seen;  // -> row, colo's
  for (const auto& r : rows) {
    if (r.dtype != dtype || r.seconds <= 0) continue;
    const auto x = r.shape.find('x');
    if (x == std::string::npos) continue;
    char* end = nullptr;
    const double elements = std::strtod(r.shape.c_str(), &end);
    const long long width = std::strtoll(r.shape.c_str() + x + 1, nullptr, 10);
    if (elements <= 0) continue;
    const bool colo = isColoImplementation(r.impl);
    const auto [it, inserted] = seen.try_emplace({r.op, r.shape}, m_rows.size(), colo);
    if (inserted) {
      m_rows.push_back({r.op, elements, width, r.seconds});
    } else if (colo && !it->second.second) {
      m_rows[it->second.first].seconds = r.seconds;
      it->second.second = true;
    }
  }
}

std::optional<std::pair<double, LookupSource>> KernelTable::lookup(const std::string& key, double elements,
                                                                   std::int64_t width) const {
  const Row* best = nullptr;
  double bestDistance = 0;
  for (const auto& r : m_rows) {
    if (r.key != key || r.width != width) continue;
    const double d = std::fabs(std::log(elements / r.elements));
    if (!best || d < bestDistance) {
      best = &r;
      bestDistance = d;
    }
  }
  if (!best || bestDistance > std::log(4.0)) return std::nullopt;
  if (bestDistance < 1e-9) return std::pair{best->seconds, LookupSource::kExact};
  return std::pair{best->seconds * elements / best->elements, LookupSource::kInterpolated};
}

std::optional<std::pair<double, LookupSource>> KernelTable::lookupStreaming(const std::string& key, double elements) const {
  const Row* best = nullptr;
  double bestDistance = 0;
  for (const auto& r : m_rows) {
    if (r.key != key) continue;
    const double d = std::fabs(std::log(elements / r.elements));
    if (!best || d < bestDistance) {
      best = &r;
      bestDistance = d;
    }
  }
  if (!best) return std::nullopt;
  if (bestDistance < 1e-9) return std::pair{best->seconds, LookupSource::kExact};
  return std::pair{best->seconds * elements / best->elements, LookupSource::kInterpolated};
}

GemmTable::GemmTable(std::vector<GemmMeasurement> rows, DType dtype) {
  for (auto& r : rows) {
    if (r.dtype == dtype && r.m > 0 && r.n > 0 && r.k > 0 && r.seconds > 0) m_rows.push_back(r);
  }
}

}  // namespace colo::costmodel
