#pragma once
// The SQLite store's schema and its migrations. A store file says what it is and how old it is
// in its header: PRAGMA application_id = kApplicationId ("gpus"; `file gpuslice.db` shows it)
// and PRAGMA user_version = the number of migration steps applied. Opening a store
// (MigrateSchema) applies the missing steps in ONE transaction, so an upgrade either migrates
// completely or leaves the file as it was; a store newer than this gpuslice (a downgrade) or
// another program's database is refused before anything is written.
//
// Adding to the schema is adding a step at the end of kSteps (schema.cc): never edit a step
// that has shipped, since stores out there have applied it. A step runs inside the
// transaction, so it may not VACUUM or change journal_mode or foreign_keys (SQLite ignores or
// refuses those there).
// Free functions; each call uses only the connection it is given.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

struct sqlite3;

namespace gpuslice::store {

inline constexpr std::int32_t kApplicationId = 0x67707573;  // "gpus"

// The schema version this build writes: the number of steps.
int SchemaVersion();

// What a store file's header says, read without changing it (doctor, tests).
struct SchemaInfo {
  std::int32_t application_id = 0;
  int user_version = 0;
  bool has_tables = false;  // a store made before versioning has tables and version 0
};
Result<SchemaInfo> ReadSchemaInfo(sqlite3* db);
// The same from a path, opened read-only (a missing file is NotFound).
Result<SchemaInfo> ReadSchemaInfo(const std::string& path);

// Refuses (FailedPrecondition, naming the file, its version and this gpuslice's) a store newer
// than SchemaVersion() or with another application id; nothing is written. Call before any
// statement that writes, journal_mode included.
Status CheckSchema(sqlite3* db, std::string_view path);

// Brings the store to SchemaVersion() in one BEGIN IMMEDIATE transaction (re-checking the
// version inside it, against a second opener). `before_migrating`, when the file already held
// an older schema, runs first, outside the transaction (the caller keeps a copy there).
Status MigrateSchema(sqlite3* db, std::string_view path,
                     const std::function<Status(int from_version)>& before_migrating);

}  // namespace gpuslice::store
