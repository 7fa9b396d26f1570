// The placement framework (Fits, Place) and the simple policies.
#include <map>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

using ::testing::HasSubstr;

struct Cluster {
  std::vector<std::vector<GpuView>> gpus;
  std::vector<NodeView> nodes;
  explicit Cluster(std::vector<std::vector<MilliGpu>> free) {
    for (auto& f : free) {
      std::vector<GpuView> g;
      for (MilliGpu m : f) g.push_back(GpuView{m, 0, true});
      gpus.push_back(std::move(g));
    }
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      NodeView n;
      n.index = static_cast<std::uint32_t>(i);
      n.model = "H100-80GB";
      n.cpu_milli_free = n.cpu_milli_total = 64000;
      n.memory_free = n.memory_total = 512 * kGiB;
      n.gpus = gpus[i];
      nodes.push_back(n);
    }
  }
};

PlacementRequest Frac(MilliGpu m) { return PlacementRequest{1000, kGiB, 1, m, 0, {}}; }
PlacementRequest Whole(int n) { return PlacementRequest{1000, kGiB, n, kOneGpu, 0, {}}; }

TEST(FitsTest, Rules) {
  Cluster c({{1000, 300}});
  EXPECT_TRUE(Fits(Frac(300), c.nodes[0]));
  EXPECT_TRUE(Fits(Whole(1), c.nodes[0]));
  EXPECT_FALSE(Fits(Whole(2), c.nodes[0]));
  PlacementRequest cpu = Frac(100);
  cpu.cpu_milli = 65000;
  EXPECT_FALSE(Fits(cpu, c.nodes[0]));
  PlacementRequest model = Frac(100);
  model.allowed_models = {"A100-40GB"};
  EXPECT_FALSE(Fits(model, c.nodes[0]));
  model.allowed_models = {"A100-40GB", "H100-80GB"};
  EXPECT_TRUE(Fits(model, c.nodes[0]));
  c.gpus[0][0].usable = false;
  EXPECT_FALSE(Fits(Whole(1), c.nodes[0]));
  PlacementRequest mem = Frac(100);
  mem.gpu_memory_per_gpu = kGiB;
  EXPECT_FALSE(Fits(mem, c.nodes[0]));  // free_memory 0 on the usable GPU
}

struct PolicyCase {
  const char* policy;
  std::vector<std::vector<MilliGpu>> free;
  PlacementRequest req;
  std::uint32_t node;
  std::vector<int> gpus;
};

class SimplePolicyTest : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(SimplePolicyTest, Chooses) {
  const PolicyCase& pc = GetParam();
  Cluster c(pc.free);
  auto policy = MakePolicy(pc.policy);
  ASSERT_TRUE(policy.ok());
  auto p = Place(**policy, pc.req, c.nodes, PlacementContext{});
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->node_index, pc.node);
  EXPECT_EQ(p->gpu_indices, pc.gpus);
}

INSTANTIATE_TEST_SUITE_P(
    Table, SimplePolicyTest,
    ::testing::Values(
        // best-fit: the tightest GPU anywhere.
        PolicyCase{"best-fit", {{1000, 1000}, {1000, 400}}, Frac(300), 1, {1}},
        PolicyCase{"best-fit", {{500, 1000}, {1000, 400}}, Frac(450), 0, {0}},
        // best-fit whole: the host left with the fewest free GPUs.
        PolicyCase{"best-fit", {{1000, 1000, 1000, 1000}, {1000, 1000, 0, 0}}, Whole(2), 1, {0, 1}},
        // ties: lowest node index.
        PolicyCase{"best-fit", {{1000}, {1000}}, Frac(100), 0, {0}},
        // best-fit: a share that needs a free GPU takes it from the host with the fewest.
        PolicyCase{"best-fit", {{1000, 1000, 1000}, {0, 1000, 1000}, {0, 300, 1000}}, Frac(500), 2, {2}},
        // best-fit: equal GPUs on one host: the lowest.
        PolicyCase{"best-fit", {{1000, 600, 600}}, Frac(500), 0, {1}},
        // spread: free GPUs first, from the host with the most; the lowest of them.
        PolicyCase{"spread", {{1000, 200}, {1000, 1000}}, Frac(100), 1, {0}},
        // spread: no free GPU: the loosest share; equal ones: the highest node, highest GPU.
        PolicyCase{"spread", {{0, 600, 600}, {600, 600, 0}, {300, 0, 0}}, Frac(100), 1, {1}},
        PolicyCase{"spread", {{0, 600, 600}, {500, 0, 0}}, Frac(100), 0, {2}},
        // spread whole: the host with the most free GPUs; equal hosts: the highest.
        PolicyCase{"spread", {{1000, 1000, 0}, {1000, 1000, 1000}, {1000, 0, 1000}}, Whole(2), 1, {0, 1}},
        PolicyCase{"spread", {{1000, 1000}, {1000, 1000}}, Whole(1), 1, {0}},
        // packing is best-fit under a second name.
        PolicyCase{"packing", {{1000, 1000}, {1000, 200}}, Frac(100), 1, {1}},
        PolicyCase{"packing", {{1000, 1000, 1000, 1000}, {1000, 1000, 0, 0}}, Whole(2), 1, {0, 1}}),
    [](const ::testing::TestParamInfo<PolicyCase>& info) {
      std::string n = std::string(info.param.policy) + "_" + std::to_string(info.index);
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

// Scores a node by its first GPU's free share alone, so equal nodes tie (the simple policies
// order every host and never tie): what Place() does with ties is the framework's rule.
class FirstGpuTightest final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "first-gpu-tightest"; }
  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext&) const override {
    if (node.gpus.empty() || node.gpus[0].free_milli < req.milli_per_gpu) return std::nullopt;
    return NodeChoice{-static_cast<double>(node.gpus[0].free_milli), {0}};
  }
};

TEST(PlaceTest, NothingFitsGivesNullopt) {
  Cluster c({{200}, {300}});
  auto policy = MakePolicy("best-fit");
  ASSERT_TRUE(policy.ok());
  EXPECT_FALSE(Place(**policy, Frac(500), c.nodes, PlacementContext{}).has_value());
}

TEST(PlaceTest, RandomTieBreakIsSeeded) {
  Cluster c({{1000}, {1000}, {1000}, {1000}});
  const FirstGpuTightest policy;
  std::vector<std::uint32_t> a, b;
  std::mt19937_64 r1(7), r2(7);
  for (int i = 0; i < 20; ++i) {
    a.push_back(Place(policy, Frac(100), c.nodes, PlacementContext{{}, &r1})->node_index);
    b.push_back(Place(policy, Frac(100), c.nodes, PlacementContext{{}, &r2})->node_index);
  }
  EXPECT_EQ(a, b);
  std::sort(a.begin(), a.end());
  EXPECT_NE(a.front(), a.back());  // ties really are broken at random
}

// Ties among the best score: each tied node equally likely, chosen by one draw over them all
// (not one per tie on the way), and nodes below the best score are never chosen.
TEST(PlaceTest, RandomTieBreakIsOneUniformDrawOverTheBestNodes) {
  // The tightest first GPU: nodes 0, 2 and 3 tie, node 1 is looser.
  Cluster c({{400}, {1000}, {400}, {400}});
  const FirstGpuTightest policy;
  std::map<std::uint32_t, int> seen;
  std::mt19937_64 rng(11);
  constexpr int kTrials = 3000;
  for (int i = 0; i < kTrials; ++i) {
    std::mt19937_64 before = rng;
    ++seen[Place(policy, Frac(100), c.nodes, PlacementContext{{}, &rng})->node_index];
    // One draw of a uniform index over the three ties.
    std::uniform_int_distribution<std::uint64_t>(0, 2)(before);
    EXPECT_EQ(before, rng) << "trial " << i;
  }
  EXPECT_EQ(seen.count(1), 0u);
  for (std::uint32_t n : {0u, 2u, 3u}) {
    // 1000 expected each; 5 standard deviations (~26) either side is far beyond chance.
    EXPECT_GT(seen[n], 850) << n;
    EXPECT_LT(seen[n], 1150) << n;
  }
}

TEST(RegistryTest, KnowsTheSimplePoliciesAndRejectsOthers) {
  std::vector<std::string> names = PolicyNames();
  for (const char* n : {"best-fit", "packing", "spread"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  auto p = MakePolicy("magic");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("'magic'"));
  EXPECT_THAT(p.status().message(), HasSubstr("best-fit"));
}

}  // namespace
}  // namespace gpuslice::sched
