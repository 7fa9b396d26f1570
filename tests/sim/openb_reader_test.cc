// The openb readers on the bundled trace and on bad rows (error names file:line and column;
// --skip-bad-rows counts and keeps the first errors, never silently).
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim/openb.h"

namespace gpuslice::sim {
namespace {

using ::testing::HasSubstr;

const std::string kDir = std::string(GPUSLICE_DATA_DIR) + "/alibaba-gpu-v2023/";

std::string WriteTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("gpuslice_sim_" + name);
  std::ofstream(path) << text;
  return path.string();
}

TEST(OpenbReader, ReadsTheBundledDefaultTrace) {
  auto nodes = ReadOpenbNodes(kDir + "openb_node_list_gpu_node.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->nodes.size(), 1213u);
  int gpus = 0;
  for (const TraceNode& n : nodes->nodes) gpus += n.gpus;
  EXPECT_EQ(gpus, 6212);
  EXPECT_EQ(nodes->nodes[0].name, "openb-node-0000");
  EXPECT_EQ(nodes->nodes[0].cpu_milli, 64000);
  EXPECT_EQ(nodes->nodes[0].memory, 262144 * kMiB);
  EXPECT_EQ(nodes->nodes[0].model, "P100");

  auto pods = ReadOpenbPods(kDir + "openb_pod_list_default.csv");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->pods.size(), 8152u);
  const TracePod& p = pods->pods[1];  // openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
  EXPECT_EQ(p.name, "openb-pod-0001");
  EXPECT_EQ(p.cpu_milli, 6000);
  EXPECT_EQ(p.memory, 12288 * kMiB);
  EXPECT_EQ(p.num_gpus, 1);
  EXPECT_EQ(p.milli_per_gpu, 460);
  EXPECT_TRUE(p.allowed_models.empty());
  EXPECT_EQ(p.creation_s, 427061);
  EXPECT_EQ(p.deletion_s, 12902960);
  EXPECT_EQ(pods->skipped.count, 0);
}

TEST(OpenbReader, ReadsTheShortMultiGpuVariant) {
  auto pods = ReadOpenbPods(kDir + "openb_pod_list_multigpu20.csv");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  EXPECT_EQ(pods->pods.size(), 8324u);
  EXPECT_EQ(pods->pods[0].creation_s, -1);  // no time columns in that file
}

TEST(OpenbReader, SplitsModelConstraints) {
  const std::string path = WriteTemp("spec.csv",
                                     "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                                     "a,1000,10,1,500,V100M16|V100M32\n");
  auto pods = ReadOpenbPods(path);
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  EXPECT_THAT(pods->pods[0].allowed_models, ::testing::ElementsAre("V100M16", "V100M32"));
}

struct BadRow {
  const char* row;
  const char* expect;  // substring of the error
};

class OpenbBadRow : public ::testing::TestWithParam<BadRow> {};

TEST_P(OpenbBadRow, IsAnErrorNamingFileLineAndColumn) {
  const std::string path = WriteTemp("bad.csv",
                                     std::string("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                                 "ok,1000,10,1,500\n") +
                                         GetParam().row + "\n");
  auto pods = ReadOpenbPods(path);
  ASSERT_FALSE(pods.ok());
  EXPECT_EQ(pods.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(pods.status().message(), HasSubstr(path + ":3:"));
  EXPECT_THAT(pods.status().message(), HasSubstr(GetParam().expect));
}

INSTANTIATE_TEST_SUITE_P(
    Rows, OpenbBadRow,
    ::testing::Values(BadRow{"x,abc,10,1,500", "column 'cpu_milli': value 'abc' is not an integer"},
                      BadRow{"x,1000,10,1,1500", "column 'gpu_milli': value '1500' is out of range"},
                      BadRow{"x,1000,10,2,500", "must be 1000 when num_gpu is 2"},
                      BadRow{"x,1000,10,0,300", "must be 0 when num_gpu is 0"},
                      BadRow{"x,1000,10,1,0", "must be > 0 when num_gpu is 1"},
                      BadRow{"x,1000,10,-1,0", "column 'num_gpu': value '-1' is out of range"},
                      BadRow{"x,1000,10", "has 3 fields, the header has 5"},
                      BadRow{",1000,10,1,500", "column 'name'"}));

TEST(OpenbReader, SkipBadRowsCountsAndReportsThem) {
  const std::string path = WriteTemp("skip.csv",
                                     "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                     "a,1000,10,1,500\n"
                                     "b,oops,10,1,500\n"
                                     "c,1000,10,1,500\n"
                                     "d,1000,10,3,10\n");
  auto strict = ReadOpenbPods(path);
  ASSERT_FALSE(strict.ok());
  auto pods = ReadOpenbPods(path, ReadOptions{.skip_bad_rows = true});
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  EXPECT_EQ(pods->pods.size(), 2u);
  EXPECT_EQ(pods->skipped.count, 2);
  ASSERT_EQ(pods->skipped.first_errors.size(), 2u);
  EXPECT_THAT(pods->skipped.first_errors[0], HasSubstr(":3:"));
  EXPECT_THAT(pods->skipped.first_errors[1], HasSubstr(":5:"));
}

TEST(OpenbReader, MissingFileAndMissingColumnAreClearErrors) {
  auto missing = ReadOpenbPods("/nonexistent/pods.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  const std::string path = WriteTemp("nocol.csv", "name,cpu_milli,memory_mib,num_gpu\na,1,1,0\n");
  auto nocol = ReadOpenbPods(path);
  ASSERT_FALSE(nocol.ok());
  EXPECT_THAT(nocol.status().message(), HasSubstr("lacks required column 'gpu_milli'"));
}

TEST(OpenbReader, HeaderNamingAColumnTwiceIsAnError) {
  // Found by fuzz/openb_fuzz.cc: 5 names but 4 columns, so a 4-field row passed the field-count
  // check and the last column was read past the end of the row (heap overflow).
  const std::string path = WriteTemp("dup.csv", "sn,cpu_milli,memory_mib,gpu,sn\nn1,1000,1024,1\n");
  auto r = ReadOpenbNodes(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path + ":1: header names column 'sn' twice"));
}

}  // namespace
}  // namespace gpuslice::sim
