// One contract for every DeviceBackend: fake and replay always, nvml when a GPU is present
// (skipped with a message otherwise). Scripted scenarios run on backends that can be
// scripted (fake, and replay of a recording of the same fake scenario); read-only invariants
// run on all.

#include <set>
#include <thread>

#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "devices/fake.h"
#include "devices/nvml.h"
#include "devices/recording.h"
#include "devices/replay.h"

namespace gpuslice::devices {
namespace {

constexpr Micros kT0 = 1'700'000'000LL * kSecond;
constexpr int kPid = 4242;
constexpr int kMigPid = 4343;

// Device 0 (H100-80GB): idle [T0, T0+5s), then busy with one process. Device 1 (A100-40GB):
// MIG enabled, one 3g instance at start 0 with one process on it.
struct Scenario {
  std::string mig_uuid;
};

Result<Scenario> Script(FakeBackend& fake) {
  Scenario sc;
  FakeStep idle;
  idle.at = kT0;
  fake.AddStep(DeviceIndex(0), idle);
  FakeStep busy;
  busy.at = kT0 + 5 * kSecond;
  busy.gpu_util = 1000;
  busy.mem_util = 400;
  busy.processes = {{kPid, 1 * kGiB, 800, 300, "", false}};
  fake.AddStep(DeviceIndex(0), busy);
  GPUSLICE_RETURN_IF_ERROR(fake.SetMigMode(DeviceIndex(1), true));
  GPUSLICE_ASSIGN_OR_RETURN(auto gi, fake.CreateGpuInstance(DeviceIndex(1), 9, 0));
  GPUSLICE_ASSIGN_OR_RETURN(auto ci, fake.CreateComputeInstance(DeviceIndex(1), gi.id, 2));
  sc.mig_uuid = ci.uuid;
  FakeStep mig;
  mig.at = kT0;
  mig.processes = {{kMigPid, 2 * kGiB, 0, 0, ci.uuid, false}};
  fake.AddStep(DeviceIndex(1), mig);
  return sc;
}

struct FakeFactory {
  static constexpr bool kScripted = true;
  static constexpr bool kActs = true;
  static std::unique_ptr<DeviceBackend> Make(ManualClock& clock, Scenario* sc, std::string* skip) {
    clock.Set(kT0);
    auto fake = std::make_unique<FakeBackend>(*ParseSimulateSpec("1xH100-80GB,1xA100-40GB"), clock.AsClock());
    auto s = Script(*fake);
    if (!s.ok()) { *skip = s.status().ToString(); return nullptr; }
    *sc = *s;
    return fake;
  }
};

// Records the fake scenario over [T0, T0+10s] at 1 s, then replays it.
struct ReplayFactory {
  static constexpr bool kScripted = true;
  static constexpr bool kActs = false;
  static std::unique_ptr<DeviceBackend> Make(ManualClock& clock, Scenario* sc, std::string* skip) {
    ManualClock rec_clock(kT0);
    FakeBackend fake(*ParseSimulateSpec("1xH100-80GB,1xA100-40GB"), rec_clock.AsClock());
    auto s = Script(fake);
    if (!s.ok()) { *skip = s.status().ToString(); return nullptr; }
    *sc = *s;
    auto rec = Record(fake, 20 * kSecond, kSecond, [&](Micros d) { rec_clock.Advance(d); });
    if (!rec.ok()) { *skip = rec.status().ToString(); return nullptr; }
    // Through JSON and back, so the contract covers the recording format too.
    auto parsed = RecordingFromJson(ToJson(*rec));
    if (!parsed.ok()) { *skip = parsed.status().ToString(); return nullptr; }
    clock.Set(kT0);
    return std::make_unique<ReplayBackend>(std::move(parsed).value(), clock.AsClock());
  }
};

struct NvmlFactory {
  static constexpr bool kScripted = false;
  static constexpr bool kActs = false;  // never reconfigure a real GPU from a unit test
  static std::unique_ptr<DeviceBackend> Make(ManualClock&, Scenario*, std::string* skip) {
    BackendOptions o;
    o.kind = "nvml";
    auto b = NvmlBackend::Open(o);
    if (!b.ok()) {
      *skip = "no NVIDIA GPU here (" + b.status().message() + "); nvml contract runs in tests/gpu/check.sh";
      return nullptr;
    }
    return std::move(b).value();
  }
};

// The real nvml backend, dlopen'ing the stand-in libnvidia-ml (tests/devices/fake_nvml.cc):
// the invariants run against the nvml code path on every build machine.
struct NvmlStandInFactory {
  static constexpr bool kScripted = false;
  static constexpr bool kActs = false;
  static std::unique_ptr<DeviceBackend> Make(ManualClock&, Scenario*, std::string* skip) {
    BackendOptions o;
    o.nvml_library = FAKE_NVML_R535_PATH;
    auto b = NvmlBackend::Open(o);
    if (!b.ok()) {
      *skip = b.status().ToString();
      return nullptr;
    }
    return std::move(b).value();
  }
};

template <typename F>
class BackendContract : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string skip;
    backend_ = F::Make(clock_, &scenario_, &skip);
    if (!backend_) {
      GTEST_SKIP() << skip;
    }
  }
  // Scripted backends move their clock; a real one waits.
  void Advance(Micros d) {
    if (F::kScripted) clock_.Advance(d);
    else std::this_thread::sleep_for(std::chrono::microseconds(d));
  }

  ManualClock clock_;
  Scenario scenario_;
  std::unique_ptr<DeviceBackend> backend_;
};

using Backends = ::testing::Types<FakeFactory, ReplayFactory, NvmlStandInFactory, NvmlFactory>;
class BackendNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, FakeFactory>) return "fake";
    if (std::is_same_v<T, ReplayFactory>) return "replay";
    if (std::is_same_v<T, NvmlStandInFactory>) return "nvml_standin";
    return "nvml";
  }
};
TYPED_TEST_SUITE(BackendContract, Backends, BackendNames);

// A macro, not a helper: GTEST_SKIP must return from the test body itself.
#define REQUIRE_SCRIPTED()                                                              \
  if (!TypeParam::kScripted) {                                                          \
    GTEST_SKIP() << this->backend_->kind() << ": scenario needs a scripted backend"; \
  }

template <typename T>
void ExpectOkOrExplained(const Reading<T>& r, const std::string& what) {
  if (!r.ok()) {
    EXPECT_FALSE(r.status().message().empty()) << what << " missing without a reason";
  }
}

// ---- invariants: every backend ----

TYPED_TEST(BackendContract, ListsDevicesWithUniqueUuids) {
  auto devs = this->backend_->ListDevices();
  ASSERT_TRUE(devs.ok()) << devs.status().ToString();
  ASSERT_FALSE(devs->empty());
  std::set<std::string> uuids;
  for (std::size_t i = 0; i < devs->size(); ++i) {
    const auto& d = (*devs)[i];
    EXPECT_EQ(d.index.value(), i);
    EXPECT_TRUE(d.uuid.starts_with("GPU-")) << d.uuid;
    EXPECT_TRUE(uuids.insert(d.uuid).second) << "duplicate " << d.uuid;
    ExpectOkOrExplained(d.memory_total, "memory_total");
    for (const auto& gi : d.gpu_instances) {
      for (const auto& ci : gi.compute_instances) EXPECT_TRUE(ci.uuid.starts_with("MIG-")) << ci.uuid;
    }
  }
}

TYPED_TEST(BackendContract, SamplesEveryDeviceWithRangesAndReasons) {
  auto devs = this->backend_->ListDevices();
  ASSERT_TRUE(devs.ok());
  for (const auto& d : *devs) (void)this->backend_->Sample(d.index);
  this->Advance(1200 * kMillisecond);
  for (const auto& d : *devs) {
    auto s = this->backend_->Sample(d.index);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->uuid, d.uuid);
    EXPECT_LE(s->window_start, s->window_end);
    for (const auto* u : {&s->gpu_util, &s->mem_util}) {
      ExpectOkOrExplained(*u, "utilisation");
      if (u->ok()) {
        EXPECT_GE(u->value(), 0);
        EXPECT_LE(u->value(), 1000);
      }
    }
    ExpectOkOrExplained(s->memory_used, "memory_used");
    if (s->memory_used.ok() && s->memory_total.ok()) {
      EXPECT_LE(s->memory_used.value(), s->memory_total.value());
    }
    for (const auto& p : s->processes) {
      EXPECT_GT(p.pid, 0);
      ExpectOkOrExplained(p.memory_used, "process memory");
      ExpectOkOrExplained(p.sm_util, "process sm");
    }
  }
}

TYPED_TEST(BackendContract, UnknownDeviceIsNotFound) {
  auto s = this->backend_->Sample(DeviceIndex(99));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  auto m = this->backend_->GetMpsStatus(DeviceIndex(99));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
}

// ---- scripted scenario ----

TYPED_TEST(BackendContract, UtilisationIsAveragedOverTheWindowSinceTheLastRead) {
  REQUIRE_SCRIPTED();
  (void)this->backend_->Sample(DeviceIndex(0));  // read at T0
  this->Advance(10 * kSecond);
  auto s = this->backend_->Sample(DeviceIndex(0));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(s->gpu_util.ok()) << s->gpu_util.status().ToString();
  // Idle 5 s then 100% for 5 s: the mean over the window, not the instantaneous 100%.
  EXPECT_EQ(s->gpu_util.value(), 500);
  EXPECT_EQ(s->mem_util.value(), 200);
  EXPECT_GT(s->driver_samples, 0);
  // Read again at once: nothing new, and that is not "0% busy".
  auto again = this->backend_->Sample(DeviceIndex(0));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->gpu_util.ok());
  EXPECT_EQ(again->gpu_util.status().code(), StatusCode::kNotFound);
}

TYPED_TEST(BackendContract, ProcessesCarryMemoryAndUtilisation) {
  REQUIRE_SCRIPTED();
  (void)this->backend_->Sample(DeviceIndex(0));
  this->Advance(10 * kSecond);
  auto s = this->backend_->Sample(DeviceIndex(0));
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->processes.size(), 1u);
  EXPECT_EQ(s->processes[0].pid, kPid);
  EXPECT_EQ(s->processes[0].memory_used.value(), 1 * kGiB);
  EXPECT_EQ(s->processes[0].sm_util.value(), 800);
  EXPECT_EQ(s->memory_used.value(), 1 * kGiB);
  EXPECT_FALSE(s->processes[0].mig_uuid.size());
}

TYPED_TEST(BackendContract, MigInstanceFiguresAreUnsupportedNotZero) {
  REQUIRE_SCRIPTED();
  auto devs = this->backend_->ListDevices();
  ASSERT_TRUE(devs.ok());
  const auto& d = (*devs)[1];
  ASSERT_NE(d.model, nullptr);
  EXPECT_EQ(d.model->name, "A100-40GB");
  EXPECT_EQ(d.mig_current, MigMode::kEnabled);
  ASSERT_EQ(d.gpu_instances.size(), 1u);
  EXPECT_EQ(d.gpu_instances[0].profile_id, 9);
  EXPECT_EQ(d.gpu_instances[0].start, 0);
  ASSERT_EQ(d.gpu_instances[0].compute_instances.size(), 1u);
  EXPECT_EQ(d.gpu_instances[0].compute_instances[0].uuid, this->scenario_.mig_uuid);

  (void)this->backend_->Sample(DeviceIndex(1));
  this->Advance(3 * kSecond);
  auto s = this->backend_->Sample(DeviceIndex(1));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->gpu_util.unsupported()) << s->gpu_util.status().ToString();
  ASSERT_EQ(s->mig.size(), 1u);
  EXPECT_EQ(s->mig[0].uuid, this->scenario_.mig_uuid);
  EXPECT_TRUE(s->mig[0].util.unsupported()) << "A100 has no per-instance utilisation";
  EXPECT_EQ(s->mig[0].memory_used.value(), 2 * kGiB);
  EXPECT_EQ(s->mig[0].pids, std::vector<int>{kMigPid});
  ASSERT_EQ(s->processes.size(), 1u);
  EXPECT_EQ(s->processes[0].mig_uuid, this->scenario_.mig_uuid);
  EXPECT_TRUE(s->processes[0].sm_util.unsupported());
}

// ---- actions ----

TYPED_TEST(BackendContract, MpsStartStopAreIdempotent) {
  if (!TypeParam::kActs) {
    // Never asked of the nvml backends here: with nvidia-cuda-mps-control on PATH (any GPU host)
    // they would start a real MPS daemon and leave it running. Replay must refuse.
    if (this->backend_->kind() == "replay") {
      const std::string dir = ::testing::TempDir() + "gs-contract-replay-mps";
      EXPECT_EQ(this->backend_->StartMps(DeviceIndex(0), {dir + "/pipe", dir + "/log", {}, {}, {}}).code(),
                StatusCode::kUnsupported);
      EXPECT_FALSE(std::filesystem::exists(dir)) << "refused without touching the disk";
    }
    GTEST_SKIP() << this->backend_->kind() << " does not act in unit tests";
  }
  MpsConfig c{"/tmp/gs-contract-pipe", "/tmp/gs-contract-log", 50, 2 * kGiB};
  ASSERT_TRUE(this->backend_->StartMps(DeviceIndex(0), c).ok());
  ASSERT_TRUE(this->backend_->StartMps(DeviceIndex(0), c).ok());  // retry after a crash
  EXPECT_EQ(this->backend_->GetMpsStatus(DeviceIndex(0))->state, MpsState::kRunning);
  MpsConfig other = c;
  other.pipe_dir = "/tmp/gs-contract-other";
  EXPECT_EQ(this->backend_->StartMps(DeviceIndex(0), other).code(), StatusCode::kFailedPrecondition);
  MpsConfig bad = c;
  bad.default_active_thread_percentage = 0;
  EXPECT_EQ(this->backend_->StartMps(DeviceIndex(0), bad).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(this->backend_->StopMps(DeviceIndex(0)).ok());
  ASSERT_TRUE(this->backend_->StopMps(DeviceIndex(0)).ok());
  EXPECT_EQ(this->backend_->GetMpsStatus(DeviceIndex(0))->state, MpsState::kStopped);
}

TYPED_TEST(BackendContract, MigActionsAreIdempotentAndRefusedUnderProcesses) {
  if (!TypeParam::kActs) {
    GTEST_SKIP() << this->backend_->kind() << " does not act in unit tests";
  }
  auto& b = *this->backend_;
  // The instance from the scenario has a process: neither it nor the mode may change.
  auto devs = b.ListDevices();
  const auto gi = (*devs)[1].gpu_instances[0];
  EXPECT_EQ(b.DestroyGpuInstance(DeviceIndex(1), gi.id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(b.DestroyComputeInstance(DeviceIndex(1), gi.id, gi.compute_instances[0].id).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(b.SetMigMode(DeviceIndex(1), false).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(b.SetMigMode(DeviceIndex(1), true).ok()) << "setting the current mode is a no-op";
  // Create at the same profile+placement returns the existing instance.
  auto again = b.CreateGpuInstance(DeviceIndex(1), 9, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, gi.id);
  // Overlapping placement is refused and changes nothing.
  EXPECT_FALSE(b.CreateGpuInstance(DeviceIndex(1), 14, 2).ok());
  EXPECT_EQ((*b.ListDevices())[1].gpu_instances.size(), 1u);
  // The other half is free.
  auto second = b.CreateGpuInstance(DeviceIndex(1), 9, 4);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  auto ci = b.CreateComputeInstance(DeviceIndex(1), second->id, 2);
  ASSERT_TRUE(ci.ok());
  // A second CI is a new one or a refusal (this full-size one does not fit), never the first
  // handed out again: two callers must not share a compute instance.
  auto ci_again = b.CreateComputeInstance(DeviceIndex(1), second->id, 2);
  EXPECT_FALSE(ci_again.ok()) << ci_again->uuid;
  auto listed = b.ListDevices();
  ASSERT_TRUE(listed.ok());
  for (const auto& g : (*listed)[1].gpu_instances) {
    if (g.id == second->id) {
      EXPECT_EQ(g.compute_instances.size(), 1u);
    }
  }
  EXPECT_TRUE(b.DestroyGpuInstance(DeviceIndex(1), second->id).ok());
  EXPECT_TRUE(b.DestroyGpuInstance(DeviceIndex(1), second->id).ok()) << "already gone is OK";
  EXPECT_EQ((*b.ListDevices())[1].gpu_instances.size(), 1u);
  // A device without MIG.
  EXPECT_EQ(b.CreateGpuInstance(DeviceIndex(0), 9, 0).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gpuslice::devices
