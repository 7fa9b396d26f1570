#pragma once
// What the simulator's trace readers promise about every value they return (sim/openb.h,
// sim/generic_trace.h): the replay and the FGD protocol rely on it without re-checking.

#include <limits>
#include <string>

#include "fuzz/fuzz_util.h"
#include "sim/generic_trace.h"
#include "sim/openb.h"

namespace gpuslice::fuzz {

inline void CheckRequest(const sched::PlacementRequest& r, const std::string& where) {
  Check(r.cpu_milli >= 0, where + ": negative cpu_milli");
  Check(r.host_memory >= 0, where + ": negative host memory");
  Check(r.num_gpus >= 0 && r.num_gpus <= 1024, where + ": num_gpus out of range");
  Check(r.milli_per_gpu >= 0 && r.milli_per_gpu <= kOneGpu, where + ": milli_per_gpu out of 0..1000");
  Check(r.num_gpus <= 1 || r.milli_per_gpu == kOneGpu || r.milli_per_gpu == 0,
        where + ": a share of a GPU on more than one GPU");
  Check(r.gpu_memory_per_gpu >= 0, where + ": negative GPU memory");
}

inline void CheckJobs(const sim::JobList& list) {
  for (const sim::ReplayJob& j : list.jobs) {
    const std::string where = "job '" + j.id + "' (" + j.where + ")";
    Check(j.submit >= 0, where + ": negative submit time");
    Check(j.duration >= 0, where + ": negative duration");
    Check(j.submit <= std::numeric_limits<Micros>::max() - j.duration, where + ": submit + duration overflows");
    Check(j.utilisation == -1 || (j.utilisation >= 0 && j.utilisation <= 1),
          where + ": utilisation outside 0..1");
    CheckRequest(j.request, where);
  }
  Check(list.skipped.count >= 0, "negative skipped count");
  Check(list.skipped.first_errors.size() <= sim::SkippedRows::kMaxKept, "too many kept errors");
}

inline void CheckNodes(const sim::NodeList& list) {
  for (const sim::TraceNode& n : list.nodes) {
    Check(n.cpu_milli >= 0 && n.memory >= 0 && n.gpus >= 0 && n.gpus <= 64,
          "node '" + n.name + "': value out of range");
  }
}

inline void CheckPods(const sim::PodList& list) {
  for (const sim::TracePod& p : list.pods) {
    const std::string where = "pod '" + p.name + "'";
    Check(p.cpu_milli >= 0 && p.memory >= 0, where + ": negative cpu or memory");
    Check(p.num_gpus >= 0 && p.num_gpus <= 64, where + ": num_gpu out of range");
    Check(p.milli_per_gpu >= 0 && p.milli_per_gpu <= kOneGpu, where + ": gpu_milli out of range");
    Check(p.creation_s >= -1 && p.deletion_s >= -1 && p.scheduled_s >= -1, where + ": negative time");
  }
}

}  // namespace gpuslice::fuzz
