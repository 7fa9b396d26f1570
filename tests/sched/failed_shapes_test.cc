// FailedShapes: a shape marked failed stays so for the rest of its pass only, and shapes that
// appear between passes start unfailed.
#include "sched/failed_shapes.h"

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

TEST(FailedShapes, AFailureLastsTheRestOfItsPassOnly) {
  FailedShapes f;
  f.NewPass(3);
  EXPECT_FALSE(f.Failed(0));
  f.MarkFailed(1);
  EXPECT_TRUE(f.Failed(1));
  EXPECT_FALSE(f.Failed(0));
  EXPECT_FALSE(f.Failed(2));
  f.NewPass(3);
  EXPECT_FALSE(f.Failed(1)) << "a new pass tries every shape again";
}

TEST(FailedShapes, ShapesAddedBetweenPassesStartUnfailed) {
  FailedShapes f;
  f.NewPass(1);
  f.MarkFailed(0);
  f.NewPass(4);
  for (int s = 0; s < 4; ++s) EXPECT_FALSE(f.Failed(s)) << s;
  f.MarkFailed(3);
  EXPECT_TRUE(f.Failed(3));
  f.NewPass(2);  // fewer shapes asked for: the books keep their size
  EXPECT_FALSE(f.Failed(3));
}

}  // namespace
}  // namespace gpuslice::sched
