// Devices: DeviceAdded / DeviceRemoved, and the records the invariants compare. The devices and
// the indexes over them are the cluster state's (cluster_state.h), which every change to a
// device goes through.
// Part of Scheduler::Impl (scheduler_impl.h); see scheduler.cc for the order of an event.
#include "sched/scheduler_impl.h"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

namespace gpuslice::sched {

// ---------------------------------------------------------------- devices
// MIG instances with a slice, sorted by start, as MigBooks::InUse() keeps them (for
// CheckInvariants).
MigLayout Scheduler::Impl::InUseFromSlices(const DeviceView& d) const {
  MigLayout in_use;
  for (SliceId s : d.slices) {
    const SliceView& sv = cluster_.slices().at(s);
    if (sv.mig) in_use.push_back(*sv.mig);
  }
  MigBooks::SortByStart(in_use);
  return in_use;
}

void Scheduler::Impl::OnDeviceAdded(const DeviceAdded& e) {
  if (!cluster_.AddDevice(e)) return;  // idempotent: agents re-announce
  const std::size_t host = cluster_.nodes().at(e.device.node).size();
  placement_.HostResized(host - 1, host);  // the learned shapes' supply shares
  mig_.NoteUse(cluster_.devices().at(e.device), now_);
  Schedule(/*only=*/std::nullopt);
}

void Scheduler::Impl::OnDeviceRemoved(const DeviceRemoved& e) {
  auto it = cluster_.devices().find(e.device);
  if (it == cluster_.devices().end()) return;
  std::vector<SliceId> lost = it->second.slices;
  for (SliceId s : lost) {
    const JobId job = cluster_.slices().at(s).job;
    if (std::find(e.requeue.begin(), e.requeue.end(), job) != e.requeue.end()) {
      EndRunning(job, "requeued", /*requeue=*/true);
      continue;
    }
    out_.push_back(Stop{job, s, StopReason::kDeviceLost});
    ++stats_.stopped;
    EndRunning(job, "device-lost");
  }
  if (it->second.reserved_for.valid()) ReleaseReservation();  // chosen again later, elsewhere
  const std::size_t host = cluster_.nodes().at(e.device.node).size();
  cluster_.RemoveDevice(e.device);
  placement_.HostResized(host, host - 1);
  // Pending jobs that can no longer ever fit are rejected now rather than waiting forever.
  std::vector<std::pair<JobId, Status>> doomed;
  for (const auto& [k, r] : pending_.all()) {
    if (Status st = cluster_.Feasible(*r); !st.ok()) doomed.emplace_back(k.job, st);
  }
  for (const auto& [j, st] : doomed) RejectPending(j, st);
  Schedule(std::nullopt);
}

}  // namespace gpuslice::sched
