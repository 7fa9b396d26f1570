// Teams in the scheduler (docs/teams.md): which team a job runs in, a team's limit, jobs within
// their team's guarantee first, and capacity lent to other teams taken back. Every case runs
// through SchedHarness (invariants after every event, the team books included).
#include <string>

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

}  // namespace
}  // namespace gpuslice::sched
