// The HTTP server against hostile clients, over real sockets: a throwing handler answers 500
// and the server goes on; strict framing (duplicate Content-Length, Transfer-Encoding with
// Content-Length: 400), chunked bodies decoded, 431 and 413 with JSON bodies, header and body
// timeouts (slowloris: 408), the per-user and total connection caps (a fast 503, no thread),
// the stream cap, and the one JSON encoder that cannot throw.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "api/http.h"
#include "api/protocol.h"
#include "testing/raw_http.h"

namespace gpuslice::api {
namespace {

using Clock = std::chrono::steady_clock;
using namespace ::gpuslice::testing;  // raw HTTP: ConnectUnix, Send, ReadUntilClosed, Raw, StatusOf, BodyOf

std::string Sock(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("api_hostile_" + tag + "_" + std::to_string(getpid()) + ".sock")).string();
}

HttpResponse Echo(const HttpRequest& r) {
  if (r.path == "/throw") throw std::runtime_error("handler bug");
  if (r.path == "/bad-utf8") {
    HttpResponse out;
    out.status = 404;
    out.body = DumpJson(ErrorJson(NotFound("path '" + r.path + "\xff'")));
    return out;
  }
  if (r.path == "/stream") {
    HttpResponse out;
    out.content_type = "text/plain";
    out.stream = [](const StreamWriter& w) {
      while (w(std::string_view())) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    };
    return out;
  }
  HttpResponse out;
  out.body = DumpJson({{"method", r.method}, {"path", r.path}, {"body", r.body},
                       {"uid", r.peer.uid}, {"name", r.peer.name}, {"ro", r.peer.read_only}});
  return out;
}

class Hostile : public ::testing::Test {
 protected:
  void Start(HttpLimits limits = {}) {
    server_ = std::make_unique<HttpServer>(Echo, limits);
    path_ = Sock(::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(server_->ListenUnix(path_).ok());
    server_->Start();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  bool Healthy() {
    HttpClient c(path_);
    auto r = c.Request("GET", "/ok");
    return r.ok() && r->status == 200;
  }
  std::unique_ptr<HttpServer> server_;
  std::string path_;
};

TEST_F(Hostile, AThrowingHandlerAnswers500AndTheServerGoesOn) {
  Start();
  for (int i = 0; i < 3; ++i) {
    std::string r = Raw(path_, "GET /throw HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(StatusOf(r), 500) << r;
    EXPECT_EQ(BodyOf(r)["error"]["code"], "INTERNAL") << r;
  }
  EXPECT_TRUE(Healthy());
}

TEST_F(Hostile, DumpJsonEscapesBytesThatAreNotUtf8InsteadOfThrowing) {
  nlohmann::json j = {{"message", "bad \xff byte"}, {"k\xfe", {"ok", "\xc3"}}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error) << "what made the daemon die";
  std::string s = DumpJson(j);
  auto back = nlohmann::json::parse(s, nullptr, false);
  ASSERT_FALSE(back.is_discarded()) << s;
  EXPECT_EQ(back["message"], "bad \\xff byte");
  EXPECT_EQ(back["k\\xfe"][1], "\\xc3");
  EXPECT_EQ(DumpJson({{"a", "é"}}), R"({"a":"é"})") << "valid UTF-8 passes unchanged";
  Start();
  std::string r = Raw(path_, "GET /bad-utf8 HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 404);
  EXPECT_FALSE(BodyOf(r).is_discarded()) << r;
}

TEST_F(Hostile, DuplicateOrConflictingFramingIs400NotAHang) {
  Start();
  for (std::string_view req :
       {"POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 300\r\n\r\nabc",
        "POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        "POST /x HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\nabc",
        "POST /x HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc",
        "POST /x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
        "GET /x HTTP/1.1\r\nNo colon here\r\n\r\n",
        "GET x HTTP/1.1\r\n\r\n",
        "GET /x HTTP/1.1 extra\r\n\r\n"}) {
    auto t0 = Clock::now();
    std::string r = Raw(path_, req);
    EXPECT_EQ(StatusOf(r), 400) << req << " -> " << r;
    EXPECT_EQ(BodyOf(r)["error"]["code"], "INVALID_ARGUMENT") << r;
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3)) << "answered, not held: " << req;
  }
  EXPECT_EQ(StatusOf(Raw(path_, "POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n")), 501);
  EXPECT_EQ(StatusOf(Raw(path_, "GET /x HTTP/2.0\r\n\r\n")), 505);
  EXPECT_TRUE(Healthy());
}

TEST_F(Hostile, ChunkedBodiesAreDecoded) {
  Start();
  std::string r = Raw(path_,
                      "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                      "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: dropped\r\n\r\n");
  ASSERT_EQ(StatusOf(r), 200) << r;
  EXPECT_EQ(BodyOf(r)["body"], "hello world");
  // Bytes after the chunked body are the next request on the same connection.
  r = Raw(path_,
          "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
          "GET /b HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_NE(r.find(R"("path":"/a")"), std::string::npos) << r;
  EXPECT_NE(r.find(R"("path":"/b")"), std::string::npos) << r;
  // A bad chunk is 400, an oversized one 413.
  EXPECT_EQ(StatusOf(Raw(path_, "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")),
            400);
  EXPECT_EQ(StatusOf(Raw(path_, "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                "ffffffff\r\n")), 413);
  // Expect: 100-continue (curl sends it for bodies over 1 KiB) is answered.
  int fd = ConnectUnix(path_);
  Send(fd, "POST /x HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 3000), 1);
  char buf[64];
  ssize_t n = recv(fd, buf, sizeof(buf), 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))),
            "HTTP/1.1 100 Continue\r\n\r\n");
  close(fd);
}

TEST_F(Hostile, OversizedHeadIs431AndOversizedBodyIs413) {
  HttpLimits l;
  l.max_header_bytes = 8 * 1024;
  l.max_body_bytes = 64 * 1024;
  Start(l);
  std::string big = "GET /x HTTP/1.1\r\nX-Big: " + std::string(9 * 1024, 'a') + "\r\n\r\n";
  std::string r = Raw(path_, big);
  EXPECT_EQ(StatusOf(r), 431) << r.substr(0, 200);
  EXPECT_EQ(BodyOf(r)["error"]["code"], "RESOURCE_EXHAUSTED");
  // Without an end of head at all.
  EXPECT_EQ(StatusOf(Raw(path_, "GET /x HTTP/1.1\r\nX: " + std::string(20 * 1024, 'b'))), 431);
  std::string many = "GET /x HTTP/1.1\r\n";
  for (int i = 0; i < 150; ++i) many += "X-" + std::to_string(i) + ": 1\r\n";
  EXPECT_EQ(StatusOf(Raw(path_, many + "\r\n")), 431) << "more than 100 header fields";
  r = Raw(path_, "POST /x HTTP/1.1\r\nContent-Length: 70000\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 413) << r;
  EXPECT_NE(BodyOf(r)["error"]["message"].get<std::string>().find("--max-body-bytes"),
            std::string::npos);
  EXPECT_TRUE(Healthy());
}

TEST_F(Hostile, SlowHeadsAndBodiesTimeOutWith408) {
  HttpLimits l;
  l.header_timeout = 300 * kMillisecond;
  l.body_timeout = 300 * kMillisecond;
  l.idle_timeout = 300 * kMillisecond;
  Start(l);
  // Slowloris: a header line every 100 ms never finishes the head.
  int fd = ConnectUnix(path_);
  Send(fd, "GET /x HTTP/1.1\r\n");
  auto t0 = Clock::now();
  std::string got;
  for (int i = 0; i < 40 && got.empty(); ++i) {
    Send(fd, "X-" + std::to_string(i) + ": a\r\n");
    got = ReadUntilClosed(fd, std::chrono::milliseconds(100));
  }
  got += ReadUntilClosed(fd, std::chrono::milliseconds(2000));
  close(fd);
  EXPECT_EQ(StatusOf(got), 408) << got;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  // A body that never comes.
  std::string r = Raw(path_, "POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
                      std::chrono::milliseconds(3000));
  EXPECT_EQ(StatusOf(r), 408) << r;
  // An idle keep-alive connection is closed quietly.
  fd = ConnectUnix(path_);
  Send(fd, "GET /x HTTP/1.1\r\n\r\n");
  r = ReadUntilClosed(fd, std::chrono::milliseconds(3000));
  close(fd);
  EXPECT_EQ(StatusOf(r), 200);
  EXPECT_EQ(r.find("408"), std::string::npos) << "idle between requests: closed, no answer";
  EXPECT_TRUE(Healthy());
}

TEST_F(Hostile, OverTheConnectionCapsAClientGetsAFast503AndOthersStillGetIn) {
  HttpLimits l;
  l.max_connections_per_user = 5;
  l.max_connections = 8;
  Start(l);
  std::vector<int> held;
  for (int i = 0; i < 5; ++i) held.push_back(ConnectUnix(path_));
  // The sixth from the same uid: refused at once with a JSON 503, and closed.
  std::string r = Raw(path_, "", std::chrono::milliseconds(3000));
  EXPECT_EQ(StatusOf(r), 503) << r;
  EXPECT_NE(BodyOf(r)["error"]["message"].get<std::string>().find("--max-connections-per-user"),
            std::string::npos) << r;
  // Held connections still work and free their slot when closed.
  Send(held[0], "GET /x HTTP/1.1\r\n\r\n");
  EXPECT_EQ(StatusOf(ReadUntilClosed(held[0], std::chrono::milliseconds(300))), 200);
  close(held[0]);
  held.erase(held.begin());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(Healthy());
  for (int fd : held) close(fd);
}

TEST_F(Hostile, StreamsAreCappedPerUser) {
  HttpLimits l;
  l.max_streams_per_user = 2;
  Start(l);
  std::vector<int> streams;
  for (int i = 0; i < 2; ++i) {
    int fd = ConnectUnix(path_);
    Send(fd, "GET /stream HTTP/1.1\r\n\r\n");
    EXPECT_NE(ReadUntilClosed(fd, std::chrono::milliseconds(200)).find("200 OK"),
              std::string::npos);
    streams.push_back(fd);
  }
  std::string r = Raw(path_, "GET /stream HTTP/1.1\r\n\r\n", std::chrono::milliseconds(3000));
  EXPECT_EQ(StatusOf(r), 503) << r;
  EXPECT_TRUE(Healthy()) << "ordinary requests are not held up by streams";
  for (int fd : streams) close(fd);
  // Closed streams free their slots (the probe notices within a few polls).
  bool freed = false;
  for (int i = 0; i < 50 && !freed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    int fd = ConnectUnix(path_);
    Send(fd, "GET /stream HTTP/1.1\r\n\r\n");
    freed = ReadUntilClosed(fd, std::chrono::milliseconds(100)).find("200 OK") !=
            std::string::npos;
    close(fd);
  }
  EXPECT_TRUE(freed);
}

TEST_F(Hostile, StopReturnsWithConnectionsHeldAndStreamsOpen) {
  Start();
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) fds.push_back(ConnectUnix(path_));
  int s = ConnectUnix(path_);
  Send(s, "GET /stream HTTP/1.1\r\n\r\n");
  ReadUntilClosed(s, std::chrono::milliseconds(100));
  server_->Stop();
  server_.reset();
  for (int fd : fds) close(fd);
  close(s);
}

TEST(RequestParser, FedOneByteAtATimeGivesTheSameRequest) {
  std::string wire =
      "POST /v1/jobs?a=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\nGET /next HTTP/1.1\r\n\r\n";
  RequestParser p(64 * 1024, 1024);
  std::string buf;
  RequestParser::State st = RequestParser::State::kNeedMore;
  size_t i = 0;
  while (st == RequestParser::State::kNeedMore && i < wire.size()) {
    buf += wire[i++];
    st = p.Parse(&buf);
  }
  ASSERT_EQ(st, RequestParser::State::kDone) << p.error_message();
  EXPECT_EQ(p.request().body, "abcde");
  EXPECT_EQ(p.request().query.at("a"), "1");
  buf += wire.substr(i);
  p.Reset();
  ASSERT_EQ(p.Parse(&buf), RequestParser::State::kDone);
  EXPECT_EQ(p.request().path, "/next");
  EXPECT_TRUE(buf.empty());
}

TEST(HttpLimits, ValidateNamesTheLimit) {
  HttpLimits l;
  EXPECT_TRUE(l.Validate().ok());
  l.max_connections_per_user = 0;
  auto st = l.Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--max-connections-per-user"), std::string::npos);
  l = HttpLimits();
  l.max_connections_per_user = l.max_connections + 1;
  EXPECT_FALSE(l.Validate().ok());
  l = HttpLimits();
  l.header_timeout = 0;
  EXPECT_NE(l.Validate().message().find("--header-timeout"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::api
