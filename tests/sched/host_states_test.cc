// HostStates (the scheduler's hosts grouped by placement state) against a brute-force model:
// through many refilings, removals, retired states and reused ids (hundreds of live states:
// its table of states grows and drops retired ones), every live state holds exactly the hosts
// whose canonical keys equal its own.
#include "sched/host_states.h"

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

DeviceStateKey Key(int model, MilliGpu used) {
  DeviceStateKey k;
  k.model = model;
  k.used_milli = used;
  k.whole_free = used == 0;
  k.share_free = kOneGpu - used;
  k.mps_free = kOneGpu - used;
  return k;
}

// The host's devices in canonical order (stable by used share), as HostStates files them.
std::vector<DeviceStateKey> Canonical(std::vector<DeviceStateKey> keys) {
  std::stable_sort(keys.begin(), keys.end(),
                   [](const DeviceStateKey& a, const DeviceStateKey& b) { return a.used_milli < b.used_milli; });
  return keys;
}

TEST(HostStates, EachLiveStateHoldsExactlyTheHostsWithItsKeys) {
  constexpr int kHosts = 400;
  constexpr int kDevices = 3;
  HostStates states;
  states.ModelId("H100-80GB");
  states.ModelId("A100-80GB");
  std::vector<DeviceView> views(kHosts * kDevices);
  std::map<NodeId, std::vector<DeviceStateKey>> model;  // present hosts: their keys in index order
  std::mt19937_64 rng(5);
  for (int step = 0; step < 20000; ++step) {
    const NodeId node(1 + static_cast<std::uint32_t>(rng() % kHosts));
    std::vector<DeviceStateKey> keys;
    std::vector<const DeviceView*> devices;
    if (rng() % 10 != 0) {  // a tenth of the changes remove the host
      const int host_model = static_cast<int>(rng() % 2);
      for (int i = 0; i < kDevices; ++i) {
        keys.push_back(Key(host_model, 100 * static_cast<MilliGpu>(rng() % 11)));
        devices.push_back(&views[(node.value() - 1) * kDevices + i]);
      }
    }
    states.Set(node, keys, devices);
    if (keys.empty()) {
      model.erase(node);
    } else {
      model[node] = keys;
    }
    if (step % 500 != 499) continue;
    // The brute force: hosts grouped by (host model, canonical keys).
    std::map<std::pair<int, std::vector<int>>, std::vector<NodeId>> groups;
    for (const auto& [n, k] : model) {
      std::vector<int> flat;
      for (const DeviceStateKey& d : Canonical(k)) flat.push_back(static_cast<int>(d.used_milli) * 2 + d.model);
      groups[{k.front().model, flat}].push_back(n);
    }
    ASSERT_EQ(states.live(), groups.size()) << "step " << step;
    ASSERT_EQ(states.hosts(), model.size()) << "step " << step;
    std::size_t visited = 0;
    states.ForWhole(0, [&](HostStates::State& s) {
      ++visited;
      ASSERT_FALSE(s.hosts.empty());
      ASSERT_TRUE(std::is_sorted(s.hosts.begin(), s.hosts.end()));
      std::vector<int> flat;
      for (const DeviceStateKey& d : s.devices) flat.push_back(static_cast<int>(d.used_milli) * 2 + d.model);
      auto it = groups.find({s.host_model_id, flat});
      ASSERT_NE(it, groups.end()) << "step " << step << ": a state no host has";
      EXPECT_EQ(s.hosts, it->second) << "step " << step;
      EXPECT_EQ(Canonical(model.at(s.hosts.front())), s.devices) << "step " << step;
    });
    EXPECT_EQ(visited, groups.size()) << "step " << step;
  }
}

// ForMps(user, milli) visits each state that could take an MPS slice of that user once: those
// with a free device, and those with a device of the user when some MPS device there has
// `milli` free; no other. Hosts are refiled at random with free, shared and MPS devices of
// three users, so states are filed under users and taken off again as they are retired.
TEST(HostStates, AnMpsRequestVisitsTheStatesWithAFreeDeviceOrOneOfItsUser) {
  constexpr int kHosts = 200;
  constexpr int kDevices = 3;
  HostStates states;
  states.ModelId("H100-80GB");
  for (const char* user : {"alice", "bob", "carol"}) states.UserId(user);
  std::vector<DeviceView> views(kHosts * kDevices);
  std::mt19937_64 rng(6);
  for (int step = 0; step < 20000; ++step) {
    const NodeId node(1 + static_cast<std::uint32_t>(rng() % kHosts));
    std::vector<DeviceStateKey> keys;
    std::vector<const DeviceView*> devices;
    if (rng() % 10 != 0) {
      for (int i = 0; i < kDevices; ++i) {
        DeviceStateKey k = Key(0, 0);
        if (const int kind = static_cast<int>(rng() % 3); kind != 0) {  // 0: free
          k = Key(0, 100 * static_cast<MilliGpu>(1 + rng() % 10));
          k.whole_free = false;
          if (kind == 1) {
            k.mps_free = -1;  // shared
          } else {
            k.share_free = -1;
            k.mps_user = static_cast<int>(rng() % 3);
          }
        }
        keys.push_back(k);
        devices.push_back(&views[(node.value() - 1) * kDevices + i]);
      }
    }
    states.Set(node, keys, devices);
    if (step % 500 != 499) continue;
    for (int user : {-1, 0, 1, 2}) {
      for (MilliGpu milli : {100, 500, 900}) {
        std::vector<int> want, got;
        states.ForWhole(0, [&](HostStates::State& s) {
          bool free = false, of_user = false;
          MilliGpu mps_room = -1;
          for (const DeviceStateKey& d : s.devices) {
            free = free || d.whole_free;
            of_user = of_user || (user >= 0 && d.mps_user == user);
            mps_room = std::max(mps_room, d.mps_free);
          }
          if (free || (of_user && mps_room >= milli)) want.push_back(s.id);
        });
        states.ForMps(user, milli, [&](HostStates::State& s) { got.push_back(s.id); });
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        ASSERT_EQ(got, want) << "step " << step << ", user " << user << ", " << milli << "m";
      }
    }
  }
}

}  // namespace
}  // namespace gpuslice::sched
