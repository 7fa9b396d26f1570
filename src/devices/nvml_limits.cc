// Driver-enforced memory limits through NVML (r615+, CUDA 13.4 memory partitioning): a hard and
// a soft limit per cgroup v2 directory and device. Part of NvmlBackend (nvml.h); the entry points
// are resolved by NvmlBackend::Open() (nvml_api.h), never linked. The structs' layout is from
// NVIDIA's published reference and carries no version field (nvml_abi.h), so they are used only
// on a driver branch that has them and every set is read back.
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "devices/nvml.h"
#include "devices/nvml_api.h"

namespace gpuslice::devices {

using namespace nvml;  // NOLINT: .cc only; the ABI names are short on purpose

int NvmlBackend::driver_major() const { return std::atoi(driver_version_.c_str()); }

bool NvmlBackend::SupportsMemoryLimits(DeviceIndex index) {
  if (api_->set_memory_limits == nullptr || api_->get_memory_limits == nullptr) return false;
  if (driver_major() < kMemoryLimitsFirstDriver) return false;
  std::lock_guard lock(mu_);
  auto dev = Handle(index);
  if (!dev.ok()) return false;
  // MIG handles are not supported by the driver, nor is a device in MIG mode.
  if (api_->mig_mode) {
    unsigned cur = 0, pend = 0;
    if (api_->mig_mode(*dev, &cur, &pend) == kSuccess && (cur == kMigEnable || pend == kMigEnable)) return false;
  }
  return true;
}

Status NvmlBackend::SetMemoryLimit(DeviceIndex index, const std::string& cgroup_dir, Bytes soft, Bytes hard) {
  if (!SupportsMemoryLimits(index)) {
    return Unsupported(fmt::format("device {}: driver {} has no memory limits (needs r{}+ and a device "
                                   "outside MIG mode)",
                                   index.value(), driver_version_.empty() ? "?" : driver_version_,
                                   kMemoryLimitsFirstDriver));
  }
  if (cgroup_dir.empty() || cgroup_dir.front() != '/') {
    return InvalidArgument(fmt::format("memory limit: cgroup '{}' is not an absolute path", cgroup_dir));
  }
  if (soft < 0 || hard <= 0 || soft > hard) {
    return InvalidArgument(fmt::format("memory limit: soft {} and hard {} bytes (need 0 <= soft <= hard, hard > 0)",
                                       soft, hard));
  }
  std::lock_guard lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(Device dev, Handle(index));
  SetMemoryLimits set{cgroup_dir.c_str(), static_cast<unsigned long long>(soft), static_cast<unsigned long long>(hard)};
  if (Return r = api_->set_memory_limits(dev, &set); r != kSuccess) {
    return Error(fmt::format("device {}: nvmlDeviceSetMemoryLimits_v1 on {}", index.value(), cgroup_dir), r);
  }
  // The struct layout is not confirmed against a header: a driver that reads it differently
  // shows here, and the slice then falls back to another mechanism instead of running unlimited.
  GetMemoryLimits got{cgroup_dir.c_str(), 0, 0, 0};
  if (Return r = api_->get_memory_limits(dev, &got); r != kSuccess) {
    return Error(fmt::format("device {}: nvmlDeviceGetMemoryLimits_v1 on {} (reading back the limit)",
                             index.value(), cgroup_dir),
                 r);
  }
  if (got.soft_limit != set.soft_limit || got.hard_limit != set.hard_limit) {
    return Internal(fmt::format("device {}: the driver kept soft {} / hard {} bytes on {} after being asked for "
                                "{} / {}: not relying on it",
                                index.value(), got.soft_limit, got.hard_limit, cgroup_dir, set.soft_limit,
                                set.hard_limit));
  }
  return Status::Ok();
}

}  // namespace gpuslice::devices
