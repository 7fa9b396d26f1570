#include "sched/cluster_state.h"

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace gpuslice::sched {

bool ClusterState::AddDevice(const DeviceAdded& e) {
  if (devices_.contains(e.device)) return false;
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
  nodes_[e.device.node].insert(e.device.index);
  auto [it, _] = devices_.emplace(e.device, std::move(d));
  index_.Add(it->second, Facts(it->second));
  host_changed_(e.device.node, /*devices_changed=*/true);
  CountCapacity(it->second, +1);
  return true;
}

void ClusterState::RemoveDevice(const DeviceRef& ref) {
  auto it = devices_.find(ref);
  const DeviceView& d = it->second;
  assert(d.slices.empty() && "a device is removed once its slices have ended");
  index_.Remove(d, Facts(d));
  host_changed_(ref.node, /*devices_changed=*/true);
  CountCapacity(d, -1);
  mig_.Remove(d);
  std::set<DeviceIndex>& host = nodes_.at(ref.node);
  host.erase(ref.index);
  if (host.empty()) nodes_.erase(ref.node);
  devices_.erase(it);
}

Result<ClusterState::Allocation> ClusterState::TryAllocate(const Resolved& r, NodeId node,
                                                          const std::vector<DeviceIndex>& devices,
                                                          const std::optional<MigPlacement>& mig) {
  if (devices.empty() || (r.kind == SliceKind::kMig && (devices.size() != 1 || !mig)))
    return InvalidArgument(fmt::format("job {}: a {} slice on {} device(s){}", r.job.value(), SliceKindName(r.kind),
                                       devices.size(), mig ? " and a MIG instance" : ""));
  // Every device is checked before any changes.
  Allocation a;
  a.devices.reserve(devices.size());
  for (DeviceIndex di : devices) {
    auto it = devices_.find(DeviceRef{node, di});
    if (it == devices_.end() || !Holds(r, it->second, mig) ||
        std::find(a.devices.begin(), a.devices.end(), &it->second) != a.devices.end())
      return FailedPrecondition(fmt::format("device {}/{} cannot hold a {} slice of job {}", node.value(), di.value(),
                                            SliceKindName(r.kind), r.job.value()));
    a.devices.push_back(&it->second);
  }
  const DeviceView& first = *a.devices.front();
  SliceView s;
  s.slice = SliceId(++last_slice_);
  s.job = r.job;
  s.kind = r.kind;
  s.node = node;
  s.devices = devices;
  s.mig = mig;
  switch (r.kind) {
    case SliceKind::kWhole:
      // Each device is reserved in full (ReservedOn); the slice's figure is what the job can
      // count on on every one of its devices, which may be of different models.
      s.milli = kOneGpu;
      s.memory = first.memory;
      for (const DeviceView* dv : a.devices) s.memory = std::min(s.memory, dv->memory);
      break;
    case SliceKind::kShared:
    case SliceKind::kMps:
      s.milli = r.milli;
      s.memory = MemoryCap(r, first);
      break;
    case SliceKind::kMig: {
      const DeviceModel* m = first.catalogue;
      const MigProfile* p = m->FindProfileById(mig->profile_id);
      s.milli = p && m->mig_compute_slices > 0 ? kOneGpu * p->compute_slices / m->mig_compute_slices : 0;
      s.memory = p ? p->memory : 0;
      break;
    }
  }
  // The slice is recorded before the devices change.
  a.slice = slice_nodes_.Insert(slices_, s.slice, std::move(s)).first;
  const SliceView& rec = a.slice->second;
  for (const DeviceView* target : a.devices) {
    Mutate(*target, [&](DeviceView& dv) {
      if (dv.mode == DeviceMode::kFree) SetMode(dv, ModeFor(r.kind));
      dv.slices.insert(std::upper_bound(dv.slices.begin(), dv.slices.end(), rec.slice), rec.slice);
      dv.clients += 1;
      if (r.kind == SliceKind::kMps) dv.mps_user = r.user;
      if (r.kind != SliceKind::kMig) {
        dv.used_milli += rec.milli;
        dv.used_memory += ReservedOn(rec, dv);
      } else {
        mig_.AddInUse(dv, *rec.mig);
      }
    });
  }
  return a;
}

void ClusterState::Release(std::map<SliceId, SliceView>::iterator slice, std::span<const DeviceView* const> devices) {
  const SliceView& s = slice->second;
  for (const DeviceView* dv : devices) {
    Mutate(*dv, [&](DeviceView& d) {
      d.slices.erase(std::find(d.slices.begin(), d.slices.end(), s.slice));
      d.clients -= 1;
      if (s.kind != SliceKind::kMig) {
        d.used_milli -= s.milli;
        d.used_memory -= ReservedOn(s, d);
      } else {
        mig_.RemoveInUse(d, *s.mig);
      }
      if (d.slices.empty() && d.mode != DeviceMode::kMig) SetMode(d, DeviceMode::kFree);
      if (d.slices.empty()) d.mps_user.clear();  // its MPS server stops with the last client
    });
  }
  slice_nodes_.Erase(slices_, slice);
}

bool ClusterState::Holds(const Resolved& r, const DeviceView& d, const std::optional<MigPlacement>& mig) const {
  if (!CanHold(r, d, RoomOf(d)) || MpsServesOther(r, d)) return false;
  if (r.kind != SliceKind::kMig) return true;
  const MigLayout& in_use = mig_.InUse(d);
  return d.mode == DeviceMode::kMig && std::find(d.layout.begin(), d.layout.end(), *mig) != d.layout.end() &&
         std::find(in_use.begin(), in_use.end(), *mig) == in_use.end();
}

void ClusterState::SetMode(DeviceView& d, DeviceMode mode) {
  mig_.CountMigMode((mode == DeviceMode::kMig) - (d.mode == DeviceMode::kMig));
  if (d.mode != mode && !d.slices.empty() && violation_.empty()) {
    violation_ = fmt::format("device {}/{} changed mode {} -> {} with {} slices", d.ref.node.value(),
                             d.ref.index.value(), DeviceModeName(d.mode), DeviceModeName(mode),
                             d.slices.size());
  }
  d.mode = mode;
}

DeviceFacts ClusterState::Facts(const DeviceView& d) const {
  DeviceFacts f;
  f.model = d.catalogue;
  f.model_idx = ModelIndex(f.model);
  f.mps_limit = MpsLimit(d);
  f.in_use = InUseFact(d);
  return f;
}

void ClusterState::CountCapacity(const DeviceView& d, int delta) {
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

Status ClusterState::Feasible(const Resolved& r) const {
  std::string what = r.model.empty() ? "" : r.model + " ";
  auto it = capacity_.find(r.model);
  const Capacity* c = it == capacity_.end() ? nullptr : &it->second;
  switch (r.kind) {
    case SliceKind::kWhole:
      if (c && !c->host_counts.empty() && *c->host_counts.rbegin() >= r.gpus) return Status::Ok();
      return ResourceExhausted(fmt::format("no host has {} {}devices", r.gpus, what));
    case SliceKind::kShared:
    case SliceKind::kMps:
      if (c && !c->memories.empty() && *c->memories.rbegin() >= r.memory) return Status::Ok();
      return ResourceExhausted(fmt::format("no {}device has {} of memory", what, FormatBytes(r.memory)));
    case SliceKind::kMig:
      for (const auto& [name, cap] : capacity_) {
        if (name.empty() || cap.mig_capable == 0 || !cap.model) continue;
        if (!r.model.empty() && name != r.model) continue;
        if (cap.model->SmallestProfileFor(r.mig_need)) return Status::Ok();
      }
      return ResourceExhausted(fmt::format("no MIG-capable {}device has an instance with {}", what,
                                           FormatBytes(r.mig_need)));
  }
  return Internal("unknown kind");
}

}  // namespace gpuslice::sched
