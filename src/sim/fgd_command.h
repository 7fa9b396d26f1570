#pragma once
// `gpuslice sim fgd`: the FGD paper's protocol over several policies and seeds, a summary table
// (compared with the authors' published means when they are available), and with an output
// directory, CSV of every metric and SVG plots. Used by apps/gpuslice/cmd_sim.cc and
// scripts/evaluate. Not thread-safe (writes to the given streams).

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/fgd_protocol.h"

namespace gpuslice::sim {

struct FgdCommandOptions {
  std::string trace;       // openb pod list CSV
  std::string nodes;       // openb node list CSV; "" = openb_node_list_gpu_node.csv beside the trace
  // Placement policy names, each with an optional admission option ("gpuslice+keep-cpu",
  // "fgd+refuse-cpu-only": sched::MakePolicyWithAdmission()).
  std::vector<std::string> policies;
  std::vector<std::uint64_t> seeds;
  double inflation = 1.3;
  std::string out_dir;     // "" = no files
  std::string expected;    // published results CSV; "" = none
  bool skip_bad_rows = false;
  bool progress = false;   // progress bar on stderr (callers enable it on a terminal)
  bool markdown = false;   // the table as Markdown (for docs/evaluation.md)
};

// "42-51", "42,43,50", "7" -> seeds. Errors name the value.
Result<std::vector<std::uint64_t>> ParseSeeds(std::string_view text);

// Every policy of fgd.cc, in the paper's order, then gpuslice's.
std::vector<std::string> FgdPaperPolicies();

struct FgdSummaryRow {
  std::string policy;
  double alloc100 = 0, alloc130 = 0;              // mean over seeds, %
  double published100 = -1, published130 = -1;    // -1: not published
  double unallocated_gpus130 = 0;
  double failed_pods = 0;                          // mean
  double seconds_per_run = 0;
  // Mean idle GPUs when the last pod has arrived, by class (IdleBreakdown, fgd_protocol.h).
  double idle_usable_gpus = 0, idle_stranded_gpus = 0, idle_no_fit_gpus = 0;
  // What an admission option (admission.h) costs, means per run: failed pods that ask no GPU,
  // pods refused where they fit (CPU-only ones among them), the CPU allocated at the end (% of
  // the cluster's).
  double failed_cpu_only_pods = 0, refused_pods = 0, refused_cpu_only_pods = 0;
  double cpu_alloc_end_pct = 0;
  double cpu_total_cpus = 0;  // the cluster's CPU, in CPUs
};

struct FgdCommandResult {
  std::string workload;  // trace file stem, e.g. "openb_pod_list_default"
  std::vector<FgdRun> runs;
  std::vector<FgdSummaryRow> rows;
};

Result<FgdCommandResult> RunFgdCommand(const FgdCommandOptions& options, std::ostream& out, std::ostream& err);

}  // namespace gpuslice::sim
