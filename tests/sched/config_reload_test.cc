// Config reloads: the canonical TOML a reload is journaled as (FormatConfig), the config's
// version, the shipped conffile, and the scheduler's rules for a ConfigReload (events.h): new
// queues take jobs, changed limits apply to the next decisions, a removed queue's jobs finish
// under its last settings. SchedHarness checks the invariants after every event.
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/config_format.h"
#include "sched/scheduler.h"
#include "testing/builders.h"
#include "testing/sched_harness.h"

namespace gpuslice::sched {
namespace {

using ::gpuslice::testing::Only;
using ::gpuslice::testing::SchedHarness;
using ::testing::HasSubstr;
using ::testing::SizeIs;

Config Parsed(std::string_view toml) {
  auto c = ParseConfig(toml, "test.toml");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : DefaultConfig();
}

// ---------------------------------------------------------------- FormatConfig

TEST(ConfigFormatTest, TheBuiltInConfigReadsBackEqual) {
  const Config c = DefaultConfig();
  auto back = ParseConfig(FormatConfig(c), "formatted");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << FormatConfig(c);
  EXPECT_EQ(*back, c);
}

// Values no built-in has: odd units, a quoted name, every optional signal, caps, on-demand.
TEST(ConfigFormatTest, EveryKindOfValueReadsBackEqual) {
  const Config c = Parsed(R"toml(
default_queue = "gpu small"
admin_group = "ops"
[mig]
enabled = false
drain = "preempt"
[queues."gpu small"]
kinds = ["mps", "shared"]
default_gpu = "0.125"
default_memory = "1536MiB"
priority = -5
time_limit = "90m"
warn_before = "1500ms"
user_max_gpu = "1.5"
user_max_jobs = 3
placement = "spread"
preemptible = true
reserve_after = "0"
[queues."gpu small".idle]
enabled = true
threshold = 0
window = "45s"
grace = "0"
signals = ["processes", "jupyter", "memory"]
action = "reclaim"
busy_is_active = false
busy_max = "3h"
report_stale = "2m"
reclaim = "on-demand"
[queues.training]
max_duration = "36h"
default_memory = "1048577"
)toml");
  const std::string text = FormatConfig(c);
  auto back = ParseConfig(text, "formatted");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_EQ(*back, c) << text;
  EXPECT_THAT(text, HasSubstr("[queues.'gpu small']"));  // a name TOML must quote
}

// The memory set aside per GPU ([memory], per model): a reload journals it and the version
// follows it; a config without overrides writes no [memory] table.
TEST(ConfigFormatTest, MemoryReservesReadBackEqual) {
  EXPECT_THAT(FormatConfig(DefaultConfig()), ::testing::Not(HasSubstr("memory]")));
  const Config c = Parsed(R"toml(
[memory]
context_reserve = "300MiB"
[memory.models.H100-80GB]
driver_reserved = "1536MiB"
[memory.models.A100-40GB]
context_reserve = "0"
)toml");
  const std::string text = FormatConfig(c);
  auto back = ParseConfig(text, "formatted");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_EQ(*back, c) << text;
  EXPECT_EQ(back->memory.models.at("A100-40GB").context_reserve, 0);
  EXPECT_FALSE(back->memory.all.driver_reserved.has_value()) << text;
  EXPECT_NE(ConfigVersion(c), ConfigVersion(DefaultConfig()));
}

TEST(ConfigFormatTest, TheVersionFollowsEveryValue) {
  const Config a = DefaultConfig();
  Config b = a;
  EXPECT_EQ(ConfigVersion(a), ConfigVersion(b));
  EXPECT_THAT(ConfigVersion(a), ::testing::MatchesRegex("c-[0-9a-f]{16}"));
  b.queues[1].idle.grace += 1;
  EXPECT_NE(ConfigVersion(a), ConfigVersion(b));
}

TEST(ConfigFormatTest, DescribeNamesEveryQueueAndItsLimits) {
  const std::vector<std::string> lines = DescribeConfig(DefaultConfig());
  ASSERT_THAT(lines, SizeIs(4));  // three queues, then the rest
  EXPECT_THAT(lines[1], HasSubstr("interactive: kinds shared,mps (default shared 250m)"));
  EXPECT_THAT(lines[1], HasSubstr("time limit 8h"));
  EXPECT_THAT(lines[1], HasSubstr("idle: reclaim after 30m + 10m grace"));
  EXPECT_THAT(lines[2], HasSubstr("training: kinds whole (default whole x1)"));
  EXPECT_THAT(lines[2], HasSubstr("idle: report after 1h"));
  EXPECT_THAT(lines[3], HasSubstr("default queue interactive"));
}

TEST(ConfigFormatTest, CompareQueuesNamesAddedRemovedAndChanged) {
  Config after = DefaultConfig();
  after.queues.erase(after.queues.begin());  // inference
  after.queues[0].priority = 11;             // interactive
  QueueConfig extra = after.queues[0];
  extra.name = "zeta";
  after.queues.push_back(extra);
  const QueueChanges c = CompareQueues(DefaultConfig(), after);
  EXPECT_EQ(c.removed, std::vector<std::string>{"inference"});
  EXPECT_EQ(c.added, std::vector<std::string>{"zeta"});
  EXPECT_EQ(c.changed, std::vector<std::string>{"interactive"});
}

// The package's /etc/gpuslice/gpuslice.toml holds the documented defaults: the built-in config.
TEST(ConfigFormatTest, TheShippedConffileIsTheBuiltInConfig) {
  const std::string path = std::string(GPUSLICE_SOURCE_DIR) + "/packaging/gpuslice.toml";
  auto c = LoadConfigFile(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c, DefaultConfig()) << "packaging/gpuslice.toml and DefaultConfig() differ:\n"
                                 << FormatConfig(*c) << "\nvs\n" << FormatConfig(DefaultConfig());
}

// ---------------------------------------------------------------- ConfigReload

class ReloadTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_EQ(h_.violation(), ""); }
  std::vector<Decision> Reload(Config c) { return h_.Feed(ConfigReload{0, std::move(c)}); }
  const JobView& JobOf(JobId id) { return h_.scheduler().jobs().at(id); }
  SchedHarness h_;
};

TEST_F(ReloadTest, AnAddedQueueTakesJobsFromTheReloadOn) {
  h_.AddHost("2xH100-80GB");
  auto before = Only<Reject>(h_.Submit("debug gpu=100m"));
  ASSERT_THAT(before, SizeIs(1));
  EXPECT_THAT(before[0].status.message(), HasSubstr("queue 'debug' does not exist"));
  Config c = DefaultConfig();
  QueueConfig debug = *c.FindQueue("interactive");
  debug.name = "debug";
  c.queues.push_back(debug);
  Reload(c);
  EXPECT_THAT(Only<StartSlice>(h_.Submit("debug gpu=100m")), SizeIs(1));
  EXPECT_EQ(h_.scheduler().config(), c);
}

TEST_F(ReloadTest, ARaisedUserCapStartsTheJobsItHeldBack) {
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) q.user_max_jobs = 1;
  SchedHarness h(c);
  h.AddHost("2xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h.Submit("interactive gpu=100m")), SizeIs(1));
  ASSERT_THAT(Only<StartSlice>(h.Submit("interactive gpu=100m")), SizeIs(0));  // capped
  for (QueueConfig& q : c.queues) q.user_max_jobs = 2;
  auto started = Only<StartSlice>(h.Feed(ConfigReload{0, c}));
  ASSERT_THAT(started, SizeIs(1));
  EXPECT_EQ(started[0].job, JobId(2));
  // And lowered again: the third waits (running jobs are never stopped by a reload).
  for (QueueConfig& q : c.queues) q.user_max_jobs = 1;
  EXPECT_THAT(h.Feed(ConfigReload{0, c}), SizeIs(0));
  EXPECT_THAT(Only<StartSlice>(h.Submit("interactive gpu=100m")), SizeIs(0));
  EXPECT_EQ(h.scheduler().jobs().at(JobId(2)).state, JobState::kRunning);
  EXPECT_EQ(h.violation(), "");
}

TEST_F(ReloadTest, ANewPriorityReordersTheWaitingJobs) {
  h_.AddHost("1xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h_.Submit("training gpus=1")), SizeIs(1));  // the device is taken
  h_.Submit("inference kind=whole gpus=1");  // priority 20
  h_.Submit("training gpus=1");              // priority 0
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) {
    if (q.name == "training") q.priority = 50;
  }
  Reload(c);
  EXPECT_EQ(h_.scheduler().Pending(), (std::vector<JobId>{JobId(3), JobId(2)}));
  auto next = Only<StartSlice>(h_.Finish(JobId(1)));
  ASSERT_THAT(next, SizeIs(1));
  EXPECT_EQ(next[0].job, JobId(3));
}

// A removed queue takes no new job; its running job runs on and its waiting job still starts,
// both under the queue's last settings (here its time limit and idle policy).
TEST_F(ReloadTest, ARemovedQueuesJobsFinishUnderItsLastSettings) {
  h_.AddHost("1xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h_.Submit("training gpus=1")), SizeIs(1));
  ASSERT_THAT(Only<StartSlice>(h_.Submit("training gpus=1")), SizeIs(0));
  Config c = DefaultConfig();
  c.queues.erase(c.queues.begin() + 2);  // training
  ASSERT_EQ(c.FindQueue("training"), nullptr);
  EXPECT_THAT(Only<Stop>(Reload(c)), SizeIs(0));
  EXPECT_EQ(JobOf(JobId(1)).state, JobState::kRunning);
  ASSERT_NE(h_.scheduler().QueueOf(JobId(2)), nullptr);
  EXPECT_EQ(h_.scheduler().QueueOf(JobId(2))->max_duration, 7 * 24 * kHour);
  auto rejected = Only<Reject>(h_.Submit("training gpus=1"));
  ASSERT_THAT(rejected, SizeIs(1));
  EXPECT_THAT(rejected[0].status.message(), HasSubstr("queue 'training' does not exist"));
  auto next = Only<StartSlice>(h_.Finish(JobId(1)));
  ASSERT_THAT(next, SizeIs(1));
  EXPECT_EQ(next[0].job, JobId(2));
  EXPECT_EQ(next[0].deadline, h_.now() + 7 * 24 * kHour);  // the removed queue's max_duration
}

// A changed idle policy applies to running slices at the next tick: a window cut from 30m to
// 10m warns a slice idle for 20m at once.
TEST_F(ReloadTest, ANewIdleWindowAppliesToRunningSlices) {
  h_.AddHost("1xH100-80GB");
  auto s = Only<StartSlice>(h_.Submit("interactive gpu=250m"));
  ASSERT_THAT(s, SizeIs(1));
  h_.Feed(Sample{0, {SliceSample{s[0].slice, 0, 0, 1}}});
  EXPECT_THAT(Only<Warn>(h_.Advance(20 * kMinute)), SizeIs(0));
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) {
    if (q.name == "interactive") q.idle.window = 10 * kMinute;
  }
  Reload(c);
  auto warned = Only<Warn>(h_.Advance(kSecond));
  ASSERT_THAT(warned, SizeIs(1));
  EXPECT_EQ(warned[0].reason, WarnReason::kIdle);
}

// Pending jobs keep the shape they were resolved to, but get the new time limit when they start.
TEST_F(ReloadTest, AWaitingJobStartsWithTheNewTimeLimit) {
  h_.AddHost("1xH100-80GB");
  ASSERT_THAT(Only<StartSlice>(h_.Submit("training gpus=1")), SizeIs(1));
  h_.Submit("training gpus=1");
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) {
    if (q.name == "training") q.max_duration = 2 * kHour;
  }
  Reload(c);
  auto next = Only<StartSlice>(h_.Finish(JobId(1)));
  ASSERT_THAT(next, SizeIs(1));
  EXPECT_EQ(next[0].deadline, h_.now() + 2 * kHour);
}

// The same events with a reload in the middle give the same decisions, bit for bit.
TEST_F(ReloadTest, ReloadsAreDeterministic) {
  auto run = [] {
    SchedHarness h;
    h.AddHost("2xH100-80GB");
    for (int i = 0; i < 6; ++i) h.Submit("interactive gpu=300m");
    Config c = DefaultConfig();
    for (QueueConfig& q : c.queues) q.placement = "spread";
    h.Feed(ConfigReload{0, c});
    for (int i = 0; i < 6; ++i) h.Submit("interactive gpu=300m");
    h.Finish(JobId(1));
    EXPECT_EQ(h.violation(), "");
    return h.log();
  };
  EXPECT_EQ(run(), run());
}

}  // namespace
}  // namespace gpuslice::sched
