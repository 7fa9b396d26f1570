// The MIG planner never strands capacity (issue 31, item 2): a pending MIG request takes a GPU
// that is free, or becomes free, before a busy one is drained, and lower-priority work does not
// take that GPU first; a GPU leaves MIG mode when no MIG work holds it and other work waits,
// after a hold time (hysteresis); no job "could never fit" because of a layout gpuslice chose;
// the README's example fits the smallest profile. Also: when a time-limit warning comes.
#include <fstream>
#include <regex>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/builders.h"
#include "testing/sched_harness.h"

namespace gpuslice::sched {
namespace {

using ::gpuslice::testing::Only;
using ::gpuslice::testing::SchedHarness;
using ::testing::HasSubstr;
using ::testing::SizeIs;

const DeviceModel& Model(std::string_view name) { return **FindModel(name); }

const DeviceView& Device(SchedHarness& h, std::uint32_t index) {
  return h.scheduler().devices().at(DeviceRef{NodeId(1), DeviceIndex(index)});
}

JobId StartedOn(const std::vector<Decision>& ds, std::uint32_t* device) {
  auto s = Only<StartSlice>(ds);
  if (s.size() != 1) return JobId();
  *device = s[0].devices.at(0).value();
  return s[0].job;
}

TEST(MigPlanner, AFreeGpuIsTakenBeforeABusyOneIsDrained) {
  SchedHarness h;
  h.AddHost("2xH100-80GB");
  std::uint32_t notebook_dev = 0, train_dev = 0;
  ASSERT_TRUE(StartedOn(h.Submit("interactive gpu=250m"), &notebook_dev).valid());
  const JobId train = StartedOn(h.Submit("training gpus=1"), &train_dev);
  ASSERT_TRUE(train.valid());
  ASSERT_NE(notebook_dev, train_dev);
  // Both GPUs are busy: the MIG request has a GPU drained.
  auto ds = h.Submit("inference mem=9GiB");
  const JobId inference = h.last_job();
  ASSERT_THAT(Only<Drain>(ds), SizeIs(1));
  const std::uint32_t drained = Only<Drain>(ds)[0].device.index.value();
  // A notebook that fits nowhere now waits behind it (lower priority than inference).
  EXPECT_THAT(Only<StartSlice>(h.Submit("interactive gpu=1")), SizeIs(0));
  const JobId big_notebook = h.last_job();
  // The other GPU frees: the MIG request takes it at once, the drain is called off, and the
  // waiting notebook does not get the free GPU first.
  const std::uint32_t freed = drained == train_dev ? notebook_dev : train_dev;
  auto fin = h.Finish(drained == train_dev ? JobId(1) : train);
  auto rc = Only<ReconfigureMig>(fin);
  ASSERT_THAT(rc, SizeIs(1)) << "the MIG request took the GPU that freed";
  EXPECT_EQ(rc[0].device.index.value(), freed);
  for (const auto& s : Only<StartSlice>(fin)) EXPECT_NE(s.job, big_notebook);
  EXPECT_FALSE(Device(h, drained).draining) << "the drain is called off";
  auto done = Only<StartSlice>(h.Feed(ReconfigureDone{0, rc[0].device, true, rc[0].layout, ""}));
  ASSERT_THAT(done, SizeIs(1));
  EXPECT_EQ(done[0].job, inference);
  // The GPU that was draining takes new work again.
  EXPECT_THAT(Only<StartSlice>(h.Submit("interactive gpu=250m")), SizeIs(1));
  EXPECT_EQ(h.violation(), "");
}

// An A100 that gpuslice put in MIG mode for an inference job: once that job is gone and only a
// training job waits, the GPU goes back to whole mode after the hold time, not before, and the
// training job meanwhile is "waiting", never "could never fit".
TEST(MigPlanner, AGpuLeavesMigModeWhenOnlyOtherWorkWaitsAfterTheHoldTime) {
  SchedHarness h;
  h.AddHost("1xA100-40GB");
  auto rc = Only<ReconfigureMig>(h.Submit("inference mem=4GiB"));
  ASSERT_THAT(rc, SizeIs(1));
  ASSERT_THAT(Only<StartSlice>(h.Feed(ReconfigureDone{0, rc[0].device, true, rc[0].layout, ""})), SizeIs(1));
  EXPECT_EQ(Device(h, 0).mode, DeviceMode::kMig);
  // The training job waits while the GPU holds the inference instance.
  EXPECT_THAT(Only<StartSlice>(h.Submit("training gpus=1")), SizeIs(0));
  const JobId train = h.last_job();
  auto why = h.scheduler().PendingReason(train);
  ASSERT_TRUE(why.has_value());
  EXPECT_FALSE(std::holds_alternative<NeverFits>(*why)) << FormatWaitReason(*why);
  h.Finish(JobId(1));
  EXPECT_EQ(Device(h, 0).mode, DeviceMode::kMig);
  // Within the hold time: the layout stays (MIG demand that comes back finds it).
  EXPECT_THAT(Only<ReconfigureMig>(h.Advance(5 * kMinute)), SizeIs(0));
  why = h.scheduler().PendingReason(train);
  ASSERT_TRUE(why.has_value());
  EXPECT_FALSE(std::holds_alternative<NeverFits>(*why)) << FormatWaitReason(*why);
  // Past it: MIG mode off (an empty layout), then the training job runs on the whole GPU.
  auto off = Only<ReconfigureMig>(h.Advance(6 * kMinute));
  ASSERT_THAT(off, SizeIs(1));
  EXPECT_TRUE(off[0].layout.empty());
  EXPECT_FALSE(off[0].mig_mode);
  auto started = Only<StartSlice>(h.Feed(ReconfigureDone{0, off[0].device, true, {}, ""}));
  ASSERT_THAT(started, SizeIs(1));
  EXPECT_EQ(started[0].job, train);
  EXPECT_EQ(started[0].kind, SliceKind::kWhole);
  EXPECT_EQ(Device(h, 0).mode, DeviceMode::kWhole);
  EXPECT_EQ(h.violation(), "");
}

// Two GPUs past the hold time at once: the lower device leaves MIG mode first, also when the
// other one has been empty longer (the order does not depend on how long each waited).
TEST(MigPlanner, OfTwoGpusPastTheHoldTimeTheLowerDeviceLeavesMigModeFirst) {
  SchedHarness h;
  h.AddHost("2xA100-40GB mig");
  ASSERT_EQ(Device(h, 0).mode, DeviceMode::kMig);
  ASSERT_EQ(Device(h, 1).mode, DeviceMode::kMig);
  // Device 0 holds an inference job for a while; device 1 stays empty from the start.
  auto ds = h.Submit("inference mem=4GiB");
  if (auto rc = Only<ReconfigureMig>(ds); !rc.empty()) {
    ASSERT_EQ(rc[0].device.index.value(), 0u);
    ds = h.Feed(ReconfigureDone{0, rc[0].device, true, rc[0].layout, ""});
  }
  std::uint32_t dev = 99;
  ASSERT_TRUE(StartedOn(ds, &dev).valid());
  ASSERT_EQ(dev, 0u);
  EXPECT_THAT(Only<ReconfigureMig>(h.Advance(5 * kMinute)), SizeIs(0));
  h.Finish(JobId(1));
  EXPECT_THAT(Only<StartSlice>(h.Submit("training gpus=1")), SizeIs(0));
  // One tick past both hold times: device 1 has been empty 20 minutes, device 0 only 15.
  auto off = Only<ReconfigureMig>(h.Advance(15 * kMinute));
  ASSERT_THAT(off, SizeIs(1));
  EXPECT_EQ(off[0].device.index.value(), 0u);
  EXPECT_FALSE(off[0].mig_mode);
  EXPECT_EQ(h.violation(), "");
}

TEST(MigPlanner, MigDemandWithinTheHoldTimeKeepsTheLayout) {
  SchedHarness h;
  h.AddHost("1xA100-40GB");
  auto rc = Only<ReconfigureMig>(h.Submit("inference mem=4GiB"));
  ASSERT_THAT(rc, SizeIs(1));
  h.Feed(ReconfigureDone{0, rc[0].device, true, rc[0].layout, ""});
  h.Submit("training gpus=1");
  h.Finish(JobId(1));
  h.Advance(8 * kMinute);
  // Back within the hold: the instance is reused, no layout change; and while a MIG job holds
  // the GPU it never leaves MIG mode, however long the training job waits.
  auto again = h.Submit("inference mem=4GiB");
  EXPECT_THAT(Only<ReconfigureMig>(again), SizeIs(0));
  EXPECT_THAT(Only<StartSlice>(again), SizeIs(1));
  for (int i = 0; i < 6; ++i) EXPECT_THAT(Only<ReconfigureMig>(h.Advance(10 * kMinute)), SizeIs(0));
  EXPECT_EQ(Device(h, 0).mode, DeviceMode::kMig);
  EXPECT_EQ(h.violation(), "");
}

// Only MIG mode gpuslice cannot undo counts against a request: with mig.enabled = false a GPU
// found in MIG mode stays so, and a whole-GPU job that needs it could never fit.
TEST(MigPlanner, CouldNeverFitOnlyWhereMigModeCannotBeUndone) {
  Config c = DefaultConfig();
  c.mig.enabled = false;
  SchedHarness stuck(c);
  stuck.AddHost("1xA100-40GB mig");
  // It could never fit: refused at submit with the reason, instead of waiting forever.
  auto rejected = Only<Reject>(stuck.Submit("training gpus=1"));
  ASSERT_THAT(rejected, SizeIs(1));
  EXPECT_THAT(rejected[0].status.message(), HasSubstr("MIG"));
  EXPECT_FALSE(stuck.scheduler().PendingReason(stuck.last_job()).has_value());
  SchedHarness free_to_change;
  free_to_change.AddHost("1xA100-40GB mig");
  EXPECT_THAT(Only<Reject>(free_to_change.Submit("training gpus=1")), SizeIs(0));
  auto why = free_to_change.scheduler().PendingReason(free_to_change.last_job());
  ASSERT_TRUE(why.has_value());
  EXPECT_FALSE(std::holds_alternative<NeverFits>(*why)) << FormatWaitReason(*why);
}

// The README's MIG example asks what the smallest profile holds (on an H100-80GB a 1g.10gb
// holds 9.75GiB: --mem 10GiB would take a 1g.20gb).
TEST(MigPlanner, TheReadmeExampleFitsTheSmallestProfile) {
  const DeviceModel& m = Model("H100-80GB");
  std::ifstream in(GPUSLICE_SOURCE_DIR "/README.md");
  std::stringstream text;
  text << in.rdbuf();
  std::smatch match;
  const std::string readme = text.str();
  ASSERT_TRUE(std::regex_search(readme, match, std::regex(R"(--queue inference --mem (\S+))")));
  auto need = ParseBytes(match[1].str());
  ASSERT_TRUE(need.ok());
  const MigProfile* p = m.SmallestProfileFor(*need);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->memory_slices, 1) << match[1] << " takes " << p->name;
  EXPECT_EQ(m.SmallestProfileFor(10 * kGiB)->name, "1g.20gb");
}

// The time-limit warning: warn_before ahead, never in the first three quarters of the limit.
TEST(TimeLimitWarning, ComesInTheLastQuarterOfAShortLimit) {
  SchedHarness h;  // interactive: warn_before 15m
  h.AddHost("1xH100-80GB");
  auto first = h.Submit("interactive gpu=250m limit=20m");
  EXPECT_THAT(Only<Warn>(first), SizeIs(0)) << "not at the start";
  EXPECT_THAT(Only<Warn>(h.Advance(14 * kMinute)), SizeIs(0));
  auto w = Only<Warn>(h.Advance(kMinute + kSecond));
  ASSERT_THAT(w, SizeIs(1));
  EXPECT_EQ(w[0].reason, WarnReason::kTimeLimit);  // 5 minutes before the end
  // A long limit: warn_before itself (idle warnings aside: nothing runs in these slices).
  auto limit_warnings = [](const std::vector<Decision>& ds) {
    std::vector<Warn> out;
    for (const Warn& w : Only<Warn>(ds))
      if (w.reason == WarnReason::kTimeLimit) out.push_back(w);
    return out;
  };
  h.Submit("interactive gpu=250m limit=2h");
  const Micros start = h.now();
  EXPECT_THAT(limit_warnings(h.Advance(104 * kMinute)), SizeIs(0));
  auto late = limit_warnings(h.Advance(2 * kMinute));
  ASSERT_THAT(late, SizeIs(1));
  EXPECT_EQ(late[0].deadline, start + 2 * kHour);
  EXPECT_EQ(h.violation(), "");
}

}  // namespace
}  // namespace gpuslice::sched
