// A scripted day on the simulated host: an in-process daemon (fake devices on the injected
// clock, fake launcher) writing to a real SQLite store, then the report of that day. The
// expected GPU-hours are worked out by hand from the script:
//   00:00-08:00:30  training, 2 whole GPUs at 90%     held 2 x 8h00m30s = 16.0167, used 14.415
//                (it ends inside a stored point's window: the daemon stores the open point)
//   00:00-00:40  interactive notebook, 250m, idle     held 0.25 x 40 min = 0.1667, used 0,
//                (30 min window + 10 min grace, then reclaimed; its 8 h limit would have run
//                to 08:00: idle reclaim returned 0.25 x 7h20 = 1.8333)
//   09:00-11:00  training, 1 GPU at 50%, --time 2h   held 2, used 1, timed out
// Capacity 8 x 24 = 192 GPU-hours. The daemon samples every 10 s, so a figure may be off by
// one sample of one job (at most 2 GPUs x 10 s = 0.0056 GPU-h): the tolerance below.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "daemon/daemon.h"
#include "devices/fake.h"
#include "exec/fake_launcher.h"
#include "report/report.h"
#include "store/store.h"

namespace gpuslice::daemon {
namespace {

constexpr Micros kT0 = 1796083200LL * kSecond;  // 2026-12-01T00:00:00Z
constexpr double kTol = 0.006;


devices::FakeProcess Proc(int pid, devices::Permille sm) {
  devices::FakeProcess p;
  p.pid = pid;
  p.memory = 2 * kGiB;
  p.sm_util = sm;
  return p;
}

class DayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("report_day_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Daemon> NewDaemon() {
    DaemonOptions o;
    o.state_dir = dir_.string();
    o.simulated = true;
    o.grace = kSecond;
    o.sample_interval = 10 * kSecond;
    o.downsample_window = kMinute;
    auto backend = devices::FakeBackend::Create("8xH100-80GB", [this] { return now_; });
    fake_ = backend->get();
    auto store = store::OpenSqliteStore(dir_.string(), store::Sync::kProcess);
    EXPECT_TRUE(store.ok());
    auto d = std::make_unique<Daemon>(sched::DefaultConfig(), o, std::move(store).value(),
                                      std::move(backend).value(), std::make_unique<exec::FakeLauncherRef>(&launcher_),
                                      [this] { return now_; });
    EXPECT_TRUE(d->Start().ok());
    return d;
  }

  struct Run {
    std::uint64_t id = 0;
    int pid = 0;
    std::vector<int> devices;
  };
  Run Submit(Daemon& d, Json body) {
    body["argv"] = {"sleep", "100000"};
    auto r = d.Submit(me_, body);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    Run run;
    run.id = (*r)["job"]["id"].get<std::uint64_t>();
    const Json job = (*d.GetJob(JobId(run.id)))["job"];
    EXPECT_EQ(job["state"], "running") << job.dump();
    run.pid = job["pid"].get<int>();
    const Json all = d.Slices();
    for (const auto& s : all["slices"]) {
      if (s["job"].get<std::uint64_t>() == run.id) run.devices = s["devices"].get<std::vector<int>>();
    }
    return run;
  }
  void Busy(const Run& r, devices::Permille sm) {
    for (int dev : r.devices) {
      devices::FakeStep s;
      s.gpu_util = sm;
      s.processes = {Proc(r.pid, sm)};
      fake_->SetState(DeviceIndex(static_cast<std::uint32_t>(dev)), s);
    }
  }
  void Clear(const Run& r) {
    for (int dev : r.devices) fake_->SetState(DeviceIndex(static_cast<std::uint32_t>(dev)), devices::FakeStep{});
  }
  void RunUntil(Daemon& d, Micros t) {
    while (now_ < t) {
      now_ += 10 * kSecond;
      d.Step();
    }
  }
  std::string State(Daemon& d, std::uint64_t id) {
    return (*d.GetJob(JobId(id)))["job"]["state"].get<std::string>();
  }

  std::filesystem::path dir_;
  Micros now_ = kT0;
  devices::FakeBackend* fake_ = nullptr;
  exec::FakeLauncher launcher_;
  Caller me_{static_cast<std::int64_t>(geteuid()), static_cast<std::int64_t>(getegid())};
};

double H(const Json& j, const char* k) { return j.at(k).get<double>(); }

TEST_F(DayTest, ScriptedDayGivesTheExpectedGpuHours) {
  auto d = NewDaemon();
  const Run train = Submit(*d, {{"queue", "training"}, {"gpus", 2}});
  const Run notebook = Submit(*d, {{"queue", "interactive"}});
  ASSERT_EQ(train.devices.size(), 2u);
  ASSERT_EQ(notebook.devices.size(), 1u);
  Busy(train, 900);
  Busy(notebook, 0);
  RunUntil(*d, kT0 + kHour);
  EXPECT_EQ(State(*d, notebook.id), "reclaimed");
  Clear(notebook);
  RunUntil(*d, kT0 + 8 * kHour + 30 * kSecond);
  launcher_.Exit(train.pid, 0);
  d->Step();
  EXPECT_EQ(State(*d, train.id), "succeeded");
  Clear(train);
  RunUntil(*d, kT0 + 9 * kHour);
  const Run limited = Submit(*d, {{"queue", "training"}, {"gpus", 1}, {"time", "2h"}});
  Busy(limited, 500);
  RunUntil(*d, kT0 + 12 * kHour);
  EXPECT_EQ(State(*d, limited.id), "timed_out");
  Clear(limited);
  RunUntil(*d, kT0 + 24 * kHour);

  auto r = d->Report({{"from", "2026-12-01"}, {"to", "2026-12-02"}, {"by", "queue"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Json& t = (*r)["totals"];
  EXPECT_EQ((*r)["devices"], 8);
  EXPECT_DOUBLE_EQ(H(t, "capacity_gpu_hours"), 192.0);
  const double train_held = 2 * (8 + 30.0 / 3600);
  EXPECT_NEAR(H(t, "held_gpu_hours"), train_held + 2 + 0.25 * 40 / 60, kTol);
  EXPECT_NEAR(H(t, "used_gpu_hours"), 0.9 * train_held + 1.0, 2 * kTol);
  EXPECT_NEAR(H(t, "idle_gpu_hours"), 0.25 * 40 / 60, kTol);
  EXPECT_NEAR(H(t, "reclaim_returned_gpu_hours"), 0.25 * (8 * 60 - 40) / 60, kTol);
  EXPECT_NEAR(H(t, "coverage_percent"), 100.0, 0.2);
  EXPECT_EQ(t["jobs"], 3);
  EXPECT_EQ(t["timed_out"], 1);
  EXPECT_EQ(t["reclaimed"], 1);

  ASSERT_EQ((*r)["groups"].size(), 2u);
  const Json& training = (*r)["groups"][0];  // most held first
  const Json& interactive = (*r)["groups"][1];
  EXPECT_EQ(training["key"], "training");
  EXPECT_NEAR(H(training, "held_gpu_hours"), train_held + 2, kTol);
  EXPECT_NEAR(H(training, "used_gpu_hours"), 0.9 * train_held + 1.0, 2 * kTol);
  EXPECT_EQ(training["jobs"], 2);
  EXPECT_EQ(training["timed_out"], 1);
  EXPECT_EQ(training["reclaimed"], 0);
  EXPECT_EQ(interactive["key"], "interactive");
  EXPECT_NEAR(H(interactive, "held_gpu_hours"), 0.25 * 40 / 60, kTol);
  EXPECT_NEAR(H(interactive, "used_gpu_hours"), 0.0, 1e-9);
  EXPECT_EQ(interactive["reclaimed"], 1);

  // Everything started at once: no wait.
  for (const auto& w : (*r)["wait"]) EXPECT_EQ(w["p50_us"], 0) << w.dump();
  ASSERT_FALSE((*r)["top_idle"].empty());
  EXPECT_EQ((*r)["top_idle"][0]["job"], notebook.id);
  // 18.17 of 192 held (9%), 85% of it used: capacity to spare.
  EXPECT_EQ((*r)["verdict"]["code"], "spare_capacity") << (*r)["verdict"].dump();
  EXPECT_EQ((*r)["verdict"]["text"].get<std::string>().rfind("8 GPUs: 9% held, 8% used", 0), 0u)
      << (*r)["verdict"].dump();

  // By device: the same held total, spread over the devices the slices used.
  auto by_dev = d->Report({{"from", "2026-12-01"}, {"to", "2026-12-02"}, {"by", "device"}});
  ASSERT_TRUE(by_dev.ok());
  double held = 0;
  for (const auto& g : (*by_dev)["groups"]) held += H(g, "held_gpu_hours");
  EXPECT_NEAR(held, H(t, "held_gpu_hours"), 0.01);
  EXPECT_GE((*by_dev)["groups"].size(), 3u);

  // Half the day before the daemon existed: capacity counts from its history only.
  auto earlier = d->Report({{"from", "2026-11-30T12:00"}, {"to", "2026-12-01T12:00"}});
  ASSERT_TRUE(earlier.ok());
  EXPECT_EQ((*earlier)["period"]["history_from"], "2026-12-01T00:00:00Z");
  EXPECT_DOUBLE_EQ(H((*earlier)["totals"], "capacity_gpu_hours"), 96.0);
  auto before = d->Report({{"from", "2026-11-01"}, {"to", "2026-11-02"}});
  ASSERT_FALSE(before.ok());
  EXPECT_EQ(before.status().code(), StatusCode::kNotFound);
}

// A job that waits for a user cap is recorded with its reason, and the report counts its wait
// by that reason.
TEST_F(DayTest, WaitIsCountedByPendingReason) {
  auto d = NewDaemon();
  std::vector<Run> held;
  // The training queue's per-user cap stops the ninth 1-GPU job at the latest (8 devices).
  std::uint64_t waiting = 0;
  for (int i = 0; i < 9 && waiting == 0; ++i) {
    Json body = {{"queue", "training"}, {"gpus", 1}, {"argv", {"sleep", "100000"}}};
    auto r = d->Submit(me_, body);
    ASSERT_TRUE(r.ok());
    const auto id = (*r)["job"]["id"].get<std::uint64_t>();
    if (State(*d, id) == "pending") waiting = id;
  }
  ASSERT_NE(waiting, 0u);
  RunUntil(*d, kT0 + 10 * kMinute);
  const std::string reason = (*d->GetJob(JobId(waiting)))["job"]["pending_reason"]["kind"].get<std::string>();
  // Free one device: the first job ends; the waiting one starts.
  launcher_.Exit((*d->GetJob(JobId(1)))["job"]["pid"].get<int>(), 0);
  RunUntil(*d, kT0 + 20 * kMinute);
  ASSERT_EQ(State(*d, waiting), "running");
  auto r = d->Report({{"from", "2026-12-01"}, {"to", "2026-12-01T00:30"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)["wait_by_reason"].size(), 1u) << (*r)["wait_by_reason"].dump();
  const Json& w = (*r)["wait_by_reason"][0];
  EXPECT_EQ(w["reason"], reason);
  EXPECT_EQ(w["jobs"], 1);
  EXPECT_NEAR(static_cast<double>(w["total_us"].get<std::int64_t>()), 10.0 * kMinute, 10.0 * kSecond);
}

// Held and used are not the whole story: an hour with five of eight GPUs held and busy looks
// like headroom, but a 4-GPU job waited 40 minutes for room (one 1-GPU job ended then). The
// verdict says so (docs/report.md, "The verdict").
TEST_F(DayTest, VerdictWeighsLongWaits) {
  auto d = NewDaemon();
  std::vector<Run> small;
  for (int i = 0; i < 5; ++i) {
    small.push_back(Submit(*d, {{"queue", "training"}, {"gpus", 1}}));
    Busy(small.back(), 900);
  }
  Json body = {{"queue", "training"}, {"gpus", 4}, {"argv", {"sleep", "100000"}}};
  auto r = d->Submit(me_, body);
  ASSERT_TRUE(r.ok());
  const auto big = (*r)["job"]["id"].get<std::uint64_t>();
  ASSERT_EQ(State(*d, big), "pending");
  RunUntil(*d, kT0 + 40 * kMinute);
  launcher_.Exit(small[0].pid, 0);
  Clear(small[0]);
  RunUntil(*d, kT0 + 40 * kMinute + 20 * kSecond);
  ASSERT_EQ(State(*d, big), "running");
  Run b;
  b.id = big;
  b.pid = (*d->GetJob(JobId(big)))["job"]["pid"].get<int>();
  const Json slices = d->Slices();
  for (const auto& s : slices["slices"]) {
    if (s["job"].get<std::uint64_t>() == big) b.devices = s["devices"].get<std::vector<int>>();
  }
  Busy(b, 900);
  RunUntil(*d, kT0 + kHour);
  auto rep = d->Report({{"from", "2026-12-01"}, {"to", "2026-12-01T01:00"}});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  const Json& t = (*rep)["totals"];
  EXPECT_LT(H(t, "held_percent"), 80.0) << t.dump();
  EXPECT_GT(H(t, "used_percent_of_measured"), 50.0) << t.dump();
  EXPECT_EQ((*rep)["verdict"]["code"], "long_waits") << (*rep)["verdict"].dump();
  EXPECT_NE((*rep)["verdict"]["text"].get<std::string>().find("p95 wait 40m"), std::string::npos)
      << (*rep)["verdict"].dump();
  EXPECT_EQ((*rep)["never_ran"]["jobs"], 0);
}

TEST_F(DayTest, JobsThatCouldNeverRunAreCountedInTheVerdict) {
  auto d = NewDaemon();
  Busy(Submit(*d, {{"queue", "training"}, {"gpus", 1}}), 900);
  // Refused at once (no host has 16 GPUs), and recorded as such.
  auto r = d->Submit(me_, Json{{"queue", "training"}, {"gpus", 16}, {"argv", {"sleep", "1"}}});
  ASSERT_FALSE(r.ok());
  const std::uint64_t never = 2;
  EXPECT_EQ(State(*d, never), "rejected");
  RunUntil(*d, kT0 + 30 * kMinute);
  auto rep = d->Report({{"from", "2026-12-01"}, {"to", "2026-12-01T00:30"}});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ((*rep)["never_ran"]["jobs"], 1) << (*rep)["never_ran"].dump();
  EXPECT_EQ((*rep)["never_ran"]["list"][0]["job"], never);
  EXPECT_NE((*rep)["verdict"]["text"].get<std::string>().find("1 job could never run on this host"), std::string::npos)
      << (*rep)["verdict"].dump();
  EXPECT_NE(report::FormatTable(*rep).find("Could never run on this host"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::daemon
