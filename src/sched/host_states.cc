#include "sched/host_states.h"

#include <algorithm>

namespace gpuslice::sched {

int HostStates::ModelId(std::string_view model) {
  // A handful of models per cluster: a linear search beats hashing the name.
  for (std::size_t i = 0; i < model_names_.size(); ++i) {
    if (model_names_[i] == model) return static_cast<int>(i);
  }
  model_names_.emplace_back(model);
  return static_cast<int>(model_names_.size() - 1);
}

int HostStates::FindModelId(std::string_view model) const {
  for (std::size_t i = 0; i < model_names_.size(); ++i) {
    if (model_names_[i] == model) return static_cast<int>(i);
  }
  return -1;
}

int HostStates::UserId(const std::string& user) {
  return user_ids_.try_emplace(user, static_cast<int>(user_ids_.size())).first->second;
}

int HostStates::FindUserId(const std::string& user) const {
  auto it = user_ids_.find(user);
  return it == user_ids_.end() ? -1 : it->second;
}

std::uint64_t HostStates::Hash(int host_model, std::span<const DeviceStateKey> devices) {
  // Two words a device, each folded in with a multiply; they need not take every bit of every
  // field (equality is checked). The high half is folded down at the end: the table indexes
  // by the low bits.
  constexpr std::uint64_t kOdd = 0x9e3779b97f4a7c15ULL;
  std::uint64_t h = static_cast<std::uint64_t>(host_model) + 1;
  for (const DeviceStateKey& d : devices) {
    h = (h ^ (static_cast<std::uint64_t>(d.model) << 48 ^ static_cast<std::uint64_t>(d.mode + 2) << 40 ^
              static_cast<std::uint64_t>(d.schedulable ? 1 : 0) << 39 ^ static_cast<std::uint64_t>(d.clients) << 20 ^
              static_cast<std::uint64_t>(d.mps_limit) << 11 ^ static_cast<std::uint64_t>(d.used_milli) ^
              static_cast<std::uint64_t>(d.mps_user + 1) << 52)) *
        kOdd;
    h = (h ^ static_cast<std::uint64_t>(d.memory) ^ static_cast<std::uint64_t>(d.used_memory) << 17) * kOdd;
  }
  return h ^ h >> 32;
}

int HostStates::FindState(std::uint64_t hash, int host_model, std::span<const DeviceStateKey> devices) const {
  if (by_hash_.empty()) return -1;
  const std::size_t mask = by_hash_.size() - 1;
  for (std::size_t i = hash & mask; by_hash_[i] != kNoState; i = (i + 1) & mask) {
    const int id = by_hash_[i];
    if (id == kRetired) continue;
    const State& s = states_[id];
    if (s.hash == hash && s.host_model_id == host_model &&
        std::equal(devices.begin(), devices.end(), s.devices.begin(), s.devices.end()))
      return id;
  }
  return -1;
}

void HostStates::AddToTable(int id) {
  if (2 * (by_hash_used_ + 1) > by_hash_.size()) {
    // Rebuilt from the live states (retired slots dropped), twice as large if they need it.
    std::size_t size = std::max<std::size_t>(by_hash_.size(), 64);
    while (4 * (live_ + 1) > size) size *= 2;
    by_hash_.assign(size, kNoState);
    by_hash_used_ = 0;
    for (const State& s : states_) {
      if (!s.hosts.empty() && s.id != id) AddToTable(s.id);
    }
  }
  const std::size_t mask = by_hash_.size() - 1;
  std::size_t i = states_[id].hash & mask;
  while (by_hash_[i] >= 0) i = (i + 1) & mask;
  if (by_hash_[i] == kNoState) ++by_hash_used_;
  by_hash_[i] = id;
}

void HostStates::RemoveFromTable(int id) {
  const std::size_t mask = by_hash_.size() - 1;
  std::size_t i = states_[id].hash & mask;
  while (by_hash_[i] != id) i = (i + 1) & mask;
  by_hash_[i] = kRetired;
}

void HostStates::MarkDirty(NodeId node, bool devices_changed) {
  Host& h = hosts_[node];
  h.devices_changed = h.devices_changed || devices_changed;
  if (!h.dirty) {
    h.dirty = true;
    dirty_.push_back(node);
  }
}

void HostStates::TakeDirty(std::vector<NodeId>& out) {
  out.clear();
  out.swap(dirty_);
}

// Buckets: whole-free count (kWhole), and largest free share / 64 for shared slices (kShare);
// a state with no share free (-1) is in no share bucket.
void HostStates::Bucket(int id) {
  State& s = states_[id];
  const int b[2] = {std::min(s.whole_free, kWholeBuckets - 1), s.share_free < 0 ? -1 : ShareBucket(s.share_free)};
  for (int k = 0; k < 2; ++k) {
    s.bucket[k] = b[k];
    if (b[k] < 0) continue;
    std::vector<int>& v = buckets_[k][b[k]];
    s.slot[k] = static_cast<int>(v.size());
    v.push_back(id);
    top_[k] = std::max(top_[k], b[k]);
  }
}

void HostStates::Unbucket(int id) {
  State& s = states_[id];
  for (int k = 0; k < 2; ++k) {
    if (s.bucket[k] < 0) continue;
    std::vector<int>& v = buckets_[k][s.bucket[k]];
    const int last = v.back();
    v[s.slot[k]] = last;
    states_[last].slot[k] = s.slot[k];
    v.pop_back();
    if (v.empty() && s.bucket[k] == top_[k]) {
      while (top_[k] >= 0 && buckets_[k][top_[k]].empty()) --top_[k];
    }
    s.bucket[k] = -1;
  }
}

void HostStates::FileUsers(int id, bool add) {
  const std::vector<DeviceStateKey>& devices = states_[id].devices;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const int user = devices[i].mps_user;
    // Once per user: at its first device.
    if (user < 0 || std::any_of(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(i),
                                [&](const DeviceStateKey& k) { return k.mps_user == user; }))
      continue;
    if (add) {
      if (user_states_.size() <= static_cast<std::size_t>(user)) user_states_.resize(user + 1);
      user_states_[user].push_back(id);
    } else {
      std::vector<int>& v = user_states_[user];
      *std::find(v.begin(), v.end(), id) = v.back();
      v.pop_back();
    }
  }
}

void HostStates::Detach(NodeId node, Host& h) {
  if (h.state < 0) return;
  const int id = h.state;
  State& s = states_[id];
  s.hosts.erase(std::lower_bound(s.hosts.begin(), s.hosts.end(), node));
  if (s.hosts.empty()) {
    // Retire the state: out of the buckets and the hash table, its id reused later (its
    // vectors keep their capacity for the next state filed there).
    Unbucket(id);
    if (s.mps_users != 0) FileUsers(id, /*add=*/false);
    RemoveFromTable(id);
    free_ids_.push_back(id);  // its memos are cleared when the id is reused
    --live_;
  }
  h.state = -1;
}

void HostStates::Set(NodeId node, std::span<DeviceStateKey> keys, std::span<const DeviceView* const> devices) {
  if (keys.empty()) {
    auto it = hosts_.find(node);
    if (it == hosts_.end()) return;
    Detach(node, it->second);
    hosts_.erase(it);
    return;
  }
  Host& h = hosts_[node];
  h.dirty = false;
  h.devices_changed = false;
  if (devices.data() != h.index_order.data()) {  // else: IndexOrder() given back, unchanged
    h.index_order.assign(devices.begin(), devices.end());
    h.index_models.resize(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) h.index_models[i] = keys[i].model;
  }
  // Canonical order: stable by used share, so devices with equal shares keep index order
  // (an insertion sort: hosts have a few devices).
  const int n = static_cast<int>(keys.size());
  perm_.resize(n);
  for (int i = 0; i < n; ++i) {
    int j = i;
    while (j > 0 && keys[perm_[j - 1]].used_milli > keys[i].used_milli) {
      perm_[j] = perm_[j - 1];
      --j;
    }
    perm_[j] = i;
  }
  probe_.resize(n);
  h.order.resize(n);
  for (int i = 0; i < n; ++i) {
    probe_[i] = keys[perm_[i]];
    h.order[i] = devices[perm_[i]];
  }
  const int host_model = keys.front().model;
  if (h.state >= 0) {
    const State& cur = states_[h.state];
    if (cur.host_model_id == host_model && std::equal(probe_.begin(), probe_.end(), cur.devices.begin(), cur.devices.end()))
      return;
  }
  const std::uint64_t hash = Hash(host_model, probe_);
  int id = FindState(hash, host_model, probe_);
  Detach(node, h);
  if (id < 0) {
    if (!free_ids_.empty()) {
      id = free_ids_.back();
      free_ids_.pop_back();
    } else {
      id = static_cast<int>(states_.size());
      states_.emplace_back();
      for (auto& slot : memos_) slot.emplace_back();
    }
    State& s = states_[id];
    s.host_model_id = host_model;
    s.host_model = model_names_[host_model];
    s.devices.assign(probe_.begin(), probe_.end());
    s.hosts.clear();
    s.whole_free = 0;
    s.share_free = -1;
    s.mps_free = -1;
    s.mps_users = 0;
    for (const DeviceStateKey& k : probe_) {
      s.whole_free += k.whole_free ? 1 : 0;
      s.share_free = std::max(s.share_free, k.share_free);
      s.mps_free = std::max(s.mps_free, k.mps_free);
      if (k.mps_user >= 0) s.mps_users |= std::uint64_t{1} << (k.mps_user % 64);
    }
    s.hash = hash;
    s.id = id;
    for (auto& slot : memos_) slot[id].generation = 0;  // keeps the vectors' capacity
    ++live_;
    AddToTable(id);
    Bucket(id);
    if (s.mps_users != 0) FileUsers(id, /*add=*/true);
  }
  State& s = states_[id];
  s.hosts.insert(std::upper_bound(s.hosts.begin(), s.hosts.end(), node), node);
  h.state = id;
}

}  // namespace gpuslice::sched
