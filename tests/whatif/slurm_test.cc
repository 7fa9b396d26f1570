// The what-if from a Slurm accounting dump recorded on a real Slurm (tests/slurm/slurm_cluster.h:
// slurmctld and slurmd on localhost, its job completion log read by `sacct -c`), joined with the
// usage log gpuslice's Slurm agent wrote while the jobs ran on scripted fake GPUs:
//   an idle notebook the agent reclaims (cancels) after its warning, a busy notebook at 80 %
//   that ends by itself, a training job at 60 % on two whole GPUs, and an inference job on a
//   MIG instance the agent cannot measure.
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "devices/fake.h"
#include "devices/scripted.h"
#include "slurm/agent.h"
#include "slurm/client.h"
#include "slurm/process.h"
#include "tests/slurm/slurm_cluster.h"
#include "testing/files.h"
#include "whatif/command.h"
#include "whatif/run.h"
#include "whatif/sacct_history.h"

namespace gpuslice::whatif {
namespace {

using ::testing::HasSubstr;

constexpr const char* kPolicy = R"(
default_queue = "interactive"
[queues.interactive]
kinds = ["shared"]
default_gpu = "250m"
time_limit = "30m"
preemptible = false
idle = { enabled = true, threshold = 5, window = "2s", grace = "2s", action = "reclaim" }
[queues.training]
kinds = ["whole"]
idle = { enabled = false }
[queues.inference]
kinds = ["mig"]
default_memory = "20GiB"
idle = { enabled = false }
)";

TEST(WhatifSlurm, DumpAndUsageLogOfRealJobsReplay) {
  auto policy = sched::ParseConfig(kPolicy, "policy.toml");
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  slurm::testing::ClusterOptions co;
  co.policy = *policy;
  auto started = slurm::testing::SlurmCluster::Start(co);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  slurm::testing::SlurmCluster& cluster = **started;

  auto submit = [&](const std::string& queue, std::vector<std::string> command, std::optional<int> gpus = std::nullopt) {
    slurm::SlurmSubmitRequest r;
    r.queue = queue;
    r.command = std::move(command);
    r.output = cluster.jobs_dir() + "/%j.out";
    r.policy = *policy;
    r.slurm = cluster.context();
    r.gpus = gpus;
    auto id = slurm::SubmitToSlurm(r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : std::string();
  };
  const std::vector<std::string> print_pid = {"sh", "-c", "echo PID=$$; exec sleep 300"};
  const std::string idle = submit("interactive", print_pid);
  const std::string busy = submit("interactive", {"sh", "-c", "echo PID=$$; exec sleep 8"});
  const std::string train = submit("training", {"sh", "-c", "echo PID=$$; exec sleep 8"}, 2);
  const std::string infer = submit("inference", {"sh", "-c", "echo PID=$$; exec sleep 8"});
  auto pid_of = [&](const std::string& id) {
    for (int i = 0; i < 150; ++i) {
      const std::string out = gpuslice::testing::Slurp(cluster.jobs_dir() + "/" + id + ".out");
      if (auto at = out.find("PID="); at != std::string::npos && out.find('\n', at) != std::string::npos) {
        return out.substr(at + 4, out.find('\n', at) - at - 4);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "job " << id << " never printed its pid";
    return std::string("0");
  };
  for (const auto& id : {idle, busy, train, infer}) ASSERT_TRUE(cluster.WaitForJobState(id, "RUNNING", 30 * kSecond).ok());
  const std::string script = cluster.root() + "/gpus.json";
  std::ofstream(script) << fmt::format(
      R"({{"processes": [{{"pid": {}, "device": 0, "sm": 0, "memory": "1GiB"}}, {{"pid": {}, "device": 1, "sm": 80, "memory": "3GiB"}},
          {{"pid": {}, "device": 2, "sm": 60, "memory": "30GiB"}}]}})",
      pid_of(idle), pid_of(busy), pid_of(train));
  (void)pid_of(infer);  // running, measured by nothing: unknown
  auto fake = devices::FakeBackend::Create("4xH100-80GB");
  ASSERT_TRUE(fake.ok());
  devices::ScriptedBackend backend(std::move(fake).value(), script);
  ASSERT_TRUE(backend.Load().ok());
  slurm::SlurmAgentOptions ao;
  ao.policy = *policy;
  ao.slurm = cluster.context();
  ao.hostname = "testhost";
  ao.interval = 500 * kMillisecond;
  ao.usage_log = cluster.root() + "/usage.csv";
  ao.log = [](const std::string&) {};
  slurm::SlurmAgent agent(backend, ao);
  std::thread loop([&] { agent.Run(); });
  for (const auto& id : {idle, busy, train, infer}) {
    auto end = cluster.WaitForJobState(id, "COMPLETED,CANCELLED,FAILED,TIMEOUT", 60 * kSecond);
    EXPECT_TRUE(end.ok()) << id << ": " << end.status().ToString();
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));  // a round after the last one left
  agent.Stop();
  loop.join();

  // The accounting dump, as an admin would take it: here `sacct -c` over Slurm's job
  // completion log, which (as anywhere without slurmdbd) has no GPU TRES: the GPUs each job
  // held come from the agent's usage log.
  auto dump = slurm::RunCommand({.argv = {"sacct", "-c", "-a", "-X", "-P", "-j", fmt::format("{},{},{},{}", idle, busy, train, infer),
                                          "--format=JobID,User,Partition,Submit,Start,End,State,AllocTRES"},
                                 .env = cluster.command_env(), .stdin_text = "", .timeout = 20 * kSecond});
  ASSERT_TRUE(dump.ok()) << dump.status().ToString();
  ASSERT_EQ(dump->exit_code, 0) << dump->err;
  const std::string dump_path = cluster.root() + "/dump.txt";
  std::ofstream(dump_path) << dump->out;
  const std::string usage = gpuslice::testing::Slurp(ao.usage_log);

  std::vector<sim::TraceNode> nodes = {{"node1", 128000, 64 * kGiB, 2, "H100-80GB"},
                                       {"node2", 128000, 64 * kGiB, 2, "H100-80GB"},
                                       {"node3", 128000, 64 * kGiB, 1, "H100-80GB"}};
  SacctOptions so;
  so.shards_per_gpu = co.shards_per_gpu;
  auto h = HistoryFromSacct(dump_path, ao.usage_log, nodes, *policy, so);
  ASSERT_TRUE(h.ok()) << h.status().ToString() << "\n" << dump->out << usage;
  ASSERT_EQ(h->jobs.size(), 4u) << dump->out << usage;
  std::map<std::string, const HistoryJob*> by_id;
  for (const HistoryJob& j : h->jobs) by_id[j.job.id] = &j;
  const HistoryJob& hi = *by_id.at(idle);
  EXPECT_EQ(hi.job.queue, "interactive");
  EXPECT_EQ(hi.job.kind, sched::SliceKind::kShared);
  EXPECT_EQ(hi.held_milli, 250);
  EXPECT_EQ(hi.ended, RecordedEnd::kIdleReclaimed) << usage;
  EXPECT_EQ(sim::PeakActivePermille(hi.job.activity), -1) << sim::FormatActivity(hi.job.activity);
  const sim::ActivityTotals it = sim::Integrate(hi.job.activity, 0, hi.job.duration);
  EXPECT_GE(it.idle, 3 * kSecond) << sim::FormatActivity(hi.job.activity);
  const HistoryJob& hb = *by_id.at(busy);
  EXPECT_EQ(hb.ended, RecordedEnd::kFinished);
  EXPECT_EQ(sim::PeakActivePermille(hb.job.activity), 1000) << sim::FormatActivity(hb.job.activity);  // 80% of a GPU on a 250m share
  EXPECT_EQ(hb.memory_peak, 3 * kGiB);
  const HistoryJob& ht = *by_id.at(train);
  EXPECT_EQ(ht.job.kind, sched::SliceKind::kWhole);
  EXPECT_EQ(ht.job.request.num_gpus, 2);
  EXPECT_EQ(sim::PeakActivePermille(ht.job.activity), 300) << sim::FormatActivity(ht.job.activity);  // 60% of one of two GPUs
  const HistoryJob& hf = *by_id.at(infer);
  EXPECT_EQ(hf.job.kind, sched::SliceKind::kMig);
  EXPECT_EQ(hf.job.request.gpu_memory_per_gpu, 20 * kGiB);  // the 2g.20gb instance Slurm gave it

  // The replay as recorded reclaims the idle notebook, as the agent did; the others run out.
  auto rs = RunScenarios(*h, DefaultSpec(), RunOptions{});
  ASSERT_TRUE(rs.ok()) << rs.status().ToString();
  const ScenarioResult& base = rs->front();
  EXPECT_EQ(base.cut_reclaimed, 1);
  ASSERT_EQ(base.cut_list.size(), 1u);
  EXPECT_EQ(base.cut_list[0].id, idle);
  EXPECT_EQ(base.started, 4);

  // The CLI on the same files.
  const std::string bin = std::string(GPUSLICE_BUILD_DIR) + "/apps/gpuslice/gpuslice";
  const std::string policy_path = cluster.root() + "/policy.toml";
  std::ofstream(policy_path) << kPolicy;
  auto cli = slurm::RunCommand({.argv = {bin, "whatif", "--sacct", dump_path, "--slurm-usage", ao.usage_log, "--config",
                                         policy_path, "--cluster", "3x2:H100-80GB", "--shards-per-gpu", "4", "--json"},
                                .env = {}, .stdin_text = "", .timeout = 60 * kSecond});
  ASSERT_TRUE(cli.ok()) << cli.status().ToString();
  ASSERT_EQ(cli->exit_code, 0) << cli->err;
  const nlohmann::json doc = nlohmann::json::parse(cli->out);
  EXPECT_EQ(doc["jobs"], 4);
  EXPECT_EQ(doc["scenarios"][0]["cut"]["reclaimed"], 1);
  EXPECT_THAT(doc["source"].get<std::string>(), HasSubstr("usage.csv"));
  // Without the usage log the dump has no GPUs: nothing to replay, said as such.
  auto bare = slurm::RunCommand({.argv = {bin, "whatif", "--sacct", dump_path, "--cluster", "3x2:H100-80GB"},
                                 .env = {}, .stdin_text = "", .timeout = 60 * kSecond});
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->exit_code, 2) << bare->out << bare->err;
  EXPECT_THAT(bare->err, HasSubstr("no job that held a GPU"));
}

}  // namespace
}  // namespace gpuslice::whatif
