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

namespace gpuslice::sched {

namespace {

FastOrder FastOrderFor(std::string_view policy) {
  if (policy == "best-fit" || policy == "packing") return FastOrder::kTightest;
  if (policy == "spread") return FastOrder::kLoosest;
  return FastOrder::kNone;
}

}  // namespace

// ---------------------------------------------------------------- placement
bool Scheduler::Impl::SharedFits(const Resolved& r, const DeviceView& d) const {
  if (!Schedulable(d) || !ModelOk(r, d)) return false;
  DeviceMode want = ModeFor(r.kind);
  if (d.mode != DeviceMode::kFree && d.mode != want) return false;
  if (kOneGpu - d.used_milli < r.milli) return false;
  if (d.memory > 0 && d.memory - d.used_memory < MemoryCap(r, d)) return false;
  if (r.kind == SliceKind::kMps && d.clients >= MpsLimit(d)) return false;
  return true;
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
  PlacementRequest req;
  req.num_gpus = r.gpus;
  req.milli_per_gpu = r.milli;
  PlacementContext ctx;
  ctx.rng = &rng_;
  ctx.workload = Workload();
  ++stats_.placement_attempts;
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
// id of r.model, kAnyModel when empty, -1 when no device has that model.
GpuView Scheduler::Impl::ViewOfKey(const Resolved& r, int model, const DeviceStateKey& k) {
  bool ok = k.schedulable && (model == kAnyModel || k.model == model);
  const auto mode = static_cast<DeviceMode>(k.mode);
  if (ok && r.kind == SliceKind::kWhole) {
    ok = mode == DeviceMode::kFree;
  } else if (ok) {  // SharedFits()
    ok = (mode == DeviceMode::kFree || mode == ModeFor(r.kind)) && kOneGpu - k.used_milli >= r.milli &&
         !(k.memory > 0 && k.memory - k.used_memory < (r.memory > 0 ? r.memory : k.memory * r.milli / kOneGpu)) &&
         !(r.kind == SliceKind::kMps && k.clients >= k.mps_limit);
  }
  GpuView g;
  g.usable = ok;
  g.free_milli = ok ? kOneGpu - k.used_milli : 0;
  g.free_memory = ok ? std::max<Bytes>(k.memory - k.used_memory, 0) : 0;
  return g;
}

void Scheduler::Impl::RefileHost(NodeId nid) {
  scratch_keys_.clear();
  scratch_devs_.clear();
  // The host's devices in index order: as filed last time unless devices came or went.
  if (const std::vector<const DeviceView*>* same = host_states_.IndexOrder(nid)) {
    scratch_devs_.assign(same->begin(), same->end());
  } else {
    for (auto it = devices_.lower_bound(DeviceRef{nid, DeviceIndex(0)});
         it != devices_.end() && it->first.node == nid; ++it)
      scratch_devs_.push_back(&it->second);
  }
  for (const DeviceView* dp : scratch_devs_) {
    const DeviceView& d = *dp;
    const int model = host_states_.ModelId(d.model);
    const bool schedulable = Schedulable(d);
    // ViewOf() shows every request the same unusable GPU for these (host_states.h).
    if (!schedulable || d.mode == DeviceMode::kMig || d.mode == DeviceMode::kWhole) {
      scratch_keys_.push_back(InertKey(model));
      continue;
    }
    DeviceStateKey k;
    k.model = model;
    k.mode = static_cast<int>(d.mode);
    k.schedulable = true;
    k.used_milli = d.used_milli;
    k.memory = d.memory;
    k.used_memory = d.used_memory;
    // Only an MPS slice reads the clients and their limit (SharedFits), and only on a device
    // that is free (no clients) or in MPS mode.
    k.clients = d.mode == DeviceMode::kMps ? d.clients : 0;
    k.mps_limit = d.mode == DeviceMode::kShared ? 0 : MpsLimit(d);
    // Necessary conditions of ViewOf() fitting, for HostStates' quick reject.
    const bool free = d.mode == DeviceMode::kFree;
    k.whole_free = free && d.used_milli == 0;
    k.share_free = free || d.mode == DeviceMode::kShared ? kOneGpu - d.used_milli : -1;
    k.mps_free = free || d.mode == DeviceMode::kMps ? kOneGpu - d.used_milli : -1;
    scratch_keys_.push_back(k);
  }
  host_states_.Set(nid, scratch_keys_, scratch_devs_);
}

// PlaceGeneric's decision, computed per distinct host state (host_states.h) for policies that
// ScoresByNodeState(): each live state is scored once (memoised while the request shape and
// the workload are unchanged), and the host is then chosen exactly as Place() would scan the
// hosts in NodeId order, drawing from rng_ the same numbers with the same arguments:
// Place() draws once for every host that ties the best score seen so far. Over the levels of
// equal score, those are the hosts of each "record" level (a score whose first host comes
// before the first host of any higher score) after its first host and before the next
// record's first host, and every host of the top level after its first. Only the draws of
// the top level decide (the last host whose draw is 0, else its first host); the lower ones
// are made for their effect on rng_. Cost: O(states that could take the request) + O(draws),
// not O(hosts).
std::optional<Scheduler::Impl::Choice> Scheduler::Impl::PlaceByState(const Resolved& r, const PlacementPolicy& policy) {
  host_states_.TakeDirty(scratch_dirty_);
  for (NodeId nid : scratch_dirty_) RefileHost(nid);
  if (!(memo_key_.kind == r.kind && memo_key_.gpus == r.gpus && memo_key_.milli == r.milli &&
        memo_key_.memory == r.memory && memo_key_.model == r.model && memo_key_.workload == workload_version_ &&
        memo_key_.policy == &policy)) {
    memo_key_ = MemoKey{r.kind, r.gpus, r.milli, r.memory, r.model, workload_version_, &policy};
    ++memo_generation_;
  }
  PlacementRequest req;
  req.num_gpus = r.gpus;
  req.milli_per_gpu = r.milli;
  PlacementContext ctx;
  ctx.rng = &rng_;
  ++stats_.placement_attempts;
  scratch_levels_.clear();
  request_model_ = r.model.empty() ? kAnyModel : host_states_.FindModelId(r.model);
  bool have_workload = false;
  // Only states whose summary could take the request (a necessary condition of Fits).
  auto visit = [&](HostStates::State& s) {
    if (s.memo.generation != memo_generation_) {
      if (!have_workload) {
        ctx.workload = Workload();
        have_workload = true;
      }
      ScoreState(r, policy, req, ctx, s);
    }
    if (s.memo.fits) scratch_levels_.push_back({s.memo.score, &s});
  };
  if (r.kind == SliceKind::kWhole) {
    host_states_.ForWhole(r.gpus, visit);
  } else {
    host_states_.ForShare(r.kind == SliceKind::kMps, r.milli, visit);
  }
  if (scratch_levels_.empty()) return std::nullopt;
  std::sort(scratch_levels_.begin(), scratch_levels_.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  // Levels from the highest score down; records found on the way, highest first.
  using Record = LevelRecord;
  scratch_records_.clear();
  std::optional<NodeId> above;
  for (std::size_t b = 0; b < scratch_levels_.size();) {
    std::size_t e = b;
    NodeId first = scratch_levels_[b].second->hosts.front();
    while (e < scratch_levels_.size() && scratch_levels_[e].first == scratch_levels_[b].first) {
      first = std::min(first, scratch_levels_[e].second->hosts.front());
      ++e;
    }
    if (!above || first < *above) {
      scratch_records_.push_back(Record{b, e, first, above});
      above = first;
    }
    b = e;
  }
  auto draw = [&](std::uint64_t ties) {
    return std::uniform_int_distribution<std::uint64_t>(0, ties - 1)(rng_);
  };
  // Lower records, lowest first: only the number of draws matters.
  for (std::size_t k = scratch_records_.size(); k-- > 1;) {
    const Record& rec = scratch_records_[k];
    std::uint64_t count = 0;
    for (std::size_t i = rec.begin; i < rec.end; ++i) {
      const std::vector<NodeId>& hosts = scratch_levels_[i].second->hosts;
      count += std::lower_bound(hosts.begin(), hosts.end(), *rec.bound) -
               std::upper_bound(hosts.begin(), hosts.end(), rec.first);
    }
    for (std::uint64_t t = 2; t <= count + 1; ++t) draw(t);
  }
  // The top level: every host after its first, in NodeId order.
  const Record& top = scratch_records_.front();
  NodeId chosen = top.first;
  HostStates::State* chosen_state = nullptr;
  for (std::size_t i = top.begin; i < top.end; ++i) {
    if (scratch_levels_[i].second->hosts.front() == top.first) chosen_state = scratch_levels_[i].second;
  }
  if (top.end - top.begin == 1) {
    const std::vector<NodeId>& hosts = chosen_state->hosts;
    std::uint64_t ties = 1;
    for (auto it = std::next(hosts.begin()); it != hosts.end(); ++it) {
      if (draw(++ties) == 0) chosen = *it;
    }
  } else {
    scratch_ties_.clear();
    for (std::size_t i = top.begin; i < top.end; ++i) {
      HostStates::State* st = scratch_levels_[i].second;
      for (NodeId h : st->hosts)
        if (h != top.first) scratch_ties_.push_back({h, st});
    }
    // The draws' arguments do not depend on which host each is for (2, 3, ... in turn): draw
    // them all, then find the host of the last zero, the k-th in NodeId order (O(hosts),
    // no sort).
    std::size_t last_zero = 0;  // 1 + position in NodeId order; 0: none
    std::uint64_t ties = 1;
    for (std::size_t k = 0; k < scratch_ties_.size(); ++k) {
      if (draw(++ties) == 0) last_zero = k + 1;
    }
    if (last_zero > 0) {
      auto nth = scratch_ties_.begin() + static_cast<std::ptrdiff_t>(last_zero - 1);
      std::nth_element(scratch_ties_.begin(), nth, scratch_ties_.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      chosen = nth->first;
      chosen_state = nth->second;
    }
  }
  Choice c{chosen, {}, std::nullopt};
  const std::vector<const DeviceView*>& order = host_states_.Views(chosen);
  for (int g : chosen_state->memo.gpus) c.devices.push_back(order[g]->ref.index);
  std::sort(c.devices.begin(), c.devices.end());
  return c;
}

// One state's policy result for `r`, on the GPU views of its first host in canonical order
// with the GPUs the request cannot use moved last (a reordering that keeps the usable GPUs in
// order, so a policy that ScoresByNodeState() chooses the same, and the unusable GPUs all
// show the same view). States whose views are then equal get one policy call per generation
// (view_memo_): whatever else differs between them (what runs on GPUs the request cannot
// use, memory beyond the request) is invisible to the policy.
void Scheduler::Impl::ScoreState(const Resolved& r, const PlacementPolicy& policy, const PlacementRequest& req,
                const PlacementContext& ctx, HostStates::State& s) {
  const int n = static_cast<int>(s.devices.size());
  scratch_gpus_.resize(n);
  scratch_pos_.resize(n);
  // Usable GPUs from the front, unusable ones from the back (then put back in order).
  int usable = 0, back = n;
  for (int i = 0; i < n; ++i) {
    const GpuView g = ViewOfKey(r, request_model_, s.devices[i]);
    if (g.usable) {
      scratch_gpus_[usable] = g;
      scratch_pos_[usable++] = i;
    } else {
      scratch_gpus_[--back] = GpuView{0, 0, false};
      scratch_pos_[back] = i;
    }
  }
  std::reverse(scratch_pos_.begin() + usable, scratch_pos_.end());
  HostStates::Memo& m = s.memo;
  m.generation = memo_generation_;
  m.fits = false;
  m.gpus.clear();
  const ViewMemo& vm = LookupViews(s.host_model_id, usable, [&] {
    ViewMemo e;
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
  for (int g : vm.gpus) m.gpus.push_back(scratch_pos_[g]);
}

template <typename F>
const Scheduler::Impl::ViewMemo& Scheduler::Impl::LookupViews(int model, int usable, F compute) {
  // The views past `usable` are all the same unusable view: their count stands for them.
  std::uint64_t h = (static_cast<std::uint64_t>(model) * 0x9e3779b97f4a7c15ULL) ^
                    (scratch_gpus_.size() << 32 | static_cast<std::uint64_t>(usable));
  for (int i = 0; i < usable; ++i) {
    const GpuView& g = scratch_gpus_[i];
    h ^= static_cast<std::uint64_t>(g.free_milli) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= static_cast<std::uint64_t>(g.free_memory) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  if (view_memo_.empty()) view_memo_.resize(4096);
  const std::size_t mask = view_memo_.size() - 1;
  auto same = [&](const ViewMemoEntry& e) {
    if (e.hash != h || e.model != model || e.views.size() != scratch_gpus_.size()) return false;
    for (std::size_t i = 0; i < e.views.size(); ++i) {
      const GpuView& a = e.views[i];
      const GpuView& b = scratch_gpus_[i];
      if (a.free_milli != b.free_milli || a.free_memory != b.free_memory || a.usable != b.usable) return false;
    }
    return true;
  };
  // Open addressing, a few probes; an entry of an older generation is free. When the probes
  // find neither, the last probed slot is overwritten (a memo, so losing one is only slower).
  std::size_t slot = h & mask;
  for (int probe = 0; probe < 8; ++probe, slot = (slot + 1) & mask) {
    ViewMemoEntry& e = view_memo_[slot];
    if (e.generation == memo_generation_ && same(e)) return e.result;
    if (e.generation != memo_generation_) break;
  }
  ViewMemoEntry& e = view_memo_[slot];
  e.generation = memo_generation_;
  e.hash = h;
  e.model = model;
  e.views.assign(scratch_gpus_.begin(), scratch_gpus_.end());
  e.result = compute();
  return e.result;
}

// The expected workload for fragmentation-aware policies (FGD's "typical pods"): the shapes
// of submitted GPU requests with their frequencies, forgetting old ones by halving every
// kWorkloadWindow submissions.
void Scheduler::Impl::CountShape(const Resolved& r) {
  workload_counts_[{r.gpus, r.milli}] += 2;
  workload_total_ += 2;
  if (workload_total_ >= 2 * kWorkloadWindow) {
    workload_total_ = 0;
    for (auto it = workload_counts_.begin(); it != workload_counts_.end();) {
      it->second /= 2;
      workload_total_ += it->second;
      it = it->second == 0 ? workload_counts_.erase(it) : std::next(it);
    }
  }
  workload_dirty_ = true;
  ++workload_version_;
}
std::span<const WorkloadShape> Scheduler::Impl::Workload() {
  if (workload_dirty_) {
    workload_.clear();
    for (const auto& [shape, n] : workload_counts_) {
      WorkloadShape w;
      w.num_gpus = shape.first;
      w.milli_per_gpu = shape.second;
      w.frequency = static_cast<double>(n) / static_cast<double>(workload_total_);
      workload_.push_back(w);
    }
    workload_dirty_ = false;
  }
  return workload_;
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
  FastOrder order = FastOrderFor(r.queue->placement);
  if (order == FastOrder::kNone) {
    const PlacementPolicy& policy = *policies_.at(r.queue->name);
    if (by_state_ && !reference_placement_ && policy.ScoresByNodeState()) return PlaceByState(r, policy);
    return PlaceGeneric(r, policy);
  }
  if (r.kind == SliceKind::kWhole) return PlaceWholeFast(r, order);
  return PlaceFractionalFast(r, order);
}

}  // namespace gpuslice::sched
