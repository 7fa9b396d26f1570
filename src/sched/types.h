#pragma once
// Small value types shared by the scheduler's events, decisions and views.
// Plain values; thread-compatible.

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/units.h"
#include "sched/config.h"

namespace gpuslice::sched {

// A device is named by its host and its position on that host.
struct DeviceRef {
  NodeId node;
  DeviceIndex index;
  friend auto operator<=>(const DeviceRef&, const DeviceRef&) = default;
};

// What a job asks for. Zero / nullopt fields take the queue's defaults.
struct JobRequest {
  std::optional<SliceKind> kind;  // nullopt: the queue's default kind
  int gpus = 0;                   // whole: number of devices (all on one host); others: 1
  MilliGpu milli = 0;             // shared: time-slice share; mps: thread share (per device)
  Bytes memory = 0;               // per-device memory cap (shared, mps) or needed size (mig)
  Micros time_limit = 0;          // may only shorten the queue's limit
  std::string model;              // empty: any model; else a catalogue name ("H100-80GB")
  friend bool operator==(const JobRequest&, const JobRequest&) = default;
};

// A device's sharing mode. A device changes mode only when it holds no slice.
enum class DeviceMode {
  kFree,    // empty, not in MIG mode: may become whole, shared or mps
  kWhole,
  kShared,
  kMps,
  kMig,     // MIG enabled with a layout (instances may be free)
};
std::string_view DeviceModeName(DeviceMode mode);

}  // namespace gpuslice::sched
