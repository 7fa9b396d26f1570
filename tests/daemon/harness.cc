#include "tests/daemon/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "testing/run_program.h"

namespace gpuslice::testing_e2e {

namespace fs = std::filesystem;

namespace {

// Whether `uid` may execute `path` (every directory above it searchable): asked as that user.
bool RunnableBy(const std::string& path, uid_t uid) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) _exit(2);
    _exit(access(path.c_str(), X_OK) == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

// Tests run the CLI as nobody, and the daemon runs jobs as other users, whose processes load
// the exec stub's and interposer's files. In a clone those users cannot enter (/root/...),
// the build tree is out of their reach: the copy installed for tests is run instead (the
// install_for_tests fixture, tests/install/CMakeLists.txt). It must be this build's.
std::string Binary() {
  static const std::string chosen = [] {
    const std::string built = std::string(GPUSLICE_BUILD_DIR) + "/apps/gpuslice/gpuslice";
    if (geteuid() != 0 || RunnableBy(built, 65534)) return built;
    const std::string installed = std::string(GPUSLICE_TEST_PREFIX) + "/bin/gpuslice";
    std::error_code ec;
    const auto b = fs::last_write_time(built, ec);
    const auto i = fs::last_write_time(installed, ec);
    // cmake --install keeps the file's time, to the second.
    if (ec || i + std::chrono::seconds(1) < b) {
      ADD_FAILURE() << built << " is out of other users' reach and " << installed
                    << " is missing or older than it: run the tests through ctest, whose "
                       "install_for_tests fixture installs this build there";
    }
    return installed;
  }();
  return chosen;
}

bool IsTerminal(const std::string& s) {
  return s != "pending" && s != "starting" && s != "running" && s != "stopping";
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string QueuesConfig(const QueuesToml& q) {
  return fmt::format(R"toml(
[queues.interactive]
time_limit = "1h"
{}
[queues.interactive.idle]
window = "{}"
grace = "{}"
{}
[queues.training]
[queues.inference]
)toml",
                     q.interactive, q.idle_window, q.idle_grace, q.idle);
}

bool Running(const json& job) { return job["state"] == "running"; }
bool Ended(const json& job) { return IsTerminal(job["state"].get<std::string>()); }

DaemonHarness::DaemonHarness(const std::string& name, const std::string& config_toml,
                             std::vector<std::string> extra)
    : extra_(std::move(extra)) {
  dir_ = (fs::temp_directory_path() / ("gse2e_" + name + "_" + std::to_string(getpid()))).string();
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  // Other users (the permission tests' "nobody") must reach the socket and their job's cwd.
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  socket_ = dir_ + "/gpuslice.sock";
  for (auto& e : extra_) {
    if (e == kScript) e = dir_ + "/script.json";
  }
  std::ofstream(dir_ + "/gpuslice.toml") << config_toml;
}

DaemonHarness::~DaemonHarness() {
  // Jobs outlive the daemon by design (they are re-adopted); the test's jobs must not.
  if (pid_ > 0) {
    auto c = Client();
    auto jobs = c.Get("/v1/jobs?state=active");
    if (jobs.ok()) {
      for (const auto& j : (*jobs)["jobs"]) {
        int pid = j["pid"].get<int>();
        if (pid > 0) kill(-pid, SIGKILL);
      }
    }
    Terminate();
  }
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

void DaemonHarness::Start() {
  std::vector<std::string> args = {Binary(), "serve", "--simulate", simulate_,
                                   "--state-dir", dir_ + "/state", "--socket", socket_,
                                   "--config", dir_ + "/gpuslice.toml", "--grace", "1s",
                                   "--tick", "50ms", "--sample-interval", "200ms"};
  args.insert(args.end(), extra_.begin(), extra_.end());
  pid_ = fork();
  ASSERT_GE(pid_, 0);
  if (pid_ == 0) {
    int fd = open((dir_ + "/serve.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  for (int i = 0; i < 400; ++i) {
    auto c = Client();
    if (c.Get("/v1/health").ok()) return;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      FAIL() << "gpuslice serve exited: " << ServeLog();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  FAIL() << "gpuslice serve did not answer: " << ServeLog();
}

void DaemonHarness::Kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void DaemonHarness::Terminate() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string DaemonHarness::ServeLog() const {
  std::ifstream in(dir_ + "/serve.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void DaemonHarness::WriteScript(const json& script) const {
  std::string tmp = dir_ + "/script.json.tmp";
  std::ofstream(tmp) << script.dump();
  fs::rename(tmp, dir_ + "/script.json");
}

int DaemonHarness::Cli(const std::vector<std::string>& args, std::string* out, int as_uid) const {
  std::vector<std::string> full = {Binary()};
  full.insert(full.end(), args.begin(), args.end());
  if (std::find(args.begin(), args.end(), "--socket") == args.end()) {
    // Before a "--" (which ends submit's options), else at the end.
    full.insert(std::find(full.begin(), full.end(), "--"), {"--socket", socket_});
  }
  return testing::RunProgram(full, out, as_uid, dir_);
}

std::uint64_t DaemonHarness::Submit(const std::vector<std::string>& argv, json extra) {
  extra["argv"] = argv;
  if (!extra.contains("cwd")) extra["cwd"] = dir_;
  if (!extra.contains("env")) extra["env"] = {{"PATH", "/usr/bin:/bin"}};
  auto c = Client();
  auto r = c.Post("/v1/jobs", extra);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return 0;
  return (*r)["job"]["id"].get<std::uint64_t>();
}

json DaemonHarness::Job(std::uint64_t id) {
  auto c = Client();
  auto r = c.Get("/v1/jobs/" + std::to_string(id));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : json::object();
}

json DaemonHarness::WaitJob(std::uint64_t id, const std::function<bool(const json&)>& pred,
                            std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  json j;
  auto c = Client();
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = c.Get("/v1/jobs/" + std::to_string(id));
    if (r.ok()) {
      j = *r;
      if (pred(j["job"])) return j;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "job " << id << " did not reach the expected state; last: " << j.dump();
  return j;
}

std::string DaemonHarness::Log(std::uint64_t id) {
  auto c = Client();
  auto r = c.GetText("/v1/jobs/" + std::to_string(id) + "/logs");
  return r.ok() ? *r : "";
}

bool DaemonHarness::WaitLog(std::uint64_t id, const std::string& text,
                            std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Log(id).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace gpuslice::testing_e2e
