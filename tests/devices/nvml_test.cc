// The nvml backend on a machine without a driver (the build machines): a clear Unavailable
// status naming the cause, never a crash.

#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

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

// The symbols of this stand-in say "24-byte records" (RunningProcessDetailList is exported), but
// it writes 32-byte ones: only the sentinel-measured stride reads the second process right.
TEST(NvmlStandIn, MeasuresTheProcessRecordSizeWhateverTheSymbolsSay) {
  auto b = OpenStandIn(FAKE_NVML_R535X_PATH);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->process_abi(), NvmlProcessAbi::kV3) << "the symbol-based guess";
  auto s = (*b)->Sample(DeviceIndex(0));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->processes.size(), 2u);
  EXPECT_EQ(s->processes[0].pid, 1234);
  EXPECT_EQ(s->processes[1].pid, 5678);
  EXPECT_EQ(s->processes[1].memory_used.value(), 2 * kGiB);
  EXPECT_FALSE(s->processes[1].gpu_instance.has_value());
  EXPECT_EQ((*b)->process_abi(), NvmlProcessAbi::kV3R535) << "what the driver wrote";
}

// Freezes the stand-in driver's clocks at their current reading for the scope.
class FrozenStandInClock {
 public:
  explicit FrozenStandInClock(const char* path) : lib_(::dlopen(path, RTLD_NOW | RTLD_NOLOAD)) {
    if (lib_ == nullptr) return;
    freeze_ = reinterpret_cast<void (*)(unsigned long long)>(::dlsym(lib_, "gpuslice_fake_nvml_freeze"));
    auto now = reinterpret_cast<void (*)()>(::dlsym(lib_, "gpuslice_fake_nvml_freeze_now"));
    if (freeze_ != nullptr && now != nullptr) now();
  }
  ~FrozenStandInClock() {
    if (freeze_ != nullptr) freeze_(0);
    if (lib_ != nullptr) ::dlclose(lib_);
  }
  bool ok() const { return freeze_ != nullptr; }

 private:
  void* lib_;
  void (*freeze_)(unsigned long long) = nullptr;
};

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
  FrozenStandInClock frozen(FAKE_NVML_V2_PATH);
  ASSERT_TRUE(frozen.ok());
  const Micros before = WallMicros();
  auto s = (*b)->Sample(DeviceIndex(0));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->processes.size(), 2u);
  // The stale 90 % entry of pid 1234 (an hour old) is not averaged in.
  EXPECT_EQ(s->processes[0].sm_util.value(), 400);
  EXPECT_EQ(s->processes[0].mem_util.value(), 100);
  // pid 5678's only entry claims 4000 % SM: dropped, so it reads as idle (not 100 %).
  EXPECT_EQ(s->processes[1].sm_util.value(), 0) << "listed, only an impossible entry";
  // The driver's samples are on its boot clock, minutes of them: the first read keeps the
  // last second of that clock and drops the impossible 250 % sample (not clamped to 100 %).
  ASSERT_TRUE(s->gpu_util.ok()) << s->gpu_util.status().ToString();
  EXPECT_EQ(s->gpu_util.value(), 600);
  ASSERT_TRUE(s->mem_util.ok()) << s->mem_util.status().ToString();
  EXPECT_EQ(s->mem_util.value(), 200);
  EXPECT_EQ(s->driver_samples, 6);
  // The window is on the wall clock, whatever the driver's clock is.
  EXPECT_GE(s->window_end, before);
  EXPECT_EQ(s->window_end - s->window_start, kSecond);
  EXPECT_EQ(s->memory_used.value(), 3 * kGiB);
  EXPECT_EQ(s->power_mw.value(), 350000);
  EXPECT_EQ(s->sm_clock_mhz.value(), 1980);
  EXPECT_TRUE(s->temperature_c.unsupported()) << "NOT_SUPPORTED stays unsupported, not 0";
  // At once again: the driver has nothing new, which is not "0% busy".
  auto again = (*b)->Sample(DeviceIndex(0));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->gpu_util.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(again->window_start, s->window_end) << "the next window starts where the last ended";
  EXPECT_EQ(again->processes.size(), 2u);
  EXPECT_EQ(again->processes[0].sm_util.value(), 0) << "the stale entry the driver returns again is dropped";
  EXPECT_EQ(again->processes[1].sm_util.value(), 0);
  EXPECT_EQ((*b)->Sample(DeviceIndex(2)).status().code(), StatusCode::kNotFound);
}

TEST(NvmlStandIn, MigInstancesAreCreatedListedAndDestroyed) {
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

  // Profile id 2 (3 slices) sits at index 3 of this driver: matched by id, not used as an index.
  auto ci = b.CreateComputeInstance(DeviceIndex(1), gi->id, 2);
  ASSERT_TRUE(ci.ok()) << ci.status().ToString();
  EXPECT_TRUE(ci->uuid.starts_with("MIG-")) << ci->uuid;
  // A second full-size CI does not fit: refused, never the first one handed out again.
  auto ci_again = b.CreateComputeInstance(DeviceIndex(1), gi->id, 2);
  EXPECT_EQ(ci_again.status().code(), StatusCode::kResourceExhausted) << ci_again.status().ToString();
  EXPECT_EQ(b.CreateComputeInstance(DeviceIndex(1), gi->id, 42).status().code(), StatusCode::kInvalidArgument);

  auto devs = b.ListDevices();
  ASSERT_TRUE(devs.ok());
  EXPECT_EQ((*devs)[1].mig_current, MigMode::kEnabled);
  ASSERT_EQ((*devs)[1].gpu_instances.size(), 1u);
  EXPECT_EQ((*devs)[1].gpu_instances[0].profile_id, 9);
  ASSERT_EQ((*devs)[1].gpu_instances[0].compute_instances.size(), 1u);
  EXPECT_EQ((*devs)[1].gpu_instances[0].compute_instances[0].uuid, ci->uuid);
  EXPECT_EQ((*devs)[1].gpu_instances[0].compute_instances[0].profile_id, 2);

  auto s = b.Sample(DeviceIndex(1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->gpu_util.unsupported());
  ASSERT_EQ(s->mig.size(), 1u);
  EXPECT_EQ(s->mig[0].uuid, ci->uuid);
  EXPECT_EQ(s->mig[0].memory_total.value(), 40192 * kMiB);
  // "used" means what the device rows mean (v2: allocated, without the 256 MiB reserved).
  EXPECT_EQ(s->mig[0].memory_used.value(), kGiB);
  EXPECT_TRUE(s->mig[0].util.unsupported());

  EXPECT_TRUE(b.SetMigMode(DeviceIndex(1), true).ok()) << "already enabled: no-op";
  EXPECT_TRUE(b.DestroyGpuInstance(DeviceIndex(1), gi->id).ok()) << "destroys its CI first";
  EXPECT_TRUE(b.DestroyGpuInstance(DeviceIndex(1), gi->id).ok()) << "already gone";
  EXPECT_TRUE(b.ListDevices()->at(1).gpu_instances.empty());
}

TEST(NvmlStandIn, TwoComputeInstancesOfOneProfileAreTwo) {
  auto opened = OpenStandIn(FAKE_NVML_V2_PATH);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  NvmlBackend& b = **opened;
  auto gi = b.CreateGpuInstance(DeviceIndex(1), 9, 0);  // 3 compute slices
  ASSERT_TRUE(gi.ok()) << gi.status().ToString();
  auto first = b.CreateComputeInstance(DeviceIndex(1), gi->id, 0);  // 1 slice
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = b.CreateComputeInstance(DeviceIndex(1), gi->id, 0);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_NE(second->id, first->id) << "two callers must not share one compute instance";
  EXPECT_NE(second->uuid, first->uuid);
  EXPECT_FALSE(second->uuid.empty());
  auto third = b.CreateComputeInstance(DeviceIndex(1), gi->id, 0);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(b.CreateComputeInstance(DeviceIndex(1), gi->id, 0).status().code(), StatusCode::kResourceExhausted)
      << "3 slices, 3 CIs: full";
  auto devs = b.ListDevices();
  ASSERT_TRUE(devs.ok());
  ASSERT_EQ((*devs)[1].gpu_instances.size(), 1u);
  EXPECT_EQ((*devs)[1].gpu_instances[0].compute_instances.size(), 3u);
  EXPECT_TRUE(b.DestroyComputeInstance(DeviceIndex(1), gi->id, second->id).ok());
  EXPECT_EQ(b.ListDevices()->at(1).gpu_instances[0].compute_instances.size(), 2u);
  EXPECT_TRUE(b.DestroyGpuInstance(DeviceIndex(1), gi->id).ok());
}

// nvml.h: enumerate GPU-instance profiles "until the API returns INVALID_ARGUMENT". This
// driver has one at index 0x13, past the 0x12 profiles of today's header.
TEST(NvmlStandIn, GpuInstanceProfilesPastTodaysHeaderCountAreFound) {
  auto opened = OpenStandIn(FAKE_NVML_V2_PATH);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  NvmlBackend& b = **opened;
  auto gi = b.CreateGpuInstance(DeviceIndex(1), 15, 2);
  ASSERT_TRUE(gi.ok()) << gi.status().ToString();
  EXPECT_EQ(gi->memory_total.value(), 19968 * kMiB);
  auto devs = b.ListDevices();
  ASSERT_TRUE(devs.ok());
  ASSERT_EQ((*devs)[1].gpu_instances.size(), 1u) << "listed, so its memory slices are not taken for free";
  EXPECT_EQ((*devs)[1].gpu_instances[0].profile_id, 15);
  EXPECT_TRUE(b.DestroyGpuInstance(DeviceIndex(1), gi->id).ok());
}

}  // namespace
}  // namespace gpuslice::devices

// The driver's memory limits (r615+): found by dlsym, used only where the driver has them, and
// read back after every set; older drivers say Unsupported (the interposer holds caps there).
namespace gpuslice::devices {
namespace {

TEST(NvmlStandIn, MemoryLimitsWhereTheDriverOffersThemAndNowhereElse) {
  auto b = OpenStandIn(FAKE_NVML_R615_PATH);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->driver_major(), 615);
  EXPECT_TRUE((*b)->SupportsMemoryLimits(DeviceIndex(0)));
  EXPECT_FALSE((*b)->SupportsMemoryLimits(DeviceIndex(1))) << "device 1 is in MIG mode";
  EXPECT_TRUE((*b)->SetMemoryLimit(DeviceIndex(0), "/sys/fs/cgroup/gpuslice/job-7", kGiB, 2 * kGiB).ok());
  EXPECT_EQ((*b)->SetMemoryLimit(DeviceIndex(0), "relative/job-7", kGiB, 2 * kGiB).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*b)->SetMemoryLimit(DeviceIndex(0), "/sys/fs/cgroup/x", 3 * kGiB, 2 * kGiB).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*b)->SetMemoryLimit(DeviceIndex(1), "/sys/fs/cgroup/x", kGiB, kGiB).code(), StatusCode::kUnsupported);

  auto old = OpenStandIn(FAKE_NVML_V2_PATH);
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE((*old)->SupportsMemoryLimits(DeviceIndex(0))) << "a 470 driver has no memory limits";
  Status st = (*old)->SetMemoryLimit(DeviceIndex(0), "/sys/fs/cgroup/x", kGiB, kGiB);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("r615"), std::string::npos) << st.message();
}

TEST(NvmlStandIn, ALimitTheDriverDidNotKeepIsAnErrorNotASuccess) {
  auto b = OpenStandIn(FAKE_NVML_R615_PATH);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(setenv("GPUSLICE_FAKE_NVML_DROP_LIMITS", "1", 1), 0);
  Status st = (*b)->SetMemoryLimit(DeviceIndex(0), "/sys/fs/cgroup/gpuslice/job-8", kGiB, kGiB);
  ASSERT_EQ(unsetenv("GPUSLICE_FAKE_NVML_DROP_LIMITS"), 0);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("not relying on it"), std::string::npos) << st.message();
}

// MIG profiles and placements come from the driver: the stand-in's table differs from the
// catalogue's H100 on purpose (three profiles only, one with another compute-slice count and
// one with another memory figure), and the differences are named.
TEST(NvmlStandIn, MigProfilesAreReadFromTheDriverAndComparedWithTheCatalogue) {
  auto b = OpenStandIn(FAKE_NVML_V2_PATH);
  ASSERT_TRUE(b.ok());
  auto profiles = (*b)->MigProfiles(DeviceIndex(1));
  ASSERT_TRUE(profiles.ok()) << profiles.status().ToString();
  ASSERT_EQ(profiles->size(), 3u);
  std::map<int, MigProfile> by_id;
  for (const MigProfile& p : *profiles) by_id[p.id] = p;
  EXPECT_EQ(by_id.at(19).placement_starts, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(by_id.at(19).memory_slices, 1);
  EXPECT_EQ(by_id.at(19).memory, 9856 * kMiB);
  EXPECT_EQ(by_id.at(19).name, "1g.10gb") << "the catalogue's name for the same id";
  EXPECT_EQ(by_id.at(9).placement_starts, (std::vector<int>{0, 4}));
  EXPECT_EQ(by_id.at(9).memory_slices, 4);
  EXPECT_EQ(by_id.at(9).max_instances, 2);
  EXPECT_EQ(by_id.at(15).nvml_index, 0x13) << "an index past today's header is still read";
  EXPECT_EQ(by_id.at(15).placement_starts, (std::vector<int>{0, 2, 4, 6}));

  const DeviceModel& h100 = **FindModel("H100-80GB");
  const std::vector<std::string> diffs = MigTableDifferences(h100, *profiles);
  auto has = [&](const std::string& s) {
    return std::any_of(diffs.begin(), diffs.end(), [&](const std::string& d) { return d.find(s) != std::string::npos; });
  };
  EXPECT_TRUE(has("profile 0 (7g.80gb): in the catalogue, not offered by the driver"));
  EXPECT_TRUE(has("profile 15 (1g.20gb): 1 compute slices in the catalogue, 2 from the driver"));
  EXPECT_TRUE(has("profile 19 (1g.10gb): 9.75GiB in the catalogue"));
  EXPECT_FALSE(has("profile 9 (3g.40gb): placement")) << "the same starts";

  // The driver wins: the catalogue takes its table (then gets its own back for the other tests).
  const std::vector<MigProfile> saved = h100.mig_profiles;
  ASSERT_TRUE(UseDriverMigProfiles("H100-80GB", *profiles).ok());
  EXPECT_EQ(h100.mig_profiles.size(), 3u);
  EXPECT_EQ(h100.mig_profiles.front().id, 19) << "catalogue order: fewest memory slices first";
  EXPECT_EQ(h100.mig_memory_slices, 8);
  EXPECT_TRUE(MigTableDifferences(h100, *profiles).empty());
  ASSERT_TRUE(UseDriverMigProfiles("H100-80GB", saved).ok());
  EXPECT_EQ(h100.mig_profiles.size(), saved.size());

  EXPECT_EQ((*b)->MigProfiles(DeviceIndex(0)).status().code(), StatusCode::kUnsupported)
      << "device 0 offers no profile";
  EXPECT_EQ(UseDriverMigProfiles("H100-80GB", {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(UseDriverMigProfiles("Z80", saved).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpuslice::devices
