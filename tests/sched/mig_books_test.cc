// MigBooks (the MIG controller's books) against plain references: through random placements,
// releases, mode changes and removals, the instances in use stay sorted by start and equal to
// a plain list per device, and the devices empty long enough are exactly those a plain map of
// "empty since" names, in device order, each keeping the time it first stood empty.
#include "sched/mig_books.h"

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

DeviceRef Ref(int node, int index) { return DeviceRef{NodeId(node), DeviceIndex(index)}; }

DeviceView Device(int node, int index, DeviceMode mode) {
  DeviceView d;
  d.ref = Ref(node, index);
  d.mode = mode;
  return d;
}

TEST(MigBooks, InstancesInUseStaySortedByStartAndEmptyDevicesHoldNone) {
  MigBooks b;
  const DeviceView d = Device(1, 0, DeviceMode::kMig);
  EXPECT_TRUE(b.InUse(d).empty());
  b.AddInUse(d, MigPlacement{9, 4});
  b.AddInUse(d, MigPlacement{19, 0});
  b.AddInUse(d, MigPlacement{14, 6});
  EXPECT_EQ(b.InUse(d), (MigLayout{{19, 0}, {9, 4}, {14, 6}}));
  b.RemoveInUse(d, MigPlacement{9, 4});
  EXPECT_EQ(b.InUse(d), (MigLayout{{19, 0}, {14, 6}}));
  b.RemoveInUse(d, MigPlacement{19, 0});
  b.RemoveInUse(d, MigPlacement{14, 6});
  EXPECT_TRUE(b.InUse(d).empty());
}

TEST(MigBooks, RemoveForgetsTheDeviceInEveryBook) {
  MigBooks b;
  const DeviceView d = Device(1, 0, DeviceMode::kMig);
  const DeviceView other = Device(1, 1, DeviceMode::kMig);
  b.CountMigMode(+1);
  b.CountMigMode(+1);
  b.SetChanging(d.ref, true);
  b.MarkBroken(d.ref);
  b.NoteUse(d, 100);
  b.NoteUse(other, 100);
  b.AddInUse(d, MigPlacement{19, 0});  // left in use: Remove drops it with the device
  b.Remove(d);
  EXPECT_EQ(b.mig_mode_devices(), 1);
  EXPECT_TRUE(b.changing().empty());
  EXPECT_FALSE(b.broken(d.ref));
  EXPECT_TRUE(b.InUse(d).empty());
  EXPECT_EQ(b.EmptyFor(200, 0), std::vector<DeviceRef>{other.ref});
  b.SetChanging(other.ref, true);
  b.SetChanging(other.ref, false);
  EXPECT_TRUE(b.changing().empty());
}

TEST(MigBooks, EmptyDevicesMatchAPlainMapOfSinceWhen) {
  MigBooks b;
  std::vector<DeviceView> devices;
  for (int node = 1; node <= 3; ++node)
    for (int index = 0; index < 4; ++index) devices.push_back(Device(node, index, DeviceMode::kFree));
  std::map<DeviceRef, MigLayout> in_use;   // reference: instances in use, sorted by start
  std::map<DeviceRef, Micros> since;       // reference: MIG devices with none in use
  std::mt19937_64 rng(33);
  Micros now = 0;
  int released = 0;
  for (int step = 0; step < 5000; ++step) {
    now += static_cast<Micros>(rng() % 50);
    DeviceView& d = devices[rng() % devices.size()];
    MigLayout& ref_used = in_use[d.ref];
    switch (rng() % 4) {
      case 0:  // mode flips (only without instances in use, as the scheduler does)
        if (ref_used.empty()) d.mode = d.mode == DeviceMode::kMig ? DeviceMode::kFree : DeviceMode::kMig;
        break;
      case 1:
        if (d.mode == DeviceMode::kMig && ref_used.size() < 7) {
          const MigPlacement p{static_cast<int>(rng() % 20), static_cast<int>(rng() % 100)};
          if (std::find(ref_used.begin(), ref_used.end(), p) != ref_used.end()) break;
          b.AddInUse(d, p);
          ref_used.insert(std::find_if(ref_used.begin(), ref_used.end(),
                                       [&](const MigPlacement& q) {
                                         return q.start > p.start || (q.start == p.start && q.profile_id > p.profile_id);
                                       }),
                          p);
        }
        break;
      default:
        if (!ref_used.empty()) {
          const MigPlacement p = ref_used[rng() % ref_used.size()];
          b.RemoveInUse(d, p);
          ref_used.erase(std::find(ref_used.begin(), ref_used.end(), p));
        }
        break;
    }
    b.NoteUse(d, now);
    if (d.mode == DeviceMode::kMig && ref_used.empty()) {
      since.try_emplace(d.ref, now);
    } else {
      since.erase(d.ref);
    }
    ASSERT_EQ(b.InUse(d), ref_used) << "step " << step;
    ASSERT_EQ(b.any_empty(), !since.empty());
    const Micros hold = static_cast<Micros>(rng() % 400);
    std::vector<DeviceRef> want;
    for (const auto& [ref, t] : since) {
      if (now - t >= hold) want.push_back(ref);
    }
    ASSERT_EQ(b.EmptyFor(now, hold), want) << "step " << step;
    released += !want.empty();
  }
  EXPECT_GT(released, 100);  // the holds did expire
}

}  // namespace
}  // namespace gpuslice::sched
