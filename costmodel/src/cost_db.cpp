// SQLite access for the cost database. Reads open the file read-only, so a corrupt or foreign file is
// refused and never modified; writes happen in one transaction per batch.
#include "colo/costmodel/cost_db.h"

#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace colo::costmodel {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

constexpr const char* kSchema = R"sql(
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

}  // namespace

struct CostDatabase::Impl {
  sqlite3* db = nullptr;
  std::string path;
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
  if (sqlite3_open_v2(path.c_str(), &impl->db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    return fail(Error::badInput(std::string("cannot open as SQLite: ") + sqlite3_errmsg(impl->db), path));
  }
  // A file that is not SQLite fails on its first statement.
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v2(impl->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    const std::string why = sqlite3_errmsg(impl->db);
    sqlite3_finalize(stmt);
    if (why.find("no such table") != std::string::npos) {
      return fail(Error::badInput("not a colo cost database (no meta table)", path));
    }
    return fail(Error::badInput("not a readable SQLite cost database: " + why, path));
  }
  std::string version;
  if (sqlite3_step(stmt) == SQLITE_ROW) version = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  sqlite3_finalize(stmt);
  if (version.empty()) return fail(Error::badInput("not a colo cost database (no schema_version)", path));
  if (version != std::to_string(kSchemaVersion)) {
    return fail(Error::badInput("cost database schema version " + version + " (this colo reads version " +
                                    std::to_string(kSchemaVersion) + ")",
                                path));
  }
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
  char* message = nullptr;
  const std::string script = std::string("PRAGMA journal_mode=WAL; BEGIN;") + kSchema +
                             "INSERT INTO meta VALUES ('format', 'colo.costdb'), ('schema_version', '" +
                             std::to_string(kSchemaVersion) + "'); COMMIT;";
  if (sqlite3_exec(impl->db, script.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    const std::string why = message ? message : "unknown";
    sqlite3_free(message);
    return fail(Error::io("cannot write the schema: " + why, path));
  }
  return CostDatabase(std::move(impl));
}

Result<void> CostDatabase::addGemms(const std::string& deviceName, const std::vector<GemmMeasurement>& rows) {
  sqlite3* db = m_impl->db;
  auto exec = [&](const char* sql) { return sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK; };
  auto failure = [&](const std::string& what) {
    const std::string why = sqlite3_errmsg(db);
    exec("ROLLBACK");
    return fail(Error::io(what + ": " + why, m_impl->path));
  };
  if (!exec("BEGIN IMMEDIATE")) return failure("cannot start a transaction");
  sqlite3_stmt* device = nullptr;
  if (sqlite3_prepare_v2(db, "INSERT OR IGNORE INTO devices(name) VALUES (?)", -1, &device, nullptr) != SQLITE_OK) {
    return failure("cannot prepare");
  }
  sqlite3_bind_text(device, 1, deviceName.c_str(), -1, SQLITE_TRANSIENT);
  const int deviceRc = sqlite3_step(device);
  sqlite3_finalize(device);
  if (deviceRc != SQLITE_DONE) return failure("cannot add the device");
  sqlite3_stmt* insert = nullptr;
  if (sqlite3_prepare_v2(db,
                         "INSERT OR REPLACE INTO gemms(device_id, dtype, m, n, k, median_s) "
                         "SELECT id, ?, ?, ?, ?, ? FROM devices WHERE name = ?",
                         -1, &insert, nullptr) != SQLITE_OK) {
    return failure("cannot prepare");
  }
  for (const auto& r : rows) {
    sqlite3_reset(insert);
    sqlite3_bind_text(insert, 1, toString(r.dtype).c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(insert, 2, r.m);
    sqlite3_bind_int64(insert, 3, r.n);
    sqlite3_bind_int64(insert, 4, r.k);
    sqlite3_bind_double(insert, 5, r.seconds);
    sqlite3_bind_text(insert, 6, deviceName.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(insert) != SQLITE_DONE) {
      sqlite3_finalize(insert);
      return failure("cannot add a measurement");
    }
  }
  sqlite3_finalize(insert);
  if (!exec("COMMIT")) return failure("cannot commit");
  return {};
}

std::vector<GemmMeasurement> CostDatabase::gemmsFor(const std::string& gpuName) const {
  std::vector<GemmMeasurement> out;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(m_impl->db,
                         "SELECT d.name, g.dtype, g.m, g.n, g.k, g.median_s FROM gemms g JOIN devices d ON d.id = g.device_id",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return out;
  }
  const std::string wanted = lower(gpuName);
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    const std::string device = lower(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
    if (device.find(wanted) == std::string::npos && wanted.find(device) == std::string::npos) continue;
    auto dtype = parseDType(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 1)));
    if (!dtype) continue;
    out.push_back({sqlite3_column_int64(stmt, 2), sqlite3_column_int64(stmt, 3), sqlite3_column_int64(stmt, 4), *dtype,
                   sqlite3_column_double(stmt, 5)});
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

GemmTable::GemmTable(std::vector<GemmMeasurement> rows, DType dtype) {
  for (auto& r : rows) {
    if (r.dtype == dtype && r.m > 0 && r.n > 0 && r.k > 0 && r.seconds > 0) m_rows.push_back(r);
  }
}

}  // namespace colo::costmodel
