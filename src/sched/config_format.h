#pragma once
// A Config written back out: as canonical TOML (every key explicit, exact units), which
// ParseConfig reads back to an equal Config whatever the built-in defaults are, so the daemon's
// journal can record the config a reload put in force and replay it after an upgrade; as a
// version (a hash of that text) the API reports; and as one line per queue for the log.
// Free functions; thread-safe.

#include <string>
#include <vector>

#include "sched/config.h"

namespace gpuslice::sched {

// Canonical TOML: ParseConfig(FormatConfig(c)) == c for every valid c.
std::string FormatConfig(const Config& config);

// "c-" and 16 hex digits of a 64-bit FNV-1a hash of FormatConfig(config): equal configs have
// equal versions, and a change of any value changes it.
std::string ConfigVersion(const Config& config);

// One line per queue, what an admin checks after a reload, e.g.
//   "interactive: kinds shared,mps (default shared 250m); priority 10; time limit 8h, warned
//    15m before; user caps none; placement gpuslice; preemptible; idle: reclaim after 30m +
//    10m grace (threshold 5%, signals sm,memory)"
// then one line for the rest: "default queue interactive; admin group gpuslice-admin; mig
// layouts planned, drain wait".
std::vector<std::string> DescribeConfig(const Config& config);

// The queue names in `before` that `after` lacks, and those `after` adds (sorted).
struct QueueChanges {
  std::vector<std::string> removed;
  std::vector<std::string> added;
  std::vector<std::string> changed;  // in both, with some value different
};
QueueChanges CompareQueues(const Config& before, const Config& after);

}  // namespace gpuslice::sched
