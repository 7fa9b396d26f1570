#pragma once
// The node agent in Slurm mode (`gpuslice agent --slurm`): every round it
//   1. lists the running jobs of the policy's partitions on its nodes (squeue, with timeout),
//   2. samples every device through the device layer,
//   3. maps each GPU process to its Slurm job (SLURM_JOB_ID in /proc/PID/environ, or a
//      cgroup path containing job_<id> as Slurm's cgroup plugins make),
//   4. feeds each job's utilisation to an idle detector built from its queue's IdlePolicy, and
//      applies the ReclaimTracker's decisions: a warning line appended to the job's output
//      file (StdOut from `scontrol show job`) and to the agent's log, then scancel — or
//      `scontrol requeue` for preemptible queues — after the grace period,
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

#include "agent/attribution.h"
#include "agent/idle.h"
#include "devices/backend.h"
#include "devices/fake.h"
#include "sched/config.h"
#include "slurm/client.h"
#include "slurm/reclaim.h"

namespace gpuslice::slurm {

struct SlurmAgentOptions {
  sched::Config policy;
  SlurmContext slurm;
  std::vector<std::string> nodes;  // Slurm node names served; empty: all nodes
  std::string hostname;            // metrics label
  Micros interval = 15 * kSecond;
  std::string proc_root = "/proc";
  // Fake backend only: a file re-read whenever it changes, one GPU process per line:
  //   <device> <pid> <sm-util-percent> [<memory, e.g. 2GiB>]
  // ('#' starts a comment). Devices not named are idle with no processes.
  std::string simulate_script;
  std::function<void(const std::string&)> log;  // one line per event; default: stderr
};

// Per-job figures of the last round.
struct JobUsage {
  std::string job_id;
  std::string partition;
  std::string user;
  std::vector<int> pids;
  std::optional<devices::Permille> sm_util;  // sum over its processes; nullopt: unmeasurable
  Bytes memory_used = 0;
  agent::IdleState idle;
  ReclaimTracker::Phase phase = ReclaimTracker::Phase::kActive;
};

class SlurmAgent {
 public:
  // `backend` must outlive the agent. `fake` (may be null) is the same backend when it is the
  // fake one, for the simulate script.
  SlurmAgent(devices::DeviceBackend& backend, devices::FakeBackend* fake, SlurmAgentOptions options);

  // One round; the decisions it applied. A failing Slurm or device read is logged, not fatal.
  std::vector<ReclaimDecision> RunRound(Micros now);
  // Rounds every `interval` until Stop().
  void Run();
  void Stop();

  std::string MetricsText() const;
  std::vector<JobUsage> Jobs() const;

 private:
  struct RunningJob {
    std::string partition;
    std::string user;
  };
  Result<std::map<std::string, RunningJob>> ListRunning();
  std::optional<std::string> JobOfProcess(int pid) const;
  Status ApplySimulateScript();
  void Apply(const ReclaimDecision& d);
  void Log(const std::string& line) const;

  devices::DeviceBackend& backend_;
  devices::FakeBackend* fake_;
  SlurmAgentOptions options_;
  agent::ProcessTable proc_;
  ReclaimTracker tracker_;
  std::map<std::string, agent::IdleDetector> detectors_;
  std::string script_seen_;  // content last applied
  int reclaims_ = 0;

  mutable std::mutex mu_;  // guards the snapshot below
  std::string metrics_;
  std::vector<JobUsage> jobs_;
  std::atomic<bool> stop_{false};
};

// Parses the simulate script (exposed for tests). Errors name the line.
struct SimulatedProcess {
  int device = 0;
  int pid = 0;
  devices::Permille sm_util = 0;
  Bytes memory = 0;
};
Result<std::vector<SimulatedProcess>> ParseSimulateScript(const std::string& text);

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
