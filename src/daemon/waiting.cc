#include "daemon/waiting.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "core/overloaded.h"

namespace gpuslice::daemon {
namespace {

constexpr Micros kNever = LLONG_MAX;

// When a running slice ends at the latest: its time limit, or a standing idle warning's
// reclaim time when that comes first. kNever: nothing bounds it.
Micros EndBound(const sched::SliceView& v, const sched::Config& config,
                const std::map<JobId, sched::JobView>& jobs) {
  Micros t = v.deadline > 0 ? v.deadline : kNever;
  if (v.idle == sched::IdleState::kWarned && v.idle_deadline > 0) {
    auto j = jobs.find(v.job);
    const sched::QueueConfig* q = j == jobs.end() ? nullptr : config.FindQueue(j->second.queue);
    if (q != nullptr && q->idle.reclaim == sched::IdleReclaim::kAlways) t = std::min(t, v.idle_deadline);
  }
  return t;
}

// The n-th smallest (1-based) of `times`, kNever when there are fewer.
Micros Nth(std::vector<Micros> times, std::size_t n) {
  if (n == 0) return 0;
  if (times.size() < n) return kNever;
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(n - 1), times.end());
  return times[n - 1];
}

std::optional<Micros> Bound(Micros t, Micros now) {
  if (t == kNever) return std::nullopt;
  return std::max(t, now);
}

Micros SharedBound(const sched::Scheduler& s, const sched::NoDeviceFits& r) {
  const auto& config = s.config();
  Micros best = kNever;
  for (const auto& [ref, d] : s.devices()) {
    const bool same_mode = d.mode == sched::DeviceMode::kFree ||
                           (r.kind == sched::SliceKind::kShared && d.mode == sched::DeviceMode::kShared) ||
                           (r.kind == sched::SliceKind::kMps && d.mode == sched::DeviceMode::kMps);
    if (d.mode == sched::DeviceMode::kMig || d.draining || d.reconfiguring || d.reserved_for.valid()) continue;
    if (!r.model.empty() && d.model != r.model) continue;
    const Bytes need_memory = r.memory > 0 ? r.memory : d.memory * r.milli / kOneGpu;
    if (!same_mode) {
      // A whole or MPS device takes the request once all of its slices have ended (it is free
      // then, its whole share and memory with it).
      if (need_memory > d.memory) continue;
      Micros when = s.now();
      for (SliceId id : d.slices) {
        auto v = s.slices().find(id);
        if (v != s.slices().end()) when = std::max(when, EndBound(v->second, config, s.jobs()));
      }
      best = std::min(best, when);
      continue;
    }
    MilliGpu free_milli = kOneGpu - d.used_milli;
    Bytes free_memory = d.memory - d.used_memory;
    std::vector<std::pair<Micros, const sched::SliceView*>> in_way;
    for (SliceId id : d.slices) {
      auto v = s.slices().find(id);
      if (v != s.slices().end()) in_way.emplace_back(EndBound(v->second, config, s.jobs()), &v->second);
    }
    std::sort(in_way.begin(), in_way.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    Micros when = free_milli >= r.milli && free_memory >= need_memory ? s.now() : kNever;
    for (const auto& [t, v] : in_way) {
      if (when != kNever || t == kNever) break;
      free_milli += v->milli;
      free_memory += v->memory;
      if (free_milli >= r.milli && free_memory >= need_memory) when = t;
    }
    best = std::min(best, when);
  }
  return best;
}

Micros WholeBound(const sched::Scheduler& s, const sched::NoDeviceFits& r) {
  const auto& config = s.config();
  std::map<NodeId, std::vector<Micros>> free_at;  // per node: when each usable device is empty
  for (const auto& [ref, d] : s.devices()) {
    if (d.mode == sched::DeviceMode::kMig || d.draining || d.reconfiguring || d.reserved_for.valid()) continue;
    if (!r.model.empty() && d.model != r.model) continue;
    Micros t = s.now();
    for (SliceId id : d.slices) {
      auto v = s.slices().find(id);
      if (v != s.slices().end()) t = std::max(t, EndBound(v->second, config, s.jobs()));
    }
    free_at[ref.node].push_back(t);
  }
  Micros best = kNever;
  for (auto& [node, times] : free_at) best = std::min(best, Nth(times, static_cast<std::size_t>(std::max(1, r.gpus))));
  return best;
}

// When enough of the running slices `mine` selects have ended for `held + asked <= max` (each
// ending slice gives back one job, or its share).
template <class Mine>
Micros LimitBound(const sched::Scheduler& s, Mine mine_of, bool count_jobs, std::int64_t held, std::int64_t asked,
                  std::int64_t max) {
  std::vector<std::pair<Micros, MilliGpu>> mine;
  for (const auto& [id, v] : s.slices()) {
    auto j = s.jobs().find(v.job);
    if (j == s.jobs().end() || !mine_of(j->second)) continue;
    mine.emplace_back(EndBound(v, s.config(), s.jobs()),
                      v.milli * static_cast<MilliGpu>(std::max<std::size_t>(1, v.devices.size())));
  }
  std::sort(mine.begin(), mine.end());
  for (const auto& [t, milli] : mine) {
    if (t == kNever) return kNever;
    held -= count_jobs ? 1 : milli;
    if (held + asked <= max) return t;
  }
  return kNever;
}

Micros CapBound(const sched::Scheduler& s, const sched::UserCap& r) {
  return LimitBound(
      s, [&](const sched::JobView& j) { return j.user == r.user && j.queue == r.queue; },
      r.limit == sched::UserCap::Limit::kJobs, r.held, r.asked, r.max);
}

Micros TeamBound(const sched::Scheduler& s, const sched::TeamLimit& r) {
  return LimitBound(
      s, [&](const sched::JobView& j) { return j.team == r.team && j.queue == r.queue; }, false, r.held, r.asked,
      r.limit);
}

Micros ReservationBound(const sched::Scheduler& s, const sched::WaitingForReservation& r) {
  Micros t = s.now();
  for (DeviceIndex di : r.devices) {
    auto d = s.devices().find(sched::DeviceRef{r.node, di});
    if (d == s.devices().end()) return kNever;
    for (SliceId id : d->second.slices) {
      auto v = s.slices().find(id);
      if (v != s.slices().end()) t = std::max(t, EndBound(v->second, s.config(), s.jobs()));
    }
  }
  return t;
}

}  // namespace

std::map<JobId, QueuePlace> QueuePlaces(const sched::Scheduler& s) {
  std::map<JobId, QueuePlace> out;
  for (const auto& q : s.config().queues) {
    const std::vector<JobId> ids = s.Pending(q.name);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      out[ids[i]] = QueuePlace{static_cast<int>(i) + 1, static_cast<int>(ids.size()), false};
    }
  }
  // First: nothing considered before it could take the room it waits for.
  for (JobId id : s.Pending()) {
    auto it = out.find(id);
    if (it != out.end()) it->second.first = true;
    auto w = s.PendingReason(id);
    if (!w || !std::holds_alternative<sched::NeverFits>(*w)) break;
  }
  return out;
}

std::optional<Micros> WaitEndsBy(const sched::Scheduler& s, const sched::WaitReason& reason) {
  const Micros t = std::visit(
      Overloaded{
          [&](const sched::NoDeviceFits& r) {
            switch (r.kind) {
              case sched::SliceKind::kShared:
              case sched::SliceKind::kMps: return SharedBound(s, r);
              case sched::SliceKind::kWhole: return WholeBound(s, r);
              case sched::SliceKind::kMig: break;  // a layout change decides: not told here
            }
            return kNever;
          },
          [&](const sched::UserCap& r) { return CapBound(s, r); },
          [&](const sched::WaitingForReservation& r) { return ReservationBound(s, r); },
          [](const sched::ReservedForOther&) { return kNever; },
          [](const sched::DrainingForMig&) { return kNever; },
          [](const sched::NeverFits&) { return kNever; },
          [](const sched::MpsServesOtherUser&) { return kNever; },  // another user's jobs: not told
          [](const sched::Held&) { return kNever; },  // until an admin releases it
          [&](const sched::TeamLimit& r) { return TeamBound(s, r); },
      },
      reason);
  return Bound(t, s.now());
}

}  // namespace gpuslice::daemon
