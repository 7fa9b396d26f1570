// PlacementEngine (where requests go): reference placement, which sends every request through
// its policy, chooses as the indexed paths and placement by host state do, counting one attempt
// per decision; and a policy that scores by host state, first used once hosts are there, sees
// them all.
#include "sched/placement_engine.h"

#include <optional>
#include <random>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "testing/builders.h"

namespace gpuslice::sched {
namespace {

// A cluster whose changes go to its placement engine, as in the scheduler.
struct Cluster {
  PlacementEngine engine;
  MigBooks mig;
  ClusterState state{mig, [this](NodeId node, bool devices_changed) { engine.MarkDirty(node, devices_changed); }};

  void AddHost(std::string_view spec, int node) {
    for (const DeviceAdded& e : testing::AddHost(testing::Host(spec), NodeId(node))) {
      state.AddDevice(e);
      engine.HostResized(state.nodes().at(e.device.node).size() - 1, state.nodes().at(e.device.node).size());
    }
  }
  // Hosts 1-3 with some of their share taken, so that best-fit and spread differ.
  void Fill() {
    AddHost("4xH100-80GB", 1);
    AddHost("2xH100-80GB", 2);
    AddHost("8xH100-80GB", 3);
    ASSERT_TRUE(state.TryAllocate(Request(SliceKind::kShared, 1, 500), NodeId(1), {DeviceIndex(2)}, std::nullopt).ok());
    ASSERT_TRUE(state.TryAllocate(Request(SliceKind::kShared, 1, 250), NodeId(3), {DeviceIndex(5)}, std::nullopt).ok());
    ASSERT_TRUE(state.TryAllocate(Request(SliceKind::kWhole, 2, kOneGpu), NodeId(3), {DeviceIndex(0), DeviceIndex(1)},
                                  std::nullopt)
                    .ok());
  }

  static Resolved Request(SliceKind kind, int gpus, MilliGpu milli) {
    Resolved r;
    r.job = JobId(7);
    r.kind = kind;
    r.gpus = gpus;
    r.milli = milli;
    r.user = "ann";
    return r;
  }
};

QueueVersions::Placement PlacementFor(std::string_view name) {
  auto policy = MakePolicy(name);
  EXPECT_TRUE(policy.ok());
  return QueueVersions::Placement{std::move(policy).value(), FastOrderFor(name)};
}

struct Placed {
  std::optional<PlacementChoice> choice;
  std::uint64_t attempts = 0;
};

Placed PlaceIn(Cluster& c, const Resolved& r, const QueueVersions::Placement& q, bool reference) {
  c.engine.UsePolicy(q.policy.get(), c.state);
  c.engine.set_reference(reference);
  c.engine.CountRequest(r.gpus, r.milli);
  std::mt19937_64 rng(42);
  Placed p;
  p.choice = c.engine.Place(r, q, c.state, rng, p.attempts);
  return p;
}

TEST(PlacementEngine, ReferencePlacementChoosesAsTheIndexedPathsAndByHostState) {
  for (std::string_view name : {"best-fit", "packing", "spread", "gpuslice"}) {
    for (const Resolved& r : {Cluster::Request(SliceKind::kShared, 1, 250), Cluster::Request(SliceKind::kMps, 1, 500),
                              Cluster::Request(SliceKind::kWhole, 2, kOneGpu)}) {
      SCOPED_TRACE(::testing::Message() << name << " kind " << static_cast<int>(r.kind));
      const QueueVersions::Placement q = PlacementFor(name);
      Cluster fast, reference;
      fast.Fill();
      reference.Fill();
      const Placed f = PlaceIn(fast, r, q, /*reference=*/false);
      const Placed ref = PlaceIn(reference, r, q, /*reference=*/true);
      ASSERT_TRUE(f.choice.has_value());
      ASSERT_TRUE(ref.choice.has_value());
      EXPECT_EQ(f.choice->node, ref.choice->node);
      EXPECT_EQ(f.choice->devices, ref.choice->devices);
      EXPECT_EQ(ref.attempts, 1u);  // one per decision through a policy
      if (q.order != FastOrder::kNone) {
        EXPECT_GE(f.attempts, 1u);  // one per device or host tried
      }
    }
  }
}

// A policy that scores by host state, first used once the hosts are there (a config reload):
// placement by host state had filed none of them while off, and must see every one.
TEST(PlacementEngine, APolicyByHostStateFirstUsedLaterSeesEveryHost) {
  const QueueVersions::Placement q = PlacementFor("gpuslice");
  ASSERT_TRUE(q.policy->ScoresByNodeState());
  Cluster c;
  c.Fill();
  const Placed p = PlaceIn(c, Cluster::Request(SliceKind::kWhole, 4, kOneGpu), q, /*reference=*/false);
  ASSERT_TRUE(p.choice.has_value());
  EXPECT_EQ(p.choice->node, NodeId(3));  // the only host with 4 free devices
}

}  // namespace
}  // namespace gpuslice::sched
