// GET /v1/devices and the devices' recent history for the web page: each GPU as the scheduler
// holds it (mode, slices, MIG layout), as last sampled, and what caps its shared memory.
#include <cstdint>
#include <vector>

#include "core/catalogue.h"
#include "core/text.h"
#include "daemon/daemon_impl.h"
#include "daemon/ui.h"

namespace gpuslice::daemon {

Json Daemon::Impl::Devices() const {
  std::shared_lock lock(mu_);
  return DevicesLocked();
}

Json Daemon::Impl::DevicesLocked() const {
  Json arr = Json::array();
  for (const auto& [ref, d] : sched_->devices()) {
    api::DeviceView o;
    o.index = ref.index.value();
    o.uuid = d.uuid;
    o.model = d.model;
    o.memory = d.memory;
    o.mode = std::string(sched::DeviceModeName(d.mode));
    o.draining = d.draining;
    o.used_milli = d.used_milli;
    if (d.reserved_for.valid()) o.reserved_for = d.reserved_for.value();
    o.used_memory = d.used_memory;
    o.clients = d.clients;
    for (SliceId s : d.slices) o.slices.push_back(s.value());
    o.held_milli = d.used_milli;
    if (d.mode == sched::DeviceMode::kMig) o.held_milli = 0;
    for (const auto& p : d.layout) {
      api::DeviceView::MigPart part;
      part.profile = p.profile_id;
      part.start = p.start;
      if (d.catalogue != nullptr) {
        for (const MigProfile& mp : d.catalogue->mig_profiles) {
          if (mp.id != p.profile_id) continue;
          part.name = mp.name;
          part.memory = mp.memory;
          // Its compute share: the profile's compute slices of the GPU's.
          if (d.catalogue->mig_compute_slices > 0) {
            part.milli = kOneGpu * mp.compute_slices / d.catalogue->mig_compute_slices;
          }
        }
      }
      for (SliceId sid : d.slices) {
        auto v = sched_->slices().find(sid);
        if (v != sched_->slices().end() && v->second.mig && *v->second.mig == p) {
          part.slice = sid.value();
          o.held_milli += part.milli;
        }
      }
      o.mig_layout.push_back(part);
    }
    if (d.admin_drained) o.drained = d.drain_reason;
    o.mig_admin = std::string(sched::MigAdminName(d.mig_admin));
    o.mig_capable = d.mig_capable;
    if (auto s = latest_.find(static_cast<int>(ref.index.value())); s != latest_.end()) {
      if (s->second.gpu_util.ok()) o.util_percent = s->second.gpu_util.value() / 10.0;
      if (s->second.memory_used.ok()) o.memory_used = s->second.memory_used.value();
    }
    o.reserved_memory = d.reserved_memory;
    o.context_reserve = d.context_reserve;
    if (d.mode == sched::DeviceMode::kMig) {
      // In MIG mode since the start: only MIG instances, each a hardware memory partition.
      o.cap_shared = o.cap_mps = std::string(CapMechanismName(CapMechanism::kMig));
    } else if (auto m = cap_mechanisms_.find(static_cast<int>(ref.index.value())); m != cap_mechanisms_.end()) {
      o.cap_shared = std::string(CapMechanismName(m->second.shared));
      o.cap_mps = std::string(CapMechanismName(m->second.mps));
    }
    if (!d.mps_user.empty()) o.mps_user = EscapeInvalidUtf8(d.mps_user);
    arr.push_back(o.ToJson());
  }
  Json out{{"devices", arr}, {"simulated", opt_.simulated},
           {"backend", std::string(backend_->kind())},
           {"backend_description", backend_->description()}};
  if (opt_.simulated) out["note"] = "SIMULATED devices (no NVIDIA driver)";
  // Under MPS the driver attributes every client's work to the server: per-slice utilisation
  // is unknown there (never taken as idle), and this says why.
  out["mps_note"] = "MPS clients' utilisation is not measurable per client (NVML attributes it to the MPS server)";
  // Only when it cannot load (its path and versions are the host's: `gpuslice doctor` shows them).
  if (!interposer_.usable) out["interposer_problem"] = EscapeInvalidUtf8(interposer_.problem);
  return out;
}

Result<Json> Daemon::Impl::DeviceHistory(const std::map<std::string, std::string>& q) const {
  std::vector<std::uint32_t> indices;
  {
    std::shared_lock lock(mu_);
    for (const auto& [ref, d] : sched_->devices()) indices.push_back(ref.index.value());
  }
  return DeviceHistoryJson(q, agent_->DeviceSeries(), indices, Now(), opt_.simulated);
}

}  // namespace gpuslice::daemon
