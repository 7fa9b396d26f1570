// RunProfile: what `gpuslice profile` does, end to end through the library (the cmd file only
// parses flags): trace mode and recording mode with --out, --job, and usage errors.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profile/report.h"

namespace gpuslice::profile {
namespace {

std::string TempDir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("gpuslice_command_test_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::remove_all(p);
  return p.string();
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(RunProfile, TraceModeWritesReportAndTimeline) {
  ProfileOptions o;
  o.traces = {std::string(GPUSLICE_DATA_DIR) + "/pytorch-profiler/nccl_data.json.gz"};
  o.out_dir = TempDir("trace");
  std::ostringstream out;
  Status st = RunProfile(o, out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_THAT(out.str(), testing::HasSubstr("What to fix first:"));
  // 2-GPU DDP CNN, GPU busy 23.6%, mostly host-bound idle: under-used is the first thing to fix.
  EXPECT_THAT(out.str(), testing::HasSubstr("1. [moderate] GPU under-used"));
  auto j = ReadJson(o.out_dir + "/report.json");
  EXPECT_EQ(j["kind"], "trace");
  EXPECT_EQ(j["findings"][0]["id"], "low-utilisation");
  ASSERT_EQ(j["ranks"].size(), 1u);
  EXPECT_EQ(j["ranks"][0]["steps"].size(), 3u);
  // Phase totals in the JSON add up to the step total.
  std::int64_t sum = 0;
  for (auto& [k, v] : j["ranks"][0]["phases_ns"].items()) sum += v.get<std::int64_t>();
  EXPECT_EQ(sum, j["ranks"][0]["total_step_ns"].get<std::int64_t>());
  std::string svg = ReadText(o.out_dir + "/timeline.svg");
  EXPECT_THAT(svg, testing::StartsWith("<?xml"));
  EXPECT_THAT(svg, testing::HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(svg, testing::HasSubstr(">#4</text>"));   // first step boundary label
  EXPECT_THAT(svg, testing::HasSubstr(">communication (exposed)</text>"));  // legend
  EXPECT_THAT(svg, testing::EndsWith("</svg>\n"));
  std::filesystem::remove_all(o.out_dir);
}

TEST(RunProfile, TwoRanksAreReportedTogether) {
  ProfileOptions o;
  std::string d = std::string(GPUSLICE_DATA_DIR) + "/pytorch-profiler/";
  o.traces = {d + "nccl_data.json.gz", d + "nccl_data.json.gz"};  // stand-in for two ranks
  o.json_to_stdout = true;
  std::ostringstream out;
  ASSERT_TRUE(RunProfile(o, out).ok());
  auto j = nlohmann::json::parse(out.str());
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][1]["rank"], 0);
  EXPECT_EQ(j["ranks"][1]["world_size"], 2);
  ASSERT_FALSE(j["findings"].empty());
  EXPECT_EQ(j["findings"][0]["id"], "low-utilisation");
}

TEST(RunProfile, RecordingModeWithSimulatedGpu) {
  std::string prog = TempDir("prog.py");
  std::ofstream(prog) << "import time, gpuslice_steps\n"
                         "def loader():\n"
                         "    for i in range(6):\n"
                         "        time.sleep(0.05)\n"
                         "        yield i\n"
                         "for b in gpuslice_steps.steps(loader()):\n"
                         "    pass\n";
  ProfileOptions o;
  o.command = {"python3", prog};
  o.simulate = "1xA100-80GB";
  o.simulate_util_permille = 120;
  o.interval = 50 * kMillisecond;
  o.out_dir = TempDir("rec");
  setenv("GPUSLICE_PYTHON_DIR", (std::string(GPUSLICE_SOURCE_DIR) + "/python").c_str(), 1);
  std::ostringstream out;
  Status st = RunProfile(o, out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_THAT(out.str(), testing::HasSubstr("steps marked: 6"));
  auto j = ReadJson(o.out_dir + "/report.json");
  EXPECT_EQ(j["kind"], "recording");
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(j["steps"].size(), 6u);
  EXPECT_EQ(j["findings"][0]["id"], "input-bound");
  EXPECT_NEAR(j["gpu_busy_share"].get<double>(), 0.12, 1e-9);
  EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/steps.jsonl"));
  std::string svg = ReadText(o.out_dir + "/timeline.svg");
  EXPECT_THAT(svg, testing::HasSubstr("step 0: waiting for data"));
  std::filesystem::remove_all(o.out_dir);
  std::filesystem::remove(prog);
}

TEST(RunProfile, JobNeedsTheDaemonAndModesAreExclusive) {
  ProfileOptions job;
  job.job = "42";
  job.socket = TempDir("no-daemon.sock");
  std::ostringstream out;
  Status st = RunProfile(job, out);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), testing::HasSubstr("cannot reach the gpuslice daemon"));
  job.job = "4x";
  EXPECT_EQ(RunProfile(job, out).code(), StatusCode::kInvalidArgument);
  ProfileOptions none;
  EXPECT_EQ(RunProfile(none, out).code(), StatusCode::kInvalidArgument);
  ProfileOptions both;
  both.traces = {"x.json"};
  both.pid = 1;
  EXPECT_EQ(RunProfile(both, out).code(), StatusCode::kInvalidArgument);
  ProfileOptions bad;
  bad.traces = {"/nonexistent.json.gz"};
  Status b = RunProfile(bad, out);
  EXPECT_EQ(b.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(b.message(), testing::HasSubstr("/nonexistent.json.gz: cannot open"));
}

// What the daemon answers on GET /v1/jobs/ID/samples becomes a GPU-only recording with the
// same diagnosis as a recording (the e2e test in tests/daemon goes through the real daemon).
TEST(JobSamples, BecomeAGpuOnlyRecordingAndAreDiagnosed) {
  nlohmann::json body = {
      {"job", {{"id", 7}, {"user", "alice"}, {"queue", "training"}, {"state", "running"}, {"pid", 1234}}},
      {"simulated", true}, {"device_model", "NVIDIA H100 80GB HBM3"}, {"memory_total", 80ll << 30},
      {"slices", {{{"id", 3}, {"kind", "whole"}, {"devices", {0}}, {"memory_total", 80ll << 30}}}},
      {"samples", nlohmann::json::array()}};
  // 20% then 40% busy: mean 30%; memory peaks at 76 of 80 GiB (95%).
  for (int i = 0; i < 4; ++i) {
    body["samples"].push_back({{"t", 1'000'000 * i}, {"util_permille", i < 2 ? 200 : 400},
                               {"memory_used", (i == 3 ? 76ll : 10ll) << 30}, {"downsampled", false}});
  }
  auto rec = RecordingFromJobSamples(body);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  ASSERT_EQ(rec->samples.size(), 4u);
  EXPECT_EQ(rec->end - rec->start, 3'000'000);
  Evidence e = EvidenceFromRecording(*rec);
  ASSERT_TRUE(e.gpu_busy_share.has_value());
  EXPECT_NEAR(*e.gpu_busy_share, 0.3, 1e-9);
  std::vector<Finding> f = Diagnose(e);
  std::string text = JobReportText(body, *rec, e, f);
  EXPECT_THAT(text, testing::HasSubstr("job 7 (alice, queue training, running)"));
  EXPECT_THAT(text, testing::HasSubstr("mean utilisation 30.0%, peak memory 76GiB of 80GiB"));
  EXPECT_THAT(text, testing::HasSubstr("GPU under-used"));
  EXPECT_THAT(text, testing::HasSubstr("Device memory nearly full"));
  EXPECT_THAT(text, testing::Not(testing::HasSubstr("main process:")));

  body["samples"][0].erase("util_permille");
  auto bad = RecordingFromJobSamples(body);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), testing::HasSubstr("util_permille"));
}

}  // namespace
}  // namespace gpuslice::profile
