#pragma once
// A history from a generic CSV (the columns `sim replay` reads, docs/sim.md), with three more
// the what-if uses: `activity` (the job's busy / idle / unknown runs, sim/activity.h; read by
// the generic reader), `memory_peak` (the highest GPU memory it used, per device) and `ended`
// (finished | reclaimed | time-limit | running). A job with only `utilisation` is one run at
// that level (busy if at or above its queue's idle threshold, else idle); a job with neither
// is one unknown run. Without a config, each queue of the file is a queue with no limits and
// no idle policy (sim::ReplayConfig). Errors name the file, line, column and value.
// Free functions; thread-compatible.

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/config.h"
#include "sim/csv.h"
#include "sim/openb.h"
#include "whatif/history.h"

namespace gpuslice::whatif {

Result<History> HistoryFromCsv(const std::string& path, std::vector<sim::TraceNode> nodes,
                               std::optional<sched::Config> config, const sim::ReadOptions& options = {});

// The runs for a job recorded only with a mean utilisation (-1: unknown) over `duration`,
// judged against its queue's idle threshold (5 % where the queue has no idle policy).
std::vector<sim::ActivityRun> RunsFromUtilisation(double utilisation, Micros duration, const sched::QueueConfig* queue);

}  // namespace gpuslice::whatif
