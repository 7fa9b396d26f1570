// A year of a 1,000-GPU site (125 nodes x 8 H100-80GB, ~1,000,000 jobs at ~75% offered load)
// through the what-if's built-in scenarios, two scenarios at a time, then the verdict's
// search. Targets (issue 34): the scenarios in under 2 minutes, peak RSS under 4 GiB. The
// same-run baseline is one scenario (as recorded) replayed alone: the scenarios' time is
// reported as a multiple of it.
// The history (seeded, synthetic): 50% interactive sessions (one whole GPU; busy 5-60 min
// stretches at 10-60% between idle gaps of 1 min to 3 h, a third left idle at the end),
// 30% training (1/2/4/8 whole GPUs, 1-24 h, busy at 40-95%, 10% blind), 20% inference
// (one GPU, 4-48 h, busy at 5-30%, memory peak 4-60 GiB). Site config: interactive reclaims
// after 1 h idle + 10 min grace with an 8 h limit; training has a 7-day limit.
// Usage: whatif_bench [jobs] [gpus] [threads] [baseline-only | all | SCENARIO] [JSON-FILE]
//   SCENARIO: run only the built-in scenario of that name after the baseline (no verdict);
//   JSON-FILE: write the what-if document there (with every "seconds" 0), so that a speed-up
//   can be checked to leave every figure and decision as it was.
#include <sys/resource.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include <fmt/format.h>

#include "whatif/document.h"
#include "whatif/run.h"
#include "whatif/verdict.h"

namespace {
using namespace gpuslice;

long PeakRssKiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;  // KiB on Linux
}

constexpr const char* kConfig = R"(
default_queue = "interactive"
[queues.interactive]
kinds = ["whole", "shared"]
default_kind = "whole"
time_limit = "8h"
idle = { enabled = true, window = "1h", grace = "10m" }
[queues.training]
kinds = ["whole"]
max_duration = "7d"
[queues.inference]
kinds = ["whole", "mig"]
default_kind = "whole"
)";

whatif::History Year(int jobs, int gpus, std::uint64_t seed) {
  whatif::History h;
  h.source = "synthetic year";
  h.config = *sched::ParseConfig(kConfig, "bench.toml");
  h.nodes = *whatif::NodesFromSpec(fmt::format("{}x8:H100-80GB", gpus / 8));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  auto between = [&](double lo, double hi) { return lo + (hi - lo) * u(rng); };
  auto minutes = [](double m) { return static_cast<Micros>(m * kMinute); };
  const Micros year = 365LL * 24 * kHour;
  const double gap = static_cast<double>(year) / jobs;
  h.jobs.reserve(jobs);
  double t = 0;
  for (int i = 0; i < jobs; ++i) {
    t += -std::log(1 - u(rng)) * gap;
    whatif::HistoryJob hj;
    sim::ReplayJob& j = hj.job;
    j.id = std::to_string(i);
    j.user = fmt::format("u{}", static_cast<int>(u(rng) * 300));
    j.submit = static_cast<Micros>(t);
    j.request.num_gpus = 1;
    j.request.milli_per_gpu = kOneGpu;
    const double kind = u(rng);
    if (kind < 0.5) {
      j.queue = "interactive";
      Micros len = 0;
      const int stretches = 1 + static_cast<int>(u(rng) * 4);
      for (int s = 0; s < stretches; ++s) {
        sim::AppendRun(j.activity, {minutes(between(5, 60)), static_cast<std::int16_t>(between(100, 600)), sim::RunState::kActive});
        if (s + 1 < stretches) sim::AppendRun(j.activity, {minutes(std::exp(between(0, std::log(180)))), 0, sim::RunState::kIdle});
      }
      if (u(rng) < 0.33) sim::AppendRun(j.activity, {minutes(between(30, 300)), 0, sim::RunState::kIdle});
      // The site's 8 h limit: what ran is at most 8 h.
      std::vector<sim::ActivityRun> kept;
      for (sim::ActivityRun r : j.activity) {
        r.length = std::min(r.length, 8 * kHour - len);
        if (r.length <= 0) break;
        len += r.length;
        kept.push_back(r);
      }
      j.activity = std::move(kept);
      j.duration = len;
      hj.memory_peak = static_cast<Bytes>(between(1, 30) * kGiB);
    } else if (kind < 0.8) {
      j.queue = "training";
      const double g = u(rng);
      j.request.num_gpus = g < 0.5 ? 1 : g < 0.75 ? 2 : g < 0.92 ? 4 : 8;
      j.duration = minutes(between(60, 24 * 60));
      j.activity = {u(rng) < 0.1 ? sim::ActivityRun{j.duration, -1, sim::RunState::kUnknown}
                                 : sim::ActivityRun{j.duration, static_cast<std::int16_t>(between(400, 950)), sim::RunState::kActive}};
    } else {
      j.queue = "inference";
      j.duration = minutes(between(4 * 60, 48 * 60));
      j.activity = {{j.duration, static_cast<std::int16_t>(between(50, 300)), sim::RunState::kActive}};
      hj.memory_peak = static_cast<Bytes>(between(4, 60) * kGiB);
    }
    j.tag = static_cast<std::uint32_t>(i);
    hj.held_milli = j.request.num_gpus * kOneGpu;
    h.to = std::max(h.to, j.submit + j.duration);
    h.jobs.push_back(std::move(hj));
  }
  return h;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each figure as it comes, also into a file (a long run)
  const int n = argc > 1 ? std::atoi(argv[1]) : 1'000'000;
  const int gpus = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const std::string mode = argc > 4 ? argv[4] : "all";
  const char* json_path = argc > 5 ? argv[5] : nullptr;
  auto t0 = std::chrono::steady_clock::now();
  const whatif::History h = Year(n, gpus, 42);
  fmt::print("history: {} jobs over a year on {} GPUs, generated in {:.1f} s\n", h.jobs.size(), gpus, Since(t0));

  whatif::WhatifSpec spec = whatif::DefaultSpec();
  // The baseline: one scenario alone.
  t0 = std::chrono::steady_clock::now();
  double cpu0 = CpuSeconds();
  auto one = whatif::RunScenario(h, spec.scenarios.front(), spec.assume, 1);
  const double base = Since(t0), base_cpu = CpuSeconds() - cpu0;
  if (!one.ok()) {
    std::fprintf(stderr, "%s\n", one.status().message().c_str());
    return 1;
  }
  fmt::print("baseline: one scenario ({}) alone: {:.1f} s wall, {:.1f} s CPU\n", one->name, base, base_cpu);
  if (mode == "baseline-only") return 0;
  if (mode != "all") {
    std::erase_if(spec.scenarios, [&](const whatif::Scenario& s) { return s.name != mode; });
    if (spec.scenarios.empty()) {
      std::fprintf(stderr, "no built-in scenario '%s'\n", mode.c_str());
      return 2;
    }
  }

  whatif::RunOptions o;
  o.threads = threads;
  t0 = std::chrono::steady_clock::now();
  cpu0 = CpuSeconds();
  auto results = whatif::RunScenarios(h, spec, o);
  const double all = Since(t0), all_cpu = CpuSeconds() - cpu0;
  if (!results.ok()) {
    std::fprintf(stderr, "%s\n", results.status().message().c_str());
    return 1;
  }
  fmt::print("{} scenarios on {} threads: {:.1f} s wall (target < 120 s: {}), {:.1f} s CPU; {:.2f}x the one-scenario "
             "baseline's wall time, {:.2f}x its CPU\n",
             results->size(), threads, all, all < 120 ? "met" : "MISSED", all_cpu, all / base, all_cpu / base_cpu);
  for (const whatif::ScenarioResult& r : *results) {
    fmt::print("  {:<20} {:5.1f} s  held {:>9.0f} GPU-h  given back {:>8.0f}  cut {:>7}  p95 wait interactive {}\n", r.name,
               r.seconds, static_cast<double>(r.held) / whatif::kMilliUsPerGpuHour,
               static_cast<double>(r.given_back) / whatif::kMilliUsPerGpuHour, r.cut,
               FormatDuration(std::find_if(r.waits.begin(), r.waits.end(), [](const whatif::QueueWaits& w) {
                                return w.queue == "interactive";
                              })->p95));
  }
  if (mode != "all") return 0;
  t0 = std::chrono::steady_clock::now();
  cpu0 = CpuSeconds();
  auto v = whatif::Decide(h, spec, *results, o);
  const double verdict = Since(t0), verdict_cpu = CpuSeconds() - cpu0;
  if (!v.ok()) {
    std::fprintf(stderr, "%s\n", v.status().message().c_str());
    return 1;
  }
  fmt::print("verdict search: {} GPU counts tried in {:.1f} s wall, {:.1f} s CPU\n  {}\n", v->probes.size(), verdict,
             verdict_cpu, v->text);
  if (json_path != nullptr) {
    for (whatif::ScenarioResult& r : *results) r.seconds = 0;
    std::ofstream(json_path) << whatif::ToJson(h, spec, *results, *v).dump(1) << "\n";
  }
  const long rss = PeakRssKiB();
  fmt::print("peak RSS {:.0f} MiB (target < 4096 MiB: {})\n", rss / 1024.0, rss < 4L * 1024 * 1024 ? "met" : "MISSED");
  return 0;
}
