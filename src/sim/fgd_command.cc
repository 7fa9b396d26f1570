#include "sim/fgd_command.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <ostream>

#include <fmt/format.h>

#include "sched/placement/admission.h"
#include "sim/expected.h"
#include "sim/output.h"

namespace gpuslice::sim {
namespace {

Result<std::uint64_t> ParseSeed(std::string_view s, std::string_view whole) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) {
    return InvalidArgument(fmt::format("--seeds '{}': '{}' is not a non-negative integer", whole, s));
  }
  return v;
}

constexpr double kMaxInflation = 10;

std::string FormatPct(double v) { return std::isnan(v) ? "-" : fmt::format("{:.2f}", v); }
std::string FormatDiff(double ours, double published) {
  return published < 0 ? "-" : fmt::format("{:+.2f}", ours - published);
}

// What each admission option (admission.h) refused and left, beside the GPU it gained over the
// same placement without it (where that ran too). Printed only where some policy refused a pod
// or has an admission option: placement alone refuses nothing.
void PrintAdmission(const std::vector<FgdSummaryRow>& rows, bool markdown, std::ostream& out) {
  bool any = false;
  for (const FgdSummaryRow& r : rows) any = any || r.refused_pods > 0 || sched::PlacementPart(r.policy) != r.policy;
  if (!any) return;
  auto plain = [&](const FgdSummaryRow& r) -> const FgdSummaryRow* {
    for (const FgdSummaryRow& p : rows) {
      if (p.policy == sched::PlacementPart(r.policy)) return &p;
    }
    return nullptr;
  };
  if (markdown) {
    out << "\n| policy | refused pods (CPU-only) | failed CPU-only pods | CPU allocated at the end | "
           "unallocated GPUs @130 | GPUs gained vs placement alone | CPUs left free vs placement alone |\n"
           "|---|---:|---:|---:|---:|---:|---:|\n";
  } else {
    out << fmt::format("\nadmission: pods refused where they fit (mean per run), CPU allocated when the last pod "
                       "arrived, and the\nGPU gained and CPU left free against the same placement without "
                       "admission:\n{:<26} {:>18} {:>16} {:>9} {:>12} {:>11} {:>10}\n",
                       "policy", "refused (CPU-only)", "failed CPU-only", "CPU alloc", "unalloc GPUs", "GPUs gained",
                       "CPUs left");
  }
  for (const FgdSummaryRow& r : rows) {
    const FgdSummaryRow* p = r.policy == sched::PlacementPart(r.policy) ? nullptr : plain(r);
    const std::string gained = p ? fmt::format("{:+.1f}", p->unallocated_gpus130 - r.unallocated_gpus130) : "-";
    const std::string left =
        p ? fmt::format("{:+.0f}", (p->cpu_alloc_end_pct - r.cpu_alloc_end_pct) / 100 * r.cpu_total_cpus) : "-";
    const std::string refused = fmt::format("{:.0f} ({:.0f})", r.refused_pods, r.refused_cpu_only_pods);
    if (markdown) {
      out << fmt::format("| {} | {} | {:.0f} | {:.2f}% | {:.1f} | {} | {} |\n", r.policy, refused,
                         r.failed_cpu_only_pods, r.cpu_alloc_end_pct, r.unallocated_gpus130, gained, left);
    } else {
      out << fmt::format("{:<26} {:>18} {:>16.0f} {:>8.2f}% {:>12.1f} {:>11} {:>10}\n", r.policy, refused,
                         r.failed_cpu_only_pods, r.cpu_alloc_end_pct, r.unallocated_gpus130, gained, left);
    }
  }
}

}  // namespace

Result<std::vector<std::uint64_t>> ParseSeeds(std::string_view text) {
  std::vector<std::uint64_t> out;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const std::size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      GPUSLICE_ASSIGN_OR_RETURN(std::uint64_t v, ParseSeed(item, text));
      out.push_back(v);
      continue;
    }
    GPUSLICE_ASSIGN_OR_RETURN(std::uint64_t a, ParseSeed(item.substr(0, dash), text));
    GPUSLICE_ASSIGN_OR_RETURN(std::uint64_t b, ParseSeed(item.substr(dash + 1), text));
    if (b < a || b - a >= 1000) {  // each seed is a whole run of the protocol
      return InvalidArgument(fmt::format("--seeds '{}': range '{}' is empty or too long", text, item));
    }
    for (std::uint64_t v = a; v <= b; ++v) out.push_back(v);
  }
  if (out.empty()) return InvalidArgument(fmt::format("--seeds '{}': no seeds", text));
  return out;
}

std::vector<std::string> FgdPaperPolicies() {
  return {"random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit-fgd", "fgd", "gpuslice"};
}

Result<FgdCommandResult> RunFgdCommand(const FgdCommandOptions& o, std::ostream& out, std::ostream& err) {
  // NaN compared false everywhere and never reached the target demand (abort); a huge factor
  // grows the arrival list without bound. The paper's protocol uses 1.3.
  if (!std::isfinite(o.inflation) || o.inflation <= 0 || o.inflation > kMaxInflation) {
    return InvalidArgument(fmt::format("--inflation {}: must be a number more than 0 and at most {}", o.inflation,
                                       kMaxInflation));
  }
  const std::filesystem::path trace(o.trace);
  const std::string nodes_path =
      o.nodes.empty() ? (trace.parent_path() / "openb_node_list_gpu_node.csv").string() : o.nodes;
  ReadOptions ro{o.skip_bad_rows};
  GPUSLICE_ASSIGN_OR_RETURN(PodList pods, ReadOpenbPods(o.trace, ro));
  GPUSLICE_ASSIGN_OR_RETURN(NodeList nodes, ReadOpenbNodes(nodes_path, ro));
  for (const auto* sk : {&nodes.skipped, &pods.skipped}) {
    if (sk->count == 0) continue;
    err << fmt::format("warning: skipped {} bad row(s) ({}); first: {}\n", sk->count,
                       sk == &nodes.skipped ? nodes_path : o.trace, sk->first_errors.front());
  }
  std::vector<std::unique_ptr<sched::PlacementPolicy>> policies;
  for (const std::string& name : o.policies) {
    GPUSLICE_ASSIGN_OR_RETURN(auto p, sched::MakePolicyWithAdmission(name));
    policies.push_back(std::move(p));
  }
  std::optional<PublishedResults> published;
  if (!o.expected.empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(PublishedResults r, PublishedResults::Read(o.expected));
    published = std::move(r);
  }

  const FgdInputs in = MakeFgdInputs(std::move(nodes.nodes), std::move(pods.pods));

  FgdCommandResult result;
  result.workload = trace.stem().string();
  MilliGpu capacity = 0;
  int gpu_nodes = 0;
  for (const TraceNode& n : in.nodes) {
    capacity += static_cast<MilliGpu>(n.gpus) * kOneGpu;
    gpu_nodes += n.gpus > 0 ? 1 : 0;
  }
  const std::size_t inflated = ArrivalOrder(in.pods, o.seeds.front(), o.inflation, capacity).size();
  out << fmt::format("FGD protocol on {}: {} nodes ({} GPUs), {} pods -> {} after inflation to {:.0f}% "
                     "(seed {}), {} typical shapes, seeds {}..{} ({} run(s) per policy)\n",
                     result.workload, gpu_nodes, capacity / kOneGpu, in.pods.size(), inflated,
                     o.inflation * 100, o.seeds.front(), in.shapes.size(), o.seeds.front(),
                     o.seeds.back(), o.seeds.size());

  Progress bar(err, o.progress, "sim fgd");
  const double total_runs = static_cast<double>(policies.size() * o.seeds.size());
  for (std::size_t p = 0; p < policies.size(); ++p) {
    for (std::size_t s = 0; s < o.seeds.size(); ++s) {
      const double base = static_cast<double>(p * o.seeds.size() + s);
      result.runs.push_back(RunFgdOnce(in, *policies[p], o.seeds[s], o.inflation,
                                       [&](double f) { bar.Update((base + f) / total_runs); }));
    }
  }
  bar.Done();

  for (std::size_t p = 0; p < policies.size(); ++p) {
    std::vector<const FgdRun*> runs;
    double failed = 0, secs = 0, failed_cpu_only = 0, refused = 0, refused_cpu_only = 0, cpu_alloc = 0;
    IdleBreakdown idle;
    for (const FgdRun& r : result.runs) {
      if (r.policy != o.policies[p]) continue;
      runs.push_back(&r);
      failed += static_cast<double>(r.failed);
      failed_cpu_only += static_cast<double>(r.failed_cpu_only);
      refused += static_cast<double>(r.refused);
      refused_cpu_only += static_cast<double>(r.refused_cpu_only);
      cpu_alloc += 100.0 * static_cast<double>(r.final_cpu_alloc_milli) / static_cast<double>(r.cpu_total_milli);
      secs += r.seconds;
      idle += r.final_idle;
    }
    const FgdCurves mean = MeanCurves(runs);
    FgdSummaryRow row;
    row.policy = o.policies[p];
    row.alloc100 = mean.alloc_pct[100];
    row.alloc130 = mean.alloc_pct[130];
    row.unallocated_gpus130 = (100 - row.alloc130) / 100 * static_cast<double>(capacity) / kOneGpu;
    row.failed_pods = failed / static_cast<double>(runs.size());
    row.failed_cpu_only_pods = failed_cpu_only / static_cast<double>(runs.size());
    row.refused_pods = refused / static_cast<double>(runs.size());
    row.refused_cpu_only_pods = refused_cpu_only / static_cast<double>(runs.size());
    row.cpu_alloc_end_pct = cpu_alloc / static_cast<double>(runs.size());
    row.cpu_total_cpus = static_cast<double>(runs.front()->cpu_total_milli) / 1000;
    row.seconds_per_run = secs / static_cast<double>(runs.size());
    const double gpus_per_run = static_cast<double>(kOneGpu) * static_cast<double>(runs.size());
    row.idle_usable_gpus = idle.usable / gpus_per_run;
    row.idle_stranded_gpus = idle.stranded / gpus_per_run;
    row.idle_no_fit_gpus = idle.no_fit / gpus_per_run;
    if (published) {
      row.published100 = published->MeanAlloc(result.workload, row.policy, 100).value_or(-1);
      row.published130 = published->MeanAlloc(result.workload, row.policy, 130).value_or(-1);
    }
    result.rows.push_back(row);
  }

  double fgd_unalloc = -1;
  for (const FgdSummaryRow& r : result.rows) {
    if (r.policy == "fgd") fgd_unalloc = r.unallocated_gpus130;
  }
  auto cut = [&](const FgdSummaryRow& r) {
    if (fgd_unalloc <= 0) return std::string("-");
    return fmt::format("{:+.1f}%", 100 * (fgd_unalloc - r.unallocated_gpus130) / fgd_unalloc);
  };
  if (o.markdown) {
    out << "\n| policy | alloc % @100 | published | diff | alloc % @130 | published | diff | "
           "unallocated GPUs @130 | cut vs fgd | failed pods |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const FgdSummaryRow& r : result.rows) {
      out << fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.1f} | {} | {:.0f} |\n", r.policy,
                         FormatPct(r.alloc100), r.published100 < 0 ? "-" : FormatPct(r.published100),
                         FormatDiff(r.alloc100, r.published100), FormatPct(r.alloc130),
                         r.published130 < 0 ? "-" : FormatPct(r.published130),
                         FormatDiff(r.alloc130, r.published130), r.unallocated_gpus130, cut(r), r.failed_pods);
    }
  } else {
    std::size_t width = 15;  // the longest policy name, at least as wide as the paper's
    for (const FgdSummaryRow& r : result.rows) width = std::max(width, r.policy.size());
    out << fmt::format("\n{:<{}} {:>9} {:>9} {:>6}  {:>9} {:>9} {:>6}  {:>12} {:>10} {:>8} {:>8}\n", "policy", width,
                       "alloc@100", "published", "diff", "alloc@130", "published", "diff", "unalloc GPUs",
                       "cut vs fgd", "failed", "s/run");
    for (const FgdSummaryRow& r : result.rows) {
      out << fmt::format("{:<{}} {:>9} {:>9} {:>6}  {:>9} {:>9} {:>6}  {:>12.1f} {:>10} {:>8.0f} {:>8.3f}\n",
                         r.policy, width, FormatPct(r.alloc100),
                         r.published100 < 0 ? "-" : FormatPct(r.published100),
                         FormatDiff(r.alloc100, r.published100), FormatPct(r.alloc130),
                         r.published130 < 0 ? "-" : FormatPct(r.published130),
                         FormatDiff(r.alloc130, r.published130), r.unallocated_gpus130, cut(r),
                         r.failed_pods, r.seconds_per_run);
    }
    out << "(alloc: mean GPU allocation ratio over seeds at 100%/130% arrived GPU demand; unalloc GPUs "
           "at 130%; cut: fewer unallocated GPUs than fgd)\n";
    out << fmt::format("\nidle GPUs when the last pod arrived (mean), by what the typical shapes can do with them:\n"
                       "{:<{}} {:>8} {:>18} {:>14}\n",
                       "policy", width, "usable", "stranded (CPU/mem)", "no shape fits");
    for (const FgdSummaryRow& r : result.rows) {
      out << fmt::format("{:<{}} {:>8.1f} {:>18.1f} {:>14.1f}\n", r.policy, width, r.idle_usable_gpus,
                         r.idle_stranded_gpus, r.idle_no_fit_gpus);
    }
  }

  PrintAdmission(result.rows, o.markdown, out);

  if (!o.out_dir.empty()) {
    const std::filesystem::path dir(o.out_dir);
    std::string runs_csv =
        "policy,seed,pods,failed,final_alloc_pct,final_arrived_pct,seconds,failed_cpu_only,refused,refused_cpu_only,"
        "final_cpu_alloc_pct\n";
    std::string curves_csv = "policy,seed,arrived_pct,alloc_pct,frag_pct,frag_rate_pct\n";
    for (const FgdRun& r : result.runs) {
      runs_csv += fmt::format("{},{},{},{},{:.4f},{:.4f},{:.4f},{},{},{},{:.4f}\n", r.policy, r.seed, r.pods, r.failed,
                              100.0 * static_cast<double>(r.final_alloc_milli) / static_cast<double>(r.capacity_milli),
                              r.final_arrived_pct, r.seconds, r.failed_cpu_only, r.refused, r.refused_cpu_only,
                              100.0 * static_cast<double>(r.final_cpu_alloc_milli) /
                                  static_cast<double>(std::max<std::int64_t>(1, r.cpu_total_milli)));
      for (int x = 0; x <= kMaxPercent; ++x) {
        curves_csv += fmt::format("{},{},{},{},{},{}\n", r.policy, r.seed, x, FormatPct(r.curves.alloc_pct[x]),
                                  FormatPct(r.curves.frag_pct[x]), FormatPct(r.curves.frag_rate_pct[x]));
      }
    }
    std::string summary_csv =
        "policy,alloc100_pct,published100_pct,alloc130_pct,published130_pct,unallocated_gpus130,failed_pods,seconds_per_run,"
        "end_idle_usable_gpus,end_idle_stranded_gpus,end_idle_no_fit_gpus,failed_cpu_only_pods,refused_pods,"
        "refused_cpu_only_pods,end_cpu_alloc_pct\n";
    std::vector<Series> alloc_series, frag_series;
    for (const FgdSummaryRow& r : result.rows) {
      summary_csv += fmt::format("{},{:.3f},{},{:.3f},{},{:.2f},{:.1f},{:.4f},{:.2f},{:.2f},{:.2f},{:.1f},{:.1f},{:.1f},{:.3f}\n",
                                 r.policy, r.alloc100, r.published100 < 0 ? "" : FormatPct(r.published100), r.alloc130,
                                 r.published130 < 0 ? "" : FormatPct(r.published130), r.unallocated_gpus130,
                                 r.failed_pods, r.seconds_per_run, r.idle_usable_gpus, r.idle_stranded_gpus,
                                 r.idle_no_fit_gpus, r.failed_cpu_only_pods, r.refused_pods, r.refused_cpu_only_pods,
                                 r.cpu_alloc_end_pct);
      std::vector<const FgdRun*> runs;
      for (const FgdRun& run : result.runs) {
        if (run.policy == r.policy) runs.push_back(&run);
      }
      const FgdCurves mean = MeanCurves(runs);
      Series a{r.policy, {}}, f{r.policy, {}};
      for (int x = 0; x <= kMaxPercent; ++x) {
        a.points.emplace_back(x, mean.alloc_pct[x]);
        f.points.emplace_back(x, mean.frag_pct[x]);
      }
      alloc_series.push_back(std::move(a));
      frag_series.push_back(std::move(f));
    }
    GPUSLICE_RETURN_IF_ERROR(WriteFile((dir / "fgd_runs.csv").string(), runs_csv));
    GPUSLICE_RETURN_IF_ERROR(WriteFile((dir / "fgd_curves.csv").string(), curves_csv));
    GPUSLICE_RETURN_IF_ERROR(WriteFile((dir / "fgd_summary.csv").string(), summary_csv));
    GPUSLICE_RETURN_IF_ERROR(WriteFile(
        (dir / "fgd_alloc.svg").string(),
        SvgLinePlot({"GPU allocation ratio vs arrived demand (" + result.workload + ", mean of " +
                         std::to_string(o.seeds.size()) + " seeds)",
                     "arrived GPU demand (% of capacity)", "GPU allocation ratio (%)"},
                    alloc_series)));
    GPUSLICE_RETURN_IF_ERROR(WriteFile(
        (dir / "fgd_frag.svg").string(),
        SvgLinePlot({"Fragmented GPU vs arrived demand (" + result.workload + ")",
                     "arrived GPU demand (% of capacity)", "fragmented GPU (% of capacity)"},
                    frag_series)));
    out << fmt::format("wrote {}/{{fgd_runs.csv, fgd_curves.csv, fgd_summary.csv, fgd_alloc.svg, fgd_frag.svg}}\n",
                       dir.string());
  }
  return result;
}

}  // namespace gpuslice::sim
