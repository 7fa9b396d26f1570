// The workload fragmentation-aware policies score against, learned from submissions: what the
// policies see must stay close to the counts, list every shape at once, and change rarely.
#include "sched/learned_workload.h"

#include <cmath>
#include <map>
#include <random>
#include <utility>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

using Shape = std::pair<int, MilliGpu>;

// The exact frequencies of the stream so far (no forgetting: the streams below stay inside one
// window).
std::map<Shape, double> Exact(const std::map<Shape, int>& n, int total) {
  std::map<Shape, double> f;
  for (const auto& [s, c] : n) f[s] = static_cast<double>(c) / total;
  return f;
}

TEST(LearnedWorkload, ListsEveryShapeAtOnceAndStaysWithinOneSixtyFourthOfTheCounts) {
  LearnedWorkload w;
  EXPECT_TRUE(w.Shapes().empty());
  std::mt19937_64 rng(3);
  const Shape kShapes[] = {{1, 100}, {1, 500}, {1, 1000}, {2, 1000}, {8, 1000}};
  std::map<Shape, int> n;
  int total = 0;
  double worst = 0;
  for (int i = 0; i < 4000; ++i) {
    // Skewed, and the rare 8-GPU shape first arrives late.
    const int k = i < 3000 ? static_cast<int>(rng() % 4) : static_cast<int>(rng() % 5);
    const Shape s = kShapes[k];
    const bool first_time = n.count(s) == 0;
    const std::uint64_t before = w.version();
    w.Count(s.first, s.second);
    ++n[s];
    ++total;
    if (first_time) {
      EXPECT_NE(w.version(), before) << "shape " << s.first << "x" << s.second << " at " << i;
    }
    std::map<Shape, double> exact = Exact(n, total);
    double sum = 0;
    for (const WorkloadShape& ws : w.Shapes()) {
      sum += ws.frequency;
      const auto it = exact.find({ws.num_gpus, ws.milli_per_gpu});
      ASSERT_NE(it, exact.end()) << "a shape never submitted: " << ws.num_gpus << "x" << ws.milli_per_gpu;
      worst = std::max(worst, std::abs(ws.frequency - it->second));
    }
    EXPECT_EQ(w.Shapes().size(), exact.size()) << "at " << i;
    EXPECT_NEAR(sum, 1.0, 1e-9);
  }
  EXPECT_LE(worst, 1.0 / LearnedWorkload::kRefresh);
  EXPECT_GT(worst, 0.0);  // it did lag: the shapes are not refreshed on every submission
}

TEST(LearnedWorkload, AStableStreamRefreshesRarely) {
  LearnedWorkload w;
  for (int i = 0; i < 5000; ++i) w.Count(1, 100 * (1 + i % 5));
  // Every submission at first (weight below kRefresh), then every 1/64 of the total: about
  // 64 * ln(5000 / 32) + 32 ~ 360, against 5000 for a refresh on every submission.
  EXPECT_LT(w.version(), 500u);
  EXPECT_GT(w.version(), 64u);
}

TEST(LearnedWorkload, ForgetsShapesNotSeenForAWhile) {
  LearnedWorkload w;
  w.Count(4, 1000);
  for (int i = 0; i < 4 * LearnedWorkload::kWindow; ++i) w.Count(1, 500);
  ASSERT_EQ(w.Shapes().size(), 1u);
  EXPECT_EQ(w.Shapes()[0].num_gpus, 1);
  EXPECT_EQ(w.Shapes()[0].milli_per_gpu, 500);
  EXPECT_DOUBLE_EQ(w.Shapes()[0].frequency, 1.0);
}

}  // namespace
}  // namespace gpuslice::sched
