// ClusterState (the cluster's devices, the indexes over them and what could ever fit): devices
// are counted per host by model as they come and go, "could ever fit" follows what is present,
// and every change through Mutate() leaves the index equal to one rebuilt from the records while
// telling the MIG books and placement what they must know.
#include "sched/cluster_state.h"

#include <set>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "testing/builders.h"

namespace gpuslice::sched {
namespace {

DeviceRef Ref(int node, int index) { return DeviceRef{NodeId(node), DeviceIndex(index)}; }

// A cluster state with its MIG books, recording which hosts it says changed.
struct Cluster {
  MigBooks mig;
  std::vector<std::pair<NodeId, bool>> changed;
  ClusterState state{mig, [this](NodeId node, bool devices_changed) { changed.emplace_back(node, devices_changed); }};

  void AddHost(std::string_view spec, int node) {
    for (const DeviceAdded& e : testing::AddHost(testing::Host(spec), NodeId(node))) state.AddDevice(e);
  }
  // The index as a fresh build from the device records would have it.
  bool IndexExact() const {
    CapacityIndex fresh;
    for (const auto& [ref, d] : state.devices()) fresh.Add(d, state.Facts(d));
    return fresh == state.index();
  }
};

Resolved Whole(int gpus, std::string model = "") {
  Resolved r;
  r.kind = SliceKind::kWhole;
  r.gpus = gpus;
  r.milli = kOneGpu;
  r.model = std::move(model);
  return r;
}

TEST(ClusterState, CountsDevicesPerHostByModelAsTheyComeAndGo) {
  Cluster c;
  c.AddHost("2xH100-80GB", 1);
  c.AddHost("3xA100-40GB", 2);
  c.AddHost("1xH100-80GB", 3);
  const auto& cap = c.state.capacity();
  EXPECT_EQ(cap.at("").host_counts, (std::multiset<int>{1, 2, 3}));
  EXPECT_EQ(cap.at("H100-80GB").host_counts, (std::multiset<int>{1, 2}));
  EXPECT_EQ(cap.at("A100-40GB").host_counts, (std::multiset<int>{3}));
  EXPECT_EQ(cap.at("H100-80GB").memories.size(), 3u);
  EXPECT_EQ(cap.at("").memories.size(), 6u);
  EXPECT_EQ(cap.at("A100-40GB").mig_capable, 3);

  c.state.RemoveDevice(Ref(2, 1));
  EXPECT_EQ(cap.at("").host_counts, (std::multiset<int>{1, 2, 2}));
  EXPECT_EQ(cap.at("A100-40GB").host_counts, (std::multiset<int>{2}));
  EXPECT_EQ(cap.at("A100-40GB").mig_capable, 2);
  c.state.RemoveDevice(Ref(3, 0));
  EXPECT_EQ(cap.at("H100-80GB").host_counts, (std::multiset<int>{2}));
  EXPECT_EQ(cap.at("H100-80GB").memories.size(), 2u);
  EXPECT_EQ(c.state.nodes().count(NodeId(3)), 0u);  // its last device went
  EXPECT_EQ(c.state.nodes().at(NodeId(2)), (std::set<DeviceIndex>{DeviceIndex(0), DeviceIndex(2)}));
  EXPECT_TRUE(c.IndexExact());
}

TEST(ClusterState, ADeviceAnnouncedAgainIsCountedOnce) {
  Cluster c;
  c.AddHost("2xH100-80GB", 1);
  const auto again = testing::AddHost(testing::Host("2xH100-80GB"), NodeId(1));
  EXPECT_FALSE(c.state.AddDevice(again[0]));
  EXPECT_EQ(c.state.devices().size(), 2u);
  EXPECT_EQ(c.state.capacity().at("").host_counts, (std::multiset<int>{2}));
  EXPECT_EQ(c.state.capacity().at("").memories.size(), 2u);
}

TEST(ClusterState, ADeviceThatComesOrGoesRefilesItsHost) {
  Cluster c;
  c.AddHost("1xH100-80GB", 1);
  c.AddHost("1xH100-80GB", 2);
  c.state.RemoveDevice(Ref(1, 0));
  EXPECT_EQ(c.changed, (std::vector<std::pair<NodeId, bool>>{{NodeId(1), true}, {NodeId(2), true}, {NodeId(1), true}}));
}

TEST(ClusterState, CouldEverFitFollowsTheDevicesPresent) {
  Cluster c;
  EXPECT_FALSE(c.state.Feasible(Whole(1)).ok());
  c.AddHost("2xH100-80GB", 1);
  c.AddHost("1xA100-40GB", 2);
  EXPECT_TRUE(c.state.Feasible(Whole(2)).ok());
  EXPECT_TRUE(c.state.Feasible(Whole(2, "H100-80GB")).ok());
  EXPECT_FALSE(c.state.Feasible(Whole(2, "A100-40GB")).ok());
  EXPECT_FALSE(c.state.Feasible(Whole(3)).ok());  // three devices, but on two hosts
  Resolved mig;
  mig.kind = SliceKind::kMig;
  mig.mig_need = 10 * kGiB;
  EXPECT_TRUE(c.state.Feasible(mig).ok());
  mig.mig_need = 100 * kGiB;  // more than any instance has
  EXPECT_FALSE(c.state.Feasible(mig).ok());
  c.state.RemoveDevice(Ref(1, 0));
  EXPECT_FALSE(c.state.Feasible(Whole(2)).ok());
}

TEST(ClusterState, MutateKeepsTheIndexExactAndTellsTheBooks) {
  Cluster c;
  c.AddHost("2xH100-80GB", 1);
  c.changed.clear();
  const DeviceView& d = c.state.devices().at(Ref(1, 1));
  c.state.Mutate(d, [](DeviceView& dv) { dv.draining = true; });
  EXPECT_TRUE(c.IndexExact());
  EXPECT_TRUE(c.state.index().FreeOn(NodeId(1)).contains(DeviceIndex(0)));
  EXPECT_FALSE(c.state.index().FreeOn(NodeId(1)).contains(DeviceIndex(1)));  // draining
  EXPECT_EQ(c.mig.changing(), (std::set<DeviceRef>{Ref(1, 1)}));
  EXPECT_EQ(c.changed, (std::vector<std::pair<NodeId, bool>>{{NodeId(1), false}}));
  c.state.Mutate(Ref(1, 1), [](DeviceView& dv) { dv.draining = false; });
  EXPECT_TRUE(c.IndexExact());
  EXPECT_TRUE(c.state.index().FreeOn(NodeId(1)).contains(DeviceIndex(1)));
  EXPECT_TRUE(c.mig.changing().empty());
}

TEST(ClusterState, AChangeToADeviceNoRequestCanUseLeavesItsHostAlone) {
  Cluster c;
  c.AddHost("1xA100-40GB mig", 1);
  c.changed.clear();
  c.state.Mutate(Ref(1, 0), [](DeviceView& dv) { dv.layout = MigLayout{{19, 0}}; });
  EXPECT_TRUE(c.changed.empty());  // in MIG mode before and after: inert for placement
  EXPECT_TRUE(c.IndexExact());
  EXPECT_EQ(c.mig.mig_mode_devices(), 1);
}

TEST(ClusterState, SetModeCountsMigModeAndFlagsADeviceThatChangesModeWithSlices) {
  Cluster c;
  c.AddHost("1xA100-40GB", 1);
  c.state.Mutate(Ref(1, 0), [&](DeviceView& dv) { c.state.SetMode(dv, DeviceMode::kMig); });
  EXPECT_EQ(c.mig.mig_mode_devices(), 1);
  EXPECT_TRUE(c.state.violation().empty());
  c.state.Mutate(Ref(1, 0), [&](DeviceView& dv) {
    dv.slices.push_back(SliceId(1));
    c.state.SetMode(dv, DeviceMode::kFree);
  });
  EXPECT_EQ(c.mig.mig_mode_devices(), 0);
  EXPECT_NE(c.state.violation(), "");
}

}  // namespace
}  // namespace gpuslice::sched
