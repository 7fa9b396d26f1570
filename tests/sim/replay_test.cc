// The generic CSV reader and the online replay's mechanics on hand-checked scenarios.
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/placement/placement.h"
#include "sim/generic_trace.h"
#include "sim/replay.h"
#include "sim/replay_command.h"

namespace gpuslice::sim {
namespace {

using ::testing::HasSubstr;

std::string WriteTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("gpuslice_replay_" + name);
  std::ofstream(path) << text;
  return path.string();
}

TEST(GenericTrace, ReadsEveryColumnKind) {
  const std::string path = WriteTemp("ok.csv",
                                     "id,submit,duration,queue,gpus,memory,cpu,utilisation\n"
                                     "a,0,3600,training,2,,8,40\n"
                                     "b,1.5,30m,interactive,250m,10GiB,,\n"
                                     "c,90s,1h30m,,0.5,,,100\n");
  auto list = ReadGenericJobs(path);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->jobs.size(), 3u);
  const ReplayJob& a = list->jobs[0];
  EXPECT_EQ(a.id, "a");
  EXPECT_EQ(a.queue, "training");
  EXPECT_EQ(a.duration, kHour);
  EXPECT_EQ(a.request.num_gpus, 2);
  EXPECT_EQ(a.request.milli_per_gpu, 1000);
  EXPECT_EQ(a.request.cpu_milli, 8000);
  EXPECT_DOUBLE_EQ(a.utilisation, 0.4);
  const ReplayJob& b = list->jobs[1];
  EXPECT_EQ(b.submit, 1500 * kMillisecond);
  EXPECT_EQ(b.duration, 30 * kMinute);
  EXPECT_EQ(b.request.num_gpus, 1);
  EXPECT_EQ(b.request.milli_per_gpu, 250);
  EXPECT_EQ(b.request.gpu_memory_per_gpu, 10 * kGiB);
  EXPECT_LT(b.utilisation, 0);  // unknown
  EXPECT_EQ(list->jobs[2].submit, 90 * kSecond);
  EXPECT_EQ(list->jobs[2].queue, "");  // the config's default queue
  EXPECT_EQ(list->jobs[2].where, path + ":4");
  EXPECT_EQ(list->jobs[2].request.milli_per_gpu, 500);
}

TEST(GenericTrace, BadRowsNameFileLineColumnOrAreCounted) {
  const std::string path = WriteTemp("bad.csv",
                                     "submit,duration,gpus\n"
                                     "0,10,1\n"
                                     "5,ten,1\n"
                                     "6,10,1.5\n"
                                     "7,10,2\n");
  auto strict = ReadGenericJobs(path);
  ASSERT_FALSE(strict.ok());
  EXPECT_THAT(strict.status().message(), HasSubstr(path + ":3: column 'duration': value 'ten'"));
  auto lax = ReadGenericJobs(path, ReadOptions{.skip_bad_rows = true});
  ASSERT_TRUE(lax.ok());
  EXPECT_EQ(lax->jobs.size(), 2u);
  EXPECT_EQ(lax->skipped.count, 2);
  EXPECT_THAT(lax->skipped.first_errors[1], HasSubstr(":4: column 'gpus': value '1.5'"));
}

TEST(GenericTrace, HugeNumbersAreErrorsNotNegativeTimes) {
  // Found by fuzz/generic_trace_fuzz.cc: llround(1e306) is unspecified and came back negative,
  // a submit time before the trace (and a negative CPU demand from cpu = 1e300).
  for (const char* row : {"1e300,10,1,", "0,1e300,1,", "0,106751991d,1,", "0,10,1,1e300", "0,10,4294967297,"}) {
    const std::string path = WriteTemp("huge.csv", std::string("submit,duration,gpus,cpu\n") + row + "\n");
    auto r = ReadGenericJobs(path);
    ASSERT_FALSE(r.ok()) << row;
    EXPECT_THAT(r.status().message(), HasSubstr(":2: column '")) << row;
    // Named as too large, or as not a number of that kind: either way the error quotes it.
    EXPECT_THAT(r.status().message(), ::testing::AnyOf(HasSubstr("is more than "), HasSubstr("is not "))) << row;
  }
  // At the bounds (sim/csv.h kMaxTraceTime: ten years in all; a billion CPUs): accepted, exact.
  const std::string path = WriteTemp("edge.csv", "submit,duration,gpus,cpu\n157680000,157680000,1,1000000000\n");
  auto r = ReadGenericJobs(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs.at(0).submit, 157680000 * kSecond);
  EXPECT_EQ(r->jobs.at(0).request.cpu_milli, 1000000000000);
}

ReplayJob Job(std::string id, double submit_s, double duration_s, int num, MilliGpu milli) {
  ReplayJob j;
  j.id = std::move(id);
  j.submit = static_cast<Micros>(submit_s * kSecond);
  j.duration = static_cast<Micros>(duration_s * kSecond);
  j.request.num_gpus = num;
  j.request.milli_per_gpu = milli;
  j.utilisation = 0.5;
  return j;
}

TEST(Replay, QueuesWhatDoesNotFitAndRejectsWhatNeverCan) {
  // Through the Scheduler with the default replay config (one queue, no limits). One node of 2 GPUs. A holds both for 10 s; B (1 GPU) and C (half a GPU) wait until t=10;
  // D (4 GPUs) can never fit.
  Cluster cluster = Cluster::Uniform(1, 2, "GPU", 64000, 64 * kGiB);
  std::vector<ReplayJob> jobs = {Job("A", 0, 10, 2, 1000), Job("B", 1, 5, 1, 1000), Job("C", 2, 5, 1, 500),
                                 Job("D", 3, 5, 4, 1000)};
  auto config = ReplayConfig("best-fit-fgd", jobs);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const auto shapes = ReplayShapes(jobs);
  ReplayResult r = RunReplay(cluster, jobs, *config, "best-fit-fgd", shapes, {.check_invariants = true});
  EXPECT_EQ(r.invariant_error, "");
  EXPECT_EQ(r.jobs, 4);
  EXPECT_EQ(r.started, 3);
  EXPECT_EQ(r.rejected, 1);
  EXPECT_EQ(r.never_started, 0);
  ASSERT_EQ(r.delays.size(), 3u);
  EXPECT_EQ(r.delays[0], 0);
  EXPECT_EQ(r.delays[1], 8 * kSecond);  // C
  EXPECT_EQ(r.delays[2], 9 * kSecond);  // B
  EXPECT_DOUBLE_EQ(r.delay_p50_s, 8);
  EXPECT_DOUBLE_EQ(r.delay_p99_s, 9);
  // Held: 2 GPU x 10 s + 1 x 5 s + 0.5 x 5 s = 27.5 GPU-s; used at 50%.
  EXPECT_NEAR(r.gpu_hours_held, 27.5 / 3600, 1e-12);
  EXPECT_NEAR(r.gpu_hours_used, 27.5 / 3600 / 2, 1e-12);
  // Allocation: 100% for [0,10), 75% for [10,15): time-weighted 91.67%.
  EXPECT_NEAR(r.mean_alloc_pct, 100.0 * (2 * 10 + 1.5 * 5) / (2 * 15), 1e-9);
}

// The Scheduler's queue discipline: pending jobs are tried in (priority, submit) order after a
// release, so the older D starts before E.
TEST(Replay, OlderJobStartsFirstAfterARelease) {
  // Two 1-GPU nodes. A (1 GPU, 10 s) and B (1 GPU, 100 s) fill them; C (2 GPUs on one node) can
  // never fit -> rejected; D (1 GPU) waits for A; E (half GPU) also waits; at t=10 D starts
  // (older); E needs B's node or D's... both full -> E waits for D's end (t=15).
  Cluster cluster = Cluster::Uniform(2, 1, "GPU", 64000, 64 * kGiB);
  std::vector<ReplayJob> jobs = {Job("A", 0, 10, 1, 1000), Job("B", 0, 100, 1, 1000), Job("C", 1, 1, 2, 1000),
                                 Job("D", 2, 5, 1, 1000), Job("E", 3, 5, 1, 500)};
  auto config = ReplayConfig("gpuslice", jobs);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const auto shapes = ReplayShapes(jobs);
  ReplayResult r = RunReplay(cluster, jobs, *config, "gpuslice", shapes, {.check_invariants = true});
  EXPECT_EQ(r.invariant_error, "");
  EXPECT_EQ(r.rejected, 1);
  EXPECT_EQ(r.started, 4);
  ASSERT_EQ(r.delays.size(), 4u);
  EXPECT_EQ(r.delays[2], 8 * kSecond);   // D: 2 -> 10
  EXPECT_EQ(r.delays[3], 12 * kSecond);  // E: 3 -> 15
}

TEST(Replay, ClusterSpecParsesAndRejects) {
  auto c = ParseClusterSpec("10x8:H100-80GB:96:512GiB");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->size(), 10u);
  EXPECT_EQ(c->capacity_milli(), 80 * kOneGpu);
  EXPECT_EQ(c->node(0).cpu_total, 96000);
  EXPECT_EQ(c->node(0).model, "H100-80GB");
  for (const char* bad : {"10", "x8", "10x0", "10x8:a:b", "10x8:m:1:2:3"}) {
    auto r = ParseClusterSpec(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr(bad)) << bad;
  }
}

}  // namespace
}  // namespace gpuslice::sim
