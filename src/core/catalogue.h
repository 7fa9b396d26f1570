#pragma once
// The device catalogue: GPU models gpuslice knows, with memory, SM count, MPS client limit and
// MIG profile tables (keyed by slice counts, since profile names drift between drivers) with
// the legal placements of each profile. Facts from shared/reference/devices.md §1.
// Immutable static data; thread-safe.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice {

struct MigProfile {
  int id = 0;                 // NVML GPU-instance profile ID as `nvidia-smi mig -lgip` shows it
  std::string name;           // e.g. "1g.10gb" (driver-dependent; never key on it)
  int compute_slices = 0;     // the "Ng" part
  int memory_slices = 0;      // placement size on the memory-slice axis
  Bytes memory = 0;           // usable memory as reported (driver-dependent figure)
  int sm_count = 0;
  bool media_extensions = false;  // "+me": takes the GPU's only OFA/JPEG; at most one per GPU
  int max_instances = 0;
  std::vector<int> placement_starts;  // legal start memory slices
  // NVML_GPU_INSTANCE_PROFILE_* index to pass to nvmlDeviceGetGpuInstanceProfileInfo; the
  // index -> id mapping is derived from names (devices.md §1.1), verify on hardware.
  int nvml_index = -1;

  // True iff `start` is one of placement_starts (each of which keeps the range on the GPU).
  bool IsLegalStart(int start) const;
};

struct DeviceModel {
  std::string name;                  // canonical, e.g. "H100-80GB"
  std::vector<std::string> aliases;  // NVML names, e.g. "NVIDIA H100 80GB HBM3"
  Bytes memory = 0;
  // Set aside before shares are cut (sched::MemoryReserveFor): memory the driver keeps (the gap
  // between nvidia-smi's total and what CUDA's cuMemGetInfo reports; nvmlMemory_v2.reserved),
  // and what one process's CUDA context and modules take with lazy loading. Estimates, rounded
  // up (the context measured on an H200 only, see catalogue.cc): the driver's own figure replaces
  // the first where there is a driver, the config can override both, and tests/gpu/check.sh
  // measures both on a real GPU.
  Bytes driver_reserved = 0;
  Bytes context_reserve = 0;
  int sm_count = 0;
  int mps_max_clients = 0;           // per-device MPS client limit
  int mig_memory_slices = 0;         // 0: no MIG
  int mig_compute_slices = 0;
  int mig_max_instances = 0;         // most GPU instances at once (7 on A100/H100/..., 4 on A30)
  std::vector<MigProfile> mig_profiles;  // fewest memory slices first, then compute, +me last

  bool supports_mig() const { return mig_memory_slices > 0; }
  const MigProfile* FindProfileById(int id) const;
  // Smallest profile (fewest memory slices, then fewest compute slices, no +me) whose memory
  // is at least `need`; nullptr if none.
  const MigProfile* SmallestProfileFor(Bytes need) const;
  // Case-insensitive profile name ("1g.10gb", "1g.10gb+me") or decimal id ("15"); nullptr if none.
  const MigProfile* FindProfile(std::string_view name_or_id) const;
};

// One instance of a layout: profile at a start memory slice.
struct MigPlacement {
  int profile_id = 0;
  int start = 0;
  friend bool operator==(const MigPlacement&, const MigPlacement&) = default;
};
using MigLayout = std::vector<MigPlacement>;

std::span<const DeviceModel> AllModels();

// Replaces `model_name`'s MIG profile table with the one a driver reports (the driver wins over
// the catalogue: devices::MigTableDifferences says where they differ). The profiles are put in
// the catalogue's order; the model's memory- and compute-slice counts follow the largest profile.
// InvalidArgument (changing nothing) for an unknown model, an empty table, or a profile without
// slices or placements, or with a placement past the GPU. Start-up only: call it before anything
// holds profile pointers of that model (the daemon does, before its scheduler exists); not
// thread-safe with readers.
Status UseDriverMigProfiles(std::string_view model_name, std::vector<MigProfile> profiles);
// Looks up by canonical name or alias (case-insensitive); NotFound names the value.
Result<const DeviceModel*> FindModel(std::string_view name);

// OK iff every placement is legal for its profile, none overlap on memory slices, compute
// slices do not exceed the GPU's, per-profile max_instances and the one-+me rule hold.
Status ValidateLayout(const DeviceModel& model, const MigLayout& layout);
// ValidateLayout(model, layout).ok(), without composing the message: for searches that try
// many layouts and drop the illegal ones (the MIG planner).
bool LayoutIsLegal(const DeviceModel& model, const MigLayout& layout);
// Every legal full or partial layout, canonical order (sorted by start); includes the empty one.
std::vector<MigLayout> EnumerateLayouts(const DeviceModel& model);

// Canonical order inside one layout: by start, then profile id (starts are distinct in a legal
// layout, so this is a total order there).
void SortCanonical(MigLayout& layout);
// How many more instances of `profile_id` fit beside `layout`, as
// nvmlDeviceGetGpuInstanceRemainingCapacity would say (0 for an unknown profile or an illegal
// layout). Placing each at its lowest free legal start is optimal for one profile.
int RemainingCapacity(const DeviceModel& model, const MigLayout& layout, int profile_id);
// Memory slices not covered by any placement of `layout` (assumes it is legal).
int FreeMemorySlices(const DeviceModel& model, const MigLayout& layout);

// Compact text for tests, logs and the CLI: "3g.20gb@0 1g.5gb@4" (names or ids; separated by
// spaces and/or commas; empty text is the empty layout). Parse does not validate the layout.
Result<MigLayout> ParseLayout(const DeviceModel& model, std::string_view text);
std::string FormatLayout(const DeviceModel& model, const MigLayout& layout);

}  // namespace gpuslice
