#pragma once
// Runs what-if scenarios: each is Prepare()d from the history and replayed through the
// scheduler by the simulator's online replay (sim::RunReplay, the same driver `sim replay`
// uses), and the per-slice outcomes are summed per scenario:
//   - GPU-hours held, and of those busy, idle and unknown (the recorded activity over the time
//     each slice was held; a restart runs the recording from its start again); used (busy
//     time x its recorded level, in GPUs of the recorded share, at most the share now held);
//   - queueing delay p50/p95 per queue (a job never started counts its wait until the last
//     event: a lower bound);
//   - sessions cut (idle reclaim, time limit) and what they cost their owners: a cut session
//     whose recording shows more work after the cut comes back (when the owner is busy again,
//     or at once after a time limit with resubmit) as a follow-up job with the rest of the
//     work; its owner pays the restart cost plus the follow-up's wait;
//   - given back: the GPU-hours "as-recorded" held minus this scenario's.
// Scenarios run on up to `threads` threads at once; each replay is single-threaded and
// deterministic, so the results do not depend on the thread count.
// Thread-safe functions over const inputs.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "whatif/history.h"
#include "whatif/scenario.h"

namespace gpuslice::whatif {

// milli-GPU x microseconds: GPU time in integers (a GPU-hour is 3.6e12).
// 128 bits: a year of a 1,000-GPU site is 3.2e19 milli-GPU-µs, past int64's 9.2e18 (the totals
// of the part-5 benchmark came out negative with int64).
using MilliUs = __int128;
inline constexpr double kMilliUsPerGpuHour = 1000.0 * static_cast<double>(kHour);

struct QueueWaits {
  std::string queue;
  std::int64_t jobs = 0;           // submitted (rejected ones excluded)
  std::int64_t never_started = 0;  // still waiting at the end
  Micros p50 = 0;
  Micros p95 = 0;
  Micros max = 0;
  friend bool operator==(const QueueWaits&, const QueueWaits&) = default;
};

// Where one queue's GPU time went (the same split as the scenario's totals).
struct QueueHours {
  std::string queue;
  MilliUs held = 0;
  MilliUs busy = 0;
  MilliUs idle = 0;
  MilliUs unknown = 0;
  MilliUs used = 0;
  MilliUs busy_level_known = 0;
};

// A session the scenario cut (listed by most GPU time given back, at most kMaxCutListed).
struct CutSession {
  std::string id;
  std::string user;
  std::string queue;
  std::string how;            // "reclaimed" | "time-limit"
  Micros held_before = 0;     // how long it held its slice before the cut
  Micros came_back = -1;      // follow-up's delay after the cut until it started; -1: no more work
  Micros owner_cost = 0;
  MilliUs given_back = 0;     // held by the recording after the cut point, less the follow-up's hold
};

struct ScenarioResult {
  std::string name;
  std::string description;
  int cures = 0;               // kinds of cure applied (reclaim, time slice, right size, max duration)
  bool gpu_change = false;     // the scenario changes the GPU count
  int gpus = 0;
  MilliUs capacity = 0;        // GPUs x the replay's span
  MilliUs held = 0;
  MilliUs busy = 0;            // held while recorded busy
  MilliUs idle = 0;            // held while recorded idle
  MilliUs unknown = 0;         // held while nothing was measured
  MilliUs used = 0;            // busy time x recorded level (where known)
  MilliUs busy_level_known = 0;  // busy held time whose level is known
  MilliUs given_back = 0;      // as-recorded's held minus this one's (set by RunScenarios)
  std::int64_t jobs = 0;       // jobs of the history replayed
  std::int64_t started = 0;
  std::int64_t rejected = 0;
  std::int64_t never_started = 0;
  std::int64_t unmeasured_jobs = 0;  // held something, and none of it measured
  std::int64_t resized = 0;          // moved to a fraction or a MIG instance by a cure
  std::int64_t not_resized_unmeasured = 0;
  std::int64_t slower = 0;           // resized, and its recorded busy level exceeds the new share
  std::int64_t cut = 0;              // sessions cut (reclaim or time limit), follow-ups included
  std::int64_t cut_reclaimed = 0;
  std::int64_t cut_time_limit = 0;
  std::int64_t cut_with_work_left = 0;  // ... whose recording shows more work after the cut
  std::int64_t follow_ups = 0;
  Micros owner_cost = 0;             // restart costs + follow-ups' waits
  std::vector<QueueWaits> waits;     // by queue name
  std::vector<QueueHours> hours;     // by queue name
  std::vector<CutSession> cut_list;
  std::vector<std::string> notes;
  double seconds = 0;
  static constexpr std::size_t kMaxCutListed = 20;
};

struct RunOptions {
  int threads = 2;
  std::uint64_t seed = 1;
  // Fraction of the whole run done, from any thread (serialised by the caller's callback).
  std::function<void(double)> progress;
};

// One scenario (gpu_delta: see Prepare).
Result<ScenarioResult> RunScenario(const History& h, const Scenario& s, const Assumptions& a,
                                   std::uint64_t seed, std::optional<int> gpu_delta = std::nullopt,
                                   const std::function<void(double)>& progress = {});

// Every scenario of the spec, in its order; given_back filled against the first ("as-recorded").
Result<std::vector<ScenarioResult>> RunScenarios(const History& h, const WhatifSpec& spec, const RunOptions& o);

// A wait or a cost in words: "0s", "4m30s", "2h" (core's FormatDuration, with 0 as "0s").
std::string FormatWait(Micros us);

// Whether every queue's p95 delay (never-started jobs counted with their wait so far) meets
// its target.
bool MeetsTargets(const ScenarioResult& r, const VerdictSpec& v);

}  // namespace gpuslice::whatif
