// `gpuslice slurm teams` against a real slurmdbd with MariaDB (slurm_cluster.h, accounting on):
// the generated sacctmgr commands are applied, then Slurm's own view (sacctmgr show, sshare)
// must be what the config says, a job over its team's GrpTRES must pend, and a borrowing job
// must be requeued for a team's job. Skipped, with the reason, when MariaDB cannot run here.

#include <chrono>
#include <map>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/config.h"
#include "slurm/client.h"
#include "slurm/process.h"
#include "slurm/teams_setup.h"
#include "tests/slurm/slurm_cluster.h"

namespace gpuslice::slurm {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

// One node with 2 GPUs (4 shards each). root submits the test's jobs, so root is in both teams;
// @daemon is expanded to its users (the daemon user's primary group).
constexpr const char* kPolicy = R"(
default_queue = "interactive"
[queues.interactive]
kinds = ["shared"]
[queues.training]
kinds = ["whole"]
preemptible = true

[teams]
half_life = "2h"
defaults = { root = "vision" }
[teams.vision]
members = ["root", "@daemon"]
guarantee = { training = 1 }
limit = { training = 1, interactive = "500m" }
weight = 3
[teams.nlp]
members = ["root", "bob"]
)";

class SlurmTeamsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto policy = sched::ParseConfig(kPolicy, "teams-policy.toml");
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    policy_ = *policy;
    TeamsSetupOptions o;
    o.shards_per_gpu = 4;
    o.group_members = SystemGroupMembers();
    auto setup = GenerateTeamsSetup(policy_, o);
    ASSERT_TRUE(setup.ok()) << setup.status().ToString();
    setup_ = *setup;
    testing::ClusterOptions options;
    options.policy = policy_;
    options.gpu_nodes = 1;
    options.mig_nodes = 0;
    options.shards_per_gpu = 4;
    options.accounting = true;
    options.extra_conf = setup_.slurm_conf;
    options.watchdog_seconds = 300;
    auto c = testing::SlurmCluster::Start(options);
    if (!c.ok()) {
      start_error_ = c.status();
      return;
    }
    cluster_ = std::move(c).value();
  }
  static void TearDownTestSuite() {
    if (cluster_) cluster_->Stop();
    cluster_.reset();
  }
  void SetUp() override {
    if (start_error_.code() == StatusCode::kUnavailable)
      GTEST_SKIP() << "no slurmdbd with MariaDB here: " << start_error_.ToString();
    ASSERT_NE(cluster_, nullptr) << start_error_.ToString();
  }

  // Runs a Slurm command against the cluster; its stdout, or a failure naming it.
  std::string Run(const std::vector<std::string>& argv) {
    auto r = RunCommand({.argv = argv, .env = cluster_->command_env(), .stdin_text = "", .timeout = 20 * kSecond});
    EXPECT_TRUE(r.ok() && r->exit_code == 0)
        << ShellJoin(argv) << ": " << (r.ok() ? r->err + r->out : r.status().ToString());
    return r.ok() ? r->out : "";
  }
  static std::vector<std::string> LinesOf(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }
  // Applies the generated setup once per test binary (the first test to need it).
  void Apply() {
    if (applied_) return;
    applied_ = true;
    for (const SacctmgrCommand& c : setup_.commands) Run(c.argv);
  }

  SlurmSubmitRequest Request(const std::string& team, int gpus) {
    SlurmSubmitRequest r;
    r.queue = "training";
    r.gpus = gpus;
    r.team = team;
    r.command = {"sleep", "300"};
    r.output = "/dev/null";
    r.policy = policy_;
    r.slurm = cluster_->context();
    return r;
  }
  std::string Submit(const SlurmSubmitRequest& r) {
    auto id = SubmitToSlurm(r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : "";
  }
  // Polls until the job's `key` is `value`; the last record.
  std::map<std::string, std::string> WaitFor(const std::string& id, const std::string& key, const std::string& value) {
    std::map<std::string, std::string> job;
    for (int i = 0; i < 150; ++i) {
      auto j = ShowJob(id, cluster_->context());
      if (j.ok()) {
        job = *j;
        if (job[key] == value) return job;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << "job " << id << ": " << key << " never became " << value << " (last: " << job[key] << ")";
    return job;
  }
  void CancelAll(const std::vector<std::string>& ids) {
    for (const auto& id : ids) (void)CancelJob(id, cluster_->context());
    for (const auto& id : ids) (void)cluster_->WaitForJobState(id, "CANCELLED,COMPLETED,FAILED", 15 * kSecond);
  }

  static inline sched::Config policy_;
  static inline TeamsSetup setup_;
  static inline std::unique_ptr<testing::SlurmCluster> cluster_;
  static inline Status start_error_;
  static inline bool applied_ = false;
};

TEST_F(SlurmTeamsTest, GeneratedScriptRunsAndSlurmShowsTheTeamsAsConfigured) {
  Apply();
  // Accounts: Fairshare from weight, GrpTRES from limits (500m = 2 of 4 shards), the QOS.
  EXPECT_THAT(LinesOf(Run({"sacctmgr", "-n", "-P", "show", "assoc", "format=account,user,fairshare,grptres"})),
              IsSupersetOf({"vision||3|gres/gpu=1,gres/shard=2", "nlp||1|", "vision|root|1|", "nlp|root|1|",
                            "vision|daemon|1|", "nlp|bob|1|"}));
  EXPECT_THAT(LinesOf(Run({"sacctmgr", "-n", "-P", "show", "user", "format=user,defaultaccount"})),
              IsSupersetOf({"root|vision", "daemon|vision", "bob|nlp"}));
  EXPECT_THAT(LinesOf(Run({"sacctmgr", "-n", "-P", "show", "qos", "format=name,priority,preempt,preemptmode,flags"})),
              IsSupersetOf({"gpuslice-borrow|0||requeue|NoReserve", "gpuslice-team|10|gpuslice-borrow|cluster|"}));
  // The users inherit their team's QOS.
  EXPECT_THAT(LinesOf(Run({"sacctmgr", "-n", "-P", "show", "assoc", "where", "user=bob", "format=account,qos,defaultqos"})),
              Contains("nlp|gpuslice-borrow,gpuslice-team|gpuslice-team"));
  // Fair share: the raw shares are the weights, and vision's normalised share is 3 times nlp's
  // (root's own association takes a share too).
  std::map<std::string, std::vector<std::string>> rows;
  for (const std::string& l : LinesOf(Run({"sshare", "-a", "-l", "-P"}))) {
    std::vector<std::string> f;
    std::istringstream in(l);
    for (std::string x; std::getline(in, x, '|');) f.push_back(x);
    if (f.size() > 3 && f[1].empty()) rows[f[0]] = f;  // account rows: no user
  }
  ASSERT_TRUE(rows.count(" vision") && rows.count(" nlp")) << Run({"sshare", "-a", "-l", "-P"});
  EXPECT_EQ(rows[" vision"][2], "3");
  EXPECT_EQ(rows[" nlp"][2], "1");
  EXPECT_NEAR(std::stod(rows[" vision"][3]), 3 * std::stod(rows[" nlp"][3]), 1e-6);
  EXPECT_THAT(Run({"scontrol", "show", "config"}), HasSubstr("PriorityDecayHalfLife   = 02:00:00"));
}

TEST_F(SlurmTeamsTest, TheScriptCanRunAgain) {
  Apply();
  auto r = RunCommand({.argv = {"sh", "-c", setup_.script}, .env = cluster_->command_env(), .stdin_text = "",
                       .timeout = 60 * kSecond});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0) << r->err << r->out;
}

TEST_F(SlurmTeamsTest, AJobOverItsTeamsLimitPendsAndABorrowingJobIsRequeuedForATeamJob) {
  Apply();
  const std::string first = Submit(Request("vision", 1));
  WaitFor(first, "JobState", "RUNNING");
  EXPECT_EQ(WaitFor(first, "Account", "vision")["Account"], "vision");
  // vision's training limit is 1 GPU: the second waits for its account's GRES limit.
  const std::string second = Submit(Request("vision", 1));
  EXPECT_EQ(WaitFor(second, "Reason", "AssocGrpGRES")["JobState"], "PENDING");
  CancelAll({first, second});

  // nlp (no limit) borrows both GPUs with the borrowing QOS; a vision job takes one back.
  auto borrow = Request("nlp", 2);
  borrow.borrow = true;
  const std::string borrower = Submit(borrow);
  WaitFor(borrower, "JobState", "RUNNING");
  const std::string owner = Submit(Request("vision", 1));
  WaitFor(owner, "JobState", "RUNNING");
  auto b = ShowJob(borrower, cluster_->context());
  ASSERT_TRUE(b.ok());
  EXPECT_NE((*b)["JobState"], "RUNNING");
  // Requeued, not killed.
  ASSERT_FALSE((*b)["Restarts"].empty());
  EXPECT_GE(std::stoi((*b)["Restarts"]), 1);
  CancelAll({borrower, owner});
}

}  // namespace
}  // namespace gpuslice::slurm
