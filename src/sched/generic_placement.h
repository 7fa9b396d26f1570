#pragma once
// Internal to the scheduler: the generic Filter/Score path, one owned part of Scheduler::Impl.
// For a policy that ByStateEngine does not serve (by_state_placement.h), and for every policy in
// reference mode, it shows Place() (placement.h) the hosts the capacity index says could take
// the request, in NodeId order, each with all its GPUs as the request sees them. The others
// would fail Fits() anyway, so the choice (scores, lowest-index and seeded random tie-breaks,
// which only count fitting hosts) and the draws from the RNG are those of Place() over every
// host. It keeps the views between calls so that a decision allocates nothing once warm.
// Not thread-safe (owned by one Scheduler).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "core/ids.h"
#include "sched/by_state_placement.h"
#include "sched/capacity_index.h"
#include "sched/placement/placement.h"
#include "sched/resolved.h"
#include "sched/views.h"
#include "sched/workload_model.h"

namespace gpuslice::sched {

class GenericPlacement {
 public:
  using Pick = ByStateEngine::Pick;  // a host and the devices chosen on it (sorted)

  // `policy`'s choice for `r` (not a MIG request): `index` and `devices` are the scheduler's
  // (devices ordered by (node, index)), view_of(d) the GpuView of device `d` that `r` is shown;
  // `workload`: what `policy` scores against. The caller counts the attempt.
  template <typename ViewOf>
  std::optional<Pick> Place(const Resolved& r, const PlacementPolicy& policy, const CapacityIndex& index,
                            const std::map<DeviceRef, DeviceView>& devices, const ViewOf& view_of,
                            WorkloadModel& workload, std::mt19937_64& rng);

 private:
  // The hosts that could take `r`, in NodeId order: with enough free devices (whole), or with a
  // free device or one of enough share left (shared, MPS).
  void FindHosts(const Resolved& r, const CapacityIndex& index);

  std::vector<NodeId> hosts_;     // FindHosts()
  std::vector<GpuView> gpus_;     // the GPUs of hosts_, host by host
  std::vector<DeviceRef> refs_;   // the device of each of gpus_
  std::vector<NodeView> nodes_;   // one per host of hosts_, its GPUs a span of gpus_
};

inline void GenericPlacement::FindHosts(const Resolved& r, const CapacityIndex& index) {
  hosts_.clear();
  for (const auto& [count, nid] : index.free_by_node())
    if (r.kind != SliceKind::kWhole || count >= r.gpus) hosts_.push_back(nid);
  if (r.kind != SliceKind::kWhole) {
    const auto& idx = r.kind == SliceKind::kMps ? index.mps() : index.shared();
    for (auto it = idx.lower_bound({r.milli, DeviceRef{}}); it != idx.end(); ++it) hosts_.push_back(it->second.node);
  }
  std::sort(hosts_.begin(), hosts_.end());
  hosts_.erase(std::unique(hosts_.begin(), hosts_.end()), hosts_.end());
}

template <typename ViewOf>
std::optional<GenericPlacement::Pick> GenericPlacement::Place(const Resolved& r, const PlacementPolicy& policy,
                                                              const CapacityIndex& index,
                                                              const std::map<DeviceRef, DeviceView>& devices,
                                                              const ViewOf& view_of, WorkloadModel& workload,
                                                              std::mt19937_64& rng) {
  gpus_.clear();
  nodes_.clear();
  refs_.clear();
  FindHosts(r, index);
  // `devices` is ordered by (node, index): a host's devices are one run, found with one
  // lookup. Reserved for every device so the spans below stay valid while the vector fills.
  gpus_.reserve(devices.size());
  for (NodeId nid : hosts_) {
    auto it = devices.lower_bound(DeviceRef{nid, DeviceIndex(0)});
    const std::size_t pos = gpus_.size();
    const std::string_view model = it->second.model;
    for (; it != devices.end() && it->first.node == nid; ++it) {
      gpus_.push_back(view_of(it->second));
      refs_.push_back(it->first);
    }
    NodeView v;
    v.index = static_cast<std::uint32_t>(nodes_.size());
    v.model = model;
    v.cpu_milli_free = v.cpu_milli_total = 1 << 30;
    v.memory_free = v.memory_total = Bytes{1} << 50;
    v.gpus = std::span<const GpuView>(gpus_.data() + pos, gpus_.size() - pos);
    nodes_.push_back(v);
  }
  const PolicyInput in = PolicyInputFor(r, rng, workload);
  auto p = sched::Place(policy, in.req, nodes_, in.ctx);
  if (!p) return std::nullopt;
  std::size_t first = 0;
  for (std::uint32_t i = 0; i < p->node_index; ++i) first += nodes_[i].gpus.size();
  Pick pick{refs_[first].node, {}};
  for (int g : p->gpu_indices) pick.devices.push_back(refs_[first + g].index);
  std::sort(pick.devices.begin(), pick.devices.end());
  return pick;
}

}  // namespace gpuslice::sched
