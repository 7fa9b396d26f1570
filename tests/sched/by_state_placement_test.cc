// ByStateEngine (placement by host state) through its interface: it serves only policies that
// score by node state, once on and not in reference mode; it sees the hosts marked dirty (and
// none while off); its choice, and its draw from the RNG among tied hosts (few or many, in one
// state or several), are Place()'s over every host in NodeId order; an MPS server's GPU serves
// only its own user.
#include "sched/by_state_placement.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "tests/sched/every_host.h"

namespace gpuslice::sched {
namespace {

using Devices = std::map<DeviceRef, DeviceView>;

std::unique_ptr<PlacementPolicy> Policy(std::string_view name) { return MakePolicy(name).value(); }

DeviceView& AddDevice(Devices& devices, std::uint32_t node, std::uint32_t index, std::string model = "H100-80GB") {
  const DeviceRef ref{NodeId(node), DeviceIndex(index)};
  DeviceView& d = devices[ref];
  d.ref = ref;
  d.model = std::move(model);
  return d;
}

Resolved Whole(int shape, int gpus) {
  Resolved r;
  r.shape = shape;
  r.kind = SliceKind::kWhole;
  r.gpus = gpus;
  r.milli = kOneGpu;
  return r;
}

Resolved Share(int shape, SliceKind kind, MilliGpu milli, std::string user = "") {
  Resolved r;
  r.shape = shape;
  r.kind = kind;
  r.milli = milli;
  r.user = user;
  if (kind == SliceKind::kMps) r.mps_user = user;
  return r;
}

// The engine with every host of `devices` marked, as the scheduler marks them when it turns on.
struct Engine {
  explicit Engine(const Devices& devices) {
    engine.TurnOn();
    for (const auto& [ref, d] : devices) engine.MarkDirty(ref.node, /*devices_changed=*/true);
  }
  ByStateEngine engine;
};

TEST(ByStateEngine, ServesOnlyPoliciesThatScoreByNodeStateOnceOn) {
  const auto gpuslice = Policy("gpuslice");
  const auto best_fit = Policy("best-fit");
  ByStateEngine engine;
  EXPECT_FALSE(engine.on());
  EXPECT_FALSE(engine.Serves(*gpuslice));
  engine.TurnOn();
  EXPECT_TRUE(engine.on());
  EXPECT_TRUE(engine.Serves(*gpuslice));
  EXPECT_FALSE(engine.Serves(*best_fit));
  engine.set_reference(true);
  EXPECT_FALSE(engine.Serves(*gpuslice));
  engine.set_reference(false);
  EXPECT_TRUE(engine.Serves(*gpuslice));
}

TEST(ByStateEngine, SeesTheHostsMarkedDirtyAndNoneMarkedWhileOff) {
  const auto policy = Policy("gpuslice");
  WorkloadModel workload;
  std::mt19937_64 rng(1);
  Devices devices;
  AddDevice(devices, 1, 0).mode = DeviceMode::kWhole;
  devices.at({NodeId(1), DeviceIndex(0)}).used_milli = kOneGpu;
  AddDevice(devices, 2, 0);

  ByStateEngine off;
  off.MarkDirty(NodeId(1), /*devices_changed=*/true);
  off.MarkDirty(NodeId(2), /*devices_changed=*/true);
  off.TurnOn();
  EXPECT_FALSE(off.Place(Whole(0, 1), *policy, devices, workload, rng)) << "marked while off: nothing filed";

  Engine e(devices);
  auto p = e.engine.Place(Whole(0, 1), *policy, devices, workload, rng);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->node, NodeId(2));
  EXPECT_EQ(p->devices, std::vector<DeviceIndex>{DeviceIndex(0)});

  // Host 2 taken, host 1 freed: both marked, so the next request goes to host 1.
  DeviceView& one = devices.at({NodeId(1), DeviceIndex(0)});
  DeviceView& two = devices.at({NodeId(2), DeviceIndex(0)});
  one.mode = DeviceMode::kFree;
  one.used_milli = 0;
  two.mode = DeviceMode::kWhole;
  two.used_milli = kOneGpu;
  e.engine.MarkDirty(NodeId(1));
  e.engine.MarkDirty(NodeId(2));
  p = e.engine.Place(Whole(0, 1), *policy, devices, workload, rng);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->node, NodeId(1));

  // A device added to host 1 (marked with devices_changed): a two-GPU request fits there.
  EXPECT_FALSE(e.engine.Place(Whole(1, 2), *policy, devices, workload, rng));
  AddDevice(devices, 1, 1);
  e.engine.MarkDirty(NodeId(1), /*devices_changed=*/true);
  p = e.engine.Place(Whole(1, 2), *policy, devices, workload, rng);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->node, NodeId(1));
  EXPECT_EQ(p->devices, (std::vector<DeviceIndex>{DeviceIndex(0), DeviceIndex(1)}));
}

TEST(ByStateEngine, AnMpsServerServesOnlyItsOwnUser) {
  const auto policy = Policy("gpuslice");
  WorkloadModel workload;
  std::mt19937_64 rng(1);
  Devices devices;
  DeviceView& d = AddDevice(devices, 1, 0);
  d.mode = DeviceMode::kMps;
  d.used_milli = 250;
  d.clients = 1;
  d.mps_user = "alice";
  Engine e(devices);
  EXPECT_FALSE(e.engine.Place(Share(0, SliceKind::kMps, 250, "bob"), *policy, devices, workload, rng));
  auto p = e.engine.Place(Share(1, SliceKind::kMps, 250, "alice"), *policy, devices, workload, rng);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->node, NodeId(1));
  // Bob's request again, after alice's was scored for her alone: still no room for him.
  EXPECT_FALSE(e.engine.Place(Share(0, SliceKind::kMps, 250, "bob"), *policy, devices, workload, rng));
}

// The engine's choice for `r` and PlaceOverEveryHost()'s, each drawing from its own copy of
// one RNG: the same host and GPUs, and the same draws. Returns whether `r` was placed.
bool ExpectSameAsEveryHost(ByStateEngine& engine, const Resolved& r, const PlacementPolicy& policy,
                           const Devices& devices, WorkloadModel& workload, std::uint64_t seed) {
  std::mt19937_64 rng_engine(seed);
  std::mt19937_64 rng_place = rng_engine;
  const auto want = PlaceOverEveryHost(r, policy, devices, workload, rng_place);
  const auto got = engine.Place(r, policy, devices, workload, rng_engine);
  EXPECT_EQ(rng_engine(), rng_place()) << "the draws differ";
  EXPECT_EQ(got.has_value(), want.has_value());
  if (!got || !want) return false;
  EXPECT_EQ(got->node, want->node);
  EXPECT_EQ(got->devices, want->devices);
  return true;
}

// Random hosts of one to four GPUs of two models, changed a host at a time; after each change
// a random request is placed by the engine and by Place() over every host.
TEST(ByStateEngine, ChoosesAndDrawsAsPlaceOverEveryHost) {
  constexpr std::uint32_t kHosts = 300;
  const auto policy = Policy("gpuslice");
  const std::vector<Resolved> requests = {Whole(0, 1), Whole(1, 2), Whole(2, 4), Share(3, SliceKind::kShared, 250),
                                          Share(4, SliceKind::kShared, 500)};
  Resolved a100 = Whole(5, 1);
  a100.model = "A100-80GB";
  WorkloadModel workload;
  workload.Count(1, 250);
  workload.Count(2, kOneGpu);
  std::mt19937_64 gen(7);
  Devices devices;
  for (std::uint32_t h = 1; h <= kHosts; ++h) {
    const std::uint32_t n = 1 + static_cast<std::uint32_t>(gen() % 4);
    const std::string model = gen() % 3 == 0 ? "A100-80GB" : "H100-80GB";
    for (std::uint32_t i = 0; i < n; ++i) AddDevice(devices, h, i, model);
    workload.HostResized(0, n);
  }
  auto randomize = [&](DeviceView& d) { RandomizeDevice(gen, d); };
  for (auto& [ref, d] : devices) randomize(d);
  Engine e(devices);
  int placed = 0;
  for (int step = 0; step < 400; ++step) {
    const NodeId changed(1 + static_cast<std::uint32_t>(gen() % kHosts));
    for (auto it = devices.lower_bound({changed, DeviceIndex(0)}); it != devices.end() && it->first.node == changed; ++it)
      randomize(it->second);
    e.engine.MarkDirty(changed);
    const Resolved& r = step % 7 == 6 ? a100 : requests[gen() % requests.size()];
    SCOPED_TRACE(step);
    placed += ExpectSameAsEveryHost(e.engine, r, *policy, devices, workload, static_cast<std::uint64_t>(step));
  }
  EXPECT_GT(placed, 300);
}

// Many tied hosts in several states: hosts whose second GPU is shared at 250, 500 or 750 are
// three states, but a whole-GPU request sees them alike (that GPU unusable), so all tie. The
// drawn host is found among more hosts than the engine gathers one by one.
TEST(ByStateEngine, DrawsAmongManyTiedHostsOfSeveralStates) {
  const auto policy = Policy("gpuslice");
  WorkloadModel workload;
  Devices devices;
  for (std::uint32_t h = 1; h <= 200; ++h) {
    AddDevice(devices, h, 0);
    DeviceView& shared = AddDevice(devices, h, 1);
    shared.mode = DeviceMode::kShared;
    shared.used_milli = 250 * static_cast<MilliGpu>(1 + h % 3);
  }
  Engine e(devices);
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    SCOPED_TRACE(seed);
    EXPECT_TRUE(ExpectSameAsEveryHost(e.engine, Whole(0, 1), *policy, devices, workload, seed));
  }
}

}  // namespace
}  // namespace gpuslice::sched
