#pragma once
// MIG actuation: brings one GPU's MIG instances to a wanted layout through any DeviceBackend
// (NVML, the fake, a scripted wrapper), and finds (or makes) the MIG device of one placement.
// The daemon applies the scheduler's ReconfigureMig and builds a MIG slice's
// CUDA_VISIBLE_DEVICES with it. Stateless: as thread-safe as the backend it is given.

#include <string>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/status.h"
#include "devices/backend.h"

namespace gpuslice::devices {

// NVML compute-instance profile that uses all `compute_slices` of its GPU instance.
int FullCiProfile(int compute_slices);

// `mig_mode` on: MIG mode on, the GPU instances of `index` that are not in `layout` destroyed,
// the missing ones created, each with one compute instance spanning it (an instance that
// already has one is kept as it is: kept, or made before a crash); `layout` may be empty (an
// admin put the GPU in MIG mode before any MIG work came). Off: every instance destroyed, then
// MIG mode off (`layout` must be empty). `model` (may be null) gives each profile's compute
// slices. Stops at the first error and returns it; what was done stays done, so the caller
// reads the device back to learn the layout it has.
Status ApplyMigLayout(DeviceBackend& backend, DeviceIndex index, bool mig_mode, const MigLayout& layout,
                      const DeviceModel* model);

// The MIG device UUID of the GPU instance placed at (`profile`, `start`) on `index`, creating
// the GPU instance and its compute instance when missing. NotFound when the device is gone.
Result<std::string> MigDeviceUuid(DeviceBackend& backend, DeviceIndex index, int profile,
                                  int start);

}  // namespace gpuslice::devices
