// Recording: real child processes (Python programs using python/gpuslice_steps.py, shell
// process trees) sampled from /proc, with the fake GPU backend scripting utilisation; each
// synthetic program must get the right diagnosis.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <vector>
#include <fstream>
#include <string>
#include <thread>

#include <sys/wait.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "devices/fake.h"
#include "profile/diagnosis.h"
#include "profile/recorder.h"
#include "profile/report.h"

namespace gpuslice::profile {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("gpuslice_recorder_test_" + std::to_string(getpid()) + "_" + name)).string();
}

// A training loop in Python: `load_s` of sleeping per batch (the loader), `compute_s` of
// busy CPU per step (stand-in for the GPU work being launched), `n` steps.
std::string WriteProgram(const std::string& name, double load_s, double compute_s, int n) {
  std::string path = TempPath(name + ".py");
  std::ofstream(path) << "import time, gpuslice_steps\n"
                         "def loader():\n"
                         "    for i in range(" << n << "):\n"
                      << (load_s > 0 ? "        time.sleep(" + std::to_string(load_s) + ")\n" : "")
                      << "        yield i\n"
                         "for batch in gpuslice_steps.steps(loader()):\n"
                         "    end = time.time() + " << compute_s << "\n"
                         "    while time.time() < end:\n"
                         "        pass\n";
  return path;
}

struct Outcome {
  Recording rec;
  Evidence evidence;
  std::vector<Finding> findings;
};

Outcome RecordWithFakeGpu(const std::vector<std::string>& cmd, devices::Permille util, Bytes memory_used = 20 * kGiB) {
  auto fake = devices::FakeBackend::Create("1xH100-80GB");
  EXPECT_TRUE(fake.ok()) << fake.status().ToString();
  devices::FakeStep step;
  step.gpu_util = util;
  step.memory_used = memory_used;
  (*fake)->SetState(DeviceIndex(0), step);
  auto sampler = MakeBackendSampler(fake->get(), 0);
  RecordOptions o;
  o.command = cmd;
  o.interval = 50 * kMillisecond;
  o.step_file = TempPath("steps.jsonl");
  std::filesystem::remove(o.step_file);
  o.python_dir = std::string(GPUSLICE_SOURCE_DIR) + "/python";
  auto rec = Record(o, sampler.get());
  EXPECT_TRUE(rec.ok()) << rec.status().ToString();
  std::filesystem::remove(o.step_file);
  Outcome r{std::move(rec).value(), {}, {}};
  r.evidence = EvidenceFromRecording(r.rec);
  r.findings = Diagnose(r.evidence);
  return r;
}

std::vector<std::string> Ids(const std::vector<Finding>& f) {
  std::vector<std::string> ids;
  for (const auto& x : f) ids.push_back(x.id);
  return ids;
}

TEST(Recorder, InputBoundLoaderIsDiagnosedInputBound) {
  std::string prog = WriteProgram("input_bound", 0.06, 0.01, 10);
  Outcome r = RecordWithFakeGpu({"python3", prog}, 150);
  EXPECT_EQ(r.rec.exit_code, 0);
  EXPECT_EQ(r.evidence.steps, 10);
  ASSERT_TRUE(r.evidence.data_loading_share.has_value());
  EXPECT_GT(*r.evidence.data_loading_share, 0.6);  // 60 of 70 ms per step wait for data
  ASSERT_TRUE(r.evidence.gpu_busy_share.has_value());
  EXPECT_NEAR(*r.evidence.gpu_busy_share, 0.15, 0.001);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].id, "input-bound");
  EXPECT_EQ(r.findings[0].severity, Severity::kHigh);
  EXPECT_THAT(Ids(r.findings), testing::Not(testing::Contains("gpu-bound")));
  EXPECT_EQ(r.evidence.workers, 0);  // a generator in the main process: no loader workers
  // While stepping the main process mostly sleeps (waiting on its loader).
  int sleeping = 0, in_steps = 0;
  for (const auto& s : r.rec.samples) {
    if (s.t <= r.rec.steps.front().start || s.t >= *r.rec.steps.back().end) continue;
    ++in_steps;
    sleeping += s.main_state == ProcState::kSleeping;
  }
  EXPECT_GT(in_steps, 3);
  EXPECT_GT(sleeping, in_steps / 2);
  std::filesystem::remove(prog);
}

TEST(Recorder, ComputeBoundLoopIsDiagnosedGpuBound) {
  std::string prog = WriteProgram("compute_bound", 0.0, 0.05, 10);
  Outcome r = RecordWithFakeGpu({"python3", prog}, 970);
  EXPECT_EQ(r.rec.exit_code, 0);
  EXPECT_EQ(r.evidence.steps, 10);
  ASSERT_TRUE(r.evidence.data_loading_share.has_value());
  EXPECT_LT(*r.evidence.data_loading_share, 0.05);
  EXPECT_THAT(Ids(r.findings), testing::Not(testing::Contains("input-bound")));
  EXPECT_THAT(Ids(r.findings), testing::Contains("gpu-bound"));
  // While stepping (interpreter start-up excluded) the main process spins: mostly running.
  int running = 0, in_steps = 0;
  for (const auto& s : r.rec.samples) {
    if (s.t <= r.rec.steps.front().start || s.t >= *r.rec.steps.back().end) continue;
    ++in_steps;
    running += s.main_state == ProcState::kRunning;
  }
  EXPECT_GT(in_steps, 3);
  EXPECT_GT(running, in_steps / 2);
  std::filesystem::remove(prog);
}

TEST(Recorder, FullGpuMemoryIsReported) {
  Outcome r = RecordWithFakeGpu({"sleep", "0.3"}, 900, 78 * kGiB);
  EXPECT_THAT(Ids(r.findings), testing::Contains("memory"));
  ASSERT_TRUE(r.evidence.memory_total.has_value());
  EXPECT_EQ(*r.evidence.memory_peak, 78 * kGiB);
  EXPECT_EQ(r.evidence.steps, 0);  // no markers: no data share, no input finding
  EXPECT_FALSE(r.evidence.data_loading_share.has_value());
}

TEST(Recorder, WorkersAreCountedApartFromTheMainProcess) {
  Outcome r = RecordWithFakeGpu({"sh", "-c", "sleep 0.5 & sleep 0.5 & sleep 0.5 & wait"}, 100);
  EXPECT_EQ(r.rec.max_workers, 3);
  EXPECT_EQ(r.rec.exit_code, 0);
  for (const auto& s : r.rec.samples) EXPECT_LE(s.workers, 3);
}

TEST(Recorder, TheMainProcessComesFromTheSnapshotTheSampleCounts) {
  // A sample takes one snapshot of the tree: if the launcher forks between choosing the main
  // process and counting workers, its child must not be counted as a worker of the launcher.
  const pid_t root = fork();
  ASSERT_GE(root, 0);
  if (root == 0) {
    execlp("sh", "sh", "-c", "sleep 5; true", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::vector<int> tree;
  for (int i = 0; i < 200 && tree.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    tree = ProcessTree(root);
  }
  ASSERT_EQ(tree.size(), 2u);
  std::map<int, ProcStat> before_fork, after_fork;
  for (int p : tree) {
    auto st = ReadProcStat(p);
    ASSERT_TRUE(st.ok());
    after_fork[p] = *st;
    if (p == root) before_fork[p] = *st;
  }
  EXPECT_EQ(MainProcess(root, before_fork), root);     // the shell, alone in that snapshot
  EXPECT_EQ(MainProcess(root, after_fork), tree[1]);   // its one child, the sleep
  EXPECT_EQ(MainProcess(root), tree[1]);               // the live tree agrees
  kill(root, SIGKILL);
  kill(tree[1], SIGKILL);
  waitpid(root, nullptr, 0);
}

TEST(Recorder, ALauncherShellIsSeenThroughToItsOneChild) {
  Outcome r = RecordWithFakeGpu({"sh", "-c", "sleep 0.4; true"}, 100);
  EXPECT_EQ(r.rec.exit_code, 0);
  EXPECT_NE(r.rec.main_pid, 0);
  EXPECT_NE(r.rec.main_pid, r.rec.pid);  // the sleep, not the shell
  EXPECT_EQ(r.rec.max_workers, 0);       // the shell above it is no worker
}

TEST(Recorder, AttachFollowsAProcessUntilItExits) {
  pid_t child = fork();
  if (child == 0) {
    execlp("sleep", "sleep", "0.4", nullptr);
    _exit(127);
  }
  RecordOptions o;
  o.attach_pid = child;
  o.interval = 50 * kMillisecond;
  o.max_duration = 5 * kSecond;
  // Reap in the background so the attached process really goes away.
  std::thread reaper([child] { waitpid(child, nullptr, 0); });
  auto rec = Record(o, nullptr);
  reaper.join();
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->pid, child);
  EXPECT_FALSE(rec->exit_code.has_value());
  EXPECT_GE(rec->samples.size(), 3u);
  EXPECT_LT(rec->end - rec->start, 4 * kSecond);
}

TEST(Recorder, BadCommandOrPidIsAClearError) {
  RecordOptions o;
  o.command = {"/nonexistent/program"};
  auto r = Record(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), testing::HasSubstr("cannot run '/nonexistent/program'"));
  RecordOptions p;
  p.attach_pid = 999999999;
  auto q = Record(p, nullptr);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kNotFound);
}

TEST(StepFile, ParsesMarkersAndRejectsBadLines) {
  std::string path = TempPath("marks.jsonl");
  std::ofstream(path) << R"({"step": 0, "mark": "start", "ns": 1000000000, "pid": 1})" "\n"
                      << R"({"step": 0, "mark": "data", "ns": 1030000000, "pid": 1})" "\n"
                      << R"({"step": 0, "mark": "end", "ns": 1100000000, "pid": 1})" "\n";
  auto ok = ReadStepFile(path);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].start, 1000000);
  EXPECT_EQ(*(*ok)[0].data_ready, 1030000);
  EXPECT_EQ(*(*ok)[0].end, 1100000);
  std::ofstream(path, std::ios::app) << "{\"step\": 1, \"mark\": \"start\"\n";
  auto bad = ReadStepFile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), testing::HasSubstr(path + ":4: bad step marker"));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace gpuslice::profile
