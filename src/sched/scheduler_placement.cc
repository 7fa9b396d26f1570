// Placement: the built-in indexed policies and MIG instances; other policies go to the generic
// Filter/Score path (GenericPlacement, generic_placement.h), or, those that score by host state,
// to ByStateEngine (by_state_placement.h).
// Part of Scheduler::Impl (scheduler_impl.h); see scheduler.cc for the order of an event.
#include "sched/scheduler_impl.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "sched/placement/fgd_frag.h"

namespace gpuslice::sched {

// ---------------------------------------------------------------- placement
bool Scheduler::Impl::Takes(const Resolved& r, const DeviceView& d) const {
  return TakesButForMpsUser(r, d) && !MpsServesOther(r, d);
}

bool Scheduler::Impl::TakesButForMpsUser(const Resolved& r, const DeviceView& d) const {
  return Schedulable(d) && CanHold(r, d, RoomOf(d));
}

std::optional<Scheduler::Impl::Choice> Scheduler::Impl::PlaceFractionalFast(const Resolved& r, FastOrder order) {
  const auto& index = r.kind == SliceKind::kMps ? cluster_.index().mps() : cluster_.index().shared();
  auto try_node = [&](NodeId nid) -> std::optional<Choice> {
    for (DeviceIndex di : cluster_.index().FreeOn(nid)) {
      ++stats_.placement_attempts;
      if (Takes(r, cluster_.devices().at({nid, di}))) return Choice{nid, {di}, std::nullopt};
    }
    return std::nullopt;
  };
  // A free device: best-fit takes it from the host with the fewest free devices (keeps whole
  // hosts free for multi-GPU jobs); spread from the host with the most.
  auto from_free = [&]() -> std::optional<Choice> {
    const auto& hosts = cluster_.index().free_by_node();
    if (order == FastOrder::kLoosest) {
      for (auto it = hosts.rbegin(); it != hosts.rend(); ++it)
        if (auto c = try_node(it->second)) return c;
    } else {
      for (const auto& [count, nid] : hosts)
        if (auto c = try_node(nid)) return c;
    }
    return std::nullopt;
  };
  auto at = [](const DeviceRef& ref) { return Choice{ref.node, {ref.index}, std::nullopt}; };
  if (order == FastOrder::kLoosest) {
    if (auto c = from_free()) return c;
    for (auto it = index.rbegin(); it != index.rend() && it->first >= r.milli; ++it) {
      ++stats_.placement_attempts;
      if (Takes(r, cluster_.devices().at(it->second))) return at(it->second);
    }
    return std::nullopt;
  }
  for (auto it = index.lower_bound({r.milli, DeviceRef{}}); it != index.end(); ++it) {
    ++stats_.placement_attempts;
    if (Takes(r, cluster_.devices().at(it->second))) return at(it->second);
  }
  return from_free();
}

std::optional<Scheduler::Impl::Choice> Scheduler::Impl::PlaceWholeFast(const Resolved& r, FastOrder order) {
  auto try_node = [&](NodeId nid) -> std::optional<Choice> {
    ++stats_.placement_attempts;
    Choice c{nid, {}, std::nullopt};
    for (DeviceIndex di : cluster_.index().FreeOn(nid)) {
      if (!ModelOk(r, cluster_.devices().at({nid, di}))) continue;
      c.devices.push_back(di);
      if (static_cast<int>(c.devices.size()) == r.gpus) return c;
    }
    return std::nullopt;
  };
  const auto& hosts = cluster_.index().free_by_node();
  if (order == FastOrder::kLoosest) {
    for (auto it = hosts.rbegin(); it != hosts.rend() && it->first >= r.gpus; ++it)
      if (auto c = try_node(it->second)) return c;
    return std::nullopt;
  }
  for (auto it = hosts.lower_bound({r.gpus, NodeId{}}); it != hosts.end(); ++it)
    if (auto c = try_node(it->second)) return c;
  return std::nullopt;
}

// The GPU view of device `d` for request `r`, as the policy sees it (GenericPlacement;
// ByStateEngine shows the same from a device's HostStates key).
GpuView Scheduler::Impl::ViewOf(const Resolved& r, const DeviceView& d) const {
  const bool ok = Takes(r, d);
  GpuView g;
  g.usable = ok;
  g.free_milli = ok ? kOneGpu - d.used_milli : 0;
  g.free_memory = ok ? std::max<Bytes>(d.memory - d.used_memory, 0) : 0;
  return g;
}

// MIG: a free instance of the smallest fitting profile (lowest device; deterministic).
std::optional<Scheduler::Impl::Choice> Scheduler::Impl::PlaceMig(const Resolved& r) {
  std::optional<std::pair<DeviceRef, MigPlacement>> best;
  for (const auto& [name, cap] : cluster_.capacity()) {
    if (name.empty() || cap.mig_capable == 0 || !cap.model) continue;
    if (!r.model.empty() && name != r.model) continue;
    const MigProfile* p = cap.model->SmallestProfileFor(r.mig_need);
    if (!p) continue;
    ++stats_.placement_attempts;
    auto inst = cluster_.index().FirstFreeInstance(ModelIndex(cap.model), p->id);
    if (inst && (!best || inst->first < best->first)) best = inst;
  }
  if (!best) return std::nullopt;
  return Choice{best->first.node, {best->first.index}, best->second};
}

std::optional<Scheduler::Impl::Choice> Scheduler::Impl::TryPlace(const Resolved& r) {
  if (r.kind == SliceKind::kMig) return PlaceMig(r);
  const QueueVersions::Placement& q = queues_.PlacementOf(r.queue);
  const FastOrder order = q.order;
  // The indexed paths are the plugins of the same name (simple.cc) found without scoring every
  // host; the reference placement asks the plugin itself.
  if (order == FastOrder::kNone || by_state_.reference()) {
    const PlacementPolicy& policy = *q.policy;
    ++stats_.placement_attempts;  // one per decision, by either path
    auto p = by_state_.Serves(policy)
                 ? by_state_.Place(r, policy, cluster_.devices(), workload_, rng_)
                 : generic_.Place(r, policy, cluster_.index(), cluster_.devices(),
                                  [&](const DeviceView& d) { return ViewOf(r, d); }, workload_, rng_);
    if (!p) return std::nullopt;
    return Choice{p->node, std::move(p->devices), std::nullopt};
  }
  if (r.kind == SliceKind::kWhole) return PlaceWholeFast(r, order);
  return PlaceFractionalFast(r, order);
}

}  // namespace gpuslice::sched
