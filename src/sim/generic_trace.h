#pragma once
// Job traces for the online replay:
//  - the generic CSV for one's own history (format in docs/sim.md): a header row, then one job per
//    line with columns submit, duration, gpus (required) and queue, user, memory, cpu, model, id,
//    utilisation, activity (optional);
//  - openb pod lists (creation_time / deletion_time as submit / end).
// Values; thread-compatible.

#include <string>
#include <vector>

#include "core/status.h"
#include "sim/csv.h"
#include "sim/openb.h"
#include "sim/replay.h"

namespace gpuslice::sim {

struct JobList {
  std::vector<ReplayJob> jobs;
  SkippedRows skipped;
};

Result<JobList> ReadGenericJobs(const std::string& path, const ReadOptions& options = {});
// One row of a generic CSV (the table's current record; `row` numbers default ids), for
// readers that add columns of their own (the what-if's history CSV).
Result<ReplayJob> ParseGenericJob(const CsvTable& t, std::int64_t row);

// openb pods with both times; pods without them are an error naming the pod (or counted and
// skipped with skip_bad_rows).
Result<JobList> JobsFromOpenbPods(const PodList& pods, const ReadOptions& options = {});

// Either format, by the header (an openb pod list has num_gpu and gpu_milli columns).
Result<JobList> ReadJobTrace(const std::string& path, const ReadOptions& options = {});

}  // namespace gpuslice::sim
