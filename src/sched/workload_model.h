#pragma once
// Internal to the scheduler: the learned workload as placement policies see it (FGD's "typical
// pods" with their supply shares). It owns the learned shapes (LearnedWorkload, counted from
// the non-MIG requests submitted) and the hosts by device count, and remakes the shapes with
// their supply shares only when either changed: a shape of k GPUs can use the hosts with k
// devices or more, and the learned shapes ask no CPU, memory or model, so the count of hosts
// per size is all SetSupplyShares() reads of them. Not thread-safe (owned by one Scheduler,
// like its other books).

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "core/units.h"
#include "sched/learned_workload.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {

class WorkloadModel {
 public:
  // Counts one submitted request of `gpus` GPUs at `milli` each (LearnedWorkload::Count).
  void Count(int gpus, MilliGpu milli) { learned_.Count(gpus, milli); }
  // A host's device count went from `before` to `after` (0: no such host, before it was added
  // or after its last device left).
  void HostResized(std::size_t before, std::size_t after);

  // The learned shapes, each with its supply share on the hosts; remade when either changed.
  // Valid until the next call that changes this model.
  std::span<const WorkloadShape> Shapes();
  // Changes exactly when what Shapes() returns does; 0 before the first Shapes().
  std::uint64_t version() const { return version_; }

 private:
  LearnedWorkload learned_;
  std::vector<WorkloadShape> shapes_;      // Shapes(): learned_'s with supply shares
  std::uint64_t shapes_of_ = 0;            // the learned_.version() they were made from
  bool hosts_changed_ = true;              // hosts_by_size_ changed since they were made
  std::map<std::size_t, std::int64_t> hosts_by_size_;  // device count -> hosts (> 0 each)
  std::uint64_t version_ = 0;
};

}  // namespace gpuslice::sched
