// Teams in the scheduler (docs/teams.md): which team a job runs in, a team's limit, jobs within
// their team's guarantee first, and capacity lent to other teams taken back. Every case runs
// through SchedHarness (invariants after every event, the team books included).
#include <numbers>
#include <ostream>
#include <string>
#include <vector>

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

// One queue of whole GPUs; vision (alice, carol) and nlp (bob, carol) are each guaranteed 2,
// nlp may hold at most 3; dave is in no team.
Config TeamsConfig(bool preemptible) {
  const std::string text = std::string(R"(
default_queue = "training"
[queues.training]
kinds = ["whole"]
reserve_after = "0"
preemptible = )") + (preemptible ? "true" : "false") + R"(
[teams]
defaults = { carol = "vision" }
[teams.vision]
members = ["alice", "carol"]
guarantee = { training = 2 }
[teams.nlp]
members = ["bob", "carol"]
guarantee = { training = 2 }
limit = { training = 3 }
)";
  auto c = ParseConfig(text, "teams.toml");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

JobState StateOf(SchedHarness& h, JobId j) { return h.scheduler().jobs().at(j).state; }

TEST(Teams, AJobRunsInTheTeamItNamesElseTheUsersDefault) {
  SchedHarness h(TeamsConfig(false));
  h.AddHost("4xH100-80GB");
  h.Submit("training user=carol");
  EXPECT_EQ(h.scheduler().jobs().at(h.last_job()).team, "vision") << "carol's default";
  h.Submit("training user=carol team=nlp");
  EXPECT_EQ(h.scheduler().jobs().at(h.last_job()).team, "nlp");
  h.Submit("training user=dave");
  EXPECT_EQ(h.scheduler().jobs().at(h.last_job()).team, "") << "in no team";
  auto r = Only<Reject>(h.Submit("training user=alice team=nlp"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_THAT(std::string(r[0].status.message()), HasSubstr("team 'nlp': alice is not one of its members"));
  r = Only<Reject>(h.Submit("training user=alice team=nosuch"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_THAT(std::string(r[0].status.message()), HasSubstr("team 'nosuch' does not exist"));
  EXPECT_EQ(h.violation(), "");
}

TEST(Teams, NamingATeamWhereThereAreNoneIsRefused) {
  SchedHarness h;
  h.AddHost("1xH100-80GB");
  auto r = Only<Reject>(h.Submit("training user=alice team=vision"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_THAT(std::string(r[0].status.message()), HasSubstr("this site has no teams"));
}

TEST(Teams, ATeamAtItsLimitWaitsWithItsReasonAndStartsWhenItsJobEnds) {
  SchedHarness h(TeamsConfig(false));
  h.AddHost("8xH100-80GB");
  JobId first;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Only<StartSlice>(h.Submit("training user=bob")).size(), 1u);
    if (i == 0) first = h.last_job();
  }
  EXPECT_TRUE(Only<StartSlice>(h.Submit("training user=bob")).empty()) << "nlp's limit is 3 GPUs";
  const JobId fourth = h.last_job();
  auto why = h.scheduler().PendingReason(fourth);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(WaitReasonKind(*why), "team-limit");
  EXPECT_THAT(FormatWaitReason(*why), HasSubstr("team nlp holds 3 of 3 GPU allowed in queue 'training'"));
  // carol, in nlp too, runs in vision by default: the limit is nlp's, not hers.
  EXPECT_EQ(Only<StartSlice>(h.Submit("training user=carol")).size(), 1u);
  EXPECT_EQ(Only<StartSlice>(h.Finish(first)).size(), 1u);
  EXPECT_EQ(StateOf(h, fourth), JobState::kRunning);
  EXPECT_EQ(h.violation(), "");
}

TEST(Teams, AJobWithinItsTeamsGuaranteeGoesBeforeEarlierJobsBeyondTheirs) {
  SchedHarness h(TeamsConfig(false));
  h.AddHost("4xH100-80GB");
  JobId alice_first;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(Only<StartSlice>(h.Submit("training user=alice")).size(), 1u);  // idle GPUs are lent
    if (i == 0) alice_first = h.last_job();
  }
  h.Submit("training user=alice");  // vision is past its guarantee of 2
  const JobId alice_waiting = h.last_job();
  h.Submit("training user=bob");  // nlp holds nothing of its 2
  const JobId bob = h.last_job();
  auto started = Only<StartSlice>(h.Finish(alice_first));
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].job, bob) << "bob's job, later in the queue, is within nlp's guarantee";
  EXPECT_EQ(StateOf(h, alice_waiting), JobState::kPending);
  EXPECT_EQ(h.violation(), "");
}

TEST(Teams, InANonPreemptibleQueueLentGpusComeBackOnlyAsJobsEnd) {
  SchedHarness h(TeamsConfig(false));
  h.AddHost("4xH100-80GB");
  for (int i = 0; i < 4; ++i) h.Submit("training user=alice");
  auto ds = h.Submit("training user=bob");
  EXPECT_TRUE(Only<Preempt>(ds).empty());
  EXPECT_TRUE(Only<StartSlice>(ds).empty());
  EXPECT_EQ(h.violation(), "");
}

TEST(Teams, LentGpusAreTakenBackNewestFirstButNeverBelowTheLendersGuarantee) {
  SchedHarness h(TeamsConfig(true));
  h.AddHost("4xH100-80GB");
  std::vector<JobId> alice;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(Only<StartSlice>(h.Submit("training user=alice")).size(), 1u);
    alice.push_back(h.last_job());
    h.Advance(kMinute);  // distinct start times: "newest" is well defined
  }
  // bob's first job: vision holds 4 of its guaranteed 2, so its newest slice goes back.
  auto ds = h.Submit("training user=bob");
  auto pre = Only<Preempt>(ds);
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0].job, alice[3]) << "the newest borrowed slice";
  EXPECT_TRUE(pre[0].requeue);
  EXPECT_THAT(pre[0].reason, HasSubstr("taken back for team nlp"));
  const JobId bob1 = h.last_job();
  EXPECT_EQ(StateOf(h, bob1), JobState::kRunning);
  EXPECT_EQ(StateOf(h, alice[3]), JobState::kPending) << "requeued, not ended";
  // The second: vision gives back one more and is then at its guarantee.
  pre = Only<Preempt>(h.Submit("training user=bob"));
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0].job, alice[2]);
  // The third is past nlp's own guarantee: nothing is taken back, vision keeps its 2.
  ds = h.Submit("training user=bob");
  EXPECT_TRUE(Only<Preempt>(ds).empty());
  EXPECT_EQ(StateOf(h, h.last_job()), JobState::kPending);
  EXPECT_EQ(StateOf(h, alice[0]), JobState::kRunning);
  EXPECT_EQ(StateOf(h, alice[1]), JobState::kRunning);
  EXPECT_EQ(h.violation(), "");
}

TEST(Teams, AJobOfNoTeamIsAllBorrowedAndAJobNeverTakesFromItsOwnTeam) {
  SchedHarness h(TeamsConfig(true));
  h.AddHost("2xH100-80GB");
  h.Submit("training user=dave");
  const JobId dave = h.last_job();
  h.Advance(kMinute);
  h.Submit("training user=bob");
  const JobId bob1 = h.last_job();
  h.Advance(kMinute);
  // bob's second job is within nlp's guarantee: dave's slice (no team) is taken, not bob's own.
  auto pre = Only<Preempt>(h.Submit("training user=bob"));
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0].job, dave);
  EXPECT_EQ(StateOf(h, bob1), JobState::kRunning);
  EXPECT_EQ(h.violation(), "");
}

TEST(Teams, TakeBackTakesNewestFirstAcrossLenders) {
  SchedHarness h(TeamsConfig(true));
  h.AddHost("4xH100-80GB");
  std::vector<JobId> alice;
  for (int i = 0; i < 3; ++i) {
    h.Submit("training user=alice");
    alice.push_back(h.last_job());
    h.Advance(kMinute);
  }
  h.Submit("training user=dave");  // no team: the newest slice, all borrowed
  const JobId dave = h.last_job();
  h.Advance(kMinute);
  auto pre = Only<Preempt>(h.Submit("training user=bob"));
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0].job, dave) << "the newest of every lender's slices";
  pre = Only<Preempt>(h.Submit("training user=bob"));
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0].job, alice[2]) << "then vision's newest, the one GPU past its guarantee";
  EXPECT_EQ(StateOf(h, alice[1]), JobState::kRunning);
  EXPECT_EQ(h.violation(), "");
}

// MIG take-back: vision (alice) and nlp (bob) in a queue of MIG slices, preemptible or not, each
// guaranteed the given amount there (a 7g instance counts 1 GPU).
Config MigTeamsConfig(bool preemptible, const std::string& vision, const std::string& nlp) {
  const std::string text = fmt::format(R"(
default_queue = "inference"
[queues.inference]
kinds = ["mig"]
preemptible = {}
[teams.vision]
members = ["alice"]
guarantee = {{ inference = {} }}
[teams.nlp]
members = ["bob"]
guarantee = {{ inference = {} }}
)", preemptible ? "true" : "false", vision, nlp);
  auto c = ParseConfig(text, "mig-teams.toml");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

// Feeds the ReconfigureDone of every layout change in `ds` (and of those that follow).
void ApplyLayouts(SchedHarness& h, std::vector<Decision> ds) {
  for (auto rc = Only<ReconfigureMig>(ds); !rc.empty(); rc = Only<ReconfigureMig>(ds)) {
    ds.clear();
    for (const ReconfigureMig& r : rc) {
      std::vector<Decision> more = h.Feed(ReconfigureDone{h.now(), r.device, true, r.layout, ""});
      ds.insert(ds.end(), more.begin(), more.end());
    }
  }
}

struct MigTakeBackCase {
  std::string name;
  std::vector<std::string> hosts;
  bool preemptible;
  std::string vision_guarantee, nlp_guarantee;
  std::vector<std::string> alice;  // started in order, a minute apart, each on its own instance
  std::string bob;                 // nlp holds nothing when it comes
  int taken;                       // the index in `alice` of the slice taken back; -1: none
  int drained = -1;                // an admin drains the device of this slice of `alice` first
};
void PrintTo(const MigTakeBackCase& c, std::ostream* os) { *os << c.name; }

class TeamsMigTakeBack : public ::testing::TestWithParam<MigTakeBackCase> {};

TEST_P(TeamsMigTakeBack, TakesTheNewestBorrowedInstanceOfItsProfileOnItsModel) {
  const MigTakeBackCase& c = GetParam();
  SchedHarness h(MigTeamsConfig(c.preemptible, c.vision_guarantee, c.nlp_guarantee));
  for (const std::string& host : c.hosts) h.AddHost(host);
  std::vector<JobId> alice;
  for (const std::string& spec : c.alice) {
    ApplyLayouts(h, h.Submit(spec));
    alice.push_back(h.last_job());
    ASSERT_EQ(StateOf(h, alice.back()), JobState::kRunning) << spec;
    h.Advance(kMinute);  // distinct start times: "newest" is well defined
  }
  if (c.drained >= 0) {
    const SliceView& s = h.scheduler().slices().at(
        h.scheduler().jobs().at(alice[static_cast<std::size_t>(c.drained)]).slice);
    h.Feed(AdminDrain{h.now(), DeviceRef{s.node, s.devices.front()}, true, "bad fan"});
  }
  std::vector<Decision> ds = h.Submit(c.bob);
  const JobId bob = h.last_job();
  std::vector<Preempt> pre = Only<Preempt>(ds);
  if (c.taken < 0) {
    EXPECT_TRUE(pre.empty()) << "taken back: job " << pre.front().job.value();
    EXPECT_EQ(StateOf(h, bob), JobState::kPending);
    for (JobId a : alice) EXPECT_EQ(StateOf(h, a), JobState::kRunning);
  } else {
    ASSERT_EQ(pre.size(), 1u) << "one instance makes room";
    EXPECT_EQ(pre[0].job, alice[static_cast<std::size_t>(c.taken)]);
    EXPECT_TRUE(pre[0].requeue);
    EXPECT_THAT(pre[0].reason, HasSubstr(fmt::format(
                                   "taken back for team nlp: job {} is within the team's guarantee in queue 'inference'",
                                   bob.value())));
    EXPECT_EQ(StateOf(h, bob), JobState::kRunning) << "on the instance given back";
    EXPECT_EQ(StateOf(h, pre[0].job), JobState::kPending) << "requeued, not ended";
  }
  EXPECT_EQ(h.violation(), "");
}

// 30GiB: a 7g.40gb on an A100-40GB (the whole GPU); 4GiB: a 1g.5gb; 70GiB: a 7g.80gb on an
// A100-80GB or an H100-80GB, the same profile id on both.
INSTANTIATE_TEST_SUITE_P(
    Cases, TeamsMigTakeBack,
    ::testing::Values(
        MigTakeBackCase{"NewestInstanceOfItsProfile", {"3xA100-40GB"}, true, "0.5", "1",
                        {"inference user=alice mem=30GiB", "inference user=alice mem=30GiB",
                         "inference user=alice mem=4GiB"},
                        "inference user=bob mem=30GiB", 1},
        MigTakeBackCase{"NoInstanceOfItsProfile", {"2xA100-40GB"}, true, "0.5", "1",
                        {"inference user=alice mem=30GiB", "inference user=alice mem=30GiB"},
                        "inference user=bob mem=4GiB", -1},
        MigTakeBackCase{"NewestOnItsModel", {"1xH100-80GB", "1xA100-80GB"}, true, "0", "1",
                        {"inference user=alice mem=70GiB model=H100-80GB",
                         "inference user=alice mem=70GiB model=A100-80GB"},
                        "inference user=bob mem=70GiB model=H100-80GB", 0},
        MigTakeBackCase{"NotOnADeviceAnAdminDrained", {"3xA100-40GB"}, true, "0", "1",
                        {"inference user=alice mem=30GiB", "inference user=alice mem=30GiB",
                         "inference user=alice mem=30GiB"},
                        "inference user=bob mem=30GiB", 1, /*drained=*/2},
        MigTakeBackCase{"NotFromANonPreemptibleQueue", {"2xA100-40GB"}, false, "0.5", "1",
                        {"inference user=alice mem=30GiB", "inference user=alice mem=30GiB"},
                        "inference user=bob mem=30GiB", -1},
        MigTakeBackCase{"NeverBelowTheLendersGuarantee", {"3xA100-40GB"}, true, "2", "1",
                        {"inference user=alice mem=30GiB", "inference user=alice mem=30GiB",
                         "inference user=alice mem=4GiB"},
                        "inference user=bob mem=30GiB", -1},
        MigTakeBackCase{"NotPastTheTakersGuaranteeWithTheInstance", {"2xA100-40GB"}, true, "0.5", "0.5",
                        {"inference user=alice mem=30GiB", "inference user=alice mem=30GiB"},
                        "inference user=bob mem=30GiB", -1}),
    [](const ::testing::TestParamInfo<MigTakeBackCase>& i) { return i.param.name; });

TEST(Teams, AMigRequestWaitsForTheLayoutBeingAppliedRatherThanTakeBack) {
  SchedHarness h(MigTeamsConfig(true, "0", "1"));
  h.AddHost("2xA100-40GB");
  ApplyLayouts(h, h.Submit("inference user=alice mem=30GiB"));  // the first GPU, whole, borrowed
  const JobId alice = h.last_job();
  ASSERT_EQ(StateOf(h, alice), JobState::kRunning);
  h.Advance(kMinute);
  // The second GPU is free: the planner lays it out for bob, and nothing is taken back for him.
  std::vector<Decision> ds = h.Submit("inference user=bob mem=30GiB");
  const JobId bob = h.last_job();
  EXPECT_TRUE(Only<Preempt>(ds).empty());
  auto rc = Only<ReconfigureMig>(ds);
  ASSERT_EQ(rc.size(), 1u);
  auto started = Only<StartSlice>(h.Feed(ReconfigureDone{h.now(), rc[0].device, true, rc[0].layout, ""}));
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].job, bob);
  EXPECT_EQ(StateOf(h, alice), JobState::kRunning);
  EXPECT_EQ(h.violation(), "");
}

TEST(Teams, AMigRequestOfATeamAtItsGuaranteeDoesNotHoldBackALaterTakeBack) {
  auto c = ParseConfig(R"(
default_queue = "training"
[queues.inference]
kinds = ["mig"]
preemptible = true
[queues.training]
kinds = ["whole"]
reserve_after = "0"
preemptible = true
[teams.vision]
members = ["alice"]
[teams.nlp]
members = ["bob"]
guarantee = { inference = 1, training = 1 }
)", "two-queues.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  SchedHarness h(*c);
  h.AddHost("2xA100-40GB");
  h.Feed(AdminMigMode{h.now(), DeviceRef{NodeId(1), DeviceIndex(1)}, false});  // whole GPUs only
  ApplyLayouts(h, h.Submit("inference user=bob mem=30GiB"));  // nlp at its guarantee there
  ASSERT_EQ(StateOf(h, h.last_job()), JobState::kRunning);
  h.Submit("training user=alice");  // the other GPU, borrowed
  const JobId alice = h.last_job();
  ASSERT_EQ(StateOf(h, alice), JobState::kRunning);
  h.Advance(kMinute);
  EXPECT_TRUE(Only<Preempt>(h.Submit("inference user=bob mem=30GiB")).empty()) << "past nlp's guarantee";
  // The MIG request, first in queue order, would pass nlp's guarantee with any instance: the
  // training job after it, within nlp's guarantee there, takes its GPU back.
  auto pre = Only<Preempt>(h.Submit("training user=bob"));
  ASSERT_EQ(pre.size(), 1u);
  EXPECT_EQ(pre[0].job, alice);
  EXPECT_THAT(pre[0].reason, HasSubstr("queue 'training'"));
  EXPECT_EQ(StateOf(h, h.last_job()), JobState::kRunning);
  EXPECT_EQ(h.violation(), "");
}

// Fair share: one queue of whole GPUs, no guarantees (all a team holds is borrowed), a half-life
// of an hour; vision (alice) and nlp (bob) of the given weights.
Config FairShareConfig(int vision_weight, int nlp_weight, const std::string& half_life = "1h") {
  const std::string text = fmt::format(R"(
default_queue = "training"
[queues.training]
kinds = ["whole"]
reserve_after = "0"
[teams]
half_life = "{}"
[teams.vision]
members = ["alice"]
weight = {}
[teams.nlp]
members = ["bob"]
weight = {}
)", half_life, vision_weight, nlp_weight);
  auto c = ParseConfig(text, "fair.toml");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

const TeamStanding& StandingOf(const std::vector<TeamStanding>& all, const std::string& name) {
  for (const TeamStanding& s : all)
    if (s.name == name) return s;
  ADD_FAILURE() << "no team " << name;
  return all.front();
}

TEST(TeamsFairShare, UsageIsBorrowedGpuTimeDecayedByTheHalfLife) {
  SchedHarness h(FairShareConfig(1, 1));
  h.AddHost("2xH100-80GB");
  ASSERT_EQ(Only<StartSlice>(h.Submit("training user=alice")).size(), 1u);
  const JobId job = h.last_job();
  h.Advance(kHour);
  // Holding 1 GPU for one half-life h: ∫0^h 2^(−(h−s)/h) ds = h/(2 ln 2) GPU-hours for h = 1 hour.
  const double one_half_life = 1.0 / (2.0 * std::numbers::ln2);
  auto st = h.scheduler().TeamStandings();
  EXPECT_NEAR(StandingOf(st, "vision").usage_gpu_hours, one_half_life, 1e-9);
  EXPECT_EQ(StandingOf(st, "vision").borrowed, 1000);
  EXPECT_EQ(StandingOf(st, "nlp").usage_gpu_hours, 0.0);
  EXPECT_EQ(StandingOf(st, "nlp").rank, 1);
  EXPECT_EQ(StandingOf(st, "vision").rank, 2);
  h.Finish(job);
  h.Advance(kHour);  // another half-life with nothing held: half of it is left
  st = h.scheduler().TeamStandings();
  EXPECT_NEAR(StandingOf(st, "vision").usage_gpu_hours, one_half_life / 2, 1e-9);
  EXPECT_EQ(StandingOf(st, "vision").borrowed, 0);
  h.Advance(40 * kHour);
  EXPECT_LT(h.scheduler().TeamStandings()[0].usage_gpu_hours, 1e-9) << "decays towards nothing";
  EXPECT_EQ(h.violation(), "");
}

TEST(TeamsFairShare, WhatATeamHoldsWithinItsGuaranteeIsNotUsage) {
  const std::string text = R"(
default_queue = "training"
[queues.training]
kinds = ["whole"]
[teams.vision]
members = ["alice"]
guarantee = { training = 1 }
)";
  auto c = ParseConfig(text, "g.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  SchedHarness h(*c);
  h.AddHost("2xH100-80GB");
  h.Submit("training user=alice");
  h.Advance(kHour);
  EXPECT_EQ(h.scheduler().TeamStandings()[0].usage_gpu_hours, 0.0) << "within its guarantee";
  h.Submit("training user=alice");
  h.Advance(kHour);
  EXPECT_GT(h.scheduler().TeamStandings()[0].usage_gpu_hours, 0.0) << "its second GPU is borrowed";
  EXPECT_EQ(h.scheduler().TeamStandings()[0].borrowed, 1000);
  EXPECT_EQ(h.violation(), "");
}

// Two GPUs, both busy: vision's since 0, nlp's since 1 hour. At 2 hours vision has used about
// 1.08 decayed GPU-hours and nlp 0.72; vision's waiting job is queued before nlp's, and the GPU
// that frees then goes to the team of lower usage over weight.
struct Contest {
  JobId vision_waiting, nlp_waiting;
  std::vector<StartSlice> started;
};
Contest RunContest(const Config& c) {
  SchedHarness h(c);
  h.AddHost("2xH100-80GB");
  h.Submit("training user=alice");
  const JobId a1 = h.last_job();
  h.Advance(kHour);
  h.Submit("training user=bob");
  h.Advance(kHour - 2 * kMinute);
  Contest out;
  h.Submit("training user=alice");
  out.vision_waiting = h.last_job();
  h.Advance(kMinute);
  h.Submit("training user=bob");
  out.nlp_waiting = h.last_job();
  h.Advance(kMinute);
  out.started = Only<StartSlice>(h.Finish(a1));
  EXPECT_EQ(h.violation(), "");
  return out;
}

TEST(TeamsFairShare, TheOverQuotaPoolIsServedByUsageOverWeightNotQueueOrder) {
  Contest c = RunContest(FairShareConfig(1, 1));
  ASSERT_EQ(c.started.size(), 1u);
  EXPECT_EQ(c.started[0].job, c.nlp_waiting) << "nlp used less: its later job goes first";
  // vision weighted 2: its 1.08 over 2 is less than nlp's 0.72 over 1.
  c = RunContest(FairShareConfig(2, 1));
  ASSERT_EQ(c.started.size(), 1u);
  EXPECT_EQ(c.started[0].job, c.vision_waiting) << "weight divides usage";
}

TEST(TeamsFairShare, UsageForgottenAfterManyHalfLivesLeavesQueueOrder) {
  // A half-life of a minute: by the contest, the hours of use are long forgotten by both teams
  // (each holds one GPU at the end, so their usage is equal and queue order decides).
  Contest c = RunContest(FairShareConfig(1, 1, "1m"));
  ASSERT_EQ(c.started.size(), 1u);
  EXPECT_EQ(c.started[0].job, c.vision_waiting);
}

TEST(TeamsFairShare, AReloadKeepsUsageAndAppliesTheNewHalfLifeFromThen) {
  SchedHarness h(FairShareConfig(1, 1));
  h.AddHost("2xH100-80GB");
  h.Submit("training user=alice");
  const JobId job = h.last_job();
  h.Advance(kHour);
  const double before = h.scheduler().TeamStandings()[0].usage_gpu_hours;
  h.Finish(job);
  h.Feed(ConfigReload{h.now(), FairShareConfig(1, 1, "2h")});
  EXPECT_DOUBLE_EQ(h.scheduler().TeamStandings()[0].usage_gpu_hours, before);
  h.Advance(2 * kHour);  // one new half-life
  EXPECT_NEAR(h.scheduler().TeamStandings()[0].usage_gpu_hours, before / 2, 1e-9);
  EXPECT_EQ(h.violation(), "");
}

TEST(TeamsFairShare, AJobOfNoTeamComesAfterEveryTeamOverQuota) {
  SchedHarness h(FairShareConfig(1, 1));
  h.AddHost("1xH100-80GB");
  h.Submit("training user=alice");
  const JobId a1 = h.last_job();
  h.Advance(3 * kHour);
  h.Submit("training user=dave");  // no team, queued first
  const JobId dave = h.last_job();
  h.Advance(kMinute);
  h.Submit("training user=alice");
  const JobId a2 = h.last_job();
  auto started = Only<StartSlice>(h.Finish(a1));
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].job, a2) << "vision, despite its usage, before a job of no team";
  EXPECT_EQ(StateOf(h, dave), JobState::kPending);
  EXPECT_EQ(h.violation(), "");
}

}  // namespace
}  // namespace gpuslice::sched
