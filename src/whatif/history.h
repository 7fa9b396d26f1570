#pragma once
// What the what-if replays: a site's recorded jobs — request, queue, user, submit time, how
// long each ran and how it ended, its measured activity (busy / idle / unknown runs) and GPU
// memory peak — with the nodes they ran on and the scheduler config they ran under. Three
// readers build one: the daemon's store (store_history.h), a Slurm accounting dump
// (sacct_history.h) and a generic CSV (csv_history.h).
//
// Unknown stays unknown: a job or a stretch of one without a measurement carries an unknown
// run, never an idle or busy one, and a job without a measured memory peak has -1.
// Values; thread-compatible.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "sched/config.h"
#include "sim/openb.h"
#include "sim/replay.h"

namespace gpuslice::whatif {

// How a job's recorded run ended.
enum class RecordedEnd : std::uint8_t {
  kFinished,       // ended by itself (succeeded, failed, cancelled by its owner, lost)
  kIdleReclaimed,  // reclaimed for idleness: what it would have done after is not recorded
  kTimeLimit,      // stopped at its time limit
  kRunning,        // still running at the end of the period
};
std::string_view RecordedEndName(RecordedEnd e);

struct HistoryJob {
  // submit, duration (as it ran; the part before the period's end), queue, user, request,
  // kind, activity runs from its start. `tag` is the job's index in History::jobs.
  sim::ReplayJob job;
  Bytes memory_peak = -1;     // highest GPU memory measured, per device; -1: not measured
  MilliGpu held_milli = 0;    // the share it held (all devices): activity levels are of this
  RecordedEnd ended = RecordedEnd::kFinished;
};

struct History {
  std::string source;               // e.g. "store /var/lib/gpuslice", "sacct dump.txt"
  std::vector<sim::TraceNode> nodes;
  sched::Config config;
  Micros from = 0;                  // the period the jobs were submitted in
  Micros to = 0;
  std::vector<HistoryJob> jobs;
  std::vector<std::string> notes;   // what was skipped or assumed, said in the output
};

// Total GPUs of `nodes`.
int GpuCount(const std::vector<sim::TraceNode>& nodes);

// --cluster "NODESxGPUS[:MODEL[:CPUS[:MEMORY]]]" (as `sim replay --cluster`) as nodes.
Result<std::vector<sim::TraceNode>> NodesFromSpec(std::string_view spec);

// Checks what every scenario relies on: jobs' queues exist in the config (errors name the job
// and the value), tags are indices, runs fit their durations.
Status CheckHistory(const History& h);

}  // namespace gpuslice::whatif
