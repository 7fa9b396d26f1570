#pragma once
// The node agent in Slurm mode (`gpuslice agent --slurm`): every round it
//   1. lists the running jobs of the policy's partitions on its nodes (squeue, with timeout),
//   2. binds each running job as a slice of the node's agent::Agent (the one sampler the
//      daemon uses too), whose owner resolver maps a GPU process to its Slurm job
//      (SLURM_JOB_ID in /proc/PID/environ, or a cgroup path containing job_<id> as Slurm's
//      cgroup plugins make), and runs one sampling round,
//   3. feeds each job's verdict (active / idle / unmeasured; unmeasured is never idle) to the
//      ReclaimTracker and applies its decisions: a warning line appended to the job's output
//      file (StdOut from `scontrol show job`) and to the agent's log, then scancel — or
//      `scontrol requeue` for preemptible queues — after the grace period,
//   4. with a usage log (SlurmAgentOptions::usage_log), keeps each job's busy / idle / unknown
//      runs and writes them when the job leaves (usage_log.h: what `gpuslice whatif --sacct`
//      joins to Slurm's accounting),
//   5. keeps a Prometheus text snapshot (device metrics with dcgm-exporter names, plus
//      gpuslice_slurm_job_* per job) that Serve() exposes on /metrics.
// It never acts on a job whose partition is not a queue of the policy. When Slurm is down, a
// round still samples and serves metrics (gpuslice_slurm_up 0) and reclaims nothing.
// Thread-safe: RunRound() on one thread; MetricsText() and Stop() from any thread.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/attribution.h"
#include "agent/idle.h"
#include "devices/backend.h"
#include "sched/config.h"
#include "slurm/client.h"
#include "slurm/reclaim.h"
#include "slurm/usage_log.h"

namespace gpuslice::slurm {

struct SlurmAgentOptions {
  sched::Config policy;
  SlurmContext slurm;
  std::vector<std::string> nodes;  // Slurm node names served; empty: all nodes
  std::string hostname;            // metrics label
  Micros interval = 15 * kSecond;
  std::string proc_root = "/proc";
  std::function<void(const std::string&)> log;  // one line per event; default: stderr
  std::string usage_log;                        // per-job activity file (usage_log.h); "" : none
};

// Per-job figures of the last round.
struct JobUsage {
  std::string job_id;
  std::string partition;
  std::string user;
  std::vector<int> pids;
  std::optional<devices::Permille> sm_util;  // sum over its processes, capped at 100%; nullopt: unmeasurable
  std::optional<Bytes> memory_used;  // nullopt: not measurable
  agent::IdleState idle;
  ReclaimTracker::Phase phase = ReclaimTracker::Phase::kActive;
};

class SlurmAgent {
 public:
  // `backend` must outlive the agent (scripted activity: wrap it in devices::ScriptedBackend).
  SlurmAgent(devices::DeviceBackend& backend, SlurmAgentOptions options);

  // One round; the decisions it applied. A failing Slurm or device read is logged, not fatal.
  std::vector<ReclaimDecision> RunRound(Micros now);
  // Rounds every `interval` until Stop(); then writes the usage of jobs still running.
  void Run();
  // Writes the usage records of the jobs still running (Run() does it when it stops).
  Status FlushUsage();
  void Stop();

  std::string MetricsText() const;
  std::vector<JobUsage> Jobs() const;

 private:
  struct RunningJob {
    std::string partition;
    std::string user;
    std::string gres;  // tres-per-node as squeue shows it, e.g. "gres:shard:2"
  };
  Result<std::map<std::string, RunningJob>> ListRunning();
  void Apply(const ReclaimDecision& d);
  void Log(const std::string& line) const;

  devices::DeviceBackend& backend_;
  SlurmAgentOptions options_;
  // Slurm job id <-> the agent's slice id for it (numeric ids map to themselves).
  std::map<std::string, SliceId> slice_of_;
  std::map<SliceId, std::string> job_of_;
  std::uint64_t next_slice_ = 1ull << 62;  // for non-numeric job ids
  agent::Agent agent_;
  ReclaimTracker tracker_;
  UsageRecorder usage_;
  int reclaims_ = 0;

  mutable std::mutex mu_;  // guards the snapshot below
  std::string metrics_;
  std::vector<JobUsage> jobs_;
  std::atomic<bool> stop_{false};
};

// Runs the agent with a /metrics HTTP server on `listen` ("127.0.0.1:9400") until Stop() is
// called on it from another thread (the CLI stops it on SIGINT/SIGTERM).
class SlurmAgentServer {
 public:
  SlurmAgentServer(SlurmAgent& agent, std::string listen);
  ~SlurmAgentServer();
  // Binds (error if the address is taken), then serves in a thread.
  Status Start();
  int port() const { return port_; }
  void Stop();

 private:
  struct Impl;
  SlurmAgent& agent_;
  std::string listen_;
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuslice::slurm
