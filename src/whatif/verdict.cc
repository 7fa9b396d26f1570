#include "whatif/verdict.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <thread>

#include <fmt/format.h>

namespace gpuslice::whatif {
namespace {

std::string Waits(const std::vector<QueueWaits>& waits, const VerdictSpec& v) {
  std::vector<std::string> parts;
  for (const QueueWaits& q : waits) {
    if (q.jobs == 0) continue;
    parts.push_back(fmt::format("{} {} (target {})", q.queue, FormatWait(q.p95), FormatDuration(v.Target(q.queue))));
  }
  return parts.empty() ? "no waits" : fmt::format("{}", fmt::join(parts, ", "));
}

double Hours(MilliUs v) { return static_cast<double>(v) / kMilliUsPerGpuHour; }

}  // namespace

Result<Verdict> Decide(const History& h, const WhatifSpec& spec, const std::vector<ScenarioResult>& results,
                       const RunOptions& o) {
  if (results.empty()) return InvalidArgument("no scenario results to decide on");
  const ScenarioResult& base = results.front();
  Verdict v;
  v.gpus_now = base.gpus;
  v.recorded_meets = MeetsTargets(base, spec.verdict);
  v.measured_percent = base.held > 0 ? 100.0 * static_cast<double>(base.held - base.unknown) / static_cast<double>(base.held) : 0;
  v.unmeasured_jobs = base.unmeasured_jobs;
  if (h.jobs.empty() || base.held == 0) {
    v.code = "no_jobs";
    v.text = "Nothing ran in this history: no verdict.";
    return v;
  }
  const Scenario cures = VerdictCures(spec);
  v.cures = cures.Describe();

  // Probes: GPU count -> result; today's count with every cure may already have run.
  std::map<int, Probe> probes;
  for (const ScenarioResult& r : results) {
    if (r.name == cures.name && r.gpus == v.gpus_now) probes[r.gpus] = Probe{r.gpus, MeetsTargets(r, spec.verdict), r.waits};
  }
  auto run = [&](const std::vector<int>& counts) -> Status {
    std::vector<Result<ScenarioResult>> out(counts.size(), Internal("not run"));
    std::vector<std::thread> pool;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      auto one = [&, i] { out[i] = RunScenario(h, cures, spec.assume, o.seed, counts[i] - v.gpus_now); };
      if (static_cast<int>(pool.size()) + 1 < o.threads && i + 1 < counts.size()) pool.emplace_back(one);
      else one();
    }
    for (std::thread& t : pool) t.join();
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (!out[i].ok()) return out[i].status();
      probes[counts[i]] = Probe{counts[i], MeetsTargets(*out[i], spec.verdict), out[i]->waits};
    }
    return Status::Ok();
  };
  if (!probes.contains(v.gpus_now)) GPUSLICE_RETURN_IF_ERROR(run({v.gpus_now}));

  // Bracket [miss, meet]: the largest count known to miss below the smallest known to meet.
  const int per_round = std::max(1, o.threads);
  int steps = spec.verdict.search_steps;
  int meet = probes[v.gpus_now].meets ? v.gpus_now : -1;
  int miss = probes[v.gpus_now].meets ? 0 : v.gpus_now;  // 0 GPUs never meets
  // Upward: double the extra GPUs until the targets are met (or the rounds run out).
  for (int extra = std::max(1, v.gpus_now / 8); meet < 0 && steps > 0; --steps) {
    std::vector<int> counts;
    for (int k = 0; k < per_round; ++k, extra *= 2) counts.push_back(v.gpus_now + extra);
    GPUSLICE_RETURN_IF_ERROR(run(counts));
    for (int c : counts) {
      if (probes[c].meets && meet < 0) meet = c;
      if (!probes[c].meets) miss = std::max(miss, c);
    }
  }
  // Then narrow the bracket: per round, `per_round` evenly spaced counts inside it.
  while (meet > 0 && meet - miss > 1 && steps-- > 0) {
    std::vector<int> counts;
    for (int k = 1; k <= per_round; ++k) {
      const int c = miss + static_cast<int>(static_cast<std::int64_t>(meet - miss) * k / (per_round + 1));
      if (c > miss && c < meet && (counts.empty() || counts.back() != c) && !probes.contains(c)) counts.push_back(c);
    }
    if (counts.empty()) break;
    GPUSLICE_RETURN_IF_ERROR(run(counts));
    for (int c : counts) {
      if (probes[c].meets) meet = std::min(meet, c);
      else if (c < meet) miss = std::max(miss, c);
    }
  }
  for (const auto& [n, p] : probes) v.probes.push_back(p);

  // The single cure that gave most back.
  const ScenarioResult* best = nullptr;
  for (const ScenarioResult& r : results) {
    if (r.cures == 1 && !r.gpu_change && (best == nullptr || r.given_back > best->given_back)) best = &r;
  }
  std::string best_text;
  if (best != nullptr && best->given_back > 0) {
    v.best_cure = best->name;
    best_text = fmt::format(" The single cure that gives most back is {} ({}): {:.1f} GPU-hours ({:.0f}% of held), "
                            "cutting {} session{} ({} with work left, costing owners {}).",
                            best->name, best->description, Hours(best->given_back),
                            100.0 * static_cast<double>(best->given_back) / static_cast<double>(base.held), best->cut,
                            best->cut == 1 ? "" : "s", best->cut_with_work_left, FormatWait(best->owner_cost));
  }

  // "1 fewer GPU", "2 more GPUs".
  auto gpus = [](int n, std::string_view what = "") {
    return fmt::format("{}{}{} GPU{}", n, what.empty() ? "" : " ", what, n == 1 ? "" : "s");
  };
  const std::string recorded = fmt::format("As recorded on {} GPUs, p95 waits: {} — {}.", v.gpus_now,
                                           Waits(base.waits, spec.verdict),
                                           v.recorded_meets ? "within target" : "over target");
  std::string answer;
  if (meet < 0) {
    v.code = "more_than";
    v.gpus_needed = miss;
    answer = fmt::format("Even with every cure ({}), waits need more than {}: {} still miss the targets.",
                         v.cures, gpus(miss - v.gpus_now, "more"), gpus(miss));
  } else {
    v.gpus_needed = meet;
    v.resolution = meet - miss - 1;
    const Probe& p = probes[meet];
    const std::string within = v.resolution > 0 ? fmt::format(" (to within {})", gpus(v.resolution)) : "";
    if (meet < v.gpus_now) {
      v.code = "fewer_gpus";
      answer = fmt::format("With every cure ({}), the same work fits on {}{} — {} of {} — with p95 waits {}.",
                           v.cures, gpus(v.gpus_now - meet, "fewer"), within, meet, v.gpus_now, Waits(p.waits, spec.verdict));
    } else if (meet == v.gpus_now) {
      v.code = "enough";
      answer = fmt::format("With every cure ({}), today's {} GPUs are what the work needs for p95 waits {}; "
                           "one fewer misses.", v.cures, v.gpus_now, Waits(p.waits, spec.verdict));
    } else {
      v.code = "more_gpus";
      answer = fmt::format("Even with every cure ({}), waits need {}{} — {} in all — for p95 waits {}.",
                           v.cures, gpus(meet - v.gpus_now, "more"), within, meet, Waits(p.waits, spec.verdict));
    }
  }
  std::string basis = fmt::format(" This rests on {:.0f}% of the held GPU-hours being measured", v.measured_percent);
  if (v.unmeasured_jobs > 0) {
    basis += fmt::format("; {} of {} jobs were not measured at all and are counted as unknown, never idle or busy",
                         v.unmeasured_jobs, base.jobs);
  }
  basis += ".";
  if (v.measured_percent < 50) basis += " Too little was measured to rely on the cures' figures: measure utilisation first.";
  v.text = answer + " " + recorded + best_text + basis;
  return v;
}

}  // namespace gpuslice::whatif
