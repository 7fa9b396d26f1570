#include "agent/idle.h"

#include "sched/scheduler.h"

namespace gpuslice::agent {

sched::Activity MemoryChange(std::optional<Bytes> before, std::optional<Bytes> now) {
  if (!before || !now) return sched::Activity::kUnknown;
  const Bytes delta = *now - *before;
  // Steady memory is no evidence of idleness (a training loop keeps its allocations).
  return delta > kMemoryChangeActivity || -delta > kMemoryChangeActivity ? sched::Activity::kActive
                                                                         : sched::Activity::kUnknown;
}

const IdleState& IdleDetector::Observe(Micros t, const sched::SliceSample& s) {
  const sched::SampleVerdict v = sched::ClassifySample(policy_, s);
  state_.activity = v.activity;
  state_.basis = v.basis;
  if (v.activity == sched::Activity::kUnknown) {
    // Unknown is not idle: nothing counts towards the window while blind.
    state_.unmeasured = true;
    state_.idle = false;
    state_.idle_for = 0;
    return state_;
  }
  if (!started_ || state_.unmeasured || v.activity == sched::Activity::kActive) state_.idle_since = t;
  started_ = true;
  state_.unmeasured = false;
  state_.idle_for = t - state_.idle_since;
  state_.idle = v.activity == sched::Activity::kIdle && state_.idle_for >= policy_.window;
  return state_;
}

const IdleState& IdleDetector::Observe(const SeriesPoint& p) {
  sched::SliceSample s;
  s.sm_known = p.sm_util.has_value();
  s.sm_percent = p.sm_util ? (*p.sm_util + 5) / 10 : 0;
  s.memory_known = p.mem_util.has_value();
  s.memory_percent = p.mem_util ? (*p.mem_util + 5) / 10 : 0;
  s.processes = p.processes;
  s.memory_change = MemoryChange(last_memory_, p.memory_used);
  if (p.memory_used) last_memory_ = p.memory_used;
  return Observe(p.t, s);
}

}  // namespace gpuslice::agent
