#pragma once
// Internal to the scheduler: hosts grouped by placement state, so a fragmentation-aware policy
// scores each distinct host state once per decision instead of every host (issue 15, item 4).
//
// A host's state is its model and the placement-relevant fields of its devices (model, mode,
// schedulable, shares, memory, clients, MPS limit, MPS user), listed in a canonical order: devices
// stable-sorted by used share. Two hosts with equal states show any request the same GPU views
// up to that reordering, and devices with equal used share keep their index order, so a policy
// whose choice on a node depends only on the GPU views and picks the first index among GPUs
// with equal views (PlacementPolicy::ScoresByNodeState) makes the same choice on each, mapped
// through the host's own order. Devices no request can use (the caller marks them inert: in MIG
// or whole-GPU mode, or not schedulable) show every request the same unusable view, so their
// key keeps only the model: hosts that differ only in what runs on such devices share a state.
// The scheduler marks a host dirty on every device change and refreshes dirty hosts before
// placing. Each state memoises its score for the last few request shapes (kMemoSlots), each
// valid while that shape's memo generation is (the scheduler starts a new one when the workload
// it shows the policy changes, or when it gives the slot to another shape).
//
// Live states are kept in buckets by their quick-reject summaries (free whole devices, largest
// free share for a shared slice), and by the MPS users of their devices, so a request visits
// only the states that could take it: a request that fits nowhere costs a few bucket checks,
// not a scan of every state. An MPS slice fits only on a free device or on one that serves its
// user's MPS server: it visits the states with a free device and those of its user.
// Not thread-safe (owned by one Scheduler).

#include <array>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/units.h"
#include "sched/placement/placement.h"
#include "sched/views.h"

namespace gpuslice::sched {

// The fields of one device that the scheduler's placement views read.
struct DeviceStateKey {
  int model = 0;  // HostStates::ModelId() of the device's model
  int mode = 0;
  bool schedulable = true;
  MilliGpu used_milli = 0;
  Bytes memory = 0;
  Bytes used_memory = 0;
  Bytes context_reserve = 0;  // booked with each shared/MPS slice that names its memory
  int clients = 0;
  int mps_limit = 0;
  int mps_user = -1;  // HostStates::UserId() of the user whose MPS server runs there; -1: none
  // Derived from the fields above (so equal keys agree): the device is free for a whole-GPU
  // slice; the share a shared/MPS slice could take (-1: none). Used only to skip states early.
  bool whole_free = false;
  MilliGpu share_free = -1;  // for a shared slice
  MilliGpu mps_free = -1;    // for an MPS slice
  bool operator==(const DeviceStateKey&) const = default;
};

// The key of a device no request can use: every field but the model fixed, its used share full
// (so inert devices sort after the others and keep their index order among themselves).
inline DeviceStateKey InertKey(int model) {
  DeviceStateKey k;
  k.model = model;
  k.mode = -1;
  k.schedulable = false;
  k.used_milli = kOneGpu;
  return k;
}

class HostStates {
 public:
  // Request shapes whose results a state keeps at once: a pending pass tries one job of each
  // pending shape, so with fewer slots than shapes every pass would overwrite every result.
  static constexpr int kMemoSlots = 16;
  // A state's memoised policy result (canonical GPU positions), valid for one generation.
  struct Memo {
    std::uint64_t generation = 0;  // 0: never computed
    bool fits = false;
    double score = 0;
    std::vector<int> gpus;  // canonical positions
  };
  struct State {
    std::string_view host_model;          // model of the host's first device (NodeView::model)
    int host_model_id = -1;
    std::vector<DeviceStateKey> devices;  // canonical order
    std::vector<NodeId> hosts;            // hosts in this state, sorted (scan order)
    int whole_free = 0;                   // devices with whole_free
    MilliGpu share_free = -1;             // largest share_free
    MilliGpu mps_free = -1;               // largest mps_free
    // Bit (id % 64) of the UserId() of each device's mps_user: a state without bit u has no
    // device of user u (with it, look at the devices).
    std::uint64_t mps_users = 0;
    std::uint64_t hash = 0;
    std::array<int, 2> slot{-1, -1};  // (bucket, position) per summary kind; see below
    std::array<int, 2> bucket{-1, -1};
    int id = -1;                          // its index (memo(), state())
  };

  // A small integer for a model name (stable for the life of this object; names are kept).
  int ModelId(std::string_view model);
  // ModelId() of a name seen before; -1 if none (nothing is added).
  int FindModelId(std::string_view model) const;
  // The same for user names (DeviceStateKey::mps_user): a small integer, stable for the life of
  // this object; FindUserId(): -1 for a name never given to UserId() (nothing is added).
  int UserId(const std::string& user);
  int FindUserId(const std::string& user) const;

  // `devices_changed`: a device of the host was added or removed (IndexOrder() is then stale).
  void MarkDirty(NodeId node, bool devices_changed = false);
  // The devices of `node` in index order as last Set(), while none was added or removed since;
  // nullptr otherwise (the caller lists them afresh).
  const std::vector<const DeviceView*>* IndexOrder(NodeId node) const {
    auto it = hosts_.find(node);
    return it == hosts_.end() || it->second.devices_changed || it->second.state < 0 ? nullptr : &it->second.index_order;
  }
  // The ModelId() of each device of IndexOrder(node) (valid while IndexOrder() is not nullptr:
  // a device's model does not change while it is present).
  const std::vector<int>& IndexModels(NodeId node) const { return hosts_.at(node).index_models; }
  // Moves the hosts dirty since the last call (each once) into `out`. Each of them must be
  // Set() next (that clears its mark).
  void TakeDirty(std::vector<NodeId>& out);

  // (Re)files `node` with its devices in index order (`devices[i]` has `keys[i]`); no devices:
  // the host is removed. The pointers must stay valid until the host is next refiled. The
  // caller gives an inert device (see above) the key InertKey(model). `devices` may be
  // IndexOrder(node) itself (the keys' models then those of IndexModels(node)).
  void Set(NodeId node, std::span<DeviceStateKey> keys, std::span<const DeviceView* const> devices);

  // Whether ForWhole(gpus, ...) / ForShare(milli, ...) / ForMps(user, milli, ...) could visit a
  // state at all (their buckets are not all empty): a request that fails this fits nowhere.
  bool MayTakeWhole(int gpus) const { return top_[kWhole] >= std::max(gpus, 0); }
  bool MayTakeShare(MilliGpu milli) const { return top_[kShare] >= ShareBucket(std::max<MilliGpu>(milli, 0)); }
  bool MayTakeMps(int user) const { return MayTakeWhole(1) || (user >= 0 && !StatesOfUser(user).empty()); }

  // Calls f(State&) for every live state whose summary could take the request (a necessary
  // condition of fitting): at least `gpus` whole-free devices / a free share of at least `milli`
  // for a shared slice / for an MPS slice of user `user` (UserId(); -1: one with no MPS server
  // here), a free device or an MPS free share of at least `milli` on a state with a device of
  // that user. In no particular order, each state once.
  template <typename F>
  void ForWhole(int gpus, F&& f) {
    for (int b = std::max(gpus, 0); b <= top_[kWhole]; ++b)
      for (int id : buckets_[kWhole][b]) f(states_[id]);
  }
  template <typename F>
  void ForShare(MilliGpu milli, F&& f) {
    const int first = ShareBucket(std::max<MilliGpu>(milli, 0));
    for (int b = first; b <= top_[kShare]; ++b) {
      for (int id : buckets_[kShare][b]) {
        State& s = states_[id];
        if (b == first && s.share_free < milli) continue;
        f(s);
      }
    }
  }
  template <typename F>
  void ForMps(int user, MilliGpu milli, F&& f) {
    ForWhole(1, f);  // a free device takes any share (milli <= kOneGpu)
    if (user < 0) return;
    for (int id : StatesOfUser(user)) {
      State& s = states_[id];
      if (s.whole_free == 0 && s.mps_free >= milli) f(s);  // else visited above, or too full
    }
  }

  State& state(int id) { return states_[id]; }
  // State `id`'s memo in the scheduler's memo slot `slot`. Kept apart from the states, one
  // array per slot, so a request that visits many states reads one compact array.
  Memo& memo(int slot, int id) { return memos_[slot][id]; }
  // The devices of `node` in canonical order.
  const std::vector<const DeviceView*>& Views(NodeId node) const { return hosts_.at(node).order; }

  std::size_t hosts() const { return hosts_.size(); }
  std::size_t live() const { return live_; }

 private:
  struct Host {
    int state = -1;
    bool dirty = false;
    bool devices_changed = false;
    std::vector<const DeviceView*> order;        // canonical position -> device
    std::vector<const DeviceView*> index_order;  // the devices as given to Set()
    std::vector<int> index_models;               // their keys' models
  };
  static constexpr int kWhole = 0, kShare = 1;
  static constexpr int kWholeBuckets = 65;  // whole_free 0..63, 64 and more
  static constexpr int kShareBuckets = 17;  // free share / 64: 0..15 (1000 / 64), beyond
  static int ShareBucket(MilliGpu free) { return static_cast<int>(std::min<MilliGpu>(free / 64, kShareBuckets - 1)); }
  static std::uint64_t Hash(int host_model, std::span<const DeviceStateKey> devices);
  void Detach(NodeId node, Host& h);
  void Bucket(int id);
  void Unbucket(int id);
  // The live states with a device of MPS user `user` (UserId()).
  const std::vector<int>& StatesOfUser(int user) const {
    return static_cast<std::size_t>(user) < user_states_.size() ? user_states_[user] : no_states_;
  }
  // Files state `id` under the MPS users of its devices (`add`), or takes it off.
  void FileUsers(int id, bool add);

  std::unordered_map<NodeId, Host> hosts_;
  std::vector<State> states_;
  std::array<std::vector<Memo>, kMemoSlots> memos_;  // [slot][state id]
  std::vector<int> free_ids_;
  std::size_t live_ = 0;
  std::array<std::vector<std::vector<int>>, 2> buckets_{std::vector<std::vector<int>>(kWholeBuckets),
                                                        std::vector<std::vector<int>>(kShareBuckets)};
  std::array<int, 2> top_{-1, -1};  // per summary kind, the highest non-empty bucket (-1: none)
  std::vector<std::vector<int>> user_states_;  // by UserId(): StatesOfUser(), unordered
  std::vector<int> no_states_;  // always empty: the states of a user with none
  // Live state ids by the hash of (host model, devices): open addressing, linear probing, no
  // allocation per state (kNoState ends a probe, kRetired is skipped); at most half full,
  // retired slots included.
  static constexpr int kNoState = -1, kRetired = -2;
  std::vector<int> by_hash_;
  std::size_t by_hash_used_ = 0;  // slots not kNoState
  int FindState(std::uint64_t hash, int host_model, std::span<const DeviceStateKey> devices) const;
  void AddToTable(int id);
  void RemoveFromTable(int id);
  std::vector<NodeId> dirty_;
  std::deque<std::string> model_names_;  // ModelId -> name (a deque: stable addresses)
  std::unordered_map<std::string, int> user_ids_;  // UserId() by name
  // Scratch for Set() (no allocation per call once warm).
  std::vector<int> perm_;
  std::vector<DeviceStateKey> probe_;
};

}  // namespace gpuslice::sched
