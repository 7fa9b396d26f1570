#pragma once
// Test builders with compact notation, so scheduler tests read like specifications:
//   Host("8xH100-80GB"), Host("2xA100-40GB mig"), Job("interactive gpu=250m mem=10GiB"),
//   Job("training kind=whole gpus=4 user=bob limit=2h model=H100-80GB").
// Malformed notation aborts the test binary with a message (builders are for literals).
// Plain functions; thread-safe.

#include <string>
#include <string_view>
#include <vector>

#include "core/ids.h"
#include "core/units.h"
#include "sched/events.h"
#include "sched/types.h"

namespace gpuslice::testing {

struct HostSpec {
  int count = 1;
  std::string model;
  bool mig_enabled = false;  // "mig": devices start in MIG mode with an empty layout
};

// "<N>x<MODEL>[ mig]".
HostSpec Host(std::string_view spec);

// DeviceAdded events for one host as node `node` (uuids "GPU-<node>-<index>").
std::vector<sched::DeviceAdded> AddHost(const HostSpec& host, NodeId node, Micros now = 0);

struct JobSpec {
  std::string queue;
  std::string user = "alice";
  sched::JobRequest request;
  std::string team;  // empty: the user's default
};

// "<queue> [kind=K] [gpu=AMOUNT] [gpus=N] [mem=BYTES] [limit=DURATION] [user=U] [model=M] [team=T]".
// "-" as the queue means the default queue.
JobSpec Job(std::string_view spec);

sched::Submit SubmitOf(JobId id, Micros now, const JobSpec& spec);

}  // namespace gpuslice::testing
