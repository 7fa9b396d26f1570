// Placement: the placement engine (placement_engine.h) chooses where a request goes.
// Part of Scheduler::Impl (scheduler_impl.h); see scheduler.cc for the order of an event.
#include "sched/scheduler_impl.h"

#include <optional>

namespace gpuslice::sched {

std::optional<Scheduler::Impl::Choice> Scheduler::Impl::TryPlace(const Resolved& r) {
  if (r.kind == SliceKind::kMig) return PlacementEngine::PlaceMig(r, cluster_, stats_.placement_attempts);
  return placement_.Place(r, queues_.PlacementOf(r.queue), cluster_, rng_, stats_.placement_attempts);
}

}  // namespace gpuslice::sched
