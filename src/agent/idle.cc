#include "agent/idle.h"

namespace gpuslice::agent {

const IdleState& IdleDetector::Observe(const SeriesPoint& p) {
  const devices::Permille threshold = policy_.util_threshold_percent * 10;
  bool active = false;
  std::string basis;
  auto add = [&](const char* s) { basis += basis.empty() ? s : std::string(",") + s; };
  bool blind = false;
  if (policy_.activity.sm_utilisation) {
    if (p.sm_util) { add("sm"); active |= *p.sm_util >= threshold; } else { blind = true; }
  }
  if (policy_.activity.memory_traffic) {
    if (p.mem_util) { add("mem"); active |= *p.mem_util >= threshold; } else { blind = true; }
  }
  if (policy_.activity.process_presence) {
    add("procs");
    active |= p.processes > 0;
  }
  if (blind && p.memory_used) {
    add("memchange");
    if (last_memory_) {
      const Bytes delta = *p.memory_used - *last_memory_;
      active |= delta > kMemoryChangeActivity || -delta > kMemoryChangeActivity;
    }
  }
  if (p.memory_used) last_memory_ = p.memory_used;
  if (!started_ || active) {
    state_.idle_since = p.t;
    started_ = true;
  }
  state_.idle_for = p.t - state_.idle_since;
  state_.idle = !active && state_.idle_for >= policy_.window;
  state_.basis = basis;
  return state_;
}

}  // namespace gpuslice::agent
