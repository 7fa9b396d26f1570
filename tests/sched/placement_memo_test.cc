// PlacementMemo (placement by host state's memo slots and view results) through its interface:
// memo shapes ignore the MPS user and team; a shape keeps its slot and generation while it is
// selected under one policy and workload; the slot selected longest ago goes to a new shape;
// a new workload version gives up every slot; view results are found again only for the
// generation that computed them, and survive other live slots' lookups.
#include "sched/placement_memo.h"

#include <cstdint>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

// A shared request of `milli` per GPU, of request shape `shape`.
Resolved Request(int shape, MilliGpu milli, const QueueConfig* queue = nullptr) {
  Resolved r;
  r.shape = shape;
  r.kind = SliceKind::kShared;
  r.milli = milli;
  r.queue = queue;
  return r;
}

std::unique_ptr<PlacementPolicy> Policy(std::string_view name) { return MakePolicy(name).value(); }

TEST(PlacementMemo, MemoShapesIgnoreTheMpsUserAndTeam) {
  PlacementMemo memo;
  QueueConfig q1, q2;
  Resolved a = Request(0, 250, &q1);
  a.kind = SliceKind::kMps;
  a.mps_user = "alice";
  a.team = 0;
  Resolved b = a;
  b.shape = 1;
  b.mps_user = "bob";
  b.team = 1;
  Resolved other_share = Request(2, 500, &q1);
  Resolved other_queue = Request(3, 250, &q2);
  other_queue.kind = SliceKind::kMps;
  EXPECT_EQ(memo.ShapeOf(a), 0);
  EXPECT_EQ(memo.ShapeOf(b), 0);
  EXPECT_EQ(memo.ShapeOf(other_share), 1);
  EXPECT_EQ(memo.ShapeOf(other_queue), 2);
  EXPECT_EQ(memo.ShapeOf(b), 0);
}

TEST(PlacementMemo, AShapeKeepsItsSlotUnderOnePolicyAndWorkload) {
  PlacementMemo memo;
  const auto gpuslice = Policy("gpuslice");
  const auto fgd = Policy("fgd");
  const PlacementMemo::Ticket t = memo.Select(Request(0, 250), *gpuslice, 1);
  EXPECT_NE(t.generation, 0u);
  memo.Select(Request(1, 500), *gpuslice, 1);
  const PlacementMemo::Ticket again = memo.Select(Request(0, 250), *gpuslice, 1);
  EXPECT_EQ(again.slot, t.slot);
  EXPECT_EQ(again.generation, t.generation);
  EXPECT_EQ(memo.current().generation, t.generation);
  // Another policy scores differently: its results are not those of the slot.
  const PlacementMemo::Ticket other = memo.Select(Request(0, 250), *fgd, 1);
  EXPECT_NE(other.generation, t.generation);
}

TEST(PlacementMemo, TheSlotSelectedLongestAgoGoesToANewShape) {
  PlacementMemo memo;
  const auto policy = Policy("gpuslice");
  std::vector<PlacementMemo::Ticket> tickets;
  std::set<int> slots;
  for (int shape = 0; shape < HostStates::kMemoSlots; ++shape) {
    tickets.push_back(memo.Select(Request(shape, 10 * (shape + 1)), *policy, 1));
    slots.insert(tickets.back().slot);
  }
  EXPECT_EQ(slots.size(), static_cast<std::size_t>(HostStates::kMemoSlots));  // all in use
  memo.Select(Request(0, 10), *policy, 1);  // shape 0 is now the most recent; shape 1 the oldest
  const PlacementMemo::Ticket fresh = memo.Select(Request(99, 999), *policy, 1);
  EXPECT_EQ(fresh.slot, tickets[1].slot);
  EXPECT_GT(fresh.generation, tickets.back().generation);
  const PlacementMemo::Ticket kept = memo.Select(Request(0, 10), *policy, 1);
  EXPECT_EQ(kept.slot, tickets[0].slot);
  EXPECT_EQ(kept.generation, tickets[0].generation);
  // Shape 1 lost its slot: it comes back with a new generation (its old results are stale).
  const PlacementMemo::Ticket back = memo.Select(Request(1, 20), *policy, 1);
  EXPECT_NE(back.generation, tickets[1].generation);
}

TEST(PlacementMemo, ANewWorkloadVersionGivesUpEverySlot) {
  PlacementMemo memo;
  const auto policy = Policy("gpuslice");
  const PlacementMemo::Ticket t0 = memo.Select(Request(0, 250), *policy, 1);
  const PlacementMemo::Ticket t1 = memo.Select(Request(1, 500), *policy, 1);
  EXPECT_NE(memo.Select(Request(0, 250), *policy, 2).generation, t0.generation);
  EXPECT_NE(memo.Select(Request(1, 500), *policy, 2).generation, t1.generation);
}

// Counts compute() calls of PlacementMemo::Lookup().
struct Counted {
  int calls = 0;
  const PlacementMemo::ViewResult& Lookup(PlacementMemo& memo, int model, const std::vector<GpuView>& views,
                                          int usable) {
    return memo.Lookup(model, views, usable, [&] {
      ++calls;
      PlacementMemo::ViewResult r;
      r.fits = true;
      r.score = calls;
      r.gpus = {0};
      return r;
    });
  }
};

const GpuView kUnusable{0, 0, false};

TEST(PlacementMemo, ViewResultsAreComputedOncePerModelAndViews) {
  PlacementMemo memo;
  const auto policy = Policy("gpuslice");
  memo.Select(Request(0, 250), *policy, 1);
  Counted c;
  const std::vector<GpuView> views{{1000, 80, true}, {500, 40, true}, kUnusable};
  EXPECT_EQ(c.Lookup(memo, 0, views, 2).score, 1);
  EXPECT_EQ(c.Lookup(memo, 0, views, 2).score, 1);
  EXPECT_EQ(c.calls, 1);
  c.Lookup(memo, 1, views, 2);  // another model
  EXPECT_EQ(c.calls, 2);
  c.Lookup(memo, 0, {{1000, 80, true}, {500, 40, true}, kUnusable, kUnusable}, 2);  // one more GPU
  EXPECT_EQ(c.calls, 3);
  c.Lookup(memo, 0, {{1000, 80, true}, {400, 40, true}, kUnusable}, 2);  // another share free
  EXPECT_EQ(c.calls, 4);
  c.Lookup(memo, 0, {{1000, 80, true}, {500, 30, true}, kUnusable}, 2);  // other memory free
  EXPECT_EQ(c.calls, 5);
  EXPECT_EQ(c.Lookup(memo, 0, views, 2).score, 1);
  EXPECT_EQ(c.calls, 5);
}

// Two views, both usable, looked up under shape `shape` (its own slot) and workload `workload`.
class PlacementMemoGenerations : public ::testing::Test {
 protected:
  double LookupUnder(int shape, std::uint64_t workload) {
    memo_.Select(Request(shape, 250 * (shape + 1)), *policy_, workload);
    return counted_.Lookup(memo_, 0, views_, 2).score;
  }
  PlacementMemo memo_;
  const std::unique_ptr<PlacementPolicy> policy_ = Policy("gpuslice");
  const std::vector<GpuView> views_{{1000, 80, true}, {500, 40, true}};
  Counted counted_;
};

TEST_F(PlacementMemoGenerations, AnotherGenerationsResultsAreNotFound) {
  EXPECT_EQ(LookupUnder(0, 1), 1);
  EXPECT_EQ(LookupUnder(0, 2), 2);  // the workload changed
  EXPECT_EQ(counted_.calls, 2);
}

TEST_F(PlacementMemoGenerations, ALiveSlotsResultsSurviveAnotherSlotsLookups) {
  EXPECT_EQ(LookupUnder(0, 1), 1);
  EXPECT_EQ(LookupUnder(1, 1), 2);  // its own result, filed beside the first
  EXPECT_EQ(LookupUnder(0, 1), 1);
  EXPECT_EQ(counted_.calls, 2);
}

}  // namespace
}  // namespace gpuslice::sched
