#pragma once
// Attribution of GPU processes to slices: which slice owns a GPU process. OwnerResolver is
// the interface the Agent asks (one per agent; the daemon, the Slurm agent and the profiler
// each plug theirs in). Attributor, the default, says a process belongs to a slice when
//   1. it runs on the slice's MIG device (by instance UUID; no /proc needed), or
//   2. it is one of the slice's root pids (no /proc needed), or
//   3. one of its ancestors (pid -> ppid chain in /proc) is one of the slice's root pids, or
//      its process group is one (the daemon starts each job as a process-group leader, so a
//      child that outlives its parent and is re-parented to init still belongs), or
//   4. its cgroup path lies under the slice's cgroup, or
//   5. its environment carries GPUSLICE_SLICE_ID=<slice id> (readable only with privileges),
// and the slice holds the device it runs on. A process that exits between the driver listing
// it and our /proc lookup is "vanished", not an error. An MPS server process
// (nvidia-cuda-mps-server: the driver attributes its clients' kernels to it) belongs to no
// slice and is reported as such, not as a stranger.
// ProcessTable reads /proc (root injectable for tests); Attributor caches ancestry per
// (pid, start time) so steady-state sampling reads one file per process.
// Not thread-safe: owned by the agent's sampling thread.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ids.h"
#include "core/status.h"
#include "devices/backend.h"
#include "sched/config.h"

namespace gpuslice::agent {

inline constexpr const char* kSliceEnvVar = "GPUSLICE_SLICE_ID";

// What the agent knows about a running slice (given by the daemon or the Slurm agent).
struct SliceBinding {
  SliceId slice;
  JobId job;
  std::string user;
  std::string queue;
  sched::SliceKind kind = sched::SliceKind::kShared;
  std::vector<DeviceIndex> devices;  // whole: all its devices; others: one
  std::string mig_uuid;              // kind mig: the MIG device ("MIG-...")
  std::vector<int> root_pids;        // the job's top processes (exec/ or slurmstepd children)
  std::string cgroup;                // e.g. "/gpuslice.slice/job-42"; empty: not used
  sched::IdlePolicy idle;            // the queue's policy
  std::int64_t held_milli = 0;       // GPU share held, 1000 = one device (all its devices); 0: not known
};

struct ProcStat {
  int pid = 0;
  int ppid = 0;
  int pgrp = 0;
  std::string comm;  // as the kernel truncates it (15 characters)
  unsigned long long start_time = 0;  // clock ticks since boot (field 22): tells reused pids apart
};

class ProcessTable {
 public:
  explicit ProcessTable(std::string proc_root = "/proc") : root_(std::move(proc_root)) {}
  // NotFound when the process is gone.
  Result<ProcStat> Stat(int pid) const;
  // cgroup v2 path ("0::/x/y" -> "/x/y"); on v1, the first controller's path.
  Result<std::string> Cgroup(int pid) const;
  // Value of `key` in /proc/<pid>/environ; NotFound if unset, PermissionDenied if unreadable.
  Result<std::string> EnvironValue(int pid, std::string_view key) const;

 private:
  std::string root_;
};

struct AttributionStats {
  int attributed = 0;
  int unattributed = 0;  // alive, but no slice claims it
  int vanished = 0;      // exited before we could look it up
  int mps_servers = 0;   // MPS server processes (owned by no slice)
};

// What the resolver says about one GPU process.
struct Owner {
  std::optional<SliceId> slice;
  bool mps_server = false;  // the process is an MPS server (its figures are its clients')
  bool stranger = false;    // alive and claimed by no slice (vanished processes are neither)
};

class OwnerResolver {
 public:
  virtual ~OwnerResolver() = default;
  virtual Owner Resolve(DeviceIndex device, const devices::ProcessSample& p,
                        const std::vector<SliceBinding>& slices, AttributionStats* stats) = 0;
  // End of a sampling round (caches may drop processes not seen in it).
  virtual void EndRound() {}
};

inline constexpr std::string_view kMpsServerComm = "nvidia-cuda-mps";  // comm of the server

class Attributor : public OwnerResolver {
 public:
  explicit Attributor(ProcessTable table = ProcessTable()) : table_(std::move(table)) {}

  Owner Resolve(DeviceIndex device, const devices::ProcessSample& p,
                const std::vector<SliceBinding>& slices, AttributionStats* stats) override;
  std::optional<SliceId> Attribute(DeviceIndex device, const devices::ProcessSample& p,
                                   const std::vector<SliceBinding>& slices, AttributionStats* stats) {
    return Resolve(device, p, slices, stats).slice;
  }
  // Drops cache entries for pids not seen since the previous call.
  void EndRound() override;

 private:
  struct Cached {
    unsigned long long start_time = 0;
    std::vector<int> ancestors;  // pid itself first, up to init
    int pgrp = 0;
    bool mps_server = false;
    std::string cgroup;
    std::string slice_env;
    bool seen = false;
  };
  Result<Cached*> Lookup(int pid);

  ProcessTable table_;
  std::map<int, Cached> cache_;
};

}  // namespace gpuslice::agent
