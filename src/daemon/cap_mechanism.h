#pragma once
// One cap interface, the strongest mechanism per host: what holds the memory of a `shared` or
// `mps` slice on each GPU, and whether the interposer can load here. The daemon chooses by it when
// it starts a slice and shows it in `gpuslice devices`; `gpuslice doctor` calls
// DescribeCapMechanisms() to report the same (docs/memcap.md, "Mechanisms").
//
// Free functions; thread-safe as the backend is.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "devices/backend.h"
#include "memcap/check.h"

namespace gpuslice::daemon {

enum class CapMechanism {
  kNone,            // nothing holds it: the slice is refused (a shared slice whose interposer cannot load)
  kInterposer,      // libgpuslice-cuda, preloaded into the slice's processes (cooperative)
  kDriverLimits,    // the driver's memory limits on the job's cgroup (r615+; enforced by the kernel driver)
  kMpsClientLimit,  // MPS's per-client pinned-memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)
  kMig,             // a MIG instance: the hardware's memory partition
};
// "none", "interposer", "driver-limits", "mps-client-limit", "mig".
std::string_view CapMechanismName(CapMechanism m);

struct GpuCapMechanism {
  std::uint32_t index = 0;
  std::string uuid;
  std::string model;   // catalogue name, or the driver's when unknown
  CapMechanism shared = CapMechanism::kNone;
  CapMechanism mps = CapMechanism::kNone;
  std::string detail;  // why, for people
};

struct CapMechanismReport {
  memcap::InterposerCheck interposer;  // where it is, the glibc it needs and the host's
  bool cgroups = false;                // jobs get their own cgroup v2 (driver limits need one)
  std::vector<GpuCapMechanism> gpus;
  Status devices_status;               // why `gpus` is empty when listing failed
};

// The strongest mechanism per GPU, in this order: a GPU in MIG mode is partitioned by the hardware;
// the driver's memory limits where the backend offers them on that GPU and jobs run in their own
// cgroup (`cgroup_parent` non-empty: daemon DaemonOptions::cgroup_parent); else the interposer for
// shared slices (kNone when it cannot load here: such slices are not started) and MPS's client
// limit for mps slices.
CapMechanismReport DescribeCapMechanisms(devices::DeviceBackend& backend, const std::string& cgroup_parent,
                                         memcap::InterposerCheck interposer = memcap::CheckInterposer());

// The choice for one device, from what DescribeCapMechanisms() learnt (pure).
GpuCapMechanism ChooseCapMechanism(const devices::DeviceInfo& device, bool driver_limits, bool cgroups,
                                   const memcap::InterposerCheck& interposer);

}  // namespace gpuslice::daemon
