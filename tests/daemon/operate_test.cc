// Operating the daemon as gpuslice.service does, against the real binary: readiness and
// reloads over the sd_notify protocol, `systemctl reload` (SIGHUP) with a bad and a good file,
// the config's version in the API, the config in force across restarts (and a file edited
// while the daemon was down), and an older state directory migrated at start.
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store/schema.h"
#include "testing/run_program.h"
#include "tests/daemon/harness.h"

namespace gpuslice::testing_e2e {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// systemd's end of the notify protocol: a datagram socket; each message is one datagram.
class NotifyListener {
 public:
  explicit NotifyListener(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    ::unlink(path.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~NotifyListener() { ::close(fd_); ::unlink(path_.c_str()); }
  std::string Next() {
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "(nothing within 10s)";
  }

 private:
  std::string path_;
  int fd_ = -1;
};

json Config(DaemonHarness& h) {
  auto r = h.Client().Get("/v1/config");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : json::object();
}

void WriteConfig(const DaemonHarness& h, const std::string& toml) {
  std::ofstream(h.dir() + "/gpuslice.toml.tmp") << toml;
  fs::rename(h.dir() + "/gpuslice.toml.tmp", h.dir() + "/gpuslice.toml");
}

// Runs the gpuslice binary with exactly `args` (no --socket added, unlike DaemonHarness::Cli).
int RunGpuslice(const DaemonHarness& h, const std::vector<std::string>& args, std::string* out) {
  std::vector<std::string> full = {Binary()};
  full.insert(full.end(), args.begin(), args.end());
  return testing::RunProgram(full, out, -1, h.dir());
}

const char* kWithDebugWithoutTraining = R"toml(
[queues.interactive]
time_limit = "1h"
[queues.debug]
kinds = ["shared"]
default_gpu = "100m"
time_limit = "10m"
[queues.inference]
)toml";

TEST(OperateTest, ReloadsTheConfigAndTellsSystemd) {
  DaemonHarness h("reload", QueuesConfig());
  NotifyListener systemd(h.dir() + "/notify.sock");
  setenv("NOTIFY_SOCKET", (h.dir() + "/notify.sock").c_str(), 1);
  h.Start();
  unsetenv("NOTIFY_SOCKET");
  EXPECT_THAT(systemd.Next(), HasSubstr("READY=1"));
  const json a = Config(h);
  EXPECT_EQ(a["source"], h.dir() + "/gpuslice.toml");
  EXPECT_EQ(a["queues"], json({"inference", "interactive", "training"}));
  EXPECT_THAT(h.ServeLog(), HasSubstr(fmt::format("config {} from {} in force at start",
                                                  a["version"].get<std::string>(), h.dir() + "/gpuslice.toml")));
  EXPECT_THAT(h.ServeLog(), HasSubstr("  interactive: kinds shared,mps"));
  // A job of the queue the good file will remove; it does not see NOTIFY_SOCKET.
  const std::uint64_t job = h.Submit({"sh", "-c", "echo notify=${NOTIFY_SOCKET:-unset}; sleep 60"},
                                     {{"queue", "training"}, {"env", {{"PATH", "/usr/bin:/bin"}}}});
  h.WaitJob(job, Running);
  ASSERT_TRUE(h.WaitLog(job, "notify=unset")) << h.Log(job);

  // A bad file: refused with the file, the key and the value; nothing changes.
  WriteConfig(h, "[queues.interactive]\ntime_limit = \"8x\"\n");
  ASSERT_EQ(kill(h.pid(), SIGHUP), 0);
  EXPECT_THAT(systemd.Next(), HasSubstr("RELOADING=1"));
  const std::string refused = systemd.Next();
  EXPECT_THAT(refused, HasSubstr("READY=1"));
  EXPECT_THAT(refused, HasSubstr("last reload refused"));
  const std::string log = h.ServeLog();
  EXPECT_THAT(log, HasSubstr("reload refused, the config in force is unchanged: " + h.dir() +
                             "/gpuslice.toml: queues.interactive.time_limit = '8x'"));
  EXPECT_EQ(Config(h)["version"], a["version"]);

  // A good file: a queue added, one removed (its running job runs on), the others kept.
  WriteConfig(h, kWithDebugWithoutTraining);
  ASSERT_EQ(kill(h.pid(), SIGHUP), 0);
  EXPECT_THAT(systemd.Next(), HasSubstr("RELOADING=1"));
  EXPECT_THAT(systemd.Next(), HasSubstr("READY=1\nSTATUS=serving config c-"));
  const json b = Config(h);
  EXPECT_NE(b["version"], a["version"]);
  EXPECT_EQ(b["queues"], json({"debug", "inference", "interactive"}));
  EXPECT_EQ(b["retired_queues"], json({"training"}));
  EXPECT_THAT(h.ServeLog(), HasSubstr("queue 'training' is not in " + h.dir() +
                                      "/gpuslice.toml: it takes no new jobs; its 1 running and 0 pending"));
  EXPECT_THAT(h.ServeLog(), HasSubstr("built-in queue(s) training not in"));
  EXPECT_THAT(h.ServeLog(), HasSubstr("  debug: kinds shared (default shared 100m); priority 0; time limit 10m"));
  EXPECT_TRUE(Running(h.Job(job)["job"]));
  std::string out;
  EXPECT_EQ(h.Cli({"submit", "--queue", "debug", "--json", "--", "true"}, &out), 0) << out;
  EXPECT_NE(h.Cli({"submit", "--queue", "training", "--", "true"}, &out), 0);
  EXPECT_THAT(out, HasSubstr("training"));
  EXPECT_EQ(h.Cli({"config", "show"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("config " + b["version"].get<std::string>()));
  EXPECT_THAT(out, HasSubstr("removed queue training: its jobs finish under its last settings"));

  // A restart keeps the config in force (the file is unchanged) and re-adopts the job.
  ASSERT_EQ(kill(h.pid(), SIGTERM), 0);
  EXPECT_THAT(systemd.Next(), HasSubstr("STOPPING=1"));
  h.Terminate();
  h.Start();
  EXPECT_EQ(Config(h)["version"], b["version"]);
  EXPECT_TRUE(Running(h.Job(job)["job"]));
  EXPECT_THAT(h.ServeLog(), Not(HasSubstr("differs from the one in force")));

  // A file edited while the daemon was down is applied at start, as a reload.
  h.Terminate();
  WriteConfig(h, QueuesConfig());
  h.Start();
  EXPECT_EQ(Config(h)["version"], a["version"]);
  EXPECT_THAT(h.ServeLog(), HasSubstr("differs from the one in force when the daemon stopped"));
  EXPECT_EQ(Config(h)["retired_queues"], json::array());
  EXPECT_EQ(h.Cli({"cancel", std::to_string(job)}, &out), 0) << out;
}

// `gpuslice config check`, which ExecReload runs before SIGHUP.
TEST(OperateTest, ConfigCheckNamesTheKeyAndValue) {
  DaemonHarness h("check", QueuesConfig());
  std::string out;
  WriteConfig(h, "[queues.interactive.idle]\nwindow = \"soon\"\n");
  EXPECT_EQ(RunGpuslice(h, {"config", "check", h.dir() + "/gpuslice.toml"}, &out), 2);
  EXPECT_THAT(out, HasSubstr("queues.interactive.idle.window = 'soon'"));
  WriteConfig(h, kWithDebugWithoutTraining);
  EXPECT_EQ(RunGpuslice(h, {"config", "check", h.dir() + "/gpuslice.toml"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr(": valid, config c-"));
  EXPECT_THAT(out, HasSubstr("built-in queue 'training' is not in this file"));
  EXPECT_EQ(RunGpuslice(h, {"config", "check", "--quiet", h.dir() + "/gpuslice.toml"}, &out), 0);
  EXPECT_EQ(out, "");
  EXPECT_EQ(RunGpuslice(h, {"config", "check", h.dir() + "/missing.toml"}, &out), 3);
}

// The state directory of an earlier gpuslice (tests/store/fixtures/v0): the daemon migrates it
// at start and shows its jobs; the one whose processes are gone ends lost; the waiting one is
// placed, and fails to start with the reason: its log and working directory were in the
// fixture's own directory, gone since (paths in a store are absolute).
TEST(OperateTest, AnOlderStateDirectoryIsMigratedAtStart) {
  DaemonHarness h("migrate", QueuesConfig());
  fs::create_directories(h.dir() + "/state");
  fs::permissions(h.dir() + "/state", fs::perms::owner_all);
  fs::copy_file(fs::path(GPUSLICE_SOURCE_DIR) / "tests/store/fixtures/v0/gpuslice.db",
                h.dir() + "/state/gpuslice.db");
  h.Start();
  EXPECT_THAT(h.ServeLog(), HasSubstr("schema version 0 -> " + std::to_string(store::SchemaVersion())));
  auto info = store::ReadSchemaInfo(h.dir() + "/state/gpuslice.db");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->user_version, store::SchemaVersion());
  EXPECT_TRUE(fs::exists(h.dir() + "/state/gpuslice.db.pre-v0"));
  EXPECT_EQ(h.Job(1)["job"]["state"], "succeeded");
  EXPECT_EQ(h.WaitJob(2, Ended)["job"]["state"], "lost");
  const json three = h.WaitJob(3, Ended)["job"];
  EXPECT_EQ(three["state"], "failed");
  EXPECT_THAT(three["reason"].get<std::string>(), HasSubstr("could not start"));
  EXPECT_GT(three["slice"].get<int>(), 0);
  EXPECT_EQ(Config(h)["version"].get<std::string>().substr(0, 2), "c-");
}

// A store from a later gpuslice: serve refuses it at start, saying why, and leaves it alone.
TEST(OperateTest, ANewerStateDirectoryIsRefused) {
  DaemonHarness h("newer", QueuesConfig());
  const std::string db = h.dir() + "/state/gpuslice.db";
  fs::create_directories(h.dir() + "/state");
  fs::permissions(h.dir() + "/state", fs::perms::owner_all);
  fs::copy_file(fs::path(GPUSLICE_SOURCE_DIR) / "tests/store/fixtures/v0/gpuslice.db", db);
  sqlite3* s = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &s), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(s, "PRAGMA user_version = 999", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(s);
  auto bytes = [&] {
    std::ifstream in(db, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string before = bytes();
  std::string out;
  const int rc = RunGpuslice(h, {"serve", "--simulate", "1xH100-80GB", "--state-dir", h.dir() + "/state",
                        "--config", h.dir() + "/gpuslice.toml", "--socket", h.dir() + "/other.sock"},
                       &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("schema version 999, newer than this gpuslice's"));
  EXPECT_THAT(out, HasSubstr("downgrading is not supported"));
  EXPECT_EQ(bytes(), before);
}

}  // namespace
}  // namespace gpuslice::testing_e2e
