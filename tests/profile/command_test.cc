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

TEST(RunProfile, JobIsNotAvailableYetAndModesAreExclusive) {
  ProfileOptions job;
  job.job = "42";
  std::ostringstream out;
  Status st = RunProfile(job, out);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_THAT(st.message(), testing::HasSubstr("--job 42: reading what the daemon recorded is not available yet"));
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

}  // namespace
}  // namespace gpuslice::profile
