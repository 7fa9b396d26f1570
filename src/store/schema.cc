#include "store/schema.h"

#include <vector>

#include <fmt/format.h>
#include <sqlite3.h>

namespace gpuslice::store {
namespace {

Status Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    Status st = Internal(fmt::format("sqlite: {}", err ? err : sqlite3_errmsg(db)));
    sqlite3_free(err);
    return st;
  }
  return Status::Ok();
}

Result<std::int64_t> QueryInt(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK) {
    return Internal(fmt::format("sqlite: {}: {}", sql, sqlite3_errmsg(db)));
  }
  const int rc = sqlite3_step(st);
  std::int64_t v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    return Internal(fmt::format("sqlite: {}: {}", sql, sqlite3_errmsg(db)));
  }
  return v;
}

// ---- the steps. Step N brings a store from version N-1 to N. Shipped steps never change.

// 1: the schema of gpuslice 0.1.0, the last one without a version. It also completes the stores
// of that version made before the samples' history columns (their old points get span 0:
// reports count them for nothing rather than guess), so every version-0 store ends up alike.
Status Step1Baseline(sqlite3* db) {
  GPUSLICE_RETURN_IF_ERROR(Exec(db, R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id INTEGER PRIMARY KEY, state TEXT NOT NULL, user TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS slices (
  id INTEGER PRIMARY KEY, job INTEGER NOT NULL, active INTEGER NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS slices_active ON slices(active);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL, job INTEGER NOT NULL,
  type TEXT NOT NULL, message TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_job ON events(job, seq);
CREATE TABLE IF NOT EXISTS samples (
  time INTEGER NOT NULL, subject TEXT NOT NULL, util_permille INTEGER NOT NULL,
  memory_used INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS samples_subject ON samples(subject, time);
CREATE TABLE IF NOT EXISTS journal (seq INTEGER PRIMARY KEY AUTOINCREMENT, entry TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
)sql"));
  GPUSLICE_ASSIGN_OR_RETURN(
      std::int64_t has_span,
      QueryInt(db, "SELECT COUNT(*) FROM pragma_table_info('samples') WHERE name = 'span'"));
  if (has_span == 0) {
    for (const char* col : {"span", "known", "idle", "resolution"}) {
      GPUSLICE_RETURN_IF_ERROR(
          Exec(db, fmt::format("ALTER TABLE samples ADD COLUMN {} INTEGER NOT NULL DEFAULT 0", col)));
    }
  }
  // Compaction looks for points finer than a width and older than a time; dropping by age and
  // the reports' range sums use the time index.
  return Exec(db, "CREATE INDEX IF NOT EXISTS samples_resolution ON samples(resolution, time);"
                  "CREATE INDEX IF NOT EXISTS samples_time ON samples(time);");
}

struct Step {
  const char* what;
  Status (*apply)(sqlite3*);
};
const std::vector<Step>& Steps() {
  static const std::vector<Step> kSteps = {
      {"the gpuslice 0.1.0 schema", Step1Baseline},
  };
  return kSteps;
}

std::string Newer(std::string_view path, int version) {
  return fmt::format("{}: the store has schema version {}, newer than this gpuslice's ({}): it was "
                     "written by a later gpuslice; downgrading is not supported (install that "
                     "version again, or move the state directory aside to start afresh)",
                     path, version, SchemaVersion());
}

}  // namespace

int SchemaVersion() { return static_cast<int>(Steps().size()); }

Result<SchemaInfo> ReadSchemaInfo(sqlite3* db) {
  SchemaInfo info;
  GPUSLICE_ASSIGN_OR_RETURN(std::int64_t app, QueryInt(db, "PRAGMA application_id"));
  GPUSLICE_ASSIGN_OR_RETURN(std::int64_t version, QueryInt(db, "PRAGMA user_version"));
  GPUSLICE_ASSIGN_OR_RETURN(std::int64_t tables,
                            QueryInt(db, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'"));
  info.application_id = static_cast<std::int32_t>(app);
  info.user_version = static_cast<int>(version);
  info.has_tables = tables > 0;
  return info;
}

Result<SchemaInfo> ReadSchemaInfo(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  if (rc != SQLITE_OK) {
    Status st = (rc == SQLITE_CANTOPEN ? NotFound("") : Unavailable(""));
    st = Status(st.code(), fmt::format("{}: cannot open: {}", path, db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    return st;
  }
  sqlite3_busy_timeout(db, 2000);
  auto info = ReadSchemaInfo(db);
  sqlite3_close(db);
  if (!info.ok()) return info.status().WithContext(path + ": ");
  return info;
}

Status CheckSchema(sqlite3* db, std::string_view path) {
  GPUSLICE_ASSIGN_OR_RETURN(SchemaInfo info, ReadSchemaInfo(db));
  if (info.application_id != 0 && info.application_id != kApplicationId) {
    return FailedPrecondition(fmt::format(
        "{}: not a gpuslice store (its application id is {:#x}, gpuslice's is {:#x}); nothing was "
        "changed", path, static_cast<std::uint32_t>(info.application_id), kApplicationId));
  }
  if (info.user_version > SchemaVersion()) return FailedPrecondition(Newer(path, info.user_version));
  return Status::Ok();
}

Status MigrateSchema(sqlite3* db, std::string_view path,
                     const std::function<Status(int from_version)>& before_migrating) {
  GPUSLICE_RETURN_IF_ERROR(CheckSchema(db, path));
  GPUSLICE_ASSIGN_OR_RETURN(SchemaInfo info, ReadSchemaInfo(db));
  if (info.user_version == SchemaVersion() && info.application_id == kApplicationId) {
    return Status::Ok();
  }
  if (info.has_tables && before_migrating) GPUSLICE_RETURN_IF_ERROR(before_migrating(info.user_version));
  GPUSLICE_RETURN_IF_ERROR(Exec(db, "BEGIN IMMEDIATE"));
  auto rollback = [&](Status st) {
    (void)Exec(db, "ROLLBACK");
    return st.WithContext(fmt::format("{}: migration failed, the store is unchanged: ", path));
  };
  // Read again under the write lock: another process may have migrated in between.
  auto now = QueryInt(db, "PRAGMA user_version");
  if (!now.ok()) return rollback(now.status());
  if (*now > SchemaVersion()) return rollback(FailedPrecondition(Newer(path, static_cast<int>(*now))));
  for (int v = static_cast<int>(*now); v < SchemaVersion(); ++v) {
    const Step& step = Steps()[static_cast<std::size_t>(v)];
    if (Status st = step.apply(db); !st.ok()) {
      return rollback(st.WithContext(fmt::format("step {} ({}): ", v + 1, step.what)));
    }
  }
  // Both are written in the transaction, so they commit with the steps or not at all.
  if (Status st = Exec(db, fmt::format("PRAGMA application_id = {}; PRAGMA user_version = {}",
                                       kApplicationId, SchemaVersion()));
      !st.ok()) {
    return rollback(st);
  }
  return Exec(db, "COMMIT");
}

}  // namespace gpuslice::store
