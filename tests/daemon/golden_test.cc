// Golden run of the daemon core: a scripted scenario (submit, place, start, exit, cancel with
// SIGKILL escalation, time limit, idle warn + reclaim, a MIG reconfigure, a failed start, a
// restart that re-adopts and loses jobs) on the in-memory store, the fake launcher and the
// scripted fake backend, on an injected clock with a fixed scheduler seed. Every API view and
// the journal are recorded after each phase and compared byte for byte with
// tests/daemon/golden/scenario.txt: moving the daemon's code between files must not change
// what it does. Only the test's directory and the user running it are normalised (pids and
// times are the fake launcher's and the injected clock's, hence deterministic).
// To re-record after an intended change: GPUSLICE_UPDATE_GOLDEN=1 daemon_unit_test
// --gtest_filter='Golden*', and review the diff.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "api/views.h"
#include "daemon/daemon.h"
#include "devices/fake.h"
#include "devices/scripted.h"
#include "exec/fake_launcher.h"
#include "store/store.h"
#include "testing/golden.h"
#include "tests/daemon/shared_store.h"


namespace gpuslice::daemon {
namespace {

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("golden_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    script_ = (dir_ / "script.json").string();
    std::ofstream(script_) << "{}";
    // A fixed seed: the scheduler's tie-breaks are part of what is recorded.
    ASSERT_TRUE(store_->PutMeta("scheduler_seed", "12345").ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Daemon> NewDaemon() {
    DaemonOptions o;
    o.state_dir = dir_.string();
    o.simulated = true;
    o.grace = 5 * kSecond;
    auto fake = devices::FakeBackend::Create("2xH100-80GB", [this] { return now_; });
    std::unique_ptr<devices::DeviceBackend> backend =
        std::make_unique<devices::ScriptedBackend>(std::move(fake).value(), script_);
    auto d = std::make_unique<Daemon>(sched::DefaultConfig(), o,
                                      std::make_unique<SharedStore>(store_.get()),
                                      std::move(backend),
                                      std::make_unique<exec::FakeLauncherRef>(&launcher_),
                                      [this] { return now_; });
    Status st = d->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
    return d;
  }

  std::uint64_t Submit(Daemon& d, Json body) {
    body["argv"] = {"sleep", "100"};
    auto r = d.Submit(me_, body);
    Record(fmt("submit {}", body.dump()), r.ok() ? *r : Json{{"error", r.status().ToString()}});
    return r.ok() ? (*r)["job"]["id"].get<std::uint64_t>() : 0;
  }
  int Pid(Daemon& d, std::uint64_t id) { return (*d.GetJob(JobId(id)))["job"]["pid"].get<int>(); }
  int Device(Daemon& d, std::uint64_t id) {
    const Json all = d.Slices();  // kept: a range-for over a temporary's member would dangle
    for (const auto& s : all["slices"]) {
      if (s["job"].get<std::uint64_t>() == id) return s["devices"][0].get<int>();
    }
    return -1;
  }
  void Run(Daemon& d, Micros span, Micros step) {
    for (Micros t = 0; t < span; t += step) {
      now_ += step;
      d.Step();
    }
  }

  static std::string fmt(const char* f, const std::string& a) {
    std::string s(f);
    s.replace(s.find("{}"), 2, a);
    return s;
  }

  // The test's directory and the running user are the only things that differ between runs.
  std::string Normalise(std::string text) const {
    auto replace_all = [&](const std::string& from, const std::string& to) {
      if (from.empty()) return;
      for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
        text.replace(at, from.size(), to);
      }
    };
    replace_all(dir_.string(), "$DIR");
    const std::string user = UserName(me_.uid);
    replace_all("\"user\":\"" + user + "\"", "\"user\":\"$USER\"");
    replace_all("by " + user + " ", "by $USER ");
    replace_all(" of " + user + " ", " of $USER ");
    replace_all("cancelled by " + user + "\"", "cancelled by $USER\"");
    replace_all("\"uid\":" + std::to_string(me_.uid) + ",", "\"uid\":\"$UID\",");
    replace_all("\"gid\":" + std::to_string(me_.gid) + ",", "\"gid\":\"$GID\",");
    // Whether the memory-cap interposer is found depends on what the build tree holds (a
    // partial build has no libgpuslice-cuda.so), not on the daemon's behaviour.
    replace_all("NOT enforced: libgpuslice-cuda.so not found", "$MEMCAP");
    replace_all("enforced by libgpuslice-cuda", "$MEMCAP");
    return text;
  }
  void Record(const std::string& what, const Json& j) {
    out_ << "== " << what << "\n" << Normalise(j.dump()) << "\n";
  }
  template <class V>
  static void RoundTrips(const Result<std::vector<V>>& typed, const Json& list) {
    ASSERT_TRUE(typed.ok()) << typed.status().ToString();
    ASSERT_EQ(typed->size(), list.size());
    for (std::size_t i = 0; i < typed->size(); ++i) EXPECT_EQ((*typed)[i].ToJson().dump(), list[i].dump());
  }
  void Views(Daemon& d, const std::string& phase) {
    out_ << "=== phase: " << phase << " (t=" << now_ << ")\n";
    const Json jobs = *d.ListJobs({});
    const Json slices = d.Slices();
    Record("jobs", jobs);
    Record("slices", slices);
    // One schema at both ends: every record reads back into its typed view (as the CLI reads
    // it) and writes out the same bytes.
    auto typed_jobs = api::JobsFromJson(jobs);
    ASSERT_TRUE(typed_jobs.ok()) << typed_jobs.status().ToString();
    for (std::size_t i = 0; i < typed_jobs->size(); ++i) {
      EXPECT_EQ((*typed_jobs)[i].ToJson().dump(), jobs["jobs"][i].dump());
    }
    auto typed_slices = api::SlicesFromJson(slices);
    ASSERT_TRUE(typed_slices.ok()) << typed_slices.status().ToString();
    for (std::size_t i = 0; i < typed_slices->size(); ++i) {
      EXPECT_EQ((*typed_slices)[i].ToJson().dump(), slices["slices"][i].dump());
    }
    const Json queues = d.Queues();
    const Json devices = d.Devices();
    const Json events = *d.Events(events_seen_, JobId(), 1000);
    Record("queues", queues);
    Record("devices", devices);
    Record("events", events);
    RoundTrips(api::QueuesFromJson(queues), queues["queues"]);
    RoundTrips(api::DevicesFromJson(devices), devices["devices"]);
    RoundTrips(api::EventsFromJson(events), events["events"]);
    auto evs = (*d.Events(events_seen_, JobId(), 1000))["events"];
    if (!evs.empty()) events_seen_ = evs.back()["seq"].get<std::int64_t>();
    auto journal = store_->ReadJournal();
    ASSERT_TRUE(journal.ok());
    out_ << "== journal +" << (journal->size() - journal_seen_) << "\n";
    for (std::size_t i = journal_seen_; i < journal->size(); ++i) out_ << Normalise((*journal)[i]) << "\n";
    journal_seen_ = journal->size();
    Status st = d.CheckConsistency();
    out_ << "== consistency " << (st.ok() ? "ok" : st.ToString()) << "\n";
  }

  std::filesystem::path dir_;
  std::string script_;
  Micros now_ = 1'000 * kSecond;
  std::unique_ptr<store::Store> store_ = store::NewMemoryStore();
  exec::FakeLauncher launcher_;
  Caller me_{static_cast<std::int64_t>(geteuid()), static_cast<std::int64_t>(getegid())};
  std::ostringstream out_;
  std::int64_t events_seen_ = 0;
  std::size_t journal_seen_ = 0;
};

TEST_F(GoldenTest, ScriptedScenarioMatchesTheRecordedRun) {
  auto d = NewDaemon();
  Views(*d, "started");

  // Place and start: a whole-GPU job, two shared slices (one to be busy), one with a time limit.
  const auto whole = Submit(*d, {{"queue", "training"}, {"gpus", 1}});
  const auto busy = Submit(*d, {{"queue", "interactive"}, {"mem", "10GiB"}});
  const auto idle = Submit(*d, {{"queue", "interactive"}});
  const auto limited = Submit(*d, {{"queue", "interactive"}, {"time", "2m"}});
  Submit(*d, {{"queue", "nope"}});                 // refused, names the field
  Submit(*d, {{"queue", "training"}, {"gpus", 8}});  // can never fit
  std::ofstream(script_) << "{\"processes\": [{\"pid\": " << Pid(*d, busy) << ", \"device\": "
                         << Device(*d, busy) << ", \"sm\": 70, \"memory\": \"3GiB\"}]}";
  Run(*d, 5 * kSecond, kSecond);
  Views(*d, "placed and started");

  // The whole job exits by itself; the time-limited one reaches its limit.
  launcher_.Exit(Pid(*d, whole), 0);
  Run(*d, 3 * kMinute, 10 * kSecond);
  Views(*d, "exit and time limit");

  // A cancel whose process ignores SIGTERM: SIGKILL after the grace period.
  launcher_.set_ignore_sigterm(true);
  const auto stubborn = Submit(*d, {{"queue", "interactive"}});
  auto c = d->Cancel(me_, JobId(stubborn));
  Record("cancel", c.ok() ? *c : Json{{"error", c.status().ToString()}});
  Run(*d, 10 * kSecond, kSecond);
  launcher_.set_ignore_sigterm(false);
  Views(*d, "cancel");

  // An inference job: MIG by default, so a device is drained and reconfigured.
  const auto mig = Submit(*d, {{"queue", "inference"}});
  Run(*d, 5 * kSecond, kSecond);
  Views(*d, "mig");

  // A failed start: the job fails and its slice goes back.
  launcher_.FailNextStart(Internal("exec failed (scripted)"));
  Submit(*d, {{"queue", "interactive"}});
  Views(*d, "failed start");

  // Idle: warned after the 30-minute window, reclaimed after the 10-minute grace; the busy
  // slice is never warned.
  Run(*d, 31 * kMinute, 10 * kSecond);
  Views(*d, "idle warned");
  Run(*d, 10 * kMinute, 10 * kSecond);
  Views(*d, "idle reclaimed");

  // Restart: a second daemon on the same store re-adopts the live jobs; one vanished while
  // it was down and is lost.
  launcher_.Vanish(Pid(*d, mig));
  d.reset();
  now_ += 30 * kSecond;
  d = NewDaemon();
  Views(*d, "restarted");
  Run(*d, 5 * kSecond, kSecond);
  Views(*d, "after restart");
  (void)idle;
  (void)limited;

  ::gpuslice::testing::ExpectMatchesGolden(std::string(GPUSLICE_SOURCE_DIR) + "/tests/daemon/golden/scenario.txt",
                                           out_.str());
}

}  // namespace
}  // namespace gpuslice::daemon
