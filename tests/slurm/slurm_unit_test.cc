// Slurm-mode logic that needs no Slurm: config generation, parsing Slurm's and the agents'
// output, the idle-reclaim state machine.

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "devices/fake.h"
#include "devices/scripted.h"
#include "sched/config.h"
#include "slurm/agent.h"
#include "slurm/client.h"
#include "slurm/config_gen.h"
#include "slurm/process.h"
#include "slurm/reclaim.h"

namespace gpuslice::slurm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ClusterSpec H100Cluster() {
  ClusterSpec s;
  s.gpu_nodes.nodes = "gpu[1-4]";
  s.gpu_nodes.gpus_per_node = 8;
  s.gpu_nodes.model = "H100-80GB";
  s.mig_nodes.nodes = "gpu[5-6]";
  s.mig_nodes.gpus_per_node = 8;
  s.mig_nodes.model = "H100-80GB";
  s.mig_nodes.mig_layout = {"3g.40gb", "2g.20gb", "2g.20gb"};
  return s;
}

TEST(SlurmTimeLimit, RoundsUpToWholeMinutes) {
  EXPECT_EQ(SlurmTimeLimit(0), "INFINITE");
  EXPECT_EQ(SlurmTimeLimit(90 * kSecond), "00:02:00");
  EXPECT_EQ(SlurmTimeLimit(8 * kHour), "08:00:00");
  EXPECT_EQ(SlurmTimeLimit(7 * 24 * kHour + kMinute), "7-00:01:00");
}

TEST(GenerateSlurmConfig, DefaultPolicyMapsEachQueueToItsMechanism) {
  auto g = GenerateSlurmConfig(sched::DefaultConfig(), H100Cluster());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::string& c = g->slurm_conf;
  EXPECT_THAT(c, HasSubstr("GresTypes=gpu,shard\n"));
  EXPECT_THAT(c, Not(HasSubstr("mps:")));
  EXPECT_THAT(c, HasSubstr("NodeName=gpu[1-4] Gres=gpu:h100_80gb:8,shard:64 State=UNKNOWN\n"));
  EXPECT_THAT(c, HasSubstr("NodeName=gpu[5-6] Gres=gpu:3g.40gb:8,gpu:2g.20gb:16 State=UNKNOWN\n"));
  EXPECT_THAT(c, HasSubstr("PartitionName=interactive Nodes=gpu[1-4] Default=YES MaxTime=08:00:00 "
                           "DefaultTime=08:00:00 PriorityTier=11 State=UP\n"));
  EXPECT_THAT(c, HasSubstr("PartitionName=training Nodes=gpu[1-4] MaxTime=7-00:00:00"));
  // inference allows mig and whole: both node sets.
  EXPECT_THAT(c, HasSubstr("PartitionName=inference Nodes=gpu[1-4],gpu[5-6] MaxTime=INFINITE PriorityTier=21"));
  EXPECT_THAT(c, HasSubstr("# queue 'interactive' (default slice: shared): shared slices as gres/shard."));
  EXPECT_THAT(c, HasSubstr("by `gpuslice agent --slurm`"));
  const std::string& gr = g->gres_conf;
  EXPECT_THAT(gr, HasSubstr("NodeName=gpu[1-4] Name=gpu Type=h100_80gb File=/dev/nvidia[0-7]\n"));
  EXPECT_THAT(gr, HasSubstr("NodeName=gpu[1-4] Name=shard Count=64 File=/dev/nvidia[0-7]\n"));
  EXPECT_THAT(gr, HasSubstr("NodeName=gpu[5-6] AutoDetect=nvml\n"));
  // The default interactive and inference queues also allow mps, which cannot be offered.
  ASSERT_EQ(g->warnings.size(), 2u);
  EXPECT_THAT(g->warnings[0], HasSubstr("queue 'inference': mps slices are not offered"));
}

TEST(GenerateSlurmConfig, MpsSharingNeverAlsoEmitsShard) {
  ClusterSpec s = H100Cluster();
  s.sharing = SharingGres::kMps;
  auto g = GenerateSlurmConfig(sched::DefaultConfig(), s);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_THAT(g->slurm_conf, HasSubstr("GresTypes=gpu,mps\n"));
  EXPECT_THAT(g->slurm_conf, HasSubstr("Gres=gpu:h100_80gb:8,mps:800 "));
  EXPECT_THAT(g->slurm_conf + g->gres_conf, Not(HasSubstr("shard:")));
  EXPECT_THAT(g->gres_conf, HasSubstr("Name=mps Count=800"));
}

TEST(GenerateSlurmConfig, FakeMigDevicesAreListedPerInstance) {
  ClusterSpec s = H100Cluster();
  s.mig_nodes.gpus_per_node = 2;
  s.mig_nodes.mig_device_dir = "/x";
  auto g = GenerateSlurmConfig(sched::DefaultConfig(), s);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_THAT(g->gres_conf, HasSubstr("NodeName=gpu[5-6] Name=gpu Type=3g.40gb File=/x/mig0-0,/x/mig1-0\n"));
  EXPECT_THAT(g->gres_conf,
              HasSubstr("NodeName=gpu[5-6] Name=gpu Type=2g.20gb File=/x/mig0-1,/x/mig0-2,/x/mig1-1,/x/mig1-2\n"));
}

TEST(GenerateSlurmConfig, BadSpecsNameTheFlagAndValue) {
  struct Case {
    std::function<void(ClusterSpec&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](ClusterSpec& s) { s.gpu_nodes.nodes = "gpu[1-4"; s.mig_nodes.nodes.clear(); }, "--nodes = 'gpu[1-4'"},
      {[](ClusterSpec& s) { s.gpu_nodes.gpus_per_node = 0; }, "--gpus-per-node = 0"},
      {[](ClusterSpec& s) { s.gpu_nodes.model = "Z9000"; }, "--model"},
      {[](ClusterSpec& s) { s.mig_nodes.mig_layout = {"7g.80gb", "1g.10gb"}; }, "do not fit together on one H100-80GB"},
      {[](ClusterSpec& s) { s.mig_nodes.mig_layout = {"5g.50gb"}; }, "profile '5g.50gb' does not exist on H100-80GB"},
      {[](ClusterSpec& s) { s.mig_nodes.mig_layout = {"big"}; }, "--mig-layout: MIG profile 'big'"},
      {[](ClusterSpec& s) { s.mig_nodes.mig_layout.clear(); }, "--mig-layout: MIG nodes need"},
      {[](ClusterSpec& s) { s.shards_per_gpu = 0; }, "--shards-per-gpu = 0"},
      {[](ClusterSpec& s) { s.gpu_nodes.nodes.clear(); s.mig_nodes.nodes.clear(); }, "--nodes: no GPU nodes"},
  };
  for (const auto& c : cases) {
    ClusterSpec s = H100Cluster();
    c.change(s);
    auto g = GenerateSlurmConfig(sched::DefaultConfig(), s);
    ASSERT_FALSE(g.ok()) << c.message;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(g.status().message(), HasSubstr(c.message));
  }
}

TEST(GenerateSlurmConfig, QueueWithNothingToRunOnGetsNoPartitionAndAWarning) {
  ClusterSpec s = H100Cluster();
  s.mig_nodes.nodes.clear();
  auto policy = sched::ParseConfig("default_queue = \"serving\"\n[queues.serving]\nkinds = [\"mig\"]\n", "p.toml");
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  auto g = GenerateSlurmConfig(*policy, s);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_THAT(g->slurm_conf, Not(HasSubstr("PartitionName=serving")));
  EXPECT_THAT(g->slurm_conf, HasSubstr("# queue 'serving': no partition"));
  EXPECT_THAT(g->warnings, ::testing::Contains(HasSubstr("no --mig-nodes given")));
}

TEST(MigProfileMemory, ReadsTheNameAndRejectsOthers) {
  EXPECT_EQ(*MigProfileMemory("3g.40gb"), 40 * kGiB);
  EXPECT_EQ(*MigProfileMemory("1g.10gb+me"), 10 * kGiB);
  EXPECT_FALSE(MigProfileMemory("h100").ok());
  EXPECT_FALSE(MigProfileMemory("0g.10gb").ok());
}

TEST(ParseScontrolRecord, KeepsPathsWithSpacesWhole) {
  auto kv = ParseScontrolRecord(
      "JobId=12 JobName=wrap\n   JobState=RUNNING Reason=None Dependency=(null)\n"
      "   Partition=interactive AllocNode:Sid=vm:1\n   StdOut=/tmp/my jobs/12.out\n   TresPerNode=gres:shard:2\n");
  EXPECT_EQ(kv["JobId"], "12");
  EXPECT_EQ(kv["JobState"], "RUNNING");
  EXPECT_EQ(kv["Partition"], "interactive");
  EXPECT_EQ(kv["StdOut"], "/tmp/my jobs/12.out");
  EXPECT_EQ(kv["TresPerNode"], "gres:shard:2");
}

TEST(ParseJobUtilisation, ReadsOnlyTheJobFamily) {
  auto u = ParseJobUtilisation(
      "# HELP x\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 99\n"
      "gpuslice_slurm_job_gpu_utilization_percent{job_id=\"7\",partition=\"interactive\"} 80.5\n"
      "gpuslice_slurm_job_gpu_utilization_percent{job_id=\"8\",partition=\"interactive\"} 0.0\n"
      "gpuslice_slurm_job_gpu_utilization_percent{job_id=\"9\"} junk\n");
  EXPECT_EQ(u.size(), 2u);
  EXPECT_DOUBLE_EQ(u["7"], 80.5);
  EXPECT_DOUBLE_EQ(u["8"], 0.0);
}

TEST(RunCommand, ChildThatIgnoresItsStdinIsNotADeadlySignal) {
  // The child exits without reading; writing the rest of its stdin raised SIGPIPE, which killed
  // the caller (the CLI, and this test) instead of returning the child's exit status.
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c", "exit 3"};
  spec.stdin_text.assign(4 << 20, 'x');  // far beyond a pipe's buffer
  auto r = RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 3);
}

TEST(SlurmAgent, OverflowingSlurmJobIdOfAProcessIsNoJob) {
  // SLURM_JOB_ID is whatever the process's owner put there; stoull threw out of the round.
  const std::string dir = ::testing::TempDir() + "slurm_agent_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir + "/proc/4242");
  const char kEnviron[] = "SLURM_JOB_ID=99999999999999999999999\0PATH=/bin";
  std::ofstream(dir + "/proc/4242/environ") << std::string(kEnviron, sizeof kEnviron - 1);
  std::ofstream(dir + "/script.json") << R"({"processes": [{"pid": 4242, "device": 0, "sm": 80}]})";
  auto fake = devices::FakeBackend::Create("1xH100-80GB");
  ASSERT_TRUE(fake.ok());
  devices::ScriptedBackend backend(std::move(fake).value(), dir + "/script.json", dir + "/proc");
  ASSERT_TRUE(backend.Load().ok());
  SlurmAgentOptions o;
  o.policy = sched::DefaultConfig();
  o.slurm.bin_dir = dir + "/no-slurm-here";  // squeue fails: logged, the round goes on
  o.proc_root = dir + "/proc";
  std::vector<std::string> log;
  o.log = [&](const std::string& line) { log.push_back(line); };
  SlurmAgent agent(backend, o);
  agent.RunRound(1000 * kSecond);
  EXPECT_TRUE(agent.Jobs().empty());
  EXPECT_THAT(agent.MetricsText(), HasSubstr("gpuslice_"));
  std::filesystem::remove_all(dir);
}

// ---- the reclaim state machine -------------------------------------------------------

sched::Config ReclaimPolicy() {
  auto c = sched::ParseConfig(R"(
[queues.interactive]
kinds = ["shared"]
preemptible = false  # the built-in interactive queue is preemptible
idle = { enabled = true, window = "10m", grace = "5m", action = "reclaim" }
[queues.notebooks]
kinds = ["shared"]
preemptible = true
idle = { enabled = true, window = "10m", grace = "5m", action = "reclaim" }
[queues.training]
kinds = ["whole"]
idle = { enabled = true, window = "1h", grace = "0s", action = "report" }
[queues.batch]
kinds = ["whole"]
idle = { enabled = false }
)",
                              "reclaim.toml");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : sched::DefaultConfig();
}

ReclaimTracker::JobIdle Idle(const std::string& partition, bool idle, Micros idle_for = 0) {
  agent::IdleState s;
  s.idle = idle;
  s.idle_for = idle_for;
  return {partition, s};
}

TEST(ReclaimTracker, WarnsThenCancelsAfterGrace) {
  ReclaimTracker t(ReclaimPolicy());
  const Micros t0 = 1000 * kSecond;
  EXPECT_TRUE(t.Observe({{"1", Idle("interactive", false)}}, t0).empty());
  auto d = t.Observe({{"1", Idle("interactive", true, 10 * kMinute)}}, t0 + 10 * kMinute);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], (ReclaimDecision{ReclaimKind::kWarn, "1", "interactive", 10 * kMinute, t0 + 15 * kMinute, false}));
  EXPECT_EQ(t.PhaseOf("1"), ReclaimTracker::Phase::kWarned);
  EXPECT_TRUE(t.Observe({{"1", Idle("interactive", true)}}, t0 + 15 * kMinute - 1).empty());
  d = t.Observe({{"1", Idle("interactive", true, 15 * kMinute)}}, t0 + 15 * kMinute);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, ReclaimKind::kCancel);
  // Once only.
  EXPECT_TRUE(t.Observe({{"1", Idle("interactive", true)}}, t0 + 20 * kMinute).empty());
}

TEST(ReclaimTracker, ActivityWithdrawsTheWarning) {
  ReclaimTracker t(ReclaimPolicy());
  ASSERT_EQ(t.Observe({{"1", Idle("interactive", true)}}, 0).size(), 1u);
  auto d = t.Observe({{"1", Idle("interactive", false)}}, kMinute);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, ReclaimKind::kActivityResumed);
  EXPECT_TRUE(t.Observe({{"1", Idle("interactive", false)}}, 10 * kMinute).empty());
  // Idle again: a fresh warning and a fresh grace period.
  d = t.Observe({{"1", Idle("interactive", true)}}, 20 * kMinute);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].deadline, 25 * kMinute);
}

TEST(ReclaimTracker, PreemptibleQueuesRequeueReportQueuesOnlyWarn) {
  ReclaimTracker t(ReclaimPolicy());
  std::map<std::string, ReclaimTracker::JobIdle> jobs = {{"1", Idle("notebooks", true)}, {"2", Idle("training", true)}};
  auto d = t.Observe(jobs, 0);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_FALSE(d[0].report_only);
  EXPECT_TRUE(d[1].report_only);
  EXPECT_EQ(d[1].deadline, 0);
  d = t.Observe(jobs, kHour);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, ReclaimKind::kRequeue);
  EXPECT_EQ(d[0].job_id, "1");
}

TEST(ReclaimTracker, NeverTouchesJobsOutsideThePolicyOrWithIdleOff) {
  ReclaimTracker t(ReclaimPolicy());
  std::map<std::string, ReclaimTracker::JobIdle> jobs = {{"1", Idle("batch", true)}, {"2", Idle("other", true)}};
  for (Micros now : {Micros{0}, kHour, 10 * kHour}) EXPECT_TRUE(t.Observe(jobs, now).empty());
}

TEST(ReclaimTracker, ForgetsJobsThatLeft) {
  ReclaimTracker t(ReclaimPolicy());
  ASSERT_EQ(t.Observe({{"1", Idle("interactive", true)}}, 0).size(), 1u);
  EXPECT_TRUE(t.Observe({}, kMinute).empty());
  EXPECT_EQ(t.PhaseOf("1"), ReclaimTracker::Phase::kActive);
  // Back (e.g. requeued and running again): warned afresh, not reclaimed on the old deadline.
  auto d = t.Observe({{"1", Idle("interactive", true)}}, kHour);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, ReclaimKind::kWarn);
}

}  // namespace
}  // namespace gpuslice::slurm
