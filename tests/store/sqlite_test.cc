// SQLite-only properties: committed batches survive kill -9 of the writer; WAL mode is on.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

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

namespace gpuslice::store {
namespace {

std::uintmax_t DbBytes(const std::filesystem::path& dir) {
  std::uintmax_t n = 0;
  for (const char* f : {"gpuslice.db", "gpuslice.db-wal"}) {
    std::error_code ec;
    const auto s = std::filesystem::file_size(dir / f, ec);
    if (!ec) n += s;
  }
  return n;
}

// A user queues jobs carrying a large environment, then cancels them: the environment leaves
// the rows (PrivateCopy) and, once the space is reclaimed, the file itself shrinks.
TEST(SqliteStore, SpaceOfCancelledJobsIsGivenBackToTheFileSystem) {
  auto dir = std::filesystem::temp_directory_path() / ("sqlite_shrink_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  auto s = OpenSqliteStore(dir.string(), Sync::kProcess);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<JobRecord> jobs;
  for (int i = 1; i <= 64; ++i) {
    JobRecord j;
    j.id = JobId(static_cast<std::uint64_t>(i));
    j.argv = {"sleep", "1"};
    j.env = {{"BULK", std::string(256 * 1024, static_cast<char>('a' + i % 26))}};
    jobs.push_back(j);
  }
  ASSERT_TRUE((*s)->Commit(WriteBatch{.jobs = jobs}).ok());
  ASSERT_TRUE((*s)->ReplaceJournal({}).ok());  // checkpoints the WAL into the database
  const auto full = DbBytes(dir);
  EXPECT_GT(full, 16u << 20);
  for (auto& j : jobs) j.state = JobState::kCancelled;
  ASSERT_TRUE((*s)->Commit(WriteBatch{.jobs = jobs}).ok());
  ASSERT_TRUE((*s)->ReplaceJournal({}).ok());
  std::int64_t pages = 0;
  for (int step = 0; step < 1000; ++step) {
    auto n = (*s)->ReclaimSpace(256);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    pages += *n;
    if (*n == 0) break;
  }
  EXPECT_GT(pages, 3000) << "16 MiB of environments are about 4,000 pages";
  ASSERT_TRUE((*s)->ReplaceJournal({}).ok());
  const auto after = DbBytes(dir);
  EXPECT_LT(after, full / 4) << "from " << full << " to " << after << " bytes";
  auto back = (*s)->GetJob(JobId(7));
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_TRUE((*back)->env.empty());
  EXPECT_EQ((*back)->argv, (std::vector<std::string>{"sleep", "1"}));
  std::filesystem::remove_all(dir);
}

// Several read-only connections behind one Store: concurrent readers each get one, none can
// write.
TEST(SqliteStore, ReaderConnectionsServeConcurrentReadsAndRefuseWrites) {
  auto dir = std::filesystem::temp_directory_path() / ("sqlite_readers_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  auto w = OpenSqliteStore(dir.string(), Sync::kProcess);
  ASSERT_TRUE(w.ok());
  WriteBatch b;
  for (int i = 1; i <= 100; ++i) b.events.push_back(EventRecord{0, i, JobId(1), "e", "x"});
  ASSERT_TRUE((*w)->Commit(b).ok());
  auto pool = OpenSqliteReaders(dir.string(), 3);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  std::vector<std::thread> ts;
  std::atomic<int> good{0};
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&] {
      for (int k = 0; k < 20; ++k) {
        auto e = (*pool)->ListEvents(0, JobId(1), 1000);
        if (e.ok() && e->size() == 100) ++good;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(good, 160);
  EXPECT_FALSE((*pool)->Commit(b).ok());
  EXPECT_FALSE(OpenSqliteReaders(dir.string(), 0).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpuslice::store
