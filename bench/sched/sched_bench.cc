// Placement decisions per second on a 10,000-GPU cluster model (1250 hosts x 8 GPUs: 1000
// H100-80GB hosts for whole/shared/mps work and 250 A100-80GB hosts in MIG mode), with a
// realistic mix: shared fractions (100m..500m), mps, whole 1/2/4/8 and MIG inference of
// 5..40GiB. Closed loop: the cluster is filled until ~200 jobs wait, then every step finishes
// one random running job and submits a new one, so the cluster stays busy and the pending
// queue is re-examined on every finish. ReconfigureMig is answered at once.
//
// Figure: StartSlice decisions per CPU-second (thread CPU time) on one core (target >= 100,000).
// Baseline, measured in the same run: the same workload with placement through the generic
// Filter/Score path over every host ("gpuslice" policy if registered, else "fgd").
// Usage: sched_bench [steps] [--no-baseline]   (default 200000 steps)
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

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
};

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

Result Run(const std::string& policy, std::uint64_t steps, std::uint64_t seed) {
  Config config = DefaultConfig();
  for (QueueConfig& q : config.queues) {
    q.placement = policy;
    q.idle.enabled = false;  // no Ticks in this benchmark
  }
  Scheduler s(config, seed);
  std::mt19937_64 rng(seed);
  Micros now = 0;
  Result res;
  std::vector<JobId> running;
  std::vector<std::size_t> where;  // JobId -> index in running (or npos)
  auto apply = [&](const std::vector<Decision>& ds, auto& self) -> void {
    for (const Decision& d : ds) {
      if (const auto* st = std::get_if<StartSlice>(&d)) {
        ++res.starts;
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
  auto submit = [&] {
    std::string queue;
    JobRequest r = RandomJob(rng, queue);
    feed(Submit{now, JobId(next_job++), fmt::format("user{}", rng() % 200), queue, r});
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

void Print(const std::string& name, const Result& r) {
  std::printf("%-28s %9.0f decisions/s  %9.0f events/s  (%llu starts in %.2fs; %zu running, "
              "%zu pending, ~%.0f%% of GPU share allocated)\n",
              name.c_str(), r.starts / r.seconds, r.events / r.seconds,
              static_cast<unsigned long long>(r.starts), r.seconds, r.running, r.pending,
              100 * r.utilisation);
}

}  // namespace
}  // namespace gpuslice::sched

int main(int argc, char** argv) {
  using namespace gpuslice::sched;
  std::uint64_t steps = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 200000;
  std::printf("sched_bench: 10,000 GPUs (1250 hosts x 8), %llu finish+submit steps\n",
              static_cast<unsigned long long>(steps));
  Result fast = Run("best-fit", steps, 1);
  Print("best-fit (indexed)", fast);
  std::vector<std::string> names = PolicyNames();
  std::string generic = std::find(names.begin(), names.end(), "gpuslice") != names.end() ? "gpuslice" : "fgd";
  bool baseline = !(argc > 2 && std::string(argv[2]) == "--no-baseline");
  if (baseline && std::find(names.begin(), names.end(), generic) != names.end()) {
    Result slow = Run(generic, std::max<std::uint64_t>(steps / 50, 1000), 1);
    Print(generic + " (scan all hosts)", slow);
    std::printf("ratio indexed/scan: %.1fx\n", (fast.starts / fast.seconds) / (slow.starts / slow.seconds));
  }
  std::printf("target: >= 100000 decisions/s -> %s\n", fast.starts / fast.seconds >= 100000 ? "met" : "NOT met");
  return 0;
}
