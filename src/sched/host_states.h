#pragma once
// Internal to the scheduler: hosts grouped by placement state, so a fragmentation-aware policy
// scores each distinct host state once per decision instead of every host (issue 15, item 4).
//
// A host's state is its model and the placement-relevant fields of its devices (model, mode,
// schedulable, shares, memory, clients, MPS limit), listed in a canonical order: devices
// stable-sorted by used share. Two hosts with equal states show any request the same GPU views
// up to that reordering, and devices with equal used share keep their index order, so a policy
// whose choice on a node depends only on the GPU views and picks the first index among GPUs
// with equal views (PlacementPolicy::ScoresByNodeState) makes the same choice on each, mapped
// through the host's own order. The scheduler marks a host dirty on every device change and
// refreshes dirty hosts before placing. Each state memoises its last score, valid while the
// memo generation (request shape + workload version) is unchanged.
// Not thread-safe (owned by one Scheduler).

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/ids.h"
#include "core/units.h"
#include "sched/placement/placement.h"
#include "sched/scheduler.h"

namespace gpuslice::sched {

// The fields of one device that the scheduler's placement views read.
struct DeviceStateKey {
  std::string model;
  int mode = 0;
  bool schedulable = true;
  MilliGpu used_milli = 0;
  Bytes memory = 0;
  Bytes used_memory = 0;
  int clients = 0;
  int mps_limit = 0;
  // Derived from the fields above (so equal keys agree): the device is free for a whole-GPU
  // slice; the share a shared/MPS slice could take (-1: none). Used only to skip states early.
  bool whole_free = false;
  MilliGpu share_free = -1;  // for a shared slice
  MilliGpu mps_free = -1;    // for an MPS slice
  bool operator==(const DeviceStateKey&) const = default;
};

class HostStates {
 public:
  // A state's memoised policy result (canonical GPU positions), valid for one generation.
  struct Memo {
    std::uint64_t generation = 0;  // 0: never computed
    bool fits = false;
    double score = 0;
    std::vector<int> gpus;  // canonical positions
  };
  struct State {
    std::string host_model;             // model of the host's first device (NodeView::model)
    std::vector<DeviceStateKey> devices;  // canonical order
    std::set<NodeId> hosts;             // hosts in this state, in scan (NodeId) order
    int whole_free = 0;                 // devices with whole_free
    MilliGpu share_free = -1;           // largest share_free
    MilliGpu mps_free = -1;             // largest mps_free
    Memo memo;
  };

  void MarkDirty(NodeId node);
  // Dirty hosts since the last call (each once), emptying the list.
  std::vector<NodeId> TakeDirty();

  // (Re)files `node` with its devices in index order (`devices[i]` has `keys[i]`); no devices:
  // the host is removed. The pointers must stay valid until the host is next refiled.
  void Set(NodeId node, const std::vector<DeviceStateKey>& keys, const std::vector<const DeviceView*>& devices);

  // Live states (each has at least one host), in no particular order, and beside them (same
  // positions) their quick-reject summaries, kept contiguous so a scan of them is cheap.
  struct Summary {
    int whole_free = 0;
    MilliGpu share_free = -1;
    MilliGpu mps_free = -1;
  };
  const std::vector<int>& live() const { return live_; }
  const std::vector<Summary>& live_summaries() const { return live_summary_; }
  State& state(int id) { return states_[id]; }
  // The devices of `node` in canonical order.
  const std::vector<const DeviceView*>& Views(NodeId node) const { return hosts_.at(node).order; }

  std::size_t hosts() const { return hosts_.size(); }

 private:
  struct Host {
    int state = -1;
    std::vector<const DeviceView*> order;  // canonical position -> device
  };
  static std::uint64_t Hash(const State& s);
  void Detach(NodeId node, Host& h);

  std::unordered_map<NodeId, Host> hosts_;
  std::vector<State> states_;
  std::vector<int> free_ids_;
  std::vector<int> live_;
  std::vector<Summary> live_summary_;
  std::vector<std::size_t> live_pos_;                  // state id -> position in live_
  std::unordered_multimap<std::uint64_t, int> by_hash_;  // hash of (host model, devices) -> id
  std::vector<NodeId> dirty_;
  std::unordered_set<NodeId> dirty_set_;
};

}  // namespace gpuslice::sched
