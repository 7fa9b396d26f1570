#pragma once
// Internal to the scheduler: the rules on one device that both Scheduler::Impl and its
// placement by host state (by_state_placement.h) apply, kept in one place so the two cannot
// drift apart (a host state's key must show a request what the device itself would).
// Stateless functions; thread-safe.

#include "sched/scheduler.h"

namespace gpuslice::sched {

inline DeviceMode ModeFor(SliceKind kind) {
  switch (kind) {
    case SliceKind::kWhole: return DeviceMode::kWhole;
    case SliceKind::kMig: return DeviceMode::kMig;
    case SliceKind::kMps: return DeviceMode::kMps;
    case SliceKind::kShared: return DeviceMode::kShared;
  }
  return DeviceMode::kFree;
}

inline int MpsLimit(const DeviceView& d) {
  return d.catalogue && d.catalogue->mps_max_clients > 0 ? d.catalogue->mps_max_clients : 48;
}

inline bool Schedulable(const DeviceView& d) {
  return !d.draining && !d.reconfiguring && !d.reserved_for.valid() && !d.admin_drained;
}

// No placement view ever shows the device as usable (ViewOf()): in MIG or whole-GPU mode, or
// not schedulable. Its HostStates key keeps only its model (InertKey()).
inline bool InertForPlacement(const DeviceView& d) {
  return !Schedulable(d) || d.mode == DeviceMode::kMig || d.mode == DeviceMode::kWhole;
}

}  // namespace gpuslice::sched
