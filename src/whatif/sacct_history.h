#pragma once
// A history from a Slurm accounting dump — what
//   sacct --allusers --allocations --parsable2 -S <from> -E <to>
//         --format=JobID,User,Partition,Submit,Start,End,State,AllocTRES,Comment
// prints ('|'-separated, a header line first; `sacct -c` over a jobcomp/filetxt log gives the
// same columns) — joined by job id with the usage log gpuslice's Slurm agent wrote
// (slurm/usage_log.h), which is where per-job utilisation comes from: Slurm records when a job
// held its GPUs, not whether it used them. A job the agent never saw has one unknown run.
//
// GPUs from AllocTRES: gres/gpu:<MIG profile>=1 is a MIG instance of that profile's memory;
// gres/gpu=N whole GPUs; gres/shard=N a shared slice of N/shards_per_gpu of a GPU; gres/mps=N
// an MPS share of N %. Slurm accounts GPU TRES only with slurmdbd; without it (`sacct -c`
// over a jobcomp/filetxt log) AllocTRES has no GPUs and the GRES the agent saw the job hold
// (the usage log's `gres`) is used instead. A Comment "gpuslice queue=Q kind=K" (what
// `gpuslice submit --slurm` sets) names the queue; otherwise the partition is the queue.
// Times are read in the local time zone, as sacct prints them. States: TIMEOUT is a time
// limit, a job the agent cancelled for idleness (its usage line says so) is an idle reclaim,
// RUNNING runs on past the dump; a requeued job's last run is the one replayed; jobs that
// never started, jobs without GPUs and steps (JobID with '.') are left out.
// Errors name the file, the line, the column and the value. Free functions; thread-compatible.

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/config.h"
#include "sim/csv.h"
#include "sim/openb.h"
#include "whatif/history.h"

namespace gpuslice::whatif {

struct SacctOptions {
  int shards_per_gpu = 8;  // as `gpuslice slurm config` generates (its --shards-per-gpu)
  sim::ReadOptions read;
};

// Without a config every partition is a queue allowing every slice kind, with no limits and
// no idle policy.
Result<History> HistoryFromSacct(const std::string& dump, const std::string& usage_log, std::vector<sim::TraceNode> nodes,
                                 std::optional<sched::Config> config, const SacctOptions& options = {});

}  // namespace gpuslice::whatif
