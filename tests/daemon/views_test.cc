// What the daemon's views tell people (in-process daemon, in-memory store, fake launcher, fake
// devices on the injected clock): per-user caps and who is looking; "used" by its one
// definition; the idle clock apart from the time limit, and what keeps a session whose GPU is
// idle; a waiting job's plain reason, place in the queue and the bound on its wait; recently
// ended jobs; the time-limit warning said as of now; which MIG instance a request gets.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/daemon.h"
#include "devices/fake.h"
#include "devices/scripted.h"
#include "exec/fake_launcher.h"
#include "store/store.h"

namespace gpuslice::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("views_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    script_ = (dir_ / "script.json").string();
    std::ofstream(script_) << "{}";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Daemon> NewDaemon(sched::Config config = sched::DefaultConfig()) {
    DaemonOptions o;
    o.state_dir = dir_.string();
    o.simulated = true;
    o.grace = kSecond;
    auto fake = devices::FakeBackend::Create("4xH100-80GB", [this] { return now_; });
    std::unique_ptr<devices::DeviceBackend> backend =
        std::make_unique<devices::ScriptedBackend>(std::move(fake).value(), script_);
    auto d = std::make_unique<Daemon>(std::move(config), o, store::NewMemoryStore(), std::move(backend),
                                      std::make_unique<exec::FakeLauncherRef>(&launcher_), [this] { return now_; });
    EXPECT_TRUE(d->Start().ok());
    return d;
  }
  std::uint64_t Submit(Daemon& d, Json body) {
    body["argv"] = {"sleep", "100"};
    auto r = d.Submit(me_, body);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["job"]["id"].get<std::uint64_t>() : 0;
  }
  Json Job(Daemon& d, std::uint64_t id) { return (*d.GetJob(JobId(id)))["job"]; }
  Json Slice(Daemon& d, std::uint64_t job) {
    const Json all = d.Slices();  // not d.Slices()["slices"]: the temporary would die first
    for (const auto& s : all["slices"]) {
      if (s["job"].get<std::uint64_t>() == job) return s;
    }
    ADD_FAILURE() << "job " << job << " has no slice: " << Job(d, job).dump();
    return Json::object();
  }
  // The job's top process on its device, busy at `sm` percent of the device.
  void Busy(Daemon& d, std::uint64_t job, int sm) {
    const Json s = Slice(d, job);
    procs_[job] = {Job(d, job)["pid"].get<int>(), s["devices"][0].get<int>(), sm};
    std::ofstream out(script_);
    out << "{\"processes\": [";
    bool first = true;
    for (const auto& [id, p] : procs_) {
      out << (first ? "" : ",") << "{\"pid\": " << p[0] << ", \"device\": " << p[1] << ", \"sm\": " << p[2] << "}";
      first = false;
    }
    out << "]}";
  }
  void Run(Daemon& d, Micros for_us) {
    for (Micros t = 0; t < for_us; t += kSecond) {
      now_ += kSecond;
      d.Step();
    }
  }

  std::filesystem::path dir_;
  std::string script_;
  std::map<std::uint64_t, std::array<int, 3>> procs_;
  Micros now_ = 1'796'083'200LL * kSecond;
  exec::FakeLauncher launcher_;
  Caller me_{static_cast<std::int64_t>(geteuid()), static_cast<std::int64_t>(getegid())};
};

TEST_F(ViewsTest, QueuesShowPerUserCapsAndWhoamiNamesTheCaller) {
  auto d = NewDaemon();
  const Json q = d->Queues();
  bool seen = false;
  for (const auto& x : q["queues"]) {
    if (x["name"] != "interactive") continue;
    seen = true;
    EXPECT_EQ(x["user_max_jobs"], 8);
    EXPECT_EQ(x["user_max_milli"], 2000);
  }
  EXPECT_TRUE(seen);
  const Json me = d->Whoami(me_);
  EXPECT_EQ(me["uid"], me_.uid);
  EXPECT_EQ(me["user"], UserName(me_.uid));
  EXPECT_EQ(me["admin"], me_.uid == 0);
}

// A shared slice's utilisation is of the device: 250m at 30 % used all of its 250m; a whole
// GPU at 40 % used 400m. The same rule as the report's and /metrics' (core/usage.h).
TEST_F(ViewsTest, UsedHasOneDefinition) {
  auto d = NewDaemon();
  const auto shared = Submit(*d, {{"queue", "interactive"}, {"fraction", "250m"}});
  const auto whole = Submit(*d, {{"queue", "training"}, {"gpus", 1}});
  Busy(*d, shared, 30);
  Busy(*d, whole, 40);
  Run(*d, 5 * kSecond);
  EXPECT_EQ(Slice(*d, shared)["util_percent"], 30) << Slice(*d, shared).dump();
  EXPECT_EQ(Slice(*d, shared)["used_milli"], 250);
  EXPECT_EQ(Slice(*d, whole)["used_milli"], 400);
  EXPECT_THAT(d->Metrics(), HasSubstr("gpuslice_slice_used_gpus{"));
  EXPECT_THAT(d->Metrics(), HasSubstr("} 0.250\n"));
}

// Idle and protected are facts of their own: an idle slice's warning time stands still while
// it stays idle; a busy notebook cell (a fresh Jupyter report) keeps it, and the view says so
// instead of counting down to a warning that never comes.
TEST_F(ViewsTest, IdleClockAndWhatKeepsASession) {
  auto config = sched::DefaultConfig();
  for (auto& q : config.queues) {
    if (q.name == "interactive") q.idle.report_sources = {"jupyter"};
  }
  auto d = NewDaemon(config);
  const auto idle = Submit(*d, {{"queue", "interactive"}});
  const auto kept = Submit(*d, {{"queue", "interactive"}});
  Run(*d, 2 * kMinute);
  auto r = d->ReportActivity(me_, JobId(kept), Json{{"source", "jupyter"}, {"busy", true}, {"kernels", 1}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Run(*d, 3 * kMinute);
  const Json a = Slice(*d, idle);
  EXPECT_NEAR(a["idle_seconds"].get<double>(), 300, 2) << a.dump();
  EXPECT_TRUE(a["protected_by"].is_null());
  const Micros warn_at = a["idle_warning_at_us"].get<Micros>();
  EXPECT_NEAR(static_cast<double>(warn_at - now_), 25.0 * kMinute, 2.0 * kSecond);
  const Json k = Slice(*d, kept);
  EXPECT_EQ(k["protected_by"], "a running notebook cell") << k.dump();
  EXPECT_LE(k["idle_seconds"].get<double>(), 1.0);
  // Its warning would come only once the notebook stopped reporting (the report goes stale 10
  // minutes after it came) and its GPU had been idle the whole window: not in the next minutes.
  EXPECT_GE(k["idle_warning_at_us"].get<Micros>(), now_ + 7 * kMinute);
  // 30 min in: the idle slice is warned and its reclaim time is given; the kept one, whose
  // notebook goes on reporting its running cell, is not warned.
  for (int m = 0; m < 26; ++m) {
    if (m % 5 == 0) {
      ASSERT_TRUE(d->ReportActivity(me_, JobId(kept), Json{{"source", "jupyter"}, {"busy", true}}).ok());
    }
    Run(*d, kMinute);
  }
  const Json w = Slice(*d, idle);
  EXPECT_EQ(w["idle_state"], "warned");
  EXPECT_TRUE(w["idle_warning_at_us"].is_null());
  EXPECT_GT(w["idle_reclaim_at_us"].get<Micros>(), now_);
  const Json job = Job(*d, idle);
  EXPECT_EQ(job["warning_kind"], "idle");
  EXPECT_THAT(job["warning"].get<std::string>(), HasSubstr("unless used"));
  EXPECT_EQ(Slice(*d, kept)["idle_state"], "active");
}

TEST_F(ViewsTest, AWaitingJobHasAPlainReasonAPlaceAndABound) {
  auto d = NewDaemon();
  const auto blocker = Submit(*d, {{"queue", "training"}, {"gpus", 4}, {"time", "1h"}});
  ASSERT_EQ(Job(*d, blocker)["state"], "running");
  const auto first = Submit(*d, {{"queue", "training"}, {"gpus", 1}});
  const auto second = Submit(*d, {{"queue", "training"}, {"gpus", 2}});
  Run(*d, 2 * kSecond);
  const Json p1 = Job(*d, first)["pending_reason"];
  EXPECT_EQ(p1["position"], 1);
  EXPECT_EQ(p1["queue_length"], 2);
  EXPECT_THAT(p1["plain"].get<std::string>(), HasSubstr("all GPUs are in use"));
  EXPECT_THAT(p1["plain"].get<std::string>(), Not(HasSubstr("node")));
  // Room by the blocker's time limit at the latest.
  EXPECT_EQ(p1["ready_by_us"], Job(*d, blocker)["deadline_us"]);
  const Json p2 = Job(*d, second)["pending_reason"];
  EXPECT_EQ(p2["position"], 2);
  EXPECT_TRUE(p2["ready_by_us"].is_null()) << "the first may take the room first";
  // A notebook behind the whole GPUs (considered first: its queue has the higher priority):
  // the room comes when the blocker's devices empty.
  const auto notebook = Submit(*d, {{"queue", "interactive"}});
  const Json p3 = Job(*d, notebook)["pending_reason"];
  EXPECT_EQ(p3["ready_by_us"], Job(*d, blocker)["deadline_us"]) << p3.dump();
  EXPECT_THAT(p3["plain"].get<std::string>(), HasSubstr("every GPU is busy"));
  // The listing says the same.
  auto list = d->ListJobs({{"state", "pending"}});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["jobs"][1]["pending_reason"]["position"], 2);
}

TEST_F(ViewsTest, RecentlyEndedJobsNewestFirst) {
  auto d = NewDaemon();
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(Submit(*d, {{"queue", "training"}, {"gpus", 1}}));
    Run(*d, kSecond);
    ASSERT_TRUE(d->Cancel(me_, JobId(ids.back())).ok());
    Run(*d, 3 * kSecond);
  }
  auto r = d->ListJobs({{"state", "ended"}, {"limit", "2"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)["jobs"].size(), 2u);
  EXPECT_EQ((*r)["jobs"][0]["id"], ids[2]);
  EXPECT_EQ((*r)["jobs"][1]["id"], ids[1]);
  EXPECT_EQ((*r)["jobs"][0]["state"], "cancelled");
  EXPECT_FALSE(d->ListJobs({{"limit", "x1"}}).ok());
}

// Asked 10GiB, a MIG job gets a 1g.20gb on an H100 (1g.10gb holds 9.75GiB), and says so.
TEST_F(ViewsTest, TheMigInstanceIsExplained) {
  auto d = NewDaemon();
  const auto ten = Submit(*d, {{"queue", "inference"}, {"mem", "10GiB"}});
  const auto nine = Submit(*d, {{"queue", "inference"}, {"mem", "9GiB"}});
  const std::string t = Job(*d, ten)["mig_instance"].get<std::string>();
  EXPECT_THAT(t, HasSubstr("1g.20gb"));
  EXPECT_THAT(t, HasSubstr("the smallest instance that holds 10GiB"));
  EXPECT_THAT(t, HasSubstr("(1g.10gb holds 9.75GiB)"));
  const std::string n = Job(*d, nine)["mig_instance"].get<std::string>();
  EXPECT_THAT(n, HasSubstr("1g.10gb (9.75GiB) on H100-80GB"));
  EXPECT_THAT(n, Not(HasSubstr("holds 9.75GiB)")));
  EXPECT_TRUE(Job(*d, Submit(*d, {{"queue", "training"}}))["mig_instance"].is_null());
}

}  // namespace
}  // namespace gpuslice::daemon
