// Reads cannot starve writes (issue #32, class 3): another user's submit and read latency while
// one user floods the daemon, over a year of history, through the real daemon, HTTP server
// (TCP, one bearer token per user, so the two are two identities), SQLite store (WAL, with
// serve's read-only connections) and process launcher, on simulated devices.
//
// The history: a year of an 8-GPU host, back to back jobs of 1-12 hours (every one ended), each
// with its slice, four events and hourly utilisation points for the slice and the device.
// Then, in the same run, four phases of `--seconds` each (default 20):
//   quiet     nobody else: the baseline;
//   reads     the flooder loops cheap reads of the year on 8 connections: every job
//             (GET /v1/jobs, `ps --all`), 10,000 events, the queues, one job;
//   reports   the flooder loops year-long usage reports on 8 connections;
//   both      reads on 8 connections and reports on 8 more.
// Meanwhile the victim, on its own connection, submits a job every 50 ms (it starts at once: a
// real process, then cancelled) and reads its job and the active jobs. Printed per phase: the
// victim's submit and read p50/p99/max, the flooder's completed and refused requests, and the
// ratio of each p99 to the quiet one. Target: p99 under 50 ms for both, in every phase.
// `--days N` scales the year; exits 1 when a target is missed.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

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
using nlohmann::json;

namespace {

constexpr gs::Micros kDay = 24 * gs::kHour;
constexpr std::int64_t kFloodUid = 60001;
constexpr std::int64_t kVictimUid = 65534;  // nobody: its jobs run as a real other user
const std::string kFloodToken = "flood-token-0123456789abcdef";
const std::string kVictimToken = "victim-token-0123456789abcdef";

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fairness_bench: %s\n", what.c_str());
  std::exit(1);
}

// A year of an 8-GPU host that ended at `now`: returns the number of jobs written.
std::uint64_t WriteHistory(gs::store::Store& store, gs::Micros now, int days) {
  std::mt19937_64 rng(7);
  gs::store::WriteBatch b;
  std::uint64_t jobs = 0;
  auto flush = [&](bool force) {
    if (!force && b.samples.size() < 20000) return;
    if (auto st = store.Commit(b); !st.ok()) Die(st.ToString());
    b = {};
  };
  auto hourly = [&](const std::string& subject, gs::Micros from, gs::Micros to, int util) {
    for (gs::Micros t = from; t < to; t += gs::kHour) {
      const gs::Micros end = std::min(to, t + gs::kHour);
      b.samples.push_back({end, subject, util, 10LL << 30, end - t, end - t, util < 100 ? end - t : 0, gs::kHour});
    }
  };
  for (int dev = 0; dev < 8; ++dev) {
    for (gs::Micros t = now - days * kDay; t < now - 12 * gs::kHour;) {
      const gs::Micros len = static_cast<gs::Micros>(1 + rng() % 12) * gs::kHour;
      gs::store::JobRecord j;
      j.id = gs::JobId(++jobs);
      j.user = "user" + std::to_string(rng() % 20);
      j.uid = 2000 + static_cast<std::int64_t>(rng() % 20);
      j.queue = jobs % 3 == 0 ? "training" : "interactive";
      j.argv = {"python", "train.py", "--epochs", std::to_string(rng() % 100)};
      j.state = rng() % 7 == 0 ? gs::store::JobState::kCancelled : gs::store::JobState::kSucceeded;
      j.submit_time = t - 60 * gs::kSecond;
      j.start_time = t;
      j.end_time = t + len;
      j.slice = gs::SliceId(jobs);
      j.log_path = "/nonexistent/" + std::to_string(jobs) + ".log";
      b.jobs.push_back(j);
      b.slices.push_back({j.slice, j.id, gs::SliceKind::kWhole, {dev}, {}, 1000, 0, 0, std::nullopt, false, t, t + len});
      for (const char* type : {"submit", "place", "start", "exit"}) {
        b.events.push_back({0, t, j.id, type, "job " + std::to_string(jobs) + " " + type});
      }
      const int util = static_cast<int>(rng() % 1000);
      hourly("slice/" + std::to_string(jobs), t, t + len, util);
      hourly("device/" + std::to_string(dev), t, t + len, util);
      flush(false);
      t += len;
    }
  }
  flush(true);
  return jobs;
}

struct Latency {
  std::vector<double> ms;
  double At(double q) const {
    if (ms.empty()) return 0;
    std::vector<double> s = ms;
    std::sort(s.begin(), s.end());
    return s[std::min(s.size() - 1, static_cast<std::size_t>(q * static_cast<double>(s.size())))];
  }
  double Max() const { return ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()); }
};

struct Phase {
  std::string name;
  Latency submit, read;
  long flood_ok = 0, flood_refused = 0, victim_errors = 0;
};

// The flooder: `conns` connections looping `targets` until `stop`.
std::vector<std::thread> Flood(const std::string& ep, int conns, const std::vector<std::string>& targets,
                               std::atomic<bool>& stop, std::atomic<long>& ok, std::atomic<long>& refused) {
  std::vector<std::thread> ts;
  for (int c = 0; c < conns; ++c) {
    ts.emplace_back([&, c, targets] {  // the list by value: the caller's is a temporary
      gs::api::HttpClient client(ep, kFloodToken);
      for (std::size_t i = static_cast<std::size_t>(c); !stop; ++i) {
        auto r = client.Request("GET", targets[i % targets.size()]);
        if (r.ok() && r->status == 200) {
          ++ok;
        } else {
          ++refused;
        }
      }
    });
  }
  return ts;
}

Phase RunPhase(const std::string& name, const std::string& ep, std::chrono::seconds span, int read_conns,
               int report_conns) {
  Phase p;
  p.name = name;
  std::atomic<bool> stop{false};
  std::atomic<long> ok{0}, refused{0};
  std::vector<std::thread> flood;
  if (read_conns > 0) {
    flood = Flood(ep, read_conns, {"/v1/jobs", "/v1/events?limit=10000", "/v1/queues", "/v1/jobs/17"}, stop, ok,
                  refused);
  }
  if (report_conns > 0) {
    auto more = Flood(ep, report_conns, {"/v1/report?since=365d&by=user", "/v1/report?since=365d&by=queue"}, stop,
                      ok, refused);
    for (auto& t : more) flood.push_back(std::move(t));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the flood is under way
  gs::api::ApiClient victim(ep, kVictimToken);
  const auto end = Clock::now() + span;
  while (Clock::now() < end) {
    json body = {{"argv", {"sleep", "600"}}, {"queue", "interactive"}, {"fraction", "0.1"}, {"cwd", "/"},
                 {"env", {{"PATH", "/usr/bin:/bin"}}}};
    auto t0 = Clock::now();
    auto r = victim.Post("/v1/jobs", body);
    p.submit.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!r.ok()) {
      ++p.victim_errors;
      continue;
    }
    const auto id = (*r)["job"]["id"].get<std::uint64_t>();
    for (const std::string& target : {"/v1/jobs/" + std::to_string(id), std::string("/v1/jobs?state=active")}) {
      t0 = Clock::now();
      auto g = victim.Get(target);
      p.read.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (!g.ok()) ++p.victim_errors;
    }
    if (!victim.Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object()).ok()) ++p.victim_errors;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  for (auto& t : flood) t.join();
  p.flood_ok = ok;
  p.flood_refused = refused;
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  int days = 365;
  int seconds = 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--days") == 0) days = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atoi(argv[i + 1]);
  }
  if (days < 1 || days > 3650 || seconds < 1 || seconds > 600) Die("--days 1..3650, --seconds 1..600");
  if (geteuid() != 0) Die("run as root: the victim's jobs run as uid 65534 (nobody)");
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("fairness_bench_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string state = (dir / "state").string();
  const gs::Micros now = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  auto t_fill = Clock::now();
  std::uint64_t jobs = 0;
  {
    auto s = gs::store::OpenSqliteStore(state, gs::store::Sync::kProcess);
    if (!s.ok()) Die(s.status().ToString());
    jobs = WriteHistory(**s, now, days);
  }
  std::printf("history: %d days of 8 GPUs, %llu ended jobs, filled in %.1f s\n", days,
              static_cast<unsigned long long>(jobs),
              std::chrono::duration<double>(Clock::now() - t_fill).count());

  // The daemon as serve builds it: the store, its read-only connections, real processes.
  auto store = gs::store::OpenSqliteStore(state, gs::store::Sync::kProcess);
  auto readers = gs::store::OpenSqliteReaders(state, 4);
  auto backend = gs::devices::FakeBackend::Create("8xH100-80GB", gs::devices::SystemClock());
  if (!store.ok() || !readers.ok() || !backend.ok()) Die("setup failed");
  gs::daemon::DaemonOptions opt;
  opt.state_dir = state;
  opt.simulated = true;
  opt.report_store = std::move(readers).value();
  gs::daemon::Daemon daemon(gs::sched::DefaultConfig(), opt, std::move(store).value(), std::move(backend).value(),
                            gs::exec::NewProcessLauncher(), gs::devices::SystemClock());
  if (gs::Status st = daemon.Start(); !st.ok()) Die(st.ToString());
  gs::api::HttpServer server(gs::daemon::MakeApiHandler(daemon));
  if (!server.ListenTcp("127.0.0.1:0", {{"flooder", kFloodUid, kFloodUid, false, kFloodToken},
                                       {"victim", kVictimUid, kVictimUid, false, kVictimToken}})
           .ok()) {
    Die("listen");
  }
  server.Start();
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    while (!stop) {
      daemon.Step();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const std::string ep = "tcp://127.0.0.1:" + std::to_string(server.tcp_port());
  const auto span = std::chrono::seconds(seconds);
  std::vector<Phase> phases;
  phases.push_back(RunPhase("quiet", ep, span, 0, 0));
  phases.push_back(RunPhase("reads x8", ep, span, 8, 0));
  phases.push_back(RunPhase("reports x8", ep, span, 0, 8));
  phases.push_back(RunPhase("both x16", ep, span, 8, 8));
  server.Stop();
  stop = true;
  loop.join();

  const Phase& quiet = phases.front();
  bool met = true;
  std::printf("%-11s %8s %8s %8s  %8s %8s %8s  %9s %9s %7s  %s\n", "phase", "sub p50", "sub p99", "sub max", "read p50",
              "read p99", "read max", "flood ok", "refused", "errors", "p99 / quiet (submit, read)");
  for (const Phase& p : phases) {
    std::printf("%-11s %8.1f %8.1f %8.1f  %8.1f %8.1f %8.1f  %9ld %9ld %7ld  %.2fx, %.2fx\n", p.name.c_str(),
                p.submit.At(0.5), p.submit.At(0.99), p.submit.Max(), p.read.At(0.5), p.read.At(0.99), p.read.Max(),
                p.flood_ok, p.flood_refused, p.victim_errors,
                quiet.submit.At(0.99) > 0 ? p.submit.At(0.99) / quiet.submit.At(0.99) : 0.0,
                quiet.read.At(0.99) > 0 ? p.read.At(0.99) / quiet.read.At(0.99) : 0.0);
    met = met && p.submit.At(0.99) < 50 && p.read.At(0.99) < 50 && p.victim_errors == 0;
  }
  std::printf("(ms; %zu submits and %zu reads in the quiet phase; target: every p99 < 50 ms)%s\n",
              quiet.submit.ms.size(), quiet.read.ms.size(), met ? "" : "  -- TARGET MISSED");
  // Leave no process behind (the victim cancelled each job; a stop may still be under way).
  std::this_thread::sleep_for(std::chrono::seconds(1));
  fs::remove_all(dir);
  return met ? 0 : 1;
}
