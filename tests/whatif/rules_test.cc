// Each scenario rule on a small history with a known answer, replayed through the scheduler:
// a reclaim window cuts exactly the sessions idle longer than it (plus the configured grace);
// right-sizing picks the smallest MIG profile that holds the measured peak; time slicing
// rounds the measured peak up to the step; a maximum duration cuts and resubmits; unknown
// utilisation is never idle (nor busy) and never reclaimed; the GPU count changes by node.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/catalogue.h"
#include "sim/cluster.h"
#include "whatif/run.h"
#include "whatif/scenario.h"
#include "whatif/verdict.h"

namespace gpuslice::whatif {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAreArray;

constexpr const char* kConfig = R"(
default_queue = "interactive"
[queues.interactive]
kinds = ["whole", "shared"]
default_kind = "whole"
time_limit = "0"
idle = { enabled = false, window = "1h", grace = "10m" }
[queues.training]
kinds = ["whole"]
max_duration = "0"
[queues.inference]
kinds = ["whole"]
)";

// A history builder: jobs on `nodes`, under kConfig.
class HistoryBuilder {
 public:
  explicit HistoryBuilder(std::string cluster = "1x8:H100-80GB") {
    auto c = sched::ParseConfig(kConfig, "test.toml");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    h_.config = *c;
    auto n = NodesFromSpec(cluster);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    h_.nodes = *n;
    h_.source = "test";
  }
  // A job: id, queue, submit (min), GPUs (or a share < 1000 milli), activity text, memory peak.
  HistoryBuilder& Job(std::string id, std::string queue, int submit_min, MilliGpu milli, std::string activity,
                      Bytes memory_peak = -1, int gpus = 1) {
    HistoryJob j;
    j.job.id = std::move(id);
    j.job.queue = std::move(queue);
    j.job.user = "u-" + j.job.id;
    j.job.submit = submit_min * kMinute;
    auto runs = sim::ParseActivity(activity, 1000 * kHour);
    EXPECT_TRUE(runs.ok()) << runs.status().ToString();
    j.job.activity = *runs;
    for (const sim::ActivityRun& r : j.job.activity) j.job.duration += r.length;
    j.job.request.num_gpus = gpus;
    j.job.request.milli_per_gpu = milli;
    j.held_milli = milli * gpus;
    j.memory_peak = memory_peak;
    j.job.tag = static_cast<std::uint32_t>(h_.jobs.size());
    h_.to = std::max(h_.to, j.job.submit + j.job.duration);
    h_.jobs.push_back(std::move(j));
    return *this;
  }
  const History& h() const { return h_; }

 private:
  History h_;
};

ScenarioResult Replay(const History& h, const Scenario& s, const Assumptions& a = {}) {
  EXPECT_TRUE(CheckHistory(h).ok()) << CheckHistory(h).ToString();
  auto r = RunScenario(h, s, a, 1);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ScenarioResult{};
}

Scenario Reclaim(Micros window, std::optional<Micros> grace = std::nullopt) {
  Scenario s;
  s.name = "reclaim";
  s.reclaim = ReclaimCure{};
  s.reclaim->window = window;
  s.reclaim->grace = grace;
  return s;
}

std::set<std::string> CutIds(const ScenarioResult& r) {
  std::set<std::string> ids;
  for (const CutSession& c : r.cut_list) ids.insert(c.id);
  return ids;
}

double GpuHours(MilliUs v) { return static_cast<double>(v) / kMilliUsPerGpuHour; }

// Sessions busy 5 min, idle for their stretch, busy 5 min again; all fit at once.
HistoryBuilder IdleStretches() {
  HistoryBuilder b;
  for (int idle : {10, 25, 35, 39, 40, 41, 60, 120}) {
    b.Job(fmt::format("idle{}m", idle), "interactive", 0, 1000, fmt::format("a5m@50 i{}m a5m@50", idle));
  }
  return b;
}

TEST(ReclaimRule, CutsExactlyTheSessionsIdleLongerThanWindowPlusConfiguredGrace) {
  const HistoryBuilder b = IdleStretches();
  // As recorded the queue reclaims nothing.
  const ScenarioResult base = Replay(b.h(), Scenario{});
  EXPECT_EQ(base.cut, 0);
  // 30 min window + the queue's configured 10 min grace: idle for more than 40 min.
  const ScenarioResult r30 = Replay(b.h(), Reclaim(30 * kMinute));
  EXPECT_EQ(CutIds(r30), (std::set<std::string>{"idle41m", "idle60m", "idle120m"}));
  EXPECT_EQ(r30.cut, 3);
  EXPECT_EQ(r30.cut_reclaimed, 3);
  for (const CutSession& c : r30.cut_list) EXPECT_EQ(c.held_before, 5 * kMinute + 40 * kMinute) << c.id;
  // Each came back for its last 5 busy minutes: a follow-up that starts at once (room), so
  // the owners pay the restart cost only.
  EXPECT_EQ(r30.cut_with_work_left, 3);
  EXPECT_EQ(r30.follow_ups, 3);
  EXPECT_EQ(r30.owner_cost, 3 * Assumptions{}.restart_cost);
  // Given back: the idle time past 40 min of each cut session.
  EXPECT_NEAR(GpuHours(base.held - r30.held), (1 + 20 + 80) / 60.0, 1e-9);
  // Busy time is the same work in both: cutting idle sessions never loses busy hours.
  EXPECT_EQ(r30.busy, base.busy);

  const ScenarioResult r15 = Replay(b.h(), Reclaim(15 * kMinute));
  EXPECT_EQ(CutIds(r15), (std::set<std::string>{"idle35m", "idle39m", "idle40m", "idle41m", "idle60m", "idle120m"}));
  // A grace of the scenario's own replaces the configured one: idle for more than 15 min.
  const ScenarioResult r15g0 = Replay(b.h(), Reclaim(15 * kMinute, 0));
  EXPECT_EQ(r15g0.cut, 7);
  EXPECT_FALSE(CutIds(r15g0).contains("idle10m"));
}

TEST(ReclaimRule, SessionIdleToItsEndIsCutWithoutCostAndWithoutFollowUp) {
  HistoryBuilder b;
  b.Job("forgotten", "interactive", 0, 1000, "a10m@60 i5h");
  const ScenarioResult r = Replay(b.h(), Reclaim(30 * kMinute));
  EXPECT_EQ(r.cut, 1);
  EXPECT_EQ(r.cut_with_work_left, 0);
  EXPECT_EQ(r.follow_ups, 0);
  EXPECT_EQ(r.owner_cost, 0);
  ASSERT_EQ(r.cut_list.size(), 1u);
  EXPECT_EQ(r.cut_list[0].came_back, -1);
  EXPECT_NEAR(GpuHours(r.held), (10 + 40) / 60.0, 1e-9);
  EXPECT_NEAR(GpuHours(r.idle), 40 / 60.0, 1e-9);
}

TEST(UnknownRule, UnmeasuredTimeIsNeverIdleNorBusyNorReclaimed) {
  HistoryBuilder b;
  b.Job("blind", "interactive", 0, 1000, "u10h");                  // nothing measured at all
  b.Job("gap", "interactive", 0, 1000, "i20m u1h i20m a5m@40");    // idle, blind, idle: never 30 min in a row
  b.Job("seen", "interactive", 0, 1000, "i45m a5m@40");            // measured idle: cut
  const ScenarioResult r = Replay(b.h(), Reclaim(30 * kMinute, 0));
  EXPECT_EQ(CutIds(r), (std::set<std::string>{"seen"}));
  EXPECT_EQ(r.unmeasured_jobs, 1);
  // The blind job's 10 h and the gap's hour are unknown, never idle or busy.
  EXPECT_NEAR(GpuHours(r.unknown), 11.0, 1e-9);
  EXPECT_NEAR(GpuHours(r.idle), (20 + 20 + 30) / 60.0, 1e-9);
  EXPECT_EQ(r.held, r.busy + r.idle + r.unknown);
  // As recorded: the same split (nothing cut), unknown still apart.
  const ScenarioResult base = Replay(b.h(), Scenario{});
  EXPECT_NEAR(GpuHours(base.unknown), 11.0, 1e-9);
  EXPECT_NEAR(GpuHours(base.idle), (20 + 20 + 45) / 60.0, 1e-9);
}

// The MIG profile each inference job ran on after right-sizing, by job id ("" : not MIG).
std::map<std::string, std::string> ProfilesAfterRightSizing(const History& h, int headroom) {
  Scenario s;
  s.name = "right-size";
  s.right_size = RightSizeCure{};
  s.right_size->headroom_percent = headroom;
  auto p = Prepare(h, s, {});
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  std::map<std::string, std::string> out;
  sim::ReplayHooks hooks;
  hooks.on_slice_end = [&](const sim::SliceEnd& e) {
    std::string name;
    if (e.mig) {
      auto m = FindModel(*e.model);
      EXPECT_TRUE(m.ok());
      name = (*m)->FindProfileById(e.mig->profile_id)->name;
    }
    out[e.job->id] = name;
  };
  const sim::Cluster cluster(p->nodes);
  sim::RunReplay(cluster, p->jobs, p->config, "t", {}, {}, {}, hooks);
  return out;
}

TEST(RightSizeRule, PicksTheSmallestMigProfileThatHoldsTheMeasuredPeakPlusHeadroom) {
  HistoryBuilder b("1x4:H100-80GB");
  b.Job("p4", "inference", 0, 1000, "a2h@10", 4 * kGiB)      // 4.4 GiB  -> 1g.10gb (9.75 GiB)
      .Job("p9", "inference", 0, 1000, "a2h@10", 9 * kGiB)   // 9.9 GiB  -> 1g.20gb: the headroom tips it
      .Job("p17", "inference", 0, 1000, "a2h@10", 17 * kGiB) // 18.7 GiB -> 1g.20gb (19.62)
      .Job("p30", "inference", 0, 1000, "a2h@10", 30 * kGiB) // 33 GiB   -> 3g.40gb (39.5)
      .Job("p50", "inference", 0, 1000, "a2h@10", 50 * kGiB) // 55 GiB   -> 7g.80gb
      .Job("p75", "inference", 0, 1000, "a2h@10", 75 * kGiB) // 82.5 GiB -> no instance: as recorded
      .Job("blind", "inference", 0, 1000, "a2h@10");         // no peak measured: as recorded
  const auto profiles = ProfilesAfterRightSizing(b.h(), 10);
  EXPECT_EQ(profiles.at("p4"), "1g.10gb");
  EXPECT_EQ(profiles.at("p9"), "1g.20gb");
  EXPECT_EQ(profiles.at("p17"), "1g.20gb");
  EXPECT_EQ(profiles.at("p30"), "3g.40gb");
  EXPECT_EQ(profiles.at("p50"), "7g.80gb");
  EXPECT_EQ(profiles.at("p75"), "");
  EXPECT_EQ(profiles.at("blind"), "");
  // Without headroom 9 GiB fits the smallest.
  EXPECT_EQ(ProfilesAfterRightSizing(b.h(), 0).at("p9"), "1g.10gb");

  Scenario s;
  s.name = "mig";
  s.right_size = RightSizeCure{};
  const ScenarioResult r = Replay(b.h(), s);
  EXPECT_EQ(r.resized, 5);
  EXPECT_EQ(r.not_resized_unmeasured, 1);
  // Held: five instances of 1/7, 2 x 1/7, 1/7... (compute share) instead of whole GPUs.
  EXPECT_LT(r.held, Replay(b.h(), Scenario{}).held);
}

TEST(RightSizeRule, NothingToDoWithoutMigCapableGpus) {
  HistoryBuilder b("1x2:GPU");
  b.Job("p4", "inference", 0, 1000, "a1h@10", 4 * kGiB);
  Scenario s;
  s.name = "mig";
  s.right_size = RightSizeCure{};
  const ScenarioResult r = Replay(b.h(), s);
  EXPECT_EQ(r.resized, 0);
  EXPECT_THAT(r.notes, ElementsAre(::testing::HasSubstr("no MIG-capable GPU")));
}

TEST(TimeSliceRule, MeasuredPeakRoundedUpToTheStepAndUnmeasuredLeftAlone) {
  HistoryBuilder b("1x1:H100-80GB");
  b.Job("busy30", "interactive", 0, 1000, "a1h@30 i1h", 6 * kGiB)  // peak 30% of a GPU -> 500m
      .Job("idle", "interactive", 0, 1000, "i2h", 2 * kGiB)        // never busy -> the step, 250m
      .Job("full", "interactive", 0, 1000, "a2h@95")               // 95% -> a whole GPU: unchanged
      .Job("blind", "interactive", 0, 1000, "u2h");                // unmeasured: unchanged
  Scenario s;
  s.name = "slice";
  s.time_slice = TimeSliceCure{};
  auto p = Prepare(b.h(), s, {});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::map<std::string, std::pair<std::optional<sched::SliceKind>, MilliGpu>> got;
  for (const sim::ReplayJob& j : p->jobs) got[j.id] = {j.kind, j.request.milli_per_gpu};
  EXPECT_EQ(got["busy30"], std::make_pair(std::optional(sched::SliceKind::kShared), MilliGpu{500}));
  EXPECT_EQ(got["idle"], std::make_pair(std::optional(sched::SliceKind::kShared), MilliGpu{250}));
  EXPECT_EQ(got["full"].second, 1000);
  EXPECT_EQ(got["blind"].second, 1000);
  EXPECT_EQ(p->resized, 2);
  EXPECT_EQ(p->not_resized_unmeasured, 1);
  // On one GPU the two sliced sessions now run beside each other; as recorded they queued.
  const ScenarioResult sliced = Replay(b.h(), s);
  const ScenarioResult base = Replay(b.h(), Scenario{});
  auto p95 = [](const ScenarioResult& r) { return r.waits.at(std::find_if(r.waits.begin(), r.waits.end(), [](const QueueWaits& w) { return w.queue == "interactive"; }) - r.waits.begin()).p95; };
  EXPECT_LT(p95(sliced), p95(base));
  // The busy job's used GPU-hours are its work (30% x 1 GPU x 1 h) either way.
  EXPECT_EQ(sliced.used, base.used);
}

TEST(MaxDurationRule, CutsAtTheLimitAndResubmitsTheRest) {
  HistoryBuilder b;
  b.Job("long", "training", 0, 1000, "a30h@80", -1, 2).Job("short", "training", 0, 1000, "a5h@80", -1, 2);
  Scenario s;
  s.name = "cap";
  s.max_duration = MaxDurationCure{};
  const ScenarioResult r = Replay(b.h(), s);
  EXPECT_EQ(r.cut_time_limit, 1);
  EXPECT_EQ(r.follow_ups, 1);
  EXPECT_EQ(r.cut_with_work_left, 1);
  ASSERT_EQ(r.cut_list.size(), 1u);
  EXPECT_EQ(r.cut_list[0].id, "long");
  EXPECT_EQ(r.cut_list[0].held_before, 24 * kHour);
  // Same work: 30 h + 5 h on 2 GPUs, the long one in two pieces.
  EXPECT_NEAR(GpuHours(r.held), 70.0, 1e-9);
  EXPECT_EQ(r.busy, Replay(b.h(), Scenario{}).busy);
  // Without resubmission the rest is lost: the cut has no follow-up.
  s.max_duration->resubmit = false;
  const ScenarioResult lost = Replay(b.h(), s);
  EXPECT_EQ(lost.follow_ups, 0);
  EXPECT_NEAR(GpuHours(lost.held), 58.0, 1e-9);
}

TEST(GpuChange, RemovesFromTheLastNodesAndAddsNodesLikeTheLast) {
  auto n = NodesFromSpec("3x4:H100-80GB");
  ASSERT_TRUE(n.ok());
  auto gpus = [](const std::vector<sim::TraceNode>& v) {
    std::vector<int> out;
    for (const auto& t : v) out.push_back(t.gpus);
    return out;
  };
  EXPECT_THAT(gpus(ResizeNodes(*n, -5)), ElementsAre(4, 3));
  EXPECT_THAT(gpus(ResizeNodes(*n, 6)), ElementsAre(4, 4, 4, 4, 2));
  EXPECT_THAT(gpus(ResizeNodes(*n, -100)), ElementsAre(1));
  EXPECT_EQ(ResizeNodes(*n, 6).back().model, "H100-80GB");
  EXPECT_EQ((GpuChange{-10, true}.For(100)), -10);
  EXPECT_EQ((GpuChange{-10, true}.For(8)), -1);  // rounded, at least one
  EXPECT_EQ((GpuChange{10, true}.For(4)), 1);
  EXPECT_EQ((GpuChange{-8, false}.For(4)), -3);  // at least one GPU stays
}

// The as-recorded scenario alone, a 30 min p95 target, and the verdict on it.
struct Decided {
  std::vector<ScenarioResult> results;
  Verdict verdict;
};
Decided DecideAsRecorded(const History& h, int threads) {
  WhatifSpec spec;
  spec.scenarios.emplace_back();
  spec.scenarios.back().name = "as-recorded";
  spec.verdict.p95_wait = 30 * kMinute;
  spec.verdict.search_steps = 8;
  RunOptions o;
  o.threads = threads;
  auto results = RunScenarios(h, spec, o);
  EXPECT_TRUE(results.ok()) << results.status().ToString();
  auto v = Decide(h, spec, *results, o);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  return {*results, *v};
}

TEST(Verdict, FindsTheFewestGpusThatKeepWaitsWithinTarget) {
  // 6 whole-GPU jobs of 2 h at once on 8 GPUs: 6 GPUs hold them without waiting; with 5 one
  // job waits 2 h.
  HistoryBuilder b;
  for (int i = 0; i < 6; ++i) b.Job(fmt::format("t{}", i), "training", 0, 1000, "a2h@90");
  const Decided d = DecideAsRecorded(b.h(), 2);
  const Verdict* v = &d.verdict;
  EXPECT_EQ(v->code, "fewer_gpus") << v->text;
  EXPECT_EQ(v->gpus_needed, 6) << v->text;
  EXPECT_EQ(v->resolution, 0) << v->text;
  EXPECT_THAT(v->text, ::testing::HasSubstr("2 fewer GPUs"));
  // One job more: one GPU fewer, said in the singular.
  HistoryBuilder b7;
  for (int i = 0; i < 7; ++i) b7.Job(fmt::format("t{}", i), "training", 0, 1000, "a2h@90");
  const Decided d7 = DecideAsRecorded(b7.h(), 2);
  EXPECT_EQ(d7.verdict.gpus_needed, 7) << d7.verdict.text;
  EXPECT_THAT(d7.verdict.text, ::testing::HasSubstr("fits on 1 fewer GPU —"));
  // Results do not depend on the thread count.
  const Decided one = DecideAsRecorded(b.h(), 1);
  EXPECT_EQ(one.results[0].held, d.results[0].held);
  EXPECT_EQ(one.results[0].waits, d.results[0].waits);
  EXPECT_EQ(one.verdict.gpus_needed, v->gpus_needed);
}

TEST(Verdict, SaysMoreGpusWhenEvenTheCuresLeaveWaitsOverTarget) {
  HistoryBuilder b("1x2:H100-80GB");
  for (int i = 0; i < 4; ++i) b.Job(fmt::format("t{}", i), "training", 0, 1000, "a3h@90");
  const Decided d = DecideAsRecorded(b.h(), 2);
  const Verdict* v = &d.verdict;
  EXPECT_EQ(v->code, "more_gpus") << v->text;
  EXPECT_EQ(v->gpus_needed, 4) << v->text;
  EXPECT_FALSE(v->recorded_meets);
}

}  // namespace
}  // namespace gpuslice::whatif

namespace gpuslice::whatif {
namespace {

// GPU-hour totals hold at the scale of a large site: 400 jobs of 8 GPUs for 900 hours each are
// 2.88 million GPU-hours, past what milli-GPU-µs in 64 bits can count (about 2.56 million).
TEST(Totals, AYearOfALargeSiteDoesNotOverflow) {
  HistoryBuilder b("400x8:H100-80GB");
  for (int i = 0; i < 400; ++i) b.Job(fmt::format("big{}", i), "training", 0, 1000, "a900h@90", -1, 8);
  const ScenarioResult r = Replay(b.h(), Scenario{});
  EXPECT_NEAR(GpuHours(r.held), 400.0 * 8 * 900, 1e-6);
  EXPECT_NEAR(GpuHours(r.busy), 400.0 * 8 * 900, 1e-6);
  EXPECT_NEAR(GpuHours(r.capacity), 3200.0 * 900, 1e-6);
  EXPECT_EQ(r.idle, 0);
}

}  // namespace
}  // namespace gpuslice::whatif
