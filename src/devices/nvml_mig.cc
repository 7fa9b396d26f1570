// MIG control through NVML: the mode, and GPU and compute instances made and destroyed (the
// actuation the scheduler's MIG decisions need). Part of NvmlBackend (nvml.h); the driver entry
// points are in nvml_api.h, resolved by NvmlBackend::Open() in nvml.cc.
#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "devices/nvml.h"
#include "devices/nvml_api.h"

namespace gpuslice::devices {

using namespace nvml;  // NOLINT: .cc only; the ABI names are short on purpose

// ---- MIG ----------------------------------------------------------------------------------

bool NvmlBackend::HasProcesses(Device dev, const std::vector<unsigned>* gi_filter) {
  auto procs = RunningProcesses(dev);
  if (!procs.ok()) return false;
  for (const auto& p : *procs) {
    if (gi_filter == nullptr) return true;
    if (std::find(gi_filter->begin(), gi_filter->end(), p.gi) != gi_filter->end()) return true;
  }
  return false;
}

Status NvmlBackend::SetMigMode(DeviceIndex index, bool enabled) {
  std::lock_guard lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(Device dev, Handle(index));
  if (!api_->mig_mode || !api_->set_mig_mode) return Unsupported("MIG is not supported by this driver");
  unsigned cur = 0, pend = 0;
  if (Return r = api_->mig_mode(dev, &cur, &pend); r != kSuccess) {
    return Error(fmt::format("device {}: nvmlDeviceGetMigMode", index.value()), r);
  }
  const unsigned want = enabled ? kMigEnable : kMigDisable;
  if (cur == want && pend == want) return Status::Ok();
  if (HasProcesses(dev, nullptr)) {
    return FailedPrecondition(
        fmt::format("device {}: processes running; stop them before changing MIG mode", index.value()));
  }
  Return activation = kSuccess;
  if (Return r = api_->set_mig_mode(dev, want, &activation); r != kSuccess) {
    return Error(fmt::format("device {}: nvmlDeviceSetMigMode", index.value()), r);
  }
  if (activation != kSuccess) {
    // Ampere: the mode is pending until a GPU reset; report it, the caller decides.
    return Error(fmt::format("device {}: MIG mode pending (GPU reset needed)", index.value()), activation);
  }
  return Status::Ok();
}

Result<unsigned> NvmlBackend::ProfileEnum(Device dev, int profile_id, GpuInstanceProfileInfo* info) {
  if (!api_->gi_profile_info) return Unsupported("MIG profiles not supported by this driver");
  for (unsigned p = 0; p < kProfileIndexLimit; ++p) {
    GpuInstanceProfileInfo pinfo{};
    Return r = api_->gi_profile_info(dev, p, &pinfo);
    if (r == kErrorInvalidArgument) break;  // past the last profile this driver knows
    if (r == kSuccess && static_cast<int>(pinfo.id) == profile_id) {
      *info = pinfo;
      return p;
    }
  }
  return InvalidArgument(fmt::format("no GPU-instance profile id {} on this device", profile_id));
}

Result<devices::GpuInstanceInfo> NvmlBackend::CreateGpuInstance(DeviceIndex index, int profile_id, int start) {
  std::lock_guard lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(Device dev, Handle(index));
  if (!api_->create_gi || !api_->gi_info) return Unsupported("MIG instance creation not supported by this driver");
  GpuInstanceProfileInfo pinfo{};
  GPUSLICE_RETURN_IF_ERROR(ProfileEnum(dev, profile_id, &pinfo).status());
  GPUSLICE_ASSIGN_OR_RETURN(auto existing, GpuInstances(dev));
  for (const auto& gi : existing) {
    if (gi.profile_id == profile_id && gi.start == start) return gi;  // retry after a crash
  }
  // The placement's size is in memory slices, which is not the profile's (compute) slice
  // count for e.g. 1g.20gb: take it from the driver's legal placements for this start.
  GpuInstancePlacement placement{static_cast<unsigned>(start), pinfo.slice_count};
  bool legal = api_->placements == nullptr;
  if (api_->placements) {
    std::vector<GpuInstancePlacement> legal_placements(16);
    unsigned n = static_cast<unsigned>(legal_placements.size());
    if (api_->placements(dev, pinfo.id, legal_placements.data(), &n) == kSuccess) {
      for (unsigned i = 0; i < n && i < legal_placements.size(); ++i) {
        if (legal_placements[i].start == placement.start) {
          placement.size = legal_placements[i].size;
          legal = true;
        }
      }
    } else {
      legal = true;  // let the create call judge
    }
  }
  if (!legal) {
    return InvalidArgument(fmt::format("device {}: GPU-instance profile {} cannot start at memory slice {}",
                                       index.value(), profile_id, start));
  }
  GpuInstance gi = nullptr;
  if (Return r = api_->create_gi(dev, pinfo.id, &placement, &gi); r != kSuccess) {
    return Error(fmt::format("device {}: create GPU instance profile {} at {}", index.value(), profile_id, start), r);
  }
  nvml::GpuInstanceInfo info{};
  if (Return r = api_->gi_info(gi, &info); r != kSuccess) return Error("nvmlGpuInstanceGetInfo", r);
  devices::GpuInstanceInfo out;
  out.id = GpuInstanceId(info.id);
  out.profile_id = profile_id;
  out.start = static_cast<int>(info.placement.start);
  out.size = static_cast<int>(info.placement.size);
  out.memory_total = Reading<Bytes>::Of(static_cast<Bytes>(pinfo.memory_size_mb) * kMiB);
  return out;
}

Result<devices::ComputeInstanceInfo> NvmlBackend::CreateComputeInstance(DeviceIndex index, GpuInstanceId gi_id,
                                                               int ci_profile_id) {
  std::lock_guard lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(Device dev, Handle(index));
  if (!api_->gi_by_id || !api_->create_ci || !api_->ci_profile_info || !api_->ci_info) {
    return Unsupported("MIG compute instances not supported by this driver");
  }
  GpuInstance gi = nullptr;
  if (Return r = api_->gi_by_id(dev, gi_id.value(), &gi); r != kSuccess) {
    return Error(fmt::format("device {}: GPU instance {}", index.value(), gi_id.value()), r);
  }
  // `ci_profile_id` is a profile id (as `nvidia-smi mig -lcip` shows); the profile-info call
  // takes an index. Enumerate the indexes and match the id, as ProfileEnum does for GIs.
  ComputeInstanceProfileInfo cinfo{};
  bool found = false;
  for (unsigned p = 0; p < kProfileIndexLimit && !found; ++p) {
    ComputeInstanceProfileInfo pinfo{};
    Return r = api_->ci_profile_info(gi, p, kComputeInstanceEngineProfileShared, &pinfo);
    if (r == kErrorInvalidArgument) break;  // past the last profile this driver knows
    if (r == kSuccess && static_cast<int>(pinfo.id) == ci_profile_id) {
      cinfo = pinfo;
      found = true;
    }
  }
  if (!found) {
    return InvalidArgument(fmt::format("device {} GI {}: no compute-instance profile id {} in this GPU instance",
                                       index.value(), gi_id.value(), ci_profile_id));
  }
  // Always a new compute instance: an existing one may belong to another caller (a retry
  // after a crash looks at the GI's compute instances first).
  ComputeInstance ci = nullptr;
  if (Return r = api_->create_ci(gi, cinfo.id, &ci); r != kSuccess) {
    return Error(fmt::format("device {} GI {}: create compute instance of profile {}", index.value(),
                             gi_id.value(), ci_profile_id),
                 r);
  }
  nvml::ComputeInstanceInfo info{};
  if (Return r = api_->ci_info(ci, &info); r != kSuccess) return Error("nvmlComputeInstanceGetInfo", r);
  devices::ComputeInstanceInfo out;
  out.id = ComputeInstanceId(info.id);
  out.profile_id = ci_profile_id;
  GPUSLICE_ASSIGN_OR_RETURN(auto migs, MigDevices(dev));
  for (const auto& m : migs) {
    if (m.gi == gi_id.value() && m.ci == info.id) out.uuid = m.uuid;
  }
  return out;
}

Status NvmlBackend::DestroyComputeInstance(DeviceIndex index, GpuInstanceId gi_id, ComputeInstanceId ci_id) {
  std::lock_guard lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(Device dev, Handle(index));
  if (!api_->gi_by_id || !api_->ci_by_id || !api_->destroy_ci) return Unsupported("MIG not supported by this driver");
  GpuInstance gi = nullptr;
  if (api_->gi_by_id(dev, gi_id.value(), &gi) != kSuccess) return Status::Ok();  // already gone
  ComputeInstance ci = nullptr;
  if (api_->ci_by_id(gi, ci_id.value(), &ci) != kSuccess) return Status::Ok();
  std::vector<unsigned> filter{gi_id.value()};
  if (HasProcesses(dev, &filter)) {
    return FailedPrecondition(fmt::format("device {} GI {}: processes running", index.value(), gi_id.value()));
  }
  if (Return r = api_->destroy_ci(ci); r != kSuccess) {
    return Error(fmt::format("device {} GI {} CI {}: destroy", index.value(), gi_id.value(), ci_id.value()), r);
  }
  return Status::Ok();
}

Status NvmlBackend::DestroyGpuInstance(DeviceIndex index, GpuInstanceId gi_id) {
  std::lock_guard lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(Device dev, Handle(index));
  if (!api_->gi_by_id || !api_->destroy_gi) return Unsupported("MIG not supported by this driver");
  GpuInstance gi = nullptr;
  if (api_->gi_by_id(dev, gi_id.value(), &gi) != kSuccess) return Status::Ok();  // already gone
  std::vector<unsigned> filter{gi_id.value()};
  if (HasProcesses(dev, &filter)) {
    return FailedPrecondition(fmt::format("device {} GI {}: processes running", index.value(), gi_id.value()));
  }
  // The driver refuses to destroy a GI that still has CIs: destroy them first.
  GPUSLICE_ASSIGN_OR_RETURN(auto migs, MigDevices(dev));
  for (const auto& m : migs) {
    if (m.gi != gi_id.value() || !api_->ci_by_id || !api_->destroy_ci) continue;
    ComputeInstance ci = nullptr;
    if (api_->ci_by_id(gi, m.ci, &ci) == kSuccess) {
      if (Return r = api_->destroy_ci(ci); r != kSuccess) return Error("nvmlComputeInstanceDestroy", r);
    }
  }
  if (Return r = api_->destroy_gi(gi); r != kSuccess) {
    return Error(fmt::format("device {} GI {}: destroy", index.value(), gi_id.value()), r);
  }
  return Status::Ok();
}

// The driver's GPU-instance profiles with their legal placements. The profile info gives an
// index -> id mapping (ids are what placements and creation take), compute slices, instance count,
// SMs and memory; the placements give the starts and the size in memory slices. A name is not in
// the v1 info: the catalogue's for the same id is kept, else one is made like nvidia-smi's.
Result<std::vector<MigProfile>> NvmlBackend::MigProfiles(DeviceIndex index) {
  std::lock_guard lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(Device dev, Handle(index));
  if (!api_->gi_profile_info || !api_->placements) return Unsupported("MIG profiles not readable from this driver");
  const DeviceModel* model = nullptr;
  char buf[kNameBufferSize] = {};
  if (api_->name && api_->name(dev, buf, sizeof(buf)) == kSuccess) {
    if (auto m = FindModel(std::string(buf, strnlen(buf, sizeof(buf)))); m.ok()) model = *m;
  }
  std::vector<MigProfile> out;
  for (unsigned p = 0; p < kProfileIndexLimit; ++p) {
    GpuInstanceProfileInfo info{};
    Return r = api_->gi_profile_info(dev, p, &info);
    if (r == kErrorInvalidArgument) break;  // past the last profile this driver knows
    if (r != kSuccess) continue;            // not offered on this device
    unsigned n = 0;
    Return pr = api_->placements(dev, info.id, nullptr, &n);
    if (pr != kSuccess && pr != kErrorInsufficientSize) continue;
    std::vector<GpuInstancePlacement> placements(n + 8);
    n = static_cast<unsigned>(placements.size());
    if (api_->placements(dev, info.id, placements.data(), &n) != kSuccess || n == 0) continue;
    MigProfile m;
    m.id = static_cast<int>(info.id);
    m.nvml_index = static_cast<int>(p);
    m.compute_slices = static_cast<int>(info.slice_count);
    m.memory = static_cast<Bytes>(info.memory_size_mb) * kMiB;
    m.sm_count = static_cast<int>(info.multiprocessor_count);
    m.max_instances = static_cast<int>(info.instance_count);
    // NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 / 2_SLICE_REV1 (+me) and the ALL_ME pair.
    m.media_extensions = p == 0x7 || p == 0x8 || p == 0xF || p == 0x10;
    m.memory_slices = static_cast<int>(placements[0].size);
    for (unsigned i = 0; i < std::min<unsigned>(n, static_cast<unsigned>(placements.size())); ++i)
      m.placement_starts.push_back(static_cast<int>(placements[i].start));
    const MigProfile* known = model ? model->FindProfileById(m.id) : nullptr;
    m.name = known ? known->name
                   : fmt::format("{}g.{}gb{}", m.compute_slices, (m.memory + kGiB - 1) / kGiB,
                                 m.media_extensions ? "+me" : "");
    out.push_back(std::move(m));
  }
  if (out.empty()) return Unsupported(fmt::format("device {}: the driver offers no MIG profiles", index.value()));
  return out;
}

}  // namespace gpuslice::devices
