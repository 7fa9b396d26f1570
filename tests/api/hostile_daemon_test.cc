// The CLI's side of the socket against a hostile (or newer) daemon: whatever listens on the
// socket may answer anything. A real Unix socket serves canned answers; the client must turn
// each malformed one into a clear error naming what was wrong, never throw, never take an OK
// status for a failure, and never read without bound.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "api/cli.h"
#include "api/client.h"
#include "api/protocol.h"
#include "api/views.h"

namespace gpuslice::api {
namespace {

// Answers every connection with `answer` (after reading the request's head), then closes it.
class FakeDaemon {
 public:
  explicit FakeDaemon(std::string answer) : answer_(std::move(answer)) {
    path_ = (std::filesystem::temp_directory_path() /
             ("api_fake_daemon_" + std::to_string(getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".sock"))
                .string();
    std::filesystem::remove(path_);
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeDaemon() {
    stop_ = true;
    thread_.join();
    close(fd_);
    std::filesystem::remove(path_);
  }
  const std::string& path() const { return path_; }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string got;
      char buf[4096];
      while (got.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
      }
      std::string_view out = answer_;
      while (!out.empty()) {
        ssize_t n = send(c, out.data(), out.size(), MSG_NOSIGNAL);
        if (n <= 0) break;
        out.remove_prefix(static_cast<size_t>(n));
      }
      close(c);
    }
  }

  std::string answer_;
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string Answer(std::string_view status, std::string_view body) {
  return std::string("HTTP/1.1 ") + std::string(status) + "\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + std::string(body);
}

struct Case {
  const char* name;
  std::string answer;
  const char* says;  // the error must contain this
};

TEST(HostileDaemon, MalformedAnswersAreClearErrorsNotExceptions) {
  const Case cases[] = {
      // json::value() threw type_error on these (the CLI aborted).
      {"error code not a string", Answer("400 Bad Request", R"({"error":{"code":5,"message":"x"}})"),
       "field 'error.code': expected a string, got 5"},
      {"error message not a string",
       Answer("404 Not Found", R"({"error":{"code":"NOT_FOUND","message":["a"]}})"),
       "field 'error.message': expected a string, got an array of 1 element"},
      {"error not an object", Answer("500 Oops", R"({"error":"boom"})"),
       "field 'error': expected a string, got \"boom\""},
      // sscanf's %d overflowed; anything that is not three digits is refused.
      {"status out of range", "HTTP/1.1 99999999999999999999 Huge\r\nContent-Length: 0\r\n\r\n",
       "status line 'HTTP/1.1 99999999999999999999 Huge'"},
      {"status not a number", "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", "status line"},
      {"status below 100", "HTTP/1.1 042 Odd\r\nContent-Length: 0\r\n\r\n", "status line"},
      // A chunk of 2^64-1 bytes: n + 2 wrapped to 1, then resize(2^64-1) threw length_error.
      {"chunk size that wraps",
       "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nxx\r\n0\r\n\r\n",
       "bad chunk size from daemon: 18446744073709551615 bytes"},
      {"chunk size not hex", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
       "bad chunk size from daemon: 'zz'"},
      {"content length beyond the bound",
       "HTTP/1.1 200 OK\r\nContent-Length: 1000000000000000\r\n\r\n{}",
       "bad Content-Length from daemon: '1000000000000000'"},
      {"a header line without end", "HTTP/1.1 200 OK\r\nX-Pad: " + std::string(200'000, 'a'),
       "a line longer than 65536 bytes"},
      {"a 2xx body that is not JSON", Answer("200 OK", "not json"), "invalid JSON"},
      // Nested deep enough to overflow a recursive walk: refused before any tree is built.
      {"an answer nested 200,000 deep", Answer("200 OK", std::string(200'000, '[') + std::string(200'000, ']')),
       "nested deeper than 64 levels"},
      {"an error nested 200,000 deep",
       Answer("500 Oops", R"({"error":{"code":"INTERNAL","message":)" + std::string(200'000, '[') +
                              std::string(200'000, ']') + "}}"),
       "daemon answered HTTP 500"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FakeDaemon d(c.answer);
    ApiClient client(d.path());
    Result<nlohmann::json> r = Status(StatusCode::kInternal, "not called");
    ASSERT_NO_THROW(r = client.Get("/v1/jobs"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().ToString();
  }
}

TEST(HostileDaemon, AnErrorThatSaysOkIsStillAnError) {
  // Built from code "OK", the Status was OK: a failed request read as a success (and Result's
  // assert fired in debug builds).
  FakeDaemon d(Answer("409 Conflict", R"({"error":{"code":"OK","message":"fine"}})"));
  ApiClient client(d.path());
  auto r = client.Post("/v1/jobs", nlohmann::json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.status().ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("OK: fine"), std::string::npos) << r.status().ToString();
}

TEST(HostileDaemon, AWellFormedErrorKeepsItsCodeAndMessage) {
  FakeDaemon d(Answer("404 Not Found", R"({"error":{"code":"NOT_FOUND","message":"job 7: no such job"}})"));
  ApiClient client(d.path());
  auto r = client.Get("/v1/jobs/7");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status(), Status(StatusCode::kNotFound, "job 7: no such job"));
}

// The CLI commands read the answer through its typed view: a well-formed HTTP answer whose
// records are not what the schema says is an error naming the record and the field (get<int>
// on a string threw type_error here and the CLI aborted).
TEST(HostileDaemon, MalformedQueuesDevicesEventsAreClearErrors) {
  const std::string queue =
      R"({"name":"gpu","default_kind":"shared","allowed_kinds":["shared"],"priority":0,"time_limit_us":0,)"
      R"("max_duration_us":0,"reserve_after_us":0,"idle_reclaim":false,"idle_window_us":0,"idle_grace_us":0,)"
      R"("idle_reclaim_mode":"off","idle_signals":[],"pending":"lots","running":0,"oldest_wait_us":0})";
  struct CliCase {
    const char* name;
    std::string body;
    Status (*run)(const ClientFlags&);
    const char* says;
  };
  const CliCase cases[] = {
      {"queues: pending not a number", R"({"queues":[)" + queue + R"(],"default_queue":"gpu"})",
       [](const ClientFlags& c) { return Queues(c); }, "queues[0]: queue \"gpu\": field 'pending' = \"lots\""},
      {"queues: not a list", R"({"queues":{"gpu":1}})", [](const ClientFlags& c) { return Queues(c); },
       "field 'queues': expected a list"},
      {"devices: index a string", R"({"devices":[{"index":"0"}]})", [](const ClientFlags& c) { return Devices(c); },
       "devices[0]: device \"0\": field 'index'"},
      {"top: devices missing", R"({"simulated":"yes"})",
       [](const ClientFlags& c) { return Top(c, true, "1s"); }, "field 'devices': expected a list"},
      {"show: events of the wrong shape", R"({"events":[{"seq":1,"time_us":"now"}]})",
       [](const ClientFlags& c) { return Show(c, 7); }, "events[0]: event 1: field 'time_us'"},
  };
  for (const CliCase& c : cases) {
    SCOPED_TRACE(c.name);
    FakeDaemon d(Answer("200 OK", c.body));
    ClientFlags flags;
    flags.socket = d.path();
    Status st;
    ASSERT_NO_THROW(st = c.run(flags));
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();  // exit 1: the daemon's fault
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.ToString();
  }
}

// Not hostile: `show` says how often a job was requeued, only when it was.
TEST(HostileDaemon, ShowSaysHowOftenAJobWasRequeued) {
  for (int requeues : {0, 1, 2}) {
    SCOPED_TRACE(requeues);
    JobView v;
    v.id = 7;
    v.user = "alice";
    v.queue = "training";
    v.gpus = 1;
    v.state = "running";
    v.argv = {"sleep", "1"};
    v.requeues = requeues;
    // One answer for both requests show makes (the job, its events).
    const nlohmann::json body = {{"job", v.ToJson()}, {"slice", nullptr}, {"events", nlohmann::json::array()}};
    FakeDaemon d(Answer("200 OK", body.dump()));
    ClientFlags flags;
    flags.socket = d.path();
    ::testing::internal::CaptureStdout();
    Status st = Show(flags, 7);
    const std::string out = ::testing::internal::GetCapturedStdout();
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_NE(out.find("state:        running\n"), std::string::npos) << out;
    if (requeues == 0) {
      EXPECT_EQ(out.find("requeued"), std::string::npos) << out;
    } else {
      EXPECT_NE(out.find(requeues == 1 ? "requeued:     1 time (" : "requeued:     2 times ("), std::string::npos) << out;
    }
  }
}

}  // namespace
}  // namespace gpuslice::api
