// Hostile tenants against the real `gpuslice serve` and CLI (issue #32): one request nested
// deep enough to end a recursive walk, over the Unix socket and TCP; a local user without a
// token opening hundreds of TCP connections; a page of another site reaching the API through a
// forwarded port (Host on every request); a submit whose answer was lost, retried with its
// idempotency key (once) or reported as "may exist" (exit 5); the submitter's umask; config and
// quota flags that are checked at start.
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/raw_http.h"
#include "tests/daemon/harness.h"

namespace gpuslice::testing_e2e {
namespace {

namespace fs = std::filesystem;
using namespace ::gpuslice::testing;  // raw HTTP
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kToken = "tenant-token-0123456789abcdef";

std::string Request(const std::string& method, const std::string& path, const std::string& body,
                    const std::string& extra_headers = "") {
  return fmt::format("{} {} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{}Content-Length: {}\r\n\r\n{}",
                     method, path, extra_headers, body.size(), body);
}

// A harness listening on TCP too, with one token acting as this uid.
struct TcpDaemon {
  explicit TcpDaemon(const std::string& name, std::vector<std::string> extra = {})
      : port(FreePort()),
        tokens((fs::temp_directory_path() / ("gse2e_" + name + "_" + std::to_string(getpid())) / "tokens").string()),
        h(name, QueuesConfig(), [&] {
          std::vector<std::string> a = {"--tcp", "127.0.0.1:" + std::to_string(port), "--token-file", tokens};
          a.insert(a.end(), extra.begin(), extra.end());
          return a;
        }()) {
    std::ofstream(tokens) << "me " << geteuid() << " " << kToken << "\n";
    ::chmod(tokens.c_str(), 0600);
    h.Start();
  }
  int port;
  std::string tokens;
  DaemonHarness h;
};

TEST(Tenants, OneDeeplyNestedRequestNoLongerEndsTheDaemonOnEitherListener) {
  TcpDaemon d("deep");
  auto id = d.h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  d.h.WaitJob(id, Running);
  const std::string deep = std::string(300'000, '[') + std::string(300'000, ']');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/v1/jobs", R"({"argv":["true"],"gpus":)" + deep + "}"},
      {"/v1/jobs", R"({"argv":)" + deep + "}"},
      {fmt::format("/v1/jobs/{}/activity", id), R"({"source":"jupyter","busy":)" + deep + "}"},
  };
  for (const auto& [path, body] : cases) {
    std::string r = Raw(d.h.socket(), Request("POST", path, body));
    EXPECT_EQ(StatusOf(r), 400) << path;
    EXPECT_THAT(r, HasSubstr("nested deeper than"));
    EXPECT_LT(r.size(), 1000u) << "the answer never echoes the value";
    int fd = ConnectTcp(d.port);
    Send(fd, Request("POST", path, body, fmt::format("Authorization: Bearer {}\r\n", kToken)));
    EXPECT_EQ(StatusOf(ReadUntilClosed(fd, std::chrono::seconds(10))), 400) << "TCP " << path;
    close(fd);
  }
  EXPECT_TRUE(d.h.Client().Get("/v1/health").ok()) << d.h.ServeLog();
  EXPECT_EQ(d.h.Job(id)["job"]["state"], "running");
}

TEST(Tenants, AUserWithoutATokenCannotLockOutTheUnixSocketNorTokenHolders) {
  TcpDaemon d("lockout", {"--max-connections", "64", "--max-unauthenticated", "8"});
  // Hundreds of TCP connections from a local user with no token, holding them open: before,
  // they filled the global limit (the per-"user" limit was per address) and nobody, the Unix
  // socket included, was served.
  std::vector<int> held;
  for (int i = 0; i < 300; ++i) {
    const std::string source = fmt::format("127.0.{}.{}", 1 + i / 200, 1 + i % 200);
    held.push_back(ConnectTcp(d.port, source.c_str()));
  }
  std::string out;
  EXPECT_EQ(d.h.Cli({"ps"}, &out), 0) << out;
  int fd = ConnectTcp(d.port);
  Send(fd, Request("GET", "/v1/jobs", "", fmt::format("Authorization: Bearer {}\r\n", kToken)));
  EXPECT_EQ(StatusOf(ReadUntilClosed(fd, std::chrono::seconds(10))), 200);
  close(fd);
  int still_open = 0;
  for (int s : held) {
    if (s >= 0 && !ClosedByPeer(s, std::chrono::milliseconds(5))) ++still_open;
    if (s >= 0) close(s);
  }
  EXPECT_LE(still_open, 8) << "all unauthenticated connections share one bucket of 8";
  // Refusals are logged, and the log is not flooded by them.
  const std::string log = d.h.ServeLog();
  EXPECT_THAT(log, HasSubstr("refused"));
  std::size_t lines = 0;
  for (std::size_t p = log.find("http: refused"); p != std::string::npos; p = log.find("http: refused", p + 1)) ++lines;
  EXPECT_LE(lines, 10u) << log;
}

TEST(Tenants, HostIsCheckedOnEveryRequestAgainstTheListenersNames) {
  TcpDaemon d("host", {"--allowed-host", "gpu-box.example"});
  auto id = d.h.Submit({"sh", "-c", "echo secret-output; sleep 60"}, {{"queue", "interactive"}});
  d.h.WaitJob(id, Running);
  ASSERT_TRUE(d.h.WaitLog(id, "secret-output"));
  const std::string logs = fmt::format("/v1/jobs/{}/logs", id);
  // A same-origin GET of a page that re-pointed its own name at the tunnel: no Origin, no
  // Sec-Fetch-* (plain HTTP), only its Host gives it away. It used to read the log.
  auto get = [&](const std::string& host) {
    return Raw(d.h.socket(), fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", logs, host));
  };
  std::string r = get("evil.example:8080");
  EXPECT_EQ(StatusOf(r), 403);
  EXPECT_THAT(r, Not(HasSubstr("secret-output")));
  EXPECT_THAT(r, HasSubstr("not a name of this listener"));
  EXPECT_EQ(StatusOf(get("gpu-box.example")), 403) << "--allowed-host is for TCP, not the Unix socket";
  r = get("localhost:8080");
  EXPECT_EQ(StatusOf(r), 200);
  EXPECT_THAT(r, HasSubstr("secret-output"));
  EXPECT_EQ(StatusOf(Raw(d.h.socket(), "GET /v1/health HTTP/1.0\r\n\r\n")), 200) << "no Host: not a browser";
  auto tcp = [&](const std::string& host) {
    int fd = ConnectTcp(d.port);
    Send(fd, fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n", logs,
                         host, kToken));
    std::string a = ReadUntilClosed(fd, std::chrono::seconds(10));
    close(fd);
    return StatusOf(a);
  };
  EXPECT_EQ(tcp("evil.example"), 403);
  EXPECT_EQ(tcp(fmt::format("127.0.0.1:{}", d.port)), 200);
  EXPECT_EQ(tcp("gpu-box.example:443"), 200);
  // The CLI names the listener it reaches.
  std::string out;
  EXPECT_EQ(d.h.Cli({"logs", std::to_string(id)}, &out), 0) << out;
  const std::string mine = d.h.dir() + "/my-token";  // the client's file holds the bare token
  std::ofstream(mine) << kToken << "\n";
  EXPECT_EQ(d.h.Cli({"ps", "--socket", fmt::format("tcp://127.0.0.1:{}", d.port), "--token-file", mine}, &out), 0)
      << out;
}

// Forwards connections from `path` to the daemon's socket; the first connection's answer is
// dropped (the daemon got the request and answered; the client sees the connection close), as
// after a lost network or a daemon killed between its commit and its answer.
class DroppingProxy {
 public:
  DroppingProxy(std::string path, std::string upstream, int drop_first)
      : path_(std::move(path)), upstream_(std::move(upstream)), drop_(drop_first) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path_.c_str());
    ::unlink(path_.c_str());
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd_, 16) != 0) std::abort();
    thread_ = std::thread([this] { Run(); });
  }
  ~DroppingProxy() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
    ::unlink(path_.c_str());
  }
  int seen() const { return seen_; }

 private:
  void Run() {
    while (!stop_) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++seen_;
      std::string req = ReadRequest(c);
      if (!upstream_.empty()) {
        std::string answer = Raw(upstream_, req);
        if (seen_ > drop_) Send(c, answer);
      }
      close(c);  // dropped: the client sees the connection close without an answer
    }
  }
  // One request (head, and body by Content-Length), with Connection: close for the upstream.
  static std::string ReadRequest(int c) {
    std::string in;
    char buf[65536];
    while (true) {
      const std::size_t head = in.find("\r\n\r\n");
      if (head != std::string::npos) {
        const std::size_t cl = in.find("Content-Length: ");
        const std::size_t len = cl != std::string::npos && cl < head ? std::stoul(in.substr(cl + 16)) : 0;
        if (in.size() >= head + 4 + len) {
          return in.substr(0, head) + "\r\nConnection: close" + in.substr(head, 4 + len);
        }
      }
      ssize_t n = recv(c, buf, sizeof(buf), 0);
      if (n <= 0) return in;
      in.append(buf, static_cast<std::size_t>(n));
    }
  }

  std::string path_, upstream_;
  int drop_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int> seen_{0};
  std::thread thread_;
};

TEST(Tenants, ASubmitWhoseAnswerWasLostIsRetriedWithItsKeyAndRunsOnce) {
  DaemonHarness h("retry", QueuesConfig());
  h.Start();
  const std::string proxy = h.dir() + "/proxy.sock";
  {
    DroppingProxy p(proxy, h.socket(), 1);
    std::string out;
    EXPECT_EQ(h.Cli({"submit", "--socket", proxy, "--queue", "interactive", "--", "sleep", "60"}, &out), 0) << out;
    EXPECT_THAT(out, HasSubstr("job 1 submitted"));
    EXPECT_THAT(out, HasSubstr("already submitted with idempotency key")) << "the retry found the stored job";
    EXPECT_EQ(p.seen(), 2);
  }
  auto jobs = h.Client().Get("/v1/jobs");
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ((*jobs)["jobs"].size(), 1u) << "stored once, run once";
  // Nothing ever answers: exit 5, saying the job may exist and how to check.
  {
    DroppingProxy p(proxy, "", 0);
    std::string out;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(h.Cli({"submit", "--socket", proxy, "--idempotency-key", "mine-42", "--", "sleep", "1"}, &out), 5)
        << out;
    EXPECT_THAT(out, HasSubstr("may have accepted the job"));
    EXPECT_THAT(out, HasSubstr("gpuslice ps --key mine-42"));
    EXPECT_GE(p.seen(), 3) << "retried";
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  }
  std::string out;
  EXPECT_EQ(h.Cli({"ps", "--key", "mine-42"}, &out), 0);
  EXPECT_THAT(out, HasSubstr("(no jobs)"));
  // A daemon that is not there at all: nothing was sent, nothing to check.
  EXPECT_EQ(h.Cli({"submit", "--socket", h.dir() + "/nobody.sock", "--", "true"}, &out), 5);
  EXPECT_THAT(out, Not(HasSubstr("may have accepted")));
}

TEST(Tenants, AJobRunsWithItsSubmittersUmask) {
  DaemonHarness h("umask", QueuesConfig());
  h.Start();
  for (const char* mask : {"027", "002"}) {
    const mode_t old = ::umask(static_cast<mode_t>(std::stoi(mask, nullptr, 8)));
    std::string out;
    const int rc = h.Cli({"submit", "--queue", "interactive", "--json", "--", "sh", "-c", "umask"}, &out);
    ::umask(old);
    ASSERT_EQ(rc, 0) << out;
    const auto id = json::parse(out)["job"]["id"].get<std::uint64_t>();
    EXPECT_TRUE(h.WaitLog(id, std::string("0") + mask)) << mask << ": " << h.Log(id);
  }
}

TEST(Tenants, AnAdminGroupThatIsEmptyOrMissingStopsServeNamingTheKey) {
  for (const auto& [group, expect] : std::vector<std::pair<std::string, std::string>>{
           {"", "admin_group: '' is empty"}, {"no-such-group-gs32", "admin_group = 'no-such-group-gs32': no such group"}}) {
    DaemonHarness h("admingroup", "admin_group = \"" + group + "\"\n" + QueuesConfig());
    std::string out;
    const int rc = h.Cli({"serve", "--simulate", "1xH100-80GB", "--state-dir", h.dir() + "/state", "--socket",
                          h.dir() + "/s.sock", "--config", h.dir() + "/gpuslice.toml"},
                         &out);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_THAT(out, HasSubstr(expect));
    EXPECT_THAT(out, HasSubstr("gpuslice.toml"));
  }
}

}  // namespace
}  // namespace gpuslice::testing_e2e
