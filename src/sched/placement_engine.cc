// The placement engine (placement_engine.h): the indexed paths, MIG instances, and the routing
// of other requests to placement by host state or the generic path.
#include "sched/placement_engine.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "sched/device_rules.h"

namespace gpuslice::sched {
namespace {

// Best-fit / packing (kTightest) and spread (kLoosest) for a shared or MPS slice.
std::optional<PlacementChoice> PlaceFractionalFast(const Resolved& r, FastOrder order, const ClusterState& cluster,
                                                   std::uint64_t& attempts) {
  const auto& index = r.kind == SliceKind::kMps ? cluster.index().mps() : cluster.index().shared();
  auto try_node = [&](NodeId nid) -> std::optional<PlacementChoice> {
    for (DeviceIndex di : cluster.index().FreeOn(nid)) {
      ++attempts;
      if (Takes(r, cluster.devices().at({nid, di}))) return PlacementChoice{nid, {di}, std::nullopt};
    }
    return std::nullopt;
  };
  // A free device: best-fit takes it from the host with the fewest free devices (keeps whole
  // hosts free for multi-GPU jobs); spread from the host with the most.
  auto from_free = [&]() -> std::optional<PlacementChoice> {
    const auto& hosts = cluster.index().free_by_node();
    if (order == FastOrder::kLoosest) {
      for (auto it = hosts.rbegin(); it != hosts.rend(); ++it)
        if (auto c = try_node(it->second)) return c;
    } else {
      for (const auto& [count, nid] : hosts)
        if (auto c = try_node(nid)) return c;
    }
    return std::nullopt;
  };
  auto at = [](const DeviceRef& ref) { return PlacementChoice{ref.node, {ref.index}, std::nullopt}; };
  if (order == FastOrder::kLoosest) {
    if (auto c = from_free()) return c;
    for (auto it = index.rbegin(); it != index.rend() && it->first >= r.milli; ++it) {
      ++attempts;
      if (Takes(r, cluster.devices().at(it->second))) return at(it->second);
    }
    return std::nullopt;
  }
  for (auto it = index.lower_bound({r.milli, DeviceRef{}}); it != index.end(); ++it) {
    ++attempts;
    if (Takes(r, cluster.devices().at(it->second))) return at(it->second);
  }
  return from_free();
}

// The same for a whole-GPU slice: a host with enough free devices of the model.
std::optional<PlacementChoice> PlaceWholeFast(const Resolved& r, FastOrder order, const ClusterState& cluster,
                                              std::uint64_t& attempts) {
  auto try_node = [&](NodeId nid) -> std::optional<PlacementChoice> {
    ++attempts;
    PlacementChoice c{nid, {}, std::nullopt};
    for (DeviceIndex di : cluster.index().FreeOn(nid)) {
      if (!ModelOk(r, cluster.devices().at({nid, di}))) continue;
      c.devices.push_back(di);
      if (static_cast<int>(c.devices.size()) == r.gpus) return c;
    }
    return std::nullopt;
  };
  const auto& hosts = cluster.index().free_by_node();
  if (order == FastOrder::kLoosest) {
    for (auto it = hosts.rbegin(); it != hosts.rend() && it->first >= r.gpus; ++it)
      if (auto c = try_node(it->second)) return c;
    return std::nullopt;
  }
  for (auto it = hosts.lower_bound({r.gpus, NodeId{}}); it != hosts.end(); ++it)
    if (auto c = try_node(it->second)) return c;
  return std::nullopt;
}

}  // namespace

std::optional<PlacementChoice> PlacementEngine::Place(const Resolved& r, const QueueVersions::Placement& q,
                                                      const ClusterState& cluster, std::mt19937_64& rng,
                                                      std::uint64_t& attempts) {
  const FastOrder order = q.order;
  // The indexed paths are the plugins of the same name (simple.cc) found without scoring every
  // host; the reference placement asks the plugin itself.
  if (order == FastOrder::kNone || by_state_.reference()) {
    const PlacementPolicy& policy = *q.policy;
    ++attempts;  // one per decision, by either path
    auto p = by_state_.Serves(policy)
                 ? by_state_.Place(r, policy, cluster.devices(), workload_, rng)
                 : generic_.Place(r, policy, cluster.index(), cluster.devices(),
                                  [&](const DeviceView& d) { return ViewOf(r, d); }, workload_, rng);
    if (!p) return std::nullopt;
    return PlacementChoice{p->node, std::move(p->devices), std::nullopt};
  }
  if (r.kind == SliceKind::kWhole) return PlaceWholeFast(r, order, cluster, attempts);
  return PlaceFractionalFast(r, order, cluster, attempts);
}

std::optional<PlacementChoice> PlacementEngine::PlaceMig(const Resolved& r, const ClusterState& cluster,
                                                         std::uint64_t& attempts) {
  std::optional<std::pair<DeviceRef, MigPlacement>> best;
  for (const auto& [name, cap] : cluster.capacity()) {
    if (name.empty() || cap.mig_capable == 0 || !cap.model) continue;
    if (!r.model.empty() && name != r.model) continue;
    const MigProfile* p = cap.model->SmallestProfileFor(r.mig_need);
    if (!p) continue;
    ++attempts;
    auto inst = cluster.index().FirstFreeInstance(ModelIndex(cap.model), p->id);
    if (inst && (!best || inst->first < best->first)) best = inst;
  }
  if (!best) return std::nullopt;
  return PlacementChoice{best->first.node, {best->first.index}, best->second};
}

void PlacementEngine::UsePolicy(const PlacementPolicy* policy, const ClusterState& cluster) {
  if (!policy || !policy->ScoresByNodeState() || by_state_.on()) return;
  by_state_.TurnOn();
  // While off it filed no host (ByStateEngine::MarkDirty()).
  for (const auto& [node, devices] : cluster.nodes()) by_state_.MarkDirty(node, /*devices_changed=*/true);
}

}  // namespace gpuslice::sched
