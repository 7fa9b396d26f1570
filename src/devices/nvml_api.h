#pragma once
// Private to the NVML backend (nvml.cc, nvml_mig.cc): the driver entry points NvmlBackend::Open()
// resolves with dlsym, and the limits both files share. Not for other code: the contract is
// nvml.h.

#include "devices/nvml.h"
#include "devices/nvml_abi.h"

namespace gpuslice::devices {

struct NvmlBackend::Api {
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::SystemGetDriverVersionFn driver_version = nullptr;
  nvml::DeviceGetCountFn count = nullptr;
  nvml::DeviceGetHandleByIndexFn handle_by_index = nullptr;
  nvml::DeviceGetStringFn name = nullptr;
  nvml::DeviceGetStringFn uuid = nullptr;
  nvml::DeviceGetMemoryInfoFn memory = nullptr;
  nvml::DeviceGetMemoryInfoV2Fn memory_v2 = nullptr;
  nvml::DeviceGetSamplesFn samples = nullptr;
  nvml::DeviceGetProcessUtilizationFn process_util = nullptr;
  nvml::DeviceGetRunningProcessesFn compute_procs = nullptr;
  nvml::DeviceGetClockInfoFn clock = nullptr;
  nvml::DeviceGetUIntFn power = nullptr;
  nvml::DeviceGetTemperatureFn temperature = nullptr;
  nvml::DeviceGetULongLongFn energy = nullptr;
  nvml::DeviceGetMigModeFn mig_mode = nullptr;
  nvml::DeviceSetMigModeFn set_mig_mode = nullptr;
  nvml::DeviceGetUIntFn max_mig_devices = nullptr;
  nvml::DeviceGetMigDeviceHandleByIndexFn mig_handle = nullptr;
  nvml::DeviceGetUIntFn mig_gi_id = nullptr;
  nvml::DeviceGetUIntFn mig_ci_id = nullptr;
  nvml::DeviceGetGpuInstanceProfileInfoFn gi_profile_info = nullptr;
  nvml::DeviceGetGpuInstancesFn gpu_instances = nullptr;
  nvml::DeviceGetGpuInstanceByIdFn gi_by_id = nullptr;
  nvml::DeviceCreateGpuInstanceWithPlacementFn create_gi = nullptr;
  nvml::DeviceGetGpuInstancePossiblePlacementsFn placements = nullptr;
  nvml::GpuInstanceGetInfoFn gi_info = nullptr;
  nvml::GpuInstanceDestroyFn destroy_gi = nullptr;
  nvml::GpuInstanceGetComputeInstanceProfileInfoFn ci_profile_info = nullptr;
  nvml::GpuInstanceCreateComputeInstanceFn create_ci = nullptr;
  nvml::GpuInstanceGetComputeInstancesFn compute_instances = nullptr;
  nvml::GpuInstanceGetComputeInstanceByIdFn ci_by_id = nullptr;
  nvml::ComputeInstanceGetInfoFn ci_info = nullptr;
  nvml::ComputeInstanceDestroyFn destroy_ci = nullptr;
  // r615+ memory partitioning (nvml_limits.cc); both or neither are used.
  nvml::DeviceSetMemoryLimitsFn set_memory_limits = nullptr;
  nvml::DeviceGetMemoryLimitsFn get_memory_limits = nullptr;
};

// Profile enumerations run until the driver says INVALID_ARGUMENT (as nvml.h asks); this bound
// only stops a driver that never says it. Drivers so far have 0x0A..0x12 GPU-instance profiles.
inline constexpr unsigned kProfileIndexLimit = 256;

}  // namespace gpuslice::devices
