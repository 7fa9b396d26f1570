// Reservations: devices kept empty for a whole-GPU job that has waited long enough.
// Part of Scheduler::Impl (scheduler_impl.h); see scheduler.cc for the order of an event.
#include "sched/scheduler_impl.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace gpuslice::sched {

// ---------------------------------------------------------------- reservations
// Without them a job needing several whole GPUs can wait forever while single-GPU jobs take
// each device as it frees up. Once a whole-GPU job has waited its queue's reserve_after, the
// devices it will get are chosen and kept empty (no new slice may take them) until they are
// all free; then it starts there. One reservation at a time, for the first job in queue
// order that qualifies. The host is the one whose devices should free up soonest by what
// is known: fewest slices without a time limit, then the earliest latest deadline, then the
// fewest slices, then the lowest node; on it the devices in the same order, then by index.

void Scheduler::Impl::MaybeReserve() {
  // The search passes over a job asking as many devices of a model as one that found no host,
  // or more: right, as ReservationFor() depends on nothing else of a job.
  const auto reserve = [this](const Resolved& r) {
    auto c = ReservationFor(r);
    if (!c) return false;
    reservations_.Hold({r.job, c->node, c->devices});
    for (DeviceIndex di : c->devices) {
      // (`job` by value: clang 14, the fuzz build's compiler, cannot capture a binding.)
      cluster_.Mutate(DeviceRef{c->node, di}, [job = r.job](DeviceView& d) { d.reserved_for = job; });
    }
    std::vector<std::uint32_t> devs;
    for (DeviceIndex di : c->devices) devs.push_back(di.value());
    // A decision also makes the event that caused it durable in the daemon's journal.
    out_.push_back(Reserve{r.job, c->node, c->devices,
                           fmt::format("job {} has waited {}: devices {} of node {} are kept for it", r.job.value(),
                                       FormatDuration(now_ - r.submit), fmt::join(devs, ","), c->node.value())});
    ServeReservation();  // already free: starts at once
    return true;
  };
  reservations_.Search(pending_.reserving(), now_, [this](const Resolved& r) { return !CapBlocks(r); }, reserve);
}

std::optional<Scheduler::Impl::Choice> Scheduler::Impl::ReservationFor(const Resolved& r) const {
  using Cost = std::tuple<int, Micros, int>;  // (slices without a limit, latest deadline, slices)
  auto cost_of = [&](const DeviceView& d) {
    Cost c{0, 0, static_cast<int>(d.slices.size())};
    for (SliceId sid : d.slices) {
      const SliceView& sv = cluster_.slices().at(sid);
      if (sv.deadline == 0) ++std::get<0>(c);
      std::get<1>(c) = std::max(std::get<1>(c), sv.deadline);
    }
    return c;
  };
  std::optional<std::pair<Cost, Choice>> best;
  for (const auto& [nid, indices] : cluster_.nodes()) {
    std::vector<std::pair<Cost, DeviceIndex>> usable;
    for (DeviceIndex di : indices) {
      const DeviceView& d = cluster_.devices().at({nid, di});
      if (d.mode == DeviceMode::kMig || d.draining || d.reconfiguring || d.admin_drained || !ModelOk(r, d))
        continue;
      usable.emplace_back(cost_of(d), di);
    }
    if (static_cast<int>(usable.size()) < r.gpus) continue;
    std::sort(usable.begin(), usable.end());
    Cost host{0, 0, 0};
    Choice c{nid, {}, std::nullopt};
    for (int i = 0; i < r.gpus; ++i) {
      const Cost& dc = usable[i].first;
      std::get<0>(host) += std::get<0>(dc);
      std::get<1>(host) = std::max(std::get<1>(host), std::get<1>(dc));
      std::get<2>(host) += std::get<2>(dc);
      c.devices.push_back(usable[i].second);
    }
    std::sort(c.devices.begin(), c.devices.end());
    if (!best || host < best->first) best.emplace(host, std::move(c));
  }
  if (!best) return std::nullopt;
  return best->second;
}

// Starts the reserved job once its devices are all empty (and its user's cap allows).
void Scheduler::Impl::ServeReservation() {
  const Reservations::Reservation* res = reservations_.held();
  if (!res) return;
  const Resolved& r = jobs_.RecordOf(res->job);
  for (DeviceIndex di : res->devices) {
    const DeviceView& d = cluster_.devices().at({res->node, di});
    if (!d.slices.empty() || d.mode != DeviceMode::kFree) return;
  }
  if (CapBlocks(r)) return;
  Start(r, Choice{res->node, res->devices, std::nullopt});  // releases it
}

// Gives the devices back (the job started, left the queue, or a device went away).
void Scheduler::Impl::ReleaseReservation() {
  std::optional<Reservations::Reservation> res = reservations_.Release();
  if (!res) return;
  for (DeviceIndex di : res->devices) {
    auto it = cluster_.devices().find({res->node, di});
    if (it != cluster_.devices().end()) cluster_.Mutate(it->second, [](DeviceView& d) { d.reserved_for = JobId(); });
  }
}
void Scheduler::Impl::ReleaseReservationOf(JobId job) {
  if (reservations_.Holds(job)) ReleaseReservation();
}

}  // namespace gpuslice::sched
