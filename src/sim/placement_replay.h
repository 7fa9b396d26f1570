#pragma once
// The placement-only replay loop that `gpuslice sim replay` ran before it drove sched::Scheduler:
// first-come first-served per request shape with backfill across shapes, one placement plugin
// over sim::Cluster (CPU and host memory included), no queues, limits, idle reclaim or MIG.
// Kept only as the replay benchmark's speed baseline (bench/sim/replay_bench.cc).
//
// Speed: nodes in identical states (model, capacities, free CPU, memory and sorted GPU shares)
// are interchangeable for a pure policy (placer.h), so the loop scores each distinct state once
// per request class; choosing among n nodes costs O(distinct states), not O(n).
// Not thread-safe.

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sched/placement/placement.h"
#include "sim/cluster.h"
#include "sim/replay.h"

namespace gpuslice::sim {

// A stable text key of a placement request (equal requests, equal keys).
std::string RequestKey(const sched::PlacementRequest& r);

ReplayResult RunPlacementReplay(Cluster cluster, std::vector<ReplayJob> jobs, const sched::PlacementPolicy& policy,
                                std::span<const sched::WorkloadShape> shapes, const ReplayOptions& options = {},
                                const std::function<void(double)>& progress = {});

}  // namespace gpuslice::sim
