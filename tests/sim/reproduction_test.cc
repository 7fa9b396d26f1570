// Reproduction of the FGD authors' published means on the bundled default and cpu250 traces,
// with 2-3 of their 10 seeds (every bundled trace with ten seeds is scripts/evaluate).
//
// Tolerance: the issue asks for 0.5 percentage points on the 10-seed mean. With n = 3 seeds our
// mean also carries sampling noise; the published per-seed standard deviation s (read from the
// same file) bounds it: 3 s / sqrt(n) covers 99.7% of it. So |ours - published| must be within
// 0.5 + 3 s / sqrt(3). Go's math/rand cannot be replayed, so seeds are comparable only in mean.
// The policies checked are the ones whose published spread is small enough for that bound to
// stay near 0.5 (fgd s = 0.08-0.11, best-fit s = 0.13-0.14); the rest, and every trace with ten
// seeds, is scripts/evaluate (docs/evaluation.md). Two policies keep the test fast under ASan.
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "sim/csv.h"
#include "sim/expected.h"
#include "sim/fgd_protocol.h"

namespace gpuslice::sim {
namespace {

const std::string kData = GPUSLICE_DATA_DIR;

double PublishedStdDev(const std::string& workload, const std::string& policy, int percent) {
  auto t = CsvTable::Open(kData + "/fgd-kss-expected-results/analysis_allo_discrete.csv", {"workload"});
  EXPECT_TRUE(t.ok());
  std::vector<double> v;
  while (t->Next()) {
    if (*t->Field("workload") != workload || *t->Field("sc_policy") != PublishedPolicyName(policy)) continue;
    v.push_back(*t->Double(std::to_string(percent)));
  }
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

// Runs `policies` on `trace` with seeds 42.. and checks the mean against the published one.
void ExpectPublishedMeans(const std::string& trace, std::initializer_list<const char*> policies, int seeds) {
  auto nodes = ReadOpenbNodes(kData + "/alibaba-gpu-v2023/openb_node_list_gpu_node.csv");
  auto pods = ReadOpenbPods(kData + "/alibaba-gpu-v2023/" + trace + ".csv");
  ASSERT_TRUE(nodes.ok() && pods.ok());
  FgdInputs in = MakeFgdInputs(nodes->nodes, pods->pods);
  auto published = PublishedResults::Read(kData + "/fgd-kss-expected-results/analysis_allo_discrete.csv");
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  for (const char* name : policies) {
    auto policy = sched::MakePolicy(name);
    ASSERT_TRUE(policy.ok());
    std::vector<FgdRun> runs;
    for (int s = 0; s < seeds; ++s) runs.push_back(RunFgdOnce(in, **policy, 42 + s, 1.3));
    std::vector<const FgdRun*> ptrs;
    for (const FgdRun& r : runs) ptrs.push_back(&r);
    const FgdCurves mean = MeanCurves(ptrs);
    for (int x : {100, 130}) {
      const auto want = published->MeanAlloc(trace, name, x);
      ASSERT_TRUE(want.has_value());
      const double tol = 0.5 + 3 * PublishedStdDev(trace, name, x) / std::sqrt(seeds);
      EXPECT_NEAR(mean.alloc_pct[x], *want, tol) << trace << " " << name << " at " << x << "% arrived";
    }
  }
}

TEST(Reproduction, DefaultTraceMatchesPublishedMeans) {
  ExpectPublishedMeans("openb_pod_list_default", {"fgd", "best-fit-fgd"}, 3);
}

// cpu250: CPU-only pods make CPU the binding resource, and which node a CPU-only pod lands on
// among FGD's many equal scores decides how much GPU is stranded. With ties broken by the
// artifact's node-name order (a seeded random node priority, placer.h) FGD lands on the
// published mean; the earlier chunk-interleaved order left it 2.1 points low.
TEST(Reproduction, Cpu250FgdMatchesPublishedMean) {
  ExpectPublishedMeans("openb_pod_list_cpu250", {"fgd"}, 2);
}

}  // namespace
}  // namespace gpuslice::sim
