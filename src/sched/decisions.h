#pragma once
// Decisions the Scheduler returns, as values; an outer layer (daemon, simulator, Slurm mode)
// applies them. When the scheduler emits Reclaim / Stop / Preempt it has already released the
// slice's capacity in its own books: the applier must enforce it (kill the processes) before
// applying any later decision of the same batch (decisions are ordered). Thread-compatible.

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/status.h"
#include "core/units.h"
#include "sched/types.h"

namespace gpuslice::sched {

// Run the job on a new slice.
struct StartSlice {
  JobId job;
  SliceId slice;
  SliceKind kind = SliceKind::kShared;
  std::string queue;
  std::string user;
  NodeId node;
  std::vector<DeviceIndex> devices;   // whole: 1..N; others: exactly one
  std::vector<std::string> uuids;     // same order as devices
  std::optional<MigPlacement> mig;    // mig: the instance (profile + start) to use
  MilliGpu milli = 0;                 // per device: 1000 whole; share for shared / mps / mig
  Bytes memory_cap = 0;               // per device; 0: no cap (whole)
  int mps_thread_percent = 0;         // mps: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
  Micros deadline = 0;                // time limit end (0: none)
};

enum class WarnReason { kIdle, kTimeLimit };
std::string_view WarnReasonName(WarnReason r);

// Tell the job's owner something will happen at `deadline` unless they act.
struct Warn {
  JobId job;
  SliceId slice;
  WarnReason reason = WarnReason::kIdle;
  Micros deadline = 0;   // kIdle with ReclaimAction::kReport: when it was reported; no action follows
  std::string message;
};

// A warning given earlier no longer holds: the idle slice is busy again (its idle timer
// starts over). Views stop showing the warning.
struct ClearWarning {
  JobId job;
  SliceId slice;
  WarnReason reason = WarnReason::kIdle;
  std::string message;
};

// Idle reclaim: stop the job and free its slice.
struct Reclaim {
  JobId job;
  SliceId slice;
  std::string reason;
};

enum class StopReason { kTimeLimit, kDeviceLost, kCancelled };
std::string_view StopReasonName(StopReason r);

// Stop a running job (time limit reached, device lost, cancelled).
struct Stop {
  JobId job;
  SliceId slice;
  StopReason reason = StopReason::kTimeLimit;
};

// Stop a running job to make room (MIG drain). With requeue the job is pending again (same
// submit time) and will get a new slice later.
struct Preempt {
  JobId job;
  SliceId slice;
  std::string reason;
  bool requeue = true;
};

// No new slices on this device until it is empty and reconfigured.
struct Drain {
  DeviceRef device;
  std::string reason;
};

// Informational: these devices are kept empty for a waiting whole-GPU job (its queue's
// reserve_after); it starts there (a StartSlice) once they are all free. Nothing to enforce.
struct Reserve {
  JobId job;
  NodeId node;
  std::vector<DeviceIndex> devices;
  std::string reason;
};

// Apply this MIG layout to the device (enabling MIG mode if needed); answer with ReconfigureDone.
struct ReconfigureMig {
  DeviceRef device;
  std::string uuid;
  MigLayout old_layout;
  MigLayout layout;
  bool mig_mode = true;  // false: leave MIG mode (an admin's order; `layout` is empty)
};

// The job can never run as asked (pending jobs are not rejected: they wait).
struct Reject {
  JobId job;
  Status status;
};

using Decision = std::variant<StartSlice, Warn, Reclaim, Stop, Preempt, Drain, ReconfigureMig,
                              Reject, Reserve, ClearWarning>;

// One line, stable, for logs and golden files: "start job=3 slice=1 kind=shared node=1 dev=0 ...".
std::string FormatDecision(const Decision& d);

}  // namespace gpuslice::sched
