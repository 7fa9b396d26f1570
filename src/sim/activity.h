#pragma once
// A job's recorded activity on its GPU share, as a sequence of runs from its start: busy,
// idle, or unknown (nothing was measured). The online replay (replay.h) feeds it to the
// Scheduler as samples at the instants it changes, so the Scheduler's own idle rule decides
// what a reclaim window would have done; the what-if (src/whatif) integrates it over the time
// a job held its slice. Unknown is never idle and never busy.
//
// Text form (the generic CSV's `activity` column, docs/sim.md): runs separated by spaces,
// each a state letter, a duration and, for busy runs, an optional mean utilisation:
//   "a30m@40 i2h a10m u5m"  = busy 30 min at 40 %, idle 2 h, busy 10 min (utilisation not
//                             given: unknown use but known busy), unknown 5 min.
// Values; thread-compatible.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::sim {

enum class RunState : std::uint8_t {
  kUnknown = 0,  // no usable measurement: never reclaimed for idleness, never counted idle or busy
  kIdle = 1,     // measured idle (the detector's verdict)
  kActive = 2,   // measured busy
};
std::string_view RunStateName(RunState s);  // "unknown", "idle", "active"

struct ActivityRun {
  Micros length = 0;
  // Mean utilisation of the share the job held while recorded, per mille; -1: not known (an
  // active run whose level was not recorded; idle runs are 0, unknown runs -1).
  std::int16_t permille = -1;
  RunState state = RunState::kUnknown;
  friend bool operator==(const ActivityRun&, const ActivityRun&) = default;
};

// Time in each state over [from, to) of a job's timeline (offsets from its start); time past
// the last run is unknown. `used_permille_us` sums permille x µs over busy time whose level
// is known, and `active_level_known` is that busy time.
struct ActivityTotals {
  Micros active = 0;
  Micros idle = 0;
  Micros unknown = 0;
  Micros active_level_known = 0;
  std::int64_t used_permille_us = 0;
};
ActivityTotals Integrate(std::span<const ActivityRun> runs, Micros from, Micros to);

// The runs from `offset` on (the rest of a job cut at `offset`), offsets shifted to 0.
std::vector<ActivityRun> RunsFrom(std::span<const ActivityRun> runs, Micros offset);
// The first offset >= `from` at which the job is busy again; -1 if it never is.
Micros NextActive(std::span<const ActivityRun> runs, Micros from);
// The highest known utilisation of any busy run, per mille; -1 if none is known.
int PeakActivePermille(std::span<const ActivityRun> runs);

// Appends a run, merging it into the last one when both have the same state (busy runs
// average their known levels, weighted by length). Zero-length runs are dropped.
void AppendRun(std::vector<ActivityRun>& runs, ActivityRun run);

// The text form above; errors name the token and say why. `max_total` bounds the sum.
Result<std::vector<ActivityRun>> ParseActivity(std::string_view text, Micros max_total);
std::string FormatActivity(std::span<const ActivityRun> runs);

}  // namespace gpuslice::sim
