#pragma once
// Online replay through the scheduling library: the same sched::Scheduler the daemon runs is fed
// events on a simulated clock that jumps from event to event, and its decisions are applied in
// simulated time. So queues (kinds, defaults, priorities, per-user caps), time limits, idle
// reclaim and MIG layouts behave as they would in the daemon with the same config.
//
// How each piece is simulated:
//  - the cluster: one DeviceAdded per GPU at the first submit time (node i = NodeId(i + 1)); a
//    model the catalogue knows brings its memory and MIG profiles, an unknown one (openb's "G2")
//    is a GPU of untracked memory without MIG;
//  - a trace row -> Submit at its submit time, in its queue (empty: the config's default queue),
//    by its user (empty: "sim"); the request is mapped to the queue's kinds (ToJobRequest);
//  - StartSlice -> the job runs for its trace duration, then Finish is fed; Stop (time limit),
//    Reclaim (idle) and Preempt end it earlier (a requeued job later restarts from scratch);
//  - ReconfigureMig -> ReconfigureDone{ok, the asked layout} after options.mig_reconfigure_delay;
//  - activity: a job with recorded activity runs (ReplayJob::activity, sim/activity.h) is fed
//    them as samples at the instants they change, in a queue with an idle policy: busy (100 %,
//    one process), idle (0 %, one process) or unknown (nothing measured: the Scheduler never
//    reclaims it while so); a busy run is also sampled once per idle window. Otherwise a job
//    with known utilisation u reports SM and memory utilisation round(100 u) % and one process
//    on every sample; unknown utilisation counts as busy. Ticks are fed only
//    when a timer can fire: a time-limit warning or deadline, or the idle window / grace end of
//    a slice whose samples would not count as activity; just before one, a Sample of the busy
//    slices whose idle window would otherwise end (so each busy slice is sampled once per
//    window). A replay without limits or idle policies feeds no Tick at all.
// Events at one instant: finishes, then MIG acknowledgements, then activity changes, then ticks,
// then arrivals (the trace's, then follow-ups'; see ReplayOptions::follow_up).
// Deterministic: same jobs, cluster, config and seed give the same result, bit for bit
// (except `seconds`). Not thread-safe.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/config.h"
#include "sched/pending_reason.h"
#include "sched/placement/placement.h"
#include "sched/types.h"
#include "sim/activity.h"
#include "sim/cluster.h"
#include "sim/csv.h"

namespace gpuslice::sim {

struct ReplayJob {
  std::string id;
  std::string where;         // "FILE:LINE" or "pod 'name'", for errors; may be empty
  Micros submit = 0;
  Micros duration = 0;
  std::string queue;         // empty: the config's default queue
  std::string user;          // empty: "sim"
  sched::PlacementRequest request;
  std::optional<sched::SliceKind> kind;  // nullopt: chosen by the queue (ToJobRequest)
  double utilisation = -1;   // 0..1 of the held GPU share when known; -1 unknown
  // Recorded activity from the job's start (empty: the constant `utilisation` above). Time
  // past the last run is unknown.
  std::vector<ActivityRun> activity;
  std::uint32_t tag = 0;     // the caller's, handed back in SliceEnd
};

// How a job's slice ended (or why it never had one), for SliceEnd.
enum class EndKind : std::uint8_t {
  kFinished,      // ran its whole duration
  kReclaimed,     // idle reclaim
  kTimeLimit,     // stopped at its time limit
  kPreempted,     // preempted (requeued by the Scheduler: it starts again later)
  kStopped,       // stopped otherwise (device lost, cancelled)
  kRejected,      // could never run as asked
  kNeverStarted,  // still waiting when nothing else could happen
};
std::string_view EndKindName(EndKind k);

// One slice of a job, when it ends (start = -1: the job never started; kRejected or
// kNeverStarted, at the replay's last event).
struct SliceEnd {
  const ReplayJob* job = nullptr;      // the job (valid during the call)
  std::uint32_t tag = 0;
  Micros submit = 0;
  Micros start = -1;
  Micros end = 0;
  bool first = false;        // the job's first slice (start - submit is its queueing delay)
  EndKind how = EndKind::kFinished;
  sched::SliceKind kind = sched::SliceKind::kWhole;
  MilliGpu milli = 0;        // per device
  int devices = 0;
  std::optional<MigPlacement> mig;
  const std::string* model = nullptr;  // the node's GPU model (valid during the call)
};

struct ReplayOptions {
  int samples = 200;                      // points of the allocation / fragmentation time series
  std::uint64_t seed = 1;                 // the Scheduler's seed (random tie-breaks of policies)
  Micros mig_reconfigure_delay = 2 * kSecond;  // ReconfigureMig -> ReconfigureDone, simulated
  bool check_invariants = false;          // tests: Scheduler::CheckInvariants() after every event
  bool reference_placement = false;       // tests, benchmarks: Scheduler::SetReferencePlacement
  // Fill ReplayResult::wait_by_reason (asks the Scheduler every pending job's reason at each
  // instant: O(pending jobs of capped queues) per instant). Asking changes no decision.
  bool wait_reasons = true;
};

// What a caller of RunReplay may follow or add while it runs (the what-if, src/whatif). Both
// are called on the replay's thread.
struct ReplayHooks {
  // Called as each slice ends, and at the end for jobs that never started (SliceEnd).
  std::function<void(const SliceEnd&)> on_slice_end;
  // Called when a job is reclaimed for idleness or stopped at its time limit, with when its
  // slice started: a job it returns is submitted at the returned job's `submit` (at least
  // now), e.g. the owner coming back for the rest of the work.
  std::function<std::optional<ReplayJob>(const ReplayJob& job, Micros started, Micros now, EndKind how)> follow_up;
};

struct ReplaySample {
  Micros time = 0;
  double alloc_pct = 0;      // allocated / capacity
  double frag_pct = 0;       // FGD fragmentation / capacity
  std::int64_t pending = 0;
  std::int64_t running = 0;
};

// With [teams] in the config: one team's figures over a replay (docs/teams.md).
struct TeamReplayFigures {
  std::string team;                // "": the jobs of no team
  MilliGpu guaranteed = 0;         // summed over the team's queues
  double guarantee_pct = 0;        // guaranteed / the cluster's GPUs
  std::int64_t started = 0;        // jobs that started at least once
  std::int64_t never_started = 0;  // still waiting when nothing else could happen
  std::int64_t preempted = 0;      // slices taken back (or preempted otherwise) and requeued
  std::vector<Micros> delays;      // queueing delay of each started job (first start), sorted
  double wait_p50_s = 0, wait_p95_s = 0;
  double gpu_hours_held = 0;       // share x time each slice was held
  double share_pct = 0;            // of the cluster's GPU-hours over [first submit, last event]
};

struct ReplayResult {
  std::string policy;              // the run's name (placement policy, or "config")
  std::int64_t jobs = 0;           // rows in the trace
  std::int64_t cpu_only = 0;       // rows asking for no GPU: not submitted (the scheduler has no CPUs)
  std::int64_t started = 0;        // jobs that started at least once
  std::int64_t rejected = 0;       // Reject decisions (could never run as asked)
  std::int64_t never_started = 0;  // still waiting when nothing else could happen
  std::int64_t follow_ups = 0;     // jobs submitted by ReplayOptions::follow_up (also in `jobs`)
  std::int64_t finished = 0;       // ran to their trace duration
  std::int64_t reclaimed = 0;      // ended by idle reclaim
  std::int64_t reclaimed_on_demand = 0;  // of those: idle past their grace, taken for a waiting job (reclaim = "on-demand")
  std::int64_t time_limited = 0;   // stopped at their time limit
  std::int64_t preempted = 0;      // preempted to drain a GPU for MIG (requeued)
  std::int64_t warnings = 0;       // Warn decisions (idle or time limit)
  std::int64_t reservations = 0;   // Reserve decisions (devices kept for a waiting whole-GPU job)
  std::int64_t reconfigurations = 0;  // MIG layouts applied
  std::int64_t mig_slices = 0;     // slices started on a MIG instance
  std::vector<Micros> delays;      // queueing delay of each started job (first start), sorted
  double delay_p50_s = 0, delay_p95_s = 0, delay_p99_s = 0, delay_mean_s = 0;
  double mean_alloc_pct = 0;       // time-weighted over [first submit, last event]
  double gpu_hours_held = 0;       // share x time each slice was held
  double gpu_hours_used = 0;       // over jobs with known utilisation
  double gpu_hours_held_known = 0; // held by those jobs
  std::vector<ReplaySample> series;
  // Job-time spent pending, by the Scheduler's reason (index of sched::WaitReason, see
  // sched::WaitReasonKindName), up to the last event: each interval between events counts for
  // every job pending in it, under the reason it had after the interval's first event.
  std::array<Micros, sched::kWaitReasonKinds> wait_by_reason{};  // if ReplayOptions::wait_reasons
  std::uint64_t events = 0;        // events fed to the Scheduler
  std::uint64_t decisions = 0;     // decisions it returned
  double seconds = 0;
  std::uint64_t scored = 0;        // placement-only baseline: Score() calls
  std::string invariant_error;     // options.check_invariants: the first violation, if any
  std::uint64_t start_digest = 0;  // FNV-1a over every StartSlice's (job, node, devices), in order
  // With [teams]: the config's teams in order, then the jobs of no team; empty without.
  std::vector<TeamReplayFigures> teams;
};

// A default configuration for a trace without a config file: one queue per queue name in
// `jobs` (and "default", the default queue), each allowing whole (default) and shared slices, placing
// with `policy`, without limits, caps or idle policy — i.e. today's placement plus queueing.
Result<sched::Config> ReplayConfig(std::string_view policy, const std::vector<ReplayJob>& jobs);

// The Scheduler request for a trace row in `queue`: the row's kind where it has one and the
// queue allows it; else the queue's default kind, except that
// several whole GPUs take a whole slice where the queue allows one, and a fraction of a GPU in a
// whole-default queue takes the first allowed of shared, mps, mig (none: it holds one whole
// GPU). Share and GPU memory as given (a mig request sized by memory; none: the queue's default).
// A single allowed model the catalogue knows becomes the request's model; other model lists
// (openb's "V100M16|V100M32", unknown names) are dropped.
sched::JobRequest ToJobRequest(const ReplayJob& job, const sched::QueueConfig& queue);

// Jobs whose queue is not in `config`: an error naming the row and the value, or (skip_bad_rows)
// removed and counted in `skipped` (with the first errors kept).
Status CheckQueues(std::vector<ReplayJob>& jobs, const sched::Config& config, bool skip_bad_rows,
                   SkippedRows& skipped);

// Replays `jobs` (any order; stably sorted by submit time inside) on `cluster` through a
// sched::Scheduler built from `config` (must be valid; every job's queue must exist in it, see
// CheckQueues). `shapes`: the workload for the fragmentation measure (ReplayShapes).
// `progress` (may be empty) gets the fraction done.
ReplayResult RunReplay(const Cluster& cluster, std::vector<ReplayJob> jobs, const sched::Config& config,
                       std::string name, std::span<const sched::WorkloadShape> shapes,
                       const ReplayOptions& options = {}, const std::function<void(double)>& progress = {},
                       const ReplayHooks& hooks = {});

// The workload shapes of replay jobs (by request; CPU, count, share, models), all of them.
std::vector<sched::WorkloadShape> ReplayShapes(const std::vector<ReplayJob>& jobs);

// Nearest-rank percentile of sorted delays, in seconds (0 when empty).
double DelayPercentile(const std::vector<Micros>& sorted, double q);
// Sorts r.delays and fills the delay percentiles and mean from them.
void SummariseDelays(ReplayResult& r);

}  // namespace gpuslice::sim
