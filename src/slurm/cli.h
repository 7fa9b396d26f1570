#pragma once
// The `gpuslice slurm ...` commands as library functions (apps/gpuslice/cmd_slurm.cc only
// parses flags and maps the Status to an exit code). Output goes to the given streams so tests
// can read it. Free functions; not thread-safe with respect to the streams.

#include <ostream>
#include <string>
#include <vector>

#include "core/status.h"
#include "slurm/client.h"
#include "slurm/config_gen.h"
#include "slurm/teams_setup.h"

namespace gpuslice::slurm {

// The policy from --policy, or the built-in one when `path` is empty. Errors name the file.
Result<sched::Config> LoadPolicy(const std::string& path);

struct ConfigFlags {
  std::string policy;
  ClusterSpec spec;
  std::string sharing = "shard";  // "shard" | "mps"
  std::string out_dir;            // write slurm.conf.gpuslice + gres.conf there; empty: stdout
};
Status RunSlurmConfig(const ConfigFlags& flags, std::ostream& out, std::ostream& err);

// `gpuslice slurm teams` (also `gpuslice teams --slurm`): the policy's [teams] as slurm.conf
// lines and a sacctmgr script (teams_setup.h); warnings to `err`.
struct TeamsFlags {
  std::string policy;
  std::string cluster;            // Cluster= on every account and user; empty: all clusters
  std::string sharing = "shard";  // as given to `slurm config`
  int shards_per_gpu = 8;         // as given to `slurm config`
  std::string out_dir;            // write slurm.conf.teams + teams-setup.sh there; empty: stdout
};
Status RunSlurmTeams(const TeamsFlags& flags, std::ostream& out, std::ostream& err);

struct SubmitFlags {
  std::string policy;
  std::string queue;
  int gpus = 0;              // 0: not given
  std::string fraction;      // "0.25" or "250m"; empty: not given
  std::string memory;        // "20GiB"; empty: not given
  std::string time;          // "2h"; empty: the queue's limit
  std::string kind;          // "whole" | "shared" | "mps" | "mig"; empty: from the amount / queue
  std::string model;         // whole GPUs of this model, e.g. "H100-80GB"; empty: any
  std::string team;          // a team of the policy: its Slurm account; empty: the default account
  bool borrow = false;       // run in the borrowing QOS (SlurmSubmitRequest::borrow)
  std::string name;
  std::string output;
  bool dry_run = false;
  std::vector<std::string> command;
  SlurmContext slurm;
};
// Prints the job id (or, with dry_run, the sbatch command and script).
Status RunSlurmSubmit(const SubmitFlags& flags, std::ostream& out);

struct PsFlags {
  std::vector<std::string> partitions;
  bool all = false;
  std::vector<std::string> metrics_urls;
  SlurmContext slurm;
};
Status RunSlurmPs(const PsFlags& flags, std::ostream& out);

struct AgentFlags {
  std::string policy;
  std::string backend = "nvml";
  std::string simulate = "8xH100-80GB";
  std::string simulate_script;
  std::string listen = "127.0.0.1:9400";
  std::vector<std::string> nodes;
  std::string interval = "15s";
  std::string hostname;
  std::string usage_log;
  SlurmContext slurm;
};
// Runs until SIGINT or SIGTERM.
Status RunSlurmAgent(const AgentFlags& flags, std::ostream& err);

}  // namespace gpuslice::slurm
