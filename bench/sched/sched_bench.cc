// Placement decisions per second on a 10,000-GPU cluster model (1250 hosts x 8 GPUs: 1000
// H100-80GB hosts for whole/shared/mps work and 250 A100-80GB hosts in MIG mode), with a
// realistic mix: shared fractions (100m..500m), mps, whole 1/2/4/8 and MIG inference of
// 5..40GiB. Closed loop: the cluster is filled until ~200 jobs wait, then every step finishes
// one random running job and submits a new one, so the cluster stays busy and the pending
// queue is re-examined on every finish. ReconfigureMig is answered at once.
//
// Figure: StartSlice decisions per CPU-second (thread CPU time) on one core.
// Baselines, measured in the same run, same seed and steps: the reference path that scores
// every candidate host with the policy's plugin (Scheduler::SetReferencePlacement). best-fit
// on the scheduler's indexes against the best-fit plugin (simple.cc); the frag-aware default
// "gpuslice" policy, scored once per distinct host state (HostStates), against its plugin. A
// digest of every StartSlice shows that each pair takes the same decisions.
// Usage: sched_bench [steps] [--no-baseline] [--gpuslice-only]   (default 200000 steps)
// --gpuslice-only skips the best-fit runs: for profiling the frag-aware path alone, e.g.
// `valgrind --tool=callgrind sched_bench 10000 --no-baseline --gpuslice-only`.
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/text.h"
#include "sched/placement/placement.h"
#include "sched/scheduler.h"

namespace gpuslice::sched {
namespace {

// CPU time of this thread: the machine running benchmarks may be shared, and the figure is
// "per core".
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Result {
  double seconds = 0;
  std::uint64_t starts = 0;
  std::uint64_t events = 0;
  std::size_t running = 0;
  std::size_t pending = 0;
  double utilisation = 0;  // allocated share of all GPUs at the end
  std::uint64_t digest = 0;  // FNV-1a over every StartSlice (job, node, devices), in order
};

void Digest(std::uint64_t& h, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ULL;
  }
}

JobRequest RandomJob(std::mt19937_64& rng, std::string& queue) {
  std::uniform_int_distribution<int> pct(0, 99);
  JobRequest r;
  int p = pct(rng);
  if (p < 45) {
    queue = "interactive";
    r.kind = SliceKind::kShared;
    r.milli = 100 * (1 + static_cast<int>(rng() % 5));
  } else if (p < 55) {
    queue = "interactive";
    r.kind = SliceKind::kMps;
    r.milli = 50 * (1 + static_cast<int>(rng() % 6));
  } else if (p < 85) {
    queue = "training";
    r.kind = SliceKind::kWhole;
    int q = pct(rng);
    r.gpus = q < 50 ? 1 : q < 75 ? 2 : q < 90 ? 4 : 8;
  } else {
    queue = "inference";
    r.kind = SliceKind::kMig;
    static constexpr Bytes kSizes[] = {5 * kGiB, 10 * kGiB, 18 * kGiB, 35 * kGiB};
    r.memory = kSizes[rng() % 4];
  }
  return r;
}

// With `teams`: the 200 users in 4 teams of 50, each guaranteed a quarter of the GPUs in the
// interactive (preemptible: lent GPUs are taken back) and training queues (docs/teams.md).
Result Run(const std::string& policy, std::uint64_t steps, std::uint64_t seed, bool reference = false,
           bool teams = false) {
  Config config = DefaultConfig();
  for (QueueConfig& q : config.queues) {
    q.placement = policy;
    q.idle.enabled = false;  // no Ticks in this benchmark
    q.user_max_jobs = 0;     // the load of the baselines (docs/sim.md): no per-user caps
    q.user_max_milli = 0;
  }
  for (int t = 0; teams && t < 4; ++t) {
    TeamConfig team;
    team.name = fmt::format("team{}", t);
    for (int u = t; u < 200; u += 4) team.users.push_back(fmt::format("user{}", u));
    std::sort(team.users.begin(), team.users.end());
    team.guarantee = {{"interactive", 500 * kOneGpu}, {"training", 1500 * kOneGpu}};
    config.teams.teams.push_back(std::move(team));
  }
  Scheduler s(config, seed);
  s.SetReferencePlacement(reference);
  std::mt19937_64 rng(seed);
  Micros now = 0;
  Result res;
  res.digest = 14695981039346656037ULL;
  std::vector<JobId> running;
  std::vector<std::size_t> where;  // JobId -> index in running (or npos)
  auto apply = [&](const std::vector<Decision>& ds, auto& self) -> void {
    for (const Decision& d : ds) {
      if (const auto* st = std::get_if<StartSlice>(&d)) {
        ++res.starts;
        Digest(res.digest, st->job.value());
        Digest(res.digest, st->node.value());
        for (DeviceIndex di : st->devices) Digest(res.digest, di.value());
        if (where.size() <= st->job.value()) where.resize(st->job.value() * 2 + 16, SIZE_MAX);
        where[st->job.value()] = running.size();
        running.push_back(st->job);
      } else if (const auto* p = std::get_if<Preempt>(&d)) {
        std::size_t i = where[p->job.value()];
        where[running.back().value()] = i;
        running[i] = running.back();
        running.pop_back();
        where[p->job.value()] = SIZE_MAX;
      } else if (const auto* rc = std::get_if<ReconfigureMig>(&d)) {
        ++res.events;
        self(s.Handle(ReconfigureDone{now, rc->device, true, rc->layout, ""}), self);
      }
    }
  };
  auto feed = [&](const Event& e) {
    ++res.events;
    apply(s.Handle(e), apply);
  };
  for (std::uint32_t n = 1; n <= 1250; ++n) {
    bool mig = n > 1000;
    for (std::uint32_t i = 0; i < 8; ++i) {
      feed(DeviceAdded{now, {NodeId(n), DeviceIndex(i)}, fmt::format("GPU-{}-{}", n, i),
                       mig ? "A100-80GB" : "H100-80GB", mig, mig, {}});
    }
  }
  std::uint64_t next_job = 1;
  // Names made once: formatting one per step is the benchmark's cost, not the scheduler's.
  std::vector<std::string> users;
  for (int u = 0; u < 200; ++u) users.push_back(fmt::format("user{}", u));
  auto submit = [&] {
    std::string queue;
    JobRequest r = RandomJob(rng, queue);
    feed(Submit{now, JobId(next_job++), users[rng() % 200], queue, r});
  };
  // Fill.
  while (s.Pending().size() < 200) {
    now += 1000;
    submit();
  }
  double t0 = CpuSeconds();
  std::uint64_t starts0 = res.starts, events0 = res.events;
  for (std::uint64_t i = 0; i < steps; ++i) {
    now += 1000;
    if (!running.empty()) {
      std::size_t k = rng() % running.size();
      JobId j = running[k];
      where[running.back().value()] = k;
      running[k] = running.back();
      running.pop_back();
      where[j.value()] = SIZE_MAX;
      feed(Finish{now, j});
    }
    submit();
  }
  res.seconds = CpuSeconds() - t0;
  res.starts -= starts0;
  res.events -= events0;
  res.running = s.slices().size();
  res.pending = s.Pending().size();
  MilliGpu used = 0;
  for (const auto& [ref, d] : s.devices()) {
    if (d.mode == DeviceMode::kMig) used += d.clients > 0 ? kOneGpu * d.clients / 7 : 0;
    else used += d.used_milli;
  }
  res.utilisation = static_cast<double>(used) / (10000.0 * kOneGpu);
  Status inv = s.CheckInvariants();
  if (!inv.ok()) {
    std::fprintf(stderr, "invariant violated: %s\n", inv.ToString().c_str());
    std::exit(1);
  }
  return res;
}

// Naive baseline: Place() over every host for each decision.
void Print(const std::string& name, const Result& r) {
  std::printf("%-28s %9.0f decisions/s  %9.0f events/s  (%llu starts in %.2fs; %zu running, "
              "%zu pending, ~%.0f%% of GPU share allocated; digest %016llx)\n",
              name.c_str(), r.starts / r.seconds, r.events / r.seconds,
              static_cast<unsigned long long>(r.starts), r.seconds, r.running, r.pending,
              100 * r.utilisation, static_cast<unsigned long long>(r.digest));
}

// The same-run ratio of a fast path to the reference scan, and whether both took the same
// decisions (same starts, same digest of every StartSlice).
void CompareWithReference(const char* fast_name, const Result& fast, const Result& ref) {
  std::printf("ratio %s/reference: %.1fx; decisions identical: %s (%llu starts, digest %016llx vs %016llx)\n",
              fast_name, (fast.starts / fast.seconds) / (ref.starts / ref.seconds),
              fast.digest == ref.digest && fast.starts == ref.starts ? "yes" : "NO",
              static_cast<unsigned long long>(fast.starts), static_cast<unsigned long long>(fast.digest),
              static_cast<unsigned long long>(ref.digest));
}

}  // namespace
}  // namespace gpuslice::sched

int main(int argc, char** argv) {
  using namespace gpuslice::sched;
  std::uint64_t steps = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 200000;
  std::printf("sched_bench: 10,000 GPUs (1250 hosts x 8), %llu finish+submit steps\n",
              static_cast<unsigned long long>(steps));
  bool baseline = true;
  bool best_fit = true;
  bool teams = false;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-baseline") {
      baseline = false;
    } else if (arg == "--gpuslice-only") {
      best_fit = false;
    } else if (arg == "--teams") {
      teams = true;
    } else {
      std::fprintf(stderr, "sched_bench: unknown argument '%s' (expected --no-baseline, --gpuslice-only, --teams)\n",
                   gpuslice::ForTerminal(arg).c_str());
      return 2;
    }
  }
  Result fast;
  if (best_fit) {
    fast = Run("best-fit", steps, 1);
    Print("best-fit (indexed)", fast);
  }
  if (best_fit && baseline) {
    // The same steps with the best-fit plugin scoring every candidate host (the reference
    // placement): what the indexes save, and proof that they take the plugin's decisions.
    Result ref = Run("best-fit", steps, 1, /*reference=*/true);
    Print("best-fit (reference scan)", ref);
    CompareWithReference("indexed", fast, ref);
  }
  // The fragmentation-aware default policy: scored once per distinct host state, against the
  // reference path (every candidate host scored, GenericPlacement) in the same run, on the same
  // seed; the two must take the same decisions (digest of every StartSlice).
  const std::uint64_t frag_steps = steps;
  Result frag = Run("gpuslice", frag_steps, 1);
  Print("gpuslice (by host state)", frag);
  if (baseline) {
    Result frag_ref = Run("gpuslice", frag_steps, 1, /*reference=*/true);
    Print("gpuslice (reference scan)", frag_ref);
    CompareWithReference("by-state", frag, frag_ref);
  }
  if (teams) {
    Result with_teams = Run("gpuslice", frag_steps, 1, /*reference=*/false, /*teams=*/true);
    Print("gpuslice + 4 teams", with_teams);
    std::printf("ratio with teams/without: %.2fx\n",
                (with_teams.starts / with_teams.seconds) / (frag.starts / frag.seconds));
  }
  std::printf("target: >= 100000 decisions/s -> best-fit %s, gpuslice %s\n",
              !best_fit ? "not run" : fast.starts / fast.seconds >= 100000 ? "met" : "NOT met",
              frag.starts / frag.seconds >= 100000 ? "met" : "NOT met");
  return 0;
}
