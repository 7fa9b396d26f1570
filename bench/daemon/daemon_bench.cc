// Daemon benchmark on a simulated 64-GPU host (8 x 8xH100-80GB worth of devices on one node),
// through the real Unix socket, real SQLite store (WAL; --sync process and machine) and real fork/exec:
//   1. submit -> start latency: POST /v1/jobs answers once the job's process exists and its
//      pid is durable, so the POST round trip is the submit-to-start latency. p50 / p99.
//      Target: p99 < 10 ms. Two arrival patterns: one submission every 20 ms (50/s, far above a
//      team's rate: each is a latency, not a queue) and back to back (a burst of 160: on a
//      2-core machine each submission then also competes for the CPUs with the start-up of
//      the jobs just started, so this measures throughput as much as latency).
//   2. read throughput: 64 concurrent clients (one connection each) doing GET /v1/jobs/ID and
//      GET /v1/devices for 2 s. Target: >= 5,000 requests/s.
// Baseline in the same run: the same reads against a trivial handler on the same server (the
// transport's ceiling), printed as a ratio.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "api/client.h"
#include "api/http.h"
#include "daemon/daemon.h"
#include "daemon/routes.h"
#include "devices/clock.h"
#include "devices/fake.h"
#include "exec/launcher.h"
#include "sched/config.h"
#include "store/store.h"

namespace gs = gpuslice;
using Clock = std::chrono::steady_clock;

namespace {

double ReadsPerSecond(const std::string& socket, int clients, std::chrono::milliseconds span,
                      const std::vector<std::string>& targets) {
  std::atomic<bool> go{false}, stop{false};
  std::atomic<long> done{0}, errors{0};
  std::vector<std::thread> ts;
  for (int c = 0; c < clients; ++c) {
    ts.emplace_back([&, c] {
      gs::api::HttpClient client(socket);
      while (!go) std::this_thread::yield();
      long n = 0;
      for (size_t i = static_cast<size_t>(c); !stop; ++i) {
        auto r = client.Request("GET", targets[i % targets.size()]);
        if (!r.ok() || r->status != 200) ++errors;
        ++n;
      }
      done += n;
    });
  }
  auto t0 = Clock::now();
  go = true;
  std::this_thread::sleep_for(span);
  stop = true;
  for (auto& t : ts) t.join();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (errors > 0) std::printf("  (%ld failed requests)\n", errors.load());
  return static_cast<double>(done) / secs;
}

struct Figures {
  double p50 = 0, p99 = 0, rps = 0;
  int not_running = 0;
};

// One simulated 64-GPU host with the given store durability; measures submit->start latency
// and (when `reads`) read throughput with 64 clients.
Figures RunHost(gs::store::Sync sync, bool reads, int pace_ms,
                int ready_stubs = gs::exec::kDefaultReadyStubs) {
  namespace fs = std::filesystem;
  Figures f;
  fs::path dir = fs::temp_directory_path() / ("daemon_bench_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto store = gs::store::OpenSqliteStore((dir / "state").string(), sync);
  auto backend = gs::devices::FakeBackend::Create("64xH100-80GB", gs::devices::SystemClock());
  if (!store.ok() || !backend.ok()) {
    std::fprintf(stderr, "setup failed\n");
    std::exit(1);
  }
  gs::daemon::DaemonOptions opt;
  opt.state_dir = (dir / "state").string();
  opt.simulated = true;
  // One submitting user stands for many: the built-in per-user caps would hold it to 8 jobs.
  gs::sched::Config config = gs::sched::DefaultConfig();
  for (auto& q : config.queues) q.user_max_jobs = q.user_max_milli = 0;
  gs::daemon::Daemon daemon(std::move(config), opt, std::move(store).value(),
                            std::move(backend).value(), gs::exec::NewProcessLauncher("", ready_stubs),
                            gs::devices::SystemClock());
  if (!daemon.Start().ok()) std::exit(1);
  gs::api::HttpServer server(gs::daemon::MakeApiHandler(daemon));
  std::string socket = (dir / "gs.sock").string();
  if (!server.ListenUnix(socket).ok()) std::exit(1);
  server.Start();
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    while (!stop) {
      daemon.Step();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  // 160 jobs: 20 training jobs of one whole GPU and 140 interactive quarter GPUs (55 GPUs in
  // all); every one fits, so each starts inside its POST.
  const int kJobs = 160;
  std::vector<double> ms;
  gs::api::ApiClient client(socket);
  for (int i = 0; i < kJobs; ++i) {
    nlohmann::json body = {{"argv", {"sleep", "20"}}, {"cwd", "/"},
                           {"env", {{"PATH", "/usr/bin:/bin"}}}};
    if (i % 8 == 0) {
      body["queue"] = "training";
    } else {
      body["queue"] = "interactive";
      body["fraction"] = "0.25";
    }
    if (pace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pace_ms));
    auto t0 = Clock::now();
    auto r = client.Post("/v1/jobs", body);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!r.ok() || (*r)["job"]["state"] != "running") ++f.not_running;
  }
  std::sort(ms.begin(), ms.end());
  f.p50 = ms[ms.size() / 2];
  f.p99 = ms[ms.size() * 99 / 100];

  if (reads) {
    std::vector<std::string> targets;
    for (int i = 1; i <= 50; ++i) targets.push_back("/v1/jobs/" + std::to_string(i));
    targets.push_back("/v1/devices");
    f.rps = ReadsPerSecond(socket, 64, std::chrono::milliseconds(2000), targets);
  }
  server.Stop();
  stop = true;
  loop.join();
  // Leave no process behind: end each job's process group by its pid.
  auto jobs = daemon.ListJobs({});
  if (jobs.ok()) {
    for (const auto& j : (*jobs)["jobs"]) {
      int pid = j["pid"].get<int>();
      if (pid > 0) kill(-pid, SIGKILL);
    }
  }
  fs::remove_all(dir);
  return f;
}

}  // namespace

int main() {
  std::printf("daemon_bench: simulated host, 64 x H100-80GB (SIMULATED devices, no NVIDIA driver)\n");
  Figures proc = RunHost(gs::store::Sync::kProcess, true, 20);
  std::printf("submit->start latency, --sync process (default; survives kill -9), one submission "
              "every 20 ms: p50 %.2f ms, p99 %.2f ms over 160 jobs (target p99 < 10 ms)%s\n",
              proc.p50, proc.p99, proc.not_running ? " -- SOME JOBS DID NOT START" : "");
  Figures burst = RunHost(gs::store::Sync::kProcess, false, 0);
  std::printf("submit->start latency, --sync process, 160 submissions back to back: p50 %.2f ms, "
              "p99 %.2f ms%s\n",
              burst.p50, burst.p99, burst.not_running ? " -- SOME JOBS DID NOT START" : "");
  Figures cold = RunHost(gs::store::Sync::kProcess, false, 20, 0);
  std::printf("  baseline, no stubs spawned ahead (each start spawns its own), one every 20 ms: p50 "
              "%.2f ms, p99 %.2f ms; ratio p99 %.2f\n", cold.p50, cold.p99, proc.p99 / cold.p99);
  Figures mach = RunHost(gs::store::Sync::kMachine, false, 20);
  std::printf("submit->start latency, --sync machine (fsync per commit), one every 20 ms: p50 %.2f ms, "
              "p99 %.2f ms%s\n",
              mach.p50, mach.p99, mach.not_running ? " -- SOME JOBS DID NOT START" : "");

  // Baseline: the same server and clients with a handler that does nothing.
  namespace fs = std::filesystem;
  gs::api::HttpServer trivial([](const gs::api::HttpRequest&) {
    gs::api::HttpResponse r;
    r.body = "{}";
    return r;
  });
  std::string socket2 = (fs::temp_directory_path() /
                         ("daemon_bench_trivial_" + std::to_string(getpid()) + ".sock")).string();
  if (!trivial.ListenUnix(socket2).ok()) return 1;
  trivial.Start();
  double base = ReadsPerSecond(socket2, 64, std::chrono::milliseconds(2000), {"/x"});
  // Transport baseline for the latency: the same sequential POSTs to the trivial handler.
  std::vector<double> tms;
  gs::api::HttpClient tc(socket2);
  for (int i = 0; i < 160; ++i) {
    auto t0 = Clock::now();
    (void)tc.Request("POST", "/v1/jobs", R"({"argv":["sleep","20"]})");
    tms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(tms.begin(), tms.end());
  std::printf("transport baseline (trivial handler, same POSTs): p50 %.2f ms, p99 %.2f ms; "
              "submit p50 / baseline p50 = %.1f\n", tms[80], tms[158], proc.p50 / std::max(tms[80], 1e-3));
  trivial.Stop();
  std::printf("reads with 64 clients: %.0f requests/s (target >= 5000); trivial-handler baseline "
              "%.0f/s; ratio %.2f\n", proc.rps, base, proc.rps / base);
  return 0;
}
