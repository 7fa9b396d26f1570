// The FGD fragmentation measure on hand-computed nodes, and the plugins' GPU choices.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "sched/placement/admission.h"
#include "sched/placement/fgd_frag.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

WorkloadShape Shape(std::int64_t cpu, int num, MilliGpu milli, double f, std::vector<std::string> models = {}) {
  WorkloadShape s;
  s.cpu_milli = cpu;
  s.num_gpus = num;
  s.milli_per_gpu = milli;
  s.frequency = f;
  s.allowed_models = std::move(models);
  return s;
}

struct TestNode {
  std::vector<GpuView> gpus;
  NodeView view;
  TestNode(std::vector<MilliGpu> free, std::int64_t cpu_free, std::string_view model = "V100") {
    for (MilliGpu m : free) gpus.push_back(GpuView{m, 0, true});
    view.model = model;
    view.cpu_milli_free = cpu_free;
    view.cpu_milli_total = 64000;
    view.memory_free = view.memory_total = 256 * kGiB;
    view.gpus = gpus;
  }
};

TEST(Fragmentation, HandComputedMixOfShapes) {
  TestNode n({1000, 300}, 10000);
  const std::vector<WorkloadShape> shapes = {
      Shape(2000, 1, 500, 0.5),   // fits on GPU 0; GPU 1 (300 < 500) is fragment: 0.5 * 300 = 150
      Shape(1000, 0, 0, 0.25),    // CPU-only: can use no GPU, all 1300 free: 0.25 * 1300 = 325
      Shape(20000, 1, 200, 0.25)  // not enough CPU: all free: 0.25 * 1300 = 325
  };
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, shapes), 800.0);
}

TEST(Fragmentation, ModelConstraintAndMultiGpuShapes) {
  TestNode n({1000, 1000, 600, 0}, 64000, "T4");
  // Allowed only on V100: every free milli (2600) is fragment for it.
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, std::vector{Shape(1000, 1, 100, 1.0, {"V100"})}), 2600.0);
  // Allowed on T4 and fits: GPUs below 100 free: only the 0 one, so nothing.
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, std::vector{Shape(1000, 1, 100, 1.0, {"V100", "T4"})}), 0.0);
  // Two whole GPUs fit (two fully free): the 600 partial GPU is fragment.
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, std::vector{Shape(1000, 2, 1000, 1.0)}), 600.0);
  // Three whole GPUs do not fit: all 2600.
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, std::vector{Shape(1000, 3, 1000, 1.0)}), 2600.0);
}

// gpuslice's measure also asks for the shape's host memory; the paper's ignores it.
TEST(Fragmentation, MemoryCountsOnlyWhenAsked) {
  TestNode n({1000, 300}, 10000);  // 256 GiB free
  WorkloadShape big = Shape(2000, 1, 500, 1.0);
  big.host_memory = 300 * kGiB;  // more than the node has: it cannot use the node's GPUs
  const std::vector<WorkloadShape> shapes = {big};
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, shapes), 300.0);  // only GPU 1 (300 < 500)
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, shapes, Resources::kCpuAndMemory), 1300.0);
  // A placement that takes memory strands the GPUs for a shape that fitted before.
  WorkloadShape mid = Shape(2000, 1, 500, 1.0);
  mid.host_memory = 200 * kGiB;
  const std::vector<WorkloadShape> mids = {mid};
  const FragmentationEval eval(n.view, mids, Resources::kCpuAndMemory);
  EXPECT_DOUBLE_EQ(eval.before(), 300.0);
  EXPECT_DOUBLE_EQ(eval.AfterOne(1000, 0, 100, 100 * kGiB), 1200.0);  // 900 + 300, none usable
  EXPECT_DOUBLE_EQ(eval.AfterOne(1000, 0, 100, 10 * kGiB), 300.0);    // 200 GiB still free
  const FragmentationEval paper(n.view, mids);
  EXPECT_DOUBLE_EQ(paper.AfterOne(1000, 0, 100, 100 * kGiB), 300.0);
}

// The stranded measure: what the node's CPU cannot feed, pod by pod, is fragment too.
TEST(Fragmentation, StrandedCountsGpusTheHostCannotFeed) {
  TestNode n({1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, 30000);
  const std::vector<WorkloadShape> whole = {Shape(10000, 1, kOneGpu, 1.0)};
  // FGD: one more 10-CPU pod fits, so nothing is fragment. Stranded: 8 GPUs, CPU for 3 pods:
  // 5 of 8 GPUs' worth (5000) is.
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, whole), 0.0);
  EXPECT_DOUBLE_EQ(NodeStrandedFragmentation(n.view, whole), 5000.0);
  const FragmentationEval eval(n.view, whole, Resources::kCpu, {.stranded = true});
  ASSERT_TRUE(eval.strands());
  // A CPU-only pod of 20 CPUs: CPU for 1 pod left, 7 GPUs' worth stranded (FGD: still 0).
  const std::vector<int> none;
  EXPECT_DOUBLE_EQ(eval.After(20000, none, 0), 0.0);
  EXPECT_DOUBLE_EQ(eval.AfterStranded(20000, none, 0), 7000.0);
  // One more pod of the shape: 7 GPUs, CPU for 2: 5 GPUs' worth.
  EXPECT_DOUBLE_EQ(eval.AfterStranded(10000, std::vector<int>{0}, kOneGpu), 5000.0);
  // Shares count pods per GPU: 460m x 2 fit on a whole GPU, 1 on the 500m one; CPU feeds 2 of
  // the 3: a third of the 1500 at or above the share, plus the 40m below it, is fragment.
  TestNode shares({1000, 500, 40}, 8000);
  const std::vector<WorkloadShape> s460 = {Shape(4000, 1, 460, 1.0)};
  EXPECT_DOUBLE_EQ(NodeFragmentation(shares.view, s460), 40.0);
  EXPECT_DOUBLE_EQ(NodeStrandedFragmentation(shares.view, s460), 40.0 + 1500.0 / 3);
  // No CPU left for one pod: all free milli, as in FGD.
  TestNode starved({1000, 1000}, 3000);
  EXPECT_DOUBLE_EQ(NodeStrandedFragmentation(starved.view, whole), 2000.0);
  // Memory counts only with kCpuAndMemory: 256 GiB free feeds 2 pods of 100 GiB.
  std::vector<WorkloadShape> hungry = {Shape(1000, 1, kOneGpu, 1.0)};
  hungry[0].host_memory = 100 * kGiB;
  EXPECT_DOUBLE_EQ(NodeStrandedFragmentation(n.view, hungry), 0.0);
  EXPECT_DOUBLE_EQ(NodeStrandedFragmentation(n.view, hungry, Resources::kCpuAndMemory), 6000.0);
}

TEST(Fragmentation, CpuCountsTheCpuNoPodCanUse) {
  // Half the pods ask a GPU and 10 CPUs, half 8 CPUs and no GPU.
  const std::vector<WorkloadShape> shapes = {Shape(10000, 1, kOneGpu, 0.5), Shape(8000, 0, 0, 0.5)};
  // 4 free GPUs, CPU for 3 GPU pods: none of the 30 CPUs is left over for the GPU pods; 3 CPU-only
  // pods leave 6.
  TestNode n({kOneGpu, kOneGpu, kOneGpu, kOneGpu}, 30000);
  EXPECT_DOUBLE_EQ(NodeCpuFragmentation(n.view, shapes), 0.5 * 0 + 0.5 * 6000);
  // 2 free GPUs: their pods take 20 CPUs of 30, 10 are left over for them.
  TestNode two({kOneGpu, kOneGpu}, 30000);
  EXPECT_DOUBLE_EQ(NodeCpuFragmentation(two.view, shapes), 0.5 * 10000 + 0.5 * 6000);
  // No free GPU: every CPU is left over for the GPU pods; CPU-only pods still use 24 of 30.
  TestNode full({0, 0}, 30000);
  EXPECT_DOUBLE_EQ(NodeCpuFragmentation(full.view, shapes), 0.5 * 30000 + 0.5 * 6000);
  // Short of one GPU pod's CPU: all of it, for them.
  TestNode starved({kOneGpu}, 9000);
  EXPECT_DOUBLE_EQ(NodeCpuFragmentation(starved.view, shapes), 0.5 * 9000 + 0.5 * 1000);
  // A GPU model the shape does not allow, or a shape that asks no CPU: all of it.
  const std::vector<WorkloadShape> elsewhere = {Shape(10000, 1, kOneGpu, 1.0, {"A100"})};
  EXPECT_DOUBLE_EQ(NodeCpuFragmentation(n.view, elsewhere), 30000.0);
  const std::vector<WorkloadShape> no_cpu = {Shape(0, 1, kOneGpu, 1.0)};
  EXPECT_DOUBLE_EQ(NodeCpuFragmentation(n.view, no_cpu), 30000.0);
  // Memory counts only with kCpuAndMemory: 256 GiB free feeds 2 CPU-only pods of 100 GiB.
  std::vector<WorkloadShape> hungry = {Shape(8000, 0, 0, 1.0)};
  hungry[0].host_memory = 100 * kGiB;
  EXPECT_DOUBLE_EQ(NodeCpuFragmentation(n.view, hungry), 6000.0);
  EXPECT_DOUBLE_EQ(NodeCpuFragmentation(n.view, hungry, Resources::kCpuAndMemory), 14000.0);
  // After a placement, as a fresh evaluation of the node after: one more GPU pod leaves 20 CPUs
  // for 3 GPUs (2 pods, none over) and 2 CPU-only pods (4 over); taking the last GPUs leaves all.
  const FragmentationEval eval(n.view, shapes, Resources::kCpu, {.cpu = true});
  ASSERT_TRUE(eval.cpu_counts());
  double cpu = -1;
  eval.AfterAll(10000, std::vector<int>{0}, kOneGpu, 0, nullptr, nullptr, nullptr, nullptr, &cpu);
  EXPECT_DOUBLE_EQ(cpu, 0.5 * 0 + 0.5 * 4000);
  eval.AfterAll(10000, std::vector<int>{0, 1, 2, 3}, kOneGpu, 0, nullptr, nullptr, nullptr, nullptr, &cpu);
  EXPECT_DOUBLE_EQ(cpu, 0.5 * 20000 + 0.5 * 4000);
  // Not asked: not counted.
  const FragmentationEval plain(n.view, shapes, Resources::kCpu, {.stranded = true});
  EXPECT_FALSE(plain.cpu_counts());
  EXPECT_EQ(plain.before_cpu(), 0.0);
}

// Where no shape asks CPU or memory (the daemon's learned workload), the stranded measure is
// FGD's, and the evaluation says so (the policy then skips it).
TEST(Fragmentation, StrandedIsFgdWhereShapesAskNoHostResources) {
  TestNode n({1000, 600, 0}, 0);
  const std::vector<WorkloadShape> shapes = {Shape(0, 1, 500, 0.6), Shape(0, 1, kOneGpu, 0.4)};
  const FragmentationEval eval(n.view, shapes, Resources::kCpuAndMemory, {.stranded = true});
  EXPECT_FALSE(eval.strands());
  EXPECT_EQ(eval.before_stranded(), eval.before());
  EXPECT_EQ(NodeStrandedFragmentation(n.view, shapes, Resources::kCpuAndMemory), NodeFragmentation(n.view, shapes));
}

// The pooled stranded measure: the CPU the shapes' mix needs per milli-GPU to fill the free GPU,
// against what the node has.
TEST(Fragmentation, PooledCountsWhatTheMixCannotFeed) {
  TestNode n({1000, 1000, 1000, 1000}, 24000);
  const std::vector<WorkloadShape> shapes = {Shape(6000, 1, kOneGpu, 0.5), Shape(6000, 1, 500, 0.5)};
  // FGD: both fit, nothing is fragment. The mix brings 6000 CPU per 750 milli-GPU: 32 CPUs for
  // the 4 free GPUs, of which 24 are free, so a quarter of the 4000 usable is fragment. The
  // stranded measure, shape by shape: 4 whole-GPU pods are fed; 8 half-GPU pods would need 48
  // CPUs, 24 feed 4 of them, so half of the 4000, at weight 0.5.
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, shapes), 0.0);
  EXPECT_DOUBLE_EQ(NodePooledFragmentation(n.view, shapes), 1000.0);
  EXPECT_DOUBLE_EQ(NodeStrandedFragmentation(n.view, shapes), 1000.0);
  // A CPU-only pod of 8 CPUs: 16 of 32 (2000). Shape by shape, 2 of 8 half-GPU pods fed (1500),
  // and 2 of 4 whole-GPU ones (1000).
  const FragmentationEval eval(n.view, shapes, Resources::kCpu, {.stranded = true, .pooled = true});
  ASSERT_TRUE(eval.pools());
  double stranded = -1, pooled = -1;
  EXPECT_DOUBLE_EQ(eval.AfterAll(8000, std::vector<int>{}, 0, 0, nullptr, &stranded, &pooled), 0.0);
  EXPECT_DOUBLE_EQ(pooled, 2000.0);
  EXPECT_DOUBLE_EQ(stranded, 2500.0);
  // A half-GPU pod of 6 CPUs on GPU 0: the 500m left there fits only the half-GPU shape, 12
  // CPUs per GPU's worth (6), and the three whole GPUs need 8 each: 30 CPUs for the 18 free,
  // 0.6 fed. FGD's fragment is that 500m, for the whole-GPU shape (0.5 x 500); of the 3500 -
  // 250 the shapes could use, 0.4 is fragment.
  EXPECT_DOUBLE_EQ(eval.AfterAll(6000, std::vector<int>{0}, 500, 0, nullptr, nullptr, &pooled), 250.0);
  EXPECT_DOUBLE_EQ(pooled, 250.0 + 3250.0 * 0.4);
  // A CPU-only shape is FGD's fragment everywhere (all 4000 free, at its weight) and needs no
  // GPU: the part of the free GPU the mix cannot feed is as before.
  std::vector<WorkloadShape> with_cpu_only = shapes;
  with_cpu_only.push_back(Shape(4000, 0, 0, 0.5));
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, with_cpu_only), 2000.0);
  EXPECT_DOUBLE_EQ(NodePooledFragmentation(n.view, with_cpu_only), 2000.0 + 1000.0);
  // Holes no shape fits need no CPU: with 400m free on each GPU and no CPU, FGD counts all
  // 1600 (no shape fits), and the pooled measure adds nothing to it.
  TestNode holes({400, 400, 400, 400}, 0);
  EXPECT_DOUBLE_EQ(NodePooledFragmentation(holes.view, shapes), 1600.0);
  // Only the shapes that fit a free share count for its need: 500m free on each GPU fit the
  // half-GPU pods alone, 12 CPUs per GPU's worth, 24 for the 2000 free; 12 free feed half.
  TestNode halves({500, 500, 500, 500}, 12000);
  EXPECT_DOUBLE_EQ(NodeFragmentation(halves.view, shapes), 0.5 * 2000.0);
  EXPECT_DOUBLE_EQ(NodePooledFragmentation(halves.view, shapes), 0.5 * 2000.0 + 0.5 * 2000.0 * 0.5);
  // Where no shape that needs a GPU asks CPU or memory (the daemon) it is FGD's measure.
  const std::vector<WorkloadShape> daemon = {Shape(0, 1, 500, 0.6), Shape(0, 1, kOneGpu, 0.4)};
  const FragmentationEval plain(halves.view, daemon, Resources::kCpuAndMemory, {.pooled = true});
  EXPECT_FALSE(plain.pools());
  EXPECT_EQ(plain.before_pooled(), plain.before());
}

// The demand-weighted measure weighs a shape by the GPU its pods bring, not by their count: an
// 8-GPU shape arriving a tenth as often as a 1-GPU one weighs 8/9 of the GPU pods' demand.
TEST(Fragmentation, DemandWeighsShapesByTheGpuTheyBring) {
  TestNode n({1000, 1000, 1000, 1000, 1000, 1000, 1000, 0}, 64000);  // 7 free GPUs
  const std::vector<WorkloadShape> shapes = {Shape(4000, 1, kOneGpu, 0.5), Shape(32000, 8, kOneGpu, 0.05),
                                             Shape(1000, 0, 0, 0.45)};
  // The 8-GPU shape never fits on 7 GPUs: all 7000 free milli are fragment for it. FGD counts
  // it (0.05) and the CPU-only shape (0.45): 3500. Demand: 0.5 x 1 and 0.05 x 8 GPUs (the
  // CPU-only shape brings none): the 8-GPU shape weighs 0.4 / 0.9.
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, shapes), 3500.0);
  EXPECT_DOUBLE_EQ(NodeDemandFragmentation(n.view, shapes), 7000.0 * 0.4 / 0.9);
  // Where every shape asks the same GPU it is FGD's measure.
  TestNode partial({1000, 300, 700}, 8000);
  const std::vector<WorkloadShape> same = {Shape(4000, 1, 500, 0.7), Shape(64000, 1, 500, 0.3)};
  EXPECT_DOUBLE_EQ(NodeFragmentation(partial.view, same), 0.7 * 300 + 0.3 * 2000);
  EXPECT_DOUBLE_EQ(NodeDemandFragmentation(partial.view, same), NodeFragmentation(partial.view, same));
  // Taking one GPU of an empty 8-GPU node costs the 8-GPU shape the node: FGD sees 0.05 of it,
  // the demand measure 0.4 / 0.9 of it.
  TestNode empty({1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, 64000);
  const FragmentationEval eval(empty.view, shapes, Resources::kCpu, {.demand = true});
  double demand = 0;
  const double fgd = eval.AfterOne(4000, 0, kOneGpu, 0, &demand);
  EXPECT_DOUBLE_EQ(eval.before_demand(), 0.0);  // every GPU shape fits
  EXPECT_DOUBLE_EQ(fgd, 7000.0 * 0.5);  // 0.05 + 0.45 of 7000
  EXPECT_DOUBLE_EQ(demand, 7000.0 * 0.4 / 0.9);
}

TEST(Fragmentation, FullNodeHasNone) {
  TestNode n({0, 0}, 0);
  EXPECT_DOUBLE_EQ(NodeFragmentation(n.view, std::vector{Shape(1000, 0, 0, 1.0)}), 0.0);
}

TEST(Fragmentation, GpuChoicesFollowTheArtifact) {
  TestNode n({1000, 300, 500, 1000}, 64000);
  PlacementRequest share;
  share.cpu_milli = 1000;
  share.num_gpus = 1;
  share.milli_per_gpu = 250;
  EXPECT_EQ(BestFitGpus(share, n.view), std::vector<int>{1});  // least free that fits
  PlacementRequest whole = share;
  whole.num_gpus = 2;
  whole.milli_per_gpu = 1000;
  EXPECT_EQ(BestFitGpus(whole, n.view), (std::vector<int>{0, 3}));  // first fully free ones
  whole.num_gpus = 3;
  EXPECT_TRUE(BestFitGpus(whole, n.view).empty());
  std::mt19937_64 rng(7);
  share.milli_per_gpu = 400;  // fits GPUs 0, 2, 3: each chosen sometimes
  std::vector<int> seen(4, 0);
  for (int i = 0; i < 300; ++i) ++seen[RandomFitGpus(share, n.view, &rng).at(0)];
  EXPECT_EQ(seen[1], 0);
  EXPECT_GT(seen[0], 50);
  EXPECT_GT(seen[2], 50);
  EXPECT_GT(seen[3], 50);
}

TEST(FgdPolicy, ScoresQuantisedFragmentationDropAndPicksTheBestGpu) {
  auto fgd = MakePolicy("fgd");
  ASSERT_TRUE(fgd.ok()) << fgd.status().ToString();
  TestNode n({1000, 600}, 64000);
  // One shape: 1 GPU x 400. Before: both GPUs fit it, nothing is fragment.
  const std::vector<WorkloadShape> shapes = {Shape(1000, 1, 400, 1.0)};
  PlacementRequest req;
  req.cpu_milli = 1000;
  req.num_gpus = 1;
  req.milli_per_gpu = 300;
  PlacementContext ctx{shapes, nullptr};
  auto choice = (*fgd)->Score(req, n.view, ctx);
  ASSERT_TRUE(choice.has_value());
  // On GPU 0: 700 left, fine, drop 0 -> int(sigmoid(0) * 100) = 50.
  // On GPU 1: 300 left < 400 becomes fragment, drop -300 -> int(sigmoid(-0.3) * 100) = 42.
  EXPECT_EQ(choice->gpu_indices, std::vector<int>{0});
  EXPECT_DOUBLE_EQ(choice->score, 50.0);
  TestNode only({1000 - 400, 600}, 64000);  // both GPUs 600: either leaves 300 -> 42
  auto c2 = (*fgd)->Score(req, only.view, ctx);
  ASSERT_TRUE(c2.has_value());
  EXPECT_DOUBLE_EQ(c2->score, static_cast<double>(static_cast<int>(100 / (1 + std::exp(0.3)))));
  EXPECT_EQ(c2->gpu_indices, std::vector<int>{0});  // first index among equals
}

// Two nodes FGD cannot tell apart: the same free GPUs and CPU, one with less host memory.
// Taking 30 GiB there leaves less than the typical pod's 32 GiB beside its last free GPU,
// which gpuslice counts as stranded (the paper's measure does not look at memory).
TEST(GpuslicePolicy, KeepsHostMemoryBesideFreeGpusForTheTypicalPod) {
  auto fgd = MakePolicy("fgd");
  auto ours = MakePolicy("gpuslice");
  ASSERT_TRUE(fgd.ok() && ours.ok());
  std::vector<WorkloadShape> shapes = {Shape(1000, 1, kOneGpu, 1.0)};
  shapes[0].host_memory = 32 * kGiB;
  TestNode roomy({0, kOneGpu, kOneGpu}, 64000), tight({0, kOneGpu, kOneGpu}, 64000);
  roomy.view.memory_free = 100 * kGiB;
  tight.view.memory_free = 40 * kGiB;
  PlacementRequest req;
  req.cpu_milli = 1000;
  req.num_gpus = 1;
  req.milli_per_gpu = kOneGpu;
  req.host_memory = 30 * kGiB;
  PlacementContext ctx{shapes, nullptr};
  auto fr = (*fgd)->Score(req, roomy.view, ctx), ft = (*fgd)->Score(req, tight.view, ctx);
  auto gr = (*ours)->Score(req, roomy.view, ctx), gt = (*ours)->Score(req, tight.view, ctx);
  ASSERT_TRUE(fr && ft && gr && gt);
  EXPECT_DOUBLE_EQ(fr->score, ft->score);  // a tie for FGD
  EXPECT_GT(gr->score, gt->score + 1);     // a whole FGD score step or more for gpuslice
}

// Where each shape alone still gets its pods (the stranded measure ties), the mix of shapes may
// not: a CPU-only pod goes where it leaves the node's free GPUs the most of what the mix needs.
TEST(GpuslicePolicy, KeepsTheCpuTheMixNeedsBesideFreeGpus) {
  auto ours = MakePolicy("gpuslice");
  ASSERT_TRUE(ours.ok());
  // Whole GPUs and half GPUs, 8 CPUs each: 2000 free milli need 21.3 CPUs together.
  const std::vector<WorkloadShape> shapes = {Shape(8000, 1, kOneGpu, 0.5), Shape(8000, 1, 500, 0.5)};
  TestNode short_node({kOneGpu, kOneGpu}, 20000), fed_node({kOneGpu, kOneGpu}, 22000);
  PlacementRequest cpu_only;
  cpu_only.cpu_milli = 1000;
  const PlacementContext ctx{shapes, nullptr};
  // Shape by shape nothing changes on either node (2 whole-GPU pods fed before and after; 2 of 4
  // half-GPU pods), and one more pod of each still fits: FGD's score and the stranded measure tie.
  const FragmentationEval a(short_node.view, shapes, Resources::kCpuAndMemory, {.stranded = true});
  const FragmentationEval b(fed_node.view, shapes, Resources::kCpuAndMemory, {.stranded = true});
  const std::vector<int> none;
  EXPECT_EQ(a.before_stranded() - a.AfterStranded(1000, none, 0), 0.0);
  EXPECT_EQ(b.before_stranded() - b.AfterStranded(1000, none, 0), 0.0);
  auto on_short = (*ours)->Score(cpu_only, short_node.view, ctx), on_fed = (*ours)->Score(cpu_only, fed_node.view, ctx);
  ASSERT_TRUE(on_short && on_fed);
  EXPECT_EQ(std::floor(on_short->score), std::floor(on_fed->score));  // FGD's score ties
  // Pooled: the short node loses 94 milli-GPU of fed GPU, the fed one 31.
  EXPECT_GT(on_fed->score, on_short->score);
}

// Two nodes FGD cannot tell apart for a GPU pod that asks twice the typical CPU: one more pod of
// the typical shape fits on both afterwards. On the CPU-poor one the pod leaves CPU for only two
// of its three other free GPUs; gpuslice sends it to the other.
TEST(GpuslicePolicy, KeepsCpuBesideFreeGpus) {
  auto fgd = MakePolicy("fgd");
  auto ours = MakePolicy("gpuslice");
  ASSERT_TRUE(fgd.ok() && ours.ok());
  const std::vector<WorkloadShape> shapes = {Shape(10000, 1, kOneGpu, 1.0)};
  TestNode poor({kOneGpu, kOneGpu, kOneGpu, kOneGpu}, 40000), rich({kOneGpu, kOneGpu, kOneGpu, kOneGpu}, 80000);
  // A GPU pod that asks twice the typical CPU: on the poor node its three other GPUs keep CPU
  // for only two typical pods; FGD sees no difference (one typical pod still fits on both).
  PlacementRequest req;
  req.cpu_milli = 20000;
  req.num_gpus = 1;
  req.milli_per_gpu = kOneGpu;
  PlacementContext ctx{shapes, nullptr};
  auto fp = (*fgd)->Score(req, poor.view, ctx), fr = (*fgd)->Score(req, rich.view, ctx);
  auto gp = (*ours)->Score(req, poor.view, ctx), gr = (*ours)->Score(req, rich.view, ctx);
  ASSERT_TRUE(fp && fr && gp && gr);
  EXPECT_DOUBLE_EQ(fp->score, fr->score);  // a tie for FGD
  EXPECT_GT(gr->score, gp->score);
  EXPECT_LT(gr->score - gp->score, 1.0);  // a secondary key: less than one FGD step
}

// The stranded measure counts where CPU runs out no later than GPU: where the workload asks at
// least the cluster's CPU per GPU, or where the cluster's is not known. A CPU-only pod on two
// nodes FGD cannot tell apart (one more typical pod fits on both after it): on the first it
// leaves CPU for one of the two free GPUs' pods instead of two (stranded -1000 milli-GPU, pooled
// -100), on the second for one as before (stranded 0, pooled -200).
TEST(GpuslicePolicy, CountsStrandingWhereCpuRunsOutFirst) {
  auto ours = MakePolicy("gpuslice");
  ASSERT_TRUE(ours.ok());
  const std::vector<WorkloadShape> shapes = {Shape(10000, 1, kOneGpu, 1.0)};  // 10 milli-cores per milli-GPU
  TestNode first({kOneGpu, kOneGpu}, 21000), second({kOneGpu, kOneGpu}, 18000);
  PlacementRequest cpu_only;
  cpu_only.cpu_milli = 2000;
  auto preferred = [&](double cluster_cpu_per_gpu_milli) {
    const PlacementContext ctx{shapes, nullptr, {}, cluster_cpu_per_gpu_milli};
    auto a = (*ours)->Score(cpu_only, first.view, ctx), b = (*ours)->Score(cpu_only, second.view, ctx);
    EXPECT_TRUE(a && b);
    if (!a || !b) return 0;
    EXPECT_EQ(std::floor(a->score), std::floor(b->score));  // FGD's score ties
    return a->score > b->score ? 1 : b->score > a->score ? 2 : 0;
  };
  EXPECT_EQ(preferred(0), 2);   // not known: stranding counts
  EXPECT_EQ(preferred(8), 2);   // the workload asks more CPU per GPU than the cluster has
  EXPECT_EQ(preferred(10), 2);  // as much
  EXPECT_EQ(preferred(16), 1);  // less: GPU runs out first, the pooled measure decides
}

// Where CPU runs out first, CPU that no pod can use is lost GPU: among nodes every other measure
// ties (no free GPU left on either), a CPU-only pod of 4 CPUs goes where the 8-CPU pods can use
// what it leaves (12 -> 8 CPUs: one pod, none over) rather than where it leaves 4 over (16 -> 12).
// Where GPU runs out first the CPU measure does not count and the nodes tie.
TEST(GpuslicePolicy, CountsTheCpuNoPodCanUseWhereCpuRunsOutFirst) {
  auto ours = MakePolicy("gpuslice");
  ASSERT_TRUE(ours.ok());
  // 18 milli-cores per milli-GPU asked, CPU-only pods counted.
  const std::vector<WorkloadShape> shapes = {Shape(10000, 1, kOneGpu, 0.5), Shape(8000, 0, 0, 0.5)};
  TestNode fits({0, 0}, 12000), leaves_over({0, 0}, 16000);
  PlacementRequest cpu_only;
  cpu_only.cpu_milli = 4000;
  auto scores = [&](double cluster_cpu_per_gpu_milli) {
    const PlacementContext ctx{shapes, nullptr, {}, cluster_cpu_per_gpu_milli};
    auto a = (*ours)->Score(cpu_only, fits.view, ctx), b = (*ours)->Score(cpu_only, leaves_over.view, ctx);
    EXPECT_TRUE(a && b);
    return std::pair(a ? a->score : 0, b ? b->score : 0);
  };
  const auto [fit, over] = scores(10);  // the cluster has 10: CPU runs out first
  EXPECT_GT(fit, over);
  EXPECT_EQ(std::floor(fit), std::floor(over));  // a secondary key
  const auto [fit_rich, over_rich] = scores(20);  // 20: GPU runs out first
  EXPECT_EQ(fit_rich, over_rich);
}

// Keeping a node's CPU for its free GPUs is an admission option ("+keep-cpu", admission.h), not
// part of the placement: the plain policy places a CPU-only pod wherever it fits.
TEST(Admission, KeepCpuRefusesCpuOnlyPodsThatWouldLeaveFreeGpusWithoutCpu) {
  auto plain = MakePolicy("gpuslice");
  auto keep = MakePolicyWithAdmission("gpuslice+keep-cpu");
  ASSERT_TRUE(plain.ok() && keep.ok());
  EXPECT_EQ((*keep)->name(), "gpuslice+keep-cpu");
  EXPECT_TRUE((*keep)->ScoresByNodeState());
  // GPU pods ask 10 CPUs per GPU (10 milli-CPU per milli-GPU); CPU-only pods are half the pods.
  const std::vector<WorkloadShape> shapes = {Shape(10000, 1, kOneGpu, 0.5), Shape(4000, 0, 0, 0.5)};
  EXPECT_DOUBLE_EQ(CpuPerMilliGpu(shapes), 10.0);
  PlacementContext ctx{shapes, nullptr};
  PlacementRequest cpu_only;
  cpu_only.cpu_milli = 20000;
  auto placed = [&](const PlacementPolicy& p, const TestNode& n, const PlacementRequest& r) {
    return p.Score(r, n.view, ctx).has_value();
  };
  // Four free GPUs need 40 CPUs: 50 free leave 30 after the pod, so the option refuses it; the
  // placement alone does not.
  TestNode short_node({kOneGpu, kOneGpu, kOneGpu, kOneGpu}, 50000);
  EXPECT_TRUE(placed(**plain, short_node, cpu_only));
  EXPECT_FALSE(placed(**keep, short_node, cpu_only));
  // 60 free leave exactly the 40 they need.
  TestNode enough({kOneGpu, kOneGpu, kOneGpu, kOneGpu}, 60000);
  EXPECT_TRUE(placed(**keep, enough, cpu_only));
  // Where it places, it places as the plain policy does (the same score and GPUs).
  EXPECT_EQ((*keep)->Score(cpu_only, enough.view, ctx)->score, (*plain)->Score(cpu_only, enough.view, ctx)->score);
  // Nothing is kept on a node without free GPU.
  TestNode busy({0, 0, 0, 0}, 20000);
  EXPECT_TRUE(placed(**keep, busy, cpu_only));
  // A partly used GPU keeps CPU for its free share: 500 milli-GPU, 5 CPUs.
  TestNode part({500, 0, 0, 0}, 24000);
  EXPECT_FALSE(placed(**keep, part, cpu_only));  // 4 CPUs left
  cpu_only.cpu_milli = 19000;
  EXPECT_TRUE(placed(**keep, part, cpu_only));  // 5 left
  // GPU pods are never refused for it: they are what the CPU is kept for.
  PlacementRequest gpu_pod;
  gpu_pod.cpu_milli = 20000;
  gpu_pod.num_gpus = 1;
  gpu_pod.milli_per_gpu = kOneGpu;
  EXPECT_TRUE(placed(**keep, short_node, gpu_pod));
  // Where the GPU shapes ask no CPU (the daemon, whose hosts' CPU is not modelled) nothing is kept.
  const std::vector<WorkloadShape> daemon = {Shape(0, 1, kOneGpu, 1.0)};
  EXPECT_TRUE((*keep)->Score(cpu_only, short_node.view, PlacementContext{daemon, nullptr}).has_value());
  // The prepared path (the simulator's) refuses the same pods.
  auto prep = (*keep)->Prepare(short_node.view, ctx, nullptr);
  EXPECT_FALSE((*keep)->ScorePrepared(cpu_only, short_node.view, ctx, prep.get()).has_value());
}

// The reference option refuses every CPU-only pod and nothing else.
TEST(Admission, RefuseCpuOnlyRefusesEveryCpuOnlyPodAndNoGpuPod) {
  auto fgd = MakePolicyWithAdmission("fgd+refuse-cpu-only");
  ASSERT_TRUE(fgd.ok());
  EXPECT_EQ((*fgd)->name(), "fgd+refuse-cpu-only");
  const std::vector<WorkloadShape> shapes = {Shape(10000, 1, kOneGpu, 1.0)};
  PlacementContext ctx{shapes, nullptr};
  TestNode idle({kOneGpu, kOneGpu}, 64000);
  PlacementRequest cpu_only;
  cpu_only.cpu_milli = 1000;
  EXPECT_FALSE((*fgd)->Score(cpu_only, idle.view, ctx).has_value());
  PlacementRequest gpu_pod;
  gpu_pod.cpu_milli = 1000;
  gpu_pod.num_gpus = 1;
  gpu_pod.milli_per_gpu = 500;
  EXPECT_TRUE((*fgd)->Score(gpu_pod, idle.view, ctx).has_value());
}

TEST(Admission, NamesWithoutAnOptionAreThePlainPolicyAndBadOnesAreRejected) {
  auto plain = MakePolicyWithAdmission("gpuslice");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->name(), "gpuslice");
  EXPECT_EQ(PlacementPart("gpuslice+keep-cpu"), "gpuslice");
  auto bad_option = MakePolicyWithAdmission("gpuslice+keep-gpu");
  ASSERT_FALSE(bad_option.ok());
  EXPECT_NE(bad_option.status().message().find("'+keep-gpu'"), std::string::npos) << bad_option.status().ToString();
  auto bad_policy = MakePolicyWithAdmission("magic+keep-cpu");
  ASSERT_FALSE(bad_policy.ok());
  EXPECT_NE(bad_policy.status().message().find("'magic'"), std::string::npos) << bad_policy.status().ToString();
  // The daemon's registry knows no admission option.
  EXPECT_FALSE(MakePolicy("gpuslice+keep-cpu").ok());
}

// The simulator scores many requests on one prepared node state; the prepared path must give
// exactly Score()'s choice, for shares (with and without demand shapes), whole GPUs and
// CPU-only pods, on random nodes: gpuslice's policy, and FGD's (which prepares too, so that the
// two are timed alike).
class PreparedScores : public ::testing::TestWithParam<const char*> {};

TEST_P(PreparedScores, AreScoresBitForBit) {
  const bool gpuslice = std::string_view(GetParam()) == "gpuslice";
  auto policy = MakePolicy(GetParam());
  ASSERT_TRUE(policy.ok());
  std::mt19937_64 rng(35);
  std::vector<WorkloadShape> shapes = {Shape(8000, 1, kOneGpu, 0.3), Shape(4000, 1, 470, 0.3), Shape(3000, 1, 810, 0.2),
                                       Shape(32000, 2, kOneGpu, 0.1), Shape(12000, 0, 0, 0.1)};
  for (WorkloadShape& s : shapes) s.host_memory = 16 * kGiB;
  shapes[3].supply_share = 0.5;  // so that the supply weights are not the frequencies
  std::vector<WorkloadShape> demand = shapes;
  demand.push_back(Shape(64000, 8, kOneGpu, 0.01));
  demand.back().supply_share = 0.25;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<MilliGpu> free;
    const int gpus = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < gpus; ++i) free.push_back(static_cast<MilliGpu>(rng() % 21) * 50);
    TestNode n(free, static_cast<std::int64_t>(rng() % 65) * 1000);
    n.view.memory_free = static_cast<Bytes>(rng() % 16) * 16 * kGiB;
    // The workload asks 10.7 milli-cores per milli-GPU: the stranded measure counts with a
    // cluster that has 5 or does not say, and does not with one that has 20.
    const double cluster_cpu[3] = {0, 5, 20};
    const PlacementContext ctx{shapes, nullptr,
                               trial % 2 == 0 ? std::span<const WorkloadShape>(demand) : std::span<const WorkloadShape>(),
                               cluster_cpu[trial % 3]};
    // With the context's shared weights (as the simulator prepares), and without.
    auto tables = (*policy)->PrepareWorkload(ctx);
    ASSERT_NE(tables, nullptr);
    // gpuslice's policy prepares a node without the context's tables too; FGD's does not
    // (ScorePrepared() is then Score()).
    auto prep = (*policy)->Prepare(n.view, ctx, trial % 3 == 0 ? nullptr : tables.get());
    if (gpuslice || trial % 3 != 0) {
      ASSERT_NE(prep, nullptr);
    }
    for (int r = 0; r < 8; ++r) {
      PlacementRequest req;
      req.cpu_milli = static_cast<std::int64_t>(rng() % 16) * 1000;
      const int kind = static_cast<int>(rng() % 3);
      req.num_gpus = kind == 0 ? 0 : kind == 1 ? 1 : 1 + static_cast<int>(rng() % 3);
      req.milli_per_gpu = kind == 0 ? 0 : kind == 1 ? 50 * static_cast<MilliGpu>(1 + rng() % 19) : kOneGpu;
      if (!Fits(req, n.view)) continue;
      auto plain = (*policy)->Score(req, n.view, ctx);
      auto prepared = (*policy)->ScorePrepared(req, n.view, ctx, prep.get());
      ASSERT_EQ(plain.has_value(), prepared.has_value()) << "trial " << trial;
      if (!plain) continue;
      EXPECT_EQ(std::bit_cast<std::uint64_t>(plain->score), std::bit_cast<std::uint64_t>(prepared->score))
          << "trial " << trial;
      EXPECT_EQ(plain->gpu_indices, prepared->gpu_indices) << "trial " << trial;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, PreparedScores, ::testing::Values("gpuslice", "fgd"));

TEST(FgdPolicies, AllRegisteredByName) {
  for (const char* name : {"random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit-fgd", "fgd", "gpuslice"}) {
    auto p = MakePolicy(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().ToString();
    EXPECT_EQ((*p)->name(), name);
  }
}

// FragmentationEval is a faster NodeFragmentation of the node before and after a placement;
// decisions stay identical only if it gives the same bits. Random nodes (unusable GPUs, more
// GPUs than its sorted buffer, CPU that runs out) and workloads (model lists, more shapes than
// its inline buffer), against NodeFragmentation of an actual copy of the node after.
// A shape table keeps a view per model its shapes name, but not past kMaxNamedModels (a trace's
// model lists are input): with more, an evaluation compares names itself, and every measure is
// what an evaluation without the table gives, on a node of a named model and of another.
TEST(Fragmentation, ATableOfManyNamedModelsLeavesTheNamesToTheEvaluation) {
  constexpr ExtraMeasures kAll{.stranded = true, .demand = true, .pooled = true};
  auto bits = [](double d) { return std::bit_cast<std::uint64_t>(d); };
  for (std::size_t models : {std::size_t{3}, ShapeTable::kMaxNamedModels + 40}) {
    std::vector<WorkloadShape> shapes;
    for (std::size_t k = 0; k < models; ++k) {
      shapes.push_back(Shape(2000 + static_cast<std::int64_t>(k % 4) * 1000, 1, 100 + 50 * static_cast<MilliGpu>(k % 15),
                             1.0 + static_cast<double>(k % 7), {fmt::format("m{}", k), "shared"}));
    }
    shapes.push_back(Shape(4000, 2, kOneGpu, 3.0));
    shapes.push_back(Shape(8000, 0, 0, 2.0));
    const ShapeTable table(shapes, ShapeWeights::kFrequency);
    EXPECT_EQ(table.knows_models(), models <= ShapeTable::kMaxNamedModels) << models;
    for (const char* model : {"m1", "shared", "other"}) {
      TestNode n({1000, 450, 200, 1000}, 9000, model);
      const FragmentationEval plain(n.view, shapes, Resources::kCpuAndMemory, kAll);
      const FragmentationEval tabled(n.view, table, Resources::kCpuAndMemory, kAll);
      EXPECT_EQ(bits(tabled.before()), bits(plain.before())) << models << " " << model;
      EXPECT_EQ(bits(tabled.before_stranded()), bits(plain.before_stranded())) << models << " " << model;
      EXPECT_EQ(bits(tabled.before_pooled()), bits(plain.before_pooled())) << models << " " << model;
      const int one[1] = {1};
      double pooled = -1, tabled_pooled = -1;
      EXPECT_EQ(bits(tabled.AfterAll(2000, one, 250, 0, nullptr, nullptr, &tabled_pooled)),
                bits(plain.AfterAll(2000, one, 250, 0, nullptr, nullptr, &pooled)))
          << models << " " << model;
      EXPECT_EQ(bits(tabled_pooled), bits(pooled)) << models << " " << model;
    }
  }
}

TEST(Fragmentation, EvalBeforeAndAfterAreBitIdenticalToRecounting) {
  std::mt19937_64 rng(15);
  for (ShapeWeights weights : {ShapeWeights::kFrequency, ShapeWeights::kSupply}) {
  for (Resources resources : {Resources::kCpu, Resources::kCpuAndMemory}) {
  const std::vector<std::string> models = {"V100", "T4", "A100"};
  auto bits = [](double d) { return std::bit_cast<std::uint64_t>(d); };
  for (int trial = 0; trial < 400; ++trial) {
    const int gpus = 1 + static_cast<int>(rng() % 20);
    std::vector<MilliGpu> free;
    for (int i = 0; i < gpus; ++i) free.push_back(static_cast<MilliGpu>(rng() % 11) * 100 - (rng() % 3 == 0 ? 50 : 0));
    for (MilliGpu& m : free) m = std::max<MilliGpu>(m, 0);
    TestNode n(free, static_cast<std::int64_t>(rng() % 8) * 1000, models[rng() % models.size()]);
    n.view.memory_free = static_cast<Bytes>(rng() % 8) * 16 * kGiB;
    for (GpuView& g : n.gpus) g.usable = rng() % 5 != 0;
    std::vector<WorkloadShape> shapes;
    const int count = 1 + static_cast<int>(rng() % 60);
    for (int k = 0; k < count; ++k) {
      const int kind = static_cast<int>(rng() % 4);
      std::vector<std::string> allowed;
      if (rng() % 4 == 0) allowed.push_back(models[rng() % models.size()]);
      shapes.push_back(Shape(static_cast<std::int64_t>(rng() % 6) * 1000, kind == 0 ? 0 : kind == 1 ? 1 : 1 + static_cast<int>(rng() % 4),
                             kind == 0 ? 0 : kind == 1 ? 50 * static_cast<MilliGpu>(1 + rng() % 19) : kOneGpu,
                             static_cast<double>(1 + rng() % 1000) / 997.0, allowed));
      shapes.back().host_memory = static_cast<Bytes>(rng() % 6) * 16 * kGiB;
      if (rng() % 3 != 0) shapes.back().supply_share = static_cast<double>(1 + rng() % 100) / 100.0;
    }
    constexpr ExtraMeasures kAll{.stranded = true, .demand = true, .pooled = true, .cpu = true};
    const FragmentationEval eval(n.view, shapes, resources, kAll, weights);
    // With the weights of a ShapeTable (as the simulator keeps them), every measure the same:
    // which shapes the node is eligible for and the pooled measure's steps then come from the
    // table (the node's model named by some shapes, or by none).
    const ShapeTable table(shapes, weights);
    const FragmentationEval tabled(n.view, table, resources, kAll);
    // With supply weights the eval measures what the plain measures give for SupplyWeighted().
    const std::vector<WorkloadShape> weighted = weights == ShapeWeights::kSupply ? SupplyWeighted(shapes) : shapes;
    ASSERT_EQ(bits(eval.before()), bits(NodeFragmentation(n.view, weighted, resources))) << "trial " << trial;
    ASSERT_EQ(bits(eval.before_demand()), bits(NodeDemandFragmentation(n.view, weighted, resources))) << "trial " << trial;
    ASSERT_EQ(bits(eval.before_stranded()), bits(NodeStrandedFragmentation(n.view, weighted, resources))) << "trial " << trial;
    ASSERT_EQ(bits(eval.before_pooled()), bits(NodePooledFragmentation(n.view, weighted, resources))) << "trial " << trial;
    ASSERT_EQ(bits(tabled.before_pooled()), bits(eval.before_pooled())) << "trial " << trial;
    ASSERT_EQ(bits(eval.before_cpu()), bits(NodeCpuFragmentation(n.view, weighted, resources))) << "trial " << trial;
    ASSERT_EQ(bits(tabled.before_cpu()), bits(eval.before_cpu())) << "trial " << trial;
    // A wider workload: the shapes, then a few more (or, every other trial, the shapes weighing
    // nothing and then others: how the policy widens demand shapes that do not start with the
    // typical ones), each with a weight of its own. FGD's measure against it comes with every
    // other measure unchanged.
    std::vector<WorkloadShape> wide_shapes = shapes;
    std::vector<double> wide_weights;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      wide_weights.push_back(trial % 2 == 0 ? static_cast<double>(1 + rng() % 1000) / 991.0 : 0.0);
    }
    for (int extra = static_cast<int>(rng() % 4); extra > 0; --extra) {
      wide_shapes.push_back(shapes[rng() % shapes.size()]);
      wide_shapes.back().milli_per_gpu = rng() % 2 == 0 ? kOneGpu : 50 * static_cast<MilliGpu>(1 + rng() % 19);
      wide_shapes.back().num_gpus = wide_shapes.back().milli_per_gpu == kOneGpu ? 1 + static_cast<int>(rng() % 8) : 1;
      wide_weights.push_back(static_cast<double>(1 + rng() % 1000) / 991.0);
    }
    ASSERT_TRUE(Extends(wide_shapes, shapes));
    {
      // One that cannot be a wider workload (too few weights, too few shapes) is not taken.
      const FragmentationEval short_weights(n.view, table, resources, kAll,
                                            WideWorkload{wide_shapes, std::span(wide_weights).first(wide_weights.size() - 1)});
      EXPECT_FALSE(short_weights.wide());
      if (shapes.size() > 1) {
        const FragmentationEval short_shapes(n.view, table, resources, kAll,
                                             WideWorkload{std::span(wide_shapes).first(1), std::span(wide_weights).first(1)});
        EXPECT_FALSE(short_shapes.wide());
      }
    }
    const FragmentationEval widened(n.view, table, resources, kAll, WideWorkload{wide_shapes, wide_weights});
    std::vector<WorkloadShape> wide_frequencies = wide_shapes;  // the weights as NodeFragmentation reads them
    for (std::size_t k = 0; k < wide_shapes.size(); ++k) wide_frequencies[k].frequency = wide_weights[k];
    ASSERT_TRUE(widened.wide());
    ASSERT_EQ(bits(widened.before_wide()), bits(NodeFragmentation(n.view, wide_frequencies, resources)))
        << "trial " << trial;
    if (trial % 2 == 1) {  // the shapes weighing nothing add nothing, not even rounding
      ASSERT_EQ(bits(widened.before_wide()),
                bits(NodeFragmentation(n.view, std::span(wide_frequencies).subspan(shapes.size()), resources)))
          << "trial " << trial;
    }
    ASSERT_EQ(bits(widened.before()), bits(tabled.before())) << "trial " << trial;
    ASSERT_EQ(bits(widened.before_demand()), bits(tabled.before_demand())) << "trial " << trial;
    ASSERT_EQ(bits(widened.before_stranded()), bits(tabled.before_stranded())) << "trial " << trial;
    ASSERT_EQ(bits(widened.before_pooled()), bits(tabled.before_pooled())) << "trial " << trial;
    ASSERT_EQ(bits(widened.before_cpu()), bits(tabled.before_cpu())) << "trial " << trial;
    // The pooled and the CPU measures after a placement (AfterAll() only), with and without the
    // table, alone and with every other measure; and with the wider workload, every measure as
    // without it and the wide one as recounted.
    auto pooled_matches = [&](const NodeView& v, std::span<const int> chosen, MilliGpu milli, std::int64_t c,
                              Bytes mem) {
      double pooled = -1, tabled_pooled = -1, cpu_alone = -1, tabled_cpu = -1;
      eval.AfterAll(c, chosen, milli, mem, nullptr, nullptr, &pooled);
      tabled.AfterAll(c, chosen, milli, mem, nullptr, nullptr, &tabled_pooled);
      eval.AfterAll(c, chosen, milli, mem, nullptr, nullptr, nullptr, nullptr, &cpu_alone);
      const double fresh = NodePooledFragmentation(v, weighted, resources);
      const double fresh_cpu = NodeCpuFragmentation(v, weighted, resources);
      double d = -1, st = -1, po = -1, wd = -1, wide_d = -1, wide_st = -1, wide_po = -1, wide = -1, wide_cpu = -1;
      const double frag = tabled.AfterAll(c, chosen, milli, mem, &d, &st, &po, &wd, &tabled_cpu);
      const double wide_frag = widened.AfterAll(c, chosen, milli, mem, &wide_d, &wide_st, &wide_po, &wide, &wide_cpu);
      return bits(pooled) == bits(fresh) && bits(tabled_pooled) == bits(fresh) && bits(wide_frag) == bits(frag) &&
             bits(wide_d) == bits(d) && bits(wide_st) == bits(st) && bits(wide_po) == bits(po) && wd == 0 &&
             bits(wide) == bits(NodeFragmentation(v, wide_frequencies, resources)) &&
             bits(cpu_alone) == bits(fresh_cpu) && bits(tabled_cpu) == bits(fresh_cpu) && bits(wide_cpu) == bits(fresh_cpu);
    };
    // CPU-only work (no GPU moves), a share on each GPU it fits, and the first k fully free
    // usable GPUs.
    const MilliGpu share = 50 * static_cast<MilliGpu>(1 + rng() % 19);
    const std::int64_t cpu = static_cast<std::int64_t>(rng() % 4) * 1000;
    const Bytes memory = static_cast<Bytes>(rng() % 3) * 16 * kGiB;
    {
      NodeView v = n.view;
      v.cpu_milli_free -= cpu;
      v.memory_free -= memory;
      const std::vector<int> none;
      double all_demand = -1, all_stranded = -1;
      ASSERT_EQ(bits(eval.AfterAll(cpu, none, 0, memory, &all_demand, &all_stranded)),
                bits(NodeFragmentation(v, weighted, resources)))
          << "trial " << trial;
      ASSERT_EQ(bits(all_demand), bits(NodeDemandFragmentation(v, weighted, resources))) << "trial " << trial;
      ASSERT_EQ(bits(all_stranded), bits(NodeStrandedFragmentation(v, weighted, resources))) << "trial " << trial;
      ASSERT_TRUE(pooled_matches(v, none, 0, cpu, memory)) << "trial " << trial;
    }
    for (int i = 0; i < gpus; ++i) {
      if (!n.gpus[i].usable || n.gpus[i].free_milli < share) continue;
      std::vector<GpuView> after = n.gpus;
      after[i].free_milli -= share;
      NodeView v = n.view;
      v.gpus = after;
      v.cpu_milli_free -= cpu;
      v.memory_free -= memory;
      double demand = -1;
      ASSERT_EQ(bits(eval.AfterOne(cpu, i, share, memory, &demand)), bits(NodeFragmentation(v, weighted, resources)))
          << "trial " << trial << " gpu " << i;
      ASSERT_EQ(bits(demand), bits(NodeDemandFragmentation(v, weighted, resources))) << "trial " << trial << " gpu " << i;
      ASSERT_EQ(bits(eval.AfterStrandedOne(cpu, i, share, memory)), bits(NodeStrandedFragmentation(v, weighted, resources)))
          << "trial " << trial << " gpu " << i;
      // The three in one pass, the same bits.
      double all_demand = -1, all_stranded = -1;
      ASSERT_EQ(bits(eval.AfterAllOne(cpu, i, share, memory, &all_demand, &all_stranded)),
                bits(NodeFragmentation(v, weighted, resources)));
      ASSERT_EQ(bits(all_demand), bits(demand)) << "trial " << trial << " gpu " << i;
      ASSERT_EQ(bits(all_stranded), bits(NodeStrandedFragmentation(v, weighted, resources))) << "trial " << trial;
      const int one[1] = {i};
      ASSERT_TRUE(pooled_matches(v, one, share, cpu, memory)) << "trial " << trial << " gpu " << i;
    }
    {
      // `share` from several GPUs at once, of different free shares (unusable ones listed too:
      // they change nothing), the general path beside the one-free-share ones above and below.
      std::vector<int> several;
      std::vector<GpuView> after = n.gpus;
      for (int i = 0; i < gpus; ++i) {
        if (n.gpus[i].usable && n.gpus[i].free_milli < share) continue;
        several.push_back(i);
        if (n.gpus[i].usable) after[i].free_milli -= share;
      }
      NodeView v = n.view;
      v.gpus = after;
      v.cpu_milli_free -= cpu;
      v.memory_free -= memory;
      double demand = -1, all_demand = -1, all_stranded = -1;
      ASSERT_EQ(bits(eval.After(cpu, several, share, memory, &demand)), bits(NodeFragmentation(v, weighted, resources)))
          << "trial " << trial;
      ASSERT_EQ(bits(demand), bits(NodeDemandFragmentation(v, weighted, resources))) << "trial " << trial;
      ASSERT_EQ(bits(eval.AfterStranded(cpu, several, share, memory)),
                bits(NodeStrandedFragmentation(v, weighted, resources)))
          << "trial " << trial;
      ASSERT_EQ(bits(eval.AfterAll(cpu, several, share, memory, &all_demand, &all_stranded)),
                bits(NodeFragmentation(v, weighted, resources)));
      ASSERT_EQ(bits(all_demand), bits(demand)) << "trial " << trial;
      ASSERT_EQ(bits(all_stranded), bits(NodeStrandedFragmentation(v, weighted, resources))) << "trial " << trial;
      ASSERT_TRUE(pooled_matches(v, several, share, cpu, memory)) << "trial " << trial;
    }
    std::vector<int> whole;
    std::vector<GpuView> after = n.gpus;
    for (int i = 0; i < gpus; ++i) {
      if (!n.gpus[i].usable || n.gpus[i].free_milli < kOneGpu) continue;
      whole.push_back(i);
      after[i].free_milli -= kOneGpu;
      NodeView v = n.view;
      v.gpus = after;
      v.cpu_milli_free -= cpu;
      v.memory_free -= memory;
      double demand = -1;
      ASSERT_EQ(bits(eval.After(cpu, whole, kOneGpu, memory, &demand)), bits(NodeFragmentation(v, weighted, resources)))
          << "trial " << trial;
      ASSERT_EQ(bits(demand), bits(NodeDemandFragmentation(v, weighted, resources))) << "trial " << trial;
      ASSERT_EQ(bits(eval.AfterStranded(cpu, whole, kOneGpu, memory)), bits(NodeStrandedFragmentation(v, weighted, resources)))
          << "trial " << trial;
      double all_demand = -1, all_stranded = -1;
      ASSERT_EQ(bits(eval.AfterAll(cpu, whole, kOneGpu, memory, &all_demand, &all_stranded)),
                bits(NodeFragmentation(v, weighted, resources)));
      ASSERT_EQ(bits(all_demand), bits(demand)) << "trial " << trial;
      ASSERT_EQ(bits(all_stranded), bits(NodeStrandedFragmentation(v, weighted, resources))) << "trial " << trial;
      ASSERT_TRUE(pooled_matches(v, whole, kOneGpu, cpu, memory)) << "trial " << trial;
    }
  }
  }
  }
}

// The supply share of a shape: the GPUs of the nodes that could take one of its pods when empty.
TEST(Fragmentation, SupplySharesCountTheGpusOfTheNodesThatCouldTakeAPod) {
  std::vector<TestNode> nodes;
  nodes.reserve(16);  // a TestNode's view points into its own GPUs: never moved
  for (int i = 0; i < 2; ++i) nodes.emplace_back(std::vector<MilliGpu>(8, kOneGpu), 128000, "G3");
  for (int i = 0; i < 4; ++i) nodes.emplace_back(std::vector<MilliGpu>(8, 0), 0, "G2");  // full now: totals count
  for (int i = 0; i < 10; ++i) nodes.emplace_back(std::vector<MilliGpu>(2, kOneGpu), 64000, "T4");
  for (int i = 0; i < 2; ++i) {
    nodes[i].view.cpu_milli_total = 128000;
    nodes[i].view.memory_total = 768 * kGiB;
  }
  for (int i = 2; i < 6; ++i) nodes[i].view.cpu_milli_total = 96000;
  std::vector<NodeView> views;
  for (const TestNode& n : nodes) views.push_back(n.view);  // 16 + 32 + 20 = 68 GPUs
  std::vector<WorkloadShape> shapes = {
      Shape(120000, 8, kOneGpu, 0.1),         // only the 128-CPU nodes: 16 GPUs
      Shape(4000, 1, 500, 0.5),               // any node
      Shape(4000, 1, kOneGpu, 0.2, {"T4"}),   // only T4: 20 GPUs
      Shape(90000, 4, kOneGpu, 0.1),          // the 96- and 128-CPU nodes: 48 GPUs
      Shape(1000, 0, 0, 0.05),                // CPU-only: any node with a GPU
      Shape(4000, 1, kOneGpu, 0.05, {"A100"}),  // no node: 1 (nothing to keep for it)
  };
  shapes[3].host_memory = 300 * kGiB;  // the 96-CPU nodes have 256 GiB: only the 128-CPU ones
  SetSupplyShares(shapes, views);
  EXPECT_DOUBLE_EQ(shapes[0].supply_share, 16.0 / 68);
  EXPECT_DOUBLE_EQ(shapes[1].supply_share, 1.0);
  EXPECT_DOUBLE_EQ(shapes[2].supply_share, 20.0 / 68);
  EXPECT_DOUBLE_EQ(shapes[3].supply_share, 16.0 / 68);
  EXPECT_DOUBLE_EQ(shapes[4].supply_share, 1.0);
  EXPECT_DOUBLE_EQ(shapes[5].supply_share, 1.0);
  // One entry per kind of node, with how many nodes it stands for: the same shares.
  std::vector<WorkloadShape> grouped = shapes;
  const NodeView kinds[] = {views[0], views[2], views[6]};
  const std::int64_t copies[] = {2, 4, 10};
  SetSupplyShares(grouped, kinds, copies);
  for (std::size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(grouped[i].supply_share, shapes[i].supply_share) << i;
  // The weights: frequency / supply share, normalised; with every share 1, the frequencies.
  const std::vector<WorkloadShape> w = SupplyWeighted(shapes);
  double total = 0;
  for (const WorkloadShape& s : w) total += s.frequency;
  EXPECT_NEAR(total, 1.0, 1e-12);
  EXPECT_NEAR(w[0].frequency / w[1].frequency, (0.1 / (16.0 / 68)) / 0.5, 1e-12);
  EXPECT_NEAR(w[2].frequency / w[4].frequency, (0.2 / (20.0 / 68)) / 0.05, 1e-12);
  for (WorkloadShape& s : shapes) s.supply_share = 1;
  const std::vector<WorkloadShape> same = SupplyWeighted(shapes);
  for (std::size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(same[i].frequency, shapes[i].frequency);
}

// A 4-GPU pod, two empty 8-GPU nodes: a large one (128 CPUs, 768 GiB) and a standard one (96
// CPUs, 384 GiB). On the standard node the pod's 313 GiB leave too little memory for the common
// 1-GPU shape beside the other four GPUs; on the large one they leave too few GPUs for the rare
// 8-GPU, 120-CPU shape, which no other node takes. By frequency the large node wins (the common
// shape weighs 0.9); by supply, with the rare shape's nodes a twentieth of the cluster, the
// standard node does, and the large node stays whole for the pods only it can take.
TEST(GpuslicePolicy, KeepsTheFewNodesAScarceShapeCanUse) {
  auto ours = MakePolicy("gpuslice");
  ASSERT_TRUE(ours.ok());
  std::vector<WorkloadShape> shapes = {Shape(8000, 1, kOneGpu, 0.9), Shape(120000, 8, kOneGpu, 0.1)};
  shapes[0].host_memory = 100 * kGiB;
  shapes[1].host_memory = 600 * kGiB;
  TestNode large(std::vector<MilliGpu>(8, kOneGpu), 128000), standard(std::vector<MilliGpu>(8, kOneGpu), 96000);
  large.view.cpu_milli_total = 128000;
  large.view.memory_free = large.view.memory_total = 768 * kGiB;
  standard.view.cpu_milli_total = 96000;
  standard.view.memory_free = standard.view.memory_total = 384 * kGiB;
  PlacementRequest req;
  req.cpu_milli = 60000;
  req.num_gpus = 4;
  req.milli_per_gpu = kOneGpu;
  req.host_memory = 313 * kGiB;
  auto pick = [&](const std::vector<WorkloadShape>& workload) {
    PlacementContext ctx{workload, nullptr};
    auto l = (*ours)->Score(req, large.view, ctx), s = (*ours)->Score(req, standard.view, ctx);
    EXPECT_TRUE(l && s);
    return l->score > s->score ? "large" : "standard";
  };
  EXPECT_STREQ(pick(shapes), "large");  // supply shares not known (1): FGD's frequencies
  shapes[1].supply_share = 0.05;
  EXPECT_STREQ(pick(shapes), "standard");
}

// The typical shapes are shares alone; the pods that ask eight whole GPUs are too rare to be
// among them but bring much of the GPU asked. Against the typical shapes a share is best on the
// empty node (its half GPU left is still a share); against the demand workload the share goes
// to the used node and the empty one stays whole for the 8-GPU pods. Whole-GPU requests are
// scored against the typical shapes either way.
TEST(GpuslicePolicy, ScoresSharesAgainstTheShapesThatBringTheGpuAsked) {
  auto ours = MakePolicy("gpuslice");
  ASSERT_TRUE(ours.ok());
  const std::vector<WorkloadShape> typical = {Shape(1000, 1, 500, 1.0)};
  const std::vector<WorkloadShape> demand = {Shape(1000, 1, 500, 0.95), Shape(8000, 8, kOneGpu, 0.05)};
  TestNode empty(std::vector<MilliGpu>(8, kOneGpu), 64000), used({600, 0, 0, 0, 0, 0, 0, 0}, 64000);
  PlacementRequest share;
  share.cpu_milli = 1000;
  share.num_gpus = 1;
  share.milli_per_gpu = 500;
  auto pick = [&](const PlacementContext& ctx) {
    auto e = (*ours)->Score(share, empty.view, ctx), u = (*ours)->Score(share, used.view, ctx);
    EXPECT_TRUE(e && u);
    return e->score > u->score ? "empty" : "used";
  };
  EXPECT_STREQ(pick(PlacementContext{typical, nullptr}), "empty");
  EXPECT_STREQ(pick(PlacementContext{typical, nullptr, demand}), "used");
  // The same where the demand shapes do not start with the typical ones (the policy then
  // evaluates them after the typical ones, which weigh nothing among them).
  const std::vector<WorkloadShape> reordered = {demand[1], demand[0]};
  EXPECT_STREQ(pick(PlacementContext{typical, nullptr, reordered}), "used");
  PlacementRequest whole;
  whole.cpu_milli = 1000;
  whole.num_gpus = 1;
  whole.milli_per_gpu = kOneGpu;
  auto plain = (*ours)->Score(whole, empty.view, PlacementContext{typical, nullptr});
  auto with_demand = (*ours)->Score(whole, empty.view, PlacementContext{typical, nullptr, demand});
  ASSERT_TRUE(plain && with_demand);
  EXPECT_EQ(plain->score, with_demand->score);
}

}  // namespace
}  // namespace gpuslice::sched
