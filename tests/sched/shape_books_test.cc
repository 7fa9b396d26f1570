// ShapeBooks: requests that differ in any field of the shape key are different shapes, numbered
// in order of first use, whoever asks; a pass's failures cover the shapes made before it.
#include "sched/shape_books.h"

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

TEST(ShapeBooks, NumbersShapesInOrderOfFirstUse) {
  QueueConfig q;
  Resolved a;
  a.queue = &q;
  a.kind = SliceKind::kShared;
  a.milli = 250;
  Resolved b = a;
  b.milli = 500;
  ShapeBooks books;
  EXPECT_EQ(books.IdOf(b), 0);
  EXPECT_EQ(books.IdOf(a), 1);
  EXPECT_EQ(books.IdOf(b), 0);
  EXPECT_EQ(books.size(), 2u);
}

// One field of the key changed at a time makes a new shape; who asks, when, and the id a
// record already holds do not.
TEST(ShapeBooks, EveryFieldOfTheKeyAndNothingElseMakesAShape) {
  QueueConfig q1, q2;
  Resolved base;
  base.queue = &q1;
  base.kind = SliceKind::kMps;
  base.gpus = 1;
  base.milli = 250;
  base.memory = Bytes{1} << 30;
  base.mig_need = 0;
  base.model = "H100-80GB";
  base.mps_user = "alice";
  base.team = 0;
  const std::vector<std::function<void(Resolved&)>> changes = {
      [](Resolved& r) { r.kind = SliceKind::kShared; },  [](Resolved& r) { r.gpus = 2; },
      [](Resolved& r) { r.milli = 500; },                [](Resolved& r) { r.memory = Bytes{2} << 30; },
      [](Resolved& r) { r.mig_need = Bytes{10} << 30; }, [](Resolved& r) { r.model = "A100-80GB"; },
      [&](Resolved& r) { r.queue = &q2; },               [](Resolved& r) { r.mps_user = "bob"; },
      [](Resolved& r) { r.team = 1; },
  };
  ShapeBooks books;
  ASSERT_EQ(books.IdOf(base), 0);
  for (std::size_t i = 0; i < changes.size(); ++i) {
    Resolved r = base;
    changes[i](r);
    EXPECT_EQ(books.IdOf(r), static_cast<int>(i + 1)) << "change " << i;
  }
  Resolved same = base;
  same.job = JobId(42);
  same.user = "carol";
  same.submit = 1000;
  same.limit = 60;
  same.shape = 7;
  EXPECT_EQ(books.IdOf(same), 0);
  EXPECT_EQ(books.size(), changes.size() + 1);
}

TEST(ShapeBooks, APassForgetsTheLastOnesFailuresAndCoversNewShapes) {
  QueueConfig q;
  Resolved a;
  a.queue = &q;
  ShapeBooks books;
  const int first = books.IdOf(a);
  books.NewPass();
  books.MarkFailed(first);
  EXPECT_TRUE(books.Failed(first));
  a.milli = 500;
  const int second = books.IdOf(a);  // a shape made during the pass
  books.NewPass();
  EXPECT_FALSE(books.Failed(first));
  EXPECT_FALSE(books.Failed(second));
  books.MarkFailed(second);
  EXPECT_TRUE(books.Failed(second));
  EXPECT_FALSE(books.Failed(first));
}

}  // namespace
}  // namespace gpuslice::sched
