#pragma once
// Online replay: jobs arrive at their submit time, run for their duration and depart; a job that
// does not fit waits. Queue discipline: first-come first-served per request class with backfill
// across classes (a job waits only behind earlier jobs of the same shape, since those would take
// any room that opens first); a job that could never fit, even on an empty node, is rejected at
// once. Placement uses one placement plugin over the simulated cluster; the clock jumps from
// event to event (departures before arrivals at the same instant).
//
// Speed: nodes in identical states (model, capacities, free CPU, memory and sorted GPU shares)
// are interchangeable for a pure policy (placer.h), so the loop scores each distinct state once
// per request class and keeps that score for as long as the state exists; choosing among n nodes
// costs O(distinct states), not O(n). Within a state, the lowest node index is used; GPU indices
// are the policy's choice on the node's GPUs sorted by free share (same shares, same choice).
// Not thread-safe.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/placement/placement.h"
#include "sim/cluster.h"

namespace gpuslice::sim {

struct ReplayJob {
  std::string id;
  Micros submit = 0;
  Micros duration = 0;
  std::string queue = "default";
  sched::PlacementRequest request;
  double utilisation = -1;  // 0..1 of the held GPU share when known; -1 unknown
};

struct ReplayOptions {
  int samples = 200;  // points of the allocation / fragmentation time series
};

struct ReplaySample {
  Micros time = 0;
  double alloc_pct = 0;      // allocated / capacity
  double frag_pct = 0;       // FGD fragmentation / capacity
  std::int64_t pending = 0;
  std::int64_t running = 0;
};

struct ReplayResult {
  std::string policy;
  std::int64_t jobs = 0;
  std::int64_t started = 0;
  std::int64_t rejected = 0;       // could never fit
  std::int64_t never_started = 0;  // still waiting at the end of the trace
  std::vector<Micros> delays;      // queueing delay of each started job, sorted
  double delay_p50_s = 0, delay_p95_s = 0, delay_p99_s = 0, delay_mean_s = 0;
  double mean_alloc_pct = 0;       // time-weighted over [first submit, last event]
  double gpu_hours_held = 0;
  double gpu_hours_used = 0;       // over jobs with known utilisation
  double gpu_hours_held_known = 0; // held by those jobs
  std::vector<ReplaySample> series;
  double seconds = 0;
  std::uint64_t scored = 0;
};

// Replays `jobs` (any order; sorted by submit time inside) on `cluster` with `policy`.
// `shapes`: the expected workload for fragmentation-aware policies (e.g. TypicalShapes of the
// trace). `progress` (may be empty) gets the fraction done.
ReplayResult RunReplay(Cluster cluster, std::vector<ReplayJob> jobs, const sched::PlacementPolicy& policy,
                       std::span<const sched::WorkloadShape> shapes, const ReplayOptions& options = {},
                       const std::function<void(double)>& progress = {});

// The workload shapes of replay jobs (by request; CPU, count, share, models), all of them.
std::vector<sched::WorkloadShape> ReplayShapes(const std::vector<ReplayJob>& jobs);

}  // namespace gpuslice::sim
