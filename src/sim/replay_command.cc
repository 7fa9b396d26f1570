#include "sim/replay_command.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <ostream>

#include <fmt/format.h>

#include "core/text.h"
#include "core/units.h"
#include "sim/generic_trace.h"
#include "sim/output.h"

namespace gpuslice::sim {

namespace {
constexpr std::int64_t kMaxClusterGpus = 1'000'000;
}  // namespace

Result<Cluster> ParseClusterSpec(std::string_view spec_raw) {
  const std::string spec_shown = EscapeInvalidUtf8(spec_raw);
  const std::string_view spec = spec_raw;
  auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format("--cluster '{}': {} (expected NODESxGPUS[:MODEL[:CPUS[:MEMORY]]], e.g. 1250x8)",
                                       spec_shown, why));
  };
  std::vector<std::string_view> parts;
  for (std::string_view rest = spec;;) {
    const std::size_t colon = rest.find(':');
    parts.push_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  const std::size_t x = parts[0].find('x');
  if (x == std::string_view::npos) return bad("no 'x'");
  int nodes = 0, gpus = 0;
  auto num = [](std::string_view s, int& v) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return !s.empty() && ec == std::errc() && p == s.data() + s.size() && v > 0;
  };
  if (!num(parts[0].substr(0, x), nodes) || !num(parts[0].substr(x + 1), gpus) || gpus > 64 || nodes > 10'000'000) {
    return bad("node and GPU counts must be positive integers (at most 64 GPUs a node)");
  }
  // The simulated cluster is held in memory, device by device.
  if (static_cast<std::int64_t>(nodes) * gpus > kMaxClusterGpus) {
    return bad(fmt::format("{} GPUs in all, at most {}", static_cast<std::int64_t>(nodes) * gpus, kMaxClusterGpus));
  }
  const std::string model = parts.size() > 1 && !parts[1].empty() ? std::string(parts[1]) : "GPU";
  std::int64_t cpus = 128;
  if (parts.size() > 2) {
    int c = 0;
    if (!num(parts[2], c) || c > 1'000'000) return bad("CPUS must be a positive integer (at most 1000000)");
    cpus = c;
  }
  Bytes memory = 1024 * kGiB;
  if (parts.size() > 3) {
    auto m = ParseBytes(parts[3]);
    if (!m.ok() || *m <= 0) return bad("MEMORY must be a size like 1TiB");
    memory = *m;
  }
  if (parts.size() > 4) return bad("too many fields");
  return Cluster::Uniform(nodes, gpus, model, cpus * 1000, memory);
}

namespace {

std::string TeamName(const TeamReplayFigures& t) { return t.team.empty() ? "(no team)" : t.team; }

// With [teams]: per run and team, waits and the share of GPU-hours against the guarantee.
void PrintTeams(const std::vector<ReplayResult>& results, std::ostream& out) {
  for (const ReplayResult& r : results) {
    if (r.teams.empty()) continue;
    out << fmt::format("\n{}: teams\n{:<16} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>11} {:>8}\n", r.policy,
                       "team", "guarantee", "guar. %", "started", "waiting", "preempted", "wait p50", "wait p95",
                       "GPU-h held", "share %");
    for (const TeamReplayFigures& t : r.teams) {
      if (t.team.empty() && t.started == 0 && t.never_started == 0) continue;
      out << fmt::format("{:<16} {:>10} {:>8.1f} {:>8} {:>8} {:>9} {:>8.0f}s {:>8.0f}s {:>11.1f} {:>8.2f}\n",
                         TeamName(t), t.team.empty() ? "-" : FormatMilliGpu(t.guaranteed), t.guarantee_pct,
                         t.started, t.never_started, t.preempted, t.wait_p50_s, t.wait_p95_s, t.gpu_hours_held,
                         t.share_pct);
    }
  }
  if (std::any_of(results.begin(), results.end(), [](const ReplayResult& r) { return !r.teams.empty(); }))
    out << "(guarantee: GPUs guaranteed over all queues; guar. %: of the cluster's GPUs; share %: the team's GPU-hours "
           "held of the cluster's over the replay; wait: queueing delay of started jobs)\n";
}

std::string TeamsCsv(const std::vector<ReplayResult>& results) {
  std::string csv = "policy,team,guaranteed_gpus,guarantee_pct,started,waiting_at_end,preempted,wait_p50_s,"
                    "wait_p95_s,gpu_hours_held,share_pct\n";
  for (const ReplayResult& r : results)
    for (const TeamReplayFigures& t : r.teams)
      csv += fmt::format("{},{},{:.3f},{:.3f},{},{},{},{:.3f},{:.3f},{:.4f},{:.4f}\n", r.policy, t.team,
                         static_cast<double>(t.guaranteed) / kOneGpu, t.guarantee_pct, t.started, t.never_started,
                         t.preempted, t.wait_p50_s, t.wait_p95_s, t.gpu_hours_held, t.share_pct);
  return csv;
}

}  // namespace

Result<std::vector<ReplayResult>> RunReplayCommand(const ReplayCommandOptions& o, std::ostream& out,
                                                   std::ostream& err) {
  const ReadOptions ro{o.skip_bad_rows};
  std::optional<Cluster> cluster;
  if (!o.nodes.empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(NodeList nodes, ReadOpenbNodes(o.nodes, ro));
    if (nodes.skipped.count > 0) {
      err << fmt::format("warning: skipped {} bad row(s) of {}; first: {}\n", nodes.skipped.count, o.nodes,
                         nodes.skipped.first_errors.front());
    }
    cluster.emplace(nodes.nodes);
  } else {
    GPUSLICE_ASSIGN_OR_RETURN(Cluster c, ParseClusterSpec(o.cluster.empty() ? "1213x8" : o.cluster));
    cluster.emplace(std::move(c));
  }
  GPUSLICE_ASSIGN_OR_RETURN(JobList list, ReadJobTrace(o.trace, ro));
  // The runs: with --config, its queues as they are (or with every queue's placement replaced by
  // each --policy); without, a default config per policy.
  std::vector<std::pair<std::string, sched::Config>> runs;
  if (!o.config.empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(sched::Config base, sched::LoadConfigFile(o.config));
    if (o.policies.empty()) runs.emplace_back("config", base);
    for (const std::string& name : o.policies) {
      sched::Config c = base;
      for (sched::QueueConfig& q : c.queues) q.placement = name;
      Status st = sched::ValidateConfig(c);
      if (!st.ok()) return st.WithContext(fmt::format("--policy {}", name));
      runs.emplace_back(name, std::move(c));
    }
    if (!o.compare_config.empty()) {
      if (!o.policies.empty())
        return InvalidArgument("--compare-config: compares two configs as they are; it takes no --policy");
      GPUSLICE_ASSIGN_OR_RETURN(sched::Config other, sched::LoadConfigFile(o.compare_config));
      runs.emplace_back("compare", std::move(other));
    }
  } else {
    if (!o.compare_config.empty()) return InvalidArgument("--compare-config: needs --config (the config to compare with)");
    if (o.policies.empty()) return InvalidArgument("--policy: at least one placement policy is needed");
    for (const std::string& name : o.policies) {
      auto c = ReplayConfig(name, list.jobs);
      if (!c.ok()) return c.status().WithContext(fmt::format("--policy {}", name));
      runs.emplace_back(name, std::move(c).value());
    }
  }
  // Every run's config has the same queues (only placement differs), but a compared config's.
  GPUSLICE_RETURN_IF_ERROR(CheckQueues(list.jobs, runs.front().second, o.skip_bad_rows, list.skipped));
  if (!o.compare_config.empty()) {
    SkippedRows none;
    Status st = CheckQueues(list.jobs, runs.back().second, /*skip_bad_rows=*/false, none);
    if (!st.ok()) return st.WithContext(fmt::format("--compare-config {}", o.compare_config));
  }
  if (list.skipped.count > 0) {
    err << fmt::format("warning: skipped {} bad row(s) of {}; first: {}\n", list.skipped.count, o.trace,
                       list.skipped.first_errors.front());
  }
  if (list.jobs.empty()) return InvalidArgument(fmt::format("{}: no jobs left to replay", o.trace));
  const std::vector<sched::WorkloadShape> shapes = ReplayShapes(list.jobs);
  out << fmt::format("online replay of {} through the scheduler{}: {} jobs on {} nodes ({} GPUs){}\n", o.trace,
                     o.config.empty() ? "" : " with " + o.config, list.jobs.size(), cluster->size(),
                     cluster->capacity_milli() / kOneGpu,
                     list.skipped.count ? fmt::format(", {} bad rows skipped", list.skipped.count) : "");
  std::vector<ReplayResult> results;
  Progress bar(err, o.progress, "sim replay");
  ReplayOptions ropt;
  ropt.seed = o.seed;
  for (std::size_t p = 0; p < runs.size(); ++p) {
    results.push_back(RunReplay(*cluster, list.jobs, runs[p].second, runs[p].first, shapes, ropt, [&](double f) {
      bar.Update((static_cast<double>(p) + f) / static_cast<double>(runs.size()));
    }));
  }
  bar.Done();
  out << fmt::format("\n{:<15} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>11} {:>11} {:>7}\n",
                     "policy", "started", "rejected", "waiting", "reclaimed", "t-limited", "delay p50", "delay p95",
                     "delay p99", "mean wait", "alloc %", "frag %", "GPU-h held", "GPU-h used", "s");
  for (const ReplayResult& r : results) {
    double frag = 0;
    for (const ReplaySample& s : r.series) frag += s.frag_pct;
    frag = r.series.empty() ? 0 : frag / static_cast<double>(r.series.size());
    out << fmt::format(
        "{:<15} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8.0f}s {:>8.0f}s {:>8.0f}s {:>8.0f}s {:>9.2f} {:>8.2f} {:>11.1f} {:>11} "
        "{:>7.2f}\n",
        r.policy, r.started, r.rejected, r.never_started, r.reclaimed, r.time_limited, r.delay_p50_s, r.delay_p95_s,
        r.delay_p99_s, r.delay_mean_s, r.mean_alloc_pct, frag, r.gpu_hours_held,
        r.gpu_hours_held_known > 0 ? fmt::format("{:.1f}", r.gpu_hours_used) : std::string("-"), r.seconds);
  }
  out << "(reclaimed: idle reclaim; t-limited: stopped at the time limit; delay: queueing delay of started jobs; "
         "alloc %: time-weighted GPU allocation; frag %: mean FGD fragmentation of the samples; GPU-h used: held x "
         "utilisation, over jobs whose utilisation the trace gives)\n";
  for (const ReplayResult& r : results) {
    if (r.reclaimed_on_demand > 0)
      out << fmt::format("{}: {} of the {} reclaimed were idle slices taken on demand for a waiting job "
                         "(reclaim = \"on-demand\")\n", r.policy, r.reclaimed_on_demand, r.reclaimed);
    if (r.cpu_only > 0 || r.preempted > 0 || r.reconfigurations > 0 || r.warnings > 0 || r.reservations > 0)
      out << fmt::format("{}: {} CPU-only rows not submitted, {} warnings, {} preempted, {} reservations, "
                         "{} MIG reconfigurations, {} MIG slices; {} scheduler events, {} decisions\n",
                         r.policy, r.cpu_only, r.warnings, r.preempted, r.reservations, r.reconfigurations,
                         r.mig_slices, r.events, r.decisions);
  }

  PrintTeams(results, out);

  // Why jobs waited (job-hours pending, by the Scheduler's reason); only runs where some job waited.
  auto wait_hours = [](Micros us) { return static_cast<double>(us) / kHour; };
  for (const ReplayResult& r : results) {
    std::string parts;
    for (std::size_t k = 0; k < r.wait_by_reason.size(); ++k) {
      if (r.wait_by_reason[k] <= 0) continue;
      parts += fmt::format("{}{} {:.2f}", parts.empty() ? "" : ", ", sched::WaitReasonKindName(k),
                           wait_hours(r.wait_by_reason[k]));
    }
    if (!parts.empty()) out << fmt::format("{}: job-hours waiting by reason: {}\n", r.policy, parts);
  }

  if (!o.out_dir.empty()) {
    const std::filesystem::path dir(o.out_dir);
    std::string waits = "policy,reason,job_hours_waiting\n";
    for (const ReplayResult& r : results)
      for (std::size_t k = 0; k < r.wait_by_reason.size(); ++k)
        waits += fmt::format("{},{},{:.4f}\n", r.policy, sched::WaitReasonKindName(k), wait_hours(r.wait_by_reason[k]));
    GPUSLICE_RETURN_IF_ERROR(WriteFile((dir / "replay_wait_reasons.csv").string(), waits));
    std::string summary =
        "policy,jobs,started,rejected,waiting_at_end,finished,reclaimed_idle,time_limited,preempted,warnings,"
        "mig_reconfigurations,mig_slices,cpu_only,delay_p50_s,delay_p95_s,delay_p99_s,delay_mean_s,mean_alloc_pct,"
        "gpu_hours_held,gpu_hours_used,gpu_hours_held_known_util,events,decisions,seconds\n";
    std::string series = "policy,time_s,alloc_pct,frag_pct,pending,running\n";
    std::string cdf = "policy,quantile,delay_s\n";
    std::vector<Series> alloc_plot, cdf_plot;
    for (const ReplayResult& r : results) {
      summary += fmt::format(
          "{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.3f},{:.4f},{:.4f},{:.4f},{:.4f},{},{},{:.4f}\n",
          r.policy, r.jobs, r.started, r.rejected, r.never_started, r.finished, r.reclaimed, r.time_limited,
          r.preempted, r.warnings, r.reconfigurations, r.mig_slices, r.cpu_only, r.delay_p50_s, r.delay_p95_s,
          r.delay_p99_s, r.delay_mean_s, r.mean_alloc_pct, r.gpu_hours_held, r.gpu_hours_used, r.gpu_hours_held_known,
          r.events, r.decisions, r.seconds);
      Series a{r.policy, {}}, c{r.policy, {}};
      for (const ReplaySample& s : r.series) {
        const double t = static_cast<double>(s.time) / kSecond;
        series += fmt::format("{},{:.3f},{:.4f},{:.4f},{},{}\n", r.policy, t, s.alloc_pct, s.frag_pct, s.pending, s.running);
        a.points.emplace_back(t / 3600, s.alloc_pct);
      }
      for (int q = 0; q <= 1000; ++q) {
        if (r.delays.empty()) break;
        const std::size_t i = std::min(r.delays.size() - 1, r.delays.size() * static_cast<std::size_t>(q) / 1000);
        const double d = static_cast<double>(r.delays[i]) / kSecond;
        cdf += fmt::format("{},{:.3f},{:.3f}\n", r.policy, q / 1000.0, d);
        c.points.emplace_back(std::max(d, 1.0), q / 10.0);
      }
      alloc_plot.push_back(std::move(a));
      cdf_plot.push_back(std::move(c));
    }
    GPUSLICE_RETURN_IF_ERROR(WriteFile((dir / "replay_summary.csv").string(), summary));
    if (std::any_of(results.begin(), results.end(), [](const ReplayResult& r) { return !r.teams.empty(); }))
      GPUSLICE_RETURN_IF_ERROR(WriteFile((dir / "replay_teams.csv").string(), TeamsCsv(results)));
    GPUSLICE_RETURN_IF_ERROR(WriteFile((dir / "replay_series.csv").string(), series));
    GPUSLICE_RETURN_IF_ERROR(WriteFile((dir / "replay_delay_cdf.csv").string(), cdf));
    GPUSLICE_RETURN_IF_ERROR(WriteFile((dir / "replay_alloc.svg").string(),
                                       SvgLinePlot({"GPU allocation over time", "time (h)", "GPU allocation (%)"}, alloc_plot)));
    GPUSLICE_RETURN_IF_ERROR(WriteFile(
        (dir / "replay_delay_cdf.svg").string(),
        SvgLinePlot({"Queueing delay CDF (delays under 1 s drawn at 1 s)", "queueing delay (s, log)",
                     "jobs started within (%)", true},
                    cdf_plot)));
    out << fmt::format("wrote {}/{{replay_summary.csv, replay_series.csv, replay_delay_cdf.csv, replay_alloc.svg, "
                       "replay_delay_cdf.svg, replay_wait_reasons.csv{}}}\n",
                       dir.string(), results.front().teams.empty() ? "" : ", replay_teams.csv");
  }
  return results;
}

}  // namespace gpuslice::sim
