// GenerateTeamsSetup: [teams] as Slurm accounts, users, GrpTRES, fair share and QOS. No Slurm
// needed; slurm_teams_test applies the same output to a real slurmdbd.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/config.h"
#include "slurm/cli.h"
#include "slurm/client.h"
#include "slurm/process.h"
#include "slurm/teams_setup.h"
#include "testing/files.h"

namespace gpuslice::slurm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Queues with one GRES each (so each limit is exact) and a preemptible one.
constexpr const char* kQueues = R"(
default_queue = "interactive"
[queues.interactive]
kinds = ["shared"]
preemptible = false
[queues.training]
kinds = ["whole"]
preemptible = true
)";

sched::Config Policy(const std::string& teams) {
  auto c = sched::ParseConfig(std::string(kQueues) + teams, "t.toml");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : sched::Config{};
}

constexpr const char* kTwoTeams = R"(
[teams]
half_life = "36h"
defaults = { carol = "vision" }
[teams.vision]
members = ["alice", "carol"]
guarantee = { training = 2 }
limit = { training = 3, interactive = "500m" }
weight = 3
[teams.nlp]
members = ["bob", "carol"]
)";

// The sacctmgr calls, their words joined by spaces.
std::vector<std::string> Lines(const TeamsSetup& s) {
  std::vector<std::string> out;
  for (const SacctmgrCommand& c : s.commands) {
    std::string line;
    for (const std::string& w : c.argv) line += (line.empty() ? "" : " ") + w;
    out.push_back(line);
  }
  return out;
}

std::string AllWarnings(const TeamsSetup& s) {
  std::string w;
  for (const auto& x : s.warnings) w += x + "\n";
  return w;
}

TEST(GenerateTeamsSetup, TeamsBecomeAccountsWithWeightAsFairshareAndLimitsAsGrpTres) {
  auto s = GenerateTeamsSetup(Policy(kTwoTeams), {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_THAT(Lines(*s), ::testing::IsSupersetOf({
      "sacctmgr -i add account Name=nlp Description=gpuslice team Organization=gpuslice Parent=root",
      // 500m of a GPU is 4 of 8 shards; no limit is -1, which also clears an old one.
      "sacctmgr -i modify account where Name=vision set Fairshare=3 "
      "GrpTRES=gres/gpu=3,gres/shard=4 QOS=gpuslice-team,gpuslice-borrow DefaultQOS=gpuslice-team",
      "sacctmgr -i modify account where Name=nlp set Fairshare=1 "
      "GrpTRES=gres/gpu=-1,gres/shard=-1 QOS=gpuslice-team,gpuslice-borrow DefaultQOS=gpuslice-team",
      "sacctmgr -i modify qos where Name=gpuslice-borrow set Priority=0 PreemptMode=requeue "
      "Flags=NoReserve",
  }));
  EXPECT_EQ(AllWarnings(*s), "");
  // Guarantees have no Slurm form: said as a comment.
  EXPECT_THAT(s->script, HasSubstr("# team vision: weight 3 -> Fairshare=3\n"
                                   "#   guaranteed 2 GPU in queue 'training': not expressible in Slurm (no guarantee)\n"));
  EXPECT_THAT(s->script, HasSubstr("add account Name=vision 'Description=gpuslice team' Organization=gpuslice"));
  EXPECT_THAT(s->slurm_conf, HasSubstr("AccountingStorageTRES=gres/gpu,gres/shard\n"));
  EXPECT_THAT(s->slurm_conf, HasSubstr("AccountingStorageEnforce=limits,qos,safe\n"));
  EXPECT_THAT(s->slurm_conf, HasSubstr("PriorityType=priority/multifactor\n"));
  EXPECT_THAT(s->slurm_conf, HasSubstr("PriorityDecayHalfLife=1-12:00\n"));
  EXPECT_THAT(s->slurm_conf, HasSubstr("PreemptType=preempt/qos\n"));
  EXPECT_THAT(s->slurm_conf, HasSubstr("DenyQos=gpuslice-borrow to the PartitionName lines of the queues that are "
                                       "not preemptible (interactive)"));
}

TEST(GenerateTeamsSetup, UsersGetOneAssociationPerTeamAndTheirDefaultTeamAsDefaultAccount) {
  auto s = GenerateTeamsSetup(Policy(kTwoTeams), {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto lines = Lines(*s);
  auto at = [&](const std::string& l) { return std::find(lines.begin(), lines.end(), l) - lines.begin(); };
  // carol: teams.defaults says vision, so vision first, with DefaultAccount; then nlp.
  const auto carol_vision =
      at("sacctmgr -i add user Name=carol Account=vision DefaultAccount=vision");
  const auto carol_nlp = at("sacctmgr -i add user Name=carol Account=nlp");
  ASSERT_LT(carol_vision, static_cast<long>(lines.size()));
  ASSERT_LT(carol_nlp, static_cast<long>(lines.size()));
  EXPECT_LT(carol_vision, carol_nlp);
  EXPECT_THAT(lines, ::testing::Contains("sacctmgr -i modify user where Name=carol set "
                                         "DefaultAccount=vision"));
  EXPECT_THAT(lines, ::testing::Contains("sacctmgr -i add user Name=bob Account=nlp DefaultAccount=nlp"));
  // Without the default: the first team by name (nlp).
  auto no_default = Policy(kTwoTeams);
  no_default.teams.defaults.clear();
  auto d = GenerateTeamsSetup(no_default, {});
  ASSERT_TRUE(d.ok());
  EXPECT_THAT(Lines(*d), ::testing::Contains("sacctmgr -i add user Name=carol Account=nlp "
                                             "DefaultAccount=nlp"));
  for (const SacctmgrCommand& c : s->commands) EXPECT_EQ(c.may_exist, c.argv[2] == "add") << ShellJoin(c.argv);
}

TEST(GenerateTeamsSetup, LimitsRoundDownToWholeUnitsWithAWarning) {
  struct Case {
    const char* limit;       // the team's limit table
    SharingGres sharing;
    const char* grp_tres;    // expected
    const char* warning;     // expected substring; "" for none
  };
  const Case cases[] = {
      {"{ training = 2 }", SharingGres::kShard, "GrpTRES=gres/gpu=2,gres/shard=-1", ""},
      {"{ training = 1.5 }", SharingGres::kShard, "GrpTRES=gres/gpu=1,gres/shard=-1",
       "teams.t.limit.training = 1.5: gres/gpu counts whole units (1 per GPU); capped at 1 (rounded down"},
      {"{ training = \"500m\" }", SharingGres::kShard, "GrpTRES=gres/gpu=0,gres/shard=-1", "capped at 0"},
      {"{ interactive = \"300m\" }", SharingGres::kShard, "GrpTRES=gres/gpu=-1,gres/shard=2",
       "teams.t.limit.interactive = 300m: gres/shard counts whole units (8 per GPU); capped at 2"},
      {"{ interactive = \"250m\" }", SharingGres::kShard, "GrpTRES=gres/gpu=-1,gres/shard=2", ""},
      // With mps as the sharing GRES, shared slices are not offered at all (docs/slurm.md): no cap.
      {"{ interactive = \"250m\" }", SharingGres::kMps, "GrpTRES=gres/gpu=-1 ",
       "teams.t.limit.interactive: not expressed: no GRES counts this queue's slices"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.limit);
    TeamsSetupOptions o;
    o.sharing = c.sharing;
    auto s = GenerateTeamsSetup(Policy(std::string("[teams.t]\nmembers = [\"u\"]\nlimit = ") + c.limit + "\n"), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_THAT(s->script, HasSubstr(c.grp_tres));
    if (*c.warning == '\0') EXPECT_EQ(AllWarnings(*s), "");
    else EXPECT_THAT(AllWarnings(*s), HasSubstr(c.warning));
  }
}

TEST(GenerateTeamsSetup, ALimitOnAGresOtherQueuesShareIsSummedOrLeftOffWithAWarning) {
  // The built-in queues: training and inference both count gres/gpu.
  sched::Config c = sched::DefaultConfig();
  sched::TeamConfig t;
  t.name = "vision";
  t.users = {"alice"};
  t.limit = {{"training", 4 * kOneGpu}};
  c.teams.teams = {t};
  auto s = GenerateTeamsSetup(c, {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_THAT(AllWarnings(*s), HasSubstr("teams.vision.limit.training: not expressed: gres/gpu counts queue "
                                         "'inference' too, where the team has no limit"));
  EXPECT_THAT(s->script, HasSubstr("GrpTRES=gres/gpu=-1,"));
  c.teams.teams[0].limit["inference"] = 2 * kOneGpu;
  s = GenerateTeamsSetup(c, {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_THAT(s->script, HasSubstr("GrpTRES=gres/gpu=6,"));
  EXPECT_THAT(AllWarnings(*s), HasSubstr("team vision: gres/gpu is capped at 6 for queues 'inference', 'training' "
                                         "together"));
  EXPECT_THAT(AllWarnings(*s), HasSubstr("teams.vision.limit.inference: its MIG slices count as one gres/gpu each"));
}

TEST(SlurmDecayHalfLife, IsDaysHoursMinutesRoundedToTheNearestMinute) {
  const std::pair<Micros, const char*> cases[] = {
      {7 * 24 * kHour, "7-00:00"}, {36 * kHour, "1-12:00"},   {90 * kMinute, "0-01:30"},
      {89 * kSecond, "0-00:01"},   {91 * kSecond, "0-00:02"}, {10 * kSecond, "0-00:01"},
      {0, "0"},
  };
  for (const auto& [us, want] : cases) EXPECT_EQ(SlurmDecayHalfLife(us), want) << FormatDuration(us);
}

TEST(GenerateTeamsSetup, GroupsAreExpandedToTheirUsersOrSaidNotToBe) {
  const std::string teams = "[teams.vision]\nmembers = [\"alice\", \"@lab\", \"@gone\"]\n"
                            "[teams.nlp]\nmembers = [\"@lab\"]\n";
  TeamsSetupOptions o;
  o.group_members = [](const std::string& g) -> std::optional<std::vector<std::string>> {
    if (g == "lab") return std::vector<std::string>{"alice", "dave"};
    return std::nullopt;
  };
  auto s = GenerateTeamsSetup(Policy(teams), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto lines = Lines(*s);
  // dave is in both teams by group: the first by name (nlp) is his default.
  EXPECT_THAT(lines, ::testing::Contains("sacctmgr -i add user Name=dave Account=nlp DefaultAccount=nlp"));
  EXPECT_THAT(lines, ::testing::Contains("sacctmgr -i add user Name=dave Account=vision"));
  // alice is listed in vision and in nlp's group: the listing wins for her default.
  EXPECT_THAT(lines, ::testing::Contains("sacctmgr -i add user Name=alice Account=vision "
                                         "DefaultAccount=vision"));
  EXPECT_THAT(lines, ::testing::Contains("sacctmgr -i add user Name=alice Account=nlp"));
  EXPECT_THAT(AllWarnings(*s), HasSubstr("team vision: group @gone does not exist on this host"));
  EXPECT_THAT(s->script, HasSubstr("# team nlp: group @lab is 2 user(s) here, added one by one"));

  auto unresolved = GenerateTeamsSetup(Policy(teams), {});
  ASSERT_TRUE(unresolved.ok());
  EXPECT_THAT(AllWarnings(*unresolved), HasSubstr("team nlp: members of group @lab are not added: Slurm has no group "
                                                  "associations"));
  EXPECT_THAT(ShellJoin(Lines(*unresolved)), Not(HasSubstr("dave")));
}

TEST(GenerateTeamsSetup, NamesSlurmCannotTakeAreRefusedByName) {
  struct Case {
    std::string team;
    std::string user;
    const char* error;
  };
  const Case cases[] = {
      {"Vision", "alice", "teams.Vision: not a Slurm account name"},
      {"root", "alice", "teams.root: 'root' is Slurm's root account"},
      {"a b", "alice", "teams.a b: not a Slurm account name"},
      {"x';rm -rf /;'", "alice", "not a Slurm account name"},
      {"a=b", "alice", "teams.a=b: not a Slurm account name"},
      {"-x", "alice", "teams.-x: not a Slurm account name"},
      {".x", "alice", "teams..x: not a Slurm account name"},
      {"ok", "al ice", "teams.ok.members: 'al ice' is not a user name Slurm can take"},
      {"ok", "a,b", "teams.ok.members: 'a,b' is not a user name"},
      {"ok", "a\nb", "teams.ok.members: 'a\\nb' is not a user name"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.team + "/" + c.user);
    sched::Config p = Policy("");
    sched::TeamConfig t;
    t.name = c.team;
    t.users = {c.user};
    p.teams.teams = {t};
    auto s = GenerateTeamsSetup(p, {});
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(c.error));
  }
  // A group member from the system is checked too.
  TeamsSetupOptions o;
  o.group_members = [](const std::string&) { return std::optional<std::vector<std::string>>({"x;y"}); };
  auto s = GenerateTeamsSetup(Policy("[teams.t]\nmembers = [\"@lab\"]\n"), o);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("teams.t.members: group @lab has member 'x;y'"));
  // So is --cluster.
  o = {};
  o.cluster = "Big Cluster";
  s = GenerateTeamsSetup(Policy("[teams.t]\nmembers = [\"u\"]\n"), o);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("--cluster = 'Big Cluster'"));
  // And a config without teams.
  s = GenerateTeamsSetup(Policy(""), {});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("no [teams]"));
}

TEST(GenerateTeamsSetup, ClusterIsNamedOnEveryAccountAndUser) {
  TeamsSetupOptions o;
  o.cluster = "gpu-a";
  auto s = GenerateTeamsSetup(Policy("[teams.t]\nmembers = [\"u\"]\n"), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (const SacctmgrCommand& c : s->commands) {
    if (c.argv[3] == "qos") continue;
    EXPECT_THAT(c.argv, ::testing::Contains("Cluster=gpu-a")) << ShellJoin(c.argv);
  }
}

TEST(GenerateTeamsSetup, WithoutPreemptibleQueuesThereIsNoBorrowQos) {
  auto p = Policy("[teams.t]\nmembers = [\"u\"]\n");
  for (auto& q : p.queues) q.preemptible = false;
  auto s = GenerateTeamsSetup(p, {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_THAT(s->script, Not(HasSubstr("gpuslice-borrow")));
  EXPECT_THAT(s->slurm_conf, Not(HasSubstr("Preempt")));
}

// `submit --slurm --team X` runs in account X; X is checked against the policy before Slurm is
// asked anything (slurm_teams_test sees the account on a real job).
TEST(PlanSlurmSubmission, ATeamMustBeOneOfThePolicys) {
  SlurmSubmitRequest r;
  r.queue = "training";
  r.command = {"true"};
  r.team = "nope";
  r.policy = Policy(kTwoTeams);
  r.slurm.slurm_conf = "/nonexistent/slurm.conf";
  auto s = PlanSlurmSubmission(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("--team 'nope': no such team in the policy's [teams]"));
  r.policy = Policy("");
  s = PlanSlurmSubmission(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("--team 'nope': the policy has no [teams]"));
}

// `submit --slurm --borrow` runs in the borrowing QOS that `slurm teams` makes, and only where
// it makes it: a preemptible queue of a policy with teams (checked before Slurm is asked).
TEST(PlanSlurmSubmission, ABorrowingJobRunsInTheBorrowQosOfAPreemptibleQueue) {
  namespace fs = std::filesystem;
  const fs::path bin = ::testing::TempDir() + "plan_borrow_" + std::to_string(::getpid());
  fs::create_directories(bin);
  std::ofstream(bin / "sinfo") << "#!/bin/sh\necho gpu:fake:2\n";  // the partition's GRES
  fs::permissions(bin / "sinfo", fs::perms::owner_all);
  SlurmSubmitRequest r;
  r.queue = "training";
  r.gpus = 1;
  r.command = {"true"};
  r.team = "nlp";
  r.borrow = true;
  r.policy = Policy(kTwoTeams);
  r.slurm.bin_dir = bin.string();
  auto s = PlanSlurmSubmission(r);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_THAT(s->sbatch_args, ::testing::IsSupersetOf({"--account=nlp", "--qos=gpuslice-borrow"}))
      << ShellJoin(s->sbatch_args);
  r.borrow = false;
  s = PlanSlurmSubmission(r);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_THAT(s->sbatch_args, Not(::testing::Contains(HasSubstr("--qos")))) << "the team's QOS is the default";

  r.borrow = true;
  r.queue = "interactive";
  s = PlanSlurmSubmission(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("--borrow: queue 'interactive' is not preemptible"));
  r.queue = "training";
  r.team = "";
  r.policy = Policy("");
  s = PlanSlurmSubmission(r);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("--borrow: the policy has no [teams]"));
  fs::remove_all(bin);
}

TEST(RunSlurmTeams, PrintsBothPartsOrWritesThemWithWarningsOnStderr) {
  namespace fs = std::filesystem;
  const fs::path dir = ::testing::TempDir() + "slurm_teams_" + std::to_string(::getpid());
  fs::create_directories(dir);
  const std::string policy = (dir / "p.toml").string();
  std::ofstream(policy) << kQueues << "[teams.t]\nmembers = [\"u\"]\nlimit = { training = 1.5 }\n";
  TeamsFlags f;
  f.policy = policy;
  std::ostringstream out, err;
  ASSERT_TRUE(RunSlurmTeams(f, out, err).ok());
  EXPECT_THAT(out.str(), HasSubstr("######## slurm.conf (merge) ########\n# ---- generated by `gpuslice slurm teams`"));
  EXPECT_THAT(out.str(), HasSubstr("######## sacctmgr script ########\n#!/bin/sh\n# Generated by `gpuslice slurm teams` "
                                   "from " + policy));
  EXPECT_THAT(err.str(), HasSubstr("warning: teams.t.limit.training = 1.5: gres/gpu counts whole units"));

  f.out_dir = (dir / "out").string();
  out.str("");
  ASSERT_TRUE(RunSlurmTeams(f, out, err).ok());
  EXPECT_THAT(gpuslice::testing::Slurp(dir / "out" / "slurm.conf.teams"), HasSubstr("PriorityType=priority/multifactor"));
  EXPECT_THAT(gpuslice::testing::Slurp(dir / "out" / "teams-setup.sh"), HasSubstr("add account Name=t "));
  EXPECT_NE(fs::status(dir / "out" / "teams-setup.sh").permissions() & fs::perms::owner_exec, fs::perms::none);

  f = {};
  auto st = RunSlurmTeams(f, out, err);
  EXPECT_THAT(st.message(), HasSubstr("--policy: give the config with [teams]"));
  f.policy = policy;
  f.sharing = "both";
  EXPECT_THAT(RunSlurmTeams(f, out, err).message(), HasSubstr("--sharing = 'both': expected shard or mps"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpuslice::slurm
