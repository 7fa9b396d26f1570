// The nvml backend on a machine without a driver (the build machines): a clear Unavailable
// status naming the cause, never a crash.

#include <dlfcn.h>

#include <gtest/gtest.h>

#include "devices/clock.h"

#include "devices/backend.h"
#include "devices/nvml.h"

namespace gpuslice::devices {
namespace {

TEST(NvmlWithoutDriver, MissingLibraryIsUnavailableNoDriver) {
  BackendOptions o;
  o.kind = "nvml";
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  auto b = OpenBackend(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(b.status().message().starts_with("no NVIDIA driver: ")) << b.status().message();
  EXPECT_NE(b.status().message().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
}

TEST(NvmlWithoutDriver, LibraryWithoutNvmlSymbolsIsUnavailable) {
  BackendOptions o;
  o.nvml_library = "libc.so.6";  // loads, but exports no nvmlInit
  auto b = NvmlBackend::Open(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(b.status().message().find("lacks nvmlInit"), std::string::npos) << b.status().message();
}

TEST(NvmlWithoutDriver, DefaultLibraryEitherWorksOrSaysNoDriver) {
  BackendOptions o;
  auto b = OpenBackend(o);
  if (b.ok()) {
    EXPECT_EQ((*b)->kind(), "nvml");
    GTEST_SKIP() << "a driver is present: " << (*b)->description();
  }
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(b.status().message().starts_with("no NVIDIA driver")) << b.status().message();
}

}  // namespace
}  // namespace gpuslice::devices

// The dlopen path against the stand-in library (tests/devices/fake_nvml.cc).
namespace gpuslice::devices {
namespace {

Result<std::unique_ptr<NvmlBackend>> OpenStandIn(const char* path) {
  BackendOptions o;
  o.nvml_library = path;
  return NvmlBackend::Open(o);
}

TEST(NvmlStandIn, DetectsTheEarlyR535ProcessRecordAndReadsItCorrectly) {
  auto b = OpenStandIn(FAKE_NVML_R535_PATH);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->process_abi(), NvmlProcessAbi::kV3R535);
  EXPECT_EQ((*b)->description(), "nvml driver 535.54.03");
  auto s = (*b)->Sample(DeviceIndex(0));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // With the wrong record size the second process would read garbage.
  ASSERT_EQ(s->processes.size(), 2u);
  EXPECT_EQ(s->processes[0].pid, 1234);
  EXPECT_EQ(s->processes[0].memory_used.value(), kGiB);
  EXPECT_EQ(s->processes[1].pid, 5678);
  EXPECT_EQ(s->processes[1].memory_used.value(), 2 * kGiB);
  EXPECT_FALSE(s->processes[1].gpu_instance.has_value()) << "0xFFFFFFFF means not MIG";
}

TEST(NvmlStandIn, FallsBackToV2AndMeasuresSinceTheLastRead) {
  auto b = OpenStandIn(FAKE_NVML_V2_PATH);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->process_abi(), NvmlProcessAbi::kV2);
  auto devs = (*b)->ListDevices();
  ASSERT_TRUE(devs.ok());
  ASSERT_EQ(devs->size(), 2u);
  ASSERT_NE((*devs)[0].model, nullptr);
  EXPECT_EQ((*devs)[0].model->name, "H100-80GB");
  EXPECT_EQ((*devs)[0].memory_total.value(), 80 * kGiB);
  EXPECT_EQ((*devs)[0].mig_current, MigMode::kDisabled);

  // Freeze the stand-in driver's clock so "nothing new since the last read" is deterministic.
  void* lib = ::dlopen(FAKE_NVML_V2_PATH, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto freeze = reinterpret_cast<void (*)(unsigned long long)>(::dlsym(lib, "gpuslice_fake_nvml_freeze"));
  ASSERT_NE(freeze, nullptr);
  freeze(static_cast<unsigned long long>(WallMicros()));
  auto s = (*b)->Sample(DeviceIndex(0));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->gpu_util.value(), 600);
  EXPECT_EQ(s->mem_util.value(), 200);
  EXPECT_GE(s->driver_samples, 5);
  EXPECT_EQ(s->memory_used.value(), 3 * kGiB);
  EXPECT_EQ(s->power_mw.value(), 350000);
  EXPECT_EQ(s->sm_clock_mhz.value(), 1980);
  EXPECT_TRUE(s->temperature_c.unsupported()) << "NOT_SUPPORTED stays unsupported, not 0";
  ASSERT_EQ(s->processes.size(), 2u);
  EXPECT_EQ(s->processes[0].sm_util.value(), 400);
  EXPECT_EQ(s->processes[1].sm_util.value(), 0) << "listed but idle: the driver gives no entry";
  // At once again: the driver has nothing new, which is not "0% busy".
  auto again = (*b)->Sample(DeviceIndex(0));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->gpu_util.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(again->processes.size(), 2u);
  EXPECT_EQ(again->processes[0].sm_util.value(), 0) << "no new per-process samples either";
  EXPECT_EQ((*b)->Sample(DeviceIndex(2)).status().code(), StatusCode::kNotFound);
  freeze(0);
  ::dlclose(lib);
}

TEST(NvmlStandIn, MigInstancesAreCreatedIdempotentlyListedAndDestroyed) {
  auto opened = OpenStandIn(FAKE_NVML_V2_PATH);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  NvmlBackend& b = **opened;
  auto gi = b.CreateGpuInstance(DeviceIndex(1), 9, 4);
  ASSERT_TRUE(gi.ok()) << gi.status().ToString();
  EXPECT_EQ(gi->start, 4);
  EXPECT_EQ(gi->size, 4);
  EXPECT_EQ(gi->memory_total.value(), 40192 * kMiB);
  auto again = b.CreateGpuInstance(DeviceIndex(1), 9, 4);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id, gi->id) << "retry returns the existing instance";
  EXPECT_EQ(b.CreateGpuInstance(DeviceIndex(1), 9, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b.CreateGpuInstance(DeviceIndex(1), 42, 0).status().code(), StatusCode::kInvalidArgument);

  auto ci = b.CreateComputeInstance(DeviceIndex(1), gi->id, 2);
  ASSERT_TRUE(ci.ok()) << ci.status().ToString();
  EXPECT_TRUE(ci->uuid.starts_with("MIG-")) << ci->uuid;
  auto ci_again = b.CreateComputeInstance(DeviceIndex(1), gi->id, 2);
  ASSERT_TRUE(ci_again.ok());
  EXPECT_EQ(ci_again->uuid, ci->uuid);

  auto devs = b.ListDevices();
  ASSERT_TRUE(devs.ok());
  EXPECT_EQ((*devs)[1].mig_current, MigMode::kEnabled);
  ASSERT_EQ((*devs)[1].gpu_instances.size(), 1u);
  EXPECT_EQ((*devs)[1].gpu_instances[0].profile_id, 9);
  ASSERT_EQ((*devs)[1].gpu_instances[0].compute_instances.size(), 1u);
  EXPECT_EQ((*devs)[1].gpu_instances[0].compute_instances[0].uuid, ci->uuid);

  auto s = b.Sample(DeviceIndex(1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->gpu_util.unsupported());
  ASSERT_EQ(s->mig.size(), 1u);
  EXPECT_EQ(s->mig[0].uuid, ci->uuid);
  EXPECT_EQ(s->mig[0].memory_total.value(), 40192 * kMiB);
  EXPECT_TRUE(s->mig[0].util.unsupported());

  EXPECT_TRUE(b.SetMigMode(DeviceIndex(1), true).ok()) << "already enabled: no-op";
  EXPECT_TRUE(b.DestroyGpuInstance(DeviceIndex(1), gi->id).ok()) << "destroys its CI first";
  EXPECT_TRUE(b.DestroyGpuInstance(DeviceIndex(1), gi->id).ok()) << "already gone";
  EXPECT_TRUE(b.ListDevices()->at(1).gpu_instances.empty());
}

}  // namespace
}  // namespace gpuslice::devices
