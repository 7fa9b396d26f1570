// Placement: the built-in indexed policies, the generic Filter/Score path (placement.h) and
// MIG instances; policies that score by host state go to ByStateEngine (by_state_placement.h).
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
bool Scheduler::Impl::SharedFits(const Resolved& r, const DeviceView& d) const {
  return SharedRoom(r, d) && !MpsServesOther(r, d);
}

bool Scheduler::Impl::SharedRoom(const Resolved& r, const DeviceView& d) const {
  return Schedulable(d) && CanHold(r, d, RoomOf(d));
}

std::optional<Scheduler::Impl::Choice> Scheduler::Impl::PlaceFractionalFast(const Resolved& r, FastOrder order) {
  const auto& index = r.kind == SliceKind::kMps ? cluster_.index().mps() : cluster_.index().shared();
  auto try_node = [&](NodeId nid) -> std::optional<Choice> {
    for (DeviceIndex di : cluster_.index().FreeOn(nid)) {
      ++stats_.placement_attempts;
      if (SharedFits(r, cluster_.devices().at({nid, di}))) return Choice{nid, {di}, std::nullopt};
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
      if (SharedFits(r, cluster_.devices().at(it->second))) return at(it->second);
    }
    return std::nullopt;
  }
  for (auto it = index.lower_bound({r.milli, DeviceRef{}}); it != index.end(); ++it) {
    ++stats_.placement_attempts;
    if (SharedFits(r, cluster_.devices().at(it->second))) return at(it->second);
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

// What a policy is shown of request `r`: the request, and the context (the RNG for ties and
// the learned workload); one more placement attempt counted.
PolicyInput Scheduler::Impl::InputFor(const Resolved& r) {
  ++stats_.placement_attempts;
  return PolicyInputFor(r, rng_, workload_);
}

// Other policies (fgd, gpuslice, ...): Filter/Score over every host, via placement.h.
// Only hosts the indexes say could take the request are shown to the policy: the others would
// fail Fits() anyway, so the choice (scores, lowest-index and seeded random tie-breaks, which
// only count fitting hosts) is the same as over every host, in NodeId order.
std::optional<Scheduler::Impl::Choice> Scheduler::Impl::PlaceGeneric(const Resolved& r, const PlacementPolicy& policy) {
  scratch_gpus_.clear();
  scratch_nodes_.clear();
  scratch_refs_.clear();
  scratch_hosts_.clear();
  for (const auto& [count, nid] : cluster_.index().free_by_node())
    if (r.kind != SliceKind::kWhole || count >= r.gpus) scratch_hosts_.push_back(nid);
  if (r.kind != SliceKind::kWhole) {
    const auto& idx = r.kind == SliceKind::kMps ? cluster_.index().mps() : cluster_.index().shared();
    for (auto it = idx.lower_bound({r.milli, DeviceRef{}}); it != idx.end(); ++it)
      scratch_hosts_.push_back(it->second.node);
  }
  std::sort(scratch_hosts_.begin(), scratch_hosts_.end());
  scratch_hosts_.erase(std::unique(scratch_hosts_.begin(), scratch_hosts_.end()), scratch_hosts_.end());
  // The devices are ordered by (node, index): a host's devices are one run, found with one
  // lookup (the same devices in the same order as the host's list). Reserved for every
  // device so the spans below stay valid while the vector fills.
  scratch_gpus_.reserve(cluster_.devices().size());
  for (NodeId nid : scratch_hosts_) {
    auto it = cluster_.devices().lower_bound(DeviceRef{nid, DeviceIndex(0)});
    const std::size_t pos = scratch_gpus_.size();
    const std::string_view model = it->second.model;
    for (; it != cluster_.devices().end() && it->first.node == nid; ++it) {
      scratch_gpus_.push_back(ViewOf(r, it->second));
      scratch_refs_.push_back(it->first);
    }
    NodeView v;
    v.index = static_cast<std::uint32_t>(scratch_nodes_.size());
    v.model = model;
    v.cpu_milli_free = v.cpu_milli_total = 1 << 30;
    v.memory_free = v.memory_total = Bytes{1} << 50;
    v.gpus = std::span<const GpuView>(scratch_gpus_.data() + pos, scratch_gpus_.size() - pos);
    scratch_nodes_.push_back(v);
  }
  const PolicyInput in = InputFor(r);
  const PlacementRequest& req = in.req;
  const PlacementContext& ctx = in.ctx;
  auto p = Place(policy, req, scratch_nodes_, ctx);
  if (!p) return std::nullopt;
  std::size_t first = 0;
  for (std::uint32_t i = 0; i < p->node_index; ++i) first += scratch_nodes_[i].gpus.size();
  Choice c{scratch_refs_[first].node, {}, std::nullopt};
  for (int g : p->gpu_indices) c.devices.push_back(scratch_refs_[first + g].index);
  std::sort(c.devices.begin(), c.devices.end());
  return c;
}

// The GPU view of device `d` for request `r`, as the policy sees it (PlaceGeneric; ByStateEngine
// shows the same from a device's HostStates key).
GpuView Scheduler::Impl::ViewOf(const Resolved& r, const DeviceView& d) const {
  bool ok = r.kind == SliceKind::kWhole ? (Schedulable(d) && d.mode == DeviceMode::kFree && ModelOk(r, d))
                                        : SharedFits(r, d);
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
  if (order != FastOrder::kNone && by_state_.reference()) return PlaceGeneric(r, *q.policy);
  if (order == FastOrder::kNone) {
    const PlacementPolicy& policy = *q.policy;
    if (by_state_.Serves(policy)) {
      ++stats_.placement_attempts;  // one per decision, as PlaceGeneric's InputFor() counts
      auto p = by_state_.Place(r, policy, cluster_.devices(), workload_, rng_);
      if (!p) return std::nullopt;
      return Choice{p->node, std::move(p->devices), std::nullopt};
    }
    return PlaceGeneric(r, policy);
  }
  if (r.kind == SliceKind::kWhole) return PlaceWholeFast(r, order);
  return PlaceFractionalFast(r, order);
}

}  // namespace gpuslice::sched
