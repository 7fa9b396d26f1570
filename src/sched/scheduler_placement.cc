// Placement: the built-in indexed policies, the generic Filter/Score path (placement.h), the
// per-host-state path (host_states.h) and MIG instances.
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
  const auto& index = r.kind == SliceKind::kMps ? index_.mps() : index_.shared();
  auto try_node = [&](NodeId nid) -> std::optional<Choice> {
    for (DeviceIndex di : index_.FreeOn(nid)) {
      ++stats_.placement_attempts;
      if (SharedFits(r, devices_.at({nid, di}))) return Choice{nid, {di}, std::nullopt};
    }
    return std::nullopt;
  };
  // A free device: best-fit takes it from the host with the fewest free devices (keeps whole
  // hosts free for multi-GPU jobs); spread from the host with the most.
  auto from_free = [&]() -> std::optional<Choice> {
    const auto& hosts = index_.free_by_node();
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
      if (SharedFits(r, devices_.at(it->second))) return at(it->second);
    }
    return std::nullopt;
  }
  for (auto it = index.lower_bound({r.milli, DeviceRef{}}); it != index.end(); ++it) {
    ++stats_.placement_attempts;
    if (SharedFits(r, devices_.at(it->second))) return at(it->second);
  }
  return from_free();
}

std::optional<Scheduler::Impl::Choice> Scheduler::Impl::PlaceWholeFast(const Resolved& r, FastOrder order) {
  auto try_node = [&](NodeId nid) -> std::optional<Choice> {
    ++stats_.placement_attempts;
    Choice c{nid, {}, std::nullopt};
    for (DeviceIndex di : index_.FreeOn(nid)) {
      if (!ModelOk(r, devices_.at({nid, di}))) continue;
      c.devices.push_back(di);
      if (static_cast<int>(c.devices.size()) == r.gpus) return c;
    }
    return std::nullopt;
  };
  const auto& hosts = index_.free_by_node();
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
Scheduler::Impl::PolicyInput Scheduler::Impl::InputFor(const Resolved& r) {
  PolicyInput in;
  in.req.num_gpus = r.gpus;
  in.req.milli_per_gpu = r.milli;
  in.ctx.rng = &rng_;
  in.ctx.workload = workload_.Shapes();
  ++stats_.placement_attempts;
  return in;
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
  for (const auto& [count, nid] : index_.free_by_node())
    if (r.kind != SliceKind::kWhole || count >= r.gpus) scratch_hosts_.push_back(nid);
  if (r.kind != SliceKind::kWhole) {
    const auto& idx = r.kind == SliceKind::kMps ? index_.mps() : index_.shared();
    for (auto it = idx.lower_bound({r.milli, DeviceRef{}}); it != idx.end(); ++it)
      scratch_hosts_.push_back(it->second.node);
  }
  std::sort(scratch_hosts_.begin(), scratch_hosts_.end());
  scratch_hosts_.erase(std::unique(scratch_hosts_.begin(), scratch_hosts_.end()), scratch_hosts_.end());
  // devices_ is ordered by (node, index): a host's devices are one run, found with one
  // lookup (the same devices in the same order as nodes_ lists them). Reserved for every
  // device so the spans below stay valid while the vector fills.
  scratch_gpus_.reserve(devices_.size());
  for (NodeId nid : scratch_hosts_) {
    auto it = devices_.lower_bound(DeviceRef{nid, DeviceIndex(0)});
    const std::size_t pos = scratch_gpus_.size();
    const std::string_view model = it->second.model;
    for (; it != devices_.end() && it->first.node == nid; ++it) {
      const DeviceView& d = it->second;
      bool ok = r.kind == SliceKind::kWhole
                    ? (Schedulable(d) && d.mode == DeviceMode::kFree && ModelOk(r, d))
                    : SharedFits(r, d);
      GpuView g;
      g.usable = ok;
      g.free_milli = ok ? kOneGpu - d.used_milli : 0;
      g.free_memory = ok ? std::max<Bytes>(d.memory - d.used_memory, 0) : 0;
      scratch_gpus_.push_back(g);
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

// The GPU view of device `d` for request `r`, as the policy sees it (PlaceGeneric, PlaceByState).
GpuView Scheduler::Impl::ViewOf(const Resolved& r, const DeviceView& d) const {
  bool ok = r.kind == SliceKind::kWhole ? (Schedulable(d) && d.mode == DeviceMode::kFree && ModelOk(r, d))
                                        : SharedFits(r, d);
  GpuView g;
  g.usable = ok;
  g.free_milli = ok ? kOneGpu - d.used_milli : 0;
  g.free_memory = ok ? std::max<Bytes>(d.memory - d.used_memory, 0) : 0;
  return g;
}

// ViewOf() from a device's HostStates key (RefileHost() below), without reading the device:
// the same rules, on the key's copies of the fields they read. `model`: HostStates'
// id of r.model, kAnyModel when empty, -1 when no device has that model; `user`: HostStates'
// id of r.user (-1: none, so every MPS user is another).
inline GpuView Scheduler::Impl::ViewOfKey(const Resolved& r, int model, int user, const DeviceStateKey& k) {
  bool ok = k.schedulable && (model == kAnyModel || k.model == model);
  const auto mode = static_cast<DeviceMode>(k.mode);
  if (ok && r.kind == SliceKind::kWhole) {
    ok = mode == DeviceMode::kFree;
  } else if (ok) {  // SharedFits()
    ok = (mode == DeviceMode::kFree || mode == ModeFor(r.kind)) && kOneGpu - k.used_milli >= r.milli &&
         !(k.memory > 0 &&
           k.memory - k.used_memory < (r.memory > 0 ? r.memory + k.context_reserve : k.memory * r.milli / kOneGpu)) &&
         !(r.kind == SliceKind::kMps && (k.clients >= k.mps_limit || (k.mps_user >= 0 && k.mps_user != user)));
  }
  GpuView g;
  g.usable = ok;
  g.free_milli = ok ? kOneGpu - k.used_milli : 0;
  g.free_memory = ok ? std::max<Bytes>(k.memory - k.used_memory, 0) : 0;
  return g;
}

void Scheduler::Impl::RefileHost(NodeId nid) {
  std::vector<DeviceStateKey>& keys = by_state_scratch_.keys;
  std::vector<const DeviceView*>& scratch_devs = by_state_scratch_.devs;
  keys.clear();
  scratch_devs.clear();
  // The host's devices in index order: as filed last time unless devices came or went.
  // Their models' ids likewise (a lookup by name otherwise).
  const std::vector<int>* models = nullptr;
  std::span<const DeviceView* const> devs;
  if (const std::vector<const DeviceView*>* same = host_states_.IndexOrder(nid)) {
    devs = *same;  // read in place (Set() knows its own list)
    models = &host_states_.IndexModels(nid);
  } else {
    for (auto it = devices_.lower_bound(DeviceRef{nid, DeviceIndex(0)});
         it != devices_.end() && it->first.node == nid; ++it)
      scratch_devs.push_back(&it->second);
    devs = scratch_devs;
  }
  for (std::size_t i = 0; i < devs.size(); ++i) {
    const DeviceView& d = *devs[i];
    const int model = models != nullptr ? (*models)[i] : host_states_.ModelId(d.model);
    // ViewOf() shows every request the same unusable GPU for these (host_states.h).
    if (InertForPlacement(d)) {
      keys.push_back(InertKey(model));
      continue;
    }
    DeviceStateKey k;
    k.model = model;
    k.mode = static_cast<int>(d.mode);
    k.schedulable = true;
    k.used_milli = d.used_milli;
    k.memory = d.memory;
    k.context_reserve = d.context_reserve;
    k.used_memory = d.used_memory;
    // Only an MPS slice reads the clients and their limit (SharedFits), and only on a device
    // that is free (no clients) or in MPS mode.
    k.clients = d.mode == DeviceMode::kMps ? d.clients : 0;
    k.mps_limit = d.mode == DeviceMode::kShared ? 0 : MpsLimit(d);
    // Whose MPS server it runs (MpsServesOther): set only in MPS mode.
    k.mps_user = d.mps_user.empty() ? -1 : host_states_.UserId(d.mps_user);
    // Necessary conditions of ViewOf() fitting, for HostStates' quick reject.
    const bool free = d.mode == DeviceMode::kFree;
    k.whole_free = free && d.used_milli == 0;
    k.share_free = free || d.mode == DeviceMode::kShared ? kOneGpu - d.used_milli : -1;
    k.mps_free = free || d.mode == DeviceMode::kMps ? kOneGpu - d.used_milli : -1;
    keys.push_back(k);
  }
  host_states_.Set(nid, keys, devs);
}

// PlaceGeneric's decision, computed per distinct host state (host_states.h) for policies that
// ScoresByNodeState(): each live state is scored once (memoised while the request shape and
// the workload are unchanged), and the host is then chosen exactly as Place() would scan the
// hosts in NodeId order: Place() collects the hosts of the best score in that order and
// draws one of them from rng_ (one draw, none for a single host); here the same draw picks
// the k-th host of the best-scoring states in NodeId order. Cost: O(states that could take
// the request) + O(best states x log hosts), not O(hosts).
std::optional<Scheduler::Impl::Choice> Scheduler::Impl::PlaceByState(const Resolved& r, const PlacementPolicy& policy) {
  ByStateScratch& sc = by_state_scratch_;
  host_states_.TakeDirty(sc.dirty);
  for (NodeId nid : sc.dirty) RefileHost(nid);
  // Most failed attempts end here (a whole-GPU shape waiting for a host with enough free
  // devices): no state could take the request, so there is nothing to score or draw.
  const bool mps = r.kind == SliceKind::kMps;
  sc.user = mps ? host_states_.FindUserId(r.user) : -1;
  if (r.kind == SliceKind::kWhole ? !host_states_.MayTakeWhole(r.gpus)
      : mps                       ? !host_states_.MayTakeMps(sc.user)
                                  : !host_states_.MayTakeShare(r.milli)) {
    ++stats_.placement_attempts;  // counted as InputFor() counts every attempt
    return std::nullopt;
  }
  workload_.Shapes();  // brought up to date: the slots are for the workload the policy will see
  const PlacementMemo::Ticket ticket = memo_.Select(r, policy, workload_.version());
  const PolicyInput in = InputFor(r);
  const PlacementRequest& req = in.req;
  const PlacementContext& ctx = in.ctx;
  sc.model = r.model.empty() ? kAnyModel : host_states_.FindModelId(r.model);
  // The states of the best score, in one pass; their hosts are the ties Place() would collect.
  sc.top.clear();
  double top = 0;
  std::uint64_t ties = 0;
  // Only states whose summary could take the request (a necessary condition of Fits).
  sc.own_used = 0;
  auto visit = [&](HostStates::State& s) {
    const HostStates::Memo* memo = &host_states_.memo(ticket.slot, s.id);
    if (mps && sc.user >= 0 && (s.mps_users >> (sc.user % 64) & 1) != 0 &&
        ServesMpsUser(s, sc.user)) {
      // The requesting user's MPS server runs there: scored for this request only.
      if (sc.own_used == sc.own.size()) sc.own.emplace_back();
      auto& [id, own] = sc.own[sc.own_used++];
      id = s.id;
      ScoreState(r, policy, req, ctx, s, sc.user, own);
      memo = &own;
    } else if (memo->generation != ticket.generation) {
      // As seen by a user whose MPS server does not run there (-1: every MPS GPU is another's).
      ScoreState(r, policy, req, ctx, s, -1, host_states_.memo(ticket.slot, s.id));
    }
    const HostStates::Memo& m = *memo;
    if (!m.fits) return;
    if (sc.top.empty() || m.score > top) {
      sc.top.clear();
      top = m.score;
      ties = 0;
    } else if (m.score != top) {
      return;
    }
    sc.top.push_back(&s);
    ties += s.hosts.size();
  };
  if (r.kind == SliceKind::kWhole) {
    host_states_.ForWhole(r.gpus, visit);
  } else if (mps) {
    host_states_.ForMps(sc.user, r.milli, visit);
  } else {
    host_states_.ForShare(r.milli, visit);
  }
  if (sc.top.empty()) return std::nullopt;
  // Place()'s one draw over the ties, then the k-th of them in NodeId order.
  std::uint64_t k = ties > 1 ? std::uniform_int_distribution<std::uint64_t>(0, ties - 1)(rng_) : 0;
  HostStates::State* chosen_state = sc.top.front();
  NodeId chosen;
  if (sc.top.size() == 1) {
    chosen = chosen_state->hosts[k];
  } else if (ties <= kGatherTies) {
    // Few tied hosts (the usual case: the best states hold a host or two each): the k-th
    // smallest of them all, and its state with it.
    sc.tied.clear();
    for (HostStates::State* st : sc.top)
      for (NodeId h : st->hosts) sc.tied.emplace_back(h, st);
    auto kth = sc.tied.begin() + static_cast<std::ptrdiff_t>(k);
    std::nth_element(sc.tied.begin(), kth, sc.tied.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    chosen = kth->first;
    chosen_state = kth->second;
  } else {
    // The smallest host id with k + 1 tied hosts at or below it (each state's hosts are sorted).
    auto at_or_below = [&](std::uint32_t id) {
      std::uint64_t n = 0;
      for (const HostStates::State* st : sc.top) {
        n += std::upper_bound(st->hosts.begin(), st->hosts.end(), NodeId(id)) - st->hosts.begin();
      }
      return n;
    };
    std::uint32_t lo = UINT32_MAX, hi = 0;
    for (const HostStates::State* st : sc.top) {
      lo = std::min(lo, st->hosts.front().value());
      hi = std::max(hi, st->hosts.back().value());
    }
    while (lo < hi) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (at_or_below(mid) >= k + 1) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    chosen = NodeId(lo);
    for (HostStates::State* st : sc.top) {
      if (std::binary_search(st->hosts.begin(), st->hosts.end(), chosen)) chosen_state = st;
    }
  }
  Choice c{chosen, {}, std::nullopt};
  const std::vector<const DeviceView*>& order = host_states_.Views(chosen);
  const HostStates::Memo* result = &host_states_.memo(ticket.slot, chosen_state->id);
  for (std::size_t i = 0; i < sc.own_used; ++i) {
    if (sc.own[i].first == chosen_state->id) result = &sc.own[i].second;
  }
  for (int g : result->gpus) c.devices.push_back(order[g]->ref.index);
  std::sort(c.devices.begin(), c.devices.end());
  return c;
}

bool Scheduler::Impl::ServesMpsUser(const HostStates::State& s, int user) {
  return std::any_of(s.devices.begin(), s.devices.end(), [&](const DeviceStateKey& k) { return k.mps_user == user; });
}

// One state's policy result for `r` of MPS user `user` (ViewOfKey()), into `m`: on the GPU
// views of its first host in canonical order with the GPUs the request cannot use moved last
// (a reordering that keeps the usable GPUs in order, so a policy that ScoresByNodeState()
// chooses the same, and the unusable GPUs all show the same view). States whose views are then
// equal get one policy call per generation (PlacementMemo::Lookup()): whatever else differs
// between them (what runs on GPUs the request cannot use, memory beyond the request) is
// invisible to the policy.
void Scheduler::Impl::ScoreState(const Resolved& r, const PlacementPolicy& policy, const PlacementRequest& req,
                                 const PlacementContext& ctx, const HostStates::State& s, int user,
                                 HostStates::Memo& m) {
  ByStateScratch& sc = by_state_scratch_;
  const int n = static_cast<int>(s.devices.size());
  scratch_gpus_.resize(n);
  sc.pos.resize(n);
  // Usable GPUs from the front, unusable ones from the back (then put back in order).
  int usable = 0, back = n;
  for (int i = 0; i < n; ++i) {
    const GpuView g = ViewOfKey(r, sc.model, user, s.devices[i]);
    if (g.usable) {
      scratch_gpus_[usable] = g;
      sc.pos[usable++] = i;
    } else {
      scratch_gpus_[--back] = GpuView{0, 0, false};
      sc.pos[back] = i;
    }
  }
  std::reverse(sc.pos.begin() + usable, sc.pos.end());
  m.generation = memo_.current().generation;
  m.fits = false;
  m.gpus.clear();
  const PlacementMemo::ViewResult& vm = memo_.Lookup(s.host_model_id, scratch_gpus_, usable, [&] {
    PlacementMemo::ViewResult e;
    NodeView v;
    v.model = s.host_model;
    v.cpu_milli_free = v.cpu_milli_total = 1 << 30;
    v.memory_free = v.memory_total = Bytes{1} << 50;
    v.gpus = scratch_gpus_;
    if (!Fits(req, v)) return e;
    std::optional<NodeChoice> choice = policy.Score(req, v, ctx);
    if (!choice) return e;
    e.fits = true;
    e.score = choice->score;
    e.gpus = std::move(choice->gpu_indices);
    return e;
  });
  if (!vm.fits) return;
  m.fits = true;
  m.score = vm.score;
  for (int g : vm.gpus) m.gpus.push_back(sc.pos[g]);
}

// MIG: a free instance of the smallest fitting profile (lowest device; deterministic).
std::optional<Scheduler::Impl::Choice> Scheduler::Impl::PlaceMig(const Resolved& r) {
  std::optional<std::pair<DeviceRef, MigPlacement>> best;
  for (const auto& [name, cap] : capacity_) {
    if (name.empty() || cap.mig_capable == 0 || !cap.model) continue;
    if (!r.model.empty() && name != r.model) continue;
    const MigProfile* p = cap.model->SmallestProfileFor(r.mig_need);
    if (!p) continue;
    ++stats_.placement_attempts;
    auto inst = index_.FirstFreeInstance(ModelIndex(cap.model), p->id);
    if (inst && (!best || inst->first < best->first)) best = inst;
  }
  if (!best) return std::nullopt;
  return Choice{best->first.node, {best->first.index}, best->second};
}

std::optional<Scheduler::Impl::Choice> Scheduler::Impl::TryPlace(const Resolved& r) {
  if (r.kind == SliceKind::kMig) return PlaceMig(r);
  const QueuePlacement& q = placement_.at(r.queue);
  const FastOrder order = q.order;
  if (order == FastOrder::kNone) {
    const PlacementPolicy& policy = *q.policy;
    if (by_state_ && !reference_placement_ && policy.ScoresByNodeState())
      return PlaceByState(r, policy);
    return PlaceGeneric(r, policy);
  }
  if (r.kind == SliceKind::kWhole) return PlaceWholeFast(r, order);
  return PlaceFractionalFast(r, order);
}

}  // namespace gpuslice::sched
