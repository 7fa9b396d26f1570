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

namespace gpuslice::sched {

enum class JobState { kPending, kRunning, kEnded };
std::string_view JobStateName(JobState s);

// Idle state machine of a running slice: active -> idle (since) -> warned -> reclaimed.
// kReclaimable: warned, past its grace in a queue with reclaim = "on-demand"; it runs until a
// pending job needs its room.
enum class IdleState { kActive, kWarned, kReported, kReclaimable };

// The latest activity report of a running slice (ActivityReport), as the scheduler keeps it.
struct SliceReport {
  std::string source;
  bool busy = false;
  Micros last_activity = -1;  // clamped to at most `received`; -1: not given
  int kernels = -1;
  int connections = -1;
  Micros received = 0;        // the event's time
  Micros busy_since = 0;      // when the busy budget began (BusyBudgetStart); 0: none
};

struct JobView {
  JobId job;
  std::string user;
  std::string queue;
  std::string team;  // with teams configured; empty: none
  JobRequest request;        // as submitted
  SliceKind kind = SliceKind::kShared;  // resolved against the queue
  JobState state = JobState::kPending;
  Micros submit_time = 0;
  Micros start_time = 0;
  Micros end_time = 0;
  SliceId slice;             // while running
  std::string end_reason;    // "finished", "cancelled", "time-limit", "idle", ...
  bool held = false;         // pending, held by an admin (AdminHold): not considered
};

struct SliceView {
  SliceId slice;
  JobId job;
  SliceKind kind = SliceKind::kShared;
  NodeId node;
  std::vector<DeviceIndex> devices;
  std::optional<MigPlacement> mig;
  MilliGpu milli = 0;            // per device
  Bytes memory = 0;              // per device (reserved); whole: the smallest of its devices'
  Micros start_time = 0;
  Micros deadline = 0;           // 0: no time limit
  bool limit_warned = false;
  Micros last_active = 0;        // last sample showing activity (or start)
  IdleState idle = IdleState::kActive;
  Micros idle_deadline = 0;      // when warned: reclaim time
  // The last sample had no usable signal: no idle warning or reclaim until one comes (its
  // idle time then starts from that sample); the time limit still applies.
  bool unmeasured = false;
  std::optional<SliceReport> report;  // the latest activity report; nullopt: none
};

// Who decides a MIG-capable device's mode: the planner (from demand), or an admin who put it
// in MIG mode (kOn) or out of it (kOff) (AdminMigMode).
enum class MigAdmin { kAuto, kOn, kOff };
std::string_view MigAdminName(MigAdmin m);  // "auto", "on", "off"

struct DeviceView {
  DeviceRef ref;
  std::string uuid;
  std::string model;             // canonical catalogue name (as announced if unknown)
  const DeviceModel* catalogue = nullptr;  // the catalogue entry; nullptr if the model is unknown
  Bytes memory = 0;              // usable: the model's memory less what the driver keeps
  Bytes reserved_memory = 0;     // kept by the driver (DeviceAdded::reserved_memory)
  Bytes context_reserve = 0;     // one process's CUDA context, booked with each shared/MPS slice
  bool mig_capable = false;
  DeviceMode mode = DeviceMode::kFree;
  MigLayout layout;              // kMig: the instances (free or used)
  bool draining = false;         // no new slices (waiting to become empty)
  bool reconfiguring = false;    // a ReconfigureMig is outstanding
  JobId reserved_for;            // kept empty for this waiting whole-GPU job (reserve_after)
  bool admin_drained = false;    // an admin drained it: no new slices (AdminDrain)
  std::string drain_reason;
  MigAdmin mig_admin = MigAdmin::kAuto;
  bool leaving_mig = false;      // the outstanding ReconfigureMig takes it out of MIG mode
  MigLayout target_layout;       // while draining / reconfiguring
  MilliGpu used_milli = 0;       // shared / mps / whole
  Bytes used_memory = 0;
  int clients = 0;               // slices on the device
  std::vector<SliceId> slices;   // sorted
  // kMps: the user whose MPS server the device runs. An MPS server serves one Linux user at a
  // time (another user's clients wait at CUDA start-up until it exits), so only this user's
  // mps slices are placed here until the last of them ends. Empty otherwise.
  std::string mps_user;
};

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
