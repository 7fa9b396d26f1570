#pragma once
// `gpuslice whatif`: reads a history — the daemon's (GET /v1/whatif, or its store with
// --state-dir), a Slurm accounting dump (--sacct, with --slurm-usage for the utilisation
// gpuslice's Slurm agent recorded) or a generic CSV (--trace) — runs the scenarios (built-in,
// or --scenarios FILE) and prints the document as a table, JSON or CSV, with SVG plots under
// --out. Flags are checked before anything is read; errors name the flag and the value.
// Not thread-safe (writes to stdout/stderr).

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/cli.h"
#include "core/status.h"
#include "whatif/history.h"
#include "whatif/run.h"
#include "whatif/scenario.h"

namespace gpuslice::whatif {

struct WhatifFlags {
  std::string since;
  std::string from;
  std::string to;
  std::string state_dir;
  std::string sacct;
  std::string slurm_usage;
  std::string trace;
  std::string config;
  std::string cluster;
  std::string nodes;
  std::string scenarios;
  int shards_per_gpu = 8;  // --sacct: a gres/shard is 1/this of a GPU
  int threads = 2;
  std::uint64_t seed = 1;
  bool csv = false;
  std::string out;
  bool skip_bad_rows = false;
  bool progress = false;  // a bar on stderr (the caller passes whether it is a terminal)
};

Status RunWhatif(const api::ClientFlags& client, const WhatifFlags& flags);

// Scenarios, verdict and document for a history.
Result<nlohmann::json> BuildDocument(const History& h, const WhatifSpec& spec, const RunOptions& o);

}  // namespace gpuslice::whatif
