// Teams through the daemon (docs/teams.md): `submit --team`, who may name which team (by user
// and by Unix group), the job's team in its view, and GET /v1/teams and `gpuslice teams`.
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/daemon/harness.h"

namespace gpuslice::testing_e2e {
namespace {

std::string Me() { return getpwuid(getuid())->pw_name; }
std::string MyGroup() { return getgrgid(getgid())->gr_name; }

std::string TeamsToml() {
  return QueuesConfig() + fmt::format(R"(
[teams.vision]
members = ["{}"]
guarantee = {{ training = 2 }}
limit = {{ training = 3 }}
[teams.bygroup]
members = ["@{}"]
[teams.others]
members = ["no-such-user-here"]
guarantee = {{ training = 8 }}
)", Me(), MyGroup());
}

TEST(TeamsE2E, ASubmitRunsInItsTeamAndTheTeamsViewCountsIt) {
  DaemonHarness h("teams", TeamsToml());
  h.Start();
  const std::uint64_t a = h.Submit({"sleep", "30"}, {{"queue", "training"}, {"gpus", 2}});
  json ja = h.WaitJob(a, Running);
  EXPECT_EQ(ja["job"].value("team", ""), "vision") << "the team listing the user, by default";
  // By group: the user is not listed, but is in the team's Unix group.
  const std::uint64_t b = h.Submit({"sleep", "30"}, {{"queue", "training"}, {"gpus", 1}, {"team", "bygroup"}});
  EXPECT_EQ(h.WaitJob(b, Running)["job"].value("team", ""), "bygroup");

  auto client = h.Client();
  auto bad = client.Post("/v1/jobs", json{{"argv", {"true"}}, {"queue", "training"}, {"team", "nosuch"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("field 'team': value 'nosuch' is not a team"), std::string::npos)
      << bad.status().ToString();
  auto denied = client.Post("/v1/jobs", json{{"argv", {"true"}}, {"queue", "training"}, {"team", "others"}});
  ASSERT_FALSE(denied.ok());
  EXPECT_NE(denied.status().message().find("is not one of its members"), std::string::npos)
      << denied.status().ToString();

  auto t = client.Get("/v1/teams");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)["enabled"].get<bool>());
  json vision;
  for (const json& team : (*t)["teams"])
    if (team["name"] == "vision") vision = team;
  ASSERT_FALSE(vision.is_null()) << t->dump();
  ASSERT_EQ(vision["queues"].size(), 1u) << vision.dump();
  EXPECT_EQ(vision["queues"][0]["held"], 2000);
  EXPECT_EQ(vision["queues"][0]["guaranteed"], 2000);
  EXPECT_EQ(vision["queues"][0]["borrowed"], 0);
  EXPECT_EQ(vision["queues"][0]["limit"], 3000);
  // Fair share: vision holds only its guarantee, so it has used nothing past it; bygroup, with
  // no guarantee, borrows its GPU, and once the clock has moved past its start it has used more
  // than the two other teams and ranks after both.
  EXPECT_EQ(vision["usage_gpu_hours"], 0.0) << vision.dump();
  EXPECT_EQ(vision["rank"], 1) << vision.dump();
  json bygroup;
  for (int i = 0; i < 100 && !(bygroup.is_object() && bygroup["usage_gpu_hours"].get<double>() > 0); ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto again = client.Get("/v1/teams");
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    for (const json& team : (*again)["teams"])
      if (team["name"] == "bygroup") bygroup = team;
  }
  ASSERT_GT(bygroup["usage_gpu_hours"].get<double>(), 0.0) << bygroup.dump();
  EXPECT_EQ(bygroup["rank"], 3) << bygroup.dump();
  // The same figures for Prometheus, in GPUs.
  auto metrics = client.GetText("/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  for (const char* line : {"gpuslice_team_guaranteed_gpus{team=\"vision\",queue=\"training\"} 2.000\n",
                           "gpuslice_team_held_gpus{team=\"vision\",queue=\"training\"} 2.000\n",
                           "gpuslice_team_limit_gpus{team=\"vision\",queue=\"training\"} 3.000\n",
                           "gpuslice_team_borrowed_gpus{team=\"bygroup\",queue=\"training\"} 1.000\n",
                           "gpuslice_team_fair_share_rank{team=\"vision\"} 1\n",
                           "# TYPE gpuslice_team_usage_gpu_seconds gauge\n"})
    EXPECT_NE(metrics->find(line), std::string::npos) << line << *metrics;
  EXPECT_EQ(metrics->find("gpuslice_team_limit_gpus{team=\"bygroup\""), std::string::npos) << "no limit: no sample";
  // 2 + 8 guaranteed on a cluster of 8 GPUs: said, not refused.
  ASSERT_EQ((*t)["notes"].size(), 1u) << t->dump();
  EXPECT_NE((*t)["notes"][0].get<std::string>().find("more than the 8"), std::string::npos);

  std::string out;
  ASSERT_EQ(h.Cli({"teams"}, &out), 0) << out;
  EXPECT_NE(out.find("GUARANTEED"), std::string::npos) << out;
  EXPECT_NE(out.find("USAGE(GPU-h)"), std::string::npos) << out;
  EXPECT_NE(out.find("vision"), std::string::npos) << out;
  EXPECT_NE(out.find("note: queue 'training'"), std::string::npos) << out;
  ASSERT_EQ(h.Cli({"cancel", std::to_string(a)}, &out), 0) << out;
  ASSERT_EQ(h.Cli({"cancel", std::to_string(b)}, &out), 0) << out;
  h.WaitJob(a, Ended);
  h.WaitJob(b, Ended);
}

TEST(TeamsE2E, WithoutTeamsNamingOneIsRefusedWithTheField) {
  DaemonHarness h("noteams", QueuesConfig());
  h.Start();
  std::string out;
  EXPECT_NE(h.Cli({"submit", "--team", "vision", "--", "true"}, &out), 0);
  EXPECT_NE(out.find("field 'team': value 'vision': this site has no teams"), std::string::npos) << out;
  ASSERT_EQ(h.Cli({"teams"}, &out), 0) << out;
  EXPECT_NE(out.find("no teams"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpuslice::testing_e2e
