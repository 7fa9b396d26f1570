// On-demand idle reclaim: a pending job takes the room of slices idle past their grace.
// Part of Scheduler::Impl (scheduler_impl.h); see scheduler.cc for the order of an event.
#include "sched/scheduler_impl.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace gpuslice::sched {

// ---------------------------------------------------------------- on-demand idle reclaim
// Slices idle past their grace in a queue with reclaim = "on-demand" (SliceTimers::reclaimable())
// keep running while nobody needs their room. A pending job that found none takes it from them:
// candidates longest idle first (EffectiveLastActive, then SliceId), taken until the job
// would fit on one device (shared, mps) or host (whole), keeping only those on that
// device/host and then dropping, most recently idle first, any it does not need. MIG
// requests do not reclaim (an instance's shape is not a sum of freed shares). Jobs are
// considered by shape, in queue order of each shape's head (the first not held by a user
// cap); one job is served per call. True: slices were reclaimed.
bool Scheduler::Impl::ReclaimOnDemand(std::optional<JobId> only) {
  std::vector<const SliceView*> cands;
  for (SliceId sid : timers_.reclaimable()) cands.push_back(&cluster_.slices().at(sid));
  auto idle_since = [&](const SliceView* v) {
    return EffectiveLastActive(jobs_.RecordOf(v->job).queue->idle, *v, now_);
  };
  std::sort(cands.begin(), cands.end(), [&](const SliceView* a, const SliceView* b) {
    return std::pair(idle_since(a), a->slice) < std::pair(idle_since(b), b->slice);
  });
  std::vector<const Resolved*> wanting;
  if (only) {
    const Resolved* r = jobs_.FindRecord(*only);
    if (r != nullptr && r->view->state == JobState::kPending) wanting.push_back(r);
  } else {
    std::vector<std::pair<PendingKey, const Resolved*>> heads;
    for (int shape : pending_.live_shapes()) {
      for (const auto& [k, r] : pending_.of_shape(shape)) {
        if (CapBlocks(*r)) continue;
        heads.emplace_back(k, r);
        break;
      }
    }
    std::sort(heads.begin(), heads.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [k, r] : heads) wanting.push_back(r);
  }
  for (const Resolved* r : wanting) {
    if (r->kind == SliceKind::kMig || CapBlocks(*r) || !cluster_.Feasible(*r).ok()) continue;
    std::vector<const SliceView*> need = RoomFrom(*r, cands);
    if (need.empty()) continue;
    std::vector<std::pair<JobId, Micros>> take;
    for (const SliceView* v : need) take.emplace_back(v->job, idle_since(v));
    for (const auto& [job, since] : take) {
      const Resolved& victim = jobs_.RecordOf(job);
      out_.push_back(Reclaim{job, victim.slice->first,
                             fmt::format("idle for {}; reclaimed on demand for job {}",
                                         FormatDuration(now_ - since), r->job.value())});
      ++stats_.reclaimed;
      ++stats_.reclaimed_on_demand;
      EndRunning(job, "idle");
    }
    return true;
  }
  return false;
}

// What freeing `freed` leaves on one device.
struct Scheduler::Impl::Freed {
  MilliGpu milli = 0;
  Bytes memory = 0;
  int clients = 0;
};

bool Scheduler::Impl::FitsFreed(const Resolved& r, const DeviceView& d, const Freed& f) const {
  // Devices kept for this very job (reserve_after) count: they are what it waits for.
  if (d.draining || d.reconfiguring || d.admin_drained || (d.reserved_for.valid() && d.reserved_for != r.job))
    return false;
  const int clients = d.clients - f.clients;
  const DeviceMode mode = clients == 0 && d.mode != DeviceMode::kMig ? DeviceMode::kFree : d.mode;
  return CanHold(r, d, Room{mode, d.used_milli - f.milli, d.used_memory - f.memory, clients}) &&
         !(clients > 0 && MpsServesOther(r, d));
}

// Whether `r` fits once `set` is freed; `target`: where (a device, or a host for whole).
bool Scheduler::Impl::FitsAfter(const Resolved& r, const std::vector<const SliceView*>& set,
                                std::optional<DeviceRef>* device, std::optional<NodeId>* node) const {
  std::map<const DeviceView*, Freed> freed;
  for (const SliceView* v : set) {
    for (DeviceIndex di : v->devices) {
      const DeviceView& d = cluster_.devices().at({v->node, di});
      Freed& f = freed[&d];
      f.clients += 1;
      if (v->kind != SliceKind::kMig) {
        f.milli += v->milli;
        f.memory += ReservedOn(*v, d);
      }
    }
  }
  if (r.kind != SliceKind::kWhole) {
    for (const auto& [d, f] : freed) {
      if (FitsFreed(r, *d, f)) {
        if (device) *device = d->ref;
        return true;
      }
    }
    return false;
  }
  std::set<NodeId> hosts;
  for (const auto& [d, f] : freed) hosts.insert(d->ref.node);
  for (NodeId h : hosts) {
    int n = 0;
    for (DeviceIndex di : cluster_.nodes().at(h)) {
      const DeviceView& d = cluster_.devices().at({h, di});
      auto f = freed.find(&d);
      n += FitsFreed(r, d, f == freed.end() ? Freed{} : f->second);
    }
    if (n >= r.gpus) {
      if (node) *node = h;
      return true;
    }
  }
  return false;
}

// The fewest reclaimable slices (from `cands`, longest idle first) that make room for `r`;
// empty: none would.
std::vector<const SliceView*> Scheduler::Impl::RoomFrom(const Resolved& r,
                                                        const std::vector<const SliceView*>& cands) const {
  std::size_t i = 0;
  return RoomFromNext(r, [&]() -> const SliceView* { return i < cands.size() ? cands[i++] : nullptr; });
}

std::vector<const SliceView*> Scheduler::Impl::RoomFromNext(const Resolved& r,
                                                            const std::function<const SliceView*()>& next) const {
  std::vector<const SliceView*> taken;
  std::map<NodeId, std::vector<const SliceView*>> taken_on;  // the candidates so far, per host, in order
  std::optional<DeviceRef> device;
  std::optional<NodeId> node;
  bool fits = false;
  while (const SliceView* c = next()) {
    std::vector<const SliceView*>& on = taken_on[c->node];
    on.push_back(c);
    // Only the newest candidate's devices changed: look there (a whole job: its host).
    std::vector<const SliceView*> here;
    for (const SliceView* t : on) {
      if (r.kind == SliceKind::kWhole ||
          std::find_first_of(t->devices.begin(), t->devices.end(), c->devices.begin(), c->devices.end()) !=
              t->devices.end())
        here.push_back(t);
    }
    if (FitsAfter(r, here, &device, &node)) {
      taken = std::move(here);
      fits = true;
      break;
    }
  }
  if (!fits) return {};
  // Drop what is not needed, most recently idle first.
  for (std::size_t i = taken.size(); i-- > 0;) {
    std::vector<const SliceView*> trial = taken;
    trial.erase(trial.begin() + static_cast<std::ptrdiff_t>(i));
    if (!trial.empty() && FitsAfter(r, trial, nullptr, nullptr)) taken = std::move(trial);
  }
  return taken;
}

}  // namespace gpuslice::sched
