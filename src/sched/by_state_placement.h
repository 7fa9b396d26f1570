#pragma once
// Internal to the scheduler: placement by host state, one owned part of Scheduler::Impl.
// For policies that ScoresByNodeState() it makes the generic Filter/Score path's decision
// (GenericPlacement: Place() over every host in NodeId order, placement.h) by
// scoring each distinct host state once (host_states.h), with results memoised per request
// shape and by GPU views (placement_memo.h). The scheduler tells it which hosts changed
// (MarkDirty); it refiles them from the devices before the next Place().
// Not thread-safe (owned by one Scheduler).

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "core/ids.h"
#include "sched/host_states.h"
#include "sched/placement/placement.h"
#include "sched/placement_memo.h"
#include "sched/resolved.h"
#include "sched/views.h"
#include "sched/workload_model.h"

namespace gpuslice::sched {

// What a placement policy is shown of request `r`: its GPUs and share, the RNG for ties and the
// workload, brought up to date first. The generic path and ByStateEngine both build it here, so
// that the two paths show a policy the same thing (their decisions must be the same).
struct PolicyInput {
  PlacementRequest req;
  PlacementContext ctx;
};
inline PolicyInput PolicyInputFor(const Resolved& r, std::mt19937_64& rng, WorkloadModel& workload) {
  PolicyInput in;
  in.req.num_gpus = r.gpus;
  in.req.milli_per_gpu = r.milli;
  in.ctx.rng = &rng;
  in.ctx.workload = workload.Shapes();
  return in;
}

class ByStateEngine {
 public:
  // A host and the devices on it that Place() chose (sorted).
  struct Pick {
    NodeId node;
    std::vector<DeviceIndex> devices;
  };

  // Off until some queue's policy ScoresByNodeState() (TurnOn()); then on for good, as a queue
  // version's policy is kept while jobs of that version remain. While off, MarkDirty() does
  // nothing: no host is filed, so turning on must mark every host with devices_changed.
  bool on() const { return on_; }
  void TurnOn() { on_ = true; }
  // Tests and benchmarks: the scheduler places with the generic path instead (same decisions).
  void set_reference(bool on) { reference_ = on; }
  // Reference placement: every policy, the built-in indexed ones too, scores every candidate
  // host through its plugin (PlaceGeneric); tests and benchmarks compare it with the fast paths.
  bool reference() const { return reference_; }
  // Whether the scheduler places requests of `policy` with Place().
  bool Serves(const PlacementPolicy& policy) const { return on_ && !reference_ && policy.ScoresByNodeState(); }

  // A device of `node` changed in a way a placement view could see; `devices_changed`: one
  // was added or removed. Every such change must be marked before the next Place().
  void MarkDirty(NodeId node, bool devices_changed = false) {
    if (on_) states_.MarkDirty(node, devices_changed);
  }

  // The generic path's choice for `r` under `policy` (Serves(policy)), or none: the same
  // scores, and the same draw from `rng` among the hosts of the best score. `devices`: every
  // device, ordered by (node, index), as the scheduler books them (read only to refile the
  // dirty hosts; the filed hosts keep pointers to them). `workload`: what `policy` scores
  // against. The caller counts the attempt.
  std::optional<Pick> Place(const Resolved& r, const PlacementPolicy& policy,
                            const std::map<DeviceRef, DeviceView>& devices, WorkloadModel& workload,
                            std::mt19937_64& rng);

 private:
  static constexpr int kAnyModel = -2;  // ViewOfKey()'s `model` when r.model is empty
  // Place(): up to this many tied hosts are gathered and the k-th found directly; more (a best
  // state holding many hosts) by bisection over host ids.
  static constexpr std::uint64_t kGatherTies = 64;

  static GpuView ViewOfKey(const Resolved& r, int model, int user, const DeviceStateKey& k);
  void RefileHost(NodeId nid, const std::map<DeviceRef, DeviceView>& devices);
  void ScoreState(const Resolved& r, const PlacementPolicy& policy, const PlacementRequest& req,
                  const PlacementContext& ctx, const HostStates::State& s, int user, HostStates::Memo& m);
  // Whether state `s` has a device serving the MPS server of `user` (HostStates::UserId()).
  static bool ServesMpsUser(const HostStates::State& s, int user);

  bool on_ = false;
  bool reference_ = false;
  HostStates states_;
  // Which memo slot of states_ a request's results go to, and policy results by GPU views. A
  // slot holds what a user who runs no MPS server on the state would get; Place() scores the
  // few states that serve the requesting user's MPS server apart (ByStateScratch::own), for
  // that request only.
  PlacementMemo memo_;
  ByStateScratch scratch_;
};

}  // namespace gpuslice::sched
