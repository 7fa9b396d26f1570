// An admin's orders (events.h: AdminDrain, AdminMigMode, AdminHold, AdminRequeue) and the
// refusal at submit of a job the host as configured can never run. SchedHarness checks the
// invariants after every event (held jobs out of the pending books, the drained device out of
// the indexes).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "testing/builders.h"
#include "testing/sched_harness.h"

namespace gpuslice::sched {
namespace {

using ::gpuslice::testing::Only;
using ::gpuslice::testing::SchedHarness;
using ::testing::HasSubstr;
using ::testing::SizeIs;

const DeviceRef kGpu0{NodeId(1), DeviceIndex(0)};
const DeviceRef kGpu1{NodeId(1), DeviceIndex(1)};

class AdminTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_EQ(h_.violation(), ""); }
  const DeviceView& Device(const DeviceRef& ref) { return h_.scheduler().devices().at(ref); }
  JobState StateOf(JobId id) { return h_.scheduler().jobs().at(id).state; }
  SchedHarness h_;
};

// A drained GPU takes no new slice; the one running there runs on; undrained, it takes them.
TEST_F(AdminTest, ADrainedGpuTakesNoNewSliceUntilUndrained) {
  h_.AddHost("1xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h_.Submit("interactive gpu=250m")), SizeIs(1));
  auto d = h_.Feed(AdminDrain{0, kGpu0, true, "bad fan"});
  ASSERT_THAT(Only<Drain>(d), SizeIs(1));
  EXPECT_EQ(Only<Drain>(d)[0].reason, "bad fan");
  EXPECT_THAT(Only<Stop>(d), SizeIs(0));
  EXPECT_TRUE(Device(kGpu0).admin_drained);
  EXPECT_THAT(Only<StartSlice>(h_.Submit("interactive gpu=250m")), SizeIs(0));
  EXPECT_EQ(StateOf(JobId(1)), JobState::kRunning);
  auto started = Only<StartSlice>(h_.Feed(AdminDrain{0, kGpu0, false, ""}));
  ASSERT_THAT(started, SizeIs(1));
  EXPECT_EQ(started[0].job, JobId(2));
}

// Whole-GPU jobs go to the other GPU; the reservation for a waiting job avoids the drained one.
TEST_F(AdminTest, WholeJobsAvoidADrainedGpu) {
  h_.AddHost("2xH100-80GB");
  h_.Feed(AdminDrain{0, kGpu0, true, ""});
  auto a = Only<StartSlice>(h_.Submit("training gpus=1"));
  ASSERT_THAT(a, SizeIs(1));
  EXPECT_EQ(a[0].devices, std::vector<DeviceIndex>{DeviceIndex(1)});
  EXPECT_THAT(Only<StartSlice>(h_.Submit("training gpus=2")), SizeIs(0));
  EXPECT_THAT(Only<Reserve>(h_.Advance(31 * kMinute)), SizeIs(0));  // one GPU left: nothing to keep
}

// Out of MIG mode through a drain: MIG slices finish, then one ReconfigureMig leaving MIG mode;
// once done the GPU takes shared slices, and the planner does not put it back into MIG mode.
TEST_F(AdminTest, AGpuLeavesMigModeThroughADrainAndStaysOut) {
  h_.AddHost("1xA100-40GB mig");
  // The planner lays an instance out, then the job starts on it.
  auto layout = Only<ReconfigureMig>(h_.Submit("inference mem=10GiB"));
  ASSERT_THAT(layout, SizeIs(1));
  auto mig = Only<StartSlice>(h_.Feed(ReconfigureDone{0, kGpu0, true, layout[0].layout, ""}));
  ASSERT_THAT(mig, SizeIs(1));
  ASSERT_EQ(Device(kGpu0).mode, DeviceMode::kMig);
  auto d = h_.Feed(AdminMigMode{0, kGpu0, false});
  EXPECT_THAT(Only<Drain>(d), SizeIs(1));
  EXPECT_THAT(Only<ReconfigureMig>(d), SizeIs(0));  // its MIG slice still runs
  EXPECT_EQ(Device(kGpu0).mig_admin, MigAdmin::kOff);
  auto done = h_.Finish(JobId(1));
  auto r = Only<ReconfigureMig>(done);
  ASSERT_THAT(r, SizeIs(1));
  EXPECT_FALSE(r[0].mig_mode);
  EXPECT_TRUE(r[0].layout.empty());
  h_.Feed(ReconfigureDone{0, kGpu0, true, {}, ""});
  EXPECT_EQ(Device(kGpu0).mode, DeviceMode::kFree);
  EXPECT_THAT(Only<StartSlice>(h_.Submit("interactive gpu=250m")), SizeIs(1));
  // A MIG job now: the planner may not take the GPU back; the host as configured can never
  // run it, so it is refused at submit.
  auto rejected = Only<Reject>(h_.Submit("inference mem=10GiB"));
  ASSERT_THAT(rejected, SizeIs(1));
  EXPECT_THAT(rejected[0].status.message(), HasSubstr("MIG"));
  // Given back to the planner: a MIG job is accepted, and waits for the shared slice to end.
  h_.Feed(AdminMigMode{0, kGpu0, std::nullopt});
  EXPECT_THAT(Only<Reject>(h_.Submit("inference mem=10GiB")), SizeIs(0));
}

// Into MIG mode through a drain: the shared slice finishes, then a ReconfigureMig into MIG mode.
TEST_F(AdminTest, AGpuEntersMigModeThroughADrain) {
  Config c = DefaultConfig();
  c.mig.enabled = false;  // only the admin changes modes here
  SchedHarness h(c);
  h.AddHost("1xA100-40GB");
  ASSERT_THAT(Only<StartSlice>(h.Submit("interactive gpu=250m")), SizeIs(1));
  auto d = h.Feed(AdminMigMode{0, kGpu0, true});
  EXPECT_THAT(Only<Drain>(d), SizeIs(1));
  EXPECT_THAT(Only<StartSlice>(h.Submit("interactive gpu=250m")), SizeIs(0));  // draining
  auto r = Only<ReconfigureMig>(h.Finish(JobId(1)));
  ASSERT_THAT(r, SizeIs(1));
  EXPECT_TRUE(r[0].mig_mode);
  h.Feed(ReconfigureDone{0, kGpu0, true, {}, ""});
  EXPECT_EQ(h.scheduler().devices().at(kGpu0).mode, DeviceMode::kMig);
  EXPECT_EQ(h.violation(), "");
}

// An admin's MIG mode beats the planner: a GPU put in MIG mode with no instance is not given
// back when MIG work is absent and other work waits (the planner would, after its hold time).
TEST_F(AdminTest, AnAdminsMigModeIsNotUndoneByThePlanner) {
  h_.AddHost("2xA100-40GB");
  ASSERT_THAT(Only<StartSlice>(h_.Submit("training gpus=1")), SizeIs(1));  // job 1
  auto gpu = [&](JobId j) { return h_.scheduler().slices().at(h_.scheduler().jobs().at(j).slice).devices[0]; };
  const DeviceRef busy{NodeId(1), gpu(JobId(1))};
  const DeviceRef other{NodeId(1), DeviceIndex(1 - busy.index.value())};
  // The free GPU into MIG mode: empty, so at once, with no instance.
  auto on = Only<ReconfigureMig>(h_.Feed(AdminMigMode{0, other, true}));
  ASSERT_THAT(on, SizeIs(1));
  EXPECT_TRUE(on[0].mig_mode);
  EXPECT_TRUE(on[0].layout.empty());
  h_.Feed(ReconfigureDone{0, other, true, {}, ""});
  EXPECT_EQ(Device(other).mode, DeviceMode::kMig);
  // Whole-GPU work waits; an hour on, the admin's GPU is still in MIG mode.
  h_.Submit("training gpus=1");  // job 2
  for (int i = 0; i < 6; ++i) EXPECT_THAT(Only<ReconfigureMig>(h_.Advance(10 * kMinute)), SizeIs(0));
  EXPECT_EQ(Device(other).mode, DeviceMode::kMig);
  // Given back to the planner: its hold time has passed, so it leaves MIG mode for job 2.
  auto off = Only<ReconfigureMig>(h_.Feed(AdminMigMode{h_.now(), other, std::nullopt}));
  ASSERT_THAT(off, SizeIs(1));
  EXPECT_FALSE(off[0].mig_mode);
}

// A drain an admin ordered is not called off by the planner when another GPU frees for the
// MIG work that waits (it calls off its own drains then).
TEST_F(AdminTest, AnAdminsDrainIsNotCalledOff) {
  h_.AddHost("2xA100-40GB");
  ASSERT_THAT(Only<StartSlice>(h_.Submit("interactive gpu=250m")), SizeIs(1));  // job 1
  ASSERT_THAT(Only<StartSlice>(h_.Submit("training gpus=1")), SizeIs(1));       // job 2
  auto gpu = [&](JobId j) { return h_.scheduler().slices().at(h_.scheduler().jobs().at(j).slice).devices[0]; };
  const DeviceRef shared{NodeId(1), gpu(JobId(1))};
  const DeviceRef whole{NodeId(1), gpu(JobId(2))};
  ASSERT_THAT(Only<Drain>(h_.Feed(AdminMigMode{0, shared, true})), SizeIs(1));
  EXPECT_TRUE(Device(shared).draining);
  h_.Submit("inference mem=10GiB");  // job 3: waits, no GPU to lay out without a drain
  auto relayout = Only<ReconfigureMig>(h_.Finish(JobId(2)));
  ASSERT_THAT(relayout, SizeIs(1));
  EXPECT_EQ(relayout[0].device, whole);  // the freed GPU
  EXPECT_TRUE(Device(shared).draining) << "the admin's drain goes on";
  EXPECT_EQ(Device(shared).mig_admin, MigAdmin::kOn);
}

// Given back to the planner mid-drain: the admin's drain is called off, the GPU takes new
// slices again and stays in its mode.
TEST_F(AdminTest, GivenBackMidDrainTheDrainIsCalledOff) {
  Config c = DefaultConfig();
  c.mig.enabled = false;  // only the admin changes modes here
  SchedHarness h(c);
  h.AddHost("1xA100-40GB");
  ASSERT_THAT(Only<StartSlice>(h.Submit("interactive gpu=250m")), SizeIs(1));
  ASSERT_THAT(Only<Drain>(h.Feed(AdminMigMode{0, kGpu0, true})), SizeIs(1));
  EXPECT_TRUE(h.scheduler().devices().at(kGpu0).draining);
  h.Feed(AdminMigMode{0, kGpu0, std::nullopt});
  EXPECT_FALSE(h.scheduler().devices().at(kGpu0).draining);
  EXPECT_THAT(Only<StartSlice>(h.Submit("interactive gpu=250m")), SizeIs(1));
  EXPECT_THAT(Only<ReconfigureMig>(h.Finish(JobId(1))), SizeIs(0)) << "no MIG change once given back";
  EXPECT_EQ(h.violation(), "");
}

// Out of MIG mode, ordered while the planner's layout change is being applied: once it is
// done, the admin's drain starts and takes the GPU out.
TEST_F(AdminTest, AnOrderDuringALayoutChangeIsCarriedOutAfterIt) {
  h_.AddHost("1xA100-40GB");
  auto layout = Only<ReconfigureMig>(h_.Submit("inference mem=10GiB"));
  ASSERT_THAT(layout, SizeIs(1));
  EXPECT_THAT(Only<Drain>(h_.Feed(AdminMigMode{0, kGpu0, false})), SizeIs(0));  // in flight
  auto done = h_.Feed(ReconfigureDone{0, kGpu0, true, layout[0].layout, ""});
  EXPECT_THAT(Only<StartSlice>(done), SizeIs(0)) << "the GPU is draining for the admin";
  EXPECT_THAT(Only<Drain>(done), SizeIs(1));
  auto off = Only<ReconfigureMig>(done);
  ASSERT_THAT(off, SizeIs(1));  // nothing runs there: out at once
  EXPECT_FALSE(off[0].mig_mode);
  h_.Feed(ReconfigureDone{0, kGpu0, true, {}, ""});
  EXPECT_EQ(Device(kGpu0).mode, DeviceMode::kFree);
}

// A held job keeps its place: released, it runs before jobs submitted after it.
TEST_F(AdminTest, AHeldJobWaitsAndKeepsItsPlace) {
  h_.AddHost("1xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h_.Submit("training gpus=1")), SizeIs(1));
  h_.Submit("training gpus=1");  // 2
  h_.Submit("training gpus=1");  // 3
  h_.Feed(AdminHold{0, JobId(2), true});
  EXPECT_TRUE(h_.scheduler().jobs().at(JobId(2)).held);
  ASSERT_TRUE(h_.scheduler().PendingReason(JobId(2)).has_value());
  EXPECT_EQ(WaitReasonKind(*h_.scheduler().PendingReason(JobId(2))), "held");
  EXPECT_EQ(h_.scheduler().PendingReasonCounts()[WaitReason(Held{}).index()], 1);
  auto next = Only<StartSlice>(h_.Finish(JobId(1)));
  ASSERT_THAT(next, SizeIs(1));
  EXPECT_EQ(next[0].job, JobId(3));  // 2 is held
  h_.Feed(AdminHold{0, JobId(2), false});
  h_.Submit("training gpus=1");  // 4
  auto after = Only<StartSlice>(h_.Finish(JobId(3)));
  ASSERT_THAT(after, SizeIs(1));
  EXPECT_EQ(after[0].job, JobId(2));  // its old place, ahead of 4
}

TEST_F(AdminTest, AHeldJobCanBeCancelled) {
  h_.AddHost("1xH100-80GB");
  h_.Submit("training gpus=1");
  h_.Submit("training gpus=1");
  h_.Feed(AdminHold{0, JobId(2), true});
  h_.Feed(Cancel{0, JobId(2)});
  EXPECT_EQ(StateOf(JobId(2)), JobState::kEnded);
  EXPECT_EQ(h_.scheduler().PendingReasonCounts()[WaitReason(Held{}).index()], 0);
}

// A requeued job is stopped (a Preempt that requeues), pending again in its old place, and
// starts again as soon as it fits.
TEST_F(AdminTest, ARequeuedJobIsStoppedAndRunsAgain) {
  h_.AddHost("1xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h_.Submit("training gpus=1")), SizeIs(1));
  h_.Submit("training gpus=1");  // waits behind it
  auto d = h_.Feed(AdminRequeue{0, JobId(1), "requeued by an admin"});
  auto p = Only<Preempt>(d);
  ASSERT_THAT(p, SizeIs(1));
  EXPECT_TRUE(p[0].requeue);
  EXPECT_EQ(p[0].reason, "requeued by an admin");
  // Its old place is ahead of job 2: it starts again at once on the freed GPU.
  auto again = Only<StartSlice>(d);
  ASSERT_THAT(again, SizeIs(1));
  EXPECT_EQ(again[0].job, JobId(1));
  EXPECT_EQ(StateOf(JobId(2)), JobState::kPending);
}

// Refused at submit with the reason, rather than waiting forever: a whole job larger than any
// host, and a MIG job where MIG layouts are never changed and no instance fits.
TEST_F(AdminTest, AJobThatCanNeverFitIsRefusedAtSubmit) {
  Config c = DefaultConfig();
  c.mig.enabled = false;
  SchedHarness h(c);
  h.AddHost("2xA100-40GB");
  auto big = Only<Reject>(h.Submit("training gpus=3"));
  ASSERT_THAT(big, SizeIs(1));
  EXPECT_THAT(big[0].status.message(), HasSubstr("no host has 3 devices"));
  auto mig = Only<Reject>(h.Submit("inference mem=10GiB"));
  ASSERT_THAT(mig, SizeIs(1));
  EXPECT_THAT(mig[0].status.message(), HasSubstr("MIG layouts are not changed (mig.enabled = false)"));
  EXPECT_EQ(h.violation(), "");
}

// The device that took the last MIG job is asked first about the next one; once it cannot
// take it (it refused the layout change) or is gone, a MIG job that no device left could take
// is refused as before.
TEST_F(AdminTest, AMigJobIsRefusedOnceTheDeviceThatTookTheLastOneCannot) {
  h_.AddHost("1xA100-40GB");
  const NodeId other = h_.AddHost("1xA100-40GB");
  h_.Feed(AdminMigMode{0, {other, DeviceIndex(0)}, false});  // never in MIG mode
  auto first = h_.Submit("inference mem=10GiB");
  EXPECT_THAT(Only<Reject>(first), SizeIs(0));
  auto change = Only<ReconfigureMig>(first);
  ASSERT_THAT(change, SizeIs(1));
  ASSERT_EQ(change[0].device, kGpu0);
  h_.Feed(ReconfigureDone{0, kGpu0, false, change[0].layout, "refused"});
  auto refused = Only<Reject>(h_.Submit("inference mem=10GiB"));
  ASSERT_THAT(refused, SizeIs(1));
  EXPECT_THAT(refused[0].status.message(), HasSubstr("refused a MIG reconfiguration or lacks that instance"));
  h_.Feed(DeviceRemoved{0, kGpu0, {}});
  EXPECT_THAT(Only<Reject>(h_.Submit("inference mem=10GiB")), SizeIs(1));
}

}  // namespace
}  // namespace gpuslice::sched
