// PendingQueue: the waiting jobs in serving order, the subsets the scheduler walks, and the
// jobs an admin holds out of the queue.
#include "sched/pending_queue.h"

#include <deque>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

struct Fixture {
  QueueConfig plain, urgent, reserving;
  std::deque<Resolved> records;  // stable addresses, as the scheduler's
  std::deque<JobView> views;
  Fixture() {
    plain.name = "plain";
    urgent.name = "urgent";
    urgent.priority = 10;
    reserving.name = "training";
    reserving.reserve_after = 60 * kSecond;
  }
  Resolved* Job(std::uint64_t id, const QueueConfig& q, SliceKind kind, Micros submit, int shape) {
    Resolved& r = records.emplace_back();
    r.job = JobId(id);
    r.queue = &q;
    r.kind = kind;
    r.submit = submit;
    r.shape = shape;
    r.view = &views.emplace_back();
    return &r;
  }
};

std::vector<std::uint64_t> Ids(const PendingQueue::Book& b) {
  std::vector<std::uint64_t> out;
  for (const auto& [k, r] : b) out.push_back(r->job.value());
  return out;
}

TEST(PendingQueue, ServesByPriorityThenSubmitThenId) {
  Fixture f;
  PendingQueue q;
  q.Add(f.Job(1, f.plain, SliceKind::kShared, 100, 0));
  q.Add(f.Job(2, f.urgent, SliceKind::kShared, 300, 0));
  q.Add(f.Job(4, f.plain, SliceKind::kShared, 50, 0));
  q.Add(f.Job(3, f.plain, SliceKind::kShared, 50, 0));
  EXPECT_EQ(Ids(q.all()), (std::vector<std::uint64_t>{2, 3, 4, 1}));
  EXPECT_EQ(q.size(), 4u);
}

TEST(PendingQueue, SubsetsFollowKindQueueAndShape) {
  Fixture f;
  PendingQueue q;
  Resolved* mig = f.Job(1, f.plain, SliceKind::kMig, 10, 2);
  Resolved* whole = f.Job(2, f.reserving, SliceKind::kWhole, 20, 1);
  Resolved* whole_plain = f.Job(3, f.plain, SliceKind::kWhole, 30, 1);  // its queue never reserves
  Resolved* shared = f.Job(4, f.plain, SliceKind::kShared, 40, 0);
  for (Resolved* r : {mig, whole, whole_plain, shared}) q.Add(r);
  EXPECT_EQ(Ids(q.mig()), std::vector<std::uint64_t>{1});
  ASSERT_EQ(q.reserving().size(), 1u);
  EXPECT_EQ(Ids(q.reserving().at(&f.reserving)), std::vector<std::uint64_t>{2});
  EXPECT_EQ(q.live_shapes(), (std::set<int>{0, 1, 2}));
  EXPECT_EQ(Ids(q.of_shape(1)), (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(q.count_of_shape(7), 0u) << "a shape never seen";

  q.Remove(*whole);
  q.Remove(*mig);
  EXPECT_TRUE(q.mig().empty());
  EXPECT_TRUE(q.reserving().at(&f.reserving).empty());
  EXPECT_EQ(q.live_shapes(), (std::set<int>{0, 1})) << "shape 2 has no waiting job left";
  EXPECT_EQ(Ids(q.of_shape(1)), std::vector<std::uint64_t>{3});
  EXPECT_FALSE(q.contains(*mig));
  EXPECT_TRUE(q.contains(*shared));
  q.Remove(*whole_plain);
  q.Remove(*shared);
  EXPECT_TRUE(q.empty());
  EXPECT_TRUE(q.live_shapes().empty());
}

// Removing and adding back (an admin's hold and release, a reload) keeps the job's place.
TEST(PendingQueue, ARemovedJobAddedBackKeepsItsPlace) {
  Fixture f;
  PendingQueue q;
  Resolved* a = f.Job(1, f.plain, SliceKind::kShared, 10, 0);
  Resolved* b = f.Job(2, f.plain, SliceKind::kShared, 20, 0);
  q.Add(a);
  q.Add(b);
  q.Remove(*a);
  EXPECT_EQ(Ids(q.of_shape(0)), std::vector<std::uint64_t>{2});
  q.Add(a);
  EXPECT_EQ(Ids(q.all()), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(Ids(q.of_shape(0)), (std::vector<std::uint64_t>{1, 2}));
}

// A held job leaves the queue and its subsets, flagged and counted, and comes back in its old
// place when released; a held job that ends is no longer counted.
TEST(PendingQueue, HeldJobsWaitOutOfTheQueueAndComeBackInPlace) {
  Fixture f;
  PendingQueue q;
  Resolved* a = f.Job(1, f.plain, SliceKind::kMig, 10, 0);
  Resolved* b = f.Job(2, f.plain, SliceKind::kMig, 20, 0);
  Resolved* c = f.Job(3, f.plain, SliceKind::kShared, 30, 1);
  for (Resolved* r : {a, b, c}) q.Add(r);
  q.Hold(*a);
  q.Hold(*c);
  EXPECT_EQ(q.held(), 2u);
  EXPECT_TRUE(a->view->held);
  EXPECT_FALSE(b->view->held);
  EXPECT_EQ(Ids(q.all()), std::vector<std::uint64_t>{2});
  EXPECT_EQ(Ids(q.mig()), std::vector<std::uint64_t>{2});
  EXPECT_EQ(q.live_shapes(), std::set<int>{0}) << "shape 1's only job is held";
  q.Release(*a);
  EXPECT_EQ(q.held(), 1u);
  EXPECT_FALSE(a->view->held);
  EXPECT_EQ(Ids(q.all()), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(Ids(q.of_shape(0)), (std::vector<std::uint64_t>{1, 2}));
  q.EndHeld(*c);
  EXPECT_EQ(q.held(), 0u);
  EXPECT_FALSE(c->view->held);
  EXPECT_FALSE(q.contains(*c));
}

// The walk shows the jobs in the given order, a shape's next job only after its head, and none
// of a shape after its turn ends; the job shown may leave the queue (it started).
TEST(PendingQueue, WalksByShapeInOrderUntilAShapeFails) {
  Fixture f;
  PendingQueue q;
  // Shape 0: jobs 1, 4, 6; shape 1: 2, 5; shape 2: 3 (urgent, so first).
  const std::vector<std::pair<std::uint64_t, int>> plain = {{1, 0}, {2, 1}, {4, 0}, {5, 1}, {6, 0}};
  for (const auto& [id, shape] : plain) q.Add(f.Job(id, f.plain, SliceKind::kShared, 10 * static_cast<Micros>(id), shape));
  q.Add(f.Job(3, f.urgent, SliceKind::kShared, 30, 2));
  const auto later = [](const PendingQueue::Head& a, const PendingQueue::Head& b) { return a.key > b.key; };
  std::vector<std::uint64_t> shown;
  q.WalkByShape(later, [&](const Resolved& r) {
    shown.push_back(r.job.value());
    if (r.job == JobId(4)) return true;  // shape 0 fails at its second job
    q.Remove(r);                          // the others start
    return false;
  });
  EXPECT_EQ(shown, (std::vector<std::uint64_t>{3, 1, 2, 4, 5}));
  EXPECT_EQ(Ids(q.all()), (std::vector<std::uint64_t>{4, 6})) << "shape 0's jobs from the failed one on wait";

  // Another order: the newest first.
  const auto older = [](const PendingQueue::Head& a, const PendingQueue::Head& b) { return a.key.submit < b.key.submit; };
  q.Add(f.Job(7, f.plain, SliceKind::kShared, 70, 1));
  shown.clear();
  q.WalkByShape(older, [&](const Resolved& r) {
    shown.push_back(r.job.value());
    return false;  // nothing starts: a shape's jobs follow in the queue's order
  });
  EXPECT_EQ(shown, (std::vector<std::uint64_t>{7, 4, 6}));
}

}  // namespace
}  // namespace gpuslice::sched
