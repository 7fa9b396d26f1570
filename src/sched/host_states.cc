#include "sched/host_states.h"

#include <algorithm>
#include <numeric>

namespace gpuslice::sched {

namespace {
std::uint64_t Mix(std::uint64_t h, std::uint64_t v) {
  // splitmix64-style combine: cheap, and distinct states rarely collide (equality is checked).
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}
}  // namespace

std::uint64_t HostStates::Hash(const State& s) {
  std::uint64_t h = std::hash<std::string>{}(s.host_model);
  for (const DeviceStateKey& d : s.devices) {
    h = Mix(h, std::hash<std::string>{}(d.model));
    h = Mix(h, static_cast<std::uint64_t>(d.mode) * 2 + (d.schedulable ? 1 : 0));
    h = Mix(h, static_cast<std::uint64_t>(d.used_milli));
    h = Mix(h, static_cast<std::uint64_t>(d.memory));
    h = Mix(h, static_cast<std::uint64_t>(d.used_memory));
    h = Mix(h, static_cast<std::uint64_t>(d.clients) << 32 | static_cast<std::uint32_t>(d.mps_limit));
  }
  return h;
}

void HostStates::MarkDirty(NodeId node) {
  if (dirty_set_.insert(node).second) dirty_.push_back(node);
}

std::vector<NodeId> HostStates::TakeDirty() {
  std::vector<NodeId> out;
  out.swap(dirty_);
  dirty_set_.clear();
  return out;
}

void HostStates::Detach(NodeId node, Host& h) {
  if (h.state < 0) return;
  State& s = states_[h.state];
  s.hosts.erase(node);
  if (s.hosts.empty()) {
    // Retire the state: out of the live list and the hash table, its id reused later.
    const std::size_t p = live_pos_[h.state];
    live_pos_[live_.back()] = p;
    live_[p] = live_.back();
    live_.pop_back();
    live_summary_[p] = live_summary_.back();
    live_summary_.pop_back();
    const std::uint64_t hash = Hash(s);
    for (auto [it, end] = by_hash_.equal_range(hash); it != end; ++it) {
      if (it->second == h.state) {
        by_hash_.erase(it);
        break;
      }
    }
    s = State{};
    free_ids_.push_back(h.state);
  }
  h.state = -1;
}

void HostStates::Set(NodeId node, const std::vector<DeviceStateKey>& keys, const std::vector<const DeviceView*>& devices) {
  if (keys.empty()) {
    auto it = hosts_.find(node);
    if (it == hosts_.end()) return;
    Detach(node, it->second);
    hosts_.erase(it);
    return;
  }
  Host& h = hosts_[node];
  // Canonical order: stable by used share, so devices with equal shares keep index order.
  std::vector<int> perm(keys.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int a, int b) { return keys[a].used_milli < keys[b].used_milli; });
  State probe;
  probe.host_model = keys.front().model;
  probe.devices.reserve(keys.size());
  for (int i : perm) probe.devices.push_back(keys[i]);
  h.order.clear();
  for (int i : perm) h.order.push_back(devices[i]);
  const std::uint64_t hash = Hash(probe);
  int id = -1;
  for (auto [it, end] = by_hash_.equal_range(hash); it != end; ++it) {
    const State& s = states_[it->second];
    if (s.host_model == probe.host_model && s.devices == probe.devices) {
      id = it->second;
      break;
    }
  }
  if (id >= 0 && id == h.state) return;
  Detach(node, h);
  if (id < 0) {
    if (!free_ids_.empty()) {
      id = free_ids_.back();
      free_ids_.pop_back();
    } else {
      id = static_cast<int>(states_.size());
      states_.emplace_back();
      live_pos_.push_back(0);
    }
    for (const DeviceStateKey& k : probe.devices) {
      probe.whole_free += k.whole_free ? 1 : 0;
      probe.share_free = std::max(probe.share_free, k.share_free);
      probe.mps_free = std::max(probe.mps_free, k.mps_free);
    }
    states_[id] = std::move(probe);
    by_hash_.emplace(hash, id);
    live_pos_[id] = live_.size();
    live_.push_back(id);
    live_summary_.push_back(Summary{states_[id].whole_free, states_[id].share_free, states_[id].mps_free});
  }
  states_[id].hosts.insert(node);
  h.state = id;
}

}  // namespace gpuslice::sched
