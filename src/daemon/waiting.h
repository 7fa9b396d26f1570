#pragma once
// Where a pending job stands, for the people who wait: its place in its queue and, where the
// running jobs' limits can tell, the time by which what holds it back is gone at the latest.
// Read from the scheduler's public views only (Pending, PendingReason, slices, devices); the
// scheduler's own rules decide the start. Pure functions of those views; thread-compatible
// (the daemon calls them under its lock).

#include <map>
#include <optional>

#include "core/ids.h"
#include "core/units.h"
#include "sched/scheduler.h"

namespace gpuslice::daemon {

struct QueuePlace {
  int position = 0;  // 1: considered first in its queue
  int length = 0;    // pending jobs in the queue
  bool first = false;  // every job considered before it (all queues) could never fit anyway
};

// The place of every pending job (O(pending)).
std::map<JobId, QueuePlace> QueuePlaces(const sched::Scheduler& s);

// An upper bound on when `reason` stops holding pending `job` back: the time limits (and
// standing idle-reclaim deadlines) of the running slices in the way say they end by then. None
// where that cannot be told: a slice in the way has no limit, the reason is a MIG layout, a
// reservation for another job or a request that never fits. It is a bound on the wait for
// room, not a promise of the start: jobs ahead may take the room first (callers show it only
// for a job considered first, QueuePlace::first).
std::optional<Micros> WaitEndsBy(const sched::Scheduler& s, const sched::WaitReason& reason);

}  // namespace gpuslice::daemon
