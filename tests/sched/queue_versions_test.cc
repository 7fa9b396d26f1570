// QueueVersions (every version of every queue, and how each places): a reload adds versions and
// the earlier ones stay where they were, distinct; the current queue by name is the newest
// version, and a queue dropped by a reload is current no more; a version's policy and order
// are those of its own settings, not of the queue's later versions.
#include "sched/queue_versions.h"

#include <vector>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

QueueConfig Queue(const char* name, const char* placement) {
  QueueConfig q;
  q.name = name;
  q.placement = placement;
  return q;
}

TEST(QueueVersions, AReloadAddsVersionsAndEarlierOnesStay) {
  QueueVersions v;
  v.Install(std::vector{Queue("batch", "best-fit"), Queue("dev", "spread")});
  const QueueConfig* batch1 = v.Current("batch");
  const QueueConfig* dev1 = v.Current("dev");
  ASSERT_NE(batch1, nullptr);
  ASSERT_NE(dev1, nullptr);
  v.Install(std::vector{Queue("batch", "packing"), Queue("dev", "spread")});
  EXPECT_EQ(v.versions(), 4u);
  EXPECT_NE(v.Current("batch"), batch1) << "a reload makes a new version, even of an unchanged queue";
  EXPECT_NE(v.Current("dev"), dev1);
  // The old versions are where they were, with their own settings.
  EXPECT_EQ(batch1->name, "batch");
  EXPECT_EQ(batch1->placement, "best-fit");
  EXPECT_EQ(dev1->placement, "spread");
}

TEST(QueueVersions, TheCurrentQueueByNameIsTheNewest) {
  QueueVersions v;
  EXPECT_EQ(v.Current("batch"), nullptr);
  v.Install(std::vector{Queue("batch", "best-fit"), Queue("dev", "spread")});
  v.Install(std::vector{Queue("batch", "spread")});
  const QueueConfig* batch = v.Current("batch");
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(batch->placement, "spread");
  EXPECT_EQ(v.Current("dev"), nullptr) << "dropped by the reload";
  EXPECT_EQ(v.Current("bat"), nullptr);
}

TEST(QueueVersions, PolicyAndOrderComeFromTheVersion) {
  QueueVersions v;
  v.Install(std::vector{Queue("batch", "best-fit")});
  const QueueConfig* first = v.Current("batch");
  v.Install(std::vector{Queue("batch", "gpuslice")});
  const QueueConfig* second = v.Current("batch");

  const QueueVersions::Placement& p1 = v.PlacementOf(first);
  ASSERT_NE(p1.policy, nullptr);
  EXPECT_EQ(p1.policy->name(), "best-fit");
  EXPECT_EQ(p1.order, FastOrder::kTightest);

  const QueueVersions::Placement& p2 = v.PlacementOf(second);
  ASSERT_NE(p2.policy, nullptr);
  EXPECT_EQ(p2.policy->name(), "gpuslice");
  EXPECT_EQ(p2.order, FastOrder::kNone) << "not a built-in indexed order";
}

TEST(QueueVersions, BuiltInOrders) {
  EXPECT_EQ(FastOrderFor("best-fit"), FastOrder::kTightest);
  EXPECT_EQ(FastOrderFor("packing"), FastOrder::kTightest);
  EXPECT_EQ(FastOrderFor("spread"), FastOrder::kLoosest);
  EXPECT_EQ(FastOrderFor("fgd"), FastOrder::kNone);
}

}  // namespace
}  // namespace gpuslice::sched
