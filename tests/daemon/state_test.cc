// End-to-end, the daemon's state on disk and the state users see: the state directory, store,
// WAL and logs are private; one serve per state directory; the socket path is never taken
// from a live daemon or from a non-socket; devices are checked against the backend at start;
// job logs are capped; warnings, time left and rejections shown are the ones that hold.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/daemon/harness.h"
#include "testing/files.h"

namespace gpuslice::testing_e2e {
namespace {

using gpuslice::testing::Slurp;

namespace fs = std::filesystem;

mode_t ModeOf(const fs::path& p) {
  struct stat sb {};
  EXPECT_EQ(lstat(p.c_str(), &sb), 0) << p;
  return sb.st_mode & 07777;
}

struct Exit {
  int code = -1;       // -1: still running at the deadline (then killed)
  std::string output;  // stdout + stderr
};

// Runs `gpuslice serve ARGS` and waits up to `timeout` for it to exit by itself.
Exit Serve(const std::string& tag, const std::vector<std::string>& args,
           std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  std::string out = (fs::temp_directory_path() / ("gs_state_" + tag + "_" + std::to_string(getpid()) + ".out")).string();
  std::vector<std::string> full = {Binary(), "serve", "--tick", "50ms"};
  full.insert(full.end(), args.begin(), args.end());
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  Exit e;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      e.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  if (e.code == -1) {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
  e.output = Slurp(out);
  fs::remove(out);
  return e;
}

// ---------------------------------------------------------------- private state

TEST(DaemonState, StateDirStoreWalAndLogsArePrivate) {
  DaemonHarness h("private", QueuesConfig());
  h.Start();
  const std::string secret = "hf_TOPSECRET_0123456789";
  auto id = h.Submit({"sh", "-c", "echo out; echo err >&2"},
                     {{"env", {{"PATH", "/usr/bin:/bin"}, {"HF_TOKEN", secret}}}});
  json done = h.WaitJob(id, Ended);
  EXPECT_EQ(done["job"]["state"], "succeeded");
  const fs::path state = h.dir() + "/state";
  EXPECT_EQ(ModeOf(state), 0700u);
  EXPECT_EQ(ModeOf(state / "gpuslice.db"), 0600u);
  EXPECT_EQ(ModeOf(state / "gpuslice.db-wal"), 0600u);
  EXPECT_EQ(ModeOf(state / "logs"), 0700u);
  EXPECT_EQ(ModeOf(state / "logs" / (std::to_string(id) + ".log")), 0600u);
  // The API, which checks the caller, is how a log is read.
  EXPECT_NE(h.Log(id).find("err"), std::string::npos);
  // No view shows the environment, to anyone.
  auto c = h.Client();
  for (const std::string& path : {"/v1/jobs/" + std::to_string(id), std::string("/v1/jobs?state="),
                                  std::string("/v1/events")}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r.ok()) << path;
    EXPECT_EQ(r->dump().find(secret), std::string::npos) << path;
  }
  std::string out;
  EXPECT_EQ(h.Cli({"show", std::to_string(id), "--json"}, &out), 0);
  EXPECT_EQ(out.find(secret), std::string::npos) << out;
  // Once the job has ended the store no longer keeps it: after a clean stop (which folds the
  // WAL into the database) it is in no file of the state directory.
  h.Terminate();
  for (const auto& e : fs::recursive_directory_iterator(state)) {
    if (e.is_regular_file()) {
      EXPECT_EQ(Slurp(e.path()).find(secret), std::string::npos) << e.path();
    }
  }
}

TEST(DaemonState, LooseStateDirIsTightenedAndAForeignOneRefused) {
  DaemonHarness h("tighten", QueuesConfig());
  const fs::path state = h.dir() + "/state";
  fs::create_directories(state / "logs");
  chmod(state.c_str(), 0755);
  std::ofstream(state / "logs" / "old.log") << "an older version's log\n";
  chmod((state / "logs" / "old.log").c_str(), 0644);
  h.Start();
  EXPECT_EQ(ModeOf(state), 0700u);
  EXPECT_EQ(ModeOf(state / "gpuslice.db"), 0600u);
  EXPECT_EQ(ModeOf(state / "logs" / "old.log"), 0600u);
  EXPECT_NE(h.ServeLog().find("tightened"), std::string::npos) << h.ServeLog();
  h.Terminate();

  // A state directory owned by somebody else (who could read or replace the store) is refused.
  const fs::path foreign = h.dir() + "/foreign";
  fs::create_directories(foreign);
  ASSERT_EQ(chown(foreign.c_str(), 65534, 65534), 0);
  Exit e = Serve("foreign", {"--simulate", "1xH100-80GB", "--state-dir", foreign.string(),
                             "--socket", h.dir() + "/foreign.sock"});
  EXPECT_NE(e.code, 0) << e.output;
  EXPECT_NE(e.code, -1) << "should refuse, not run: " << e.output;
  EXPECT_NE(e.output.find(foreign.string()), std::string::npos) << e.output;
  EXPECT_NE(e.output.find("owned by uid 65534"), std::string::npos) << e.output;
  EXPECT_FALSE(fs::exists(foreign / "gpuslice.db"));
}

// MPS clients of every user must reach the pipes, so they cannot be in the 0700 state
// directory; and a link planted where they go is refused, not followed.
TEST(DaemonState, MpsPipesLiveNextToTheSocketAndALinkThereIsRefused) {
  constexpr const char* kMps = R"toml(
[queues.interactive]
kinds = ["mps"]
[queues.training]
[queues.inference]
)toml";
  DaemonHarness h("mps", kMps);
  h.Start();
  auto id = h.Submit({"sh", "-c", "echo $CUDA_MPS_PIPE_DIRECTORY; sleep 60"}, {{"queue", "interactive"}});
  json j = h.WaitJob(id, Running);
  ASSERT_TRUE(h.WaitLog(id, "/mps/"));
  const std::string log = h.Log(id);
  EXPECT_NE(log.find(h.dir() + "/mps/"), std::string::npos) << log;
  EXPECT_EQ(log.find(h.dir() + "/state/"), std::string::npos) << log;
  EXPECT_EQ(ModeOf(h.dir() + "/mps"), 0755u);
  h.Kill9();
  kill(-j["job"]["pid"].get<int>(), SIGKILL);

  DaemonHarness t("mpslink", kMps);
  const fs::path target = t.dir() + "/elsewhere";
  fs::create_directories(target);
  chmod(target.c_str(), 0700);
  fs::create_directory_symlink(target, t.dir() + "/mps");
  t.Start();
  auto bad = t.Submit({"true"}, {{"queue", "interactive"}});
  json b = t.WaitJob(bad, Ended);
  EXPECT_EQ(b["job"]["state"], "failed");
  EXPECT_NE(b["job"]["reason"].get<std::string>().find("refusing to use it"), std::string::npos) << b.dump();
  EXPECT_EQ(ModeOf(target), 0700u) << "the link's target was chmod-ed";
  EXPECT_TRUE(fs::is_empty(target));
}

// ---------------------------------------------------------------- one daemon per state dir

TEST(DaemonState, SecondServeOnTheSameStateDirIsRefusedAndAPendingJobRunsOnce) {
  DaemonHarness h("lock", QueuesConfig());
  h.Start();
  // Job 1 holds every device; job 2 waits, and records each run of itself.
  auto hold = h.Submit({"sleep", "60"}, {{"queue", "training"}, {"gpus", 8}});
  h.WaitJob(hold, Running);
  const std::string runs = h.dir() + "/runs";
  auto pending = h.Submit({"sh", "-c", "echo run >> " + runs}, {{"queue", "training"}, {"gpus", 8}});
  EXPECT_EQ(h.Job(pending)["job"]["state"], "pending");

  Exit e = Serve("second", {"--simulate", "8xH100-80GB", "--state-dir", h.dir() + "/state",
                            "--socket", h.dir() + "/second.sock", "--config",
                            h.dir() + "/gpuslice.toml"});
  EXPECT_NE(e.code, -1) << "a second daemon ran on the same state dir: " << e.output;
  EXPECT_NE(e.code, 0) << e.output;
  EXPECT_NE(e.output.find(h.dir() + "/state"), std::string::npos) << e.output;
  EXPECT_NE(e.output.find("in use by another gpuslice serve (pid "), std::string::npos) << e.output;
  EXPECT_FALSE(fs::exists(h.dir() + "/second.sock"));

  auto c = h.Client();
  ASSERT_TRUE(c.Post("/v1/jobs/" + std::to_string(hold) + "/cancel", json::object()).ok());
  json done = h.WaitJob(pending, Ended, std::chrono::seconds(20));
  EXPECT_EQ(done["job"]["state"], "succeeded");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // a duplicate would show by now
  EXPECT_EQ(Slurp(runs), "run\n");
}

// ---------------------------------------------------------------- the socket path

TEST(DaemonState, SocketPathIsTakenOnlyFromADeadDaemon) {
  DaemonHarness live("sock", QueuesConfig());
  live.Start();
  const std::string base = live.dir();
  auto refused = [&](const std::string& tag, const std::string& path, const std::string& what) {
    Exit e = Serve(tag, {"--simulate", "1xH100-80GB", "--state-dir", base + "/state-" + tag,
                         "--socket", path});
    EXPECT_NE(e.code, -1) << tag << ": serve took " << path << ": " << e.output;
    EXPECT_NE(e.code, 0) << tag << ": " << e.output;
    EXPECT_NE(e.output.find(path), std::string::npos) << tag << ": " << e.output;
    EXPECT_NE(e.output.find(what), std::string::npos) << tag << ": " << e.output;
  };
  // Another live daemon's socket: it keeps answering.
  refused("live", live.socket(), "another daemon is listening there");
  EXPECT_TRUE(live.Client().Get("/v1/health").ok()) << "the live daemon was hijacked";
  // Not sockets: left exactly as they were.
  const std::string file = base + "/precious.txt";
  std::ofstream(file) << "keep me\n";
  refused("file", file, "a regular file is there");
  EXPECT_EQ(Slurp(file), "keep me\n");
  const std::string dir = base + "/adir";
  fs::create_directories(dir);
  refused("dir", dir, "a directory is there");
  EXPECT_TRUE(fs::is_directory(dir));
  const std::string link = base + "/link.sock";
  fs::create_symlink(live.socket(), link);
  refused("link", link, "a symlink is there");
  EXPECT_TRUE(fs::is_symlink(link));

  // A stale socket (its daemon died without removing it) is replaced.
  DaemonHarness stale("stale", QueuesConfig());
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, stale.socket().c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);  // never listened: connect() is refused
  stale.Start();
  EXPECT_TRUE(stale.Client().Get("/v1/health").ok());
  EXPECT_NE(stale.ServeLog().find("removed the stale socket"), std::string::npos) << stale.ServeLog();
}

// ---------------------------------------------------------------- devices at restart

TEST(DaemonState, DevicesThatVanishedWhileDownAreNotSchedulable) {
  DaemonHarness h("devices", QueuesConfig());
  h.Start();
  auto wide = h.Submit({"sleep", "60"}, {{"queue", "training"}, {"gpus", 8}});
  json running = h.WaitJob(wide, Running);
  const int pid = running["job"]["pid"].get<int>();
  ASSERT_GT(pid, 0);
  h.Kill9();

  h.SetSimulate("4xH100-80GB");  // four devices gone while the daemon was down
  h.Start();
  auto c = h.Client();
  auto devs = c.Get("/v1/devices");
  ASSERT_TRUE(devs.ok());
  ASSERT_EQ((*devs)["devices"].size(), 4u) << devs->dump();
  for (const auto& d : (*devs)["devices"]) EXPECT_LT(d["index"].get<int>(), 4);
  // The job on them is stopped and says why; its processes are ended, its slice freed.
  json j = h.WaitJob(wide, Ended);
  EXPECT_EQ(j["job"]["state"], "failed") << j.dump();
  EXPECT_NE(j["job"]["reason"].get<std::string>().find("device lost"), std::string::npos) << j.dump();
  EXPECT_TRUE(j["slice"].is_null());
  for (int i = 0; i < 100 && kill(-pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_NE(kill(-pid, 0), 0) << "the stopped job's processes still run";
  auto ev = c.Get("/v1/events");
  ASSERT_TRUE(ev.ok());
  int gone = 0;
  for (const auto& e : (*ev)["events"]) {
    if (e["type"] == "device") {
      ++gone;
      EXPECT_NE(e["message"].get<std::string>().find("no longer present"), std::string::npos) << e.dump();
    }
  }
  EXPECT_EQ(gone, 4);
  // Nothing is placed on them: 8 devices can never be had now, 4 can.
  auto r8 = c.Post("/v1/jobs", {{"argv", {"true"}}, {"queue", "training"}, {"gpus", 8}, {"cwd", h.dir()}});
  EXPECT_FALSE(r8.ok());
  auto four = h.Submit({"sleep", "60"}, {{"queue", "training"}, {"gpus", 4}});
  json f = h.WaitJob(four, Running);
  for (const auto& u : f["slice"]["devices"]) EXPECT_LT(u.get<int>(), 4);
  auto ok = h.Client().Get("/v1/health");
  EXPECT_TRUE(ok.ok());
  h.Kill9();

  // They come back: added again, schedulable.
  h.SetSimulate("8xH100-80GB");
  h.Start();
  auto back = h.Client().Get("/v1/devices");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)["devices"].size(), 8u);
}

// ---------------------------------------------------------------- the log cap

TEST(DaemonState, AJobsLogIsCappedAndSaysSo) {
  DaemonHarness h("logcap", QueuesConfig(), {"--max-log-size", "64KiB"});
  h.Start();
  // 20 MB written straight into the log, in bursts, then a last line.
  auto id = h.Submit({"sh", "-c",
                      "for i in $(seq 1 40); do head -c 500000 /dev/zero | tr '\\0' x; sleep 0.02; done; "
                      "echo LAST"});
  json done = h.WaitJob(id, Ended, std::chrono::seconds(60));
  EXPECT_EQ(done["job"]["state"], "succeeded");
  const fs::path log = h.dir() + "/state/logs/" + std::to_string(id) + ".log";
  const auto size = fs::file_size(log);
  EXPECT_LE(size, 64u * 1024 + 1024) << "the cap plus its notice and the daemon's lines";
  std::string text = h.Log(id);
  EXPECT_NE(text.find("[gpuslice: log truncated at 65536 bytes"), std::string::npos)
      << text.substr(text.size() > 600 ? text.size() - 600 : 0);
  EXPECT_EQ(text.find("LAST"), std::string::npos) << "output after the cap is discarded";
  EXPECT_EQ(text.rfind("gpuslice: job", 0), 0u) << "the head is kept";
  auto ev = h.Client().Get("/v1/events?job=" + std::to_string(id));
  ASSERT_TRUE(ev.ok());
  EXPECT_NE(ev->dump().find("log truncated at 65536 bytes"), std::string::npos) << ev->dump();
}

TEST(DaemonState, BadMaxLogSizeIsAClearError) {
  Exit e = Serve("badcap", {"--simulate", "1xH100-80GB", "--max-log-size", "lots"});
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_NE(e.output.find("--max-log-size 'lots'"), std::string::npos) << e.output;
}

// ---------------------------------------------------------------- what users see

TEST(DaemonState, AnIdleWarningClearsOnceTheJobIsBusyAgain) {
  DaemonHarness h("unwarn", QueuesConfig({.idle_window = "1s", .idle_grace = "30s"}), {"--simulate-script", DaemonHarness::kScript});
  h.WriteScript({{"jobs", json::object()}});
  h.Start();
  auto id = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  h.WaitJob(id, [](const json& j) { return !j["warning"].get<std::string>().empty(); });
  std::string out;
  EXPECT_EQ(h.Cli({"ps"}, &out), 0);
  EXPECT_NE(out.find("WARNING"), std::string::npos) << out;
  h.WriteScript({{"jobs", {{std::to_string(id), {{"sm", 80}}}}}});  // busy again
  json j = h.WaitJob(id, [](const json& j) { return j["warning"].get<std::string>().empty(); });
  EXPECT_EQ(j["job"]["state"], "running");
  EXPECT_EQ(h.Cli({"ps"}, &out), 0);
  EXPECT_EQ(out.find("WARNING"), std::string::npos) << out;
  auto slices = h.Client().Get("/v1/slices");
  ASSERT_TRUE(slices.ok());
  ASSERT_EQ((*slices)["slices"].size(), 1u);
  EXPECT_EQ((*slices)["slices"][0]["idle_state"], "active");
  EXPECT_TRUE(h.WaitLog(id, "idle warning withdrawn"));
  auto ev = h.Client().Get("/v1/events?job=" + std::to_string(id));
  ASSERT_TRUE(ev.ok());
  EXPECT_NE(ev->dump().find("\"unwarn\""), std::string::npos) << ev->dump();
}

TEST(DaemonState, EndedJobsShowNoTimeLeftAndRejectedOnesNoWait) {
  DaemonHarness h("views", QueuesConfig());
  h.Start();
  auto id = h.Submit({"true"}, {{"queue", "interactive"}, {"time", "30m"}});
  json done = h.WaitJob(id, Ended);
  EXPECT_TRUE(done["job"]["time_left_us"].is_null()) << done.dump();
  std::string out;
  EXPECT_EQ(h.Cli({"show", std::to_string(id)}, &out), 0);
  EXPECT_EQ(out.find("time left"), std::string::npos) << out;

  auto running = h.Submit({"sleep", "60"}, {{"queue", "interactive"}, {"time", "30m"}});
  json r = h.WaitJob(running, Running);
  EXPECT_GT(r["job"]["time_left_us"].get<std::int64_t>(), 0) << r.dump();
  EXPECT_EQ(h.Cli({"show", std::to_string(running)}, &out), 0);
  EXPECT_NE(out.find("time left"), std::string::npos) << out;

  // Can never run: rejected, with the reason, and never "waiting".
  auto rej = h.Client().Post("/v1/jobs", {{"argv", {"true"}}, {"queue", "training"}, {"gpus", 9},
                                          {"cwd", h.dir()}});
  EXPECT_FALSE(rej.ok());
  EXPECT_EQ(h.Cli({"ps", "--all"}, &out), 0);
  std::istringstream lines(out);
  std::string line, row;
  while (std::getline(lines, line)) {
    if (line.find("rejected") != std::string::npos && line.find("training") != std::string::npos) row = line;
  }
  ASSERT_FALSE(row.empty()) << out;
  EXPECT_EQ(row.find("waiting"), std::string::npos) << out;
  EXPECT_NE(out.find("job 3: rejected: "), std::string::npos) << out;
  EXPECT_NE(out.find("no host has 9 devices"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpuslice::testing_e2e
