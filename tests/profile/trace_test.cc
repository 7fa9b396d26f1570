// Trace analysis on real Kineto traces (data/pytorch-profiler/, see SOURCE.md there) checked
// against figures computed independently by tests/profile/reference_figures.py (stdlib
// Python over the raw events), plus malformed/truncated inputs.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "profile/analysis.h"
#include "profile/diagnosis.h"
#include "profile/report.h"
#include "profile/trace.h"

namespace gpuslice::profile {
namespace {

std::string Data(const char* name) { return std::string(GPUSLICE_DATA_DIR) + "/pytorch-profiler/" + name; }

// Each bundled trace is parsed once per test run (tens of MB of JSON: slow under ASan).
const TraceAnalysis& Analyse(const std::string& path) {
  static std::map<std::string, TraceAnalysis> cache;
  auto it = cache.find(path);
  if (it != cache.end()) return it->second;
  auto parsed = ParseTraceFile(path);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto a = AnalyseTrace(*parsed);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return cache.emplace(path, std::move(a).value()).first->second;
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
  const TraceAnalysis& a = Analyse(Data("resnet50_num_workers_0.pt.trace.json.gz"));
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
  const TraceAnalysis& a = Analyse(Data("resnet50_num_workers_4.pt.trace.json.gz"));
  ASSERT_EQ(a.steps.size(), 6u);
  std::vector<double> ms;
  for (const auto& s : a.steps) ms.push_back(double(s.duration()) / 1e6);
  EXPECT_NEAR(MedianOf(ms), 126.548, 0.001);
  EXPECT_NEAR(MedianBusyPct(a), 80.67, 0.01);
  EXPECT_NEAR(MedianRawDataPct(a), 0.91, 0.01);
  ExpectConservation(a);
}

TEST(TraceAnalysis, NcclTraceMatchesIndependentFigures) {
  const TraceAnalysis& a = Analyse(Data("nccl_data.json.gz"));
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

namespace gpuslice::profile {
namespace {

// ---- diagnosis on the real traces ----------------------------------------------------------

std::vector<Finding> DiagnoseFile(const char* name) {
  std::vector<TraceAnalysis> ranks{Analyse(Data(name))};
  return Diagnose(EvidenceFromTraces(ranks));
}

std::vector<std::string> Ids(const std::vector<Finding>& f) {
  std::vector<std::string> ids;
  for (const auto& x : f) ids.push_back(x.id);
  return ids;
}

TEST(TraceDiagnosis, NumWorkers0IsHighlyInputBoundFirst) {
  auto f = DiagnoseFile("resnet50_num_workers_0.pt.trace.json.gz");
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].id, "input-bound");
  EXPECT_EQ(f[0].severity, Severity::kHigh);
  EXPECT_THAT(f[0].evidence, testing::HasSubstr("data loading"));
  ASSERT_TRUE(f[0].expected_gain.has_value());
  EXPECT_GT(*f[0].expected_gain, 0.30);
  EXPECT_THAT(f[0].actions[0], testing::HasSubstr("num_workers"));
}

TEST(TraceDiagnosis, NumWorkers4IsNotInputBound) {
  auto f = DiagnoseFile("resnet50_num_workers_4.pt.trace.json.gz");
  EXPECT_THAT(Ids(f), testing::Not(testing::Contains("input-bound")));
}

// ---- synthetic traces with hand-computed breakdowns ---------------------------------------

// Builds a current-format Kineto trace. Times in µs.
struct TraceBuilder {
  std::string events;
  int corr = 1;
  int compute_major = 8;
  void Add(const std::string& e) { events += (events.empty() ? "" : ",\n") + e; }
  void Cpu(const std::string& name, double ts, double dur, int tid = 1, const char* cat = "cpu_op") {
    Add(fmt::format(R"({{"ph":"X","cat":"{}","name":"{}","pid":1,"tid":{},"ts":{},"dur":{}}})", cat, name, tid, ts, dur));
  }
  void Step(int n, double ts, double dur) { Cpu(fmt::format("ProfilerStep#{}", n), ts, dur, 1, "user_annotation"); }
  // A kernel launched at `launch` (runtime call of `launch_dur`) running [ts, ts+dur).
  void Kernel(const std::string& name, double launch, double ts, double dur, int tid = 1, double launch_dur = 5) {
    int c = corr++;
    Add(fmt::format(R"({{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":{},"ts":{},"dur":{},"args":{{"correlation":{}}}}})",
                    tid, launch, launch_dur, c));
    Add(fmt::format(R"({{"ph":"X","cat":"kernel","name":"{}","pid":0,"tid":7,"ts":{},"dur":{},"args":{{"correlation":{},"device":0}}}})",
                    name, ts, dur, c));
  }
  std::string Json() const {
    return fmt::format(R"({{"deviceProperties":[{{"id":0,"name":"Test GPU","totalGlobalMem":1000,"computeMajor":{}}}],
"traceEvents":[{}]}})", compute_major, events);
  }
};

TraceAnalysis AnalyseText(const std::string& json) {
  auto parsed = ParseTraceText(json, "synthetic");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto a = AnalyseTrace(*parsed, 10);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::move(a).value();
}

TEST(TraceAnalysis, SyntheticStepSplitsByHand) {
  // Step 0..1000 µs: DataLoader 0..300 (GPU idle), forward kernel launched at 300 runs
  // 310..510, backward kernel launched from the autograd thread (tid 2) at 520 runs 530..730,
  // optimizer kernel launched at 750 inside Optimizer.step runs 760..800, then a
  // cudaDeviceSynchronize 800..850 and nothing until 1000.
  TraceBuilder b;
  b.Step(1, 0, 1000);
  b.Cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 300);
  b.Kernel("volta_h884gemm_fwd", 300, 310, 200);
  b.Kernel("volta_h884gemm_bwd", 520, 530, 200, 2);
  b.Cpu("Optimizer.step#SGD.step", 740, 60);
  b.Kernel("multi_tensor_apply_kernel", 750, 760, 40);
  b.Cpu("cudaDeviceSynchronize", 800, 50, 1, "cuda_runtime");
  TraceAnalysis a = AnalyseText(b.Json());
  ASSERT_EQ(a.steps.size(), 1u);
  const auto& p = a.steps[0].phases;
  EXPECT_EQ(p[int(Phase::kDataLoading)], 300'000);
  EXPECT_EQ(p[int(Phase::kForward)], 200'000);
  EXPECT_EQ(p[int(Phase::kBackward)], 200'000);
  EXPECT_EQ(p[int(Phase::kOptimizer)], 40'000);
  EXPECT_EQ(p[int(Phase::kSynchronisation)], 50'000);
  // Idle: 300..310 (launched at 300 <= idle start: waiting), 510..530 (launch at 520: 10 host
  // + 10 waiting), 730..760 (launch at 750: 20 host + 10 waiting), 850..1000 (nothing follows:
  // host-bound 150).
  EXPECT_EQ(p[int(Phase::kIdleHostBound)], (10 + 20 + 150) * 1000);
  EXPECT_EQ(p[int(Phase::kIdleWaiting)], (10 + 10 + 10) * 1000);
  EXPECT_EQ(a.tensor_core_time, 400'000);
  EXPECT_EQ(a.tc_eligible_time, 400'000);
  ExpectConservation(a);
}

TEST(TraceDiagnosis, Fp32GemmsOnVoltaAskForMixedPrecision) {
  TraceBuilder b;
  b.compute_major = 7;
  for (int s = 0; s < 3; ++s) {
    double t0 = s * 1000;
    b.Step(s, t0, 1000);
    b.Kernel("volta_sgemm_128x64_nn", t0 + 10, t0 + 20, 900);
  }
  auto f = Diagnose(EvidenceFromTraces({AnalyseText(b.Json())}));
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].id, "no-tensor-cores");
  // Kernel time 900/1000 of the step, all FP32 GEMM; 2x speed-up -> 45% of step time.
  EXPECT_NEAR(*f[0].expected_gain, 0.45, 1e-9);
  // Compute capability 7.0 has FP16 tensor cores, neither bf16 nor TF32: no advice to use them.
  std::string all;
  for (const auto& a : f[0].actions) all += a + "\n";
  EXPECT_THAT(all, ::testing::HasSubstr("float16"));
  EXPECT_THAT(all, ::testing::HasSubstr("GradScaler"));
  EXPECT_THAT(all, ::testing::Not(::testing::HasSubstr("bfloat16")));
  EXPECT_THAT(all, ::testing::Not(::testing::HasSubstr("tf32")));
}

TEST(TraceDiagnosis, Fp32GemmsOnAmpereAskForBf16AndTf32) {
  TraceBuilder b;
  b.compute_major = 8;
  for (int s = 0; s < 3; ++s) {
    double t0 = s * 1000;
    b.Step(s, t0, 1000);
    b.Kernel("ampere_sgemm_128x64_nn", t0 + 10, t0 + 20, 900);
  }
  auto f = Diagnose(EvidenceFromTraces({AnalyseText(b.Json())}));
  ASSERT_FALSE(f.empty());
  ASSERT_EQ(f[0].id, "no-tensor-cores");
  std::string all;
  for (const auto& a : f[0].actions) all += a + "\n";
  EXPECT_THAT(all, ::testing::HasSubstr("bfloat16"));
  EXPECT_THAT(all, ::testing::HasSubstr("allow_tf32"));
}

TEST(Diagnosis, AdviceOnARecordingFollowsTheGpuNamed) {
  EXPECT_EQ(ComputeMajorOf("Tesla V100-SXM2-16GB"), 7);
  EXPECT_EQ(ComputeMajorOf("job 3 on slice 4 (shared), H100-80GB"), 9);
  EXPECT_EQ(ComputeMajorOf("NVIDIA A10"), 8);
  EXPECT_EQ(ComputeMajorOf("NVIDIA A100-SXM4-40GB"), 8);
  EXPECT_EQ(ComputeMajorOf("Tesla T4"), 7);
  EXPECT_EQ(ComputeMajorOf("NVIDIA L40S"), 8);
  EXPECT_EQ(ComputeMajorOf("a GPU nobody knows"), -1);
  // A busy V100 recording: the gpu-bound advice names fp16, not bf16.
  Evidence e;
  e.source = "recording";
  e.gpu_busy_share = 0.95;
  e.compute_major = 7;
  auto f = Diagnose(e);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].id, "gpu-bound");
  EXPECT_THAT(f[0].actions[0], ::testing::HasSubstr("fp16"));
  EXPECT_THAT(f[0].actions[0], ::testing::Not(::testing::HasSubstr("bf16")));
}

TEST(TraceDiagnosis, ExposedNcclTimeIsCommunicationBound) {
  TraceBuilder b;
  for (int s = 0; s < 2; ++s) {
    double t0 = s * 1000;
    b.Step(s, t0, 1000);
    b.Kernel("ampere_bf16_s16816gemm", t0 + 5, t0 + 10, 490);
    b.Kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", t0 + 6, t0 + 400, 550);  // 100 hidden, 450 exposed
  }
  TraceAnalysis a = AnalyseText(b.Json());
  EXPECT_EQ(a.total[int(Phase::kCommunication)], 2 * 450'000);
  EXPECT_EQ(a.total_communication_raw, 2 * 550'000);
  auto f = Diagnose(EvidenceFromTraces({a}));
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].id, "communication");
  EXPECT_NEAR(*f[0].expected_gain, 0.45, 1e-9);
}

TEST(TraceDiagnosis, ManyShortKernelsAreLaunchBound) {
  TraceBuilder b;
  b.Step(0, 0, 2000);
  for (int k = 0; k < 100; ++k) b.Kernel("elementwise_kernel", k * 20, k * 20 + 8, 3, 1, 10);
  auto f = Diagnose(EvidenceFromTraces({AnalyseText(b.Json())}));
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].id, "launch-bound");
  EXPECT_THAT(f[0].evidence, testing::HasSubstr("GPU busy 15.0%"));
}

TEST(TraceAnalysis, NoProfilerStepFallsBackToDataLoaderCalls) {
  TraceBuilder b;
  for (int s = 0; s < 3; ++s) {
    b.Cpu("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", s * 100, 10);
    b.Kernel("k", s * 100 + 10, s * 100 + 20, 50);
  }
  TraceAnalysis a = AnalyseText(b.Json());
  EXPECT_EQ(a.step_source, StepSource::kDataLoader);
  ASSERT_EQ(a.steps.size(), 3u);
  EXPECT_EQ(a.steps[0].duration(), 100'000);
  EXPECT_EQ(a.steps[2].duration(), 70'000);  // last one ends with the last kernel
}

// ---- malformed input -----------------------------------------------------------------------

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("gpuslice_profile_test_" + std::to_string(getpid()) + "_" + name)).string();
}

TEST(TraceErrors, TruncatedJsonNamesFileAndByte) {
  std::string path = TempPath("truncated.json");
  {
    TraceBuilder b;
    b.Step(0, 0, 10);
    std::string j = b.Json();
    std::ofstream(path) << j.substr(0, 120);
  }
  auto r = ParseTraceFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), testing::HasSubstr(path));
  EXPECT_THAT(r.status().message(), testing::HasSubstr("at byte 121"));
  EXPECT_THAT(r.status().message(), testing::HasSubstr("unexpected end of input"));
  std::filesystem::remove(path);
}

TEST(TraceErrors, TruncatedGzipSaysDamaged) {
  std::string path = TempPath("truncated.json.gz");
  {
    std::ifstream in(Data("nccl_data.json.gz"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  auto r = ParseTraceFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), testing::HasSubstr(path));
  EXPECT_THAT(r.status().message(), testing::HasSubstr("truncated"));
  std::filesystem::remove(path);
}

TEST(TraceErrors, SyntaxErrorAndNonTraceJson) {
  auto bad = ParseTraceText(R"({"traceEvents":[{"ph":"X",,}]})", "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), testing::HasSubstr("bad.json: malformed JSON at byte 27"));
  auto other = ParseTraceText(R"({"hello":[1,2,3]})", "other.json");
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(), testing::HasSubstr("no 'traceEvents' array"));
  auto missing = ParseTraceFile("/nonexistent/trace.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), testing::HasSubstr("/nonexistent/trace.json: cannot open"));
}

TEST(TraceErrors, OutOfRangeNumbersAreNamedNotUndefined) {
  // Found by fuzz/trace_fuzz.cc: a float ts converted to int64 out of range (undefined
  // behaviour); huge integer ts overflowed when scaled to ns or added to dur.
  for (const char* ts : {"6.55392e+22", "9000000000000000000", "18446744073709551615",
                         "-4000000000000001"}) {
    std::string json = std::string(R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":)") + ts +
                       R"(,"dur":1}]})";
    auto r = ParseTraceText(json, "big.json");
    ASSERT_FALSE(r.ok()) << ts;
    EXPECT_THAT(r.status().message(), testing::HasSubstr("big.json: 'ts' = ")) << ts;
    EXPECT_THAT(r.status().message(), testing::HasSubstr("out of range")) << ts;
  }
  auto dur = ParseTraceText(R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":5e15}]})", "d.json");
  ASSERT_FALSE(dur.ok());
  EXPECT_THAT(dur.status().message(), testing::HasSubstr("'dur' = "));
  // The largest accepted times still add up without overflow.
  auto edge = ParseTraceText(
      R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":4e15,"dur":4000000000000000}]})", "e.json");
  ASSERT_TRUE(edge.ok()) << edge.status().ToString();
  EXPECT_EQ(edge->gpu.at(0).end, 8'000'000'000'000'000'000);
  // A step number too long for int64 is unknown, not an overflow.
  auto step = ParseTraceText(
      R"({"traceEvents":[{"ph":"X","cat":"user_annotation","name":"ProfilerStep#99999999999999999999","ts":0,"dur":9}]})",
      "s.json");
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(step->steps.at(0).number, -1);
}

}  // namespace
}  // namespace gpuslice::profile

namespace gpuslice::profile {
namespace {

// A small .gz that inflates to more JSON than `profile` reads (a 1.9 MB file used to make it
// take 4 GB): refused with an error naming the limit once the limit is read, not held whole.
TEST(TraceFile, ACompressedTraceThatInflatesPastTheLimitIsRefused) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("gs_bomb_" + std::to_string(getpid()) + ".json.gz")).string();
  gzFile f = gzopen(path.c_str(), "wb1");
  ASSERT_NE(f, nullptr);
  gzputs(f, "{\"traceEvents\": [");
  const std::string spaces(1 << 20, ' ');  // whitespace: valid JSON for as long as it lasts
  for (int i = 0; i < 40; ++i) ASSERT_EQ(gzwrite(f, spaces.data(), static_cast<unsigned>(spaces.size())), 1 << 20);
  gzputs(f, "]}");
  gzclose(f);
  EXPECT_LT(std::filesystem::file_size(path), 1u << 20) << "a small file";
  // The same rule as the default limit (kMaxTraceJsonBytes, 512 MiB), at a size a test can afford.
  auto r = ParseTraceFile(path, std::size_t{32} << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("more than 32MiB of trace JSON once decompressed"));
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr(path));
  // Under the limit the same file is only what it is: a trace with no events.
  auto whole = ParseTraceFile(path, std::size_t{64} << 20);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->events_read, 0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace gpuslice::profile
