// The HTTP server's identity-based limits, over real sockets (issue #32, class 2): on TCP a
// connection counts against its token's identity, not its source address (loopback has
// millions); every unauthenticated TCP connection shares one small bucket (its oldest idle
// member makes room) and is closed after its 401; shares of the connections and streams are
// kept for the Unix socket and for root and admins; one user's slow requests never take every
// worker; refusals are logged, a few lines however many.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "api/http.h"
#include "api/http_budget.h"
#include "api/protocol.h"
#include "testing/raw_http.h"

namespace gpuslice::api {
namespace {

using ::testing::HasSubstr;
using namespace ::gpuslice::testing;  // ConnectUnix, ConnectTcp, Send, ReadAnswer, ClosedByPeer, StatusOf

const std::string kTokenA = "token-aaaaaaaaaaaaaaaaaaaa";
const std::string kTokenB = "token-bbbbbbbbbbbbbbbbbbbb";

std::string Get(const std::string& path, const std::string& token = "", bool close_after = false) {
  std::string r = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n";
  if (!token.empty()) r += "Authorization: Bearer " + token + "\r\n";
  if (close_after) r += "Connection: close\r\n";
  return r + "\r\n";
}

class Tenancy : public ::testing::Test {
 protected:
  void Start(HttpLimits limits) {
    server_ = std::make_unique<HttpServer>([this](const HttpRequest& r) { return Handle(r); }, limits);
    path_ = (std::filesystem::temp_directory_path() /
             ("tenancy_" + std::to_string(getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".sock"))
                .string();
    ASSERT_TRUE(server_->ListenUnix(path_).ok());
    ASSERT_TRUE(server_->ListenTcp("127.0.0.1:0", {{"alice", 4242, 4242, false, kTokenA},
                                                   {"bob", 4343, 4343, false, kTokenB}})
                    .ok());
    server_->SetPrivileged([this](const Peer& p) { return privileged_ && p.uid == 0; });
    server_->Start();
    port_ = server_->tcp_port();
  }
  void TearDown() override {
    {
      std::lock_guard lock(mu_);
      release_ = true;
    }
    cv_.notify_all();
    if (server_) server_->Stop();
    for (int fd : fds_) close(fd);
  }
  HttpResponse Handle(const HttpRequest& r) {
    HttpResponse out;
    if (!r.peer.authenticated) {
      out.status = 401;
      out.body = R"({"error":{"code":"UNAUTHENTICATED","message":"no token"}})";
      return out;
    }
    if (r.path == "/slow") {
      std::unique_lock lock(mu_);
      ++slow_running_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return release_; });
    }
    if (r.path == "/stream") {
      out.stream = [this](const StreamWriter& w) {
        while (w(std::string_view())) {
          std::unique_lock lock(mu_);
          if (cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return release_; })) return;
        }
      };
      return out;
    }
    out.body = DumpJson({{"uid", r.peer.uid}, {"name", r.peer.name}});
    return out;
  }
  int Keep(int fd) {
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }

  std::unique_ptr<HttpServer> server_;
  std::string path_;
  int port_ = 0;
  std::vector<int> fds_;
  std::atomic<bool> privileged_{true};
  std::mutex mu_;
  std::condition_variable cv_;
  bool release_ = false;
  int slow_running_ = 0;
};

TEST(HoldBudget, SharesAreKeptForTheUnixSocketAndForPrivilegedCallers) {
  HoldBudget b("connections", "--max", "--per", 16, 16);
  EXPECT_EQ(b.unix_reserve(), 4);
  EXPECT_EQ(b.admin_reserve(), 1);
  int tcp = 0;
  while (b.Take("uid " + std::to_string(tcp), true, nullptr).ok()) ++tcp;
  EXPECT_EQ(tcp, 12) << "TCP stops short of the quarter kept for the Unix socket";
  EXPECT_THAT(b.Take("uid 1", true, nullptr).status().message(), HasSubstr("kept for the Unix socket"));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(b.Take("uid 1000", false, [] { return false; }).ok()) << i;
  auto ordinary = b.Take("uid 1000", false, [] { return false; });
  EXPECT_THAT(ordinary.status().message(), HasSubstr("kept for root and admins"));
  auto root = b.Take("uid 0", false, [] { return true; });
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(root->privileged);
  EXPECT_THAT(b.Take("uid 0", false, [] { return true; }).status().message(), HasSubstr("holds its limit of 16"));
  b.Release(*root);
  EXPECT_EQ(b.held(), 15);
}

TEST(RefusalLog, AFloodOfRefusalsLogsOneLinePerReasonPerWindow) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto logger = std::make_shared<spdlog::logger>("test", sink);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  RefusalLog log;
  for (int i = 0; i < 1000; ++i) log.Note("connection uid 7", "connection from uid 7: too many");
  log.Note("connection uid 8", "connection from uid 8: too many");
  spdlog::set_default_logger(previous);
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_THAT(text, HasSubstr("refused: connection from uid 7: too many"));
  EXPECT_THAT(text, HasSubstr("uid 8"));
}

TEST_F(Tenancy, AnUnauthenticatedRequestIsAnswered401AndItsConnectionClosed) {
  Start({});
  int fd = Keep(ConnectTcp(port_));
  ASSERT_GE(fd, 0);
  Send(fd, Get("/x"));  // keep-alive asked for; no token
  EXPECT_EQ(StatusOf(ReadAnswer(fd)), 401);
  EXPECT_TRUE(ClosedByPeer(fd)) << "an unauthenticated connection is not kept";
  int ok = Keep(ConnectTcp(port_));
  Send(ok, Get("/x", kTokenA));
  EXPECT_EQ(StatusOf(ReadAnswer(ok)), 200);
  EXPECT_FALSE(ClosedByPeer(ok, std::chrono::milliseconds(300))) << "a token holder's connection is kept alive";
}

TEST_F(Tenancy, ConnectionsWithoutATokenShareOneBucketAndLockNobodyOut) {
  HttpLimits l;
  l.max_unauthenticated = 4;
  Start(l);
  // A local user with no token opens far more connections than the bucket, sending nothing.
  std::vector<int> idle;
  for (int i = 0; i < 60; ++i) idle.push_back(Keep(ConnectTcp(port_)));
  // A token holder connecting now is served (the oldest idle one made room)...
  int fd = Keep(ConnectTcp(port_));
  Send(fd, Get("/x", kTokenB));
  std::string r = ReadAnswer(fd);
  EXPECT_EQ(StatusOf(r), 200) << r;
  EXPECT_THAT(r, HasSubstr("\"uid\":4343"));
  // ...and so is the Unix socket.
  EXPECT_EQ(StatusOf(Raw(path_, Get("/x", "", true))), 200);
  int open = 0;
  for (int s : idle) open += ClosedByPeer(s, std::chrono::milliseconds(20)) ? 0 : 1;
  EXPECT_LE(open, 4) << "no more than the bucket stays open";
}

TEST_F(Tenancy, TcpConnectionsCountAgainstTheTokensIdentityWhateverTheirSourceAddress) {
  HttpLimits l;
  l.max_connections_per_user = 3;
  Start(l);
  std::vector<std::string> answers;
  for (const char* source : {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"}) {
    int fd = Keep(ConnectTcp(port_, source));
    ASSERT_GE(fd, 0) << source;
    Send(fd, Get("/x", kTokenA));
    answers.push_back(ReadAnswer(fd));
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(StatusOf(answers[static_cast<size_t>(i)]), 200) << i;
  for (int i = 3; i < 5; ++i) {
    EXPECT_EQ(StatusOf(answers[static_cast<size_t>(i)]), 503) << i;
    EXPECT_THAT(answers[static_cast<size_t>(i)], HasSubstr("too many connections for uid 4242"));
  }
  int other = Keep(ConnectTcp(port_, "127.0.0.2"));
  Send(other, Get("/x", kTokenB));
  EXPECT_EQ(StatusOf(ReadAnswer(other)), 200) << "another identity from the same address is not held up";
}

TEST_F(Tenancy, AShareOfConnectionsIsKeptForTheUnixSocketAndAnotherForRoot) {
  HttpLimits l;
  l.max_connections = 16;
  l.max_connections_per_user = 16;
  l.max_unauthenticated = 16;
  privileged_ = false;  // root counts as an ordinary caller until the test says otherwise
  Start(l);
  int tcp = 0;
  for (int i = 0; i < 20; ++i) {
    int fd = Keep(ConnectTcp(port_));
    Send(fd, Get("/x", i % 2 == 0 ? kTokenA : kTokenB));
    if (StatusOf(ReadAnswer(fd)) == 200) ++tcp;
  }
  EXPECT_EQ(tcp, 12) << "TCP holds at most three quarters";
  std::vector<int> unix_fds;
  for (int i = 0; i < 3; ++i) {
    int fd = Keep(ConnectUnix(path_));
    Send(fd, Get("/x"));
    EXPECT_EQ(StatusOf(ReadAnswer(fd)), 200) << "the Unix socket's share";
  }
  int fd = Keep(ConnectUnix(path_));
  std::string refused = ReadAnswer(fd);
  EXPECT_EQ(StatusOf(refused), 503);
  EXPECT_THAT(refused, HasSubstr("kept for root and admins"));
  privileged_ = true;
  fd = Keep(ConnectUnix(path_));
  Send(fd, Get("/x"));
  EXPECT_EQ(StatusOf(ReadAnswer(fd)), 200) << "root gets the last one";
}

TEST_F(Tenancy, StreamsAreCountedPerIdentityWithAShareKeptForTheUnixSocket) {
  HttpLimits l;
  l.max_streams = 8;
  l.max_streams_per_user = 8;
  Start(l);
  int streaming = 0;
  std::string last;
  for (int i = 0; i < 8; ++i) {
    int fd = Keep(ConnectTcp(port_, i % 2 == 0 ? "127.0.0.7" : "127.0.0.8"));
    Send(fd, Get("/stream", kTokenA));
    last = ReadAnswer(fd, std::chrono::milliseconds(1000));
    if (StatusOf(last) == 200) ++streaming;
  }
  EXPECT_EQ(streaming, 6) << "TCP streams stop short of the quarter kept for the Unix socket";
  int fd = Keep(ConnectUnix(path_));
  Send(fd, Get("/stream"));
  EXPECT_EQ(StatusOf(ReadAnswer(fd, std::chrono::milliseconds(1000))), 200) << "root on the Unix socket";
}

TEST_F(Tenancy, OneUsersSlowRequestsNeverTakeEveryWorker) {
  HttpLimits l;
  l.workers = 4;
  l.max_workers_per_user = 2;
  Start(l);
  // Alice sends six requests that do not finish until the test ends.
  for (int i = 0; i < 6; ++i) {
    int fd = Keep(ConnectTcp(port_));
    Send(fd, Get("/slow", kTokenA));
  }
  {
    std::unique_lock lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(10), [this] { return slow_running_ >= 2; }));
  }
  // Bob is answered although alice has work queued: she holds at most two of the four workers.
  int fd = Keep(ConnectTcp(port_));
  Send(fd, Get("/x", kTokenB));
  EXPECT_EQ(StatusOf(ReadAnswer(fd, std::chrono::milliseconds(10000))), 200);
  std::lock_guard lock(mu_);
  EXPECT_EQ(slow_running_, 2) << "alice's other four wait their turn";
}

}  // namespace
}  // namespace gpuslice::api
