#pragma once
// The scheduling core: a pure, deterministic state machine. Feed it Events (with their time);
// it returns Decisions as values. It never reads a clock, sleeps, starts threads or touches a
// device; the daemon, the simulator and the Slurm mode all drive this same class.
// Same config + seed + events => same decisions, bit for bit.
// Not thread-safe: one owner calls Handle(); the views are for that owner (API, metrics).

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/status.h"
#include "core/units.h"
#include "sched/config.h"
#include "sched/decisions.h"
#include "sched/events.h"
#include "sched/pending_reason.h"
#include "sched/types.h"
#include "sched/views.h"

namespace gpuslice::sched {

// Counters for metrics.
struct SchedulerStats {
  std::uint64_t events = 0;
  std::uint64_t started = 0;
  std::uint64_t rejected = 0;
  std::uint64_t reclaimed = 0;
  std::uint64_t reclaimed_on_demand = 0;  // of `reclaimed`: taken for a waiting job (on-demand)
  std::uint64_t stopped = 0;
  std::uint64_t preempted = 0;
  std::uint64_t reconfigurations = 0;
  std::uint64_t placement_attempts = 0;
};

// What one slice's sample says under a queue's idle policy, and which signals said it.
// Per signal: active, idle or unknown. Any enabled signal active -> active (basis: those
// signals); else any signal measured idle -> idle (basis: those); else unknown (basis empty):
// the slice is "unmeasured" and is never reclaimed for idleness. Signals: "sm" and "mem"
// (>= threshold, when enabled), "procs" (no process on the slice is idle; a process counts as
// activity only with process_presence), "memchange" (only when sm and mem are both unknown),
// "external". The rule the Scheduler applies to every Sample; the daemon and agent ask it too.
struct SampleVerdict {
  Activity activity = Activity::kUnknown;
  std::string basis;  // e.g. "sm,mem" or "procs"
};
SampleVerdict ClassifySample(const IdlePolicy& idle, const SliceSample& s);
// ClassifySample(...).activity == kActive.
bool SampleShowsActivity(const IdlePolicy& idle, const SliceSample& s);

// Whether the slice's report counts for the idle decision at `t`: its source is a listed
// signal and it was received less than idle.report_stale before `t`.
bool ReportCounts(const IdlePolicy& idle, const SliceReport& r, Micros t);
// When the slice was last active at `t` by every counting signal: the GPU's last_active, or
// later by a fresh report that says busy (its last_activity; `t` itself with busy_is_active),
// never past its busy budget's start + busy_max. An idle report never moves it; reports only
// ever move it later.
Micros EffectiveLastActive(const IdlePolicy& idle, const SliceView& s, Micros t);
// The start of the busy budget a new report (busy or not) carries: the first busy report since
// the GPU was last active, kept across idle reports; 0 when there is none.
Micros BusyBudgetStart(const SliceView& s, bool busy, Micros now);
// When, with no further event, the slice's idle window ends (EffectiveLastActive + window,
// taking the report's going stale into account).
Micros IdleWindowEnd(const IdlePolicy& idle, const SliceView& s);

// A team's fair-share standing (docs/teams.md): what orders teams in the over-quota pool.
struct TeamStanding {
  std::string name;
  int weight = 1;
  MilliGpu borrowed = 0;       // held past its guarantees now, summed over queues
  double usage_gpu_hours = 0;  // borrowed GPU-hours, decayed with the config's half_life
  int rank = 0;                // 1: served first; teams of equal usage over weight share a rank
};

class Scheduler {
 public:
  // `config` must be valid (ValidateConfig); `seed` feeds random tie-breaks of policies.
  Scheduler(Config config, std::uint64_t seed);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Applies one event and returns what to do, in order. Events with `now` earlier than the
  // last event's are treated as happening at the last event's time.
  std::vector<Decision> Handle(const Event& e);

  // Read-only views (valid until the next Handle()).
  const Config& config() const;
  // Pending, running and the 10,000 most recently ended jobs (older ones are forgotten,
  // after which their JobId could be submitted again).
  const std::map<JobId, JobView>& jobs() const;
  const std::map<SliceId, SliceView>& slices() const;    // running slices
  const std::map<DeviceRef, DeviceView>& devices() const;
  // The queue settings a job is under: for a pending or running job, the version it follows
  // (a queue removed by a ConfigReload keeps its last settings for its jobs); for any other
  // job, the config's queue of its name. nullptr: unknown job, or its queue is gone.
  const QueueConfig* QueueOf(JobId job) const;
  // Pending jobs of one queue in the order they will be considered.
  std::vector<JobId> Pending(std::string_view queue) const;
  // All pending jobs, in consideration order.
  std::vector<JobId> Pending() const;
  const SchedulerStats& stats() const;
  Micros now() const;
  // The config's teams in its order, with their fair-share standing at now() (empty without
  // [teams]). Free of side effects.
  std::vector<TeamStanding> TeamStandings() const;
  // The teams' books exactly as stored (held, borrowed, usage as of its last change, in
  // hexadecimal floating point), one line per team: for state digests that must not depend on
  // the clock (a replay's and the live scheduler's). Empty when no job has run in a team.
  std::string TeamBooksDigest() const;

  // OK iff: no device over-committed in compute or memory, every slice on devices of its
  // mode, MIG instances legal and non-overlapping, empty devices only change mode, indexes
  // consistent with the records. Tests call it after every event.
  Status CheckInvariants() const;

  // For tests and benchmarks only: true places with the reference path (every host shown to
  // the policy, GenericPlacement) instead of scoring each distinct host state once (ByStateEngine)
  // for policies that ScoresByNodeState(). The decisions are the same either way; this is how
  // that is checked and how the speed-up is measured.
  void SetReferencePlacement(bool on);

  // Why a pending job waits (nullopt: not a pending job), from the state after the last
  // Handle(): never fits on this host, user cap, devices kept for it or for another job, a
  // device changing MIG layout, or no room now (pending_reason.h). Asking is free of side
  // effects (no random draw, no counter), so it never changes a decision.
  std::optional<WaitReason> PendingReason(JobId job) const;
  // Pending jobs per reason kind (WaitReason's index), for wait-time accounting: O(pending).
  std::array<std::int64_t, kWaitReasonKinds> PendingReasonCounts() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::sched
