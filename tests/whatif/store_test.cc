// The what-if from a daemon's own store: an in-process daemon (fake devices on an injected
// clock, fake launcher, a real SQLite store) runs a scripted morning; then the history read
// back from that store, the scenarios replayed on it, and GET /v1/whatif on the same daemon.
//   00:00-00:20  notebook A (interactive, 250m) busy at 50%, then idle: the daemon warns at
//                00:50 and reclaims at 01:00 (30 min window + 10 min grace)
//   00:00-00:40  notebook B busy 10 min, idle 20 min, busy 10 min, then it exits
//   00:00-02:00  training T, one whole GPU at 90%
//   00:00-03:00  inference I1 on a whole GPU at 20%, 6 GiB used: right-sizing puts it on a 1g.10gb
//   00:00-02:00  inference I2 on a MIG instance whose utilisation the driver cannot give:
//                unknown all along (never idle, never busy, never reclaimed)
// The daemon samples every 10 s and stores one point a minute, so a figure may be off by a
// point of one job.
#include <unistd.h>

#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/daemon.h"
#include "devices/fake.h"
#include "exec/fake_launcher.h"
#include "store/store.h"
#include "whatif/command.h"
#include "whatif/run.h"
#include "whatif/store_history.h"

namespace gpuslice::whatif {
namespace {

using Json = nlohmann::json;
constexpr Micros kT0 = 1796083200LL * kSecond;  // 2026-12-01T00:00:00Z

constexpr const char* kConfig = R"(
default_queue = "interactive"
[queues.interactive]
kinds = ["shared"]
default_gpu = "250m"
time_limit = "8h"
idle = { enabled = true, threshold = 5, window = "30m", grace = "10m", action = "reclaim" }
[queues.training]
kinds = ["whole"]
[queues.inference]
kinds = ["whole", "mig"]
default_kind = "whole"
)";

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("whatif_store_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    config_ = *sched::ParseConfig(kConfig, "test.toml");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<daemon::Daemon> NewDaemon() {
    daemon::DaemonOptions o;
    o.state_dir = dir_.string();
    o.simulated = true;
    o.grace = kSecond;
    o.sample_interval = 10 * kSecond;
    o.downsample_window = kMinute;
    auto backend = devices::FakeBackend::Create("4xH100-80GB", [this] { return now_; });
    fake_ = backend->get();
    auto store = store::OpenSqliteStore(dir_.string(), store::Sync::kProcess);
    EXPECT_TRUE(store.ok());
    auto d = std::make_unique<daemon::Daemon>(config_, o, std::move(store).value(), std::move(backend).value(),
                                              std::make_unique<exec::FakeLauncherRef>(&launcher_), [this] { return now_; });
    EXPECT_TRUE(d->Start().ok());
    return d;
  }
  struct Run {
    std::uint64_t id = 0;
    int pid = 0;
    int device = 0;
    std::string uuid;  // a MIG slice's instance
  };
  Run Submit(daemon::Daemon& d, Json body) {
    body["argv"] = {"sleep", "100000"};
    auto r = d.Submit(me_, body);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    Run run;
    run.id = (*r)["job"]["id"].get<std::uint64_t>();
    return run;
  }
  // After the job started: its pid and device.
  void Started(daemon::Daemon& d, Run& run) {
    const Json job = (*d.GetJob(JobId(run.id)))["job"];
    ASSERT_EQ(job["state"], "running") << job.dump();
    run.pid = job["pid"].get<int>();
    const Json slices = d.Slices();
    for (const auto& s : slices["slices"]) {
      if (s["job"].get<std::uint64_t>() == run.id) run.device = s["devices"][0].get<int>();
    }
    // A MIG slice's process runs on the instance named by the job's CUDA_VISIBLE_DEVICES.
    for (const auto& spec : launcher_.launches()) {
      bool ours = false;
      for (const auto& [k, v] : spec.env) ours = ours || (k == "GPUSLICE_JOB_ID" && v == std::to_string(run.id));
      for (const auto& [k, v] : spec.env) {
        if (ours && k == "CUDA_VISIBLE_DEVICES" && v.rfind("MIG-", 0) == 0) run.uuid = v;
      }
    }
  }
  // What each device runs now: (run, sm permille, memory) per job.
  void Set(std::vector<std::tuple<const Run*, devices::Permille, Bytes>> procs) {
    std::map<int, devices::FakeStep> steps;
    for (const auto& [run, sm, mem] : procs) {
      devices::FakeProcess p;
      p.pid = run->pid;
      p.memory = mem;
      p.sm_util = sm;
      p.mem_util = sm;
      p.mig_uuid = run->uuid;
      devices::FakeStep& s = steps[run->device];
      s.processes.push_back(p);
      if (run->uuid.empty()) s.gpu_util = std::min<devices::Permille>(1000, s.gpu_util + sm);
    }
    for (int dev = 0; dev < 4; ++dev) fake_->SetState(DeviceIndex(static_cast<std::uint32_t>(dev)), steps[dev]);
  }
  void RunUntil(daemon::Daemon& d, Micros t) {
    while (now_ < t) {
      now_ += 10 * kSecond;
      d.Step();
    }
  }
  std::string State(daemon::Daemon& d, std::uint64_t id) { return (*d.GetJob(JobId(id)))["job"]["state"].get<std::string>(); }

  std::filesystem::path dir_;
  sched::Config config_;
  Micros now_ = kT0;
  devices::FakeBackend* fake_ = nullptr;
  exec::FakeLauncher launcher_;
  daemon::Caller me_{static_cast<std::int64_t>(geteuid()), static_cast<std::int64_t>(getegid())};
};

const ScenarioResult& Named(const std::vector<ScenarioResult>& rs, const std::string& name) {
  for (const ScenarioResult& r : rs) {
    if (r.name == name) return r;
  }
  ADD_FAILURE() << "no scenario " << name;
  return rs.front();
}
double Hours(MilliUs v) { return static_cast<double>(v) / kMilliUsPerGpuHour; }

TEST_F(StoreTest, ScriptedMorningReplaysFromTheStoreWithKnownAnswers) {
  auto d = NewDaemon();
  Run a = Submit(*d, {{"queue", "interactive"}});
  Run b = Submit(*d, {{"queue", "interactive"}});
  Run t = Submit(*d, {{"queue", "training"}, {"gpus", 1}});
  Run i1 = Submit(*d, {{"queue", "inference"}, {"kind", "whole"}});
  Run i2 = Submit(*d, {{"queue", "inference"}, {"kind", "mig"}, {"mem", "10GiB"}});
  RunUntil(*d, kT0 + 10 * kSecond);  // the MIG layout is made, I2 starts
  for (Run* r : {&a, &b, &t, &i1, &i2}) Started(*d, *r);
  ASSERT_FALSE(i2.uuid.empty());
  fake_->SetMigUtilSupported(DeviceIndex(static_cast<std::uint32_t>(i2.device)), false);
  auto phase = [&](devices::Permille a_sm, devices::Permille b_sm, bool b_there, bool t_there, bool i1_there, bool i2_there) {
    std::vector<std::tuple<const Run*, devices::Permille, Bytes>> p = {{&a, a_sm, 2 * kGiB}};
    if (b_there) p.push_back({&b, b_sm, 2 * kGiB});
    if (t_there) p.push_back({&t, 900, 40 * kGiB});
    if (i1_there) p.push_back({&i1, 200, 6 * kGiB});
    if (i2_there) p.push_back({&i2, 500, 8 * kGiB});
    Set(p);
  };
  phase(500, 500, true, true, true, true);
  RunUntil(*d, kT0 + 10 * kMinute);
  phase(500, 0, true, true, true, true);
  RunUntil(*d, kT0 + 20 * kMinute);
  phase(0, 0, true, true, true, true);
  RunUntil(*d, kT0 + 30 * kMinute);
  phase(0, 500, true, true, true, true);
  RunUntil(*d, kT0 + 40 * kMinute);
  launcher_.Exit(b.pid, 0);
  phase(0, 0, false, true, true, true);
  RunUntil(*d, kT0 + 70 * kMinute);
  EXPECT_EQ(State(*d, a.id), "reclaimed");
  phase(0, 0, false, true, true, true);
  RunUntil(*d, kT0 + 2 * kHour);
  launcher_.Exit(t.pid, 0);
  launcher_.Exit(i2.pid, 0);
  phase(0, 0, false, false, true, false);
  RunUntil(*d, kT0 + 3 * kHour);
  launcher_.Exit(i1.pid, 0);
  Set({});
  RunUntil(*d, kT0 + 4 * kHour);

  // The history, read from the daemon's SQLite store.
  auto reader = store::OpenSqliteReader(dir_.string());
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  StoreHistoryOptions so;
  so.period = {kT0, kT0 + 4 * kHour};
  so.config = config_;
  so.nodes = *NodesFromSpec("1x4:H100-80GB");
  auto h = HistoryFromStore(**reader, so);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->jobs.size(), 5u);
  std::map<std::string, const HistoryJob*> by_id;
  for (const HistoryJob& j : h->jobs) by_id[j.job.id] = &j;
  const HistoryJob& ha = *by_id.at(std::to_string(a.id));
  EXPECT_EQ(ha.ended, RecordedEnd::kIdleReclaimed);
  EXPECT_EQ(ha.job.kind, sched::SliceKind::kShared);
  EXPECT_EQ(ha.held_milli, 250);
  // Busy 20 min, idle the rest of its hour (to within a point; the first sample came before
  // the script set the device, the last after the reclaim).
  const sim::ActivityTotals at = sim::Integrate(ha.job.activity, 0, ha.job.duration);
  EXPECT_NEAR(static_cast<double>(at.active), 20.0 * kMinute, kMinute) << sim::FormatActivity(ha.job.activity);
  EXPECT_NEAR(static_cast<double>(at.idle), 40.0 * kMinute, kMinute) << sim::FormatActivity(ha.job.activity);
  EXPECT_NEAR(static_cast<double>(ha.job.duration), 60.0 * kMinute, kMinute);
  // 50% of the device on a 250m share is its whole share: the level saturates at 100%.
  EXPECT_EQ(sim::PeakActivePermille(ha.job.activity), 1000);
  EXPECT_EQ(ha.job.activity.back().state == sim::RunState::kIdle ? ha.job.activity.back().state
                                                                 : ha.job.activity.end()[-2].state,
            sim::RunState::kIdle);
  const HistoryJob& hb = *by_id.at(std::to_string(b.id));
  EXPECT_EQ(hb.ended, RecordedEnd::kFinished);
  const sim::ActivityTotals bt = sim::Integrate(hb.job.activity, 0, hb.job.duration);
  EXPECT_NEAR(static_cast<double>(bt.active), 20.0 * kMinute, kMinute) << sim::FormatActivity(hb.job.activity);
  EXPECT_NEAR(static_cast<double>(bt.idle), 20.0 * kMinute, kMinute) << sim::FormatActivity(hb.job.activity);
  const HistoryJob& hi1 = *by_id.at(std::to_string(i1.id));
  EXPECT_EQ(hi1.memory_peak, 6 * kGiB);
  EXPECT_EQ(sim::PeakActivePermille(hi1.job.activity), 200);
  const HistoryJob& hi2 = *by_id.at(std::to_string(i2.id));
  EXPECT_EQ(hi2.job.kind, sched::SliceKind::kMig);
  EXPECT_EQ(hi2.memory_peak, 8 * kGiB);
  const sim::ActivityTotals it = sim::Integrate(hi2.job.activity, 0, hi2.job.duration);
  EXPECT_EQ(it.active + it.idle, 0) << sim::FormatActivity(hi2.job.activity);  // never measured: unknown all along

  RunOptions o;
  auto rs = RunScenarios(*h, DefaultSpec(), o);
  ASSERT_TRUE(rs.ok()) << rs.status().ToString();
  const ScenarioResult& base = Named(*rs, "as-recorded");
  // As recorded: the notebook the daemon reclaimed is cut, at the same point.
  EXPECT_EQ(base.cut_reclaimed, 1);
  ASSERT_EQ(base.cut_list.size(), 1u);
  EXPECT_EQ(base.cut_list[0].id, std::to_string(a.id));
  EXPECT_NEAR(static_cast<double>(base.cut_list[0].held_before), 60.0 * kMinute, kMinute);
  // Held as the daemon held it: A 1 h and B 40 min of 250m, T 2 h, I1 3 h, I2 2 h of a 1g instance.
  const double mig_share = static_cast<double>(MilliGpu{1000} / 7) / 1000;  // compute share of a 1g
  EXPECT_NEAR(Hours(base.held), 0.25 * (1 + 40.0 / 60) + 2 + 3 + 2 * mig_share, 0.02);
  // I2 was never measured: its 2 h are unknown (never idle, never busy), and it is the one
  // unmeasured job.
  EXPECT_NEAR(Hours(base.unknown), 2 * mig_share, 0.01);
  EXPECT_EQ(base.unmeasured_jobs, 1);
  EXPECT_NEAR(Hours(base.idle), 0.25 * (40 + 20) / 60.0, 0.01);

  // 15 min window (+ the configured 10 min grace): A is cut at 45 min instead of 60, B's
  // 20 min idle stretch is shorter than 25 min and is not.
  const ScenarioResult& r15 = Named(*rs, "reclaim-15m");
  EXPECT_EQ(r15.cut_reclaimed, 1);
  EXPECT_NEAR(Hours(r15.given_back), 0.25 * 15 / 60.0, 0.01);
  // A 1 h window: A, had it not been reclaimed, stays idle (the idle tail assumption) and is
  // cut 30 min later: it holds more.
  const ScenarioResult& r60 = Named(*rs, "reclaim-1h");
  EXPECT_NEAR(Hours(r60.given_back), -0.25 * 30 / 60.0, 0.01);
  // Right-sizing: I1 (6 GiB peak) goes on a 1g.10gb; I2 already is a MIG instance sized by
  // its request and is measured in memory only: it is resized to its peak as well.
  const ScenarioResult& mig = Named(*rs, "inference-mig");
  EXPECT_EQ(mig.resized, 2);
  EXPECT_NEAR(Hours(mig.given_back), 3 * (1 - mig_share), 0.02);
  // I1 was busy at 20% of a GPU: more than a 1g's compute share. Its used hours are capped
  // by the share it now holds, and it is counted as slower.
  EXPECT_EQ(mig.slower, 1);
  for (const ScenarioResult& r : *rs) EXPECT_EQ(r.unmeasured_jobs, 1) << r.name;

  // GET /v1/whatif on the daemon: the same figures from the same store.
  auto api = d->Whatif({{"from", "2026-12-01"}, {"to", "2026-12-01T04:00"}});
  ASSERT_TRUE(api.ok()) << api.status().ToString();
  ASSERT_EQ((*api)["scenarios"].size(), rs->size());
  for (std::size_t k = 0; k < rs->size(); ++k) {
    const Json& s = (*api)["scenarios"][k];
    EXPECT_EQ(s["name"], (*rs)[k].name);
    EXPECT_NEAR(s["held_gpu_hours"].get<double>(), Hours((*rs)[k].held), 0.001) << (*rs)[k].name;
    EXPECT_EQ(s["cut"]["sessions"], (*rs)[k].cut) << (*rs)[k].name;
  }
  EXPECT_EQ((*api)["gpus"], 4);
  EXPECT_FALSE((*api)["headlines"].empty());
  EXPECT_THAT((*api)["headlines"][0].get<std::string>(), ::testing::HasSubstr("instead of 30m configured"));
  // Cached: asked again, the same answer (computed_at unchanged) without a new replay.
  now_ += kMinute;
  auto again = d->Whatif({{"from", "2026-12-01"}, {"to", "2026-12-01T04:00"}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)["computed_at"], (*api)["computed_at"]);
  // Bad queries name the parameter and value; a period over 31 days is refused.
  auto bad = d->Whatif({{"since", "7x"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("'7x'"));
  auto unknown = d->Whatif({{"by", "user"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), ::testing::HasSubstr("query 'by': unknown parameter"));
  auto long_period = d->Whatif({{"since", "90d"}});
  ASSERT_FALSE(long_period.ok());
  EXPECT_THAT(long_period.status().message(), ::testing::HasSubstr("longer than the 31d"));
}

}  // namespace
}  // namespace gpuslice::whatif
