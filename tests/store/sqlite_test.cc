// SQLite-only properties: committed batches survive kill -9 of the writer; WAL mode is on.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

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

TEST(SqliteStore, UncreatableStateDirIsAnError) {
  auto s = OpenSqliteStore("/proc/gpuslice-cannot-exist");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/proc/gpuslice-cannot-exist"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::store
