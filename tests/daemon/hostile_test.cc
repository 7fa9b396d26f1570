// The real daemon against hostile clients, through its real sockets: a request whose error
// echoes a byte that is not UTF-8 (it used to terminate the daemon), thousands of connections
// held by one uid while another uid submits, slow heads, oversized and chunked bodies,
// conflicting framing, and TCP tokens acting as named identities (never implicitly root).
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "api/client.h"
#include "testing/raw_http.h"
#include "tests/daemon/harness.h"

namespace gpuslice::testing_e2e {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using namespace ::gpuslice::testing;  // raw HTTP: ConnectUnix, Raw, StatusOf, BodyOf

constexpr const char* kConfig = R"toml(
[queues.interactive]
time_limit = "1h"
[queues.training]
[queues.inference]
)toml";

// "Threads:" and open descriptors of a process, from /proc.
int ThreadsOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}
int FdsOf(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       it != fs::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

bool Healthy(const DaemonHarness& h) { return h.Client().Get("/v1/health").ok(); }

TEST(HostileApi, ARequestEchoingANonUtf8ByteAnswersAnErrorAndTheDaemonLives) {
  DaemonHarness h("ff", kConfig);
  h.Start();
  // `curl --unix-socket S 'http://x/v1/%ff'`: the 404 message names the path, byte 0xff.
  for (std::string_view req : {"GET /v1/%ff HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
                               "GET /v1/jobs/%ff%fe HTTP/1.1\r\nConnection: close\r\n\r\n",
                               "GET /v1/jobs?state=%c3 HTTP/1.1\r\nConnection: close\r\n\r\n",
                               "GET /v1/events?after=%ff HTTP/1.1\r\nConnection: close\r\n\r\n"}) {
    std::string r = Raw(h.socket(), req);
    int status = StatusOf(r);
    EXPECT_TRUE(status == 400 || status == 404) << req << " -> " << r;
    json body = BodyOf(r);
    ASSERT_FALSE(body.is_discarded()) << r;
    EXPECT_NE(body["error"]["message"].get<std::string>().find("\\x"), std::string::npos) << r;
    ASSERT_TRUE(Healthy(h)) << "the daemon died on " << req << ": " << h.ServeLog();
  }
}

TEST(HostileApi, ThousandsOfConnectionsFromOneUidDoNotLockOutAnother) {
  // Default limits. Held connections last the header timeout (10 s), longer than this test's
  // other user needs, so only the caps protect it.
  DaemonHarness h("hoard", kConfig);
  h.Start();
  constexpr uid_t kHoarder = 54321;
  constexpr int kNobody = 65534;
  int report[2], release[2];
  ASSERT_EQ(pipe(report), 0);
  ASSERT_EQ(pipe(release), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(report[0]);
    close(release[1]);
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (setgroups(0, nullptr) != 0 || setgid(kHoarder) != 0 || setuid(kHoarder) != 0) _exit(99);
    int want = static_cast<int>(std::min<rlim_t>(3000, rl.rlim_cur - 64));
    std::vector<int> fds;
    for (int i = 0; i < want; ++i) {
      int fd = ConnectUnix(h.socket());
      if (fd < 0) continue;
      // Half send a head that never ends (slowloris), half send nothing.
      if (i % 2 == 0) send(fd, "GET /v1/health HTTP/1.1\r\nX-Slow: ", 33, MSG_NOSIGNAL);
      fds.push_back(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    int refused = 0;
    for (int fd : fds) {
      char buf[32] = {};
      if (recv(fd, buf, 12, MSG_PEEK | MSG_DONTWAIT) == 12 &&
          std::string_view(buf, 12) == "HTTP/1.1 503") {
        ++refused;
      }
    }
    std::string msg = fmt::format("{} {} {}\n", want, static_cast<int>(fds.size()), refused);
    [[maybe_unused]] ssize_t w = write(report[1], msg.data(), msg.size());
    char c;
    [[maybe_unused]] ssize_t r = read(release[0], &c, 1);  // hold until the parent is done
    _exit(0);
  }
  close(report[1]);
  close(release[0]);
  char buf[128] = {};
  ssize_t n = read(report[0], buf, sizeof(buf) - 1);
  ASSERT_GT(n, 0);
  int want = 0, opened = 0, refused = 0;
  std::sscanf(buf, "%d %d %d", &want, &opened, &refused);
  EXPECT_GE(want, 1000) << "RLIMIT_NOFILE too low for a meaningful test";
  EXPECT_EQ(opened, want) << "connect() itself is never refused";
  // Everything past the per-uid cap (64) was told 503 at once.
  EXPECT_GE(refused, want - 64 - 8) << "held: " << opened - refused;
  EXPECT_LE(opened - refused, 64 + 8);
  // The daemon holds a buffer per connection, not a thread.
  int threads = ThreadsOf(h.pid()), fds = FdsOf(h.pid());
  std::printf("hoarder: %d connections, %d refused with 503; daemon: %d threads, %d fds\n", opened,
              refused, threads, fds);
  EXPECT_LT(threads, 64) << "threads while " << opened << " connections were attempted";
  EXPECT_LT(fds, 400);

  // Meanwhile another uid submits and reads as usual, and root lists.
  std::string out;
  ASSERT_EQ(h.Cli({"submit", "--json", "--", "sh", "-c", "echo hello-from-nobody"}, &out, kNobody),
            0) << out;
  auto id = json::parse(out, nullptr, false)["job"]["id"].get<std::uint64_t>();
  json j = h.WaitJob(id, [](const json& job) { return IsTerminal(job["state"]); });
  EXPECT_EQ(j["job"]["state"], "succeeded");
  EXPECT_EQ(j["job"]["uid"], kNobody);
  EXPECT_EQ(h.Cli({"logs", std::to_string(id)}, &out, kNobody), 0) << out;
  EXPECT_NE(out.find("hello-from-nobody"), std::string::npos) << out;
  EXPECT_TRUE(h.Client().Get("/v1/jobs").ok());

  [[maybe_unused]] ssize_t w = write(release[1], "x", 1);
  close(release[1]);
  close(report[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The hoarder's connections are gone with it; it may connect again like anyone.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(Healthy(h));
}

TEST(HostileApi, SlowHeadsOversizedAndChunkedBodiesAndConflictingLengths) {
  DaemonHarness h("framing", kConfig,
                  {"--header-timeout", "500ms", "--max-header-bytes", "16KiB",
                   "--max-body-bytes", "256KiB"});
  h.Start();
  // Slowloris: a header line every 150 ms; the head is due 500 ms after its first byte.
  int fd = ConnectUnix(h.socket());
  send(fd, "GET /v1/health HTTP/1.1\r\n", 25, MSG_NOSIGNAL);
  std::string got;
  auto t0 = Clock::now();
  for (int i = 0; i < 40 && got.empty(); ++i) {
    std::string line = "X-" + std::to_string(i) + ": a\r\n";
    send(fd, line.data(), line.size(), MSG_NOSIGNAL);
    got = ReadUntilClosed(fd, std::chrono::milliseconds(150));
  }
  got += ReadUntilClosed(fd, std::chrono::milliseconds(2000));
  close(fd);
  EXPECT_EQ(StatusOf(got), 408) << got;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(4));

  std::string r = Raw(h.socket(), "GET /v1/health HTTP/1.1\r\nX-Big: " +
                                      std::string(20 * 1024, 'a') + "\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 431) << r.substr(0, 300);
  r = Raw(h.socket(), "POST /v1/jobs HTTP/1.1\r\nContent-Length: 300000\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 413) << r;
  r = Raw(h.socket(),
          "POST /v1/jobs HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 200\r\n\r\n{}");
  EXPECT_EQ(StatusOf(r), 400) << r;
  EXPECT_EQ(BodyOf(r)["error"]["code"], "INVALID_ARGUMENT");

  // A chunked submission is decoded and accepted.
  json body = {{"argv", {"true"}}, {"cwd", h.dir()}, {"env", {{"PATH", "/usr/bin:/bin"}}}};
  std::string text = body.dump();
  std::string a = text.substr(0, text.size() / 2), b = text.substr(text.size() / 2);
  r = Raw(h.socket(), fmt::format("POST /v1/jobs HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                                  "Connection: close\r\n\r\n{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
                                  a.size(), a, b.size(), b));
  ASSERT_EQ(StatusOf(r), 201) << r;
  auto id = BodyOf(r)["job"]["id"].get<std::uint64_t>();
  EXPECT_EQ(h.WaitJob(id, [](const json& j) { return IsTerminal(j["state"]); })["job"]["state"],
            "succeeded");
  EXPECT_TRUE(Healthy(h));
}

std::string WriteTokenFile(const std::string& name, const std::string& text) {
  std::string path = (fs::temp_directory_path() /
                      ("gse2e_tokens_" + name + "_" + std::to_string(getpid()))).string();
  std::ofstream(path) << text;
  chmod(path.c_str(), 0600);
  return path;
}

constexpr const char* kNobodyToken = "nobody-token-0123456789";
constexpr const char* kRootToken = "root-token-0123456789ab";
constexpr const char* kPromToken = "prom-token-0123456789ab";

TEST(HostileApi, TcpTokensActAsTheirNamedIdentityAndRootOnlyWhenSaid) {
  std::string tokens = WriteTokenFile(
      "ids", fmt::format("nobody 65534 {}\nops 0 {}\nprom read-only {}\n", kNobodyToken,
                         kRootToken, kPromToken));
  int port = FreePort();
  std::string ep = fmt::format("tcp://127.0.0.1:{}", port);
  DaemonHarness h("tcpid", kConfig,
                  {"--tcp", fmt::format("127.0.0.1:{}", port), "--token-file", tokens});
  h.Start();
  json body = {{"argv", {"sh", "-c", "id -u"}}, {"cwd", h.dir()},
               {"env", {{"PATH", "/usr/bin:/bin"}}}};
  auto submit = [&](const char* token) {
    api::ApiClient c(ep, token);
    return c.Post("/v1/jobs", body);
  };
  auto as_nobody = submit(kNobodyToken);
  ASSERT_TRUE(as_nobody.ok()) << as_nobody.status().ToString() << h.ServeLog();
  auto id = (*as_nobody)["job"]["id"].get<std::uint64_t>();
  EXPECT_EQ((*as_nobody)["job"]["uid"], 65534) << "not the token file's owner (root)";
  h.WaitJob(id, [](const json& j) { return IsTerminal(j["state"]); });
  EXPECT_EQ(h.Log(id).find("65534\n") != std::string::npos, true) << h.Log(id);

  auto as_root = submit(kRootToken);
  ASSERT_TRUE(as_root.ok()) << as_root.status().ToString();
  EXPECT_EQ((*as_root)["job"]["uid"], 0) << "root because the line says uid 0";

  // The read-only token reads, and nothing more.
  api::ApiClient prom(ep, kPromToken);
  EXPECT_TRUE(prom.GetText("/metrics").ok());
  EXPECT_TRUE(prom.Get("/v1/jobs").ok());
  auto denied = prom.Post("/v1/jobs", body);
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(prom.GetText(fmt::format("/v1/jobs/{}/logs", id)).status().code(),
            StatusCode::kPermissionDenied);
  api::ApiClient nobody_token_less(ep, "not-a-token-0123456789");
  EXPECT_FALSE(nobody_token_less.Get("/v1/jobs").ok());
  EXPECT_NE(h.ServeLog().find("TCP token 'ops' acts as root"), std::string::npos);
  fs::remove(tokens);
}

TEST(HostileApi, ABareTokenInARootOwnedFileIsRefusedAtStart) {
  std::string tokens = WriteTokenFile("bare", std::string(kRootToken) + "\n");
  std::string dir = (fs::temp_directory_path() / ("gse2e_bare_" + std::to_string(getpid())))
                        .string();
  fs::create_directories(dir);
  std::string log = dir + "/serve.log";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<std::string> args = {Binary(), "serve", "--simulate", "1xH100-80GB",
                                     "--state-dir", dir + "/state", "--socket", dir + "/s.sock",
                                     "--tcp", fmt::format("127.0.0.1:{}", FreePort()),
                                     "--token-file", tokens};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 400 && !exited; ++i) {
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  std::stringstream ss;
  ss << std::ifstream(log).rdbuf();
  EXPECT_TRUE(exited) << "it served, with every TCP client as root: " << ss.str();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << ss.str();
  EXPECT_NE(ss.str().find("would make every TCP client root"), std::string::npos) << ss.str();
  EXPECT_EQ(ss.str().find(kRootToken), std::string::npos) << "the token is never logged";
  fs::remove_all(dir);
  fs::remove(tokens);
}

}  // namespace
}  // namespace gpuslice::testing_e2e
