// Config parsing: every kind of bad config is rejected with the file, the key and the value.
#include <fstream>
#include <iterator>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/config.h"

namespace gpuslice::sched {
namespace {

using ::testing::HasSubstr;

TEST(ConfigTest, DefaultsMatchTheDesign) {
  Config c = DefaultConfig();
  ASSERT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c).ToString();
  ASSERT_EQ(c.queues.size(), 3u);
  const QueueConfig* i = c.FindQueue("interactive");
  ASSERT_NE(i, nullptr);
  EXPECT_EQ(i->default_kind, SliceKind::kShared);
  EXPECT_EQ(i->time_limit, 8 * kHour);
  EXPECT_TRUE(i->idle.enabled);
  EXPECT_EQ(i->idle.action, ReclaimAction::kReclaim);
  EXPECT_EQ(i->placement, "gpuslice");  // fragmentation-aware (docs/config.md says why)
  const QueueConfig* t = c.FindQueue("training");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->default_kind, SliceKind::kWhole);
  EXPECT_EQ(t->idle.action, ReclaimAction::kReport);
  EXPECT_GT(t->max_duration, 0);
  const QueueConfig* f = c.FindQueue("inference");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->default_kind, SliceKind::kMig);
  EXPECT_EQ(f->time_limit, 0);
  EXPECT_EQ(f->idle.action, ReclaimAction::kReport);
  EXPECT_EQ(f->placement, "gpuslice");
  EXPECT_EQ(t->placement, "packing");  // whole devices: the indexed packing
  EXPECT_EQ(c.default_queue, "interactive");
}

TEST(ConfigTest, AnAdminGroupNamedInTheFileIsMarkedSoServeChecksIt) {
  auto named = ParseConfig("admin_group = \"ops\"\n", "gpuslice.toml");
  ASSERT_TRUE(named.ok());
  EXPECT_TRUE(named->admin_group_from_file);
  auto dflt = ParseConfig("", "gpuslice.toml");
  ASSERT_TRUE(dflt.ok());
  EXPECT_FALSE(dflt->admin_group_from_file);
  EXPECT_EQ(dflt->admin_group, "gpuslice-admin");
}

TEST(ConfigTest, EmptyFileGivesDefaults) {
  auto c = ParseConfig("", "gpuslice.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c, DefaultConfig());
}

TEST(ConfigTest, OverridingOneKeyKeepsTheBuiltInRest) {
  auto c = ParseConfig(R"(
[queues.interactive]
time_limit = "4h"
reserve_after = "10m"
[queues.batch]
kinds = ["whole", "shared"]
priority = -5
placement = "spread"
user_max_jobs = 3
[queues.batch.idle]
enabled = true
threshold = 20
window = "1h"
grace = "5m"
signals = ["processes"]
)", "gpuslice.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->queues.size(), 2u);  // the file's queues replace the built-in set
  const QueueConfig* i = c->FindQueue("interactive");
  EXPECT_EQ(i->time_limit, 4 * kHour);
  EXPECT_EQ(i->reserve_after, 10 * kMinute);
  EXPECT_TRUE(i->idle.enabled);  // inherited from the built-in interactive queue
  const QueueConfig* b = c->FindQueue("batch");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->default_kind, SliceKind::kWhole);
  EXPECT_TRUE(b->Allows(SliceKind::kShared));
  EXPECT_FALSE(b->Allows(SliceKind::kMig));
  EXPECT_EQ(b->priority, -5);
  EXPECT_EQ(b->placement, "spread");
  EXPECT_EQ(b->user_max_jobs, 3);
  EXPECT_EQ(b->idle.util_threshold_percent, 20);
  EXPECT_EQ(b->idle.window, kHour);
  EXPECT_EQ(b->idle.grace, 5 * kMinute);
  EXPECT_EQ(b->idle.activity, (ActivitySignals{false, false, true}));
}

// examples/gpuslice.toml says it equals the built-in defaults: every value it spells out
// must be the built-in one, and it must spell out every value (a queue named like a built-in
// one inherits the built-in values, so the file is read a second time with its queues renamed,
// starting from a blank queue: a key the file leaves out shows as a difference).
TEST(ConfigTest, ExampleFileEqualsTheBuiltInDefaults) {
  const std::string path = GPUSLICE_SOURCE_DIR "/examples/gpuslice.toml";
  auto c = LoadConfigFile(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // The example names admin_group (so serve would require the group); the values are the defaults.
  EXPECT_TRUE(c->admin_group_from_file);
  c->admin_group_from_file = false;
  EXPECT_EQ(*c, DefaultConfig());

  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string renamed;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t at = text.find("[queues.", i);
    if (at == std::string::npos) {
      renamed += text.substr(i);
      break;
    }
    renamed += text.substr(i, at - i) + "[queues.example_";
    i = at + 8;
  }
  // default_queue names a queue: renamed as well.
  const std::string top = "default_queue = \"interactive\"";
  ASSERT_NE(renamed.find(top), std::string::npos);
  renamed.replace(renamed.find(top), top.size(), "default_queue = \"example_interactive\"");
  auto blank = ParseConfig(renamed, "renamed example");
  ASSERT_TRUE(blank.ok()) << blank.status().ToString();
  const Config builtin = DefaultConfig();
  ASSERT_EQ(blank->queues.size(), builtin.queues.size());
  for (QueueConfig q : blank->queues) {
    ASSERT_TRUE(q.name.starts_with("example_")) << q.name;
    q.name = q.name.substr(8);
    const QueueConfig* b = builtin.FindQueue(q.name);
    ASSERT_NE(b, nullptr) << q.name;
    EXPECT_EQ(q, *b) << "examples/gpuslice.toml leaves out or changes a built-in value of queue " << q.name;
  }
}

TEST(ConfigTest, MissingFileNamesThePath) {
  auto c = LoadConfigFile("/nonexistent/gpuslice.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("/nonexistent/gpuslice.toml"));
}

struct BadConfig {
  const char* what;
  const char* toml;
  const char* error;  // expected substring
};

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, IsRejectedNamingFileKeyAndValue) {
  auto c = ParseConfig(GetParam().toml, "gpuslice.toml");
  ASSERT_FALSE(c.ok()) << GetParam().what;
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("gpuslice.toml")) << c.status().message();
  EXPECT_THAT(c.status().message(), HasSubstr(GetParam().error)) << c.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadConfigTest,
    ::testing::Values(
        BadConfig{"bad unit", "[queues.interactive]\ntime_limit = \"8x\"\n",
                  "queues.interactive.time_limit = '8x'"},
        BadConfig{"bad reserve_after", "[queues.training]\nreserve_after = \"soon\"\n",
                  "queues.training.reserve_after = 'soon'"},
        BadConfig{"bad byte unit", "[queues.interactive]\ndefault_memory = \"10GB/s\"\n",
                  "queues.interactive.default_memory = '10GB/s'"},
        BadConfig{"fraction too fine", "[queues.interactive]\ndefault_gpu = \"0.0001\"\n",
                  "queues.interactive.default_gpu = '0.0001'"},
        BadConfig{"fraction over one", "[queues.interactive]\ndefault_gpu = \"2\"\n",
                  "queues.interactive.default_gpu = '2'"},
        BadConfig{"unknown top-level key", "colour = \"blue\"\n", "colour = 'blue': unknown key"},
        BadConfig{"empty admin group", "admin_group = \"\"\n", "admin_group: '' is empty"},
        BadConfig{"warning as long as the limit", "[queues.interactive]\ntime_limit = \"1h\"\nwarn_before = \"1h\"\n",
                  "queues.interactive.warn_before = '1h': not shorter than the queue's time limit (1h)"},
        BadConfig{"warning longer than max_duration", "[queues.training]\nmax_duration = \"2h\"\nwarn_before = \"3h\"\n",
                  "queues.training.warn_before = '3h'"},
        BadConfig{"unknown queue key", "[queues.interactive]\ntimelimit = \"8h\"\n",
                  "queues.interactive.timelimit = '8h': unknown key"},
        BadConfig{"unknown idle key", "[queues.interactive.idle]\nwindo = \"8h\"\n",
                  "queues.interactive.idle.windo = '8h': unknown key"},
        BadConfig{"unknown mig key", "[mig]\nplanner = true\n", "mig.planner = true: unknown key"},
        BadConfig{"unknown slice kind", "[queues.interactive]\nkinds = [\"shared\", \"gpu\"]\n",
                  "slice kind 'gpu' is unknown"},
        BadConfig{"unknown default kind", "[queues.interactive]\ndefault_kind = \"vgpu\"\n",
                  "queues.interactive.default_kind: slice kind 'vgpu' is unknown"},
        BadConfig{"default kind not allowed",
                  "[queues.interactive]\nkinds = [\"shared\"]\ndefault_kind = \"whole\"\n",
                  "queues.interactive.default_kind = 'whole': not in kinds"},
        BadConfig{"empty kinds", "[queues.interactive]\nkinds = []\n",
                  "queues.interactive.kinds: at least one"},
        BadConfig{"unknown placement policy", "[queues.interactive]\nplacement = \"magic\"\n",
                  "queues.interactive.placement = 'magic': unknown placement policy (known: "},
        BadConfig{"negative duration", "[queues.training]\nmax_duration = \"-5m\"\n",
                  "queues.training.max_duration = '-5m'"},
        BadConfig{"negative count", "[queues.training]\ndefault_gpus = -1\n",
                  "queues.training.default_gpus = -1: must be between 1 and"},
        BadConfig{"negative cap", "[queues.training]\nuser_max_jobs = -2\n",
                  "queues.training.user_max_jobs = -2"},
        BadConfig{"threshold over 100", "[queues.interactive.idle]\nthreshold = 150\n",
                  "queues.interactive.idle.threshold = 150: must be between 0 and 100"},
        BadConfig{"wrong type", "[queues.interactive]\npriority = \"high\"\n",
                  "queues.interactive.priority = 'high': expected an integer"},
        BadConfig{"queue is not a table", "queues = 3\n", "queues = 3: expected a table"},
        BadConfig{"unknown activity signal", "[queues.interactive.idle]\nsignals = [\"temperature\"]\n",
                  "unknown activity signal 'temperature'"},
        BadConfig{"unknown idle action", "[queues.interactive.idle]\naction = \"kill\"\n",
                  "queues.interactive.idle.action: 'kill' is not one of"},
        BadConfig{"unknown drain policy", "[mig]\ndrain = \"now\"\n", "mig.drain: 'now' is not one of"},
        BadConfig{"missing default queue", "default_queue = \"gpu\"\n",
                  "default_queue = 'gpu': no such queue"},
        BadConfig{"default queue removed by the file",
                  "[queues.batch]\nkinds = [\"whole\"]\n",
                  "default_queue = 'interactive': no such queue"},
        BadConfig{"zero idle window", "[queues.interactive.idle]\nwindow = \"0s\"\n",
                  "queues.interactive.idle.window = 0: must be more than zero"},
        BadConfig{"syntax error", "[queues.interactive\n", "gpuslice.toml:1:"},
        // Numeric classes a hostile or careless config comes in (docs/security.md, "Input limits").
        BadConfig{"time limit below a second", "[queues.interactive]\ntime_limit = \"1ms\"\n",
                  "queues.interactive.time_limit = '1ms': duration '1ms': 1ms is less than the minimum 1s"},
        BadConfig{"max duration over 100 years", "[queues.training]\nmax_duration = \"36501d\"\n",
                  "queues.training.max_duration = '36501d': duration '36501d': longer than 100 years"},
        BadConfig{"nan time limit", "[queues.interactive]\ntime_limit = nan\n", "queues.interactive.time_limit = nan"},
        BadConfig{"inf default gpu", "[queues.interactive]\ndefault_gpu = inf\n", "queues.interactive.default_gpu = inf"},
        BadConfig{"bare-number memory of bytes", "[queues.inference]\ndefault_memory = 10\n",
                  "queues.inference.default_memory = 10: memory size '10': 10B is less than the minimum 1MiB"},
        BadConfig{"memory beyond a PiB", "[queues.inference]\ndefault_memory = \"2048TiB\"\n",
                  "queues.inference.default_memory = '2048TiB': memory size '2048TiB': more than 1024TiB"},
        BadConfig{"overflowing gpu cap", "[queues.interactive]\nuser_max_gpu = \"99999999999999999999\"\n",
                  "queues.interactive.user_max_gpu = '99999999999999999999': GPU amount"},
        BadConfig{"huge integer count", "[queues.training]\ndefault_gpus = 9223372036854775807\n",
                  "queues.training.default_gpus = 9223372036854775807: must be between 1 and 1024"}),
    [](const ::testing::TestParamInfo<BadConfig>& info) {
      std::string n = info.param.what;
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST(ConfigFile, ADirectoryIsAnErrorNamingThePathNotTheBuiltInQueues) {
  const std::string dir = ::testing::TempDir();
  auto c = LoadConfigFile(dir);
  ASSERT_FALSE(c.ok()) << "a directory loaded as a config";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("'" + dir + "': is a directory"));
  auto missing = LoadConfigFile(dir + "/no-such.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto dev = LoadConfigFile("/dev/null");
  ASSERT_FALSE(dev.ok()) << "a character device loaded as a config";
  EXPECT_THAT(dev.status().message(), HasSubstr("not a regular file"));
}

TEST(ConfigTest, EffectiveLimitIsTheSmallestSetOne) {
  QueueConfig q;
  q.time_limit = 8 * kHour;
  q.max_duration = 0;
  EXPECT_EQ(q.EffectiveLimit(0), 8 * kHour);
  EXPECT_EQ(q.EffectiveLimit(kHour), kHour);
  q.max_duration = 2 * kHour;
  EXPECT_EQ(q.EffectiveLimit(0), 2 * kHour);
  QueueConfig none;
  EXPECT_EQ(none.EffectiveLimit(0), 0);
}

}  // namespace
}  // namespace gpuslice::sched
