// The web dashboard's server side through a real `gpuslice serve` on TCP: the page's files
// and headers, GET /v1/devices/history (buckets, unmeasured as null, errors naming the field
// and value), and the refusal of a state-changing request from another site's page.
// (The page itself runs in a real Chromium: testing/browser/ui_test.js, ctest ui_browser_test.)
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "api/http.h"
#include "tests/daemon/harness.h"

namespace gpuslice::testing_e2e {
namespace {

namespace fs = std::filesystem;

constexpr const char* kConfig = R"toml(
[queues.interactive]
[queues.training]
[queues.inference]
)toml";
constexpr const char* kToken = "alice-token-0123456789abcdef";

class UiTest : public ::testing::Test {
 protected:
  UiTest()
      : port_(FreePort()),
        h_("ui", kConfig,
           {"--tcp", "127.0.0.1:" + std::to_string(port_), "--token-file",
            (fs::temp_directory_path() / ("gse2e_ui_" + std::to_string(getpid())) / "tokens").string()}),
        http_("127.0.0.1", port_) {
    std::ofstream(h_.dir() + "/tokens") << "alice 1000 " << kToken << "\n";
    ::chmod((h_.dir() + "/tokens").c_str(), 0600);
    h_.Start();
  }
  httplib::Headers Auth(httplib::Headers more = {}) {
    more.emplace("Authorization", std::string("Bearer ") + kToken);
    return more;
  }
  json GetJson(const std::string& path, int* status) {
    auto r = http_.Get(path, Auth());
    *status = r ? r->status : 0;
    return r ? json::parse(r->body, nullptr, false) : json();
  }

  int port_;
  DaemonHarness h_;
  httplib::Client http_;
};

TEST_F(UiTest, ServesThePageFromTheBinaryWithItsHeadersToAnyone) {
  auto r = http_.Get("/ui");  // no token: the page holds no data
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(r->body.find("<script src=\"/ui/app.js\""), std::string::npos);
  const std::string csp = r->get_header_value("Content-Security-Policy");
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe"), std::string::npos) << csp;
  EXPECT_EQ(r->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(r->body.find("<script>"), std::string::npos) << "no inline script";

  // The same page on the Unix socket (for an ssh tunnel).
  api::HttpClient local(h_.socket());
  auto viaSocket = local.Request("GET", "/ui/");
  ASSERT_TRUE(viaSocket.ok()) << viaSocket.status().ToString();
  EXPECT_EQ(viaSocket->status, 200);
  EXPECT_EQ(viaSocket->body, r->body);

  auto js = http_.Get("/ui/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(js->body.find("innerHTML"), std::string::npos) << "text goes in as text only";

  for (const char* bad : {"/ui/nope.js", "/ui/../v1/jobs", "/ui/%2e%2e/etc/passwd", "/ui/index.html/x"}) {
    auto nf = http_.Get(bad);
    ASSERT_TRUE(nf) << bad;
    EXPECT_EQ(nf->status, 404) << bad;
  }
  auto post = http_.Post("/ui", "", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  // The data still needs the token on TCP, and is never cached.
  auto devs = http_.Get("/v1/devices");
  ASSERT_TRUE(devs);
  EXPECT_EQ(devs->status, 401);
  auto ok = http_.Get("/v1/devices", Auth());
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->get_header_value("Cache-Control"), "no-store");
  EXPECT_EQ(ok->get_header_value("X-Content-Type-Options"), "nosniff");
}

TEST_F(UiTest, DeviceHistoryHasABucketPerStepAndUnmeasuredTimeIsNull) {
  // The harness samples every 200 ms; wait for a few samples.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  int status = 0;
  json h = GetJson("/v1/devices/history?minutes=10&step=10", &status);
  ASSERT_EQ(status, 200) << h.dump();
  EXPECT_EQ(h["step_s"], 10);
  EXPECT_EQ(h["buckets"], 60);
  EXPECT_EQ(h["start_us"].get<std::int64_t>() % 10'000'000, 0) << "aligned: two polls agree";
  EXPECT_GT(h["now_us"].get<std::int64_t>(), h["start_us"].get<std::int64_t>() + 590LL * 1'000'000);
  ASSERT_EQ(h["devices"].size(), 8u);
  for (const auto& d : h["devices"]) {
    const auto& sm = d["sm_util_percent"];
    ASSERT_EQ(sm.size(), 60u);
    // The daemon started a second ago: the ten minutes before it were never measured, and
    // stay null (a gap), not 0. The bucket now falls in (or the one before) holds samples.
    EXPECT_TRUE(sm[0].is_null()) << d.dump();
    EXPECT_TRUE(sm[50].is_null()) << d.dump();
    const bool recent = sm[59].is_number() || sm[58].is_number();
    EXPECT_TRUE(recent) << d.dump();
    for (const auto& v : sm) {
      if (v.is_number()) {
        EXPECT_GE(v.get<double>(), 0.0);
        EXPECT_LE(v.get<double>(), 100.0);
      }
    }
    EXPECT_EQ(d["memory_used"].size(), 60u);
  }
  // Defaults: the last hour in 30 s buckets.
  json dflt = GetJson("/v1/devices/history", &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(dflt["minutes"], 60);
  EXPECT_EQ(dflt["step_s"], 30);
  EXPECT_EQ(dflt["devices"][0]["sm_util_percent"].size(), 120u);
}

TEST_F(UiTest, DeviceHistoryRefusesBadQueriesNamingTheFieldAndValue) {
  for (const auto& [q, field, value] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"minutes=0", "minutes", "0"}, {"minutes=61", "minutes", "61"}, {"minutes=-5", "minutes", "-5"},
           {"step=abc", "step", "abc"}, {"step=0", "step", "0"}, {"step=99999", "step", "99999"}}) {
    int status = 0;
    json e = GetJson("/v1/devices/history?" + q, &status);
    EXPECT_EQ(status, 400) << q;
    const std::string msg = e["error"]["message"].get<std::string>();
    EXPECT_NE(msg.find("'" + field + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + value + "'"), std::string::npos) << msg;
  }
  auto post = http_.Post("/v1/devices/history", Auth(), "", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 400);
}

TEST_F(UiTest, AnotherSitesPageCannotCancelButThisPageCan) {
  // alice's job, submitted over TCP with her token (the page's caller).
  const json body = {{"argv", {"sleep", "60"}}, {"queue", "interactive"}, {"cwd", "/tmp"},
                     {"env", {{"PATH", "/usr/bin:/bin"}}}};
  auto sub = http_.Post("/v1/jobs", Auth(), body.dump(), "application/json");
  ASSERT_TRUE(sub);
  ASSERT_EQ(sub->status, 201) << sub->body;
  const auto id = json::parse(sub->body)["job"]["id"].get<std::uint64_t>();
  h_.WaitJob(id, [](const json& j) { return j["state"] == "running"; });
  const std::string path = "/v1/jobs/" + std::to_string(id) + "/cancel";
  // A page on another site posting through the user's browser (the token would be the user's
  // own; through an ssh tunnel to the Unix socket, so would the peer credentials).
  auto evil = http_.Post(path, Auth({{"Origin", "http://evil.example"}}), "", "text/plain");
  ASSERT_TRUE(evil);
  EXPECT_EQ(evil->status, 403);
  const json e = json::parse(evil->body, nullptr, false);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("origin 'http://evil.example'"), std::string::npos)
      << evil->body;
  EXPECT_EQ(h_.Job(id)["job"]["state"], "running") << "nothing changed";
  // The dashboard itself (same origin) may.
  const std::string self = "http://127.0.0.1:" + std::to_string(port_);
  auto mine = http_.Post(path, Auth({{"Origin", self}}), "", "text/plain");
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->status, 200) << mine->body;
  h_.WaitJob(id, [](const json& j) { return IsTerminal(j["state"].get<std::string>()); });
}

// One raw HTTP/1.1 request on the daemon's Unix socket (as an ssh tunnel forwards a browser's);
// returns the status code (0: no answer) and the body.
std::pair<int, std::string> UnixRequest(const std::string& socket, const std::string& head) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", socket.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return {0, ""};
  }
  const std::string req = head + "Connection: close\r\nContent-Length: 0\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return {0, ""};
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (out.size() < 12) return {0, out};
  const std::size_t body = out.find("\r\n\r\n");
  return {std::atoi(out.substr(9, 3).c_str()), body == std::string::npos ? "" : out.substr(body + 4)};
}

TEST_F(UiTest, ARebindingPageThroughAnSshTunnelIsRefusedByItsHostName) {
  // On the Unix socket the peer credentials vouch for the caller, so a page of another site
  // that re-points its name at the tunnel's 127.0.0.1 port would be same-origin with itself
  // (Origin == "http://" + Host) and act as the user. Its Host still names that site.
  const std::uint64_t id = h_.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  h_.WaitJob(id, [](const json& j) { return j["state"] == "running"; });
  const std::string cancel = "/v1/jobs/" + std::to_string(id) + "/cancel";
  // What Chromium sends for the page's fetch(): Sec-Fetch-* always, Origin on a POST.
  const std::string browser = "Sec-Fetch-Site: same-origin\r\nSec-Fetch-Mode: cors\r\n";
  auto [code, body] = UnixRequest(h_.socket(), "POST " + cancel + " HTTP/1.1\r\nHost: evil.example:8080\r\n"
                                                 "Origin: http://evil.example:8080\r\n" + browser);
  EXPECT_EQ(code, 403) << body;
  EXPECT_NE(body.find("host 'evil.example:8080' is not a name of this listener"), std::string::npos) << body;
  EXPECT_EQ(h_.Job(id)["job"]["state"], "running") << "nothing changed";
  auto [read_code, read_body] = UnixRequest(h_.socket(), "GET /v1/jobs HTTP/1.1\r\nHost: EVIL.example\r\n" + browser);
  EXPECT_EQ(read_code, 403) << "reads too: the page would see every job's command";
  // Loopback names (any port, any case) are the tunnel's own.
  for (const char* host : {"localhost:8080", "LOCALHOST", "127.0.0.1:8080", "127.1.2.3", "[::1]:8080",
                           "ui.localhost:9000"}) {
    auto [c, b] = UnixRequest(h_.socket(), std::string("GET /v1/jobs HTTP/1.1\r\nHost: ") + host + "\r\n" + browser);
    EXPECT_EQ(c, 200) << host << ": " << b;
  }
  for (const char* host : {"127.0.0.1.evil.example", "127.0.0.1.evil", "localhost.evil.example", "128.0.0.1", "127.0.0",
                           "[::2]", "localhost-evil", "gpuslice"}) {
    auto [c, b] = UnixRequest(h_.socket(), std::string("GET /v1/jobs HTTP/1.1\r\nHost: ") + host + "\r\n" + browser);
    EXPECT_EQ(c, 403) << host << ": " << b;
  }
  // A Referer alone marks a browser too.
  auto [ref, ref_body] = UnixRequest(h_.socket(), "GET /v1/jobs HTTP/1.1\r\nHost: evil.example\r\nReferer: http://evil.example/\r\n");
  EXPECT_EQ(ref, 403) << ref_body;
  // Every request is checked, not only those with browser headers: a same-origin GET over
  // plain HTTP carries none of them (issue #32). Without Host (HTTP/1.0 tools) it is no browser.
  auto [c10, b10] = UnixRequest(h_.socket(), "GET /v1/jobs HTTP/1.0\r\n");
  EXPECT_EQ(c10, 200) << b10;
  auto [curl, curl_body] = UnixRequest(h_.socket(), "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nUser-Agent: curl/7.88.1\r\n");
  EXPECT_EQ(curl, 403) << curl_body;
  auto [bare, bare_body] = UnixRequest(h_.socket(), "GET /v1/jobs HTTP/1.1\r\nHost: evil.example\r\n");
  EXPECT_EQ(bare, 403) << "no browser header at all: " << bare_body;
  auto [local, local_body] = UnixRequest(h_.socket(), "GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\n");
  EXPECT_EQ(local, 200) << local_body;
  // The page's own same-origin cancel through the tunnel works.
  auto [ok, ok_body] = UnixRequest(h_.socket(), "POST " + cancel + " HTTP/1.1\r\nHost: localhost:8080\r\n"
                                                  "Origin: http://localhost:8080\r\n" + browser);
  EXPECT_EQ(ok, 200) << ok_body;
  h_.WaitJob(id, [](const json& j) { return IsTerminal(j["state"].get<std::string>()); });
}

}  // namespace
}  // namespace gpuslice::testing_e2e
