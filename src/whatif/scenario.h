#pragma once
// What-if scenarios: each is a set of cures (and a GPU count) applied to a recorded history
// before it is replayed through the scheduler; the spec also holds the verdict's wait targets
// and the modelling assumptions. From a small TOML file (docs/whatif.md) or the built-in
// defaults: as recorded; idle reclaim at 15 min, 30 min and 1 h; interactive sessions on
// time-sliced fractions; inference right-sized to MIG instances; training capped at 24 h;
// 10 % fewer and 10 % more GPUs; every cure at once.
//
// Prepare() turns a History and a Scenario into what one replay needs (config, nodes, jobs);
// the rules, each applied only where it was measured (unknown stays as recorded):
//   reclaim       the queues' idle policy reclaims after `window` (grace: the scenario's, else
//                 the queue's configured one);
//   time_slice    a measured job in the queues runs on a shared fraction: its peak busy
//                 utilisation (of a whole GPU) rounded up to `step`, memory capped at its
//                 measured peak plus headroom (unmeasured peak: the queue's default);
//   right_size    a job in the queues with a measured memory peak asks for a MIG instance of
//                 that peak plus headroom (the scheduler picks the smallest profile that holds
//                 it); a cluster without MIG-capable GPUs leaves them as they were;
//   max_duration  the queues' jobs are stopped after `limit` (their remaining work comes back
//                 at once when `resubmit`, as from a checkpoint);
//   gpus          GPUs removed from the last nodes, or added as nodes like the last one.
// Values; thread-compatible.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "sched/config.h"
#include "sim/openb.h"
#include "sim/replay.h"
#include "whatif/history.h"

namespace gpuslice::whatif {

struct ReclaimCure {
  std::vector<std::string> queues = {"interactive"};
  Micros window = 30 * kMinute;
  std::optional<Micros> grace;  // nullopt: the queue's configured grace
};

struct TimeSliceCure {
  std::vector<std::string> queues = {"interactive"};
  MilliGpu step = 250;          // fractions are multiples of this
  int headroom_percent = 10;    // memory cap above the measured peak
};

struct RightSizeCure {
  std::vector<std::string> queues = {"inference"};
  int headroom_percent = 10;    // instance memory above the measured peak
};

struct MaxDurationCure {
  std::vector<std::string> queues = {"training"};
  Micros limit = 24 * kHour;
  bool resubmit = true;         // the remaining work comes back at once (checkpoint/restart)
};

// A change of GPU count: `amount` GPUs, or `amount` percent of them (rounded, at least 1).
struct GpuChange {
  int amount = 0;
  bool percent = false;
  // The change for a site of `gpus` GPUs (never below 1 GPU left).
  int For(int gpus) const;
  std::string Text() const;  // "-10%", "+8"
};

struct Scenario {
  std::string name;
  std::optional<ReclaimCure> reclaim;
  std::optional<TimeSliceCure> time_slice;
  std::optional<RightSizeCure> right_size;
  std::optional<MaxDurationCure> max_duration;
  std::optional<GpuChange> gpus;
  // Cures listed in a file must name queues of the config; the built-in ones skip a queue the
  // config lacks (said in a note).
  bool strict_queues = false;

  bool HasCures() const { return reclaim || time_slice || right_size || max_duration; }
  std::string Describe() const;  // "idle reclaim after 15m in interactive; 10% fewer GPUs"
};

struct VerdictSpec {
  Micros p95_wait = 30 * kMinute;           // target for every queue
  std::map<std::string, Micros> queue_p95;  // per-queue targets
  std::string cures;                        // the scenario whose cures the verdict applies ("": all-cures, else every cure listed)
  int search_steps = 6;                     // replays spent finding the GPU count
  Micros Target(const std::string& queue) const;
};

struct Assumptions {
  Micros restart_cost = 5 * kMinute;  // owner time per cut session that still had work in it
  Micros idle_tail = 8 * kHour;       // an idle-reclaimed session left alone stays idle at most this long (or its queue's limit)
};

struct WhatifSpec {
  std::vector<Scenario> scenarios;  // the first is always "as-recorded" (no cures)
  VerdictSpec verdict;
  Assumptions assume;
};

WhatifSpec DefaultSpec();
// A spec file; errors name the file, the key and the value. Scenarios listed in the file
// replace the defaults ("as-recorded" is put first when the file does not list it).
Result<WhatifSpec> ParseSpec(std::string_view toml_text, std::string_view file_name);
Result<WhatifSpec> LoadSpecFile(const std::string& path);

// The cures of the scenario the verdict uses (VerdictSpec::cures), without its GPU change.
Scenario VerdictCures(const WhatifSpec& spec);

// What one replay of a scenario needs, and what the cures did.
struct Prepared {
  sched::Config config;
  std::vector<sim::TraceNode> nodes;
  std::vector<sim::ReplayJob> jobs;   // tag = index into History::jobs
  int gpus = 0;                       // after the scenario's change
  std::int64_t resized = 0;           // jobs moved to a fraction or a MIG instance
  std::int64_t not_resized_unmeasured = 0;  // in a resizing cure's queues, but not measured: as recorded
  std::vector<std::string> notes;
};
// `gpu_delta` (when given) replaces the scenario's GPU change (the verdict's search).
Result<Prepared> Prepare(const History& h, const Scenario& s, const Assumptions& a,
                         std::optional<int> gpu_delta = std::nullopt);

// `nodes` with `delta` GPUs more (taken from the last nodes first; added as nodes like the
// last one). At least one GPU is left.
std::vector<sim::TraceNode> ResizeNodes(std::vector<sim::TraceNode> nodes, int delta);

}  // namespace gpuslice::whatif
