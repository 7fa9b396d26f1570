// The scheduler's rules, one test (or table) per rule. Every test runs through SchedHarness,
// which checks the invariants after every event; TearDown asserts none was violated.
#include <deque>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/catalogue.h"
#include "sched/scheduler.h"
#include "testing/builders.h"
#include "testing/sched_harness.h"

namespace gpuslice::sched {
namespace {

using ::gpuslice::testing::Only;
using ::gpuslice::testing::SchedHarness;
using ::testing::HasSubstr;
using ::testing::SizeIs;

const DeviceModel& Model(std::string_view name) { return **FindModel(name); }

class SchedTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_EQ(h_->violation(), ""); }
  void Use(Config c) { h_ = std::make_unique<SchedHarness>(std::move(c)); }
  SchedHarness& h() { return *h_; }
  std::unique_ptr<SchedHarness> h_ = std::make_unique<SchedHarness>();
};

// ---------------------------------------------------------------- shared

TEST_F(SchedTest, SharedSlicesPackOntoOneDeviceWithProportionalMemory) {
  h().AddHost("2xH100-80GB");
  auto a = Only<StartSlice>(h().Submit("interactive gpu=250m"));
  auto b = Only<StartSlice>(h().Submit("interactive gpu=250m"));
  ASSERT_THAT(a, SizeIs(1));
  ASSERT_THAT(b, SizeIs(1));
  EXPECT_EQ(a[0].kind, SliceKind::kShared);
  EXPECT_EQ(a[0].devices, b[0].devices);  // the tightest device among equal scores
  EXPECT_EQ(a[0].milli, 250);
  EXPECT_EQ(a[0].memory_cap, Model("H100-80GB").memory / 4);
  EXPECT_EQ(a[0].uuids, std::vector<std::string>{"GPU-1-0"});
  EXPECT_EQ(h().scheduler().devices().at({NodeId(1), DeviceIndex(0)}).mode, DeviceMode::kShared);
}

// The built-in interactive queue places by gpuslice's fragmentation measure, not by best fit:
// after a 250m slice and with 250m and 500m requests expected, a 500m slice goes on the free
// device (leaving 750m and 500m, where either request still fits) rather than beside the 250m
// one (leaving 250m, which no 500m request can use); best-fit takes the tightest device.
TEST_F(SchedTest, InteractiveSharesAvoidLeavingShareHolesTheExpectedRequestsCannotUse) {
  // Whether a 500m slice lands on the device of an earlier 250m one, under config `c`.
  auto beside_the_first = [&](Config c) {
    Use(std::move(c));
    h().AddHost("2xH100-80GB");
    const auto first = Only<StartSlice>(h().Submit("interactive gpu=250m"));
    const auto second = Only<StartSlice>(h().Submit("interactive gpu=500m"));
    EXPECT_EQ(h().violation(), "");
    EXPECT_EQ(first.size() + second.size(), 2u);  // both start at once
    return first.size() == 1 && second.size() == 1 && first[0].devices == second[0].devices;
  };
  EXPECT_FALSE(beside_the_first(DefaultConfig()));
  Config best_fit = DefaultConfig();
  for (QueueConfig& q : best_fit.queues) q.placement = "best-fit";
  EXPECT_TRUE(beside_the_first(best_fit));
}

TEST_F(SchedTest, SharedMemoryCapIsEnforced) {
  h().AddHost("1xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h().Submit("interactive gpu=100m mem=60GiB")), SizeIs(1));
  // Compute would fit, memory would not: it waits.
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive gpu=100m mem=30GiB")), SizeIs(0));
  EXPECT_THAT(h().scheduler().Pending("interactive"), SizeIs(1));
  auto s = Only<StartSlice>(h().Finish(JobId(1)));
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].job, JobId(2));
  EXPECT_EQ(s[0].memory_cap, 30 * kGiB);
}

TEST_F(SchedTest, FullDeviceMakesLaterJobsWaitThenRunInOrder) {
  h().AddHost("1xH100-80GB");
  for (int i = 0; i < 4; ++i) ASSERT_THAT(Only<StartSlice>(h().Submit("interactive gpu=250m")), SizeIs(1));
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive gpu=250m")), SizeIs(0));
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive gpu=250m")), SizeIs(0));
  auto s = Only<StartSlice>(h().Finish(JobId(2)));
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].job, JobId(5));  // submit order within one priority
}

// ---------------------------------------------------------------- reservations

// A 4-GPU training job behind a stream of 1-GPU jobs on a 4-GPU host: each GPU that frees up is
// taken by the next small job, so without a reservation the large job never runs. Returns when
// it started (0: never) and checks that nothing else started on the host meanwhile.
Micros RunStarvationScenario(SchedHarness& h, Micros reserve_after) {
  h.AddHost("4xH100-80GB");
  for (int i = 0; i < 4; ++i) EXPECT_THAT(Only<StartSlice>(h.Submit("training gpus=1")), SizeIs(1));
  h.Submit("training gpus=4");
  const JobId big = h.last_job();
  std::deque<JobId> running{JobId(1), JobId(2), JobId(3), JobId(4)};
  Micros started = 0;
  bool reserved_seen = false;
  for (int step = 0; step < 24 && started == 0; ++step) {  // 2 h in 5-minute steps
    std::vector<Decision> ds = h.Advance(5 * kMinute);
    const auto& d0 = h.scheduler().devices().at({NodeId(1), DeviceIndex(0)});
    if (d0.reserved_for.valid()) {
      EXPECT_EQ(d0.reserved_for, big);
      EXPECT_GE(h.now(), reserve_after) << "reserved only after the job waited reserve_after";
      reserved_seen = true;
    }
    if (!running.empty()) {
      auto more = h.Finish(running.front());
      running.pop_front();
      ds.insert(ds.end(), more.begin(), more.end());
    }
    auto more = h.Submit("training gpus=1");
    ds.insert(ds.end(), more.begin(), more.end());
    for (const StartSlice& s : Only<StartSlice>(ds)) {
      if (s.job == big) {
        started = h.now();
      } else {
        EXPECT_FALSE(reserved_seen) << "job " << s.job.value() << " started on reserved devices";
        running.push_back(s.job);
      }
    }
  }
  return started;
}

TEST_F(SchedTest, WaitingWholeJobGetsItsDevicesReservedAndStarts) {
  Config c = DefaultConfig();
  const Micros after = c.FindQueue("training")->reserve_after;
  ASSERT_EQ(after, 30 * kMinute) << "the built-in training queue reserves after 30 min";
  Use(c);
  const Micros started = RunStarvationScenario(h(), after);
  ASSERT_GT(started, 0) << "the 4-GPU job must not starve";
  // Reserved at 30 min with 4 small jobs running; each ends 5 minutes apart.
  EXPECT_LE(started, after + 25 * kMinute);
  const auto& d0 = h().scheduler().devices().at({NodeId(1), DeviceIndex(0)});
  EXPECT_FALSE(d0.reserved_for.valid()) << "released once the job started";
}

TEST_F(SchedTest, WithoutReserveAfterTheLargeJobStarves) {
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) q.reserve_after = 0;
  Use(c);
  EXPECT_EQ(RunStarvationScenario(h(), 0), 0) << "no reservation: every freed GPU goes to a small job";
}

TEST_F(SchedTest, CancellingTheReservedJobFreesItsDevicesAtOnce) {
  h().AddHost("2xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h().Submit("training gpus=1")), SizeIs(1));  // job 1
  h().Submit("training gpus=2");                                            // job 2 waits
  // Made on a tick, it is a decision (so the daemon journals that tick and a restart replays it).
  auto reserve = Only<Reserve>(h().Advance(31 * kMinute));
  ASSERT_THAT(reserve, SizeIs(1));
  EXPECT_EQ(reserve[0].job, JobId(2));
  EXPECT_EQ(reserve[0].devices, (std::vector<DeviceIndex>{DeviceIndex(0), DeviceIndex(1)}));
  EXPECT_EQ(h().scheduler().devices().at({NodeId(1), DeviceIndex(1)}).reserved_for, JobId(2));
  EXPECT_THAT(Only<StartSlice>(h().Submit("training gpus=1")), SizeIs(0)) << "the free GPU is kept";
  auto ds = h().Feed(Cancel{0, JobId(2)});
  auto s = Only<StartSlice>(ds);
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].job, JobId(3));
  EXPECT_FALSE(h().scheduler().devices().at({NodeId(1), DeviceIndex(0)}).reserved_for.valid());
}

// ---------------------------------------------------------------- whole

TEST_F(SchedTest, WholeIsAllOrNothingOnOneHost) {
  h().AddHost("4xH100-80GB");
  h().AddHost("8xH100-80GB");
  auto s = Only<StartSlice>(h().Submit("training gpus=4"));
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].node, NodeId(1));  // best-fit: the host left with the fewest free devices
  EXPECT_THAT(s[0].devices, SizeIs(4));
  EXPECT_EQ(s[0].milli, kOneGpu);
  EXPECT_EQ(s[0].memory_cap, 0);
  // 6 devices: only host 2 has that many; 8 of them are free there.
  auto t = Only<StartSlice>(h().Submit("training gpus=6"));
  ASSERT_THAT(t, SizeIs(1));
  EXPECT_EQ(t[0].node, NodeId(2));
  // 4 more: 2 free on host 2, 0 on host 1 -> pending, not split across hosts.
  EXPECT_THAT(Only<StartSlice>(h().Submit("training gpus=4")), SizeIs(0));
  EXPECT_THAT(h().scheduler().Pending(), SizeIs(1));
}

TEST_F(SchedTest, WholeLargerThanAnyHostIsRejectedNotQueued) {
  h().AddHost("4xH100-80GB");
  h().AddHost("4xH100-80GB");
  auto r = Only<Reject>(h().Submit("training gpus=8"));
  ASSERT_THAT(r, SizeIs(1));
  EXPECT_EQ(r[0].status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(r[0].status.message(), HasSubstr("no host has 8"));
  EXPECT_THAT(h().scheduler().Pending(), SizeIs(0));
}

TEST_F(SchedTest, SpreadPolicyPrefersTheEmptiestHost) {
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) q.placement = "spread";
  Use(c);
  h().AddHost("4xH100-80GB");
  h().AddHost("8xH100-80GB");
  auto s = Only<StartSlice>(h().Submit("training gpus=1"));
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].node, NodeId(2));
  auto a = Only<StartSlice>(h().Submit("interactive gpu=100m"));
  auto b = Only<StartSlice>(h().Submit("interactive gpu=100m"));
  ASSERT_THAT(a, SizeIs(1));
  ASSERT_THAT(b, SizeIs(1));
  EXPECT_NE(std::make_pair(a[0].node, a[0].devices), std::make_pair(b[0].node, b[0].devices));
}

// ---------------------------------------------------------------- modes

TEST_F(SchedTest, DeviceChangesModeOnlyWhenEmpty) {
  h().AddHost("1xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h().Submit("interactive gpu=250m")), SizeIs(1));
  // A whole device cannot be taken from a shared one, and mps cannot join a shared device.
  EXPECT_THAT(Only<StartSlice>(h().Submit("training gpus=1")), SizeIs(0));
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive kind=mps gpu=100m")), SizeIs(0));
  auto s = Only<StartSlice>(h().Finish(JobId(1)));
  ASSERT_THAT(s, SizeIs(1));
  // Priority: interactive (10) before training (0).
  EXPECT_EQ(s[0].job, JobId(3));
  EXPECT_EQ(s[0].kind, SliceKind::kMps);
  EXPECT_EQ(h().scheduler().devices().begin()->second.mode, DeviceMode::kMps);
}

// ---------------------------------------------------------------- mps

TEST_F(SchedTest, MpsGetsThreadPercentageAndRespectsTheClientLimit) {
  // One user fills the device's MPS clients: the device's limit is tested, not the per-user cap.
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) q.user_max_jobs = q.user_max_milli = 0;
  Use(c);
  h().AddHost("1xH100-80GB");
  auto s = Only<StartSlice>(h().Submit("interactive kind=mps gpu=500m mem=8GiB"));
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].mps_thread_percent, 50);
  EXPECT_EQ(s[0].memory_cap, 8 * kGiB);
  const int limit = Model("H100-80GB").mps_max_clients;
  ASSERT_GT(limit, 1);
  for (int i = 1; i < limit; ++i)
    ASSERT_THAT(Only<StartSlice>(h().Submit("interactive kind=mps gpu=1m mem=1MiB")), SizeIs(1)) << i;
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive kind=mps gpu=1m mem=1MiB")), SizeIs(0));
  EXPECT_EQ(h().scheduler().devices().begin()->second.clients, limit);
}

// ---------------------------------------------------------------- requests

struct RejectCase {
  const char* job;
  StatusCode code;
  const char* error;
};

class RejectTest : public ::testing::TestWithParam<RejectCase> {};

TEST_P(RejectTest, InfeasibleRequestsAreRejectedAtOnce) {
  SchedHarness h;
  h.AddHost("2xH100-80GB");
  h.AddHost("2xA100-40GB");
  auto r = Only<Reject>(h.Submit(GetParam().job));
  ASSERT_THAT(r, SizeIs(1)) << GetParam().job;
  EXPECT_EQ(r[0].status.code(), GetParam().code) << r[0].status.ToString();
  EXPECT_THAT(r[0].status.message(), HasSubstr(GetParam().error));
  EXPECT_THAT(r[0].status.message(), HasSubstr("job 1"));
  EXPECT_EQ(h.scheduler().jobs().at(JobId(1)).state, JobState::kEnded);
  EXPECT_EQ(h.violation(), "");
}

INSTANTIATE_TEST_SUITE_P(
    Table, RejectTest,
    ::testing::Values(
        RejectCase{"nosuch gpu=250m", StatusCode::kNotFound, "queue 'nosuch' does not exist"},
        RejectCase{"interactive kind=whole", StatusCode::kInvalidArgument, "does not allow slice kind 'whole'"},
        RejectCase{"interactive gpu=250m mem=200GiB", StatusCode::kResourceExhausted, "no device has 200GiB"},
        RejectCase{"interactive gpu=250m mem=50GiB model=A100-40GB", StatusCode::kResourceExhausted, "no A100-40GB device"},
        RejectCase{"interactive gpu=250m model=B300", StatusCode::kNotFound, "B300"},
        RejectCase{"interactive gpu=250m limit=9h", StatusCode::kInvalidArgument, "longer than queue 'interactive' allows"},
        RejectCase{"interactive gpu=250m gpus=2", StatusCode::kInvalidArgument, "on one device"},
        RejectCase{"training gpus=3", StatusCode::kResourceExhausted, "no host has 3"},
        RejectCase{"training gpu=500m", StatusCode::kInvalidArgument, "whole slices take whole devices"},
        RejectCase{"inference mem=100GiB", StatusCode::kResourceExhausted, "no MIG-capable device"}));

TEST_F(SchedTest, DuplicateJobIdIsRejected) {
  h().AddHost("1xH100-80GB");
  h().Submit("interactive gpu=250m");
  auto r = Only<Reject>(h().Feed(Submit{0, JobId(1), "bob", "interactive", {}}));
  ASSERT_THAT(r, SizeIs(1));
  EXPECT_EQ(r[0].status.code(), StatusCode::kAlreadyExists);
}

// ---------------------------------------------------------------- queue order and caps

TEST_F(SchedTest, QueueOrderIsPriorityThenSubmitTimeThenJobId) {
  h().AddHost("1xH100-80GB");
  h().Submit("training gpus=1");                  // 1 runs
  h().Submit("training gpus=1 user=bob");         // 2 waits (priority 0)
  h().Feed(Tick{h().now() + kSecond});
  h().Submit("interactive gpu=1");                // 3 waits (priority 10), later
  h().Feed(Submit{h().now(), JobId(5), "carol", "inference", JobRequest{SliceKind::kWhole, 1, 0, 0, 0, ""}});
  h().Feed(Submit{h().now(), JobId(4), "dave", "inference", JobRequest{SliceKind::kWhole, 1, 0, 0, 0, ""}});
  EXPECT_EQ(h().scheduler().Pending(),
            (std::vector<JobId>{JobId(4), JobId(5), JobId(3), JobId(2)}));
  auto s = Only<StartSlice>(h().Finish(JobId(1)));
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].job, JobId(4));  // inference priority 20, same time as 5, lower id
}

TEST_F(SchedTest, PerUserCapsHoldJobsBackAndRejectTooLargeRequests) {
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) {
    if (q.name == "interactive") {
      q.user_max_jobs = 2;
      q.user_max_milli = 600;
    }
  }
  Use(c);
  h().AddHost("2xH100-80GB");
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive gpu=250m")), SizeIs(1));
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive gpu=250m")), SizeIs(1));
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive gpu=50m")), SizeIs(0));  // 3rd job of alice
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive gpu=250m user=bob")), SizeIs(1));
  auto r = Only<Reject>(h().Submit("interactive gpu=700m user=bob"));
  ASSERT_THAT(r, SizeIs(1));
  EXPECT_THAT(r[0].status.message(), HasSubstr("more than queue 'interactive' allows one user"));
  auto s = Only<StartSlice>(h().Finish(JobId(1)));
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].job, JobId(3));
  // Share cap: alice runs 250m + 50m; 350m more would make 650m > 600m.
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive gpu=350m")), SizeIs(0));
}

// ---------------------------------------------------------------- cancel, devices

TEST_F(SchedTest, CancelPendingAndRunning) {
  h().AddHost("1xH100-80GB");
  h().Submit("training gpus=1");
  h().Submit("training gpus=1");
  EXPECT_THAT(h().Feed(Cancel{0, JobId(2)}), SizeIs(0));
  EXPECT_THAT(h().scheduler().Pending(), SizeIs(0));
  auto ds = h().Feed(Cancel{0, JobId(1)});
  auto stops = Only<Stop>(ds);
  ASSERT_THAT(stops, SizeIs(1));
  EXPECT_EQ(stops[0].reason, StopReason::kCancelled);
  EXPECT_EQ(h().scheduler().jobs().at(JobId(1)).end_reason, "cancelled");
  EXPECT_TRUE(h().scheduler().slices().empty());
  EXPECT_THAT(h().Finish(JobId(1)), SizeIs(0));  // late Finish is ignored
}

// Requeue (a running job whose command never ran: the daemon stopped before the go-ahead) puts
// it back in its old place: before jobs submitted after it, behind higher priorities.
TEST_F(SchedTest, RequeuedJobGoesBackInItsOldPlaceAndStartsAgain) {
  h().AddHost("1xH100-80GB");
  auto a = Only<StartSlice>(h().Submit("training gpus=1"));  // job 1
  ASSERT_THAT(a, SizeIs(1));
  const Micros submitted = h().now();
  h().Advance(kMinute);
  EXPECT_THAT(Only<StartSlice>(h().Submit("training gpus=1")), SizeIs(0));  // job 2 waits
  auto again = Only<StartSlice>(h().Feed(Requeue{0, JobId(1), "never started"}));
  ASSERT_THAT(again, SizeIs(1));
  EXPECT_EQ(again[0].job, JobId(1)) << "ahead of job 2, submitted later";
  EXPECT_NE(again[0].slice, a[0].slice);
  EXPECT_FALSE(h().scheduler().slices().contains(a[0].slice)) << "its first slice is released";
  EXPECT_EQ(h().scheduler().jobs().at(JobId(1)).submit_time, submitted);
  EXPECT_EQ(h().scheduler().Pending(), std::vector<JobId>{JobId(2)});
  // Only a running job is requeued: a pending, an ended or an unknown one is left as it is.
  EXPECT_THAT(h().Feed(Requeue{0, JobId(2), "never started"}), SizeIs(0));
  EXPECT_EQ(h().scheduler().jobs().at(JobId(2)).state, JobState::kPending);
  h().Finish(JobId(1));  // job 2 starts
  EXPECT_THAT(h().Feed(Requeue{0, JobId(1), "never started"}), SizeIs(0));
  EXPECT_EQ(h().scheduler().jobs().at(JobId(1)).state, JobState::kEnded);
  EXPECT_THAT(h().Feed(Requeue{0, JobId(99), "never started"}), SizeIs(0));
}

TEST_F(SchedTest, RequeuedJobWaitsForRoomThenStartsBeforeLaterJobs) {
  h().AddHost("1xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h().Submit("training gpus=1")), SizeIs(1));       // job 1
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive gpu=500m")), SizeIs(0));  // job 2
  auto s = Only<StartSlice>(h().Feed(Requeue{0, JobId(1), "never started"}));
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].job, JobId(2)) << "the higher-priority queue goes first";
  EXPECT_EQ(h().scheduler().jobs().at(JobId(1)).state, JobState::kPending);
  EXPECT_FALSE(h().scheduler().jobs().at(JobId(1)).slice.valid());
  EXPECT_THAT(Only<StartSlice>(h().Submit("training gpus=1")), SizeIs(0));  // job 3
  EXPECT_EQ(h().scheduler().Pending(), (std::vector<JobId>{JobId(1), JobId(3)}));
  auto next = Only<StartSlice>(h().Finish(JobId(2)));
  ASSERT_THAT(next, SizeIs(1));
  EXPECT_EQ(next[0].job, JobId(1));
}

TEST_F(SchedTest, RemovedDeviceStopsItsSlicesAndRejectsWhatCanNoLongerFit) {
  h().AddHost("2xH100-80GB");
  h().Submit("training gpus=2");
  h().Submit("training gpus=2");  // pending
  auto ds = h().Feed(DeviceRemoved{0, {NodeId(1), DeviceIndex(1)}, {}});
  auto stops = Only<Stop>(ds);
  ASSERT_THAT(stops, SizeIs(1));
  EXPECT_EQ(stops[0].reason, StopReason::kDeviceLost);
  auto rejects = Only<Reject>(ds);
  ASSERT_THAT(rejects, SizeIs(1));
  EXPECT_EQ(rejects[0].job, JobId(2));
  EXPECT_THAT(h().scheduler().devices(), SizeIs(1));
}

TEST_F(SchedTest, RemovedDeviceRequeuesTheJobsOfWhichNothingRanInsteadOfStoppingThem) {
  h().AddHost("2xH100-80GB");
  auto first = Only<StartSlice>(h().Submit("training gpus=1"));   // job 1
  auto second = Only<StartSlice>(h().Submit("training gpus=1"));  // job 2, on the other device
  ASSERT_THAT(first, SizeIs(1));
  ASSERT_THAT(second, SizeIs(1));
  // Job 2 is listed too, but its slice is not on the device: it keeps running.
  auto ds = h().Feed(DeviceRemoved{0, {NodeId(1), first[0].devices[0]}, {JobId(1), JobId(2)}});
  EXPECT_THAT(Only<Stop>(ds), SizeIs(0));
  EXPECT_THAT(Only<Reject>(ds), SizeIs(0));
  EXPECT_THAT(Only<StartSlice>(ds), SizeIs(0)) << "the one device left is busy";
  EXPECT_EQ(h().scheduler().jobs().at(JobId(1)).state, JobState::kPending);
  EXPECT_FALSE(h().scheduler().jobs().at(JobId(1)).slice.valid());
  EXPECT_EQ(h().scheduler().jobs().at(JobId(2)).state, JobState::kRunning);
  EXPECT_EQ(h().scheduler().Pending(), (std::vector<JobId>{JobId(1)}));
  auto next = Only<StartSlice>(h().Finish(JobId(2)));
  ASSERT_THAT(next, SizeIs(1));
  EXPECT_EQ(next[0].job, JobId(1));
  EXPECT_EQ(next[0].devices, second[0].devices);
  EXPECT_TRUE(h().scheduler().CheckInvariants().ok()) << h().scheduler().CheckInvariants().ToString();
}

TEST_F(SchedTest, EndedJobsAreForgottenAfterABoundedHistory) {
  h().AddHost("1xH100-80GB");
  for (int i = 0; i < 10050; ++i) h().Submit("interactive gpu=250m mem=1TiB");  // all rejected
  EXPECT_EQ(h().scheduler().jobs().size(), 10000u);
  EXPECT_FALSE(h().scheduler().jobs().contains(JobId(1)));
  EXPECT_TRUE(h().scheduler().jobs().contains(JobId(10050)));
}

// ---------------------------------------------------------------- time limits

TEST_F(SchedTest, TimeLimitWarnsThenStops) {
  h().AddHost("1xH100-80GB");
  auto s = Only<StartSlice>(h().Submit("interactive gpu=250m limit=1h"));
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].deadline, kHour);
  // Keep it active so idle reclaim stays out of the way.
  auto active = [&] { h().Feed(Sample{0, {SliceSample{s[0].slice, 90, 50, 1}}}); };
  EXPECT_THAT(h().Advance(20 * kMinute), SizeIs(0));
  active();
  EXPECT_THAT(h().Advance(20 * kMinute), SizeIs(0));
  active();
  auto w = Only<Warn>(h().Advance(6 * kMinute));  // 46m: inside warn_before (15m)
  ASSERT_THAT(w, SizeIs(1));
  EXPECT_EQ(w[0].reason, WarnReason::kTimeLimit);
  EXPECT_EQ(w[0].deadline, kHour);
  active();
  EXPECT_THAT(Only<Warn>(h().Advance(kMinute)), SizeIs(0));  // warned once
  active();
  auto st = Only<Stop>(h().Advance(13 * kMinute));
  ASSERT_THAT(st, SizeIs(1));
  EXPECT_EQ(st[0].reason, StopReason::kTimeLimit);
  EXPECT_EQ(h().scheduler().jobs().at(s[0].job).end_reason, "time-limit");
}

TEST_F(SchedTest, OneTickActsOnEveryDueSliceInSliceOrder) {
  // Slice 1 (2 h limit) and slice 2 (1 h limit); slice 3 has none. One tick at 3 h finds both
  // limits passed: the stops come in slice order, not in the order the limits passed, and only
  // due slices are touched (a tick visits due timers only; a scan would give the same).
  h().AddHost("2xH100-80GB");
  auto a = Only<StartSlice>(h().Submit("interactive gpu=250m limit=2h"));
  auto b = Only<StartSlice>(h().Submit("interactive gpu=250m limit=1h"));
  auto c = Only<StartSlice>(h().Submit("training gpus=1"));
  ASSERT_THAT(a, SizeIs(1));
  ASSERT_THAT(b, SizeIs(1));
  ASSERT_THAT(c, SizeIs(1));
  h().Feed(Sample{0, {SliceSample{a[0].slice, 90, 50, 1}, SliceSample{b[0].slice, 90, 50, 1},
                      SliceSample{c[0].slice, 90, 50, 1}}});
  auto ds = h().Feed(Tick{3 * kHour});
  auto stops = Only<Stop>(ds);
  ASSERT_THAT(stops, SizeIs(2));
  EXPECT_EQ(stops[0].slice, a[0].slice);
  EXPECT_EQ(stops[1].slice, b[0].slice);
  // The training slice, idle for 3 h, is reported once in the same tick, after them.
  auto w = Only<Warn>(ds);
  ASSERT_THAT(w, SizeIs(1));
  EXPECT_EQ(w[0].slice, c[0].slice);
  EXPECT_THAT(Only<Warn>(h().Feed(Tick{4 * kHour})), SizeIs(0));
}

// ---------------------------------------------------------------- idle reclaim

TEST_F(SchedTest, IdleSliceIsWarnedThenReclaimedAndActivityResets) {
  h().AddHost("1xH100-80GB");
  auto s = Only<StartSlice>(h().Submit("interactive gpu=1"));
  h().Submit("interactive gpu=1");  // waits for the device
  ASSERT_THAT(s, SizeIs(1));
  SliceId slice = s[0].slice;
  EXPECT_THAT(h().Advance(29 * kMinute), SizeIs(0));
  auto w = Only<Warn>(h().Advance(kMinute));  // 30m idle
  ASSERT_THAT(w, SizeIs(1));
  EXPECT_EQ(w[0].reason, WarnReason::kIdle);
  EXPECT_EQ(w[0].deadline, h().now() + 10 * kMinute);
  // Activity during grace resets the machine.
  h().Feed(Sample{0, {SliceSample{slice, 40, 0, 1}}});
  EXPECT_EQ(h().scheduler().slices().at(slice).idle, IdleState::kActive);
  EXPECT_THAT(Only<Reclaim>(h().Advance(10 * kMinute)), SizeIs(0));
  // Below-threshold samples are not activity.
  h().Feed(Sample{0, {SliceSample{slice, 2, 1, 3}}});
  EXPECT_THAT(Only<Warn>(h().Advance(20 * kMinute)), SizeIs(1));  // 30m since last activity
  auto ds = h().Advance(10 * kMinute);
  auto r = Only<Reclaim>(ds);
  ASSERT_THAT(r, SizeIs(1));
  EXPECT_EQ(r[0].slice, slice);
  // The freed device goes to the waiting job in the same batch.
  auto started = Only<StartSlice>(ds);
  ASSERT_THAT(started, SizeIs(1));
  EXPECT_EQ(started[0].job, JobId(2));
}

// The warning says "reclaimed unless used": once used, the scheduler withdraws it (a value the
// daemon turns into a cleared warning in every view), and only then.
TEST_F(SchedTest, ActivityAfterAnIdleWarningWithdrawsIt) {
  h().AddHost("2xH100-80GB");
  auto s = Only<StartSlice>(h().Submit("interactive gpu=1"));
  auto t = Only<StartSlice>(h().Submit("training gpus=1"));
  ASSERT_THAT(s, SizeIs(1));
  ASSERT_THAT(t, SizeIs(1));
  const SliceId slice = s[0].slice;
  EXPECT_THAT(Only<ClearWarning>(h().Feed(Sample{0, {SliceSample{slice, 40, 0, 1}}})), SizeIs(0));
  ASSERT_THAT(Only<Warn>(h().Advance(30 * kMinute)), SizeIs(1));
  auto c = Only<ClearWarning>(h().Feed(Sample{0, {SliceSample{slice, 40, 0, 1}}}));
  ASSERT_THAT(c, SizeIs(1));
  EXPECT_EQ(c[0].job, s[0].job);
  EXPECT_EQ(c[0].slice, slice);
  EXPECT_EQ(c[0].reason, WarnReason::kIdle);
  EXPECT_THAT(c[0].message, HasSubstr("busy again"));
  // Busy while nothing is pending against it: nothing to withdraw.
  EXPECT_THAT(Only<ClearWarning>(h().Feed(Sample{0, {SliceSample{slice, 40, 0, 1}}})), SizeIs(0));
  // A report-only queue's report is withdrawn the same way.
  ASSERT_THAT(Only<Warn>(h().Advance(2 * kHour)), SizeIs(2));  // the training report + interactive
  auto r = Only<ClearWarning>(h().Feed(Sample{0, {SliceSample{t[0].slice, 40, 0, 1}}}));
  ASSERT_THAT(r, SizeIs(1));
  EXPECT_EQ(r[0].job, t[0].job);
}

TEST_F(SchedTest, ReportOnlyQueuesAreNeverReclaimed) {
  h().AddHost("1xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h().Submit("training gpus=1")), SizeIs(1));
  auto w = Only<Warn>(h().Advance(2 * kHour));
  ASSERT_THAT(w, SizeIs(1));
  EXPECT_THAT(w[0].message, HasSubstr("reported"));
  EXPECT_THAT(Only<Warn>(h().Advance(2 * kHour)), SizeIs(0));  // reported once
  EXPECT_THAT(Only<Reclaim>(h().Advance(24 * kHour)), SizeIs(0));
  EXPECT_THAT(h().scheduler().slices(), SizeIs(1));
}

struct SignalCase {
  ActivitySignals signals;
  SliceSample sample;
  bool active;
};

class ActivitySignalTest : public ::testing::TestWithParam<SignalCase> {};

TEST_P(ActivitySignalTest, PolicyDecidesWhatCountsAsActivity) {
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) q.idle.activity = GetParam().signals;
  SchedHarness h(c);
  h.AddHost("1xH100-80GB");
  auto s = Only<StartSlice>(h.Submit("interactive gpu=250m"));
  ASSERT_THAT(s, SizeIs(1));
  SliceSample smp = GetParam().sample;
  smp.slice = s[0].slice;
  h.Advance(29 * kMinute);
  h.Feed(Sample{0, {smp}});
  auto w = Only<Warn>(h.Advance(kMinute));
  EXPECT_EQ(w.empty(), GetParam().active);
  EXPECT_EQ(h.violation(), "");
}

INSTANTIATE_TEST_SUITE_P(
    Table, ActivitySignalTest,
    ::testing::Values(
        SignalCase{{true, false, false}, {SliceId(), 50, 0, 0}, true},
        SignalCase{{true, false, false}, {SliceId(), 0, 50, 1}, false},
        SignalCase{{false, true, false}, {SliceId(), 0, 50, 0}, true},
        SignalCase{{false, true, false}, {SliceId(), 50, 0, 1}, false},
        SignalCase{{false, false, true}, {SliceId(), 0, 0, 1}, true},
        SignalCase{{false, false, true}, {SliceId(), 90, 90, 0}, false},
        SignalCase{{true, true, false}, {SliceId(), 4, 4, 0}, false}));  // under the 5% threshold

// ---------------------------------------------------------------- MIG

TEST_F(SchedTest, MigPicksTheSmallestProfileAndReconfiguresOneGpu) {
  h().AddHost("2xA100-40GB mig");
  const DeviceModel& m = Model("A100-40GB");
  const MigProfile* want = m.SmallestProfileFor(8 * kGiB);
  ASSERT_NE(want, nullptr);
  auto ds = h().Submit("inference mem=8GiB");
  EXPECT_THAT(Only<StartSlice>(ds), SizeIs(0));
  auto rc = Only<ReconfigureMig>(ds);
  ASSERT_THAT(rc, SizeIs(1));
  EXPECT_EQ(rc[0].device, (DeviceRef{NodeId(1), DeviceIndex(0)}));
  EXPECT_TRUE(ValidateLayout(m, rc[0].layout).ok());
  EXPECT_THAT(Only<Drain>(ds), SizeIs(0));  // an empty MIG device needs no drain
  // A second request while the first reconfiguration is in flight waits for it.
  EXPECT_THAT(Only<ReconfigureMig>(h().Submit("inference mem=8GiB")), SizeIs(0));
  auto done = h().Feed(ReconfigureDone{0, rc[0].device, true, rc[0].layout, ""});
  auto s = Only<StartSlice>(done);
  ASSERT_GE(s.size(), 1u);
  EXPECT_EQ(s[0].kind, SliceKind::kMig);
  ASSERT_TRUE(s[0].mig.has_value());
  EXPECT_EQ(s[0].mig->profile_id, want->id);
  EXPECT_EQ(s[0].memory_cap, want->memory);
}

TEST_F(SchedTest, MigReusesAFreeInstanceWithoutReconfiguring) {
  h().AddHost("1xA100-40GB mig");
  const DeviceModel& m = Model("A100-40GB");
  const MigProfile* p = m.SmallestProfileFor(4 * kGiB);
  ASSERT_NE(p, nullptr);
  auto first = h().Submit("inference mem=4GiB");
  auto rc = Only<ReconfigureMig>(first);
  ASSERT_THAT(rc, SizeIs(1));
  h().Feed(ReconfigureDone{0, rc[0].device, true, rc[0].layout, ""});
  h().Finish(JobId(1));
  auto again = h().Submit("inference mem=4GiB");
  EXPECT_THAT(Only<ReconfigureMig>(again), SizeIs(0));
  EXPECT_THAT(Only<StartSlice>(again), SizeIs(1));
}

TEST_F(SchedTest, MigUsesInstancesThatExistWhenTheDeviceIsAnnounced) {
  const DeviceModel& m = Model("A100-40GB");
  const MigProfile* p = m.SmallestProfileFor(4 * kGiB);
  ASSERT_NE(p, nullptr);
  MigLayout layout{{p->id, p->placement_starts.back()}};
  h().Feed(DeviceAdded{0, {NodeId(1), DeviceIndex(0)}, "GPU-a", "NVIDIA A100-SXM4-40GB", true, true, layout});
  EXPECT_EQ(h().scheduler().devices().begin()->second.model, "A100-40GB");  // alias resolved
  auto ds = h().Submit("inference mem=4GiB");
  EXPECT_THAT(Only<ReconfigureMig>(ds), SizeIs(0));
  auto s = Only<StartSlice>(ds);
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].mig, layout[0]);
  EXPECT_EQ(s[0].uuids, std::vector<std::string>{"GPU-a"});
}

TEST_F(SchedTest, MigRelayoutKeepsInstancesInUseWithoutDraining) {
  h().AddHost("1xA100-40GB mig");
  auto rc1 = Only<ReconfigureMig>(h().Submit("inference mem=4GiB"));
  ASSERT_THAT(rc1, SizeIs(1));
  auto s1 = Only<StartSlice>(h().Feed(ReconfigureDone{0, rc1[0].device, true, rc1[0].layout, ""}));
  ASSERT_THAT(s1, SizeIs(1));
  ASSERT_TRUE(s1[0].mig.has_value());
  // A bigger request: the free space is re-laid out around the running instance.
  auto ds = h().Submit("inference mem=18GiB");
  EXPECT_THAT(Only<Drain>(ds), SizeIs(0));
  EXPECT_THAT(Only<Preempt>(ds), SizeIs(0));
  auto rc2 = Only<ReconfigureMig>(ds);
  ASSERT_THAT(rc2, SizeIs(1));
  EXPECT_EQ(rc2[0].old_layout, rc1[0].layout);
  EXPECT_NE(std::find(rc2[0].layout.begin(), rc2[0].layout.end(), *s1[0].mig), rc2[0].layout.end());
  auto s2 = Only<StartSlice>(h().Feed(ReconfigureDone{0, rc2[0].device, true, rc2[0].layout, ""}));
  ASSERT_THAT(s2, SizeIs(1));
  EXPECT_EQ(s2[0].mig->profile_id, Model("A100-40GB").SmallestProfileFor(18 * kGiB)->id);
  EXPECT_EQ(h().scheduler().slices().size(), 2u);  // the first job kept running throughout
}

TEST_F(SchedTest, MigFailedReconfigurationIsNotRetriedOnThatGpu) {
  h().AddHost("1xA100-40GB mig");
  auto rc = Only<ReconfigureMig>(h().Submit("inference mem=4GiB"));
  ASSERT_THAT(rc, SizeIs(1));
  auto ds = h().Feed(ReconfigureDone{0, rc[0].device, false, {}, "busy"});
  EXPECT_THAT(Only<ReconfigureMig>(ds), SizeIs(0));
  EXPECT_THAT(h().scheduler().Pending(), SizeIs(1));
}

TEST_F(SchedTest, MigIllegalReportedLayoutCountsAsAFailure) {
  h().AddHost("1xA100-40GB mig");
  auto rc = Only<ReconfigureMig>(h().Submit("inference mem=4GiB"));
  ASSERT_THAT(rc, SizeIs(1));
  MigLayout bad{{rc[0].layout.at(0).profile_id, 1000}};  // no profile starts at slice 1000
  auto ds = h().Feed(ReconfigureDone{0, rc[0].device, true, bad, ""});
  EXPECT_THAT(Only<StartSlice>(ds), SizeIs(0));
  EXPECT_TRUE(h().scheduler().devices().begin()->second.layout.empty());
  EXPECT_THAT(h().scheduler().Pending(), SizeIs(1));
}

TEST_F(SchedTest, MigDrainWaitsForRunningSlicesUnderTheWaitPolicy) {
  h().AddHost("1xA100-40GB");
  ASSERT_THAT(Only<StartSlice>(h().Submit("interactive gpu=250m")), SizeIs(1));
  auto ds = h().Submit("inference mem=4GiB");
  auto drains = Only<Drain>(ds);
  ASSERT_THAT(drains, SizeIs(1));
  EXPECT_THAT(Only<Preempt>(ds), SizeIs(0));
  EXPECT_THAT(Only<ReconfigureMig>(ds), SizeIs(0));
  // Draining: no new slices there, even ones that would fit.
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive gpu=250m")), SizeIs(0));
  auto fin = h().Finish(JobId(1));
  auto rc = Only<ReconfigureMig>(fin);
  ASSERT_THAT(rc, SizeIs(1));
  EXPECT_TRUE(rc[0].old_layout.empty());
  auto done = h().Feed(ReconfigureDone{0, rc[0].device, true, rc[0].layout, ""});
  auto s = Only<StartSlice>(done);
  ASSERT_THAT(s, SizeIs(1));
  EXPECT_EQ(s[0].job, JobId(2));
  EXPECT_EQ(h().scheduler().devices().begin()->second.mode, DeviceMode::kMig);
}

TEST_F(SchedTest, MigDrainPreemptsPreemptibleSlicesUnderThePreemptPolicy) {
  Config c = DefaultConfig();
  c.mig.drain = MigDrainPolicy::kPreempt;
  Use(c);
  h().AddHost("1xA100-40GB");
  ASSERT_THAT(Only<StartSlice>(h().Submit("interactive gpu=250m")), SizeIs(1));
  auto ds = h().Submit("inference mem=4GiB");
  ASSERT_THAT(Only<Drain>(ds), SizeIs(1));
  auto p = Only<Preempt>(ds);
  ASSERT_THAT(p, SizeIs(1));
  EXPECT_EQ(p[0].job, JobId(1));
  EXPECT_TRUE(p[0].requeue);
  ASSERT_THAT(Only<ReconfigureMig>(ds), SizeIs(1));
  EXPECT_EQ(h().scheduler().jobs().at(JobId(1)).state, JobState::kPending);
}

TEST_F(SchedTest, MigDrainNeverPreemptsNonPreemptibleQueues) {
  Config c = DefaultConfig();
  c.mig.drain = MigDrainPolicy::kPreempt;
  Use(c);
  h().AddHost("1xA100-40GB");
  ASSERT_THAT(Only<StartSlice>(h().Submit("training gpus=1")), SizeIs(1));
  auto ds = h().Submit("inference mem=4GiB");
  EXPECT_THAT(Only<Drain>(ds), SizeIs(1));
  EXPECT_THAT(Only<Preempt>(ds), SizeIs(0));
}

// Unknown is never idle: a slice whose every signal is unknown is "unmeasured" — no idle
// warning or reclaim however long that lasts, a warning already given is withdrawn, its time
// limit still stops it; once measured again, idleness counts from that sample.
SliceSample Blind(SliceId slice) {
  SliceSample s;
  s.slice = slice;
  s.processes = 1;
  s.sm_known = false;
  s.memory_known = false;
  return s;
}

TEST_F(SchedTest, UnmeasuredSlicesAreNeverReclaimedForIdlenessButTheirTimeLimitHolds) {
  h().AddHost("1xH100-80GB");
  auto s = Only<StartSlice>(h().Submit("interactive gpu=250m limit=8h"));
  ASSERT_THAT(s, SizeIs(1));
  const SliceId slice = s[0].slice;
  h().Feed(Sample{0, {Blind(slice)}});
  EXPECT_TRUE(h().scheduler().slices().at(slice).unmeasured);
  auto ds = h().Advance(7 * kHour);
  EXPECT_THAT(Only<Warn>(ds), SizeIs(0)) << "never warned for idleness while unmeasured";
  EXPECT_THAT(Only<Reclaim>(ds), SizeIs(0));
  ds = h().Advance(kHour);
  for (const auto& w : Only<Warn>(ds)) EXPECT_EQ(w.reason, WarnReason::kTimeLimit);
  auto st = Only<Stop>(ds);
  ASSERT_THAT(st, SizeIs(1));
  EXPECT_EQ(st[0].reason, StopReason::kTimeLimit);
  EXPECT_EQ(h().violation(), "");
}

TEST_F(SchedTest, GoingBlindWithdrawsAWarningAndSeeingAgainRestartsTheIdleClock) {
  h().AddHost("1xH100-80GB");
  auto s = Only<StartSlice>(h().Submit("interactive gpu=250m"));
  ASSERT_THAT(s, SizeIs(1));
  const SliceId slice = s[0].slice;
  ASSERT_THAT(Only<Warn>(h().Advance(30 * kMinute)), SizeIs(1));  // measured idle: warned
  EXPECT_EQ(h().scheduler().slices().at(slice).idle, IdleState::kWarned);
  h().Feed(Sample{0, {Blind(slice)}});
  EXPECT_EQ(h().scheduler().slices().at(slice).idle, IdleState::kActive) << "withdrawn, not carried out blind";
  EXPECT_THAT(Only<Reclaim>(h().Advance(2 * kHour)), SizeIs(0));
  // Measured idle again (no process): the window starts now, not at the last activity.
  SliceSample idle;
  idle.slice = slice;
  h().Feed(Sample{0, {idle}});
  EXPECT_FALSE(h().scheduler().slices().at(slice).unmeasured);
  EXPECT_THAT(Only<Warn>(h().Advance(29 * kMinute)), SizeIs(0));
  EXPECT_THAT(Only<Warn>(h().Advance(kMinute)), SizeIs(1));
  EXPECT_THAT(Only<Reclaim>(h().Advance(10 * kMinute)), SizeIs(1));
}

TEST(ClassifySample, SignalsAndWhatDecided) {
  IdlePolicy p;
  p.util_threshold_percent = 5;
  SliceSample busy{SliceId(1), 40, 2, 1};
  EXPECT_EQ(ClassifySample(p, busy).activity, Activity::kActive);
  EXPECT_EQ(ClassifySample(p, busy).basis, "sm");
  SliceSample quiet{SliceId(1), 1, 0, 1};
  EXPECT_EQ(ClassifySample(p, quiet).activity, Activity::kIdle);
  EXPECT_EQ(ClassifySample(p, quiet).basis, "sm,mem");
  SliceSample blind = Blind(SliceId(1));
  EXPECT_EQ(ClassifySample(p, blind).activity, Activity::kUnknown) << "a process present says nothing by default";
  blind.memory_change = Activity::kActive;
  EXPECT_EQ(ClassifySample(p, blind).activity, Activity::kActive);
  EXPECT_EQ(ClassifySample(p, blind).basis, "memchange");
  SliceSample gone = Blind(SliceId(1));
  gone.processes = 0;
  EXPECT_EQ(ClassifySample(p, gone).activity, Activity::kIdle) << "no process on the GPU is idle";
  EXPECT_EQ(ClassifySample(p, gone).basis, "procs");
  gone.processes_known = false;  // a stranger on the device may be ours
  EXPECT_EQ(ClassifySample(p, gone).activity, Activity::kUnknown);
  gone.external = Activity::kIdle;  // a notebook says its kernel is idle
  EXPECT_EQ(ClassifySample(p, gone).activity, Activity::kIdle);
  EXPECT_EQ(ClassifySample(p, gone).basis, "external");
}

}  // namespace
}  // namespace gpuslice::sched
