// A GPU serving MPS serves one Linux user: the MPS control daemon runs one server uid at a time
// and another user's clients wait at CUDA start-up until it exits, so a second user's mps job
// placed there would sit "running" and do nothing. The scheduler places another user's mps slice
// only where no other user's server runs, says so as the pending reason, and frees the GPU for
// anyone when its user's last mps slice ends. Every row runs through SchedHarness (invariants,
// which include "every mps slice on a GPU is of its MPS user", checked after every event).
#include <set>
#include <string>

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

std::string KindOf(SchedHarness& h, JobId job) {
  if (auto r = h.scheduler().PendingReason(job)) return std::string(WaitReasonKind(*r));
  return std::string(JobStateName(h.scheduler().jobs().at(job).state));
}

// The placement policies take different paths (indexed best-fit, generic Filter/Score, host
// states): the rule must hold on each.
class MpsUserTest : public ::testing::TestWithParam<std::string> {
 protected:
  Config WithPolicy() {
    Config c = DefaultConfig();
    for (QueueConfig& q : c.queues) q.placement = GetParam();
    return c;
  }
};

TEST_P(MpsUserTest, AnotherUsersMpsJobWaitsWithItsReasonAndStartsWhenTheServerIsFree) {
  SchedHarness h(WithPolicy());
  h.AddHost("1xH100-80GB");
  auto a1 = Only<StartSlice>(h.Submit("interactive kind=mps gpu=250m user=alice"));
  ASSERT_EQ(a1.size(), 1u);
  const JobId alice1 = h.last_job();
  EXPECT_EQ(h.scheduler().devices().begin()->second.mps_user, "alice");
  // Room for three more clients, but not for bob's: alice's server would make his hang.
  EXPECT_TRUE(Only<StartSlice>(h.Submit("interactive kind=mps gpu=250m user=bob")).empty());
  const JobId bob = h.last_job();
  EXPECT_EQ(KindOf(h, bob), "mps-other-user");
  auto why = h.scheduler().PendingReason(bob);
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(FormatWaitReason(*why), HasSubstr("runs the MPS server of user alice"));
  // alice's next mps job shares her server; a shared slice cannot (the GPU is in MPS mode).
  EXPECT_EQ(Only<StartSlice>(h.Submit("interactive kind=mps gpu=250m user=alice")).size(), 1u);
  const JobId alice2 = h.last_job();
  EXPECT_EQ(KindOf(h, bob), "mps-other-user");
  EXPECT_TRUE(Only<StartSlice>(h.Finish(alice1)).empty()) << "alice still has a client there";
  EXPECT_EQ(KindOf(h, bob), "mps-other-user");
  auto started = Only<StartSlice>(h.Finish(alice2));
  ASSERT_EQ(started.size(), 1u) << "alice's last mps slice ended: bob's server may start";
  EXPECT_EQ(started[0].job, bob);
  EXPECT_EQ(h.scheduler().devices().begin()->second.mps_user, "bob");
  EXPECT_EQ(h.violation(), "");
}

TEST_P(MpsUserTest, SecondUserGoesToAnotherGpuWhenThereIsOne) {
  SchedHarness h(WithPolicy());
  h.AddHost("2xH100-80GB");
  ASSERT_EQ(Only<StartSlice>(h.Submit("interactive kind=mps gpu=250m user=alice")).size(), 1u);
  auto bob = Only<StartSlice>(h.Submit("interactive kind=mps gpu=250m user=bob"));
  ASSERT_EQ(bob.size(), 1u);
  auto carol = Only<StartSlice>(h.Submit("interactive kind=mps gpu=250m user=carol"));
  EXPECT_TRUE(carol.empty()) << "both GPUs serve someone else";
  EXPECT_EQ(KindOf(h, h.last_job()), "mps-other-user");
  // Each GPU serves exactly one user.
  std::set<std::string> users;
  for (const auto& [ref, d] : h.scheduler().devices()) users.insert(d.mps_user);
  EXPECT_EQ(users, (std::set<std::string>{"alice", "bob"}));
  EXPECT_EQ(h.violation(), "");
}

TEST_P(MpsUserTest, AFullGpuIsNoRoomWhoeverItServes) {
  SchedHarness h(WithPolicy());
  h.AddHost("1xH100-80GB");
  ASSERT_EQ(Only<StartSlice>(h.Submit("interactive kind=mps gpu=1 user=alice")).size(), 1u);
  EXPECT_TRUE(Only<StartSlice>(h.Submit("interactive kind=mps gpu=250m user=bob")).empty());
  // No room at all: the reason is the room, not the user (the user's rule would not help).
  EXPECT_EQ(KindOf(h, h.last_job()), "no-device-fits");
  EXPECT_EQ(h.violation(), "");
}

INSTANTIATE_TEST_SUITE_P(Policies, MpsUserTest, ::testing::Values("best-fit", "spread", "gpuslice", "fgd"));

}  // namespace
}  // namespace gpuslice::sched
