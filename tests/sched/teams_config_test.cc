// [teams] in the config: what is read, what is refused (naming file, key and value), and the
// canonical text reading back to the same config.
#include <string>

#include <gtest/gtest.h>

#include "sched/config.h"
#include "sched/config_format.h"

namespace gpuslice::sched {
namespace {

constexpr const char* kTeams = R"(
[teams]
half_life = "3d"
defaults = { carol = "vision" }

[teams.vision]
members = ["alice", "carol", "@vision-lab"]
guarantee = { training = 4, interactive = "1.5" }
limit = { training = 6 }
weight = 2

[teams.nlp]
members = ["bob", "carol"]
guarantee = { training = "2" }
)";

TEST(TeamsConfig, ReadsMembersGuaranteesLimitsAndDefaults) {
  auto c = ParseConfig(kTeams, "gpuslice.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const TeamsConfig& t = c->teams;
  ASSERT_EQ(t.teams.size(), 2u);
  EXPECT_EQ(t.teams[0].name, "nlp") << "sorted by name";
  const TeamConfig* vision = t.Find("vision");
  ASSERT_NE(vision, nullptr);
  EXPECT_EQ(vision->users, (std::vector<std::string>{"alice", "carol"}));
  EXPECT_EQ(vision->groups, std::vector<std::string>{"vision-lab"});
  EXPECT_EQ(vision->GuaranteeIn("training"), 4000);
  EXPECT_EQ(vision->GuaranteeIn("interactive"), 1500);
  EXPECT_EQ(vision->GuaranteeIn("inference"), 0);
  EXPECT_EQ(vision->LimitIn("training"), 6000);
  EXPECT_EQ(vision->LimitIn("interactive"), 0) << "no limit";
  EXPECT_EQ(vision->weight, 2);
  EXPECT_EQ(t.Find("nlp")->weight, 1);
  EXPECT_EQ(t.half_life, 3 * 24 * kHour);
  // carol is in both: her default names one; bob is in one; dave in none.
  EXPECT_EQ(t.DefaultFor("carol")->name, "vision");
  EXPECT_EQ(t.DefaultFor("bob")->name, "nlp");
  EXPECT_EQ(t.DefaultFor("alice")->name, "vision");
  EXPECT_EQ(t.DefaultFor("dave"), nullptr);
}

TEST(TeamsConfig, WithoutTeamsNothingChanges) {
  auto c = ParseConfig("", "gpuslice.toml");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->teams.enabled());
  EXPECT_EQ(FormatConfig(*c).find("teams"), std::string::npos) << "the canonical text (and version) stay as before";
}

TEST(TeamsConfig, CanonicalTextReadsBackEqual) {
  auto c = ParseConfig(kTeams, "gpuslice.toml");
  ASSERT_TRUE(c.ok());
  const std::string text = FormatConfig(*c);
  auto back = ParseConfig(text, "canonical.toml");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_TRUE(*back == *c) << text;
  EXPECT_EQ(FormatConfig(*back), text);
}

struct Bad {
  const char* toml;
  const char* want;  // a part of the error
};

class TeamsConfigBad : public ::testing::TestWithParam<Bad> {};

TEST_P(TeamsConfigBad, IsRefusedNamingKeyAndValue) {
  auto c = ParseConfig(GetParam().toml, "site.toml");
  ASSERT_FALSE(c.ok()) << GetParam().toml;
  const std::string msg(c.status().message());
  EXPECT_NE(msg.find("site.toml"), std::string::npos) << msg;
  EXPECT_NE(msg.find(GetParam().want), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    Table, TeamsConfigBad,
    ::testing::Values(
        Bad{"[teams.a]\nmembers = []\n", "teams.a.members: a team needs at least one user or @group"},
        Bad{"[teams.a]\nmembers = ['alice bob']\n", "'alice bob' is not a user or @group name"},
        Bad{"[teams.a]\nmembers = ['@']\n", "'@' is not a user or @group name"},
        Bad{"[teams.a]\nmembers = 'alice'\n", "teams.a.members = 'alice': expected a list of strings"},
        Bad{"[teams.a]\nmembers = ['alice']\nguarantee = { nosuch = 1 }\n", "teams.a.guarantee.nosuch: no queue 'nosuch'"},
        Bad{"[teams.a]\nmembers = ['alice']\nguarantee = { training = '-1' }\n", "teams.a.guarantee.training = '-1'"},
        Bad{"[teams.a]\nmembers = ['alice']\nguarantee = { training = 'lots' }\n", "teams.a.guarantee.training = 'lots'"},
        Bad{"[teams.a]\nmembers = ['alice']\nguarantee = { training = 4 }\nlimit = { training = 2 }\n",
            "teams.a.limit.training = 2: below its guarantee of 4"},
        Bad{"[teams.a]\nmembers = ['alice']\nweight = 0\n", "teams.a.weight = 0: must be between 1 and 1000"},
        Bad{"[teams.a]\nmembers = ['alice']\ncolour = 'red'\n", "teams.a.colour = 'red': unknown key"},
        Bad{"[teams]\nhalf_life = '0'\n[teams.a]\nmembers = ['alice']\n", "teams.half_life"},
        Bad{"[teams]\nhalf_life = 'soon'\n", "teams.half_life = 'soon'"},
        Bad{"[teams]\ndefaults = { alice = 'b' }\n[teams.a]\nmembers = ['alice']\n", "teams.defaults.alice = 'b': no such team"},
        Bad{"[teams]\ndefaults = { bob = 'a' }\n[teams.a]\nmembers = ['alice']\n",
            "teams.defaults.bob = 'a': the team does not list bob"},
        Bad{"[teams]\nvision = 3\n", "teams.vision = 3: expected a table"},
        Bad{"[teams.'bad name']\nmembers = ['alice']\n", "not a team name"}));

}  // namespace
}  // namespace gpuslice::sched
