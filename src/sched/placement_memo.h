#pragma once
// Internal to the scheduler: what placement by host state (ByStateEngine, by_state_placement.h,
// see host_states.h) remembers from one request to the next, and its working space for one request.
//
// PlacementMemo hands out memo slots. HostStates keeps each state's policy result per slot
// (HostStates::memo(slot, id)), valid while its generation is the one Select() gave that slot.
// A slot holds the results of one memo shape under one policy: a request shape (Resolved::shape:
// jobs of one shape ask the same of the same policy, so they score alike) but for the MPS user
// and team, which change nothing a policy scores, so all users' MPS requests of one shape share
// a slot. The slot of the shape selected longest ago is given to a new shape (with a new
// generation, so its old results read as stale); every slot is given up when the workload the
// policy scores against changes. A pending pass tries one job of each pending shape, so the
// slots are as many as HostStates::kMemoSlots.
//
// It also memoises policy results by (host model, GPU views) for the current generation
// (Lookup()): states whose views a request sees alike get one policy call. An entry of a
// generation no slot holds any more is free for reuse.
// Not thread-safe (owned by one Scheduler).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/ids.h"
#include "core/units.h"
#include "sched/host_states.h"
#include "sched/placement/placement.h"
#include "sched/resolved.h"

namespace gpuslice::sched {

class PlacementMemo {
 public:
  // A memo slot and the generation its results must carry to be current.
  struct Ticket {
    int slot = 0;
    std::uint64_t generation = 0;
  };
  // A policy's result on a host's GPU views: fits, its score and the GPUs it chose (positions
  // in the views).
  struct ViewResult {
    bool fits = false;
    double score = 0;
    std::vector<int> gpus;
  };

  // The memo shape of `r`, a small integer numbered in order of first use.
  int ShapeOf(const Resolved& r);
  // The slot that holds the memo shape of `r` under `policy`, else the one selected longest ago
  // with a new generation; it becomes current(). `workload_version`: the version of the
  // workload `policy` scores against (WorkloadModel::version()); when it differs from the last
  // call's, every slot is given up first.
  Ticket Select(const Resolved& r, const PlacementPolicy& policy, std::uint64_t workload_version);
  const Ticket& current() const { return current_; }

  // The result for a host of ModelId `model` whose GPU views are `views`, the first `usable`
  // of them usable and the rest all the same unusable view (so their count stands for them):
  // remembered for the current generation, else compute() (returning a ViewResult) once.
  template <typename F>
  const ViewResult& Lookup(int model, std::span<const GpuView> views, int usable, F compute);

 private:
  // Resolved::ShapeKey() without the MPS user and team.
  using ShapeKey = std::tuple<SliceKind, int, MilliGpu, Bytes, Bytes, std::string, const QueueConfig*>;
  struct ShapeKeyHash {
    std::size_t operator()(const ShapeKey& k) const {
      const auto& [kind, gpus, milli, memory, mig_need, model, queue] = k;
      std::size_t h = std::hash<std::string>()(model);
      for (std::size_t v : {static_cast<std::size_t>(kind), static_cast<std::size_t>(gpus), static_cast<std::size_t>(milli),
                            static_cast<std::size_t>(memory), static_cast<std::size_t>(mig_need),
                            std::hash<const QueueConfig*>()(queue)})
        h = (h ^ v) * 0x100000001b3ULL;
      return h;
    }
  };
  struct Slot {
    int shape = -1;
    const PlacementPolicy* policy = nullptr;
    std::uint64_t generation = 0;  // 0: free
    std::uint64_t used = 0;        // clock_ when last selected
  };
  struct ViewEntry {
    std::uint64_t generation = 0;
    std::uint64_t hash = 0;
    int model = 0;
    std::size_t gpus = 0;         // the views' count
    std::vector<GpuView> usable;  // the usable views, in order
    ViewResult result;
  };
  // Open addressing over a fixed table: a few probes, then an entry is overwritten.
  static constexpr std::size_t kViewEntries = 8192;
  static constexpr int kViewProbes = 8;

  std::unordered_map<ShapeKey, int, ShapeKeyHash> shapes_;  // memo shape ids by key
  std::vector<int> shape_of_;  // Resolved::shape -> its memo shape (-1: not looked up yet)
  std::array<Slot, HostStates::kMemoSlots> slots_;
  std::vector<int> slot_of_shape_;  // memo shape -> the slot it last had (-1: none); check it
  std::uint64_t workload_ = 0;      // the workload version the slots are for
  std::uint64_t clock_ = 0;
  std::uint64_t generations_ = 0;   // generations handed out so far
  std::uint64_t oldest_live_ = 0;   // view entries older than this are free
  Ticket current_;
  std::vector<ViewEntry> views_;    // kViewEntries once used
};

template <typename F>
const PlacementMemo::ViewResult& PlacementMemo::Lookup(int model, std::span<const GpuView> views, int usable,
                                                       F compute) {
  std::uint64_t h = (static_cast<std::uint64_t>(model) * 0x9e3779b97f4a7c15ULL) ^
                    (views.size() << 32 | static_cast<std::uint64_t>(usable));
  for (int i = 0; i < usable; ++i) {
    const GpuView& g = views[i];
    h ^= static_cast<std::uint64_t>(g.free_milli) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= static_cast<std::uint64_t>(g.free_memory) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  if (views_.empty()) views_.resize(kViewEntries);
  const std::size_t mask = views_.size() - 1;
  auto same = [&](const ViewEntry& e) {
    if (e.hash != h || e.model != model || e.gpus != views.size() || e.usable.size() != static_cast<std::size_t>(usable))
      return false;
    for (int i = 0; i < usable; ++i) {
      const GpuView& a = e.usable[i];
      const GpuView& b = views[i];
      if (a.free_milli != b.free_milli || a.free_memory != b.free_memory) return false;
    }
    return true;
  };
  // An entry older than every slot's generation is free (one of another live slot is not).
  // When the probes find neither, the last probed entry is overwritten (a memo, so losing one
  // is only slower).
  std::size_t at = h & mask;
  for (int probe = 0; probe < kViewProbes; ++probe, at = (at + 1) & mask) {
    ViewEntry& e = views_[at];
    if (e.generation == current_.generation && same(e)) return e.result;
    if (e.generation < oldest_live_) break;
  }
  ViewEntry& e = views_[at];
  e.generation = current_.generation;
  e.hash = h;
  e.model = model;
  e.gpus = views.size();
  e.usable.assign(views.begin(), views.begin() + usable);
  e.result = compute();
  return e.result;
}

// ByStateEngine::Place()'s working space for one request, kept between requests only so that its vectors
// keep their capacity (no allocation per request once warm).
struct ByStateScratch {
  int model = 0;  // ViewOfKey()'s `model` for the request
  int user = -1;  // HostStates' id of an MPS request's user (-1: none)
  std::vector<HostStates::State*> top;  // the states of the best score
  // The results of the states that serve the requesting user's MPS server (state id, result),
  // the first `own_used` of them valid: scored for this request only, not memoised.
  std::vector<std::pair<int, HostStates::Memo>> own;
  std::size_t own_used = 0;
  std::vector<std::pair<NodeId, HostStates::State*>> tied;  // tied hosts and their states
  // ScoreState: the GPU views of a state's host shown to the policy, and for each its canonical
  // position.
  std::vector<GpuView> gpus;
  std::vector<int> pos;
  // RefileHost and the dirty hosts it refiles.
  std::vector<DeviceStateKey> keys;
  std::vector<const DeviceView*> devs;
  std::vector<NodeId> dirty;
};

}  // namespace gpuslice::sched
