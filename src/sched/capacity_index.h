#pragma once
// Internal to the scheduler: incremental indexes over devices that make the built-in placement
// policies and MIG planning O(log n) per decision instead of a scan of every host.
// Each index entry is a pure function of one device's record (DeviceView + DeviceFacts), so
// Remove(d) before a change and Add(d) after keeps them exact; the scheduler's
// CheckInvariants() rebuilds a fresh index from the records and compares.
// Not thread-safe (owned by one Scheduler).

#include <map>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "core/catalogue.h"
#include "sched/node_pool.h"
#include "sched/views.h"

namespace gpuslice::sched {

// What the index needs to know about a device beyond its view.
struct DeviceFacts {
  const DeviceModel* model = nullptr;
  int model_idx = -1;    // position in AllModels(); -1 if unknown
  int mps_limit = 48;
  // MIG instances with a slice on them: a view of the scheduler's books, valid for the call
  // that is given these facts (the books change with the device).
  std::span<const MigPlacement> in_use;
};

class CapacityIndex {
 public:
  void Add(const DeviceView& d, const DeviceFacts& f);
  void Remove(const DeviceView& d, const DeviceFacts& f);

  // (free device count, node) for hosts with at least one schedulable free device.
  const std::set<std::pair<int, NodeId>>& free_by_node() const { return free_by_node_; }
  const std::set<DeviceIndex>& FreeOn(NodeId node) const;
  // (free share, device) for schedulable shared / MPS devices with share left.
  const std::set<std::pair<MilliGpu, DeviceRef>>& shared() const { return shared_; }
  const std::set<std::pair<MilliGpu, DeviceRef>>& mps() const { return mps_; }
  // The first free MIG instance of `profile_id` on a model (lowest device, then start).
  std::optional<std::pair<DeviceRef, MigPlacement>> FirstFreeInstance(int model_idx, int profile_id) const;
  // Up to `k` MIG-mode devices of the model where `profile_id` fits beside the instances in use
  // (after a re-layout of the free ones) and no free instance of it exists.
  std::vector<DeviceRef> RelayoutCandidates(int model_idx, int profile_id, int k) const;
  // The first empty, schedulable, MIG-capable device of the model not in MIG mode.
  std::optional<DeviceRef> FirstMigCapableFree(int model_idx) const;
  // Schedulable MIG-capable devices in another mode with slices (would need a drain).
  const std::set<DeviceRef>& mig_capable_busy() const { return mig_busy_; }

  bool operator==(const CapacityIndex& o) const;
  // Starts this index with another's memo (a pure cache), so a rebuild for checking is cheap.
  void ShareMemo(const CapacityIndex& o) { placeable_memo_ = o.placeable_memo_; }

 private:
  // Devices no new slice may take: changing MIG layout, reserved for a waiting job, or drained
  // by an admin.
  static bool Excluded(const DeviceView& d) {
    return d.draining || d.reconfiguring || d.reserved_for.valid() || d.admin_drained;
  }
  // Calls on_instance((model, profile, dev, start)) for each free MIG instance of `d` and
  // on_relayout((model, profile, dev)) for each profile that fits beside its instances in use
  // after a re-layout and has no free instance there (no allocation once warm).
  template <typename OnInstance, typename OnRelayout>
  void ForEachMigEntry(const DeviceView& d, const DeviceFacts& f, OnInstance on_instance,
                       OnRelayout on_relayout) const;
  const std::vector<int>& PlaceableBeside(const DeviceFacts& f) const;

  std::map<NodeId, std::set<DeviceIndex>> free_;
  std::set<std::pair<int, NodeId>> free_by_node_;
  std::set<std::pair<MilliGpu, DeviceRef>> shared_;
  std::set<std::pair<MilliGpu, DeviceRef>> mps_;
  std::set<std::tuple<int, int, DeviceRef, int>> free_instances_;
  std::set<std::tuple<int, int, DeviceRef>> relayout_;
  std::set<std::pair<int, DeviceRef>> mig_free_;
  std::set<DeviceRef> mig_busy_;
  // Nodes of erased entries for the next inserts, per kind of set: a device change is a
  // Remove() then an Add(), mostly of the same sets, so it allocates nothing. Not part of
  // equality.
  struct Pools {
    NodePool<std::set<DeviceIndex>> free;
    NodePool<std::set<std::pair<int, NodeId>>> free_by_node;
    NodePool<std::set<std::pair<MilliGpu, DeviceRef>>> share;  // shared_ and mps_
    NodePool<std::set<std::tuple<int, int, DeviceRef, int>>, 8> free_instance;  // a GPU has <= 7
    NodePool<std::set<std::tuple<int, int, DeviceRef>>, 8> relayout;
    NodePool<std::set<std::pair<int, DeviceRef>>> mig_free;
    NodePool<std::set<DeviceRef>> mig_busy;
  };
  Pools pools_;
  // Memo: (model, in-use layout) -> profiles that fit beside it. Not part of equality.
  mutable std::map<std::vector<int>, std::vector<int>> placeable_memo_;
  mutable std::vector<int> scratch_key_;  // PlaceableBeside()'s key
  mutable std::vector<int> scratch_free_profiles_;  // ForEachMigEntry()
};

}  // namespace gpuslice::sched
