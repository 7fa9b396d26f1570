// ClusterState (the cluster's devices, slices, the indexes over them and what could ever fit):
// devices are counted per host by model as they come and go, "could ever fit" follows what is
// present, every change through Mutate() leaves the index equal to one rebuilt from the records
// while telling the MIG books and placement what they must know, a slice is booked all or
// nothing, and releasing it restores each device exactly.
#include "sched/cluster_state.h"

#include <set>
#include <string>
#include <tuple>
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

// What a device books, as a comparable value.
auto Books(const Cluster& c, const DeviceRef& ref) {
  const DeviceView& d = c.state.devices().at(ref);
  return std::make_tuple(d.mode, d.used_milli, d.used_memory, d.clients, d.slices, d.mps_user, d.layout,
                         c.mig.InUse(d));
}

Resolved Shared(MilliGpu milli, Bytes memory, SliceKind kind = SliceKind::kShared, std::string user = "ann") {
  Resolved r;
  r.job = JobId(1);
  r.kind = kind;
  r.milli = milli;
  r.memory = memory;
  r.user = std::move(user);
  return r;
}

std::vector<DeviceIndex> Indices(std::initializer_list<int> l) {
  std::vector<DeviceIndex> v;
  for (int i : l) v.emplace_back(i);
  return v;
}

Resolved Whole(int gpus, std::string model = "") {
  Resolved r;
  r.job = JobId(2);
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

TEST(ClusterState, ReleaseRestoresEachDeviceExactly) {
  Cluster c;
  c.AddHost("2xH100-80GB", 1);
  c.AddHost("1xA100-40GB mig", 2);
  c.state.Mutate(Ref(2, 0), [](DeviceView& d) { d.layout = MigLayout{{19, 0}, {19, 1}}; });  // two 1g.5gb
  const auto before0 = Books(c, Ref(1, 0)), before1 = Books(c, Ref(1, 1)), before_mig = Books(c, Ref(2, 0));
  Resolved mig;
  mig.job = JobId(3);
  mig.kind = SliceKind::kMig;
  mig.mig_need = 4 * kGiB;
  struct Case {
    Resolved r;
    NodeId node;
    std::vector<DeviceIndex> devices;
    std::optional<MigPlacement> instance;
  };
  for (const Case& k : {Case{Shared(250, 10 * kGiB), NodeId(1), Indices({1}), std::nullopt},
                        Case{Shared(500, 0, SliceKind::kMps), NodeId(1), Indices({0}), std::nullopt},
                        Case{Whole(2), NodeId(1), Indices({0, 1}), std::nullopt},
                        Case{mig, NodeId(2), Indices({0}), MigPlacement{19, 1}}}) {
    SCOPED_TRACE(SliceKindName(k.r.kind));
    auto a = c.state.TryAllocate(k.r, k.node, k.devices, k.instance);
    ASSERT_TRUE(a.ok()) << a.status().message();
    const SliceView& s = a->slice->second;
    EXPECT_EQ(s.job, k.r.job);
    EXPECT_EQ(s.devices, k.devices);
    ASSERT_EQ(a->devices.size(), k.devices.size());
    EXPECT_EQ(a->devices.front()->slices, std::vector<SliceId>{s.slice});
    EXPECT_EQ(a->devices.front()->mode, ModeFor(k.r.kind));
    EXPECT_TRUE(c.IndexExact());
    c.state.Release(a->slice, a->devices);
    EXPECT_TRUE(c.state.slices().empty());
    EXPECT_EQ(Books(c, Ref(1, 0)), before0);
    EXPECT_EQ(Books(c, Ref(1, 1)), before1);
    EXPECT_EQ(Books(c, Ref(2, 0)), before_mig);
    EXPECT_TRUE(c.IndexExact());
  }
}

TEST(ClusterState, ASliceBooksItsShareMemoryAndUser) {
  Cluster c;
  c.AddHost("1xH100-80GB", 1);
  const Bytes usable = c.state.devices().at(Ref(1, 0)).memory;
  auto a = c.state.TryAllocate(Shared(250, 0, SliceKind::kMps), NodeId(1), Indices({0}), std::nullopt);
  ASSERT_TRUE(a.ok());
  const DeviceView& d = *a->devices.front();
  EXPECT_EQ(a->slice->second.memory, usable / 4);  // its share of the device's memory
  EXPECT_EQ(d.used_milli, 250);
  EXPECT_EQ(d.used_memory, usable / 4);
  EXPECT_EQ(d.clients, 1);
  EXPECT_EQ(d.mps_user, "ann");
}

TEST(ClusterState, AWholeSliceHoldsAllOfEachOfItsDevicesAcrossModels) {
  Cluster c;
  DeviceAdded h100 = testing::AddHost(testing::Host("1xH100-80GB"), NodeId(1))[0];
  DeviceAdded a100 = testing::AddHost(testing::Host("1xA100-40GB"), NodeId(1))[0];
  a100.device.index = DeviceIndex(1);
  c.state.AddDevice(h100);
  c.state.AddDevice(a100);
  const auto before0 = Books(c, Ref(1, 0)), before1 = Books(c, Ref(1, 1));
  auto a = c.state.TryAllocate(Whole(2), NodeId(1), Indices({0, 1}), std::nullopt);
  ASSERT_TRUE(a.ok());
  const DeviceView& big = c.state.devices().at(Ref(1, 0));
  const DeviceView& small = c.state.devices().at(Ref(1, 1));
  EXPECT_EQ(a->slice->second.memory, small.memory);  // what the job can count on on each
  EXPECT_EQ(big.used_memory, big.memory);
  EXPECT_EQ(small.used_memory, small.memory);
  c.state.Release(a->slice, a->devices);
  EXPECT_EQ(Books(c, Ref(1, 0)), before0);
  EXPECT_EQ(Books(c, Ref(1, 1)), before1);
}

TEST(ClusterState, ATryAllocateOneDeviceCannotHoldChangesNothing) {
  Cluster c;
  c.AddHost("3xH100-80GB", 1);
  ASSERT_TRUE(c.state.TryAllocate(Shared(500, 0), NodeId(1), Indices({1}), std::nullopt).ok());
  const auto before0 = Books(c, Ref(1, 0)), before1 = Books(c, Ref(1, 1)), before2 = Books(c, Ref(1, 2));
  c.changed.clear();
  // A whole slice on three devices, the middle one shared.
  EXPECT_FALSE(c.state.TryAllocate(Whole(3), NodeId(1), Indices({0, 1, 2}), std::nullopt).ok());
  // Too big a share on the device with half taken.
  EXPECT_FALSE(c.state.TryAllocate(Shared(600, 0), NodeId(1), Indices({1}), std::nullopt).ok());
  // A device listed twice, and one that is not there.
  EXPECT_FALSE(c.state.TryAllocate(Whole(2), NodeId(1), Indices({0, 0}), std::nullopt).ok());
  EXPECT_FALSE(c.state.TryAllocate(Whole(2), NodeId(1), Indices({2, 3}), std::nullopt).ok());
  // Another model than the request names.
  EXPECT_FALSE(c.state.TryAllocate(Whole(1, "A100-40GB"), NodeId(1), Indices({0}), std::nullopt).ok());
  EXPECT_EQ(c.state.slices().size(), 1u);
  EXPECT_EQ(Books(c, Ref(1, 0)), before0);
  EXPECT_EQ(Books(c, Ref(1, 1)), before1);
  EXPECT_EQ(Books(c, Ref(1, 2)), before2);
  EXPECT_TRUE(c.changed.empty());
  EXPECT_TRUE(c.IndexExact());
  EXPECT_TRUE(c.state.TryAllocate(Whole(2), NodeId(1), Indices({0, 2}), std::nullopt).ok());
}

TEST(ClusterState, AnotherUsersMpsServerOrAnInstanceInUseRefuses) {
  Cluster c;
  c.AddHost("1xH100-80GB", 1);
  c.AddHost("1xA100-40GB mig", 2);
  ASSERT_TRUE(c.state.TryAllocate(Shared(250, 0, SliceKind::kMps, "ann"), NodeId(1), Indices({0}), std::nullopt).ok());
  EXPECT_FALSE(c.state.TryAllocate(Shared(250, 0, SliceKind::kMps, "bob"), NodeId(1), Indices({0}), std::nullopt).ok());
  EXPECT_TRUE(c.state.TryAllocate(Shared(250, 0, SliceKind::kMps, "ann"), NodeId(1), Indices({0}), std::nullopt).ok());

  c.state.Mutate(Ref(2, 0), [](DeviceView& d) { d.layout = MigLayout{{19, 0}}; });
  Resolved mig;
  mig.kind = SliceKind::kMig;
  mig.mig_need = 4 * kGiB;
  EXPECT_FALSE(c.state.TryAllocate(mig, NodeId(2), Indices({0}), MigPlacement{19, 1}).ok());  // not in the layout
  EXPECT_TRUE(c.state.TryAllocate(mig, NodeId(2), Indices({0}), MigPlacement{19, 0}).ok());
  EXPECT_FALSE(c.state.TryAllocate(mig, NodeId(2), Indices({0}), MigPlacement{19, 0}).ok());  // in use
  EXPECT_EQ(c.mig.InUse(c.state.devices().at(Ref(2, 0))), (MigLayout{{19, 0}}));
}

}  // namespace
}  // namespace gpuslice::sched
