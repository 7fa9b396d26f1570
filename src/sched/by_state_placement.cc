// Placement by host state (by_state_placement.h): refiling changed hosts, scoring each distinct
// host state once, and the generic path's draw among the hosts of the best score.
#include "sched/by_state_placement.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "sched/device_rules.h"

namespace gpuslice::sched {

namespace {

// RoomHolds()'s fields of a device, from its HostStates key.
struct KeyFields {
  const DeviceStateKey& k;
  Bytes memory() const { return k.memory; }
  Bytes context_reserve() const { return k.context_reserve; }
  int mps_limit() const { return k.mps_limit; }
};

}  // namespace

// ViewOf() (device_rules.h) from a device's HostStates key (RefileHost() below), without
// reading the device: the same rules (RoomHolds()), on the key's
// copies of the fields they read. `model`: HostStates' id of r.model, kAnyModel when empty, -1
// when no device has that model; `user`: HostStates' id of r.user (-1: none, so every MPS user
// is another).
inline GpuView ByStateEngine::ViewOfKey(const Resolved& r, int model, int user, const DeviceStateKey& k) {
  // Takes() (device_rules.h): may be used, the model, the one rule, and the MPS user.
  const bool ok = k.schedulable && (model == kAnyModel || k.model == model) &&
                  RoomHolds(r, KeyFields{k}, Room{static_cast<DeviceMode>(k.mode), k.used_milli, k.used_memory, k.clients}) &&
                  !(r.kind == SliceKind::kMps && k.mps_user >= 0 && k.mps_user != user);
  GpuView g;
  g.usable = ok;
  g.free_milli = ok ? kOneGpu - k.used_milli : 0;
  g.free_memory = ok ? std::max<Bytes>(k.memory - k.used_memory, 0) : 0;
  return g;
}

void ByStateEngine::RefileHost(NodeId nid, const std::map<DeviceRef, DeviceView>& devices) {
  std::vector<DeviceStateKey>& keys = scratch_.keys;
  std::vector<const DeviceView*>& scratch_devs = scratch_.devs;
  keys.clear();
  scratch_devs.clear();
  // The host's devices in index order: as filed last time unless devices came or went.
  // Their models' ids likewise (a lookup by name otherwise).
  const std::vector<int>* models = nullptr;
  std::span<const DeviceView* const> devs;
  if (const std::vector<const DeviceView*>* same = states_.IndexOrder(nid)) {
    devs = *same;  // read in place (Set() knows its own list)
    models = &states_.IndexModels(nid);
  } else {
    for (auto it = devices.lower_bound(DeviceRef{nid, DeviceIndex(0)});
         it != devices.end() && it->first.node == nid; ++it)
      scratch_devs.push_back(&it->second);
    devs = scratch_devs;
  }
  for (std::size_t i = 0; i < devs.size(); ++i) {
    const DeviceView& d = *devs[i];
    const int model = models != nullptr ? (*models)[i] : states_.ModelId(d.model);
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
    // Only an MPS slice reads the clients and their limit (Takes), and only on a device
    // that is free (no clients) or in MPS mode.
    k.clients = d.mode == DeviceMode::kMps ? d.clients : 0;
    k.mps_limit = d.mode == DeviceMode::kShared ? 0 : MpsLimit(d);
    // Whose MPS server it runs (MpsServesOther(), device_rules.h): set only in MPS mode.
    k.mps_user = d.mps_user.empty() ? -1 : states_.UserId(d.mps_user);
    // Necessary conditions of ViewOf() fitting, for HostStates' quick reject.
    const bool free = d.mode == DeviceMode::kFree;
    k.whole_free = free && d.used_milli == 0;
    k.share_free = free || d.mode == DeviceMode::kShared ? kOneGpu - d.used_milli : -1;
    k.mps_free = free || d.mode == DeviceMode::kMps ? kOneGpu - d.used_milli : -1;
    keys.push_back(k);
  }
  states_.Set(nid, keys, devs);
}

// GenericPlacement's decision, computed per distinct host state (host_states.h) for policies that
// ScoresByNodeState(): each live state is scored once (memoised while the request shape and
// the workload are unchanged), and the host is then chosen exactly as Place() would scan the
// hosts in NodeId order: Place() collects the hosts of the best score in that order and
// draws one of them from `rng` (one draw, none for a single host); here the same draw picks
// the k-th host of the best-scoring states in NodeId order. Cost: O(states that could take
// the request) + O(best states x log hosts), not O(hosts).
std::optional<ByStateEngine::Pick> ByStateEngine::Place(const Resolved& r, const PlacementPolicy& policy,
                                                        const std::map<DeviceRef, DeviceView>& devices,
                                                        WorkloadModel& workload, std::mt19937_64& rng) {
  ByStateScratch& sc = scratch_;
  states_.TakeDirty(sc.dirty);
  for (NodeId nid : sc.dirty) RefileHost(nid, devices);
  // Most failed attempts end here (a whole-GPU shape waiting for a host with enough free
  // devices): no state could take the request, so there is nothing to score or draw.
  const bool mps = r.kind == SliceKind::kMps;
  sc.user = mps ? states_.FindUserId(r.user) : -1;
  if (r.kind == SliceKind::kWhole ? !states_.MayTakeWhole(r.gpus)
      : mps                       ? !states_.MayTakeMps(sc.user)
                                  : !states_.MayTakeShare(r.milli)) {
    return std::nullopt;
  }
  // The workload is brought up to date first, as the slots are for the workload it will see.
  const PolicyInput in = PolicyInputFor(r, rng, workload);
  const PlacementRequest& req = in.req;
  const PlacementContext& ctx = in.ctx;
  const PlacementMemo::Ticket ticket = memo_.Select(r, policy, workload.version());
  sc.model = r.model.empty() ? kAnyModel : states_.FindModelId(r.model);
  // The states of the best score, in one pass; their hosts are the ties Place() would collect.
  sc.top.clear();
  double top = 0;
  std::uint64_t ties = 0;
  // Only states whose summary could take the request (a necessary condition of Fits).
  sc.own_used = 0;
  auto visit = [&](HostStates::State& s) {
    const HostStates::Memo* memo = &states_.memo(ticket.slot, s.id);
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
      ScoreState(r, policy, req, ctx, s, -1, states_.memo(ticket.slot, s.id));
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
    states_.ForWhole(r.gpus, visit);
  } else if (mps) {
    states_.ForMps(sc.user, r.milli, visit);
  } else {
    states_.ForShare(r.milli, visit);
  }
  if (sc.top.empty()) return std::nullopt;
  // Place()'s one draw over the ties, then the k-th of them in NodeId order.
  std::uint64_t k = ties > 1 ? std::uniform_int_distribution<std::uint64_t>(0, ties - 1)(rng) : 0;
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
  Pick c{chosen, {}};
  const std::vector<const DeviceView*>& order = states_.Views(chosen);
  const HostStates::Memo* result = &states_.memo(ticket.slot, chosen_state->id);
  for (std::size_t i = 0; i < sc.own_used; ++i) {
    if (sc.own[i].first == chosen_state->id) result = &sc.own[i].second;
  }
  for (int g : result->gpus) c.devices.push_back(order[g]->ref.index);
  std::sort(c.devices.begin(), c.devices.end());
  return c;
}

bool ByStateEngine::ServesMpsUser(const HostStates::State& s, int user) {
  return std::any_of(s.devices.begin(), s.devices.end(), [&](const DeviceStateKey& k) { return k.mps_user == user; });
}

// One state's policy result for `r` of MPS user `user` (ViewOfKey()), into `m`: on the GPU
// views of its first host in canonical order with the GPUs the request cannot use moved last
// (a reordering that keeps the usable GPUs in order, so a policy that ScoresByNodeState()
// chooses the same, and the unusable GPUs all show the same view). States whose views are then
// equal get one policy call per generation (PlacementMemo::Lookup()): whatever else differs
// between them (what runs on GPUs the request cannot use, memory beyond the request) is
// invisible to the policy.
void ByStateEngine::ScoreState(const Resolved& r, const PlacementPolicy& policy, const PlacementRequest& req,
                               const PlacementContext& ctx, const HostStates::State& s, int user,
                               HostStates::Memo& m) {
  ByStateScratch& sc = scratch_;
  const int n = static_cast<int>(s.devices.size());
  sc.gpus.resize(n);
  sc.pos.resize(n);
  // Usable GPUs from the front, unusable ones from the back (then put back in order).
  int usable = 0, back = n;
  for (int i = 0; i < n; ++i) {
    const GpuView g = ViewOfKey(r, sc.model, user, s.devices[i]);
    if (g.usable) {
      sc.gpus[usable] = g;
      sc.pos[usable++] = i;
    } else {
      sc.gpus[--back] = GpuView{0, 0, false};
      sc.pos[back] = i;
    }
  }
  std::reverse(sc.pos.begin() + usable, sc.pos.end());
  m.generation = memo_.current().generation;
  m.fits = false;
  m.gpus.clear();
  const PlacementMemo::ViewResult& vm = memo_.Lookup(s.host_model_id, sc.gpus, usable, [&] {
    PlacementMemo::ViewResult e;
    NodeView v;
    v.model = s.host_model;
    v.cpu_milli_free = v.cpu_milli_total = 1 << 30;
    v.memory_free = v.memory_total = Bytes{1} << 50;
    v.gpus = sc.gpus;
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

}  // namespace gpuslice::sched
