#include "sim/replay_command.h"

#include <charconv>
#include <filesystem>
#include <ostream>

#include <fmt/format.h>

#include "core/units.h"
#include "sim/generic_trace.h"
#include "sim/output.h"

namespace gpuslice::sim {

Result<Cluster> ParseClusterSpec(std::string_view spec) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format("--cluster '{}': {} (expected NODESxGPUS[:MODEL[:CPUS[:MEMORY]]], e.g. 1250x8)",
                                       spec, why));
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
  const std::string model = parts.size() > 1 && !parts[1].empty() ? std::string(parts[1]) : "GPU";
  std::int64_t cpus = 128;
  if (parts.size() > 2) {
    int c = 0;
    if (!num(parts[2], c)) return bad("CPUS must be a positive integer");
    cpus = c;
  }
  Bytes memory = 1024 * kGiB;
  if (parts.size() > 3) {
    auto m = ParseBytes(parts[3]);
    if (!m.ok()) return bad("MEMORY must be a size like 1TiB");
    memory = *m;
  }
  if (parts.size() > 4) return bad("too many fields");
  return Cluster::Uniform(nodes, gpus, model, cpus * 1000, memory);
}

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
  if (list.skipped.count > 0) {
    err << fmt::format("warning: skipped {} bad row(s) of {}; first: {}\n", list.skipped.count, o.trace,
                       list.skipped.first_errors.front());
  }
  std::vector<std::unique_ptr<sched::PlacementPolicy>> policies;
  for (const std::string& name : o.policies) {
    GPUSLICE_ASSIGN_OR_RETURN(auto p, sched::MakePolicy(name));
    policies.push_back(std::move(p));
  }
  const std::vector<sched::WorkloadShape> shapes = ReplayShapes(list.jobs);
  out << fmt::format("online replay of {}: {} jobs on {} nodes ({} GPUs){}\n", o.trace, list.jobs.size(),
                     cluster->size(), cluster->capacity_milli() / kOneGpu,
                     list.skipped.count ? fmt::format(", {} bad rows skipped", list.skipped.count) : "");
  std::vector<ReplayResult> results;
  Progress bar(err, o.progress, "sim replay");
  for (std::size_t p = 0; p < policies.size(); ++p) {
    results.push_back(RunReplay(*cluster, list.jobs, *policies[p], shapes, {}, [&](double f) {
      bar.Update((static_cast<double>(p) + f) / static_cast<double>(policies.size()));
    }));
  }
  bar.Done();
  out << fmt::format("\n{:<15} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10} {:>10} {:>9} {:>11} {:>11} {:>7}\n", "policy",
                     "started", "rejected", "waiting", "delay p50", "delay p95", "delay p99", "mean wait",
                     "alloc %", "GPU-h held", "GPU-h used", "s");
  for (const ReplayResult& r : results) {
    out << fmt::format("{:<15} {:>8} {:>8} {:>8} {:>8.0f}s {:>9.0f}s {:>9.0f}s {:>9.0f}s {:>9.2f} {:>11.1f} {:>11} {:>7.2f}\n",
                       r.policy, r.started, r.rejected, r.never_started, r.delay_p50_s, r.delay_p95_s,
                       r.delay_p99_s, r.delay_mean_s, r.mean_alloc_pct, r.gpu_hours_held,
                       r.gpu_hours_held_known > 0 ? fmt::format("{:.1f}", r.gpu_hours_used) : std::string("-"),
                       r.seconds);
  }
  out << "(delay: queueing delay of started jobs; alloc %: time-weighted GPU allocation; GPU-h used: held x "
         "utilisation, over jobs whose utilisation the trace gives)\n";

  if (!o.out_dir.empty()) {
    const std::filesystem::path dir(o.out_dir);
    std::string summary =
        "policy,jobs,started,rejected,waiting_at_end,delay_p50_s,delay_p95_s,delay_p99_s,delay_mean_s,mean_alloc_pct,"
        "gpu_hours_held,gpu_hours_used,gpu_hours_held_known_util,seconds\n";
    std::string series = "policy,time_s,alloc_pct,frag_pct,pending,running\n";
    std::string cdf = "policy,quantile,delay_s\n";
    std::vector<Series> alloc_plot, cdf_plot;
    for (const ReplayResult& r : results) {
      summary += fmt::format("{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.3f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f}\n", r.policy,
                             r.jobs, r.started, r.rejected, r.never_started, r.delay_p50_s, r.delay_p95_s,
                             r.delay_p99_s, r.delay_mean_s, r.mean_alloc_pct, r.gpu_hours_held, r.gpu_hours_used,
                             r.gpu_hours_held_known, r.seconds);
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
                       "replay_delay_cdf.svg}}\n",
                       dir.string());
  }
  return results;
}

}  // namespace gpuslice::sim
