// The small HTTP/1.1 server and client: peer credentials over the Unix socket, bearer tokens
// over TCP, keep-alive, chunked streaming, oversized bodies, and the error convention.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "api/client.h"
#include "api/http.h"
#include "api/protocol.h"

namespace gpuslice::api {
namespace {

std::string Sock(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("api_test_" + tag + "_" + std::to_string(getpid()) + ".sock")).string();
}

HttpResponse Echo(const HttpRequest& r) {
  HttpResponse out;
  out.body = nlohmann::json{{"method", r.method}, {"path", r.path}, {"query", r.query},
                            {"body", r.body}, {"uid", r.peer.uid}, {"pid", r.peer.pid},
                            {"auth", r.peer.authenticated}, {"unix", r.peer.unix_socket}}
                 .dump();
  return out;
}

TEST(HttpServer, UnixSocketCarriesThePeersKernelIdentity) {
  HttpServer server(Echo);
  std::string path = Sock("peer");
  ASSERT_TRUE(server.ListenUnix(path).ok());
  server.Start();
  HttpClient c(path);
  auto r = c.Request("POST", "/v1/x%20y?a=1&b=two%21", "hello");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["path"], "/v1/x y");
  EXPECT_EQ(j["query"]["b"], "two!");
  EXPECT_EQ(j["body"], "hello");
  EXPECT_EQ(j["uid"], static_cast<std::int64_t>(getuid()));
  EXPECT_EQ(j["pid"], static_cast<std::int64_t>(getpid()));
  EXPECT_TRUE(j["auth"].get<bool>());
  // Keep-alive: the same connection serves many requests.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(c.Request("GET", "/again").ok());
  server.Stop();
  EXPECT_FALSE(std::filesystem::exists(path)) << "socket removed on stop";
}

TEST(HttpServer, TcpNeedsTheBearerToken) {
  HttpServer server(Echo);
  ASSERT_TRUE(server.ListenTcp("127.0.0.1:0", {{"alice", 1234, 1234, false, "s3cret"}}).ok());
  server.Start();
  std::string ep = "tcp://127.0.0.1:" + std::to_string(server.tcp_port());
  HttpClient anon(ep);
  auto r = anon.Request("GET", "/v1/jobs");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(nlohmann::json::parse(r->body)["auth"].get<bool>());
  HttpClient good(ep, "s3cret");
  auto g = good.Request("GET", "/v1/jobs");
  ASSERT_TRUE(g.ok());
  auto j = nlohmann::json::parse(g->body);
  EXPECT_TRUE(j["auth"].get<bool>());
  EXPECT_EQ(j["uid"], 1234) << "acts as the token's identity";
  HttpClient bad(ep, "guess");
  EXPECT_FALSE(nlohmann::json::parse(bad.Request("GET", "/")->body)["auth"].get<bool>());
  server.Stop();
}

TEST(HttpServer, BadListenAddressesNameTheValue) {
  HttpServer server(Echo);
  std::vector<TcpIdentity> ids = {{"a", 5, 5, false, "t"}};
  auto st = server.ListenTcp("localhost:99999", ids);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("99999"), std::string::npos);
  EXPECT_EQ(server.ListenTcp("nohost", ids).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server.ListenTcp("127.0.0.1:0", {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server.ListenUnix(std::string(200, 'x')).code(), StatusCode::kInvalidArgument);
}

TEST(HttpServer, StreamsChunksAndRejectsHugeBodies) {
  HttpServer server([](const HttpRequest& r) {
    HttpResponse out;
    if (r.path == "/stream") {
      out.content_type = "text/plain";
      out.stream = [](const StreamWriter& w) {
        for (int i = 0; i < 5; ++i) {
          if (!w("line " + std::to_string(i) + "\n")) return;
        }
      };
    }
    return out;
  });
  std::string path = Sock("stream");
  ASSERT_TRUE(server.ListenUnix(path).ok());
  server.Start();
  HttpClient c(path);
  std::string got;
  auto st = c.Stream("/stream", [&](std::string_view s) {
    got.append(s);
    return true;
  });
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(*st, 200);
  EXPECT_EQ(got, "line 0\nline 1\nline 2\nline 3\nline 4\n");
  auto again = c.Request("GET", "/stream");  // chunked body read as a whole, same connection
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->body, got);
  HttpClient big(path);
  auto r = big.Request("POST", "/x", std::string(5 * 1024 * 1024, 'a'));
  ASSERT_TRUE(r.ok()) << "the 413 arrives, not a reset: " << r.status().ToString();
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(StatusFromResponse(r->status, r->body).code(), StatusCode::kResourceExhausted)
      << r->body;
  server.Stop();
}

TEST(Client, UnreachableDaemonIsUnavailableAndSaysWhatToDo) {
  ApiClient c(Sock("nobody-listens"));
  auto r = c.Get("/v1/jobs");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("gpuslice serve"), std::string::npos);
}

TEST(Protocol, ErrorsRoundTripWithTheirCode) {
  Status st = InvalidArgument("field 'fraction': value '2.5' is more than one GPU");
  EXPECT_EQ(HttpStatusFor(st.code()), 400);
  Status back = StatusFromResponse(400, ErrorJson(st).dump());
  EXPECT_EQ(back, st);
  EXPECT_EQ(StatusFromResponse(502, "<html>").code(), StatusCode::kInternal);
  EXPECT_EQ(HttpStatusFor(StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFor(StatusCode::kNotFound), 404);
}

TEST(Protocol, ErrorEchoingInvalidUtf8StillDumps) {
  // Found by fuzz/api_fuzz.cc (and the issue's `curl .../v1/%ff`): dump() threw type_error 316.
  Status st = NotFound("path '/v1/\xff\x90': not an API resource");
  std::string body;
  ASSERT_NO_THROW(body = ErrorJson(st).dump());
  EXPECT_NE(body.find(R"(/v1/\\xff\\x90)"), std::string::npos) << body;
  EXPECT_EQ(StatusFromResponse(404, body).code(), StatusCode::kNotFound);
}

TEST(RequestParser, SplitsTheTargetAndLowerCasesHeaderNames) {
  RequestParser p(64 * 1024, 4096);
  std::string wire = "GET /v1/jobs%2F1?state=running&user=a+b&flag HTTP/1.1\r\nX-Thing:  v \r\nHost: g\r\n\r\n";
  ASSERT_EQ(p.Parse(&wire), RequestParser::State::kDone) << p.error_message();
  const HttpRequest& r = p.request();
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/v1/jobs/1");
  EXPECT_EQ(r.query.at("state"), "running");
  EXPECT_EQ(r.query.at("user"), "a b");
  EXPECT_EQ(r.query.at("flag"), "");
  EXPECT_EQ(r.headers.at("x-thing"), "v");
  EXPECT_EQ(r.headers.at("host"), "g");
  for (const char* bad : {"GARBAGE\r\n\r\n", "GET /only-two\r\n\r\n"}) {
    RequestParser q(64 * 1024, 4096);
    std::string w = bad;
    EXPECT_EQ(q.Parse(&w), RequestParser::State::kError) << bad;
  }
}

}  // namespace
}  // namespace gpuslice::api
