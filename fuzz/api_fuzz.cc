// Fuzzes the daemon's API as one local user reaches it: requests through the real handler
// (daemon::MakeApiHandler over a Daemon with the in-memory store, the fake launcher and fake
// devices), so every route's parsing is covered: job ids in paths, query values, and the JSON
// bodies of submit (Daemon::Submit's field parsing), cancel and the rest.
//
// Input: requests separated by a line "%%"; each is a request line ("POST /v1/jobs HTTP/1.1",
// parsed by api::RequestParser as the server does) and, after the first newline, the body.
// Each input gets a fresh daemon holding one running job (id 1), so crashes reproduce.
// HttpServer calls the handler without a try/catch, so this target catches nothing either:
// an exception escaping the handler is a crash.
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "api/http.h"
#include "daemon/daemon.h"
#include "daemon/routes.h"
#include "devices/fake.h"
#include "exec/fake_launcher.h"
#include "fuzz/fuzz_util.h"
#include "store/store.h"

namespace gpuslice::fuzz {
namespace {

Micros g_now = 0;

std::unique_ptr<daemon::Daemon> NewDaemon() {
  daemon::DaemonOptions o;
  o.state_dir = ScratchDir();
  o.simulated = true;
  o.grace = kSecond;
  auto backend = devices::FakeBackend::Create("2xH100-80GB", [] { return g_now; });
  if (!backend.ok()) Fail(backend.status().ToString());
  auto d = std::make_unique<daemon::Daemon>(sched::DefaultConfig(), o, store::NewMemoryStore(),
                                            std::move(backend).value(),
                                            std::make_unique<exec::FakeLauncher>(), [] { return g_now; });
  Status st = d->Start();
  if (!st.ok()) Fail(st.ToString());
  return d;
}

}  // namespace
}  // namespace gpuslice::fuzz

// The daemon's log lines would be most of the run's time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  fuzz::g_now = 1'800'000'000LL * kSecond;
  auto d = fuzz::NewDaemon();
  api::Handler handler = daemon::MakeApiHandler(*d);
  api::Peer peer;
  peer.authenticated = true;
  peer.unix_socket = true;
  peer.uid = static_cast<std::int64_t>(geteuid());
  peer.gid = static_cast<std::int64_t>(getegid());
  peer.pid = getpid();
  {
    api::HttpRequest first;
    first.method = "POST";
    first.path = "/v1/jobs";
    first.body = R"({"queue": "training", "gpus": 1, "argv": ["sleep", "100"]})";
    first.peer = peer;
    api::HttpResponse r = handler(first);
    fuzz::Check(r.status == 201, "the setup job was not accepted: " + r.body);
  }
  int n = 0;
  for (std::string_view part : fuzz::SplitInput(fuzz::AsText(data, size), "\n%%\n")) {
    if (++n > 16) break;
    std::size_t nl = part.find('\n');
    std::string_view line = part.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    api::RequestParser parser(64 * 1024, 4 * 1024 * 1024);
    std::string wire = std::string(line) + "\r\n\r\n";
    if (parser.Parse(&wire) != api::RequestParser::State::kDone) {
      continue;  // the server answers 4xx without calling the handler
    }
    api::HttpRequest* req = &parser.request();
    req->body = nl == std::string_view::npos ? "" : std::string(part.substr(nl + 1));
    req->peer = peer;
    api::HttpResponse r = handler(*req);
    fuzz::Check(r.status >= 200 && r.status < 600, "status out of range");
    // logs --follow: one round of the stream, with a client that has gone away.
    if (r.stream) r.stream([](std::string_view) { return false; });
    // A non-streaming response with a JSON content type must be JSON (clients parse it).
    if (!r.stream && r.content_type == "application/json") {
      fuzz::Check(nlohmann::json::accept(r.body), "a JSON response that is not JSON");
    }
    fuzz::g_now += kSecond;
    d->Step();
  }
  Status st = d->CheckConsistency();
  if (!st.ok()) fuzz::Fail(st.ToString());
  return 0;
}
