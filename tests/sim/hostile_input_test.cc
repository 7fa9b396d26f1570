// Hostile or careless input to `gpuslice sim`: trace times that are absurd or overflow the
// microsecond arithmetic, oversized clusters, NaN factors, a directory as --config. Each is an
// error naming the file and line (or the flag) and the value; none allocates without bound,
// aborts, or prints nonsense (negative GPU-hours) with success.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim/fgd_command.h"
#include "sim/replay_command.h"

namespace gpuslice::sim {
namespace {

using ::testing::HasSubstr;

std::filesystem::path Dir() {
  auto d = std::filesystem::temp_directory_path() / ("gpuslice_sim_hostile_" + std::to_string(getpid()));
  std::filesystem::create_directories(d);
  return d;
}

struct TraceCase {
  const char* name;
  const char* csv;     // header + one row (line 2)
  const char* error;   // expected substring after "<path>:2: "
};

class HugeTraceTimes : public ::testing::TestWithParam<TraceCase> {};

TEST_P(HugeTraceTimes, AreAnErrorNamingFileLineAndValue) {
  const std::string path = (Dir() / (std::string(GetParam().name) + ".csv")).string();
  std::ofstream(path) << GetParam().csv;
  ReplayCommandOptions o;
  o.trace = path;
  o.cluster = "2x8";
  o.policies = {"gpuslice"};
  std::ostringstream out, err;
  auto r = RunReplayCommand(o, out, err);
  ASSERT_FALSE(r.ok()) << GetParam().name << " replayed:\n" << out.str();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr(path + ":2: " + GetParam().error)) << r.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Table, HugeTraceTimes,
    ::testing::Values(
        TraceCase{"duration_1e300", "submit,duration,gpus\n0,1e300,1\n",
                  "column 'duration': value '1e300' is more than 10 years"},
        TraceCase{"submit_1e19", "submit,duration,gpus\n1e19,10,1\n",
                  "column 'submit': value '1e19' is more than 10 years"},
        TraceCase{"duration_9e18_seconds", "submit,duration,gpus\n0,9000000000000000000,1\n",
                  "column 'duration': value '9000000000000000000' is more than 10 years"},
        TraceCase{"duration_36500d", "submit,duration,gpus\n0,36500d,1\n",
                  "column 'duration': value '36500d' is more than 10 years"},
        TraceCase{"duration_overflowing_unit", "submit,duration,gpus\n0,99999999999999999d,1\n",
                  "column 'duration': value '99999999999999999d' is not seconds or a duration"},
        TraceCase{"sum_past_10_years", "submit,duration,gpus\n315000000,3000000,1\n",
                  "column 'duration': value '3000000' ends more than 10 years after time 0"},
        TraceCase{"cpu_1e300", "submit,duration,gpus,cpu\n0,10,1,1e300\n",
                  "column 'cpu': value '1e300' is more than a billion CPUs"},
        TraceCase{"openb_creation_2p40", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,"
                                         "deletion_time\np,1000,1024,1,1000,,1099511627776,1099511627777\n",
                  "column 'creation_time': value '1099511627776' is out of range"}),
    [](const ::testing::TestParamInfo<TraceCase>& info) { return std::string(info.param.name); });

TEST(SimReplayInput, ASaneLongTraceStillReplaysWithPositiveGpuHours) {
  const std::string path = (Dir() / "long.csv").string();
  std::ofstream(path) << "submit,duration,gpus\n0,3650d,1\n10,1h,2\n";
  ReplayCommandOptions o;
  o.trace = path;
  o.cluster = "1x8";
  o.policies = {"gpuslice"};
  std::ostringstream out, err;
  auto r = RunReplayCommand(o, out, err);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_NEAR((*r)[0].gpu_hours_held, 3650 * 24 + 2, 1e-6);
}

TEST(SimReplayInput, OversizedClusterIsRefusedBeforeAllocating) {
  for (const char* spec : {"10000000x64", "1000001x1", "1x8:GPU:0", "1x8:GPU:128:0"}) {
    auto c = ParseClusterSpec(spec);
    ASSERT_FALSE(c.ok()) << spec;
    EXPECT_THAT(c.status().message(), HasSubstr(std::string("--cluster '") + spec + "'"));
  }
  EXPECT_THAT(ParseClusterSpec("10000000x64").status().message(), HasSubstr("at most 1000000"));
  EXPECT_TRUE(ParseClusterSpec("125000x8").ok());
}

TEST(SimReplayInput, ADirectoryAsConfigIsAnErrorNamingIt) {
  const std::string path = (Dir() / "ok.csv").string();
  std::ofstream(path) << "submit,duration,gpus\n0,10,1\n";
  ReplayCommandOptions o;
  o.trace = path;
  o.cluster = "1x8";
  o.config = Dir().string();
  std::ostringstream out, err;
  auto r = RunReplayCommand(o, out, err);
  ASSERT_FALSE(r.ok()) << "replayed with the built-in queues:\n" << out.str();
  EXPECT_THAT(r.status().message(), HasSubstr("'" + Dir().string() + "': is a directory"));
}

TEST(SimFgdInput, InflationMustBeAFiniteNumberInRange) {
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0, 0.0, 1e9}) {
    FgdCommandOptions o;
    o.trace = "/nonexistent/openb_pod_list_default.csv";  // never read: the flag is checked first
    o.policies = {"fgd"};
    o.seeds = {42};
    o.inflation = bad;
    std::ostringstream out, err;
    auto r = RunFgdCommand(o, out, err);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_THAT(r.status().message(), HasSubstr("--inflation")) << bad;
  }
}

TEST(SimFgdInput, SeedRangesAreBounded) {
  EXPECT_FALSE(ParseSeeds("0-1000").ok());
  EXPECT_TRUE(ParseSeeds("0-999").ok());
  EXPECT_FALSE(ParseSeeds("-1").ok());
  EXPECT_FALSE(ParseSeeds("99999999999999999999999").ok());
}

}  // namespace
}  // namespace gpuslice::sim
