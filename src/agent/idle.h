#pragma once
// Per-slice idle signal from the queue's policy (sched::IdlePolicy), by the scheduler's own rule
// (sched::ClassifySample): per signal active, idle or unknown; any enabled signal active is
// activity; a signal measured idle is evidence of idleness; when no signal is usable the
// slice is *unmeasured* and never idle, however long that lasts. Memory used changing by more
// than kMemoryChangeActivity counts only when neither GPU utilisation figure can be measured
// (e.g. SM utilisation of an A100 MIG instance). Idle = measured idle, without activity, for
// the policy's window; an unmeasured stretch restarts the count. This is a signal for metrics
// and the Slurm agent; the scheduler runs its own warn/reclaim state machine from the same
// verdicts in Sample events. Value type; not thread-safe.

#include <optional>
#include <string>

#include "agent/series.h"
#include "sched/config.h"
#include "sched/events.h"

namespace gpuslice::agent {

inline constexpr Bytes kMemoryChangeActivity = 64 * kMiB;

struct IdleState {
  bool idle = false;         // measured idle for at least policy.window
  bool unmeasured = false;   // the last sample had no usable signal
  Micros idle_since = 0;     // time of the last activity (or of the first measured sample)
  Micros idle_for = 0;       // now - idle_since (0 while unmeasured)
  sched::Activity activity = sched::Activity::kUnknown;  // the last sample's verdict
  std::string basis;         // which signals decided it: e.g. "sm,mem"; empty when unmeasured
};

// The memory-used-change signal between two samples: active when it moved by more than
// kMemoryChangeActivity, else unknown (steady memory is not evidence of idleness).
sched::Activity MemoryChange(std::optional<Bytes> before, std::optional<Bytes> now);

class IdleDetector {
 public:
  explicit IdleDetector(sched::IdlePolicy policy) : policy_(policy) {}
  // Samples must come in time order.
  const IdleState& Observe(Micros t, const sched::SliceSample& s);
  // Convenience for a series point (its memory change is taken against the previous point).
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
