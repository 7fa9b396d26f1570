// Synthetic online replay: 1,000,000 jobs on 100,000 GPUs (12,500 nodes x 8), Poisson arrivals
// at ~90% offered load, exponential durations (mean 1 h), a mix of whole-GPU (1/2/4/8) and
// fractional (250m/500m) requests, replayed through sched::Scheduler (the default replay config:
// one queue, placement `policy`, default "best-fit" = the Scheduler's indexed fast path).
// Targets: under 60 s CPU and under 4 GiB peak RSS (VmHWM). Prints CPU seconds, peak RSS and
// scheduler decisions/s; then, as the baseline measured in the same run, the placement-only loop
// `sim replay` ran before (RunPlacementReplay, policy `baseline`, default "gpuslice").
// A fourth argument sets the offered load (default 0.9); above 1 the pending queue grows all run
// long, which is what stresses the Scheduler's pending passes.
// A fifth argument "limits" gives the queue the built-in interactive queue's limits: an 8 h time
// limit warned 15 min before, and idle reclaim after 30 min below 5% + 10 min grace (each job's
// utilisation is uniform in 0..1, so ~5% of the jobs are idle): this exercises the ticks.
// Baseline "reference": the same replay with Scheduler::SetReferencePlacement (every candidate
// host scored, instead of each distinct host state once, for policies such as gpuslice), with
// a check that both started the same jobs on the same devices in the same order.
// Usage: sim_replay_bench [jobs] [policy] [baseline policy | reference | none] [offered load] [limits]
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include <fmt/format.h>

#include "sched/placement/placement.h"
#include "sim/placement_replay.h"
#include "sim/replay.h"

namespace {
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

long PeakRssKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

std::vector<gpuslice::sim::ReplayJob> Jobs(int n, int gpus_total, double load, std::uint64_t seed) {
  using namespace gpuslice;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> dur(1.0 / 3600.0);
  const double mean_gpus = 0.40 * 1 + 0.15 * 2 + 0.10 * 4 + 0.10 * 8 + 0.25 * 0.375;
  const double rate = load * gpus_total / (mean_gpus * 3600.0);  // jobs per second
  std::exponential_distribution<double> gap(rate);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<sim::ReplayJob> jobs(n);
  double t = 0;
  for (int i = 0; i < n; ++i) {
    sim::ReplayJob& j = jobs[i];
    t += gap(rng);
    j.id = std::to_string(i);
    j.submit = static_cast<Micros>(t * kSecond);
    j.duration = static_cast<Micros>(std::max(1.0, dur(rng)) * kSecond);
    const double x = u(rng);
    int num = 1;
    MilliGpu milli = kOneGpu;
    if (x < 0.40) num = 1;
    else if (x < 0.55) num = 2;
    else if (x < 0.65) num = 4;
    else if (x < 0.75) num = 8;
    else milli = x < 0.875 ? 250 : 500;
    j.request.num_gpus = num;
    j.request.milli_per_gpu = milli;
    j.utilisation = u(rng);
  }
  return jobs;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace gpuslice;
  const int n = argc > 1 ? std::atoi(argv[1]) : 1'000'000;
  const std::string name = argc > 2 ? argv[2] : "best-fit";
  const std::string baseline = argc > 3 ? argv[3] : "gpuslice";
  const double load = argc > 4 ? std::atof(argv[4]) : 0.9;
  const bool limits = argc > 5 && std::string(argv[5]) == "limits";
  constexpr int kNodes = 12'500, kGpus = 8;
  std::vector<sim::ReplayJob> jobs = Jobs(n, kNodes * kGpus, load, 42);
  auto config = sim::ReplayConfig(name, jobs);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().message().c_str());
    return 2;
  }
  if (limits) {
    for (sched::QueueConfig& q : config->queues) {
      q.time_limit = 8 * kHour;
      q.warn_before = 15 * kMinute;
      q.idle = sched::IdlePolicy{.enabled = true, .util_threshold_percent = 5, .window = 30 * kMinute,
                                 .grace = 10 * kMinute, .activity = {}, .action = sched::ReclaimAction::kReclaim,
                                .report_sources = {}, .busy_is_active = true, .busy_max = 0,
                                .report_stale = 10 * kMinute, .reclaim = {}};
    }
  }
  const auto shapes = sim::ReplayShapes(jobs);
  const sim::Cluster cluster = sim::Cluster::Uniform(kNodes, kGpus, "GPU", 128000, 1024 * kGiB);
  std::vector<sim::ReplayJob> copy = jobs;  // the baseline's input, made before measuring
  const double cpu0 = CpuSeconds();
  sim::ReplayResult r = sim::RunReplay(cluster, std::move(jobs), *config, name, shapes);
  const double cpu = CpuSeconds() - cpu0;
  const long rss = PeakRssKiB();
  fmt::print("online replay through sched::Scheduler, {} jobs on {} GPUs ({} nodes x {}), placement {}, offered load {}{}\n",
             n, kNodes * kGpus, kNodes, kGpus, name, load, limits ? ", time limit + idle reclaim" : "");
  fmt::print("  CPU {:.2f} s, wall {:.2f} s (target < 60 s: {}), peak RSS {:.0f} MiB (target < 4096 MiB: {})\n",
             cpu, r.seconds, cpu < 60 ? "met" : "MISSED", rss / 1024.0, rss < 4L * 1024 * 1024 ? "met" : "MISSED");
  fmt::print("  scheduler: {} events, {} decisions, {:.0f} decisions/s, {:.0f} events/s\n", r.events, r.decisions,
             static_cast<double>(r.decisions) / r.seconds, static_cast<double>(r.events) / r.seconds);
  fmt::print("  reclaimed (idle) {}, time-limited {}, warnings {}\n", r.reclaimed, r.time_limited, r.warnings);
  fmt::print("  started {} rejected {} waiting {}; delay p50 {:.0f} s p95 {:.0f} s p99 {:.0f} s; mean alloc {:.2f}%; "
             "start digest {:016x}\n",
             r.started, r.rejected, r.never_started, r.delay_p50_s, r.delay_p95_s, r.delay_p99_s, r.mean_alloc_pct,
             r.start_digest);
  if (baseline == "reference") {
    sim::ReplayOptions ref;
    ref.reference_placement = true;
    const double b0 = CpuSeconds();
    sim::ReplayResult b = sim::RunReplay(cluster, std::move(copy), *config, name, shapes, ref);
    const double bcpu = CpuSeconds() - b0;
    fmt::print("  baseline (same replay, reference placement path): CPU {:.2f} s; started {}; by-state speed-up {:.2f}x; "
               "decisions identical: {} (digest {:016x} vs {:016x})\n",
               bcpu, b.started, bcpu / cpu, b.start_digest == r.start_digest && b.started == r.started ? "yes" : "NO",
               r.start_digest, b.start_digest);
  } else if (baseline != "none") {
    auto policy = sched::MakePolicy(baseline);
    if (!policy.ok()) {
      std::fprintf(stderr, "%s\n", policy.status().message().c_str());
      return 2;
    }
    const double b0 = CpuSeconds();
    sim::ReplayResult b = sim::RunPlacementReplay(cluster, std::move(copy), **policy, shapes);
    const double bcpu = CpuSeconds() - b0;
    fmt::print("  baseline (placement-only loop, policy {}): CPU {:.2f} s; started {} waiting {}; through the "
               "scheduler / baseline CPU: {:.2f}x\n",
               baseline, bcpu, b.started, b.never_started, cpu / bcpu);
  }
  return 0;
}
