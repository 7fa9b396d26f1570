#include "devices/mig_actuator.h"

#include <algorithm>

#include <fmt/format.h>

namespace gpuslice::devices {

int FullCiProfile(int compute_slices) {
  switch (compute_slices) {
    case 1: return 0;
    case 2: return 1;
    case 3: return 2;
    case 4: return 3;
    case 7: return 4;
    case 8: return 5;
    case 6: return 6;
    default: return 0;
  }
}

Status ApplyMigLayout(DeviceBackend& backend, DeviceIndex idx, bool mig_mode, const MigLayout& layout,
                      const DeviceModel* model) {
  if (!mig_mode && !layout.empty()) {
    return InvalidArgument(fmt::format("device {}: a MIG layout with MIG mode off", idx.value()));
  }
  Status st;
  if (mig_mode) st = backend.SetMigMode(idx, true);
  auto cur = backend.ListDevices();
  if (st.ok() && !cur.ok()) st = cur.status();
  if (st.ok()) {
    for (const auto& d : *cur) {
      if (d.index != idx) continue;
      for (const auto& gi : d.gpu_instances) {
        bool keep = std::any_of(layout.begin(), layout.end(), [&](const MigPlacement& p) {
          return p.profile_id == gi.profile_id && p.start == gi.start;
        });
        if (!keep && st.ok()) st = backend.DestroyGpuInstance(idx, gi.id);
      }
    }
  }
  // The way out of MIG mode (the scheduler releases a MIG device no MIG work holds while other
  // work waits, or an admin's order): its instances gone, MIG mode off.
  if (!mig_mode && st.ok()) st = backend.SetMigMode(idx, false);
  for (const auto& p : layout) {
    if (!st.ok()) break;
    auto gi = backend.CreateGpuInstance(idx, p.profile_id, p.start);
    if (!gi.ok()) {
      st = gi.status();
      break;
    }
    if (!gi->compute_instances.empty()) continue;  // kept, or made before a crash
    const MigProfile* prof = model ? model->FindProfileById(p.profile_id) : nullptr;
    auto ci = backend.CreateComputeInstance(idx, gi->id,
                                            FullCiProfile(prof ? prof->compute_slices : 1));
    if (!ci.ok()) st = ci.status();
  }
  return st;
}

Result<std::string> MigDeviceUuid(DeviceBackend& backend, DeviceIndex idx, int profile, int start) {
  GPUSLICE_ASSIGN_OR_RETURN(auto devs, backend.ListDevices());
  for (const auto& d : devs) {
    if (d.index != idx) continue;
    for (const auto& gi : d.gpu_instances) {
      if (gi.profile_id != profile || gi.start != start) continue;
      if (!gi.compute_instances.empty()) return gi.compute_instances[0].uuid;
      const MigProfile* prof = d.model ? d.model->FindProfileById(profile) : nullptr;
      GPUSLICE_ASSIGN_OR_RETURN(auto ci, backend.CreateComputeInstance(
                                             idx, gi.id, FullCiProfile(prof ? prof->compute_slices : 1)));
      return ci.uuid;
    }
    GPUSLICE_ASSIGN_OR_RETURN(auto gi, backend.CreateGpuInstance(idx, profile, start));
    const MigProfile* prof = d.model ? d.model->FindProfileById(profile) : nullptr;
    GPUSLICE_ASSIGN_OR_RETURN(auto ci, backend.CreateComputeInstance(
                                           idx, gi.id, FullCiProfile(prof ? prof->compute_slices : 1)));
    return ci.uuid;
  }
  return NotFound(fmt::format("device {}: gone", idx.value()));
}

}  // namespace gpuslice::devices
