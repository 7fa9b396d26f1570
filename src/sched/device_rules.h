#pragma once
// Internal to the scheduler: the rules on one device that Scheduler::Impl, its placement engine
// (placement_engine.h) and placement by host state (by_state_placement.h) all apply, kept in one
// place so that they cannot drift apart (a host state's key must show a request what the device
// itself would).
// Stateless functions; thread-safe.

#include <algorithm>

#include "sched/placement/placement.h"
#include "sched/resolved.h"
#include "sched/views.h"

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

// What a device holds, as it is or as it would be once some slices end.
struct Room {
  DeviceMode mode = DeviceMode::kFree;
  MilliGpu used_milli = 0;
  Bytes used_memory = 0;
  int clients = 0;
};

// What a shared / MPS slice of `r` books on a device of `device_memory` usable bytes, and so
// its cap: the memory asked plus one process's CUDA context (what a job asks is what it can
// allocate), or its share of the device's usable memory (contexts included). Shares then add
// up to what the device has.
inline Bytes MemoryCap(const Resolved& r, Bytes device_memory, Bytes context_reserve) {
  if (r.memory > 0) return r.memory + context_reserve;
  return device_memory * r.milli / kOneGpu;
}

// The one rule for a shared or MPS slice of `r` on a device holding `room`: its mode, a free
// share, free memory for what the slice books (MemoryCap) and the MPS client limit. `f` shows
// the device's fixed fields: memory() (usable bytes, 0: not tracked), context_reserve() and
// mps_limit(), each read only once the rule gets to it, as this is the generic placement path's
// test of every device. Read from a DeviceView (DeviceFields, Scheduler::Impl::CanHold) and
// from a HostStates key (ByStateEngine), so both show a request the same device alike. The
// device's model, whether it may be used at all and whose MPS server runs there are the
// callers'.
template <typename Fields>
inline bool RoomHolds(const Resolved& r, const Fields& f, const Room& room) {
  return (room.mode == DeviceMode::kFree || room.mode == ModeFor(r.kind)) && kOneGpu - room.used_milli >= r.milli &&
         !(f.memory() > 0 && f.memory() - room.used_memory < MemoryCap(r, f.memory(), f.context_reserve())) &&
         !(r.kind == SliceKind::kMps && room.clients >= f.mps_limit());
}

// RoomHolds()'s fields of a device.
struct DeviceFields {
  const DeviceView& d;
  Bytes memory() const { return d.memory; }
  Bytes context_reserve() const { return d.context_reserve; }
  int mps_limit() const { return MpsLimit(d); }
};

inline bool ModelOk(const Resolved& r, const DeviceView& d) { return r.model.empty() || d.model == r.model; }

// What a shared / MPS slice of `r` books on `d`.
inline Bytes MemoryCap(const Resolved& r, const DeviceView& d) { return MemoryCap(r, d.memory, d.context_reserve); }

inline Room RoomOf(const DeviceView& d) { return Room{d.mode, d.used_milli, d.used_memory, d.clients}; }

// The one rule for a slice of `r` on `d` holding `room` (RoomHolds()), and the device's model:
// for a whole slice, a free device. Whether the device may be used at all (drains,
// reservations) and whose MPS server runs there are the callers' (placement, pending reasons,
// on-demand reclaim, ClusterState::TryAllocate).
inline bool CanHold(const Resolved& r, const DeviceView& d, const Room& room) {
  return ModelOk(r, d) && RoomHolds(r, DeviceFields{d}, room);
}

// The device runs another user's MPS server (DeviceView::mps_user): an mps slice of `r` cannot
// go there until that user's last mps slice on it ends.
inline bool MpsServesOther(const Resolved& r, const DeviceView& d) {
  return r.kind == SliceKind::kMps && !d.mps_user.empty() && d.mps_user != r.user;
}

// Device `d` takes a slice of `r` now (not MIG) but for its MPS user: it may be used
// (Schedulable), and holds the slice by the one rule (CanHold).
inline bool TakesButForMpsUser(const Resolved& r, const DeviceView& d) {
  return Schedulable(d) && CanHold(r, d, RoomOf(d));
}

// Device `d` takes a slice of `r` now (not MIG): TakesButForMpsUser() and it does not run
// another user's MPS server. What placement, the policies' views and the indexed paths all ask.
inline bool Takes(const Resolved& r, const DeviceView& d) { return TakesButForMpsUser(r, d) && !MpsServesOther(r, d); }

// The GPU view of device `d` for request `r`, as a policy sees it (GenericPlacement;
// ByStateEngine shows the same from a device's HostStates key).
inline GpuView ViewOf(const Resolved& r, const DeviceView& d) {
  const bool ok = Takes(r, d);
  GpuView g;
  g.usable = ok;
  g.free_milli = ok ? kOneGpu - d.used_milli : 0;
  g.free_memory = ok ? std::max<Bytes>(d.memory - d.used_memory, 0) : 0;
  return g;
}

// The memory a (non-MIG) slice holds on one of its devices. A whole slice holds all of each
// device, its own size: booking one figure on every device over-commits the smaller ones when a
// multi-device job spans models (an 80GB H100 and a 40GB A100).
inline Bytes ReservedOn(const SliceView& s, const DeviceView& d) {
  return s.kind == SliceKind::kWhole ? d.memory : s.memory;
}

}  // namespace gpuslice::sched
