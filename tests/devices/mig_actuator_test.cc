// MIG actuation over the fake backend: a layout is reached (GPU instances made, each with one
// compute instance spanning it), what is not in it is destroyed, what is kept stays as it was,
// and a placement's MIG device UUID is found or made.
#include <gtest/gtest.h>

#include "devices/fake.h"
#include "devices/mig_actuator.h"

namespace gpuslice::devices {
namespace {

std::vector<GpuInstanceInfo> Instances(DeviceBackend& b) {
  auto devs = b.ListDevices();
  EXPECT_TRUE(devs.ok());
  return devs.ok() ? (*devs)[0].gpu_instances : std::vector<GpuInstanceInfo>{};
}

TEST(MigActuatorTest, ReachesTheLayoutAndKeepsWhatStays) {
  auto fake = FakeBackend::Create("1xH100-80GB");
  ASSERT_TRUE(fake.ok());
  DeviceBackend& b = **fake;
  const DeviceIndex d0(0);
  const DeviceModel* model = (*b.ListDevices())[0].model;
  ASSERT_NE(model, nullptr);
  // Two 1g instances (profile 19 on H100: 1g.10gb) at starts 0 and 1.
  const MigProfile* one = model->FindProfile("1g.10gb");
  ASSERT_NE(one, nullptr);
  MigLayout two = {{one->id, 0}, {one->id, 1}};
  ASSERT_TRUE(ApplyMigLayout(b, d0, true, two, model).ok());
  auto gis = Instances(b);
  ASSERT_EQ(gis.size(), 2u);
  for (const auto& gi : gis) EXPECT_EQ(gi.compute_instances.size(), 1u) << "one CI spanning the GI";
  const std::string kept_uuid = gis[0].start == 0 ? gis[0].compute_instances[0].uuid : gis[1].compute_instances[0].uuid;

  // Down to the one at start 0: the other is destroyed, the kept one keeps its compute instance.
  ASSERT_TRUE(ApplyMigLayout(b, d0, true, {{one->id, 0}}, model).ok());
  gis = Instances(b);
  ASSERT_EQ(gis.size(), 1u);
  EXPECT_EQ(gis[0].start, 0);
  auto uuid = MigDeviceUuid(b, d0, one->id, 0);
  ASSERT_TRUE(uuid.ok()) << uuid.status().ToString();
  EXPECT_EQ(*uuid, kept_uuid);

  // A placement with no instance yet: made on demand.
  auto made = MigDeviceUuid(b, d0, one->id, 2);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_NE(*made, kept_uuid);
  EXPECT_EQ(Instances(b).size(), 2u);

  EXPECT_EQ(MigDeviceUuid(b, DeviceIndex(5), one->id, 0).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(ApplyMigLayout(b, d0, true, {{one->id, 99}}, model).ok()) << "an illegal start is refused";
}

// The mode is the caller's to say: on with no instance (an admin's order before any MIG work),
// off with every instance destroyed first, and never a layout with the mode off.
TEST(MigActuatorTest, MigModeOnWithNoInstanceAndOff) {
  auto fake = FakeBackend::Create("1xH100-80GB");
  ASSERT_TRUE(fake.ok());
  DeviceBackend& b = **fake;
  const DeviceIndex d0(0);
  auto mode = [&] { return (*b.ListDevices())[0].mig_current; };
  const DeviceModel* model = (*b.ListDevices())[0].model;
  const MigProfile* one = model->FindProfile("1g.10gb");
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(mode(), MigMode::kDisabled);
  ASSERT_TRUE(ApplyMigLayout(b, d0, true, {}, model).ok());
  EXPECT_EQ(mode(), MigMode::kEnabled);
  EXPECT_TRUE(Instances(b).empty());
  ASSERT_TRUE(ApplyMigLayout(b, d0, true, {{one->id, 0}}, model).ok());
  EXPECT_EQ(Instances(b).size(), 1u);
  EXPECT_EQ(ApplyMigLayout(b, d0, false, {{one->id, 0}}, model).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Instances(b).size(), 1u) << "refused: nothing done";
  ASSERT_TRUE(ApplyMigLayout(b, d0, false, {}, model).ok());
  EXPECT_EQ(mode(), MigMode::kDisabled);
  EXPECT_TRUE(Instances(b).empty());
}

TEST(MigActuatorTest, FullComputeInstanceProfile) {
  EXPECT_EQ(FullCiProfile(1), 0);
  EXPECT_EQ(FullCiProfile(7), 4);
  EXPECT_EQ(FullCiProfile(3), 2);
}

}  // namespace
}  // namespace gpuslice::devices
