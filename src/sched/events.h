#pragma once
// Events fed to the Scheduler. Every event carries `now` (microseconds on the caller's clock,
// non-decreasing); the scheduler never reads a clock. Plain values; thread-compatible.

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/units.h"
#include "sched/config.h"
#include "sched/types.h"

namespace gpuslice::sched {

// A device appeared (agent start, hot-plug). `model` is a catalogue name or alias.
// `mig_enabled` + `mig_layout`: the device's current MIG state (existing instances are free).
// Memory set aside before shares are cut (the daemon fills them from the driver, the catalogue
// or the config: sched::MemoryReserveFor): `reserved_memory` is kept by the driver and never
// usable; `context_reserve` is one process's CUDA context, booked with every shared or MPS slice
// on top of the memory it asks for. 0 (the simulator): nothing set aside.
struct DeviceAdded {
  Micros now = 0;
  DeviceRef device;
  std::string uuid;
  std::string model;
  bool mig_capable = false;
  bool mig_enabled = false;
  MigLayout mig_layout;
  Bytes reserved_memory = 0;
  Bytes context_reserve = 0;
};

// A device disappeared or failed. Slices on it are stopped (Stop, reason kDeviceLost), except
// those of the jobs in `requeue`: the caller knows nothing of them ran (a start recorded whose
// go-ahead never came, or one never exec'd), so, as with Requeue, their slices are released and
// they are pending again in their old place, with no decision. Then pending jobs that can no
// longer ever fit are rejected (Reject).
struct DeviceRemoved {
  Micros now = 0;
  DeviceRef device;
  std::vector<JobId> requeue;
};

struct Submit {
  Micros now = 0;
  JobId job;
  std::string user;
  std::string queue;  // empty: the config's default queue
  JobRequest request;
  // With teams configured: the team it runs in; empty: the user's default (TeamsConfig::
  // DefaultFor). The daemon names it when membership comes from a Unix group.
  std::string team = {};
};

// The job's processes ended by themselves. Unknown or already-ended jobs are ignored.
struct Finish {
  Micros now = 0;
  JobId job;
};

// A running job's processes ended without running its command (the daemon stopped between
// recording its start and giving the go-ahead): its slice is released and it is pending again
// in its old place (priority, submit time, JobId), so it starts again when it fits. Ignored
// unless the job is running. The caller decides whether a job may be requeued (the daemon
// bounds how often); `reason` is for the caller's records.
struct Requeue {
  Micros now = 0;
  JobId job;
  std::string reason;
};

// A user or admin cancelled the job (pending or running).
struct Cancel {
  Micros now = 0;
  JobId job;
};

// What one signal says about a slice over an interval. kUnknown (the figure could not be
// measured: per-process utilisation unsupported, read failed, kernels hidden behind an MPS
// server) is never taken as idle.
enum class Activity { kUnknown = 0, kIdle = 1, kActive = 2 };
std::string_view ActivityName(Activity a);  // "unknown", "idle", "active"

// One slice's activity over the last sampling interval. The *_known flags say which figures
// were measured; a figure that is not known is unknown, never 0 (its int is then ignored).
// The defaults (all measured) keep the simulator and tests, which measure everything, short.
struct SliceSample {
  SliceId slice;
  int sm_percent = 0;      // SM utilisation 0..100
  int memory_percent = 0;  // memory-controller (traffic) utilisation 0..100
  int processes = 0;       // processes attributed to the slice
  bool sm_known = true;
  bool memory_known = true;
  bool processes_known = true;
  // Memory used moved by more than the agent's threshold since its previous sample (the agent
  // keeps the history); consulted only when neither GPU utilisation figure is known.
  Activity memory_change = Activity::kUnknown;
  // Reported from outside the driver (e.g. a notebook kernel busy/idle); unknown when none.
  Activity external = Activity::kUnknown;
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

// A session's activity reported from outside the GPU (e.g. a notebook server: its kernels busy
// or idle, its last activity), received at `now`. It can only postpone an idle reclaim (see
// IdlePolicy); it counts when the queue lists its source among the idle signals. The latest
// report replaces the earlier one. Ignored unless the job is running.
struct ActivityReport {
  Micros now = 0;
  JobId job;
  std::string source;          // [a-z0-9_-]{1,32}, checked by the caller
  bool busy = false;           // a kernel (or the like) is executing
  Micros last_activity = -1;   // µs since the epoch on the caller's clock; -1: not given
  int kernels = -1;            // -1: not given
  int connections = -1;        // -1: not given
};

// The admin reloaded the config (`systemctl reload gpuslice`); `config` must be valid
// (ValidateConfig). It applies to every decision from now on: a queue in the new config is the
// new one for its pending jobs (priority, placement, user caps, time limit when they start) and
// its running ones (idle policy; a running job keeps its deadline); pending jobs keep the
// shape they were resolved to (kind, share, memory). A queue the new config lacks takes no
// more jobs, and the jobs it has, pending and running, go on under its last settings until
// they end. Then pending jobs are tried again.
struct ConfigReload {
  Micros now = 0;
  Config config;
};

// ---- an admin's orders (gpuslice drain / undrain / mig / hold / release / requeue). Journaled
// like every event, so they hold across restarts. The caller checks that the target exists
// and is in a state the order applies to; the scheduler ignores one that does not.

// Drained: the device takes no new slice (its running ones finish); undrained: it takes them
// again. `reason` is shown with the device.
struct AdminDrain {
  Micros now = 0;
  DeviceRef device;
  bool drained = true;
  std::string reason;
};

// MIG mode for a MIG-capable device: on or off through a drain (no new slice; once it is
// empty, a ReconfigureMig to the wanted mode), and kept so (the planner never changes the
// device's mode again); nullopt gives the device back to the planner, which changes layouts
// from demand when mig.enabled.
struct AdminMigMode {
  Micros now = 0;
  DeviceRef device;
  std::optional<bool> enabled;
};

// Held: a pending job is not considered for placement until released.
struct AdminHold {
  Micros now = 0;
  JobId job;
  bool held = true;
};

// A running job is stopped and pending again in its old place (a Preempt with requeue).
struct AdminRequeue {
  Micros now = 0;
  JobId job;
  std::string reason;
};

using Event = std::variant<DeviceAdded, DeviceRemoved, Submit, Finish, Cancel, Sample, Tick,
                           ReconfigureDone, ActivityReport, Requeue, ConfigReload, AdminDrain,
                           AdminMigMode, AdminHold, AdminRequeue>;

Micros EventTime(const Event& e);
std::string_view EventName(const Event& e);

}  // namespace gpuslice::sched
