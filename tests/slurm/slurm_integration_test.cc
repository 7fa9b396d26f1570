// Integration tests against a real Slurm cluster on localhost (see slurm_cluster.h). One
// cluster serves the whole binary: a GoogleTest global Environment starts it before the first
// test and stops it after the last, even when tests fail; the cluster's watchdog covers a
// killed test process.

#include <fstream>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/config.h"
#include "slurm/client.h"
#include "tests/slurm/slurm_cluster.h"

namespace gpuslice::slurm {
namespace {

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

[queues.debug]
kinds = ["whole", "shared"]
time_limit = "1m"
idle = { enabled = false }
)";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

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
  std::string OutputOf(const std::string& id) { return ReadFile(cluster().jobs_dir() + "/" + id + ".out"); }
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

}  // namespace
}  // namespace gpuslice::slurm
