#pragma once
// Events fed to the Scheduler. Every event carries `now` (microseconds on the caller's clock,
// non-decreasing); the scheduler never reads a clock. Plain values; thread-compatible.

#include <string>
#include <variant>
#include <vector>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/units.h"
#include "sched/types.h"

namespace gpuslice::sched {

// A device appeared (agent start, hot-plug). `model` is a catalogue name or alias.
// `mig_enabled` + `mig_layout`: the device's current MIG state (existing instances are free).
struct DeviceAdded {
  Micros now = 0;
  DeviceRef device;
  std::string uuid;
  std::string model;
  bool mig_capable = false;
  bool mig_enabled = false;
  MigLayout mig_layout;
};

// A device disappeared or failed. Slices on it are stopped (Stop, reason kDeviceLost).
struct DeviceRemoved {
  Micros now = 0;
  DeviceRef device;
};

struct Submit {
  Micros now = 0;
  JobId job;
  std::string user;
  std::string queue;  // empty: the config's default queue
  JobRequest request;
};

// The job's processes ended by themselves. Unknown or already-ended jobs are ignored.
struct Finish {
  Micros now = 0;
  JobId job;
};

// A user or admin cancelled the job (pending or running).
struct Cancel {
  Micros now = 0;
  JobId job;
};

// One slice's activity over the last sampling interval.
struct SliceSample {
  SliceId slice;
  int sm_percent = 0;      // SM utilisation 0..100
  int memory_percent = 0;  // memory-controller (traffic) utilisation 0..100
  int processes = 0;       // processes attributed to the slice
};

struct Sample {
  Micros now = 0;
  std::vector<SliceSample> slices;
};

// Time passes: drives time limits and idle reclaim.
struct Tick {
  Micros now = 0;
};

// The outer layer finished applying a ReconfigureMig. `layout` is what the device has now.
struct ReconfigureDone {
  Micros now = 0;
  DeviceRef device;
  bool ok = true;
  MigLayout layout;
  std::string error;  // when !ok
};

using Event = std::variant<DeviceAdded, DeviceRemoved, Submit, Finish, Cancel, Sample, Tick,
                           ReconfigureDone>;

Micros EventTime(const Event& e);
std::string_view EventName(const Event& e);

}  // namespace gpuslice::sched
