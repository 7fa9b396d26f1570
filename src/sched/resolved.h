#pragma once
// Internal to the scheduler: a job's request resolved against its queue and the catalogue, and
// the key that orders waiting jobs. Not thread-safe, like the scheduler that owns them.

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "sched/views.h"

namespace gpuslice::sched {

// A job's request resolved against its queue and the catalogue.
struct Resolved {
  JobId job;
  SliceKind kind = SliceKind::kShared;
  int gpus = 1;
  MilliGpu milli = 0;   // per device (whole: 1000; shared / mps: share)
  Bytes memory = 0;     // per device cap; 0: proportional share of the device (shared / mps)
  Bytes mig_need = 0;   // mig: memory the instance must have
  std::string model;    // canonical name or empty
  std::string user;
  Micros limit = 0;
  Micros submit = 0;
  const QueueConfig* queue = nullptr;
  int shape = 0;        // jobs with equal shapes fit or fail together (pending-pass memo)
  // mps: the user (a GPU's MPS server serves one user, so two users' mps jobs of one shape do
  // not fit or fail together); empty for the other kinds.
  std::string mps_user;
  int team = -1;  // TeamBooks number; -1: no team (jobs of two teams do not fit or fail together)
  // Cached addresses (std::map nodes are stable) so the hot path avoids tree walks.
  JobView* view = nullptr;
  std::map<SliceId, SliceView>::iterator slice;  // while running
  std::vector<const DeviceView*> devices;        // while running
  auto ShapeKey() const { return std::tie(kind, gpus, milli, memory, mig_need, model, queue, mps_user, team); }
};

struct PendingKey {
  int neg_priority;
  Micros submit;
  JobId job;
  friend auto operator<=>(const PendingKey&, const PendingKey&) = default;
};

// Where a waiting job stands: higher priority first, then earlier submit, then lower id.
inline PendingKey PendingKeyOf(const Resolved& r) { return PendingKey{-r.queue->priority, r.submit, r.job}; }

}  // namespace gpuslice::sched
