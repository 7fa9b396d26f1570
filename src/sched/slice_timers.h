#pragma once
// Internal to the scheduler: the books of its timers. When each running slice's next timer fires
// (a time-limit warning or stop, the end of its idle window or grace), and the slices whose idle
// timers have run out in an on-demand queue (IdleState::kReclaimable: they run on until a waiting
// job needs their room). The scheduler decides what a timer does and when it is due
// (Scheduler::Impl::NextTimer); this part only files the times, so a tick visits the slices that
// are due, at O(due log n) instead of every slice, and on-demand reclaim looks at the
// reclaimable slices only. Not thread-safe (owned by the scheduler, like its other books).

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
  // The slice has no timer any more.
  void Clear(SliceId slice);
  // The slice ended: no timer, not reclaimable.
  void Ended(SliceId slice) {
    Clear(slice);
    reclaimable_.erase(slice);
  }

  // When the slice's timer fires; nullopt when it has none.
  std::optional<Micros> At(SliceId slice) const;
  // The earliest timer; kNever when no slice has one.
  Micros NextWakeup() const { return by_time_.empty() ? kNever : by_time_.begin()->first; }
  // The slices whose timers are at or before `now`, in SliceId order (the order a scan over
  // every slice would visit them). Valid until the next call: Set() and Clear() while visiting
  // them leave it as it is.
  const std::vector<SliceId>& Due(Micros now);
  std::size_t size() const { return at_.size(); }

  // ---- slices reclaimable on demand, in SliceId order
  // The slice became reclaimable (NewlyReclaimable() says so until asked).
  void SetReclaimable(SliceId slice) {
    reclaimable_.insert(slice);
    newly_reclaimable_ = true;
  }
  // It is not any more (busy again, no longer measured, or its queue's idle rule changed).
  void ClearReclaimable(SliceId slice) { reclaimable_.erase(slice); }
  const std::set<SliceId>& reclaimable() const { return reclaimable_; }
  // Whether a slice became reclaimable since the last call: a tick then serves waiting jobs
  // (the room they wait for may now be theirs).
  bool NewlyReclaimable() { return std::exchange(newly_reclaimable_, false); }

  // The two books agree (for the scheduler's invariants).
  bool Consistent() const;

 private:
  std::set<std::pair<Micros, SliceId>> by_time_;
  std::unordered_map<SliceId, Micros> at_;  // each slice's key in by_time_
  // A slice's timer moves on most events that touch it: keep the nodes (node_pool.h).
  NodePool<std::set<std::pair<Micros, SliceId>>> by_time_nodes_;
  NodePool<std::unordered_map<SliceId, Micros>> at_nodes_;
  std::vector<SliceId> due_;  // Due()'s answer, reused
  std::set<SliceId> reclaimable_;
  bool newly_reclaimable_ = false;
};

}  // namespace gpuslice::sched
