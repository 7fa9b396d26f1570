#pragma once
// Internal to the scheduler: the cluster's state. The devices (by node and index), each host's
// device list, the running slices, the placement indexes over the devices (CapacityIndex) and
// what could ever fit, per model (Capacity). A slice is booked on its devices all or nothing
// (TryAllocate: every device holds it by the one rule, CanHold(), or nothing changes) and given
// back exactly (Release). Every change to a device goes through Mutate(), the one place that
// keeps the indexes exact and tells the books kept beside this part: the MIG controller's
// (MigBooks: the devices changing layout, how many are in MIG mode, and the MIG instances in
// use, which the index reads) and placement by host state (the `host_changed` callback: which
// hosts to refile). Callers see the devices only as const. The scheduler decides what happens
// (scheduler_devices.cc); this part keeps the records and answers "could ever fit" without a
// scan. Not thread-safe (owned by one Scheduler, like its other books).

#include <cassert>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/status.h"
#include "sched/capacity_index.h"
#include "sched/device_rules.h"
#include "sched/events.h"
#include "sched/mig_books.h"
#include "sched/node_pool.h"
#include "sched/resolved.h"
#include "sched/views.h"

namespace gpuslice::sched {

// What could ever fit, per model ("" = all models): kept by AddDevice / RemoveDevice.
struct Capacity {
  const DeviceModel* model = nullptr;
  std::multiset<int> host_counts;   // devices per host (hosts with at least one)
  std::multiset<Bytes> memories;    // per device; LLONG_MAX when unknown (not tracked)
  int mig_capable = 0;
};

inline int ModelIndex(const DeviceModel* m) {
  if (!m) return -1;
  return static_cast<int>(m - AllModels().data());
}

class ClusterState {
 public:
  // Told of every change to a host that placement could see (its host state is refiled): a
  // device's room, mode or usability, or (`devices_changed`) a device added or removed.
  using HostChanged = std::function<void(NodeId node, bool devices_changed)>;

  // `mig` outlives this part.
  ClusterState(MigBooks& mig, HostChanged host_changed) : mig_(mig), host_changed_(std::move(host_changed)) {}
  ClusterState(const ClusterState&) = delete;
  ClusterState& operator=(const ClusterState&) = delete;

  // ---- the records
  const std::map<DeviceRef, DeviceView>& devices() const { return devices_; }
  const std::map<SliceId, SliceView>& slices() const { return slices_; }
  // A running slice, to change what is its job's: its timers, activity and report. What it
  // books (devices, share, memory, instance) stays as TryAllocate() set it. nullptr: none.
  SliceView* FindSlice(SliceId id) {
    auto it = slices_.find(id);
    return it == slices_.end() ? nullptr : &it->second;
  }
  const std::map<NodeId, std::set<DeviceIndex>>& nodes() const { return nodes_; }
  const CapacityIndex& index() const { return index_; }
  // By model name; "" = every model.
  const std::map<std::string, Capacity>& capacity() const { return capacity_; }

  // ---- devices come and go
  // Adds the device an agent announced (its catalogue entry, usable memory, MIG mode); false
  // when it is known already (agents re-announce).
  bool AddDevice(const DeviceAdded& e);
  // Forgets a device with no slice on it (the scheduler releases them first).
  void RemoveDevice(const DeviceRef& ref);

  // ---- slices
  // A booked slice: its record and its devices, in the order of SliceView::devices.
  struct Allocation {
    std::map<SliceId, SliceView>::iterator slice;
    std::vector<const DeviceView*> devices;
  };
  // Books a new slice of `r` for r.job on `devices` of `node` (a MIG slice: on instance `mig`
  // of its one device), all or nothing: each device must be present, listed once and hold the
  // slice as it stands (CanHold(), another user's MPS server, a free instance in the layout),
  // else nothing changes and the error names the device. The slice's timer fields are the
  // caller's to set. Whether the devices may be used at all (drains, reservations) is the
  // caller's, as for CanHold().
  Result<Allocation> TryAllocate(const Resolved& r, NodeId node, const std::vector<DeviceIndex>& devices,
                                 const std::optional<MigPlacement>& mig);
  // Gives back what a slice booked on each of its devices (its Allocation's) and forgets the
  // slice: each device is as it was before the slice came, but a device in MIG mode stays so.
  void Release(std::map<SliceId, SliceView>::iterator slice, std::span<const DeviceView* const> devices);

  // ---- every change to a device
  // Applies f(DeviceView&) to `d` (one of devices()) and keeps the index and the books beside
  // it exact. A device that no request can use while it stays so (InertForPlacement: the MIG
  // instances of a device in MIG mode come and go) keeps its host state: its host is not refiled.
  template <typename F>
  void Mutate(const DeviceView& d, F f) {
    // devices_ holds non-const objects; callers are given them const so that they change them
    // only here.
    DeviceView& m = const_cast<DeviceView&>(d);
    const bool was_changing = m.draining || m.reconfiguring;
    const bool was_inert = InertForPlacement(m);
    DeviceFacts facts = Facts(m);
    index_.Remove(m, facts);
    f(m);
    facts.in_use = InUseFact(m);  // of the facts, only these change with what runs there
    index_.Add(m, facts);
    if (!(was_inert && InertForPlacement(m))) host_changed_(m.ref.node, /*devices_changed=*/false);
    if (const bool changing = m.draining || m.reconfiguring; changing != was_changing) mig_.SetChanging(m.ref, changing);
  }
  template <typename F>
  void Mutate(const DeviceRef& ref, F f) {
    Mutate(devices_.at(ref), std::move(f));
  }
  template <typename F>
  void Mutate(DeviceView&& d, F f) = delete;  // a temporary is not one of devices()
  // Within Mutate(): puts `d` in `mode`, counting MIG mode in MigBooks. A device that holds
  // slices keeps its mode (else violation() says which device changed).
  void SetMode(DeviceView& d, DeviceMode mode);

  // What the index knows of `d` beyond its record.
  DeviceFacts Facts(const DeviceView& d) const;

  // "Could ever fit": on the devices present, ignoring what runs now.
  Status Feasible(const Resolved& r) const;

  // The first broken invariant seen (a device changed mode while holding slices); empty: none.
  const std::string& violation() const { return violation_; }

 private:
  // Facts(d).in_use.
  std::span<const MigPlacement> InUseFact(const DeviceView& d) const {
    return d.mode == DeviceMode::kMig ? std::span<const MigPlacement>(mig_.InUse(d)) : std::span<const MigPlacement>();
  }
  void CountCapacity(const DeviceView& d, int delta);
  // `d` holds a new slice of `r` (on instance `mig`) as it stands (TryAllocate's rule).
  bool Holds(const Resolved& r, const DeviceView& d, const std::optional<MigPlacement>& mig) const;

  MigBooks& mig_;
  HostChanged host_changed_;
  std::map<DeviceRef, DeviceView> devices_;
  std::map<NodeId, std::set<DeviceIndex>> nodes_;
  std::map<SliceId, SliceView> slices_;
  std::uint64_t last_slice_ = 0;
  // Nodes of erased slices for the next inserts: a step of a busy cluster ends a job and starts
  // one (node_pool.h).
  NodePool<std::map<SliceId, SliceView>> slice_nodes_;
  CapacityIndex index_;
  std::map<std::string, Capacity> capacity_;
  std::map<NodeId, std::map<std::string, int>> host_model_count_;  // CountCapacity's devices per host and model
  std::string violation_;
};

}  // namespace gpuslice::sched
