#pragma once
// Per-slice idle signal from the queue's policy (sched::IdlePolicy): a sample is *activity* if
// any enabled signal fires — SM utilisation >= threshold, memory traffic >= threshold, or (when
// enabled) any process present. When a signal cannot be measured (e.g. SM utilisation in an
// A100 MIG instance), a change of memory used by more than kMemoryChangeActivity also counts as
// activity, so a slice is not called idle just because the driver is blind. Idle = no activity
// for the policy's window. This is a signal for metrics and the Slurm agent; the scheduler
// runs its own warn/reclaim state machine from Sample events. Value type; not thread-safe.

#include <optional>
#include <string>

#include "agent/series.h"
#include "sched/config.h"

namespace gpuslice::agent {

inline constexpr Bytes kMemoryChangeActivity = 64 * kMiB;

struct IdleState {
  bool idle = false;        // idle for at least policy.window
  Micros idle_since = 0;    // time of the last activity (or of the first sample)
  Micros idle_for = 0;      // now - idle_since
  std::string basis;        // which signals were measurable: e.g. "sm,mem,procs"
};

class IdleDetector {
 public:
  explicit IdleDetector(sched::IdlePolicy policy) : policy_(policy) {}
  // Points must come in time order.
  const IdleState& Observe(const SeriesPoint& p);
  const IdleState& state() const { return state_; }
  const sched::IdlePolicy& policy() const { return policy_; }

 private:
  sched::IdlePolicy policy_;
  IdleState state_;
  bool started_ = false;
  std::optional<Bytes> last_memory_;
};

}  // namespace gpuslice::agent
