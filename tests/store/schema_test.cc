// The store's schema version and migrations (store/schema.h), on real SQLite files: every
// fixture state directory in tests/store/fixtures/ (made by scripts/make-state-fixture with an
// earlier gpuslice) opens and migrates, in one transaction, with a copy kept; a newer store or
// another program's database is refused with nothing written; a failed step changes nothing.
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store/schema.h"
#include "store/store.h"

namespace gpuslice::store {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kFixtures = fs::path(GPUSLICE_SOURCE_DIR) / "tests/store/fixtures";

std::string Bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A fresh copy of a fixture's state directory.
fs::path CopyOf(const std::string& fixture, const std::string& name) {
  fs::path dir = fs::temp_directory_path() / fmt::format("gs_schema_{}_{}_{}", name, fixture, getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all);
  fs::copy_file(kFixtures / fixture / "gpuslice.db", dir / "gpuslice.db");
  return dir;
}

void Exec(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(h);
}

TEST(SchemaTest, EveryFixtureOpensAndIsMigratedWithACopyKept) {
  int fixtures = 0;
  for (const auto& entry : fs::directory_iterator(kFixtures)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    ++fixtures;
    const fs::path dir = CopyOf(name, "open");
    auto before = ReadSchemaInfo((dir / "gpuslice.db").string());
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    ASSERT_LE(before->user_version, SchemaVersion());
    const std::string original = Bytes(dir / "gpuslice.db");
    {
      auto s = OpenSqliteStore(dir.string());
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      // The fixture's jobs, events and journal read back (make-state-fixture's three jobs).
      auto jobs = (*s)->ListJobs();
      ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
      ASSERT_EQ(jobs->size(), 3u);
      EXPECT_EQ((*jobs)[0].state, JobState::kSucceeded);
      EXPECT_EQ((*jobs)[1].state, JobState::kRunning);
      EXPECT_EQ((*jobs)[2].state, JobState::kPending);
      auto journal = (*s)->ReadJournal();
      ASSERT_TRUE(journal.ok());
      EXPECT_FALSE(journal->empty());
      auto seed = (*s)->GetMeta("scheduler_seed");
      ASSERT_TRUE(seed.ok());
      EXPECT_TRUE(seed->has_value());
    }
    auto after = ReadSchemaInfo((dir / "gpuslice.db").string());
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->user_version, SchemaVersion());
    EXPECT_EQ(after->application_id, kApplicationId);
    const fs::path copy = dir / fmt::format("gpuslice.db.pre-v{}", before->user_version);
    if (before->user_version < SchemaVersion()) {
      ASSERT_TRUE(fs::exists(copy));
      EXPECT_EQ(fs::status(copy).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
      auto kept = ReadSchemaInfo(copy.string());
      ASSERT_TRUE(kept.ok());
      EXPECT_EQ(kept->user_version, before->user_version);  // the store as it was
      (void)original;
    }
    // A second open finds nothing to do: no new copy, the same version.
    fs::remove(copy);
    ASSERT_TRUE(OpenSqliteStore(dir.string()).ok());
    EXPECT_FALSE(fs::exists(copy));
    fs::remove_all(dir);
  }
  EXPECT_GE(fixtures, 1);
}

TEST(SchemaTest, ANewStoreIsMarkedWithTheCurrentVersion) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("gs_schema_new_{}", getpid());
  fs::remove_all(dir);
  ASSERT_TRUE(OpenSqliteStore(dir.string()).ok());
  auto info = ReadSchemaInfo((dir / "gpuslice.db").string());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->user_version, SchemaVersion());
  EXPECT_EQ(info->application_id, kApplicationId);
  // Nothing existed to keep a copy of.
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr("pre-v")));
  }
  fs::remove_all(dir);
}

TEST(SchemaTest, ANewerStoreIsRefusedAndLeftAsItWas) {
  const fs::path dir = CopyOf("v0", "newer");
  Exec(dir / "gpuslice.db", fmt::format("PRAGMA user_version = {}", SchemaVersion() + 7));
  const std::string before = Bytes(dir / "gpuslice.db");
  auto s = OpenSqliteStore(dir.string());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr(fmt::format("schema version {}, newer than this "
                                                          "gpuslice's ({})", SchemaVersion() + 7,
                                                          SchemaVersion())));
  EXPECT_THAT(s.status().message(), HasSubstr((dir / "gpuslice.db").string()));
  EXPECT_EQ(Bytes(dir / "gpuslice.db"), before);
  EXPECT_FALSE(fs::exists(dir / "gpuslice.db-wal"));
  fs::remove_all(dir);
}

TEST(SchemaTest, AnotherProgramsDatabaseIsRefused) {
  const fs::path dir = CopyOf("v0", "foreign");
  Exec(dir / "gpuslice.db", "PRAGMA application_id = 1234");
  const std::string before = Bytes(dir / "gpuslice.db");
  auto s = OpenSqliteStore(dir.string());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("not a gpuslice store"));
  EXPECT_EQ(Bytes(dir / "gpuslice.db"), before);
  fs::remove_all(dir);
}

// A step that fails rolls the whole migration back: the old schema and version stay. Here the
// baseline step cannot add the samples' history columns, as a view took the name `samples`.
TEST(SchemaTest, AFailedStepLeavesTheStoreUnchanged) {
  const fs::path dir = CopyOf("v0", "failed");
  Exec(dir / "gpuslice.db",
       "DROP TABLE samples; CREATE VIEW samples AS SELECT 1 AS time, 'x' AS subject, "
       "0 AS util_permille, 0 AS memory_used");
  auto s = OpenSqliteStore(dir.string());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("migration failed, the store is unchanged"));
  EXPECT_THAT(s.status().message(), HasSubstr("step 1"));
  auto info = ReadSchemaInfo((dir / "gpuslice.db").string());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->user_version, 0);
  EXPECT_EQ(info->application_id, 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpuslice::store
