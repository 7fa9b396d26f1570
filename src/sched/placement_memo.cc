#include "sched/placement_memo.h"

#include <algorithm>

namespace gpuslice::sched {

int PlacementMemo::ShapeOf(const Resolved& r) {
  if (shape_of_.size() <= static_cast<std::size_t>(r.shape)) shape_of_.resize(r.shape + 1, -1);
  int& of = shape_of_[r.shape];
  if (of < 0) {
    of = shapes_.try_emplace(ShapeKey(r.kind, r.gpus, r.milli, r.memory, r.mig_need, r.model, r.queue),
                             static_cast<int>(shapes_.size()))
             .first->second;
  }
  return of;
}

PlacementMemo::Ticket PlacementMemo::Select(const Resolved& r, const PlacementPolicy& policy,
                                            std::uint64_t workload_version) {
  if (workload_ != workload_version) {
    workload_ = workload_version;
    for (Slot& slot : slots_) slot = Slot{};
  }
  ++clock_;
  const int shape = ShapeOf(r);
  if (slot_of_shape_.size() <= static_cast<std::size_t>(shape)) slot_of_shape_.resize(shape + 1, -1);
  int& of_shape = slot_of_shape_[shape];
  if (of_shape >= 0) {
    Slot& slot = slots_[of_shape];
    if (slot.generation != 0 && slot.shape == shape && slot.policy == &policy) {
      slot.used = clock_;
      current_ = Ticket{of_shape, slot.generation};
      return current_;
    }
  }
  int victim = 0;
  for (int i = 1; i < HostStates::kMemoSlots; ++i) {
    if (slots_[i].used < slots_[victim].used) victim = i;
  }
  of_shape = victim;
  Slot& slot = slots_[victim];
  slot.shape = shape;
  slot.policy = &policy;
  slot.generation = ++generations_;
  slot.used = clock_;
  current_ = Ticket{victim, slot.generation};
  oldest_live_ = slot.generation;
  for (const Slot& other : slots_) {
    if (other.generation != 0) oldest_live_ = std::min(oldest_live_, other.generation);
  }
  return current_;
}

}  // namespace gpuslice::sched
