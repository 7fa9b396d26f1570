#pragma once
// Internal to the scheduler: the expected workload that fragmentation-aware policies score
// against (FGD's "typical pods"), learned online from the GPU requests submitted: their shapes
// (GPUs, share per GPU) with frequencies, forgetting old ones by halving every kWindow
// submissions.
//
// Policies see it as of its last refresh (version()), made when a shape it does not list
// arrives, when old ones are forgotten, and once the weight submitted since reaches
// 1/kRefresh of all it counts. So no frequency a policy sees is off by more than 1/kRefresh
// from the counts, every shape submitted is listed at once, and a stable stream of
// submissions refreshes it O(log n) times rather than n: between refreshes the scheduler's
// by-state placement keeps its scores from one decision to the next (a refresh on every
// submission moved every frequency by ~0.01% and made every host state be scored again on
// every step; issue 15, item 4). Not thread-safe (owned by one Scheduler).

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "core/units.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {

class LearnedWorkload {
 public:
  static constexpr std::int64_t kWindow = 10000;
  static constexpr std::int64_t kRefresh = 64;

  // Counts one submitted request of `gpus` GPUs at `milli` each.
  void Count(int gpus, MilliGpu milli);
  // The shapes as of the last refresh, frequencies summing to 1 (empty before any Count()).
  std::span<const WorkloadShape> Shapes() const { return shapes_; }
  // Changes exactly when Shapes() does.
  std::uint64_t version() const { return version_; }

 private:
  void Refresh();

  std::map<std::pair<int, MilliGpu>, std::int64_t> counts_;  // (gpus, milli) -> weight (2 a request)
  std::int64_t total_ = 0;
  std::int64_t since_refresh_ = 0;  // weight counted since the last refresh
  std::vector<WorkloadShape> shapes_;
  std::uint64_t version_ = 0;
};

}  // namespace gpuslice::sched
