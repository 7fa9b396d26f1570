#include "daemon/cap_mechanism.h"

#include <fmt/format.h>

namespace gpuslice::daemon {

std::string_view CapMechanismName(CapMechanism m) {
  switch (m) {
    case CapMechanism::kNone: return "none";
    case CapMechanism::kInterposer: return "interposer";
    case CapMechanism::kDriverLimits: return "driver-limits";
    case CapMechanism::kMpsClientLimit: return "mps-client-limit";
    case CapMechanism::kMig: return "mig";
  }
  return "none";
}

GpuCapMechanism ChooseCapMechanism(const devices::DeviceInfo& device, bool driver_limits, bool cgroups,
                                   const memcap::InterposerCheck& interposer) {
  GpuCapMechanism g;
  g.index = device.index.value();
  g.uuid = device.uuid;
  g.model = device.model ? device.model->name : device.name;
  if (device.mig_current == devices::MigMode::kEnabled) {
    g.shared = g.mps = CapMechanism::kMig;
    g.detail = "MIG mode: each instance's memory is a hardware partition";
    return g;
  }
  if (driver_limits && cgroups) {
    g.shared = g.mps = CapMechanism::kDriverLimits;
    g.detail = "the driver's memory limits on each job's cgroup";
    return g;
  }
  g.mps = CapMechanism::kMpsClientLimit;
  if (interposer.usable) {
    g.shared = CapMechanism::kInterposer;
    g.detail = driver_limits ? "the interposer (the driver has memory limits, but jobs get no cgroup of their own)"
                             : "the interposer (the driver has no memory limits: r615+ needed)";
  } else {
    g.shared = CapMechanism::kNone;
    g.detail = "nothing can hold a shared slice's memory, so none is started: " + interposer.problem;
  }
  return g;
}

CapMechanismReport DescribeCapMechanisms(devices::DeviceBackend& backend, const std::string& cgroup_parent,
                                         memcap::InterposerCheck interposer) {
  CapMechanismReport r;
  r.interposer = std::move(interposer);
  r.cgroups = !cgroup_parent.empty();
  auto devs = backend.ListDevices();
  if (!devs.ok()) {
    r.devices_status = devs.status();
    return r;
  }
  for (const devices::DeviceInfo& d : *devs) {
    r.gpus.push_back(ChooseCapMechanism(d, backend.SupportsMemoryLimits(d.index), r.cgroups, r.interposer));
  }
  return r;
}

}  // namespace gpuslice::daemon
