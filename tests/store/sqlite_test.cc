// SQLite-only properties: committed batches survive kill -9 of the writer; WAL mode is on.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "store/store.h"

namespace gpuslice::store {
namespace {

TEST(SqliteStore, CommittedBatchSurvivesKill9) {
  auto dir = std::filesystem::temp_directory_path() / ("sqlite_kill_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto s = OpenSqliteStore(dir.string());
    if (!s.ok()) _exit(2);
    JobRecord j;
    j.id = JobId(1);
    j.user = "bob";
    j.argv = {"sleep", "1"};
    if (!(*s)->Commit(WriteBatch{.jobs = {j}, .journal = {"submit 1"}}).ok()) _exit(3);
    char c = 'x';
    if (write(ready[1], &c, 1) != 1) _exit(4);
    pause();  // killed here, with the connection still open
    _exit(0);
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  close(ready[0]);

  auto s = OpenSqliteStore(dir.string());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto job = (*s)->GetJob(JobId(1));
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_EQ((*job)->user, "bob");
  EXPECT_EQ(*(*s)->ReadJournal(), std::vector<std::string>{"submit 1"});
  EXPECT_TRUE(std::filesystem::exists(dir / "gpuslice.db-wal"));
  std::filesystem::remove_all(dir);
}

mode_t ModeOf(const std::filesystem::path& p) {
  struct stat sb {};
  EXPECT_EQ(stat(p.c_str(), &sb), 0) << p;
  return sb.st_mode & 07777;
}

std::string Contents(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every job's environment is in the store: nobody but the daemon's user may read it, whatever
// the umask, and an older world-readable database is tightened when opened.
TEST(SqliteStore, StateDirDatabaseAndWalArePrivate) {
  auto dir = std::filesystem::temp_directory_path() / ("sqlite_private_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  mode_t old = umask(022);
  {
    auto s = OpenSqliteStore(dir.string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    JobRecord j;
    j.id = JobId(1);
    j.argv = {"true"};
    ASSERT_TRUE((*s)->Commit(WriteBatch{.jobs = {j}}).ok());
    EXPECT_EQ(ModeOf(dir), 0700u);
    EXPECT_EQ(ModeOf(dir / "gpuslice.db"), 0600u);
    EXPECT_EQ(ModeOf(dir / "gpuslice.db-wal"), 0600u);
    EXPECT_EQ(ModeOf(dir / "gpuslice.db-shm"), 0600u);
  }
  chmod((dir / "gpuslice.db").c_str(), 0644);
  {
    auto s = OpenSqliteStore(dir.string());
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(ModeOf(dir / "gpuslice.db"), 0600u);
  }
  umask(old);
  std::filesystem::remove_all(dir);
}

// Once the job has ended its environment is gone from the file itself, not only from the row
// (secure_delete zeroes the overwritten cell).
TEST(SqliteStore, AnEndedJobsSecretIsNotLeftInTheFile) {
  auto dir = std::filesystem::temp_directory_path() / ("sqlite_secret_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const std::string secret = "ghp_0123456789abcdefSECRET";
  {
    auto s = OpenSqliteStore(dir.string());
    ASSERT_TRUE(s.ok());
    JobRecord j;
    j.id = JobId(1);
    j.argv = {"true"};
    j.env = {{"GITHUB_TOKEN", secret}};
    j.state = JobState::kRunning;
    ASSERT_TRUE((*s)->Commit(WriteBatch{.jobs = {j}}).ok());
    j.state = JobState::kSucceeded;
    ASSERT_TRUE((*s)->Commit(WriteBatch{.jobs = {j}}).ok());
  }  // the last connection checkpoints the WAL into the database and removes it
  EXPECT_FALSE(std::filesystem::exists(dir / "gpuslice.db-wal"));
  EXPECT_EQ(Contents(dir / "gpuslice.db").find(secret), std::string::npos);
  std::filesystem::remove_all(dir);
}

// The report's own connection (OpenSqliteReader): it reads what the writer committed, each
// read from the latest commit, and cannot change anything.
TEST(SqliteStore, AReaderSeesEachCommitAndRefusesWrites) {
  auto dir = std::filesystem::temp_directory_path() / ("sqlite_reader_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(OpenSqliteReader(dir.string()).ok()) << "no database yet: nothing to read";
  auto w = OpenSqliteStore(dir.string(), Sync::kProcess);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  JobRecord j;
  j.id = JobId(1);
  j.user = "bob";
  j.argv = {"true"};
  ASSERT_TRUE((*w)->Commit(WriteBatch{.jobs = {j}}).ok());
  auto r = OpenSqliteReader(dir.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto one = (*r)->ListJobsBrief();
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].user, "bob");
  j.id = JobId(2);
  ASSERT_TRUE((*w)->Commit(WriteBatch{.jobs = {j}, .events = {EventRecord{0, 5, JobId(2), "wait", "{}"}}}).ok());
  auto two = (*r)->ListJobsBrief();
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u) << "a later read sees the later commit";
  auto waits = (*r)->ListEventsOfType("wait", 10);
  ASSERT_TRUE(waits.ok());
  EXPECT_EQ(waits->size(), 1u);
  j.id = JobId(3);
  Status st = (*r)->Commit(WriteBatch{.jobs = {j}});
  EXPECT_FALSE(st.ok()) << "the reader must not write";
  st = (*r)->PutMeta("k", "v");
  EXPECT_FALSE(st.ok());
  auto three = (*w)->GetJob(JobId(3));
  ASSERT_TRUE(three.ok());
  EXPECT_FALSE(three->has_value()) << "nothing changed";
  // The writer's journal compaction (which checkpoints the WAL) still succeeds with a reader open.
  EXPECT_TRUE((*w)->ReplaceJournal({"a", "b"}).ok());
  EXPECT_EQ(*(*w)->ReadJournal(), (std::vector<std::string>{"a", "b"}));
  auto journal = (*r)->ReadJournal();
  ASSERT_TRUE(journal.ok());
  EXPECT_EQ(journal->size(), 2u);
  r->reset();
  w->reset();
  std::filesystem::remove_all(dir);
}

TEST(SqliteStore, UncreatableStateDirIsAnError) {
  auto s = OpenSqliteStore("/proc/gpuslice-cannot-exist");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/proc/gpuslice-cannot-exist"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::store
