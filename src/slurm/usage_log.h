#pragma once
// Per-job GPU activity as gpuslice's Slurm agent saw it (`gpuslice agent --slurm
// --usage-log FILE`): Slurm's accounting knows when a job held its GPUs but not whether it used
// them, so the agent keeps, per job, the runs of its per-round verdict (busy at a level / idle /
// unknown, sim/activity.h) and its highest GPU memory, and appends one CSV line per job when
// the job leaves its view (or the agent stops). `gpuslice whatif --sacct dump --slurm-usage
// FILE` joins them to the accounting dump by job id.
//
//   job_id,user,partition,gres,first_seen,last_seen,activity,memory_peak,reclaimed
//   42,alice,interactive,gres:shard:2,1796083200,1796090400,a15m@80 i1h45m,2147483648,
//
// gres is what the job holds as squeue shows it (its tres-per-node): Slurm's accounting has GPU
// TRES only with slurmdbd, so this is where a site without it learns each job's GPUs.
// first_seen / last_seen are seconds since the epoch of the agent's first and last round that
// saw the job; activity covers (first_seen, last_seen] with each round standing for the time
// since the previous one; levels are per mille of one whole GPU (the job's processes summed,
// capped at one GPU); memory_peak is bytes (empty: never measured); reclaimed is "cancel" or
// "requeue" when the agent reclaimed the job. A job seen by two agent runs has two lines.
// UsageRecorder: not thread-safe (the agent's round thread). ReadUsageLog: free function.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "sched/events.h"
#include "sim/activity.h"
#include "sim/csv.h"

namespace gpuslice::slurm {

struct UsageRecord {
  std::string job_id;
  std::string user;
  std::string partition;
  std::string gres;
  Micros first_seen = 0;
  Micros last_seen = 0;
  std::vector<sim::ActivityRun> activity;
  Bytes memory_peak = -1;
  std::string reclaimed;  // "", "cancel", "requeue"
};

class UsageRecorder {
 public:
  explicit UsageRecorder(std::string path);  // "" : records nothing

  struct Round {
    std::string job_id;
    std::string user;
    std::string partition;
    std::string gres;
    sched::Activity verdict = sched::Activity::kUnknown;
    std::optional<int> permille;  // of one GPU
    std::optional<Bytes> memory;
  };
  // One round at `now`: each running job's verdict; jobs seen before and absent now have left
  // and are written.
  Status Observe(Micros now, const std::vector<Round>& jobs);
  void MarkReclaimed(const std::string& job_id, std::string how);
  // Writes every job still open (the agent stops).
  Status Flush();

  static std::string Header();
  static std::string Line(const UsageRecord& r);

 private:
  Status Write(const UsageRecord& r);
  std::string path_;
  std::map<std::string, UsageRecord> open_;
};

// Every record of a usage log; bad lines are errors naming the line and column (or counted and
// skipped, with skip_bad_rows).
struct UsageLog {
  std::vector<UsageRecord> records;
  sim::SkippedRows skipped;
};
Result<UsageLog> ReadUsageLog(const std::string& path, const sim::ReadOptions& options = {});

}  // namespace gpuslice::slurm
