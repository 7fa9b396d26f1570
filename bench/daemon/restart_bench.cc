// Restart time after a year of a busy host, with and without journal compaction.
//
// A busy host journals about one Sample a minute per busy slice (activity, fed once per
// quantum; see daemon.cc) besides its jobs' Submits, Finishes and deciding Ticks. This builds
// that journal for a simulated 8xH100-80GB host whose 8 GPUs are busy all year with jobs of
// 1-12 hours (half shared slices, half whole GPUs; a job in ten goes idle and is reclaimed),
// journaled exactly as the daemon does (an entry for every event that can change the
// scheduler), into the real SQLite store (in hourly commits). Then it measures Daemon::Start on
// that store, through the real code (read the journal, replay it, reconcile), three times:
//   baseline   compaction off: the uncompacted replay of the whole year;
//   compacting the first start with compaction on (replay, compact, verify, rewrite);
//   compacted  the next start, replaying only the compacted journal: the restart time that
//              compaction keeps bounded.
// Prints entries, seconds and the ratio baseline / compacted. `--days N` (default 365) scales
// the year down.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "daemon/daemon.h"
#include "daemon/journal.h"
#include "devices/fake.h"
#include "exec/fake_launcher.h"
#include "sched/config.h"
#include "sched/scheduler.h"
#include "store/store.h"

namespace gs = gpuslice;
using Clock = std::chrono::steady_clock;

namespace {

// The built-in queues without per-user caps: the journal is a busy host's, as before the caps.
gs::sched::Config Uncapped() {
  gs::sched::Config c = gs::sched::DefaultConfig();
  for (auto& q : c.queues) q.user_max_jobs = q.user_max_milli = 0;
  return c;
}

struct Plan {
  gs::Micros end = 0;
  bool goes_idle = false;
};

// Writes the journal of `days` of the busy host into the store at `state`; returns entries.
std::size_t BuildJournal(const std::string& state, int days, gs::devices::FakeBackend& backend) {
  auto store = gs::store::OpenSqliteStore(state, gs::store::Sync::kProcess).value();
  // The daemon's seed: the daemon reads it from the store, so replays match this scheduler.
  (void)store->PutMeta("scheduler_seed", "42");
  gs::sched::Scheduler sched(Uncapped(), 42);
  gs::store::WriteBatch batch;
  std::size_t entries = 0;
  auto feed = [&](const gs::sched::Event& e) {
    auto d = sched.Handle(e);
    if (gs::daemon::CanChangeState(e) || !d.empty()) {
      batch.journal.push_back(gs::daemon::EncodeEvent(e));
      ++entries;
    }
  };
  gs::Micros now = 1'000 * gs::kSecond;
  const auto devices = backend.ListDevices().value();
  for (const auto& d : devices) {
    feed(gs::sched::DeviceAdded{now, {gs::NodeId(1), d.index}, d.uuid, d.model->name, true, false, {}});
  }
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> pct(0, 99);
  std::map<gs::JobId, Plan> plans;
  std::uint64_t next_job = 1;
  for (gs::Micros minute = 0; minute < static_cast<gs::Micros>(days) * 24 * 60; ++minute) {
    now += gs::kMinute;
    // Keep the host full: a new job whenever fewer than 10 are pending or running.
    int active = 0;
    for (const auto& [id, j] : sched.jobs()) active += j.state != gs::sched::JobState::kEnded;
    while (active < 10) {
      gs::sched::JobRequest r;
      std::string queue = "training";
      if (pct(rng) < 50) {
        queue = "interactive";
        r.kind = gs::sched::SliceKind::kShared;
        r.milli = 1000;
        r.memory = 40 * gs::kGiB;
      } else {
        r.gpus = 1;
      }
      gs::JobId id(next_job++);
      plans[id] = {now + gs::kHour + pct(rng) * 6 * gs::kMinute + pct(rng) * 60 * gs::kSecond,
                   pct(rng) < 10};
      feed(gs::sched::Submit{now, id, "user" + std::to_string(id.value() % 5), queue, r});
      ++active;
    }
    std::vector<gs::JobId> finish;
    for (const auto& [sid, v] : sched.slices()) {
      const Plan& p = plans[v.job];
      if (now >= p.end) {
        finish.push_back(v.job);
      } else if (!p.goes_idle) {
        feed(gs::sched::Sample{now, {{sid, 70, 20, 1}}});  // one entry a minute per busy slice
      }
    }
    for (gs::JobId j : finish) feed(gs::sched::Finish{now, j});
    feed(gs::sched::Tick{now + gs::kSecond});
    if (minute % 60 == 59) {
      if (!store->Commit(batch).ok()) std::abort();
      batch = {};
      // The scheduler forgets old ended jobs; so does the plan book.
      std::erase_if(plans, [&](const auto& e) { return !sched.jobs().contains(e.first) && e.first.value() + 20000 < next_job; });
    }
  }
  if (!store->Commit(batch).ok()) std::abort();
  return entries;
}

// One Daemon::Start on the store in `state`: seconds, and the journal's size afterwards.
std::pair<double, std::size_t> StartOnce(const std::string& state, std::size_t compact_at) {
  auto store = gs::store::OpenSqliteStore(state, gs::store::Sync::kProcess).value();
  gs::store::Store* raw = store.get();
  gs::daemon::DaemonOptions o;
  o.state_dir = state;
  o.simulated = true;
  o.compact_journal_at = compact_at;
  auto backend = gs::devices::FakeBackend::Create("8xH100-80GB", [] { return gs::Micros(0); }).value();
  auto t0 = Clock::now();
  gs::daemon::Daemon d(Uncapped(), o, std::move(store), std::move(backend),
                       std::make_unique<gs::exec::FakeLauncher>(),
                       [] { return gs::Micros(1'000 * gs::kSecond + 400LL * 24 * gs::kHour); });
  if (!d.Start().ok()) std::abort();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  return {secs, raw->ReadJournal().value().size()};
}

}  // namespace

int main(int argc, char** argv) {
  int days = 365;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--days") == 0) days = std::atoi(argv[i + 1]);
  }
  if (days < 1 || days > 3650) {
    std::fprintf(stderr, "--days: %d must be 1..3650\n", days);
    return 2;
  }
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("restart_bench_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string state = (dir / "state").string();
  auto backend = gs::devices::FakeBackend::Create("8xH100-80GB", [] { return gs::Micros(0); }).value();
  auto t0 = Clock::now();
  const std::size_t entries = BuildJournal(state, days, *backend);
  std::printf("restart after %d days of a busy 8-GPU host: %zu journal entries (built in %.0f s)\n",
              days, entries, std::chrono::duration<double>(Clock::now() - t0).count());
  const auto [base_s, base_n] = StartOnce(state, 0);
  std::printf("  baseline   (no compaction, full replay): %10.3f s  %9zu entries\n", base_s, base_n);
  const auto [first_s, first_n] = StartOnce(state, gs::daemon::DaemonOptions{}.compact_journal_at);
  std::printf("  compacting (replay + compact + verify) : %10.3f s  -> %zu entries\n", first_s, first_n);
  const auto [next_s, next_n] = StartOnce(state, gs::daemon::DaemonOptions{}.compact_journal_at);
  std::printf("  compacted  (restart after compaction)  : %10.3f s  %9zu entries\n", next_s, next_n);
  std::printf("  restart time ratio baseline / compacted: %.1fx; journal %.1fx smaller\n",
              base_s / next_s, static_cast<double>(base_n) / static_cast<double>(next_n));
  fs::remove_all(dir);
  return 0;
}
