#pragma once
// Internal to the scheduler: when each running slice's next timer fires (a time-limit warning or
// stop, the end of its idle window or grace). The scheduler decides what a timer does and when
// it is due (Scheduler::Impl::NextTimer); this part only files the times, so a tick visits the
// slices that are due, at O(due log n) instead of every slice. Not thread-safe (owned by the
// scheduler, like its other books).

#include <climits>
#include <cstddef>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/ids.h"
#include "core/units.h"
#include "sched/node_pool.h"

namespace gpuslice::sched {

class SliceTimers {
 public:
  static constexpr Micros kNever = LLONG_MAX;

  // The slice's next timer is at `at` (kNever: it has none), replacing any earlier one.
  void Set(SliceId slice, Micros at);
  // The slice has no timer any more (it ended).
  void Clear(SliceId slice);

  // When the slice's timer fires; nullopt when it has none.
  std::optional<Micros> At(SliceId slice) const;
  // The earliest timer; kNever when no slice has one.
  Micros NextWakeup() const { return by_time_.empty() ? kNever : by_time_.begin()->first; }
  // The slices whose timers are at or before `now`, in SliceId order (the order a scan over
  // every slice would visit them), into `out` (cleared first).
  void Due(Micros now, std::vector<SliceId>& out) const;
  std::size_t size() const { return at_.size(); }

  // The two books agree (for the scheduler's invariants).
  bool Consistent() const;

 private:
  std::set<std::pair<Micros, SliceId>> by_time_;
  std::unordered_map<SliceId, Micros> at_;  // each slice's key in by_time_
  // A slice's timer moves on most events that touch it: keep the nodes (node_pool.h).
  NodePool<std::set<std::pair<Micros, SliceId>>> by_time_nodes_;
  NodePool<std::unordered_map<SliceId, Micros>> at_nodes_;
};

}  // namespace gpuslice::sched
