// WorkloadModel (the learned workload as placement policies see it) against a plain reference:
// a LearnedWorkload fed the same requests and every host's device count, with each shape's
// supply share worked out per host. Through submissions and hosts growing, shrinking and
// leaving, Shapes() equals the reference and version() moves exactly when Shapes() does.
#include "sched/workload_model.h"

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace gpuslice::sched {
namespace {

// The reference: the learned shapes, each with the GPUs of the hosts that have at least
// max(1, num_gpus) devices over all GPUs (1 where no host has enough).
std::vector<WorkloadShape> Expected(const LearnedWorkload& learned, const std::map<int, std::size_t>& hosts) {
  std::vector<WorkloadShape> out(learned.Shapes().begin(), learned.Shapes().end());
  std::int64_t all = 0;
  for (const auto& [host, size] : hosts) all += static_cast<std::int64_t>(size);
  for (WorkloadShape& s : out) {
    std::int64_t eligible = 0;
    for (const auto& [host, size] : hosts) {
      if (static_cast<int>(size) >= std::max(1, s.num_gpus)) eligible += static_cast<std::int64_t>(size);
    }
    s.supply_share = eligible > 0 ? static_cast<double>(eligible) / static_cast<double>(all) : 1;
  }
  return out;
}

bool Same(std::span<const WorkloadShape> a, std::span<const WorkloadShape> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const WorkloadShape& x, const WorkloadShape& y) {
    return x.num_gpus == y.num_gpus && x.milli_per_gpu == y.milli_per_gpu && x.frequency == y.frequency &&
           x.supply_share == y.supply_share;
  });
}

TEST(WorkloadModel, VersionIsZeroUntilFirstAskedAndMovesOnlyWhenTheShapesDo) {
  WorkloadModel w;
  EXPECT_EQ(w.version(), 0u);
  EXPECT_TRUE(w.Shapes().empty());
  EXPECT_EQ(w.version(), 1u);
  w.HostResized(0, 4);  // a host, but no shape to share it: nothing a policy sees changed
  EXPECT_TRUE(w.Shapes().empty());
  EXPECT_EQ(w.version(), 1u);
  w.Count(2, 1000);
  ASSERT_EQ(w.Shapes().size(), 1u);
  EXPECT_EQ(w.version(), 2u);
  w.HostResized(4, 5);  // every GPU can still take the shape: share 1 before and after
  EXPECT_EQ(w.Shapes()[0].supply_share, 1);
  EXPECT_EQ(w.version(), 2u);
}

TEST(WorkloadModel, SupplySharesCountTheHostsBigEnoughForEachShape) {
  struct Case {
    std::vector<std::size_t> hosts;  // device counts
    int gpus;                        // the one shape submitted
    double share;
  };
  const Case kCases[] = {
      {{8, 1}, 1, 1},                  // any host takes one GPU
      {{8, 1}, 2, 8.0 / 9},            // only the 8-GPU host
      {{8, 8, 2, 2}, 4, 16.0 / 20},    // two of four hosts
      {{2, 2}, 8, 1},                  // none big enough: nothing to keep for it
      {{}, 1, 1},                      // no hosts
  };
  for (const Case& c : kCases) {
    WorkloadModel w;
    for (std::size_t n : c.hosts) w.HostResized(0, n);
    w.Count(c.gpus, 1000);
    ASSERT_EQ(w.Shapes().size(), 1u);
    EXPECT_EQ(w.Shapes()[0].supply_share, c.share) << c.hosts.size() << " hosts, " << c.gpus << " GPUs";
  }
}

TEST(WorkloadModel, MatchesThePerHostReferenceThroughSubmissionsAndHostChanges) {
  WorkloadModel w;
  LearnedWorkload learned;
  std::map<int, std::size_t> hosts;  // host -> devices (> 0)
  std::vector<WorkloadShape> last;
  std::uint64_t version = w.version();
  std::mt19937_64 rng(33);
  const std::pair<int, MilliGpu> kShapes[] = {{1, 250}, {1, 1000}, {2, 1000}, {4, 1000}, {8, 1000}};
  int changes = 0;
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    if (op <= 1) {
      const auto [gpus, milli] = kShapes[rng() % std::size(kShapes)];
      w.Count(gpus, milli);
      learned.Count(gpus, milli);
    } else {
      const int host = static_cast<int>(rng() % 12);
      auto it = hosts.find(host);
      const std::size_t before = it == hosts.end() ? 0 : it->second;
      const std::size_t after = op == 2 ? std::min<std::size_t>(before + 1, 8) : (before > 0 ? before - 1 : 0);
      if (after == before) continue;
      w.HostResized(before, after);
      if (after == 0) {
        hosts.erase(host);
      } else {
        hosts[host] = after;
      }
    }
    const std::vector<WorkloadShape> want = Expected(learned, hosts);
    const std::span<const WorkloadShape> got = w.Shapes();
    ASSERT_TRUE(Same(got, want)) << "step " << step;
    const bool changed = version == 0 || !Same(want, last);
    ASSERT_EQ(w.version() != version, changed) << "step " << step;
    changes += changed;
    version = w.version();
    last = want;
  }
  EXPECT_GT(changes, 50);  // shares and refreshes did move it
}

}  // namespace
}  // namespace gpuslice::sched
