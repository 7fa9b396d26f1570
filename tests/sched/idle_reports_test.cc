// Activity reports (ActivityReport) and reclaim = "on-demand" in the scheduler: reports only
// postpone an idle reclaim (busy, last activity, staleness, busy_max), a report withdraws a
// warning; on-demand slices past their grace run until a pending job needs their room, and
// then the longest idle go first, only as many as needed. The config keys that choose it.
#include <functional>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/config.h"
#include "sched/scheduler.h"
#include "testing/sched_harness.h"

namespace gpuslice::sched {
namespace {

using ::gpuslice::testing::Only;
using ::gpuslice::testing::SchedHarness;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// interactive: idle after 30m + 10m grace (the built-in), reports from "jupyter" counted.
Config WithReports(Micros busy_max = 0, Micros stale = 10 * kMinute, IdleReclaim reclaim = IdleReclaim::kAlways) {
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) {
    if (q.name != "interactive") continue;
    q.idle.report_sources = {"jupyter"};
    q.idle.busy_max = busy_max;
    q.idle.report_stale = stale;
    q.idle.reclaim = reclaim;
  }
  return c;
}

ActivityReport Report(JobId job, bool busy, Micros last_activity = -1, std::string source = "jupyter") {
  ActivityReport r;
  r.job = job;
  r.source = std::move(source);
  r.busy = busy;
  r.last_activity = last_activity;
  return r;
}

// Advances in one-minute ticks; returns the decisions of all of them.
std::vector<Decision> Walk(SchedHarness& h, Micros by) {
  std::vector<Decision> all;
  for (Micros t = 0; t < by; t += kMinute) {
    auto ds = h.Advance(kMinute);
    all.insert(all.end(), ds.begin(), ds.end());
  }
  return all;
}

// Minutes from now until the first decision of type T (of job `job`), -1: none within `limit`.
template <typename T>
int MinutesUntil(SchedHarness& h, JobId job, int limit, std::function<void(int)> each = nullptr) {
  for (int m = 1; m <= limit; ++m) {
    if (each) each(m);
    for (const T& d : Only<T>(h.Advance(kMinute)))
      if (d.job == job) return m;
  }
  return -1;
}

class ReportTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_EQ(h_->violation(), ""); }
  void Use(Config c) {
    h_ = std::make_unique<SchedHarness>(std::move(c));
    h_->AddHost("1xH100-80GB");
  }
  JobId Start(std::string_view spec = "interactive gpu=250m") {
    auto s = Only<StartSlice>(h_->Submit(spec));
    EXPECT_THAT(s, SizeIs(1)) << spec;
    return h_->last_job();
  }
  SchedHarness& h() { return *h_; }
  std::unique_ptr<SchedHarness> h_;
};

TEST_F(ReportTest, WithoutTheSignalReportsAreKeptButChangeNothing) {
  Use(DefaultConfig());
  JobId job = Start();
  h().Feed(Report(job, true));
  const SliceView& v = h().scheduler().slices().begin()->second;
  ASSERT_TRUE(v.report.has_value()) << "kept for the views";
  EXPECT_EQ(MinutesUntil<Warn>(h(), job, 60), 30) << "the GPU rule alone";
}

TEST_F(ReportTest, AFreshBusyReportKeepsTheSliceActiveUntilItGoesStale) {
  Use(WithReports());
  JobId job = Start();
  // Reported busy every 5 minutes for two hours: never warned although the GPU is idle.
  const int warned = MinutesUntil<Warn>(h(), job, 120, [&](int m) {
    if (m % 5 == 0) h().Feed(Report(job, true));
  });
  EXPECT_EQ(warned, -1);
  // The reporter goes silent (last report at minute 120): stale 10 minutes later, and then the
  // GPU rule holds: idle for hours already, so warned at once, reclaimed after the grace.
  // (Reports are fed before each minute's tick: the last one at minute 119.)
  EXPECT_EQ(MinutesUntil<Warn>(h(), job, 60), 9);
  EXPECT_EQ(MinutesUntil<Reclaim>(h(), job, 60), 10);
}

TEST_F(ReportTest, AnIdleReportNeverPostponesWhateverLastActivityItClaims) {
  Use(WithReports());
  JobId job = Start();
  Walk(h(), 20 * kMinute);
  // Not busy, "last used 5 minutes ago": the GPU rule alone decides (warned at minute 30).
  h().Feed(Report(job, false, h().now() - 5 * kMinute));
  EXPECT_EQ(MinutesUntil<Warn>(h(), job, 60), 10);
  // The dodge the probe found: "idle, last active now" every two minutes, forever. It used to
  // reset the idle clock at each report; now the slice is warned and reclaimed on time.
  Use(WithReports(0, 2 * kHour));
  job = Start();
  auto each = [&](int m) {
    if (m % 2 == 0) h().Feed(Report(job, false, h().now()));
  };
  EXPECT_EQ(MinutesUntil<Warn>(h(), job, 120, each), 30);
  EXPECT_EQ(MinutesUntil<Reclaim>(h(), job, 60, each), 10);
  // A busy report's last activity does count (within its budget).
  Use(WithReports(0, 2 * kHour));
  job = Start();
  Walk(h(), 20 * kMinute);
  h().Feed(Report(job, true, h().now() - 5 * kMinute));
  EXPECT_EQ(MinutesUntil<Warn>(h(), job, 100), -1) << "busy and fresh (stale 2h after it): active";
}

TEST_F(ReportTest, IdleReportsInterleavedWithBusyOnesDoNotRenewTheBusyBudget) {
  Use(WithReports(kHour));
  JobId job = Start();
  // Every 5 minutes an idle report and at once a busy one, as a client that wants its budget
  // back would send (the busy streak used to restart after each idle report, so the cap never
  // came): the budget still runs from the first busy report (minute 4) and ends an hour on.
  const int warned = MinutesUntil<Warn>(h(), job, 200, [&](int m) {
    if (m % 5 == 0) {
      h().Feed(Report(job, false));
      h().Feed(Report(job, true));
    }
  });
  EXPECT_EQ(warned, 4 + 60 + 30);
  // GPU activity ends the budget's stretch: a busy report after it starts a new one.
  SliceSample busy_gpu;
  busy_gpu.slice = h().scheduler().slices().begin()->first;
  busy_gpu.sm_percent = 90;
  h().Feed(Sample{0, {busy_gpu}});
  EXPECT_EQ(h().scheduler().slices().begin()->second.idle, IdleState::kActive);
  h().Feed(Report(job, true));
  EXPECT_EQ(h().scheduler().slices().begin()->second.report->busy_since, h().now());
}

TEST_F(ReportTest, BusyMaxCapsTheProtectionOfOneBusyStreak) {
  Use(WithReports(kHour));
  JobId job = Start();
  // Busy all along, reported every 5 minutes: counted for an hour, then idle for the window.
  const int warned = MinutesUntil<Warn>(h(), job, 180, [&](int m) {
    if (m % 5 == 0) h().Feed(Report(job, true));
  });
  EXPECT_EQ(warned, 4 + 60 + 30) << "streak began with the first busy report (fed at minute 4)";
  // Busy reports during the grace do not withdraw it (the cap still holds).
  const int reclaimed = MinutesUntil<Reclaim>(h(), job, 20, [&](int) { h().Feed(Report(job, true)); });
  EXPECT_EQ(reclaimed, 10);
}

TEST_F(ReportTest, AReportOfActivityWithdrawsAWarningAndRestartsTheWindow) {
  Use(WithReports());
  JobId job = Start();
  ASSERT_EQ(MinutesUntil<Warn>(h(), job, 60), 30);
  EXPECT_EQ(h().scheduler().slices().begin()->second.idle, IdleState::kWarned);
  // Idle reports withdraw nothing, whatever last activity they claim.
  EXPECT_THAT(Only<ClearWarning>(h().Feed(Report(job, false, 0))), SizeIs(0));
  EXPECT_THAT(Only<ClearWarning>(h().Feed(Report(job, false, h().now() - kMinute))), SizeIs(0));
  // Busy: withdrawn.
  auto ds = h().Feed(Report(job, true, h().now() - kMinute));
  auto clear = Only<ClearWarning>(ds);
  ASSERT_THAT(clear, SizeIs(1));
  EXPECT_THAT(clear[0].message, HasSubstr("jupyter reports activity"));
  EXPECT_EQ(h().scheduler().slices().begin()->second.idle, IdleState::kActive);
  EXPECT_EQ(MinutesUntil<Reclaim>(h(), job, 5), -1) << "the grace period's reclaim is off";
}

TEST_F(ReportTest, ReportsNeverMakeAnUnmeasuredSliceIdle) {
  Use(WithReports());
  JobId job = Start();
  SliceSample blind;
  blind.slice = h().scheduler().slices().begin()->first;
  blind.processes = 1;
  blind.sm_known = blind.memory_known = false;
  h().Feed(Sample{0, {blind}});
  h().Feed(Report(job, false, 1));
  EXPECT_EQ(MinutesUntil<Warn>(h(), job, 120), -1) << "unknown stays unknown";
}

// ---------------------------------------------------------------- on demand
TEST_F(ReportTest, OnDemandSlicesRunPastTheirGraceUntilAJobNeedsTheRoom) {
  Use(WithReports(0, 10 * kMinute, IdleReclaim::kOnDemand));
  std::vector<JobId> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(Start());
    h().Advance(kMinute);  // distinct idle times: job 1 has been idle longest
  }
  auto ds = Walk(h(), 2 * kHour);
  EXPECT_THAT(Only<Reclaim>(ds), SizeIs(0)) << "nobody waits";
  EXPECT_THAT(Only<Warn>(ds), SizeIs(8)) << "warned, then told it is reclaimable on demand";
  for (const auto& [sid, v] : h().scheduler().slices()) EXPECT_EQ(v.idle, IdleState::kReclaimable);
  bool said = false;
  for (const Warn& w : Only<Warn>(ds)) said = said || w.message.find("reclaimable on demand") != std::string::npos;
  EXPECT_TRUE(said);

  // Half a GPU: the two longest idle go, in that order; the job starts in the same batch.
  ds = h().Submit("interactive gpu=500m");
  auto rc = Only<Reclaim>(ds);
  ASSERT_THAT(rc, SizeIs(2));
  EXPECT_EQ(rc[0].job, jobs[0]);
  EXPECT_EQ(rc[1].job, jobs[1]);
  EXPECT_THAT(rc[0].reason, HasSubstr("on demand for job 5"));
  EXPECT_THAT(Only<StartSlice>(ds), SizeIs(1));
  EXPECT_EQ(h().scheduler().jobs().at(jobs[2]).state, JobState::kRunning);
  EXPECT_EQ(h().scheduler().jobs().at(jobs[3]).state, JobState::kRunning);
  EXPECT_EQ(h().scheduler().stats().reclaimed_on_demand, 2u);
}

TEST_F(ReportTest, OnDemandStillWarnsFirstAndReclaimsAWaitingJobsRoomAtTheEndOfTheGrace) {
  Use(WithReports(0, 10 * kMinute, IdleReclaim::kOnDemand));
  JobId idle = Start("interactive gpu=1000m");
  Walk(h(), 5 * kMinute);
  EXPECT_THAT(Only<StartSlice>(h().Submit("interactive gpu=500m")), SizeIs(0)) << "the GPU is full";
  const JobId waiting = h().last_job();
  // Idle since minute 0: warned at 30, reclaimed for the waiting job at 40 (not before).
  std::vector<Decision> at40;
  int m = 5;
  for (; m < 60; ++m) {
    auto ds = h().Advance(kMinute);
    if (!Only<Reclaim>(ds).empty()) {
      at40 = ds;
      break;
    }
  }
  EXPECT_EQ(m + 1, 40);
  auto st = Only<StartSlice>(at40);
  ASSERT_THAT(st, SizeIs(1));
  EXPECT_EQ(st[0].job, waiting);
  EXPECT_EQ(h().scheduler().jobs().at(idle).end_reason, "idle");
}

TEST_F(ReportTest, OnDemandReclaimsNothingThatWouldNotMakeRoom) {
  Use(WithReports(0, 10 * kMinute, IdleReclaim::kOnDemand));
  for (int i = 0; i < 3; ++i) Start("interactive gpu=250m");
  Walk(h(), 2 * kHour);
  Start("interactive gpu=250m");  // a fourth, not idle long: the GPU cannot be emptied
  auto ds = h().Submit("training gpus=1");
  EXPECT_THAT(Only<StartSlice>(ds), SizeIs(0));
  EXPECT_THAT(Only<Reclaim>(ds), SizeIs(0)) << "freeing three quarters would not make a whole GPU";
  EXPECT_EQ(h().scheduler().slices().size(), 4u);
  // The fourth passes its grace (40 min): now all four make room, and the job starts.
  ds = Walk(h(), 40 * kMinute);
  EXPECT_THAT(Only<Reclaim>(ds), SizeIs(4));
  auto st = Only<StartSlice>(ds);
  ASSERT_THAT(st, SizeIs(1));
  EXPECT_EQ(st[0].kind, SliceKind::kWhole);
}

TEST_F(ReportTest, OnDemandKeepsTheTimeLimit) {
  Use(WithReports(0, 10 * kMinute, IdleReclaim::kOnDemand));
  JobId job = Start("interactive gpu=250m limit=3h");
  auto ds = Walk(h(), 4 * kHour);
  auto st = Only<Stop>(ds);
  ASSERT_THAT(st, SizeIs(1));
  EXPECT_EQ(st[0].job, job);
  EXPECT_EQ(st[0].reason, StopReason::kTimeLimit);
}

TEST_F(ReportTest, ActivityOnAReclaimableSliceMakesItActiveAgain) {
  Use(WithReports(0, 10 * kMinute, IdleReclaim::kOnDemand));
  JobId job = Start();
  Walk(h(), 2 * kHour);
  ASSERT_EQ(h().scheduler().slices().begin()->second.idle, IdleState::kReclaimable);
  EXPECT_THAT(Only<ClearWarning>(h().Feed(Report(job, true))), SizeIs(1));
  EXPECT_EQ(h().scheduler().slices().begin()->second.idle, IdleState::kActive);
}

// ---------------------------------------------------------------- config
TEST(IdleConfig, SignalsReportsAndReclaimMode) {
  auto c = ParseConfig(R"toml(
[queues.interactive]
[queues.interactive.idle]
enabled = true
signals = ["gpu", "jupyter"]
busy_is_active = false
busy_max = "8h"
report_stale = "5m"
reclaim = "on-demand"
)toml", "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const IdlePolicy& p = c->FindQueue("interactive")->idle;
  EXPECT_TRUE(p.activity.sm_utilisation);
  EXPECT_TRUE(p.activity.memory_traffic);
  EXPECT_EQ(p.report_sources, std::vector<std::string>{"jupyter"});
  EXPECT_FALSE(p.busy_is_active);
  EXPECT_EQ(p.busy_max, 8 * kHour);
  EXPECT_EQ(p.report_stale, 5 * kMinute);
  EXPECT_EQ(p.reclaim, IdleReclaim::kOnDemand);

  auto d = ParseConfig("[queues.interactive]\n[queues.interactive.idle]\nenabled = true\n", "t.toml");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->FindQueue("interactive")->idle.report_sources.empty()) << "default: the GPU alone";
  EXPECT_EQ(d->FindQueue("interactive")->idle.reclaim, IdleReclaim::kAlways);

  struct Bad {
    const char* line;
    const char* says;
  };
  for (const Bad& b : {Bad{"signals = [\"jupyter\"]", "a GPU signal"},
                       Bad{"signals = [\"gpu\", \"jupiter\"]", "'jupiter'"},
                       Bad{"reclaim = \"lazy\"", "'lazy' is not one of: always, on-demand"},
                       Bad{"report_stale = \"0\"", "report_stale"},
                       Bad{"busy_max = \"8x\"", "busy_max"},
                       Bad{"busy_is_active = \"yes\"", "busy_is_active"}}) {
    auto r = ParseConfig(fmt::format("[queues.interactive]\n[queues.interactive.idle]\n{}\n", b.line), "t.toml");
    ASSERT_FALSE(r.ok()) << b.line;
    EXPECT_THAT(r.status().message(), HasSubstr(b.says)) << b.line;
    EXPECT_THAT(r.status().message(), HasSubstr("t.toml")) << b.line;
  }
}

}  // namespace
}  // namespace gpuslice::sched
