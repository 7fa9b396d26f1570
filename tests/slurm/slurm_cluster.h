#pragma once
// A real Slurm 22.05 cluster on localhost for integration tests: one slurmctld and several
// `slurmd -N nodeX` (each on its own port), auth/none, fake GPUs as character devices made
// with mknod under a temporary directory, short scheduler intervals, all state in that
// directory. The slurm.conf node, partition and GRES lines come from GenerateSlurmConfig for
// the given policy, so the tests exercise the generated config itself.
//
// With `accounting`, MariaDB and slurmdbd run from the same directory, on their own ports.
//
// Containers: proctrack/linuxproc, task/none and jobacct_gather/none avoid every cgroup
// plugin, which is what lets slurmd run without systemd or a writable cgroup tree.
//
// Cleanup is layered so that nothing outlives the test binary:
//   1. Stop() (also from the destructor): scancel every job, wait for slurmstepd to go,
//      SIGTERM then SIGKILL the daemons, reap them, remove the directory.
//   2. Every process the cluster starts carries GPUSLICE_SLURM_CLUSTER=<dir> in its
//      environment (the daemons directly, slurmstepd by inheritance, jobs because the
//      submitting commands carry it); Stop() kills whatever still carries the marker.
//   3. A watchdog shell (own session) waits for the test process to die — even by SIGKILL
//      from a ctest timeout — or for a maximum lifetime, then kills everything with the marker
//      and removes the directory.
// Not thread-safe; one per test binary (see the global Environment in the tests).

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/config.h"
#include "slurm/client.h"
#include "slurm/config_gen.h"

namespace gpuslice::slurm::testing {

struct ClusterOptions {
  sched::Config policy = sched::DefaultConfig();
  int gpu_nodes = 2;
  int gpus_per_node = 2;
  int shards_per_gpu = 4;
  int mig_nodes = 1;                 // 0: none
  int mig_gpus_per_node = 1;
  std::string mig_model = "H100-80GB";
  std::vector<std::string> mig_layout = {"3g.40gb", "2g.20gb", "2g.20gb"};
  int watchdog_seconds = 600;        // the watchdog's maximum lifetime for the cluster
  // Accounting: a private MariaDB (datadir, socket and port under the cluster's directory) and
  // slurmdbd, started before slurmctld, which then registers the cluster and its GPU TRES.
  // Start() is Unavailable when they are not installed or MariaDB does not come up.
  bool accounting = false;
  std::string extra_conf;            // appended to slurm.conf (e.g. `gpuslice slurm teams`'s lines)
};

class SlurmCluster {
 public:
  // Starts the cluster and waits until every node is idle. Unavailable when Slurm is not
  // installed; Internal (with the log tail) when a daemon does not come up.
  static Result<std::unique_ptr<SlurmCluster>> Start(const ClusterOptions& options);
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  void Stop();

  const std::string& root() const { return root_; }
  std::string conf_path() const { return root_ + "/etc/slurm.conf"; }
  std::string jobs_dir() const { return root_ + "/jobs"; }
  // The job completion log (jobcomp/filetxt) that `sacct -c` reads.
  std::string jobcomp_path() const { return root_ + "/jobcomp.log"; }
  const GeneratedConfig& generated() const { return generated_; }
  const std::vector<std::string>& node_names() const { return node_names_; }
  // Context for the slurm client: this cluster's SLURM_CONF, a short timeout.
  SlurmContext context() const;
  // Environment every command the test runs against this cluster should carry.
  std::map<std::string, std::string> command_env() const;

  // Polls `scontrol show job` until JobState is one of `states` (comma list), up to
  // `timeout`; returns the last record. DeadlineExceeded with the state seen otherwise.
  Result<std::map<std::string, std::string>> WaitForJobState(const std::string& job_id,
                                                             const std::string& states,
                                                             Micros timeout);
  // Kills slurmctld (to test "Slurm down"); Stop() still cleans up.
  void KillController();
  std::string LogTail(const std::string& log_name, int lines = 20) const;

 private:
  SlurmCluster() = default;
  Status StartDaemons();
  Status StartAccounting(int db_port, int dbd_port);
  Status WaitForNodes(Micros timeout);
  Status StartWatchdog(int seconds);
  void KillMarked(int signal) const;
  pid_t Spawn(const std::vector<std::string>& argv);

  ClusterOptions options_;
  std::string root_;
  GeneratedConfig generated_;
  std::vector<std::string> node_names_;
  pid_t controller_pid_ = -1;
  std::vector<pid_t> daemon_pids_;
  std::vector<pid_t> db_pids_;  // slurmdbd, mariadbd: stopped after the Slurm daemons, in reverse
  pid_t watchdog_pid_ = -1;
  bool stopped_ = false;
};

}  // namespace gpuslice::slurm::testing
