// `gpuslice report` over a year of stored history of a busy 8-GPU host, and the size of that
// store under the retention policy (store/retention.h).
//
// The host: 8 GPUs busy all year with back-to-back jobs of 1-12 hours; half of them are whole
// GPUs (training), half are groups of four 250m shared slices (interactive; one in five of
// those idles and is reclaimed). Every job has its records (job, slice) and its events
// (submit, wait, place, start, exit), as the daemon stores them. Utilisation points are
// written at the resolution the retention policy keeps for their age (hourly older than 35
// days, 10-minute from 2 to 35 days, 1-minute for the last 2 days) for every device and every
// slice; one hour in fifty is unmeasured. A retention pass afterwards must find nothing left to
// fold (checked), so the store is what a year of the daemon leaves behind.
//
// Then, in the same run:
//   fold      ApplyRetention folding 2 days of 1-minute points (what the daemon's thread does
//             as time passes), in steps of 2000 points: total time and the longest step (the
//             longest the daemon's commits can wait on it);
//   report    BuildReport for the whole year (--since 365d), grouped by queue, user and job;
//             the target is under 2 s each;
//   commits   the longest of the daemon's commits while a year's report runs, with the report
//             on the store's connection (baseline) and on its own read-only one (serve's).
// Prints the figures and the store's size. `--days N` (default 365) scales the year; `--keep
// DIR` leaves the state directory there (`gpuslice report --state-dir DIR` reads it).
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

#include "report/report.h"
#include "store/retention.h"
#include "store/store.h"

namespace gs = gpuslice;
using Clock = std::chrono::steady_clock;

namespace {

constexpr gs::Micros kDay = 24 * gs::kHour;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::uintmax_t DirBytes(const std::filesystem::path& dir) {
  std::uintmax_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

// The resolution the policy keeps for a point `age` old.
gs::Micros WidthAt(gs::Micros age) {
  if (age > 35 * kDay) return gs::kHour;
  if (age > 2 * kDay) return 10 * gs::kMinute;
  return gs::kMinute;
}

struct Filler {
  Filler(gs::store::Store& s, gs::Micros n) : store(s), now(n) {}
  gs::store::Store& store;
  gs::Micros now;
  std::mt19937_64 rng{42};
  gs::store::WriteBatch batch;
  std::size_t points = 0;

  void Flush(bool force = false) {
    if (!force && batch.samples.size() + batch.jobs.size() * 8 < 20000) return;
    auto st = store.Commit(batch);
    if (!st.ok()) {
      std::fprintf(stderr, "commit: %s\n", st.ToString().c_str());
      std::exit(1);
    }
    batch = {};
  }

  // Points for `subject` over [a, b) at the kept resolution: mean utilisation `util`
  // (-1: unmeasured), `idle` share of the measured time.
  void Points(const std::string& subject, gs::Micros a, gs::Micros b, int util, bool idle) {
    gs::Micros t = a;
    while (t < b) {
      const gs::Micros w = WidthAt(now - t);
      const gs::Micros end = std::min(b, (t / w + 1) * w);
      gs::store::SampleRecord p;
      p.time = end;
      p.subject = subject;
      p.span = end - t;
      const bool unknown = util < 0 || rng() % 50 == 0;
      p.util_permille = unknown ? -1 : util;
      p.known = unknown ? 0 : p.span;
      p.idle = !unknown && idle ? p.span : 0;
      p.memory_used = unknown ? -1 : 20LL << 30;
      p.resolution = w > gs::kMinute ? w : 0;
      batch.samples.push_back(std::move(p));
      ++points;
      t = end;
      Flush();
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  int days = 365;
  std::string keep;  // --keep DIR: leave the filled state directory there (for docs examples)
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--days") == 0) days = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--keep") == 0) keep = argv[i + 1];
  }
  if (days < 1 || days > 3650) {
    std::fprintf(stderr, "--days: 1..3650\n");
    return 2;
  }
  const std::filesystem::path dir =
      !keep.empty() ? std::filesystem::path(keep)
                    : std::filesystem::temp_directory_path() / ("report_bench_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  auto opened = gs::store::OpenSqliteStore(dir.string(), gs::store::Sync::kProcess);
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    return 1;
  }
  auto store = std::move(opened).value();
  const gs::Micros now = 1796083200LL * gs::kSecond;  // 2026-12-01
  const gs::Micros start = now - days * kDay;

  auto t_fill = Clock::now();
  Filler f{*store, now};
  std::uint64_t job = 0, slice = 0;
  std::size_t events = 0;
  const char* users[] = {"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"};
  for (int dev = 0; dev < 8; ++dev) {
    gs::Micros t = start;
    while (t < now) {
      const gs::Micros len = std::min<gs::Micros>(now - t, (1 + static_cast<gs::Micros>(f.rng() % 12)) * gs::kHour);
      const bool whole = f.rng() % 2 == 0;
      const int n = whole ? 1 : 4;
      int dev_util = 0;
      for (int k = 0; k < n; ++k) {
        gs::store::JobRecord j;
        j.id = gs::JobId(++job);
        j.user = users[f.rng() % 8];
        j.queue = whole ? "training" : "interactive";
        j.gpus = 1;
        j.milli = whole ? 1000 : 250;
        j.argv = {"python", "train.py"};
        const bool reclaimed = !whole && f.rng() % 5 == 0;
        const gs::Micros end = reclaimed ? t + std::min<gs::Micros>(len, 40 * gs::kMinute) : t + len;
        j.state = end >= now ? gs::store::JobState::kRunning
                  : reclaimed ? gs::store::JobState::kReclaimed
                              : gs::store::JobState::kSucceeded;
        j.submit_time = t - static_cast<gs::Micros>(f.rng() % 600) * gs::kSecond;
        j.start_time = t;
        j.end_time = end >= now ? 0 : end;
        j.deadline = whole ? 0 : t + 8 * gs::kHour;
        j.slice = gs::SliceId(++slice);
        f.batch.jobs.push_back(j);
        gs::store::SliceRecord s;
        s.id = j.slice;
        s.job = j.id;
        s.kind = whole ? gs::SliceKind::kWhole : gs::SliceKind::kShared;
        s.devices = {dev};
        s.milli = j.milli;
        s.active = end >= now;
        s.created = t;
        s.released = end >= now ? 0 : end;
        f.batch.slices.push_back(s);
        for (const char* type : {"submit", "wait", "place", "start", "exit"}) {
          f.batch.events.push_back({0, type == std::string("submit") || type == std::string("wait") ? j.submit_time : t, j.id, type,
                                    type == std::string("wait") ? "no-device-fits: no GPU with 1 free" : "job event"});
          ++events;
        }
        const int util = reclaimed ? 0 : static_cast<int>(200 + f.rng() % 700) / n;
        dev_util += util;
        f.Points("slice/" + std::to_string(slice), t, std::min(end, now), util, reclaimed);
      }
      f.Points("device/" + std::to_string(dev), t, t + len, std::min(dev_util, 1000), false);
      t += len;
    }
  }
  f.Flush(true);
  const double fill_s = Since(t_fill);
  // The fill is what retention leaves: a pass finds nothing to fold.
  auto check = gs::store::ApplyRetention(*store, gs::store::RetentionPolicy{}, now);
  if (!check.ok() || check->folded != 0) {
    std::fprintf(stderr, "fill is not at the retained resolution: folded %lld\n",
                 check.ok() ? static_cast<long long>(check->folded) : -1LL);
    return 1;
  }
  store.reset();
  {
    // Fold the WAL back so the size is the database's.
    auto s = gs::store::OpenSqliteStore(dir.string(), gs::store::Sync::kProcess);
    s->reset();
  }
  const double mib = static_cast<double>(DirBytes(dir)) / (1 << 20);
  std::printf("history: %d days, 8 GPUs, %llu jobs, %zu events, %zu points; filled in %.1f s\n", days,
              static_cast<unsigned long long>(job), events, f.points, fill_s);
  std::printf("store size: %.1f MiB (gpuslice.db + wal)\n", mib);

  auto reopened = gs::store::OpenSqliteStore(dir.string(), gs::store::Sync::kProcess);
  store = std::move(reopened).value();

  // Two days on: the 1-minute points of days 3-4 back fall to 10-minute buckets, and so on.
  {
    gs::Micros longest = 0;
    auto t_all = Clock::now();
    int steps = 0;
    for (const auto& tier : gs::store::RetentionPolicy{}.tiers) {
      while (true) {
        auto t = Clock::now();
        auto n = store->CompactSamples(now + 2 * kDay - tier.age, tier.width, 2000);
        longest = std::max<gs::Micros>(longest, static_cast<gs::Micros>(Since(t) * 1e6));
        ++steps;
        if (!n.ok() || *n == 0) break;
      }
    }
    std::printf("fold (2 days on): %.3f s in %d steps; longest step %.1f ms\n", Since(t_all), steps,
                static_cast<double>(longest) / 1000);
  }

  {
    // Where a report's time goes: its store reads, one by one.
    auto t = Clock::now();
    auto jobs = store->ListJobsBrief();
    const double t_jobs = Since(t);
    t = Clock::now();
    auto slices = store->ListSlicesBrief();
    const double t_slices = Since(t);
    t = Clock::now();
    auto sums = store->SumSamples(now - days * kDay, now, 0);
    const double t_sums = Since(t);
    t = Clock::now();
    auto buckets = store->SumSamples(now - days * kDay, now, 2 * kDay);
    const double t_buckets = Since(t);
    t = Clock::now();
    auto waits = store->ListEventsOfType("wait", now);
    const double t_waits = Since(t);
    std::printf("store reads: jobs %.3f s, slices %.3f s, sums %.3f s, timeline %.3f s, wait events %.3f s\n", t_jobs,
                t_slices, t_sums, t_buckets, t_waits);
  }
  int worst_ok = 1;
  for (auto by : {gs::report::GroupBy::kQueue, gs::report::GroupBy::kUser, gs::report::GroupBy::kJob}) {
    gs::report::ReportOptions o;
    o.now = now;
    o.period = {now - days * kDay, now};
    o.by = by;
    o.devices = 8;
    auto t = Clock::now();
    auto r = gs::report::BuildReport(*store, o);
    const double secs = Since(t);
    if (!r.ok()) {
      std::fprintf(stderr, "report: %s\n", r.status().ToString().c_str());
      return 1;
    }
    std::printf("report --since %dd --by %s: %.3f s (target < 2 s), %zu groups; %s\n", days,
                std::string(gs::report::GroupByName(by)).c_str(), secs, (*r)["groups"].size(),
                (*r)["verdict"]["text"].get<std::string>().c_str());
    if (secs >= 2.0) worst_ok = 0;
  }
  {
    // The daemon's commits while a whole-year report runs beside them: the report on the store's
    // own connection (each of its reads holds that connection), then on the report's own
    // read-only connection (OpenSqliteReader, what serve gives the daemon's report).
    // (nullptr: no report, the commits alone for a second: what the WAL's own checkpoints cost.)
    auto during = [&](gs::store::Store* report_store, const char* label) {
      std::atomic<bool> done{false};
      std::thread report([&] {
        if (report_store == nullptr) {
          std::this_thread::sleep_for(std::chrono::seconds(1));
        } else {
          gs::report::ReportOptions o;
          o.now = now;
          o.period = {now - days * kDay, now};
          o.devices = 8;
          (void)gs::report::BuildReport(*report_store, o);
        }
        done = true;
      });
      double longest = 0;
      int commits = 0;
      std::vector<double> took;
      while (!done) {
        gs::store::WriteBatch b;
        b.events.push_back(gs::store::EventRecord{0, now, gs::JobId(1), "bench-commit", "{}"});
        auto t = Clock::now();
        if (!store->Commit(b).ok()) break;
        took.push_back(Since(t));
        longest = std::max(longest, took.back());
        ++commits;
      }
      report.join();
      std::sort(took.begin(), took.end());
      const double p99 = took.empty() ? 0 : took[took.size() * 99 / 100];
      std::printf("commits while a report runs (%s): %d, p99 %.1f ms, longest %.1f ms\n", label, commits,
                  p99 * 1000, longest * 1000);
      return longest;
    };
    during(nullptr, "no report");
    const double same = during(store.get(), "report on the store's connection");
    auto reader = gs::store::OpenSqliteReader(dir.string());
    if (!reader.ok()) {
      std::fprintf(stderr, "reader: %s\n", reader.status().ToString().c_str());
      return 1;
    }
    const double own = during(reader->get(), "report on its own connection");
    std::printf("longest commit, own connection / shared connection: %.3fx\n", same > 0 ? own / same : 0.0);
  }
  store.reset();
  if (keep.empty()) std::filesystem::remove_all(dir);
  return worst_ok ? 0 : 1;
}
