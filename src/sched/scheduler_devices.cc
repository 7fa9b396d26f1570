// Devices and the indexes over them: every change to a device goes through Mutate() (header) so
// the indexes stay exact; DeviceAdded / DeviceRemoved.
// Part of Scheduler::Impl (scheduler_impl.h); see scheduler.cc for the order of an event.
#include "sched/scheduler_impl.h"

#include <algorithm>
#include <climits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace gpuslice::sched {

// ---------------------------------------------------------------- devices and indexes
// MIG instances with a slice, sorted by start, as MigBooks::InUse() keeps them (for
// CheckInvariants).
MigLayout Scheduler::Impl::InUseFromSlices(const DeviceView& d) const {
  MigLayout in_use;
  for (SliceId s : d.slices) {
    const SliceView& sv = slices_.at(s);
    if (sv.mig) in_use.push_back(*sv.mig);
  }
  MigBooks::SortByStart(in_use);
  return in_use;
}

DeviceFacts Scheduler::Impl::Facts(const DeviceView& d) const {
  DeviceFacts f;
  f.model = d.catalogue;
  f.model_idx = ModelIndex(f.model);
  f.mps_limit = MpsLimit(d);
  f.in_use = InUseFact(d);
  return f;
}

void Scheduler::Impl::SetMode(DeviceView& d, DeviceMode mode) {
  mig_.CountMigMode((mode == DeviceMode::kMig) - (d.mode == DeviceMode::kMig));
  if (d.mode != mode && !d.slices.empty() && violation_.empty()) {
    violation_ = fmt::format("device {}/{} changed mode {} -> {} with {} slices", d.ref.node.value(),
                             d.ref.index.value(), DeviceModeName(d.mode), DeviceModeName(mode),
                             d.slices.size());
  }
  d.mode = mode;
}

void Scheduler::Impl::CountCapacity(const DeviceView& d, int delta) {
  std::vector<std::string> keys{std::string()};
  if (!d.model.empty()) keys.push_back(d.model);
  for (const std::string& key : keys) {
    Capacity& c = capacity_[key];
    if (!key.empty()) c.model = d.catalogue;
    int& n = host_model_count_[d.ref.node][key];
    if (n > 0) c.host_counts.erase(c.host_counts.find(n));
    n += delta;
    if (n > 0) c.host_counts.insert(n);
    // The most one shared or MPS slice can ask for on it (its context is booked too).
    Bytes mem = d.memory > 0 ? d.memory - d.context_reserve : LLONG_MAX;
    if (delta > 0) c.memories.insert(mem);
    else c.memories.erase(c.memories.find(mem));
    c.mig_capable += d.mig_capable ? delta : 0;
  }
  if (delta < 0) {
    auto& m = host_model_count_[d.ref.node];
    if (m[std::string()] == 0) host_model_count_.erase(d.ref.node);
  }
}

void Scheduler::Impl::OnDeviceAdded(const DeviceAdded& e) {
  if (devices_.contains(e.device)) return;  // idempotent: agents re-announce
  DeviceView d;
  d.ref = e.device;
  d.uuid = e.uuid;
  const DeviceModel* model = nullptr;
  if (auto m = FindModel(e.model); m.ok()) model = *m;
  d.model = model ? model->name : e.model;
  d.catalogue = model;
  d.reserved_memory = model ? std::clamp<Bytes>(e.reserved_memory, 0, model->memory) : 0;
  d.memory = model ? model->memory - d.reserved_memory : 0;
  d.context_reserve = model ? std::clamp<Bytes>(e.context_reserve, 0, d.memory) : 0;
  d.mig_capable = e.mig_capable && model && model->supports_mig();
  d.mode = e.mig_enabled && d.mig_capable ? DeviceMode::kMig : DeviceMode::kFree;
  if (d.mode == DeviceMode::kMig) d.layout = e.mig_layout;
  mig_.CountMigMode(d.mode == DeviceMode::kMig);
  std::set<DeviceIndex>& host = nodes_[e.device.node];
  host.insert(e.device.index);
  workload_.HostResized(host.size() - 1, host.size());  // the learned shapes' supply shares
  auto [it, _] = devices_.emplace(e.device, std::move(d));
  index_.Add(it->second, Facts(it->second));
  by_state_.MarkDirty(e.device.node, /*devices_changed=*/true);
  CountCapacity(it->second, +1);
  mig_.NoteUse(it->second, now_);
  Schedule(/*only=*/std::nullopt);
}

void Scheduler::Impl::OnDeviceRemoved(const DeviceRemoved& e) {
  auto it = devices_.find(e.device);
  if (it == devices_.end()) return;
  std::vector<SliceId> lost = it->second.slices;
  for (SliceId s : lost) {
    const JobId job = slices_.at(s).job;
    if (std::find(e.requeue.begin(), e.requeue.end(), job) != e.requeue.end()) {
      EndRunning(job, "requeued", /*requeue=*/true);
      continue;
    }
    out_.push_back(Stop{job, s, StopReason::kDeviceLost});
    ++stats_.stopped;
    EndRunning(job, "device-lost");
  }
  if (it->second.reserved_for.valid()) ReleaseReservation();  // chosen again later, elsewhere
  DeviceView& d = it->second;
  index_.Remove(d, Facts(d));
  by_state_.MarkDirty(e.device.node, /*devices_changed=*/true);
  CountCapacity(d, -1);
  mig_.Remove(d);
  std::set<DeviceIndex>& host = nodes_.at(e.device.node);
  host.erase(e.device.index);
  workload_.HostResized(host.size() + 1, host.size());
  if (host.empty()) nodes_.erase(e.device.node);
  devices_.erase(it);
  // Pending jobs that can no longer ever fit are rejected now rather than waiting forever.
  std::vector<std::pair<JobId, Status>> doomed;
  for (const auto& [k, r] : pending_.all()) {
    if (Status st = Feasible(*r); !st.ok()) doomed.emplace_back(k.job, st);
  }
  for (const auto& [j, st] : doomed) RejectPending(j, st);
  Schedule(std::nullopt);
}

}  // namespace gpuslice::sched
