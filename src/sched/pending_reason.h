#pragma once
// Why a pending job waits, as a value (Scheduler::PendingReason). Each alternative carries the
// figures that explain it, so the API can show them as fields and the simulator can count wait
// time by kind. "Could never fit on this host" (NeverFits) is kept apart from "does not fit
// now" (every other alternative): the first needs a change of hardware or configuration, the
// others go away by themselves as jobs end. Plain values; thread-compatible.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/units.h"
#include "sched/types.h"

namespace gpuslice::sched {

// No device (whole: no host with enough free devices) has room for the request now.
struct NoDeviceFits {
  SliceKind kind = SliceKind::kShared;
  std::string model;     // asked model; empty: any
  int gpus = 1;          // whole: devices on one host
  MilliGpu milli = 0;    // per device (whole: 1000)
  Bytes memory = 0;      // per device: the cap (shared, mps; 0: a share of the device) or the
                         // instance size (mig); 0 for whole
};

// The user's cap in this queue (user_max_jobs or user_max_milli) is reached.
struct UserCap {
  enum class Limit { kJobs, kMilli };
  std::string queue;
  std::string user;
  Limit limit = Limit::kJobs;
  std::int64_t max = 0;    // the cap: jobs, or milli-GPU
  std::int64_t held = 0;   // what the user's running jobs in the queue hold now
  std::int64_t asked = 0;  // what this job would add (1 job, or its share)
};

// It would fit now, but on devices kept empty for another waiting whole-GPU job.
// The job's team holds its limit in the queue ([teams.<name>].limit).
struct TeamLimit {
  std::string team;
  std::string queue;
  MilliGpu limit = 0;  // the team's limit in the queue
  MilliGpu held = 0;   // what the team's running jobs in the queue hold now
  MilliGpu asked = 0;  // what this job would add
};

struct ReservedForOther {
  JobId job;                         // the job the devices are kept for
  NodeId node;
  std::vector<DeviceIndex> devices;  // the kept devices
};

// Devices are kept for this job (its queue's reserve_after); it starts once they are all empty.
struct WaitingForReservation {
  NodeId node;
  std::vector<DeviceIndex> devices;
  int busy = 0;                      // of them, how many still hold slices
};

// A device is draining or being reconfigured for a MIG layout: it would fit there (or, for a
// MIG request, new instances come from that change; one device changes at a time).
struct DrainingForMig {
  DeviceRef device;
  bool reconfiguring = false;        // false: still draining (slices running on it)
};

// Could never fit on this host as it is (a device or configuration change is needed).
struct NeverFits {
  std::string why;
};

// An mps slice would fit on a GPU whose MPS server runs for another user: a server serves one
// Linux user at a time (another user's clients would hang at CUDA start-up), so the job waits
// until that user's last mps slice there ends.
struct MpsServesOtherUser {
  DeviceRef device;
  std::string user;  // whose MPS server the device runs
};

// An admin holds it (AdminHold): it is not considered until released.
struct Held {};

using WaitReason = std::variant<NoDeviceFits, UserCap, ReservedForOther, WaitingForReservation,
                                DrainingForMig, NeverFits, MpsServesOtherUser, Held, TeamLimit>;

// Stable machine names, in the order of the variant: "no-device-fits", "user-cap",
// "reserved-for-other", "waiting-for-reservation", "draining-for-mig", "never-fits",
// "mps-other-user", "held".
inline constexpr std::size_t kWaitReasonKinds = std::variant_size_v<WaitReason>;
std::string_view WaitReasonKindName(std::size_t kind_index);
std::string_view WaitReasonKind(const WaitReason& r);

// One line for people: "no GPU with 250m and 20 GiB free", "user cap reached: alice runs 2 of
// 2 jobs in queue 'interactive'", "could never fit on this host: ...".
std::string FormatWaitReason(const WaitReason& r);

// The same for the person who waits, without gpuslice's words (nodes, draining, caps): what
// holds the job back and what ends the wait, e.g. "every GPU is busy: none has 0.25 of a GPU
// and 20 GiB free right now; it starts when enough is freed". Spawn pages and the dashboard
// show it; FormatWaitReason stays the admin's line.
std::string FormatWaitReasonPlain(const WaitReason& r);

}  // namespace gpuslice::sched
