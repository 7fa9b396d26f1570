// FakeBackend specifics: the simulate spec, injected errors, processes that vanish between
// listing and lookup, MPS death.

#include <gtest/gtest.h>

#include "devices/backend.h"
#include "devices/fake.h"

namespace gpuslice::devices {
namespace {

TEST(SimulateSpec, ParsesCountsAndModels) {
  auto m = ParseSimulateSpec("2xA100-40GB,1xH100-80GB");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[0]->name, "A100-40GB");
  EXPECT_EQ((*m)[2]->name, "H100-80GB");
  EXPECT_EQ(ParseSimulateSpec("H100-80GB")->size(), 1u);
}

TEST(SimulateSpec, RejectsUnknownModelsAndCounts) {
  auto bad = ParseSimulateSpec("2xNoSuchGPU");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("2xNoSuchGPU"), std::string::npos) << bad.status().ToString();
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseSimulateSpec("0xH100-80GB").ok());
  EXPECT_FALSE(ParseSimulateSpec("").ok());
}

TEST(OpenBackend, UnknownKindIsInvalidArgument) {
  BackendOptions o;
  o.kind = "cuda";
  auto b = OpenBackend(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("cuda"), std::string::npos);
}

TEST(OpenBackend, FakeWithSimulateSpec) {
  BackendOptions o;
  o.kind = "fake";
  o.simulate = "3xA100-80GB";
  auto b = OpenBackend(o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->ListDevices()->size(), 3u);
}

class FakeTest : public ::testing::Test {
 protected:
  FakeTest() : fake_(*ParseSimulateSpec("2xH100-80GB"), clock_.AsClock()) {}
  ManualClock clock_{1000 * kSecond};
  FakeBackend fake_;
};

TEST_F(FakeTest, DriverErrorMidSampleLosesThatWindowOnly) {
  FakeStep busy;
  busy.at = 0;
  busy.gpu_util = 600;
  fake_.AddStep(DeviceIndex(0), busy);
  (void)fake_.Sample(DeviceIndex(0));
  fake_.InjectError(FakeCall::kSample, Unavailable("GPU is lost"));
  clock_.Advance(kSecond);
  auto failed = fake_.Sample(DeviceIndex(0));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  clock_.Advance(kSecond);
  auto next = fake_.Sample(DeviceIndex(0));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->gpu_util.value(), 600);
  EXPECT_EQ(next->window_end - next->window_start, kSecond) << "the next read starts a fresh window";
}

TEST_F(FakeTest, InjectedErrorsAreConsumedInOrder) {
  fake_.InjectError(FakeCall::kListDevices, Internal("first"), 2);
  EXPECT_EQ(fake_.ListDevices().status().message(), "first");
  EXPECT_EQ(fake_.ListDevices().status().message(), "first");
  EXPECT_TRUE(fake_.ListDevices().ok());
}

TEST_F(FakeTest, ProcessExitingDuringLookupReadsNotFoundNotZero) {
  FakeStep s;
  s.at = 0;
  s.processes = {{100, kGiB, 500, 0, "", false}, {101, 2 * kGiB, 300, 0, "", true}};
  fake_.AddStep(DeviceIndex(1), s);
  auto r = fake_.Sample(DeviceIndex(1));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->processes.size(), 2u);
  EXPECT_TRUE(r->processes[0].memory_used.ok());
  EXPECT_FALSE(r->processes[1].memory_used.ok());
  EXPECT_EQ(r->processes[1].memory_used.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r->processes[1].sm_util.status().code(), StatusCode::kNotFound);
}

TEST_F(FakeTest, MpsDeathIsNoticedAndRestartRecovers) {
  MpsConfig c{"/tmp/p", "/tmp/l", 25, std::nullopt};
  ASSERT_TRUE(fake_.StartMps(DeviceIndex(0), c).ok());
  fake_.KillMps(DeviceIndex(0));
  EXPECT_EQ(fake_.GetMpsStatus(DeviceIndex(0))->state, MpsState::kDied);
  ASSERT_TRUE(fake_.StartMps(DeviceIndex(0), c).ok());
  EXPECT_EQ(fake_.GetMpsStatus(DeviceIndex(0))->state, MpsState::kRunning);
  EXPECT_EQ(fake_.GetMpsStatus(DeviceIndex(1))->state, MpsState::kStopped);
}

TEST_F(FakeTest, SetStateChangesFromNowAndKeepsThePast) {
  (void)fake_.Sample(DeviceIndex(0));
  clock_.Advance(kSecond);
  FakeStep s;
  s.gpu_util = 1000;
  fake_.SetState(DeviceIndex(0), s);
  clock_.Advance(kSecond);
  auto r = fake_.Sample(DeviceIndex(0));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->gpu_util.value(), 500);
}

TEST_F(FakeTest, EnergyIsMonotonic) {
  (void)fake_.Sample(DeviceIndex(0));
  clock_.Advance(kSecond);
  auto a = fake_.Sample(DeviceIndex(0));
  clock_.Advance(kSecond);
  auto b = fake_.Sample(DeviceIndex(0));
  EXPECT_GT(b->energy_mj.value(), a->energy_mj.value());
}

TEST(Reading, MissingIsNotZero) {
  auto r = Reading<int>::NotSupported("no");
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.unsupported());
  EXPECT_EQ(r.value_or(-1), -1);
  EXPECT_FALSE(r.optional().has_value());
  EXPECT_NE(Reading<int>::Of(0), r);
  EXPECT_EQ(Reading<int>::Of(0).value(), 0);
}

}  // namespace
}  // namespace gpuslice::devices
