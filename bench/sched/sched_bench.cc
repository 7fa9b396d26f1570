// Placement decisions per second on a 10,000-GPU cluster model (1250 hosts x 8 GPUs: 1000
// H100-80GB hosts for whole/shared/mps work and 250 A100-80GB hosts in MIG mode), with a
// realistic mix: shared fractions (100m..500m), mps, whole 1/2/4/8 and MIG inference of
// 5..40GiB. Closed loop: the cluster is filled until ~200 jobs wait, then every step finishes
// one random running job and submits a new one, so the cluster stays busy and the pending
// queue is re-examined on every finish. ReconfigureMig is answered at once.
//
// Figure: StartSlice decisions per CPU-second (thread CPU time) on one core.
// Baseline, measured in the same run: the naive approach, one Filter/Score Place() call over
// all 1,250 hosts per decision with the best-fit plugin (on a static snapshot of a busy
// cluster, so it is a lower bound on its cost). Then the frag-aware default "gpuslice" policy,
// scored once per distinct host state (HostStates), with its same-run baseline: the reference
// path that scores every candidate host (Scheduler::SetReferencePlacement), same seed and
// steps; a digest of every StartSlice shows that both take the same decisions.
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
double NaiveScanDecisionsPerSecond(std::uint64_t decisions) {
  std::mt19937_64 rng(7);
  std::vector<std::vector<GpuView>> gpus(1250, std::vector<GpuView>(8));
  std::vector<NodeView> nodes(1250);
  for (std::uint32_t n = 0; n < 1250; ++n) {
    for (GpuView& g : gpus[n]) {
      int r = static_cast<int>(rng() % 10);  // busy: 60% full, 30% partly used, 10% free
      g.free_milli = r < 6 ? 0 : r < 9 ? 100 * static_cast<MilliGpu>(1 + rng() % 9) : kOneGpu;
      g.free_memory = 80 * kGiB * g.free_milli / kOneGpu;
    }
    nodes[n].index = n;
    nodes[n].model = "H100-80GB";
    nodes[n].cpu_milli_free = nodes[n].cpu_milli_total = 1 << 30;
    nodes[n].memory_free = nodes[n].memory_total = Bytes{1} << 50;
    nodes[n].gpus = gpus[n];
  }
  auto policy = MakePolicy("best-fit");
  std::uint64_t placed = 0;
  double t0 = CpuSeconds();
  for (std::uint64_t i = 0; i < decisions; ++i) {
    PlacementRequest req;
    int p = static_cast<int>(rng() % 10);
    req.num_gpus = p < 6 ? 1 : p < 8 ? 2 : 1;
    req.milli_per_gpu = p < 6 ? 100 * static_cast<MilliGpu>(1 + rng() % 5) : kOneGpu;
    placed += Place(**policy, req, nodes, PlacementContext{}).has_value();
  }
  double secs = CpuSeconds() - t0;
  if (placed == 0) std::printf("(baseline placed nothing)\n");
  return static_cast<double>(decisions) / secs;
}

void Print(const std::string& name, const Result& r) {
  std::printf("%-28s %9.0f decisions/s  %9.0f events/s  (%llu starts in %.2fs; %zu running, "
              "%zu pending, ~%.0f%% of GPU share allocated; digest %016llx)\n",
              name.c_str(), r.starts / r.seconds, r.events / r.seconds,
              static_cast<unsigned long long>(r.starts), r.seconds, r.running, r.pending,
              100 * r.utilisation, static_cast<unsigned long long>(r.digest));
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
    double naive = NaiveScanDecisionsPerSecond(std::max<std::uint64_t>(steps / 100, 500));
    std::printf("%-28s %9.0f decisions/s  (Place() over all 1250 hosts per decision)\n",
                "best-fit (naive scan)", naive);
    std::printf("ratio indexed/naive scan: %.1fx\n", (fast.starts / fast.seconds) / naive);
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
    std::printf("ratio by-state/reference: %.1fx; decisions identical: %s (%llu starts, digest %016llx vs %016llx)\n",
                (frag.starts / frag.seconds) / (frag_ref.starts / frag_ref.seconds),
                frag.digest == frag_ref.digest && frag.starts == frag_ref.starts ? "yes" : "NO",
                static_cast<unsigned long long>(frag.starts), static_cast<unsigned long long>(frag.digest),
                static_cast<unsigned long long>(frag_ref.digest));
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
