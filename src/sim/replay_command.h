#pragma once
// `gpuslice sim replay`: online replay of a job trace (generic CSV or openb pod list) on a
// cluster (openb node list or a uniform synthetic one) through sched::Scheduler, with the
// admin's config (--config) or a default one per placement policy; one run per policy (or one
// with the config as it is, and one with --compare-config); a summary table, with [teams] a
// per-team table (wait p50/p95, share of GPU-hours against the guarantee), and,
// with an output directory, CSV of every metric plus SVG plots (allocation over time, queueing
// delay CDF). Not thread-safe (writes to the given streams).

#include <iosfwd>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/cluster.h"
#include "sim/replay.h"

namespace gpuslice::sim {

struct ReplayCommandOptions {
  std::string trace;
  std::string nodes;     // openb node list CSV; "" = use `cluster`
  std::string cluster;   // "NODESxGPUS[:MODEL[:CPUS[:MEMORY]]]", e.g. "1250x8:H100-80GB:128:1TiB"
  std::vector<std::string> policies;  // empty with a config: its queues' own placement
  std::string config;                 // scheduler config TOML; "": ReplayConfig per policy
  // A second config replayed after `config`'s run, as the run "compare" (e.g. today's config
  // against one with other team guarantees); needs `config`, takes no policies.
  std::string compare_config;
  std::uint64_t seed = 1;
  std::string out_dir;
  bool skip_bad_rows = false;
  bool progress = false;
};

// Parses a synthetic cluster spec (see above); errors name the value.
Result<Cluster> ParseClusterSpec(std::string_view spec);

Result<std::vector<ReplayResult>> RunReplayCommand(const ReplayCommandOptions& options, std::ostream& out,
                                                   std::ostream& err);

}  // namespace gpuslice::sim
