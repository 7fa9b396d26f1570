// The history readers and the scenario file: stored points -> activity runs (unknown where no
// point covers), the generic CSV's extra columns, a sacct dump joined with the Slurm agent's
// usage log, the activity text form, and the TOML spec. Bad input names the field and value.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim/activity.h"
#include "slurm/usage_log.h"
#include "whatif/csv_history.h"
#include "whatif/sacct_history.h"
#include "whatif/scenario.h"
#include "whatif/store_history.h"

namespace gpuslice::whatif {
namespace {

using ::testing::HasSubstr;

std::string Runs(const std::vector<sim::ActivityRun>& r) { return sim::FormatActivity(r); }

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("whatif_inputs_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  std::filesystem::path dir_;
};

TEST(Activity, ParsesFormatsAndMerges) {
  auto r = sim::ParseActivity("a30m@40 a30m@20 i2h u5m a1m", 10 * kHour);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Runs(*r), "a1h@30 i2h u5m a1m");  // two busy runs merged, levels weighted by length
  const sim::ActivityTotals t = sim::Integrate(*r, 10 * kMinute, 3 * kHour + 10 * kMinute);
  EXPECT_EQ(t.active, 51 * kMinute);
  EXPECT_EQ(t.idle, 2 * kHour);
  EXPECT_EQ(t.unknown, 5 * kMinute + 4 * kMinute);  // u5m, then past the last run
  EXPECT_EQ(t.active_level_known, 50 * kMinute);
  EXPECT_EQ(sim::NextActive(*r, 70 * kMinute), 3 * kHour + 5 * kMinute);
  EXPECT_EQ(sim::NextActive(*r, 5 * kHour), -1);
  EXPECT_EQ(Runs(sim::RunsFrom(*r, 2 * kHour)), "i1h u5m a1m");
  for (const char* bad : {"x5m", "a", "i5m@3", "a5m@101", "a5m@x", "a-5m"}) {
    auto e = sim::ParseActivity(bad, kHour);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_THAT(e.status().message(), HasSubstr("activity run '")) << bad;
  }
  auto over = sim::ParseActivity("a50m i20m", kHour);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(), HasSubstr("add up to more than 1h"));
}

store::SampleRecord Point(Micros end_s, Micros span_s, Micros known_s, Micros idle_s, int util, Bytes mem = -1) {
  store::SampleRecord p;
  p.time = end_s * kSecond;
  p.subject = "slice/1";
  p.span = span_s * kSecond;
  p.known = known_s * kSecond;
  p.idle = idle_s * kSecond;
  p.util_permille = util;
  p.memory_used = mem;
  return p;
}

TEST(StorePoints, BecomeRunsWithUnknownWhereNothingWasMeasured) {
  // Slice held 0..600 s: four one-minute points, then the daemon was down for 3 minutes, then
  // one point whose utilisation was not measurable, then nothing (the last minute).
  std::vector<store::SampleRecord> points = {
      Point(60, 60, 60, 0, 800, 2 * kGiB),  Point(120, 60, 60, 30, 400),  // half idle: busy part at 800
      Point(180, 60, 60, 60, 0),            Point(240, 60, 60, 60, 0, 3 * kGiB),
      Point(480, 60, 0, 0, -1)};
  const SliceActivity a = ActivityFromPoints(points, 0, 600 * kSecond, kOneGpu);
  EXPECT_EQ(Runs(a.runs), "a1m30s@80 i2m30s u6m");
  EXPECT_EQ(a.memory_peak, 3 * kGiB);
  // A shared slice's points are of the whole device: a 250m slice busy at 20 % of the device
  // is busy at 80 % of its share.
  const SliceActivity s = ActivityFromPoints({Point(60, 60, 60, 0, 200)}, 0, 60 * kSecond, 250);
  EXPECT_EQ(Runs(s.runs), "a1m@80");
  // No points at all: unknown.
  EXPECT_EQ(Runs(ActivityFromPoints({}, 0, kHour, kOneGpu).runs), "u1h");
}

TEST_F(TempDir, CsvHistoryReadsActivityPeakAndEndAndNamesBadValues) {
  const std::string ok = Write("h.csv",
                               "id,submit,duration,gpus,queue,utilisation,activity,memory_peak,ended\n"
                               "nb,0,2h,1,interactive,,a30m@50 i1h30m,4GiB,reclaimed\n"
                               "tr,60,1h,2,training,70,,,\n"
                               "cpu,0,1h,0,training,,,,\n"
                               "q,0,1h,1,training,,,,\n");
  auto nodes = NodesFromSpec("1x4:H100-80GB");
  ASSERT_TRUE(nodes.ok());
  auto h = HistoryFromCsv(ok, *nodes, std::nullopt);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->jobs.size(), 3u);  // the CPU-only row is not replayed
  EXPECT_EQ(Runs(h->jobs[0].job.activity), "a30m@50 i1h30m");
  EXPECT_EQ(h->jobs[0].memory_peak, 4 * kGiB);
  EXPECT_EQ(h->jobs[0].ended, RecordedEnd::kIdleReclaimed);
  EXPECT_EQ(Runs(h->jobs[1].job.activity), "a1h@70");  // a mean utilisation is one run
  EXPECT_EQ(h->jobs[1].held_milli, 2000);
  EXPECT_EQ(Runs(h->jobs[2].job.activity), "u1h");     // nothing known: unknown
  EXPECT_TRUE(CheckHistory(*h).ok());

  for (const auto& [row, want] : std::vector<std::pair<std::string, std::string>>{
           {"nb,0,1h,1,interactive,,a2h,,\n", "column 'activity': value 'a2h' is not valid"},
           {"nb,0,1h,1,interactive,,,4Gx,\n", "column 'memory_peak': value '4Gx'"},
           {"nb,0,1h,1,interactive,,,,gone\n", "column 'ended': value 'gone'"}}) {
    const std::string bad = Write("bad.csv", "id,submit,duration,gpus,queue,utilisation,activity,memory_peak,ended\n" + row);
    auto e = HistoryFromCsv(bad, *nodes, std::nullopt);
    ASSERT_FALSE(e.ok()) << row;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.status().message(), HasSubstr(want));
    EXPECT_THAT(e.status().message(), HasSubstr("bad.csv:2"));
  }
}

TEST_F(TempDir, SacctDumpJoinsTheAgentsUsageLog) {
  // Times are local, as sacct prints them; the usage log's are epoch seconds of the same instants.
  auto epoch = [](const char* local) {
    std::tm tm{};
    strptime(local, "%Y-%m-%dT%H:%M:%S", &tm);
    tm.tm_isdst = -1;
    return static_cast<std::int64_t>(std::mktime(&tm));
  };
  const std::string dump = Write("dump.txt",
      "JobID|User|Partition|Submit|Start|End|State|AllocTRES|Comment\n"
      "10|alice|interactive|2026-12-01T10:00:00|2026-12-01T10:00:00|2026-12-01T11:00:00|CANCELLED by 0|billing=1,cpu=1,gres/shard=2,mem=100M,node=1|gpuslice queue=interactive kind=shared\n"
      "10.batch||||2026-12-01T10:00:00|2026-12-01T11:00:00|CANCELLED||\n"
      "11|bob|training|2026-12-01T10:00:00|2026-12-01T10:05:00|2026-12-01T12:05:00|TIMEOUT|cpu=1,gres/gpu=2,node=1|\n"
      "12|carol|inference|2026-12-01T10:00:00|2026-12-01T10:00:00|2026-12-01T10:30:00|COMPLETED|cpu=1,gres/gpu:3g.40gb=1,gres/gpu=1|\n"
      "13|dan|interactive|2026-12-01T10:10:00|Unknown|Unknown|PENDING|cpu=1,gres/shard=1|\n"
      "14|erin|cpu|2026-12-01T10:00:00|2026-12-01T10:00:00|2026-12-01T10:10:00|COMPLETED|cpu=4,node=1|\n");
  const std::int64_t t10 = epoch("2026-12-01T10:00:00");
  slurm::UsageRecord u;
  u.job_id = "10";
  u.first_seen = (t10 + 60) * kSecond;  // the agent saw it a minute in
  u.last_seen = (t10 + 3600) * kSecond;
  u.activity = *sim::ParseActivity("a10m@20 i49m", kHour);  // 20 % of a GPU on a 250m share: 80 % of it
  u.memory_peak = 3 * kGiB;
  u.reclaimed = "cancel";
  const std::string usage = Write("usage.csv", slurm::UsageRecorder::Header() + slurm::UsageRecorder::Line(u));
  auto nodes = NodesFromSpec("2x4:H100-80GB");
  ASSERT_TRUE(nodes.ok());
  auto h = HistoryFromSacct(dump, usage, *nodes, std::nullopt, SacctOptions{.shards_per_gpu = 8, .read = {}});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->jobs.size(), 3u);
  const HistoryJob& nb = h->jobs[0];
  EXPECT_EQ(nb.job.id, "10");
  EXPECT_EQ(nb.job.kind, sched::SliceKind::kShared);
  EXPECT_EQ(nb.job.request.milli_per_gpu, 250);
  EXPECT_EQ(nb.job.duration, kHour);
  EXPECT_EQ(Runs(nb.job.activity), "u1m a10m@80 i49m");
  EXPECT_EQ(nb.memory_peak, 3 * kGiB);
  EXPECT_EQ(nb.ended, RecordedEnd::kIdleReclaimed);
  const HistoryJob& tr = h->jobs[1];
  EXPECT_EQ(tr.job.request.num_gpus, 2);
  EXPECT_EQ(tr.ended, RecordedEnd::kTimeLimit);
  EXPECT_EQ(tr.job.submit + 5 * kMinute, t10 * kSecond + 5 * kMinute);
  EXPECT_EQ(Runs(tr.job.activity), "u2h");  // the agent never saw it: unknown
  const HistoryJob& inf = h->jobs[2];
  EXPECT_EQ(inf.job.kind, sched::SliceKind::kMig);
  EXPECT_EQ(inf.job.request.gpu_memory_per_gpu, 40 * kGiB);
  EXPECT_THAT(h->notes, ::testing::Contains(HasSubstr("1 jobs never started")));
  EXPECT_THAT(h->notes, ::testing::Contains(HasSubstr("1 of 3 jobs have utilisation")));
  EXPECT_TRUE(CheckHistory(*h).ok()) << CheckHistory(*h).ToString();

  const std::string bad = Write("bad.txt", "JobID|User|Partition|Submit|Start|End|State|AllocTRES\n"
                                            "1|a|p|2026-12-01 10:00|2026-12-01T10:00:00|2026-12-01T10:10:00|COMPLETED|gres/gpu=1\n");
  auto e = HistoryFromSacct(bad, "", *nodes, std::nullopt);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("bad.txt:2: column 'Submit': value '2026-12-01 10:00'"));
  const std::string no_col = Write("nocol.txt", "JobID|User\n1|a\n");
  EXPECT_THAT(HistoryFromSacct(no_col, "", *nodes, std::nullopt).status().message(), HasSubstr("no column 'Partition'"));
}

TEST_F(TempDir, UsageRecorderWritesOneLinePerJobAsItLeaves) {
  const std::string path = (dir_ / "usage.csv").string();
  slurm::UsageRecorder rec(path);
  using Round = slurm::UsageRecorder::Round;
  const Micros t0 = 1796083200LL * kSecond;
  auto round = [&](Micros at, std::vector<Round> jobs) { ASSERT_TRUE(rec.Observe(t0 + at, jobs).ok()); };
  round(0, {{"7", "alice", "interactive", "gres:shard:2", sched::Activity::kActive, 500, 2 * kGiB}});
  round(15 * kSecond, {{"7", "alice", "interactive", "gres:shard:2", sched::Activity::kActive, 300, 1 * kGiB}});
  round(30 * kSecond, {{"7", "alice", "interactive", "gres:shard:2", sched::Activity::kIdle, 0, 1 * kGiB}});
  round(45 * kSecond, {{"7", "alice", "interactive", "gres:shard:2", sched::Activity::kUnknown, std::nullopt, std::nullopt}});
  rec.MarkReclaimed("7", "cancel");
  round(60 * kSecond, {});  // gone: written
  auto log = slurm::ReadUsageLog(path);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  ASSERT_EQ(log->records.size(), 1u);
  const slurm::UsageRecord& r = log->records[0];
  EXPECT_EQ(r.job_id, "7");
  EXPECT_EQ(r.first_seen, t0);
  EXPECT_EQ(r.last_seen, t0 + 45 * kSecond);
  EXPECT_EQ(Runs(r.activity), "a15s@30 i15s u15s");
  EXPECT_EQ(r.memory_peak, 2 * kGiB);
  EXPECT_EQ(r.reclaimed, "cancel");
  EXPECT_EQ(r.gres, "gres:shard:2");
  // A bad line names its column.
  std::ofstream(path, std::ios::app) << "8,bob,p,,100,50,,,\n";
  auto bad = slurm::ReadUsageLog(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("column 'last_seen': value '50' is before first_seen"));
}

TEST(Spec, DefaultsAndFileAndErrorsNamingKeyAndValue) {
  const WhatifSpec d = DefaultSpec();
  ASSERT_GE(d.scenarios.size(), 8u);
  EXPECT_EQ(d.scenarios.front().name, "as-recorded");
  EXPECT_FALSE(d.scenarios.front().HasCures());

  auto s = ParseSpec(R"(
[verdict]
p95_wait = "10m"
queues = { training = "4h" }
cures = "cure"
[assume]
restart_cost = "2m"
[[scenario]]
name = "cure"
reclaim = { queues = ["interactive"], window = "20m", grace = "0s" }
max_duration = { limit = "12h", resubmit = false }
[[scenario]]
name = "half"
gpus = "-50%"
)", "w.toml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->scenarios.size(), 3u);
  EXPECT_EQ(s->scenarios[0].name, "as-recorded");
  EXPECT_EQ(s->scenarios[1].reclaim->window, 20 * kMinute);
  EXPECT_EQ(s->scenarios[1].reclaim->grace, 0);
  EXPECT_FALSE(s->scenarios[1].max_duration->resubmit);
  EXPECT_EQ(s->scenarios[2].gpus->For(8), -4);
  EXPECT_EQ(s->verdict.Target("training"), 4 * kHour);
  EXPECT_EQ(s->verdict.Target("interactive"), 10 * kMinute);
  EXPECT_EQ(s->assume.restart_cost, 2 * kMinute);
  EXPECT_EQ(VerdictCures(*s).name, "cure");

  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"[[scenario]]\nname = \"x\"\nreclaim = { window = \"5q\" }", "w.toml: scenario.x.reclaim.window = '5q'"},
           {"[[scenario]]\nname = \"x\"\ngpus = \"-100%\"", "scenario.x.gpus = '-100%'"},
           {"[[scenario]]\nname = \"x\"\nfoo = 1", "scenario.x.foo = 1: unknown key"},
           {"[[scenario]]\nname = \"x y\"", "scenario[0].name = 'x y'"},
           {"[[scenario]]\nname = \"x\"\n[[scenario]]\nname = \"x\"", "scenario.x: the name is used twice"},
           {"[verdict]\ncures = \"nope\"", "verdict.cures = 'nope': no scenario of that name"},
           {"[verdict]\nsearch_steps = 99", "verdict.search_steps = 99"},
           {"[[scenario]]\nname = \"as-recorded\"\ngpus = 2", "scenario.as-recorded: is the history as it was"},
           {"bogus = [", "w.toml:1:"}}) {
    auto e = ParseSpec(text, "w.toml");
    ASSERT_FALSE(e.ok()) << text;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(e.status().message(), HasSubstr(want)) << text;
  }
  // A file's cure naming a queue the config lacks is an error at Prepare.
  auto strict = ParseSpec("[[scenario]]\nname = \"x\"\nreclaim = { queues = [\"notebooks\"] }", "w.toml");
  ASSERT_TRUE(strict.ok());
  History h;
  h.config = sched::DefaultConfig();
  h.nodes = *NodesFromSpec("1x1");
  auto p = Prepare(h, strict->scenarios[1], {});
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("scenario.x.reclaim.queues: 'notebooks' is not a queue"));
}

}  // namespace
}  // namespace gpuslice::whatif
