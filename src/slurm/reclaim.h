#pragma once
// Idle reclaim for Slurm jobs as a state machine on injected time: active -> warned ->
// reclaimed. It is fed each job's idle signal (agent::IdleState, from the queue's IdlePolicy)
// once per round and returns decisions as values; the Slurm agent applies them (a warning line
// in the job's output and the log, then scancel or `scontrol requeue`).
//   * idle for the policy's window -> Warn, deadline = now + grace
//   * activity before the deadline -> ActivityResumed (back to active, may be warned again)
//   * still idle at the deadline   -> Reclaim (action kReclaim) — once; or, for queues whose
//     action is "report", nothing more after the warning.
// Requeue instead of cancel for preemptible queues (their jobs are restartable by contract).
// Jobs of partitions that are not policy queues, or whose idle policy is off, never get a
// decision. Not thread-safe (the agent's loop owns it).

#include <map>
#include <string>
#include <vector>

#include "agent/idle.h"
#include "sched/config.h"

namespace gpuslice::slurm {

enum class ReclaimKind { kWarn, kActivityResumed, kCancel, kRequeue };
std::string_view ReclaimKindName(ReclaimKind kind);

struct ReclaimDecision {
  ReclaimKind kind;
  std::string job_id;
  std::string partition;
  Micros idle_for = 0;
  Micros deadline = 0;     // kWarn: when the reclaim happens (0 for report-only queues)
  bool report_only = false;
  friend bool operator==(const ReclaimDecision&, const ReclaimDecision&) = default;
};

class ReclaimTracker {
 public:
  explicit ReclaimTracker(const sched::Config& policy) : policy_(policy) {}

  // One round: the idle state of every running job the agent sees (job id -> partition and
  // state). Jobs absent from `jobs` are forgotten.
  struct JobIdle {
    std::string partition;
    agent::IdleState idle;
  };
  std::vector<ReclaimDecision> Observe(const std::map<std::string, JobIdle>& jobs, Micros now);

  enum class Phase { kActive, kWarned, kReclaimed };
  // kActive for unknown jobs.
  Phase PhaseOf(const std::string& job_id) const;

 private:
  struct Track {
    Phase phase = Phase::kActive;
    Micros deadline = 0;
  };
  sched::Config policy_;
  std::map<std::string, Track> tracks_;
};

}  // namespace gpuslice::slurm
