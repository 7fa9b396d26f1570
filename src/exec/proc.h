#pragma once
// Small /proc readers the launcher and recovery use to tell a live process from a reused pid
// and to see whether any process of a group is left. Free functions; thread-safe.

#include <cstdint>
#include <optional>
#include <vector>

namespace gpuslice::exec {

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); nullopt when the pid
// does not exist or is a zombie.
std::optional<std::uint64_t> ProcessStartTicks(int pid);

// Process group of `pid`; nullopt when it does not exist.
std::optional<int> ProcessGroupOf(int pid);

// True when some non-zombie process has process group `pgid`. Scans /proc: a kill(-pgid, 0)
// would also count zombies nobody reaps (containers whose init does not reap).
bool ProcessGroupAlive(int pgid);

// The live (non-zombie) processes of group `pgid`.
std::vector<int> ProcessGroupMembers(int pgid);

}  // namespace gpuslice::exec
