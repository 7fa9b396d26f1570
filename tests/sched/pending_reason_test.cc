// Scheduler::PendingReason: one row per reason, each with the event that removes its cause and
// what the job's reason becomes then. Every row runs through SchedHarness (invariants checked
// after every event).
#include <array>
#include <functional>
#include <ostream>
#include <string>

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

// The reason's kind name, or "running" / "ended" for a job that is no longer pending.
std::string KindOf(SchedHarness& h, JobId job) {
  if (auto r = h.scheduler().PendingReason(job)) return std::string(WaitReasonKind(*r));
  return std::string(JobStateName(h.scheduler().jobs().at(job).state));
}
std::string TextOf(SchedHarness& h, JobId job) {
  auto r = h.scheduler().PendingReason(job);
  return r ? FormatWaitReason(*r) : "";
}

// PendingReasonCounts() (counted by shape) agrees with PendingReason() asked job by job.
void ExpectCountsMatch(SchedHarness& h) {
  std::array<std::int64_t, kWaitReasonKinds> want{};
  for (JobId j : h.scheduler().Pending()) ++want[h.scheduler().PendingReason(j)->index()];
  EXPECT_EQ(h.scheduler().PendingReasonCounts(), want);
}

Config WithInteractiveCap(int jobs, MilliGpu milli) {
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) {
    if (q.name != "interactive") continue;
    q.user_max_jobs = jobs;
    q.user_max_milli = milli;
  }
  return c;
}

Config WithoutMigChanges() {
  Config c = DefaultConfig();
  c.mig.enabled = false;
  return c;
}

struct ReasonCase {
  std::string name;
  std::function<Config()> config;
  std::function<JobId(SchedHarness&)> setup;   // returns the watched pending job
  std::string kind;                            // its reason
  std::string text;                            // a part of FormatWaitReason
  std::function<void(SchedHarness&)> fix;      // removes the cause
  std::string after;                           // the job's reason (or state) then
};

void PrintTo(const ReasonCase& c, std::ostream* os) { *os << c.name; }

class PendingReasonTest : public ::testing::TestWithParam<ReasonCase> {};

TEST_P(PendingReasonTest, NamesTheCauseAndChangesWhenItGoesAway) {
  const ReasonCase& c = GetParam();
  SchedHarness h(c.config ? c.config() : DefaultConfig());
  const JobId job = c.setup(h);
  ASSERT_EQ(h.scheduler().jobs().at(job).state, JobState::kPending);
  EXPECT_EQ(KindOf(h, job), c.kind);
  EXPECT_THAT(TextOf(h, job), HasSubstr(c.text));
  // Pure: asking twice gives the same answer and changes nothing the next event sees.
  EXPECT_EQ(TextOf(h, job), TextOf(h, job));
  ExpectCountsMatch(h);
  c.fix(h);
  EXPECT_EQ(KindOf(h, job), c.after);
  ExpectCountsMatch(h);
  EXPECT_EQ(h.violation(), "");
}

INSTANTIATE_TEST_SUITE_P(
    Reasons, PendingReasonTest,
    ::testing::Values(
        ReasonCase{"NoDeviceFits", nullptr,
                   [](SchedHarness& h) {
                     h.AddHost("1xH100-80GB");
                     h.Submit("interactive gpu=100m mem=60GiB");
                     h.Submit("interactive gpu=100m mem=30GiB");
                     return h.last_job();
                   },
                   "no-device-fits", "no GPU with 100m and 30GiB free",
                   [](SchedHarness& h) { h.Finish(JobId(1)); }, "running"},
        ReasonCase{"NoHostWithEnoughWholeGpus", nullptr,
                   [](SchedHarness& h) {
                     h.AddHost("2xH100-80GB");
                     h.Submit("training gpus=1");
                     h.Submit("training gpus=2");
                     return h.last_job();
                   },
                   "no-device-fits", "no host with 2 free GPUs",
                   [](SchedHarness& h) { h.Finish(JobId(1)); }, "running"},
        ReasonCase{"UserCapOfJobs", [] { return WithInteractiveCap(1, 0); },
                   [](SchedHarness& h) {
                     h.AddHost("1xH100-80GB");
                     h.Submit("interactive gpu=100m");
                     h.Submit("interactive gpu=100m");
                     return h.last_job();
                   },
                   "user-cap", "runs 1 of 1 jobs allowed in queue 'interactive'",
                   [](SchedHarness& h) { h.Finish(JobId(1)); }, "running"},
        ReasonCase{"UserCapOfShare", [] { return WithInteractiveCap(0, 500); },
                   [](SchedHarness& h) {
                     h.AddHost("2xH100-80GB");
                     h.Submit("interactive gpu=400m");
                     h.Submit("interactive gpu=200m");
                     return h.last_job();
                   },
                   "user-cap", "holds 400m of 500m GPU allowed in queue 'interactive'; this job asks 200m",
                   [](SchedHarness& h) { h.Finish(JobId(1)); }, "running"},
        ReasonCase{"ReservedForOther", nullptr,
                   [](SchedHarness& h) {
                     h.AddHost("2xH100-80GB");
                     h.Submit("training gpus=1");  // 1 runs
                     h.Submit("training gpus=2");  // 2 waits, then has both GPUs kept for it
                     h.Advance(31 * kMinute);
                     h.Submit("training gpus=1");  // 3 would fit on the free, kept GPU
                     return h.last_job();
                   },
                   "reserved-for-other", "GPUs 0,1 of node 1 that would fit are kept for waiting job 2",
                   [](SchedHarness& h) { h.Feed(Cancel{0, JobId(2)}); }, "running"},
        ReasonCase{"WaitingForReservation", nullptr,
                   [](SchedHarness& h) {
                     h.AddHost("2xH100-80GB");
                     h.Submit("training gpus=1");
                     h.Submit("training gpus=2");
                     h.Advance(31 * kMinute);
                     return h.last_job();
                   },
                   "waiting-for-reservation", "kept for this job; waiting for 1 of them to empty",
                   [](SchedHarness& h) { h.Finish(JobId(1)); }, "running"},
        ReasonCase{"DrainingForMigBlocksASharedJob", nullptr,
                   [](SchedHarness& h) {
                     h.AddHost("1xA100-40GB");
                     h.Submit("interactive gpu=250m");  // 1 runs
                     h.Submit("inference mem=4GiB");    // 2: the GPU drains for a MIG layout
                     h.Submit("interactive gpu=250m");  // 3 would fit there
                     return h.last_job();
                   },
                   "draining-for-mig", "GPU 0 of node 1 is draining for a MIG layout",
                   // Drained and reconfigured: the host's only GPU is in MIG mode while the MIG
                   // job holds it; the shared job waits for it (never "could never fit": the GPU
                   // leaves MIG mode when MIG work no longer holds it, mig_planner_test.cc).
                   [](SchedHarness& h) {
                     auto rc = Only<ReconfigureMig>(h.Finish(JobId(1)));
                     ASSERT_THAT(rc, SizeIs(1));
                     EXPECT_EQ(KindOf(h, JobId(3)), "draining-for-mig");
                     EXPECT_THAT(TextOf(h, JobId(3)), HasSubstr("being reconfigured"));
                     h.Feed(ReconfigureDone{0, rc[0].device, true, rc[0].layout, ""});
                     EXPECT_EQ(KindOf(h, JobId(2)), "running");
                   },
                   "no-device-fits"},
        ReasonCase{"DrainingForMigDelaysTheMigJob", nullptr,
                   [](SchedHarness& h) {
                     h.AddHost("1xA100-40GB");
                     h.Submit("interactive gpu=250m");
                     h.Submit("inference mem=4GiB");
                     return h.last_job();
                   },
                   "draining-for-mig", "is draining for a MIG layout",
                   [](SchedHarness& h) {
                     auto rc = Only<ReconfigureMig>(h.Finish(JobId(1)));
                     ASSERT_THAT(rc, SizeIs(1));
                     h.Feed(ReconfigureDone{0, rc[0].device, true, rc[0].layout, ""});
                   },
                   "running"},
        // A job that could never fit when submitted is refused then (admin_test.cc); these
        // become "never fits" after it: the GPU that could run them went away.
        ReasonCase{"NeverFitsWithoutMigChanges", WithoutMigChanges,
                   [](SchedHarness& h) {
                     h.AddHost("1xA100-40GB");  // MIG-capable, but not in MIG mode
                     const MigProfile* p = (*FindModel("A100-40GB"))->SmallestProfileFor(4 * kGiB);
                     h.Feed(DeviceAdded{0, {NodeId(2), DeviceIndex(0)}, "GPU-m", "A100-40GB", true, true,
                                        MigLayout{{p->id, p->placement_starts.back()}}});
                     h.Submit("inference mem=4GiB");  // on GPU-m's instance
                     h.Submit("inference mem=4GiB");  // waits: layouts are not changed
                     h.Feed(DeviceRemoved{0, {NodeId(2), DeviceIndex(0)}, {}});
                     return h.last_job();
                   },
                   "never-fits", "could never fit on this host: MIG layouts are not changed (mig.enabled = false)",
                   [](SchedHarness& h) {
                     const MigProfile* p = (*FindModel("A100-40GB"))->SmallestProfileFor(4 * kGiB);
                     ASSERT_NE(p, nullptr);
                     h.Feed(DeviceAdded{0, {NodeId(2), DeviceIndex(0)}, "GPU-m", "A100-40GB", true, true,
                                        MigLayout{{p->id, p->placement_starts.back()}}});
                   },
                   "running"},
        // A GPU found in MIG mode that gpuslice does not change (mig.enabled = false).
        ReasonCase{"NeverFitsWholeOnAMigGpu", WithoutMigChanges,
                   [](SchedHarness& h) {
                     h.AddHost("1xA100-40GB mig");
                     h.Feed(DeviceAdded{0, {NodeId(1), DeviceIndex(1)}, "GPU-h", "H100-80GB", true, false, {}});
                     h.Submit("training gpus=1");  // on the H100
                     h.Submit("training gpus=1");  // waits for it
                     h.Feed(DeviceRemoved{0, {NodeId(1), DeviceIndex(1)}, {}});
                     return h.last_job();
                   },
                   "never-fits", "at most 0 are outside MIG mode",
                   [](SchedHarness& h) { h.AddHost("1xH100-80GB"); }, "running"},
        ReasonCase{"NeverFitsAfterTheFailedReconfiguration", nullptr,
                   [](SchedHarness& h) {
                     h.AddHost("1xA100-40GB mig");
                     auto rc = Only<ReconfigureMig>(h.Submit("inference mem=4GiB"));
                     EXPECT_THAT(rc, SizeIs(1));
                     EXPECT_EQ(KindOf(h, JobId(1)), "draining-for-mig");
                     if (!rc.empty()) h.Feed(ReconfigureDone{0, rc[0].device, false, {}, "busy"});
                     return JobId(1);
                   },
                   "never-fits", "refused a MIG reconfiguration",
                   [](SchedHarness& h) { h.AddHost("1xA100-40GB"); },  // a second GPU to lay out
                   "draining-for-mig"}),
    [](const ::testing::TestParamInfo<ReasonCase>& i) { return i.param.name; });

TEST(PendingReason, NotPendingHasNone) {
  SchedHarness h;
  h.AddHost("1xH100-80GB");
  h.Submit("interactive gpu=250m");
  EXPECT_FALSE(h.scheduler().PendingReason(JobId(1)).has_value()) << "running";
  EXPECT_FALSE(h.scheduler().PendingReason(JobId(99)).has_value()) << "unknown";
}

// One cause replaced by another while the job stays pending: the user cap goes away, then the
// device that is left is too full.
TEST(PendingReason, FollowsTheCurrentCause) {
  SchedHarness h(WithInteractiveCap(1, 0));
  h.AddHost("1xH100-80GB");
  h.Submit("interactive gpu=600m");           // 1: alice
  h.Submit("interactive gpu=600m user=bob");  // 2: bob, no room
  h.Submit("interactive gpu=500m");           // 3: alice, over her cap
  EXPECT_EQ(KindOf(h, JobId(2)), "no-device-fits");
  EXPECT_EQ(KindOf(h, JobId(3)), "user-cap");
  h.Finish(JobId(1));  // bob's job takes 600m; alice's cap is free but 500m does not fit
  EXPECT_EQ(KindOf(h, JobId(2)), "running");
  EXPECT_EQ(KindOf(h, JobId(3)), "no-device-fits");
  const auto counts = h.scheduler().PendingReasonCounts();
  EXPECT_EQ(counts[0], 1);  // no-device-fits
  EXPECT_EQ(counts[1], 0);  // user-cap
  EXPECT_EQ(h.violation(), "");
}

}  // namespace
}  // namespace gpuslice::sched
