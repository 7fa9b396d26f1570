#pragma once
// Internal to the scheduler: the placement engine, one owned part of Scheduler::Impl. It
// chooses where a request goes: a MIG request on a free instance; a request of a queue whose
// policy is built in and indexed (best-fit, packing, spread: FastOrder) by walking the capacity
// index, which takes exactly the decisions of the plugin of the same name (placement/simple.cc)
// without scoring every host; any other request through its policy, by host state
// (ByStateEngine, by_state_placement.h) for policies that ScoresByNodeState(), else by the
// generic Filter/Score path (GenericPlacement, generic_placement.h). It owns both of those and
// the learned workload the fragmentation-aware policies score against (WorkloadModel).
// In reference mode every non-MIG request goes through its policy (tests and benchmarks
// compare the two; the decisions are the same).
// Not thread-safe (owned by one Scheduler).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "core/ids.h"
#include "sched/by_state_placement.h"
#include "sched/cluster_state.h"
#include "sched/generic_placement.h"
#include "sched/placement/placement.h"
#include "sched/queue_versions.h"
#include "sched/resolved.h"
#include "sched/views.h"
#include "sched/workload_model.h"

namespace gpuslice::sched {

// Where a request goes: a host, its devices there (sorted) and, for MIG, the instance.
struct PlacementChoice {
  NodeId node;
  std::vector<DeviceIndex> devices;
  std::optional<MigPlacement> mig;
};

class PlacementEngine {
 public:
  // The choice for non-MIG request `r` of a queue that places as `q`, on `cluster` (whose every
  // device change since the last call was marked, MarkDirty()); `rng` breaks the policies' ties.
  // Adds the placement attempts made to `attempts`: one per device or host an indexed path
  // tries, one per decision through a policy.
  std::optional<PlacementChoice> Place(const Resolved& r, const QueueVersions::Placement& q,
                                       const ClusterState& cluster, std::mt19937_64& rng, std::uint64_t& attempts);
  // MIG request `r`: a free instance of the smallest fitting profile, on the lowest device
  // (deterministic). One attempt per model that has such a profile.
  static std::optional<PlacementChoice> PlaceMig(const Resolved& r, const ClusterState& cluster,
                                                 std::uint64_t& attempts);

  // A queue places with `policy` (QueueVersions::Placement's; may be null): one that scores by
  // host state turns placement by host state on for good, and it files every host of `cluster`
  // then, as it filed none while off.
  void UsePolicy(const PlacementPolicy* policy, const ClusterState& cluster);
  // A device of `node` changed in a way a placement view could see; `devices_changed`: one was
  // added or removed (ClusterState's callback).
  void MarkDirty(NodeId node, bool devices_changed) { by_state_.MarkDirty(node, devices_changed); }
  // Tests and benchmarks: every non-MIG request through its policy (same decisions).
  void set_reference(bool on) { by_state_.set_reference(on); }

  // The learned workload: a non-MIG request of `gpus` GPUs at `milli` each was submitted; a
  // host's device count went from `before` to `after` (WorkloadModel::HostResized).
  void CountRequest(int gpus, MilliGpu milli) { workload_.Count(gpus, milli); }
  void HostResized(std::size_t before, std::size_t after) { workload_.HostResized(before, after); }

 private:
  WorkloadModel workload_;  // what fragmentation-aware policies score against
  // The generic path's decisions for policies that ScoresByNodeState(), per distinct host state.
  ByStateEngine by_state_;
  GenericPlacement generic_;  // the generic Filter/Score path, for other policies (and reference mode)
};

}  // namespace gpuslice::sched
