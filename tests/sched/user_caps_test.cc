// UserCaps (the per-user caps of a queue): the jobs cap is met before the share cap, each user
// and queue is booked apart, a queue without caps books nothing and blocks nothing, and a
// Reason comes exactly when Blocks says so, with the figures of the cap passed.
#include "sched/user_caps.h"

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

QueueConfig Queue(const char* name, MilliGpu max_milli, int max_jobs) {
  QueueConfig q;
  q.name = name;
  q.user_max_milli = max_milli;
  q.user_max_jobs = max_jobs;
  return q;
}

TEST(UserCaps, TheJobsCapCountsRunningJobs) {
  const QueueConfig q = Queue("batch", 0, 2);
  UserCaps caps;
  caps.Add(q, "ann", 500);
  EXPECT_FALSE(caps.Blocks(q, "ann", 500));
  caps.Add(q, "ann", 500);
  EXPECT_TRUE(caps.Blocks(q, "ann", 0));
  EXPECT_FALSE(caps.Blocks(q, "bob", 500));  // each user apart
  caps.Remove(q, "ann", 500);
  EXPECT_FALSE(caps.Blocks(q, "ann", 500));
  EXPECT_EQ(caps.Of("batch", "ann").jobs, 1);
  EXPECT_EQ(caps.Of("batch", "ann").milli, 500);
}

TEST(UserCaps, TheShareCapCountsWhatIsHeldPlusWhatIsAsked) {
  const QueueConfig q = Queue("batch", 1500, 0);
  UserCaps caps;
  caps.Add(q, "ann", 1000);
  EXPECT_FALSE(caps.Blocks(q, "ann", 500));  // exactly at the cap passes nothing
  EXPECT_TRUE(caps.Blocks(q, "ann", 501));
  const std::optional<UserCap> why = caps.Reason(q, "ann", 501);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->queue, "batch");
  EXPECT_EQ(why->user, "ann");
  EXPECT_EQ(why->limit, UserCap::Limit::kMilli);
  EXPECT_EQ(why->max, 1500);
  EXPECT_EQ(why->held, 1000);
  EXPECT_EQ(why->asked, 501);
  EXPECT_FALSE(caps.Reason(q, "ann", 500).has_value());
}

TEST(UserCaps, TheJobsCapIsReportedFirst) {
  const QueueConfig q = Queue("batch", 1000, 1);
  UserCaps caps;
  caps.Add(q, "ann", 1000);
  const std::optional<UserCap> why = caps.Reason(q, "ann", 1000);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->limit, UserCap::Limit::kJobs);
  EXPECT_EQ(why->max, 1);
  EXPECT_EQ(why->held, 1);
  EXPECT_EQ(why->asked, 1);
}

TEST(UserCaps, QueuesAreBookedApartAndAnUncappedOneNotAtAll) {
  const QueueConfig capped = Queue("batch", 0, 1);
  const QueueConfig free = Queue("interactive", 0, 0);
  UserCaps caps;
  caps.Add(free, "ann", 1000);
  EXPECT_EQ(caps.Of("interactive", "ann").jobs, 0);
  EXPECT_FALSE(caps.Blocks(free, "ann", 1000));
  EXPECT_FALSE(caps.Reason(free, "ann", 1000).has_value());
  EXPECT_FALSE(caps.Blocks(capped, "ann", 1000));
  caps.Add(capped, "ann", 1000);
  EXPECT_TRUE(caps.Blocks(capped, "ann", 1000));
  caps.Clear();
  EXPECT_FALSE(caps.Blocks(capped, "ann", 1000));
  EXPECT_EQ(caps.Of("batch", "ann").jobs, 0);
}

}  // namespace
}  // namespace gpuslice::sched
