#pragma once
// The Slurm side of gpuslice's CLI: submit a job to the partition, GRES and time its queue
// calls for, list jobs, and the few job operations the agent needs. Every Slurm command runs
// with a deadline (SlurmContext::timeout), so a controller that is down or hung gives
// Unavailable quickly instead of a hang. Commands are the Slurm 22.05 CLI tools (sbatch,
// squeue, scontrol, scancel, sinfo) with plain -o formats, not --json.
// Free functions; thread-safe.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "sched/config.h"

namespace gpuslice::slurm {

// Where Slurm is and how long to wait for it.
struct SlurmContext {
  std::string slurm_conf;           // SLURM_CONF for the commands; empty: Slurm's default
  Micros timeout = 10 * kSecond;    // per command
  std::string bin_dir;              // where sbatch etc. are; empty: PATH
  std::map<std::string, std::string> env;  // extra environment for every command
};

struct SlurmSubmitRequest {
  std::string queue;                    // empty: the policy's default queue
  std::optional<int> gpus;              // whole GPUs (training-style)
  std::optional<MilliGpu> fraction;     // share of one GPU (interactive-style shard slices)
  std::optional<Bytes> memory;          // MIG: the smallest instance with at least this memory
  std::optional<Micros> time;           // at most the queue's limit; default: the queue's limit
  std::optional<sched::SliceKind> kind;  // asked for; else from the amount given, else the queue's
  std::string model;                    // whole GPUs of this model (a typed gpu GRES); "": any
  // A team of the policy's [teams]: the job runs in its Slurm account (`gpuslice slurm teams`
  // makes one per team). "": the user's default account.
  std::string team;
  // The job borrows: it runs in QOS gpuslice-borrow (kBorrowQos, teams_setup.h), on idle GPUs
  // past its team's share, and is requeued when a team's job needs them. Only in a preemptible
  // queue of a policy with [teams] (where `gpuslice slurm teams` makes that QOS).
  bool borrow = false;
  std::vector<std::string> command;     // argv; run by a /bin/sh batch script with exec
  std::string job_name;                 // default: "gpuslice-<queue>"
  std::string output;                   // default: "<workdir>/gpuslice-%j.out"
  std::string workdir;                  // default: current directory
  std::map<std::string, std::string> env;  // exported to the job in addition to the caller's
  std::vector<std::string> sbatch_extra;   // passed to sbatch as is (e.g. --nodelist=node1)
  sched::Config policy = sched::DefaultConfig();  // the queue policy (gpuslice.toml)
  SlurmContext slurm;
};

// What the submission turned into (also what `--dry-run` prints).
struct SlurmSubmission {
  std::string partition;
  std::string gres;          // "shard:2", "gpu:1", "gpu:3g.40gb:1"
  std::string time_limit;    // Slurm format, "" when none
  std::vector<std::string> sbatch_args;
  std::string script;
};

// Builds the sbatch call from the request and the policy, asking Slurm (sinfo) only for the
// partition's GRES (shards per GPU, MIG types). Errors: NotFound for a queue not in the policy
// or a partition Slurm does not have; InvalidArgument for a request the queue does not allow
// (kind, time over the limit, a shared slice over one GPU); Unavailable when Slurm is down.
Result<SlurmSubmission> PlanSlurmSubmission(const SlurmSubmitRequest& request);

// Plans and runs sbatch; returns the Slurm job id ("123").
Result<std::string> SubmitToSlurm(const SlurmSubmitRequest& request);

// One row of `gpuslice slurm ps`.
struct SlurmJobRow {
  std::string job_id;
  std::string partition;
  std::string name;
  std::string user;
  std::string state;         // RUNNING, PENDING, TIMEOUT, ...
  std::string elapsed;       // as squeue prints it
  std::string time_limit;
  std::string gres;          // tres-per-node, e.g. "gres:shard:2"
  std::string nodes_or_reason;
  std::optional<double> gpu_util_percent;  // from the agents' /metrics, when known
};

struct ListOptions {
  std::vector<std::string> partitions;   // empty: all
  bool all_states = false;               // include finished jobs still known to slurmctld
  std::vector<std::string> metrics_urls; // agents' /metrics endpoints for utilisation
  SlurmContext slurm;
};

// squeue rows (-o format), with utilisation merged from every reachable metrics URL (an
// unreachable agent leaves gpu_util_percent empty; it is not an error).
Result<std::vector<SlurmJobRow>> ListSlurmJobs(const ListOptions& options);

// `scontrol show job <id>` as key=value pairs (JobState, Partition, TimeLimit, StdOut, ...).
Result<std::map<std::string, std::string>> ShowJob(const std::string& job_id, const SlurmContext& ctx);

Status CancelJob(const std::string& job_id, const SlurmContext& ctx);
Status RequeueJob(const std::string& job_id, const SlurmContext& ctx);

// Names of the partitions Slurm has (sinfo).
Result<std::vector<std::string>> ListPartitions(const SlurmContext& ctx);

// Parses `scontrol show job` output (exposed for tests).
std::map<std::string, std::string> ParseScontrolRecord(const std::string& text);

// Per-job utilisation from Prometheus text: the gpuslice_slurm_job_gpu_utilization_percent
// samples, keyed by job id (exposed for tests).
std::map<std::string, double> ParseJobUtilisation(const std::string& metrics_text);

}  // namespace gpuslice::slurm
