// SliceTimers: the scheduler's book of when each slice's next timer fires, and of the slices
// reclaimable on demand.
#include "sched/slice_timers.h"

#include <map>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

std::vector<SliceId> DueAt(SliceTimers& t, Micros now) { return t.Due(now); }

TEST(SliceTimers, DueSlicesComeInSliceOrderNotTimeOrder) {
  SliceTimers t;
  t.Set(SliceId(3), 10);
  t.Set(SliceId(1), 30);
  t.Set(SliceId(2), 20);
  t.Set(SliceId(4), 40);
  EXPECT_EQ(t.NextWakeup(), 10);
  EXPECT_EQ(DueAt(t, 5), std::vector<SliceId>{});
  EXPECT_EQ(DueAt(t, 30), (std::vector<SliceId>{SliceId(1), SliceId(2), SliceId(3)}));
  EXPECT_EQ(DueAt(t, 40).size(), 4u);
  EXPECT_TRUE(t.Consistent());
}

TEST(SliceTimers, SetReplacesAndNeverClears) {
  SliceTimers t;
  t.Set(SliceId(1), 100);
  t.Set(SliceId(1), 50);  // moved earlier: one entry, the new time
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.At(SliceId(1)), 50);
  EXPECT_EQ(DueAt(t, 60), std::vector<SliceId>{SliceId(1)});
  t.Set(SliceId(1), 200);  // moved later: not due at the old time any more
  EXPECT_EQ(DueAt(t, 100), std::vector<SliceId>{});
  t.Set(SliceId(1), SliceTimers::kNever);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.At(SliceId(1)).has_value());
  EXPECT_EQ(t.NextWakeup(), SliceTimers::kNever);
  EXPECT_TRUE(t.Consistent());
}

TEST(SliceTimers, ClearForgetsOnlyThatSliceAndTwiceIsHarmless) {
  SliceTimers t;
  t.Set(SliceId(1), 10);
  t.Set(SliceId(2), 10);  // two slices at one instant
  t.Clear(SliceId(1));
  t.Clear(SliceId(1));
  t.Clear(SliceId(7));  // never timed
  EXPECT_EQ(DueAt(t, 10), std::vector<SliceId>{SliceId(2)});
  EXPECT_EQ(t.NextWakeup(), 10);
  t.Clear(SliceId(2));
  EXPECT_EQ(t.NextWakeup(), SliceTimers::kNever);
  EXPECT_TRUE(t.Consistent());
}

// Many moves of many slices (what a busy cluster does) against a plain map as the model.
TEST(SliceTimers, AgreesWithAPlainMapOverManyMoves) {
  SliceTimers t;
  std::map<SliceId, Micros> model;
  std::uint64_t x = 12345;
  for (int i = 0; i < 5000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const SliceId s(1 + (x >> 33) % 50);
    const Micros at = static_cast<Micros>((x >> 13) % 1000);
    switch ((x >> 60) % 3) {
      case 0: t.Clear(s); model.erase(s); break;
      default: t.Set(s, at); model[s] = at; break;
    }
    if (i % 97 == 0) {
      const Micros now = static_cast<Micros>((x >> 21) % 1000);
      std::vector<SliceId> want;
      for (const auto& [id, when] : model)
        if (when <= now) want.push_back(id);
      ASSERT_EQ(DueAt(t, now), want) << "step " << i;
    }
  }
  ASSERT_EQ(t.size(), model.size());
  Micros first = SliceTimers::kNever;
  for (const auto& [id, when] : model) first = std::min(first, when);
  EXPECT_EQ(t.NextWakeup(), first);
  EXPECT_TRUE(t.Consistent());
}

TEST(SliceTimers, TheDueListStaysAsItWasWhileItsSlicesAreRetimed) {
  SliceTimers t;
  t.Set(SliceId(2), 10);
  t.Set(SliceId(1), 20);
  const std::vector<SliceId>& due = t.Due(20);
  t.Set(SliceId(1), 100);  // what a tick does to each slice it visits
  t.Clear(SliceId(2));
  EXPECT_EQ(due, (std::vector<SliceId>{SliceId(1), SliceId(2)}));
  EXPECT_EQ(DueAt(t, 20), std::vector<SliceId>{}) << "the next call answers anew";
}

TEST(SliceTimers, AReclaimableSliceIsNotedOnceAndForgottenWhenItEnds) {
  SliceTimers t;
  EXPECT_FALSE(t.NewlyReclaimable());
  t.SetReclaimable(SliceId(3));
  t.SetReclaimable(SliceId(1));
  EXPECT_EQ(t.reclaimable(), (std::set<SliceId>{SliceId(1), SliceId(3)}));
  EXPECT_TRUE(t.NewlyReclaimable());
  EXPECT_FALSE(t.NewlyReclaimable()) << "said once";
  t.ClearReclaimable(SliceId(3));  // busy again
  EXPECT_FALSE(t.NewlyReclaimable());
  t.Set(SliceId(1), 50);
  t.Set(SliceId(1), 60);  // retimed: still reclaimable
  EXPECT_EQ(t.reclaimable(), std::set<SliceId>{SliceId(1)});
  t.Ended(SliceId(1));
  EXPECT_TRUE(t.reclaimable().empty());
  EXPECT_FALSE(t.At(SliceId(1)).has_value());
  EXPECT_TRUE(t.Consistent());
}

}  // namespace
}  // namespace gpuslice::sched
