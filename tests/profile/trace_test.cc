// Trace analysis on real Kineto traces (data/pytorch-profiler/, see SOURCE.md there) checked
// against figures computed independently by tests/profile/reference_figures.py (stdlib
// Python over the raw events), plus malformed/truncated inputs.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "profile/analysis.h"
#include "profile/diagnosis.h"
#include "profile/trace.h"

namespace gpuslice::profile {
namespace {

std::string Data(const char* name) { return std::string(GPUSLICE_DATA_DIR) + "/pytorch-profiler/" + name; }

TraceAnalysis Analyse(const std::string& path) {
  auto parsed = ParseTraceFile(path);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto a = AnalyseTrace(*parsed);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::move(a).value();
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double MedianBusyPct(const TraceAnalysis& a) {
  std::vector<double> v;
  for (const auto& s : a.steps) v.push_back(100.0 * double(s.gpu_busy) / double(s.duration()));
  return MedianOf(v);
}
double MedianRawDataPct(const TraceAnalysis& a) {
  std::vector<double> v;
  for (const auto& s : a.steps) v.push_back(100.0 * double(s.data_loading_raw) / double(s.duration()));
  return MedianOf(v);
}
double MedianRawCommPct(const TraceAnalysis& a) {
  std::vector<double> v;
  for (const auto& s : a.steps) v.push_back(100.0 * double(s.communication_raw) / double(s.duration()));
  return MedianOf(v);
}

// Invariant: every step's phases add up to the step, and the GPU-active phases to the
// GPU-busy union.
void ExpectConservation(const TraceAnalysis& a) {
  for (const auto& s : a.steps) {
    Nanos sum = 0, gpu = 0;
    for (int p = 0; p < kPhaseCount; ++p) {
      sum += s.phases[p];
      if (PhaseIsGpuActive(Phase(p))) gpu += s.phases[p];
    }
    EXPECT_EQ(sum, s.duration()) << "step " << s.number;
    EXPECT_EQ(gpu, s.gpu_busy) << "step " << s.number;
  }
}

// Reference figures (python3 tests/profile/reference_figures.py data/pytorch-profiler/*.gz):
//   resnet50_num_workers_0: steps=6 step_ms_median=176.273 busy_median=56.23% dl_median=39.47%
//   resnet50_num_workers_4: steps=6 step_ms_median=126.548 busy_median=80.67% dl_median=0.91%
//   nccl_data:              steps=3 step_ms_median=222.442 busy_median=22.63% nccl_median=5.60%
// (they also match the table in /work/shared/traces/pytorch-profiler/SOURCE.md.)
TEST(TraceAnalysis, ResNetNumWorkers0MatchesIndependentFigures) {
  TraceAnalysis a = Analyse(Data("resnet50_num_workers_0.pt.trace.json.gz"));
  ASSERT_EQ(a.steps.size(), 6u);
  EXPECT_EQ(a.steps.front().number, 5);
  EXPECT_EQ(a.steps.back().number, 10);
  EXPECT_EQ(a.step_source, StepSource::kProfilerStep);
  EXPECT_EQ(a.device_name, "Tesla V100-DGXS-32GB");
  EXPECT_EQ(a.compute_major, 7);
  std::vector<double> ms;
  for (const auto& s : a.steps) ms.push_back(double(s.duration()) / 1e6);
  EXPECT_NEAR(MedianOf(ms), 176.273, 0.001);
  EXPECT_NEAR(MedianBusyPct(a), 56.23, 0.01);
  EXPECT_NEAR(MedianRawDataPct(a), 39.47, 0.01);
  ExpectConservation(a);
  // Data loading that the GPU does not hide is most of the raw DataLoader time here
  // (one process loads, then computes).
  EXPECT_GT(MedianShare(a, Phase::kDataLoading), 0.30);
  EXPECT_GT(a.total[int(Phase::kBackward)], a.total[int(Phase::kForward)]);
  EXPECT_GT(a.total[int(Phase::kOptimizer)], 0);
  EXPECT_GT(a.total[int(Phase::kHostToDevice)], 0);
  EXPECT_EQ(a.total[int(Phase::kCommunication)], 0);
}

TEST(TraceAnalysis, ResNetNumWorkers4MatchesIndependentFigures) {
  TraceAnalysis a = Analyse(Data("resnet50_num_workers_4.pt.trace.json.gz"));
  ASSERT_EQ(a.steps.size(), 6u);
  std::vector<double> ms;
  for (const auto& s : a.steps) ms.push_back(double(s.duration()) / 1e6);
  EXPECT_NEAR(MedianOf(ms), 126.548, 0.001);
  EXPECT_NEAR(MedianBusyPct(a), 80.67, 0.01);
  EXPECT_NEAR(MedianRawDataPct(a), 0.91, 0.01);
  ExpectConservation(a);
}

TEST(TraceAnalysis, NcclTraceMatchesIndependentFigures) {
  TraceAnalysis a = Analyse(Data("nccl_data.json.gz"));
  ASSERT_EQ(a.steps.size(), 3u);
  EXPECT_EQ(a.rank, 0);
  EXPECT_EQ(a.world_size, 2);
  EXPECT_NEAR(MedianBusyPct(a), 22.63, 0.01);
  EXPECT_NEAR(MedianRawCommPct(a), 5.60, 0.01);
  ExpectConservation(a);
  EXPECT_GT(a.total[int(Phase::kCommunication)], 0);
  // Mostly idle: the idle phases dominate.
  EXPECT_GT(Share(a, Phase::kIdleHostBound) + Share(a, Phase::kIdleWaiting), 0.5);
}

}  // namespace
}  // namespace gpuslice::profile
