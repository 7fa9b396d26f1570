#pragma once
// What the scheduler shows of its state: jobs, slices and devices as value records. The
// scheduler's parts (indexes, host states, books) read these without the façade (scheduler.h),
// which re-exports them for the daemon, the simulator and the API.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/units.h"
#include "sched/types.h"

namespace gpuslice::sched {

enum class JobState { kPending, kRunning, kEnded };
std::string_view JobStateName(JobState s);

// Idle state machine of a running slice: active -> idle (since) -> warned -> reclaimed.
// kReclaimable: warned, past its grace in a queue with reclaim = "on-demand"; it runs until a
// pending job needs its room.
enum class IdleState { kActive, kWarned, kReported, kReclaimable };

// The latest activity report of a running slice (ActivityReport), as the scheduler keeps it.
struct SliceReport {
  std::string source;
  bool busy = false;
  Micros last_activity = -1;  // clamped to at most `received`; -1: not given
  int kernels = -1;
  int connections = -1;
  Micros received = 0;        // the event's time
  Micros busy_since = 0;      // when the busy budget began (BusyBudgetStart); 0: none
};

struct JobView {
  JobId job;
  std::string user;
  std::string queue;
  std::string team;  // with teams configured; empty: none
  JobRequest request;        // as submitted
  SliceKind kind = SliceKind::kShared;  // resolved against the queue
  JobState state = JobState::kPending;
  Micros submit_time = 0;
  Micros start_time = 0;
  Micros end_time = 0;
  SliceId slice;             // while running
  std::string end_reason;    // "finished", "cancelled", "time-limit", "idle", ...
  bool held = false;         // pending, held by an admin (AdminHold): not considered
};

struct SliceView {
  SliceId slice;
  JobId job;
  SliceKind kind = SliceKind::kShared;
  NodeId node;
  std::vector<DeviceIndex> devices;
  std::optional<MigPlacement> mig;
  MilliGpu milli = 0;            // per device
  Bytes memory = 0;              // per device (reserved); whole: the smallest of its devices'
  Micros start_time = 0;
  Micros deadline = 0;           // 0: no time limit
  bool limit_warned = false;
  Micros last_active = 0;        // last sample showing activity (or start)
  IdleState idle = IdleState::kActive;
  Micros idle_deadline = 0;      // when warned: reclaim time
  // The last sample had no usable signal: no idle warning or reclaim until one comes (its
  // idle time then starts from that sample); the time limit still applies.
  bool unmeasured = false;
  std::optional<SliceReport> report;  // the latest activity report; nullopt: none
};

// Who decides a MIG-capable device's mode: the planner (from demand), or an admin who put it
// in MIG mode (kOn) or out of it (kOff) (AdminMigMode).
enum class MigAdmin { kAuto, kOn, kOff };
std::string_view MigAdminName(MigAdmin m);  // "auto", "on", "off"

struct DeviceView {
  DeviceRef ref;
  std::string uuid;
  std::string model;             // canonical catalogue name (as announced if unknown)
  const DeviceModel* catalogue = nullptr;  // the catalogue entry; nullptr if the model is unknown
  Bytes memory = 0;              // usable: the model's memory less what the driver keeps
  Bytes reserved_memory = 0;     // kept by the driver (DeviceAdded::reserved_memory)
  Bytes context_reserve = 0;     // one process's CUDA context, booked with each shared/MPS slice
  bool mig_capable = false;
  DeviceMode mode = DeviceMode::kFree;
  MigLayout layout;              // kMig: the instances (free or used)
  bool draining = false;         // no new slices (waiting to become empty)
  bool reconfiguring = false;    // a ReconfigureMig is outstanding
  JobId reserved_for;            // kept empty for this waiting whole-GPU job (reserve_after)
  bool admin_drained = false;    // an admin drained it: no new slices (AdminDrain)
  std::string drain_reason;
  MigAdmin mig_admin = MigAdmin::kAuto;
  bool leaving_mig = false;      // the outstanding ReconfigureMig takes it out of MIG mode
  MigLayout target_layout;       // while draining / reconfiguring
  MilliGpu used_milli = 0;       // shared / mps / whole
  Bytes used_memory = 0;
  int clients = 0;               // slices on the device
  std::vector<SliceId> slices;   // sorted
  // kMps: the user whose MPS server the device runs. An MPS server serves one Linux user at a
  // time (another user's clients wait at CUDA start-up until it exits), so only this user's
  // mps slices are placed here until the last of them ends. Empty otherwise.
  std::string mps_user;
};

}  // namespace gpuslice::sched
