// Integration tests against a real Slurm cluster on localhost (see slurm_cluster.h). One
// cluster serves the whole binary: a GoogleTest global Environment starts it before the first
// test and stops it after the last, even when tests fail; the cluster's watchdog covers a
// killed test process.

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "devices/fake.h"
#include "devices/scripted.h"
#include "sched/config.h"
#include "slurm/agent.h"
#include "slurm/client.h"
#include "slurm/process.h"
#include "tests/slurm/slurm_cluster.h"
#include "testing/files.h"

namespace gpuslice::slurm {
namespace {

using gpuslice::testing::Slurp;

using ::testing::HasSubstr;

// The queue policy every test runs under. "debug" has a 1-minute limit for the time-limit test.
constexpr const char* kPolicy = R"(
default_queue = "interactive"

[queues.interactive]
kinds = ["shared"]
default_gpu = "250m"
time_limit = "30m"
preemptible = false
idle = { enabled = true, threshold = 5, window = "2s", grace = "3s", action = "reclaim" }

[queues.training]
kinds = ["whole"]
max_duration = "2h"
idle = { enabled = false }

[queues.inference]
kinds = ["mig"]
default_memory = "20GiB"
idle = { enabled = false }

# Like interactive, but its jobs are restartable: idle ones are requeued, not cancelled.
[queues.notebooks]
kinds = ["shared"]
preemptible = true
idle = { enabled = true, threshold = 5, window = "2s", grace = "2s", action = "reclaim" }

[queues.debug]
kinds = ["whole", "shared"]
time_limit = "1m"
idle = { enabled = false }
)";

class SlurmEnvironment : public ::testing::Environment {
 public:
  static testing::SlurmCluster* cluster() { return cluster_.get(); }
  static const sched::Config& policy() { return policy_; }
  static const std::string& time_limit_job() { return time_limit_job_; }

  void SetUp() override {
    auto policy = sched::ParseConfig(kPolicy, "test-policy.toml");
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    policy_ = *policy;
    testing::ClusterOptions options;
    options.policy = policy_;
    auto c = testing::SlurmCluster::Start(options);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value();
    // The time-limit job starts first and is checked last: Slurm's limit is at least one
    // minute and is enforced by a ~30 s periodic check, so waiting for it in its own test
    // would add up to 90 s; run alongside the others it costs nothing.
    SlurmSubmitRequest r;
    r.queue = "debug";
    r.fraction = 250;
    r.command = {"sleep", "600"};
    r.output = cluster_->jobs_dir() + "/timelimit-%j.out";
    r.policy = policy_;
    r.slurm = cluster_->context();
    auto id = SubmitToSlurm(r);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    time_limit_job_ = *id;
  }
  void TearDown() override {
    if (cluster_) cluster_->Stop();
    cluster_.reset();
  }

 private:
  static inline std::unique_ptr<testing::SlurmCluster> cluster_;
  static inline sched::Config policy_;
  static inline std::string time_limit_job_;
};

[[maybe_unused]] ::testing::Environment* const kSlurmEnv =
    ::testing::AddGlobalTestEnvironment(new SlurmEnvironment);

class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(SlurmEnvironment::cluster(), nullptr) << "the Slurm cluster did not start";
  }
  testing::SlurmCluster& cluster() { return *SlurmEnvironment::cluster(); }

  SlurmSubmitRequest Request(const std::string& queue, std::vector<std::string> command) {
    SlurmSubmitRequest r;
    r.queue = queue;
    r.command = std::move(command);
    r.output = cluster().jobs_dir() + "/%j.out";
    r.policy = SlurmEnvironment::policy();
    r.slurm = cluster().context();
    return r;
  }
  std::string Submit(const SlurmSubmitRequest& r) {
    auto id = SubmitToSlurm(r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : "";
  }
  std::string OutputOf(const std::string& id) { return Slurp(cluster().jobs_dir() + "/" + id + ".out"); }
  std::map<std::string, std::string> Running(const std::string& id) {
    auto job = cluster().WaitForJobState(id, "RUNNING", 30 * kSecond);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : std::map<std::string, std::string>{};
  }
  // Waits until the job's output holds `key`=value on a line; returns value.
  std::string WaitForOutput(const std::string& id, const std::string& key) {
    for (int i = 0; i < 150; ++i) {
      std::istringstream lines(OutputOf(id));
      for (std::string l; std::getline(lines, l);)
        if (l.rfind(key + "=", 0) == 0) return l.substr(key.size() + 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "job " << id << " never printed " << key << "=; output:\n" << OutputOf(id);
    return "";
  }
  void Cancel(const std::vector<std::string>& ids) {
    for (const auto& id : ids) (void)CancelJob(id, cluster().context());
    for (const auto& id : ids) (void)cluster().WaitForJobState(id, "CANCELLED,COMPLETED,FAILED,TIMEOUT", 15 * kSecond);
  }
};

// A job prints the GPU environment Slurm gave it.
const std::vector<std::string> kPrintEnv = {
    "sh", "-c",
    "echo CVD=$CUDA_VISIBLE_DEVICES; echo SHARDS=$SLURM_SHARDS_ON_NODE; echo JOB_GPUS=$SLURM_JOB_GPUS; "
    "echo PARTITION=$SLURM_JOB_PARTITION"};

TEST_F(SlurmTest, InteractiveJobRunsOnShardsAndSeesItsGpu) {
  SlurmSubmitRequest r = Request("interactive", kPrintEnv);
  std::string id = Submit(r);
  ASSERT_FALSE(id.empty());
  auto job = cluster().WaitForJobState(id, "COMPLETED,FAILED", 30 * kSecond);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ((*job)["JobState"], "COMPLETED");
  EXPECT_EQ((*job)["Partition"], "interactive");
  EXPECT_EQ((*job)["TimeLimit"], "00:30:00");
  std::string out = OutputOf(id);
  // 250m of a GPU cut in 4 shards is 1 shard.
  EXPECT_THAT(out, HasSubstr("SHARDS=1\n"));
  EXPECT_THAT(out, ::testing::ContainsRegex("CVD=[01]\n"));
  EXPECT_THAT(out, HasSubstr("PARTITION=interactive\n"));
}

TEST_F(SlurmTest, TrainingJobGetsWholeGpusAndTheQueueTimeLimit) {
  SlurmSubmitRequest r = Request("training", kPrintEnv);
  r.gpus = 2;
  std::string id = Submit(r);
  ASSERT_FALSE(id.empty());
  auto job = cluster().WaitForJobState(id, "COMPLETED,FAILED", 30 * kSecond);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ((*job)["Partition"], "training");
  EXPECT_EQ((*job)["TimeLimit"], "02:00:00");  // max_duration = 2h
  EXPECT_EQ((*job)["TresPerNode"], "gres:gpu:2");
  std::string out = OutputOf(id);
  EXPECT_THAT(out, HasSubstr("CVD=0,1\n"));
  EXPECT_THAT(out, HasSubstr("JOB_GPUS=0,1\n"));
  EXPECT_THAT(out, HasSubstr("SHARDS=\n"));
}

TEST_F(SlurmTest, InferenceJobGetsTheSmallestMigInstanceThatFits) {
  SlurmSubmitRequest r = Request("inference", kPrintEnv);
  r.memory = 15 * kGiB;  // 2g.20gb is the smallest instance of the 3g.40gb + 2x 2g.20gb layout
  r.time = 10 * kMinute;
  std::string id = Submit(r);
  ASSERT_FALSE(id.empty());
  auto job = cluster().WaitForJobState(id, "COMPLETED,FAILED", 30 * kSecond);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ((*job)["Partition"], "inference");
  EXPECT_EQ((*job)["TresPerNode"], "gres:gpu:2g.20gb:1");
  EXPECT_EQ((*job)["TimeLimit"], "00:10:00");
  EXPECT_EQ((*job)["NodeList"], "node3");  // the MIG node
  EXPECT_THAT(OutputOf(id), ::testing::ContainsRegex("CVD=[0-9]\n"));

  r.memory = 30 * kGiB;
  std::string big = Submit(r);
  auto job2 = cluster().WaitForJobState(big, "COMPLETED,FAILED", 30 * kSecond);
  ASSERT_TRUE(job2.ok()) << job2.status().ToString();
  EXPECT_EQ((*job2)["TresPerNode"], "gres:gpu:3g.40gb:1");
}

TEST_F(SlurmTest, ShardJobsShareOneGpuConcurrently) {
  // Three half-GPU jobs on one node with two GPUs of 4 shards: all three run at once, so at
  // least two of them are on the same GPU at the same time.
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    SlurmSubmitRequest r = Request("interactive", {"sh", "-c", "echo CVD=$CUDA_VISIBLE_DEVICES; "
                                                               "echo SHARDS=$SLURM_SHARDS_ON_NODE; exec sleep 120"});
    r.fraction = 500;
    r.sbatch_extra = {"--nodelist=node1"};
    ids.push_back(Submit(r));
  }
  std::map<std::string, int> per_gpu;
  for (const auto& id : ids) {
    ASSERT_FALSE(id.empty());
    Running(id);
    EXPECT_EQ(WaitForOutput(id, "SHARDS"), "2");
    per_gpu[WaitForOutput(id, "CVD")]++;
  }
  // Still all running together.
  for (const auto& id : ids) {
    auto job = ShowJob(id, cluster().context());
    ASSERT_TRUE(job.ok());
    EXPECT_EQ((*job)["JobState"], "RUNNING") << id;
  }
  int most = 0;
  for (const auto& [gpu, n] : per_gpu) {
    EXPECT_THAT(gpu, ::testing::MatchesRegex("[01]"));
    most = std::max(most, n);
  }
  EXPECT_GE(most, 2);
  Cancel(ids);
}

TEST_F(SlurmTest, RequestsTheQueueDoesNotAllowAreRefusedBeforeSbatch) {
  SlurmSubmitRequest r = Request("training", {"true"});
  r.fraction = 250;  // training is whole GPUs only
  auto id = SubmitToSlurm(r);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(id.status().message(), HasSubstr("does not allow shared slices"));

  r = Request("interactive", {"true"});
  r.time = 31 * kMinute;
  id = SubmitToSlurm(r);
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("over queue 'interactive''s limit of 30m"));

  r = Request("interactive", {"true"});
  r.fraction = 1500;  // shards all come from one GPU
  id = SubmitToSlurm(r);
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("at most one GPU"));
}

TEST_F(SlurmTest, UnknownQueueAndUnknownPartitionAreClearErrors) {
  SlurmSubmitRequest r = Request("nosuch", {"true"});
  auto id = SubmitToSlurm(r);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(id.status().message(), HasSubstr("queue 'nosuch' is not in the policy (queues: debug, inference, "
                                               "interactive, notebooks, training)"));

  // A queue the policy has but Slurm was never configured with.
  auto policy = sched::ParseConfig(std::string(kPolicy) + "\n[queues.gone]\nkinds = [\"whole\"]\n", "p.toml");
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  r = Request("gone", {"true"});
  r.policy = *policy;
  id = SubmitToSlurm(r);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(id.status().message(), HasSubstr("Slurm has no partition 'gone'"));
}

TEST_F(SlurmTest, SlurmDownIsAClearErrorNotAHang) {
  // The same cluster config, pointing at a controller port nobody listens on.
  std::string conf = Slurp(cluster().conf_path());
  auto pos = conf.find("SlurmctldPort=");
  ASSERT_NE(pos, std::string::npos);
  auto eol = conf.find('\n', pos);
  conf.replace(pos, eol - pos, "SlurmctldPort=9");
  std::string down_dir = cluster().root() + "/down";
  std::filesystem::create_directories(down_dir);
  std::ofstream(down_dir + "/slurm.conf") << conf;
  std::ofstream(down_dir + "/gres.conf") << cluster().generated().gres_conf;
  SlurmContext ctx = cluster().context();
  ctx.slurm_conf = down_dir + "/slurm.conf";
  ctx.timeout = 5 * kSecond;

  ListOptions lo;
  lo.slurm = ctx;
  auto rows = ListSlurmJobs(lo);
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().code(), StatusCode::kUnavailable) << rows.status().ToString();
  EXPECT_THAT(rows.status().message(), ::testing::AnyOf(HasSubstr("not reachable"), HasSubstr("did not answer")));

  SlurmSubmitRequest r = Request("interactive", {"true"});
  r.slurm = ctx;
  auto id = SubmitToSlurm(r);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable) << id.status().ToString();
}

TEST_F(SlurmTest, AgentReclaimsOnlyIdleJobsOfReclaimingQueuesAfterTheirWarning) {
  const std::vector<std::string> cmd = {"sh", "-c", "echo PID=$$; exec sleep 300"};
  std::string idle = Submit(Request("interactive", cmd));
  std::string busy = Submit(Request("interactive", cmd));
  SlurmSubmitRequest tr = Request("training", cmd);  // idle too, but its queue never reclaims
  std::string training = Submit(tr);
  std::string notebook = Submit(Request("notebooks", cmd));  // idle, in a requeueing queue
  ASSERT_FALSE(idle.empty() || busy.empty() || training.empty() || notebook.empty());
  for (const auto& id : {idle, busy, training, notebook}) Running(id);
  std::string notebook_pid = WaitForOutput(notebook, "PID");
  std::string idle_pid = WaitForOutput(idle, "PID");
  std::string busy_pid = WaitForOutput(busy, "PID");
  std::string training_pid = WaitForOutput(training, "PID");

  // The fake GPUs: the idle job's process does nothing, the busy one computes at 80 %.
  std::string script = cluster().root() + "/gpus.json";
  auto proc = [](const std::string& pid, int device, int sm, const char* memory) {
    return fmt::format("{{\"pid\": {}, \"device\": {}, \"sm\": {}, \"memory\": \"{}\"}}", pid, device, sm, memory);
  };
  std::ofstream(script) << "{\"processes\": [" << proc(idle_pid, 0, 0, "1GiB") << ", " << proc(busy_pid, 1, 80, "2GiB")
                        << ", " << proc(training_pid, 1, 0, "1GiB") << ", " << proc(notebook_pid, 0, 0, "1GiB")
                        << "]}\n";
  auto fake = devices::FakeBackend::Create("2xH100-80GB");
  ASSERT_TRUE(fake.ok()) << fake.status().ToString();
  devices::ScriptedBackend backend(std::move(fake).value(), script);
  ASSERT_TRUE(backend.Load().ok()) << backend.Load().ToString();
  std::vector<std::string> log;
  std::mutex log_mu;
  SlurmAgentOptions opts;
  opts.policy = SlurmEnvironment::policy();
  opts.slurm = cluster().context();
  opts.hostname = "testhost";
  opts.interval = 300 * kMillisecond;
  opts.log = [&](const std::string& line) {
    std::lock_guard lock(log_mu);
    log.push_back(line);
  };
  SlurmAgent agent(backend, opts);
  SlurmAgentServer server(agent, "127.0.0.1:0");
  ASSERT_TRUE(server.Start().ok());
  std::thread loop([&] { agent.Run(); });

  auto cancelled = cluster().WaitForJobState(idle, "CANCELLED", 40 * kSecond);
  std::string notebook_restarts;
  for (int i = 0; i < 100 && notebook_restarts != "1"; ++i) {
    if (auto job = ShowJob(notebook, cluster().context()); job.ok()) notebook_restarts = (*job)["Restarts"];
    if (notebook_restarts != "1") std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Read the metrics while the busy job still runs.
  ListOptions lo;
  lo.slurm = cluster().context();
  lo.metrics_urls = {fmt::format("http://127.0.0.1:{}/metrics", server.port())};
  auto rows = ListSlurmJobs(lo);
  std::string metrics_text = agent.MetricsText();
  agent.Stop();
  loop.join();
  server.Stop();

  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  std::string out = OutputOf(idle);
  auto warn = out.find("gpuslice: WARNING job " + idle + " (partition interactive) has not used its GPU");
  ASSERT_NE(warn, std::string::npos) << out;
  EXPECT_THAT(out.substr(warn), HasSubstr("it will be cancelled at"));
  EXPECT_THAT(out.substr(warn), HasSubstr("idle for"));  // the reclaim line comes after the warning

  // The preemptible queue's idle job was requeued (its output is appended to, so the warning
  // survives the restart).
  EXPECT_EQ(notebook_restarts, "1");
  EXPECT_THAT(OutputOf(notebook), HasSubstr("it will be requeued at"));

  for (const auto& id : {busy, training}) {
    auto job = ShowJob(id, cluster().context());
    ASSERT_TRUE(job.ok());
    EXPECT_EQ((*job)["JobState"], "RUNNING") << "job " << id << " must not be touched";
    EXPECT_THAT(OutputOf(id), ::testing::Not(HasSubstr("gpuslice:")));
  }
  {
    std::lock_guard lock(log_mu);
    std::string all;
    for (const auto& l : log) all += l + "\n";
    EXPECT_THAT(all, HasSubstr("WARNING job " + idle));
    EXPECT_THAT(all, HasSubstr("job " + idle + " (partition interactive) idle for"));
    EXPECT_THAT(all, ::testing::Not(HasSubstr("job " + busy + " ")));
    EXPECT_THAT(all, ::testing::Not(HasSubstr("job " + training + " ")));
  }
  // Per-job utilisation, on /metrics and in `ps`.
  EXPECT_THAT(metrics_text, HasSubstr(fmt::format("gpuslice_slurm_job_gpu_utilization_percent{{job_id=\"{}\",partition=\"interactive\",user=\"root\",node=\"testhost\"}} 80.0", busy)));
  EXPECT_THAT(metrics_text, HasSubstr("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\""));
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  bool seen_busy = false;
  for (const auto& row : *rows) {
    if (row.job_id == busy) {
      seen_busy = true;
      ASSERT_TRUE(row.gpu_util_percent.has_value());
      EXPECT_DOUBLE_EQ(*row.gpu_util_percent, 80.0);
      EXPECT_EQ(row.partition, "interactive");
    }
  }
  EXPECT_TRUE(seen_busy);
  Cancel({busy, training, notebook});
}

// The CLI end to end: a bad policy file, then submit and ps through the gpuslice binary.
TEST_F(SlurmTest, CliConfigSubmitAndPs) {
  const std::string bin = std::string(GPUSLICE_BUILD_DIR) + "/apps/gpuslice/gpuslice";
  std::string bad = cluster().root() + "/bad.toml";
  std::ofstream(bad) << "[queues.interactive]\ntime_limit = \"8x\"\n";
  auto r = RunCommand({.argv = {bin, "slurm", "config", "--policy", bad, "--nodes", "gpu[1-2]"}, .env = {},
                       .stdin_text = "", .timeout = 20 * kSecond});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("bad.toml: queues.interactive.time_limit = '8x'"));

  std::string policy = cluster().root() + "/policy.toml";
  std::ofstream(policy) << kPolicy;
  r = RunCommand({.argv = {bin, "slurm", "submit", "--policy", policy, "--queue", "interactive", "--fraction", "0.5",
                           "--output", cluster().jobs_dir() + "/%j.out", "--", "sh", "-c", "echo SHARDS=$SLURM_SHARDS_ON_NODE"},
                  .env = cluster().command_env(), .stdin_text = "", .timeout = 20 * kSecond});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  std::string id = r->out.substr(0, r->out.find('\n'));
  ASSERT_THAT(id, ::testing::MatchesRegex("[0-9]+"));
  EXPECT_EQ(WaitForOutput(id, "SHARDS"), "2");

  r = RunCommand({.argv = {bin, "slurm", "ps", "--all", "--partition", "interactive"}, .env = cluster().command_env(),
                  .stdin_text = "", .timeout = 20 * kSecond});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_THAT(r->out, HasSubstr("JOBID"));
  EXPECT_THAT(r->out, ::testing::ContainsRegex(id + " +interactive +root"));

  r = RunCommand({.argv = {bin, "slurm", "submit", "--policy", policy, "--queue", "nosuch", "--", "true"},
                  .env = cluster().command_env(), .stdin_text = "", .timeout = 20 * kSecond});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_THAT(r->err, HasSubstr("queue 'nosuch' is not in the policy"));

  // --kind and --model are honoured, by `slurm submit` and by `submit --slurm` alike (the
  // latter once dropped both and submitted the queue's default); what Slurm cannot give is
  // refused naming the flag and the value, and nothing is submitted.
  auto gpuslice = [&](std::vector<std::string> args) {
    args.insert(args.begin(), bin);
    auto run = RunCommand({.argv = args, .env = cluster().command_env(), .stdin_text = "", .timeout = 20 * kSecond});
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run.ok() ? *run : CommandResult{};
  };
  r = gpuslice({"slurm", "submit", "--policy", policy, "--queue", "debug", "--kind", "whole", "--dry-run", "--", "true"});
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_THAT(r->out, HasSubstr("--gres=gpu:1 ")) << "the queue's default is shared; whole was asked";
  r = gpuslice({"slurm", "submit", "--policy", policy, "--queue", "training", "--gpus", "2", "--model", "fake",
                "--dry-run", "--", "true"});
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_THAT(r->out, HasSubstr("--gres=gpu:fake:2 "));
  r = gpuslice({"submit", "--slurm", "--policy", policy, "--queue", "training", "--gpus", "1", "--model", "H100-80GB",
                "--", "true"});
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("--model = H100-80GB: partition 'training' has no gpu GRES of type 'h100_80gb' "
                                "(types: fake"));
  r = gpuslice({"submit", "--slurm", "--policy", policy, "--queue", "debug", "--kind", "mig", "--", "true"});
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("queue 'debug' does not allow mig slices"));
  r = gpuslice({"submit", "--slurm", "--policy", policy, "--queue", "debug", "--fraction", "0.5", "--kind", "whole",
                "--", "true"});
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("--kind = whole does not go with --fraction on Slurm"));
  r = gpuslice({"slurm", "submit", "--policy", policy, "--queue", "debug", "--fraction", "0.5", "--model", "fake",
                "--dry-run", "--", "true"});
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("--model = fake: on Slurm only whole-GPU jobs choose the model"));
}

// Last: the job submitted when the cluster started has been running for over a minute by now.
TEST_F(SlurmTest, ZzJobOverItsQueueTimeLimitIsKilledBySlurm) {
  const std::string& id = SlurmEnvironment::time_limit_job();
  ASSERT_FALSE(id.empty());
  auto job = cluster().WaitForJobState(id, "TIMEOUT,CANCELLED,COMPLETED,FAILED", 150 * kSecond);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ((*job)["JobState"], "TIMEOUT");
  EXPECT_EQ((*job)["TimeLimit"], "00:01:00");
  EXPECT_EQ((*job)["Partition"], "debug");
}

}  // namespace
}  // namespace gpuslice::slurm
