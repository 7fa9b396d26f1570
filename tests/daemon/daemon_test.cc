// Daemon core in-process, with the in-memory store, the fake launcher and the fake backend:
// lifecycle, a bad request, and recovery (a second daemon on the same store re-adopts live
// jobs, marks vanished ones lost and starts nothing twice).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "daemon/daemon.h"
#include "devices/fake.h"
#include "devices/scripted.h"
#include "exec/fake_launcher.h"
#include "store/store.h"
#include "tests/daemon/shared_store.h"

namespace gpuslice::daemon {
namespace {

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("daemon_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Daemon> NewDaemon(std::string script = "") {
    DaemonOptions o;
    o.state_dir = dir_.string();
    o.simulated = true;
    o.grace = kSecond;
    o.compact_journal_at = compact_at_;
    auto fake = devices::FakeBackend::Create("4xH100-80GB", [this] { return now_; });
    std::unique_ptr<devices::DeviceBackend> backend = std::move(fake).value();
    if (!script.empty()) {
      // As `serve --simulate-script` does: a wrapper at the interface.
      backend = std::make_unique<devices::ScriptedBackend>(std::move(backend), std::move(script));
    }
    auto d = std::make_unique<Daemon>(sched::DefaultConfig(), o,
                                      std::make_unique<SharedStore>(store_.get(), &fail_commits_),
                                      std::move(backend),
                                      std::make_unique<exec::FakeLauncherRef>(&launcher_),
                                      [this] { return now_; });
    EXPECT_TRUE(d->Start().ok());
    return d;
  }

  std::uint64_t Submit(Daemon& d, Json body) {
    body["argv"] = {"sleep", "100"};
    auto r = d.Submit(me_, body);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["job"]["id"].get<std::uint64_t>() : 0;
  }
  std::string State(Daemon& d, std::uint64_t id) {
    return (*d.GetJob(JobId(id)))["job"]["state"].get<std::string>();
  }
  int Pid(Daemon& d, std::uint64_t id) { return (*d.GetJob(JobId(id)))["job"]["pid"].get<int>(); }

  std::filesystem::path dir_;
  Micros now_ = 1'000 * kSecond;
  std::size_t compact_at_ = DaemonOptions{}.compact_journal_at;
  bool fail_commits_ = false;  // the store's commits fail while set
  std::unique_ptr<store::Store> store_ = store::NewMemoryStore();
  exec::FakeLauncher launcher_;
  Caller me_{static_cast<std::int64_t>(geteuid()), static_cast<std::int64_t>(getegid())};
};

TEST_F(DaemonTest, JobRunsExitsAndFreesItsSlice) {
  auto d = NewDaemon();
  auto id = Submit(*d, {{"queue", "training"}, {"gpus", 2}});
  EXPECT_EQ(State(*d, id), "running");
  ASSERT_EQ(launcher_.launches().size(), 1u);
  EXPECT_EQ(d->Slices()["slices"].size(), 1u);
  launcher_.Exit(Pid(*d, id), 0);
  now_ += kSecond;
  d->Step();
  EXPECT_EQ(State(*d, id), "succeeded");
  EXPECT_TRUE(d->Slices()["slices"].empty());
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
}

TEST_F(DaemonTest, CancelTermsThenKillsAfterGrace) {
  auto d = NewDaemon();
  launcher_.set_ignore_sigterm(true);
  auto id = Submit(*d, {{"queue", "interactive"}});
  auto r = d->Cancel(me_, JobId(id));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(State(*d, id), "stopping");
  EXPECT_EQ(d->Slices()["slices"].size(), 1u) << "held until the processes are gone";
  now_ += 2 * kSecond;
  d->Step();  // grace over: SIGKILL
  d->Step();  // reaped
  EXPECT_EQ(State(*d, id), "cancelled");
  EXPECT_TRUE(d->Slices()["slices"].empty());
  auto sigs = launcher_.signals();
  ASSERT_EQ(sigs.size(), 2u);
  EXPECT_EQ(sigs[0].second, SIGTERM);
  EXPECT_EQ(sigs[1].second, SIGKILL);
}

TEST_F(DaemonTest, BadRequestChangesNothing) {
  auto d = NewDaemon();
  auto r = d->Submit(me_, {{"argv", {"x"}}, {"fraction", "2.5"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*d->ListJobs({}))["jobs"].empty());
  EXPECT_TRUE(store_->ReadJournal()->size() == 4u) << "only the 4 DeviceAdded entries";
}

// A busy job is sampled every second, but its activity reaches the journal about once a minute
// (the scheduler's idle clock needs no finer grain with a 30-minute window); an idle job is
// still warned and reclaimed on time, and the busy one's idle time shown stays per-second.
TEST_F(DaemonTest, ActivityIsJournaledOncePerQuantumAndIdleReclaimStillWorks) {
  const std::string script = (dir_ / "script.json").string();
  auto d = NewDaemon(script);
  auto busy = Submit(*d, {{"queue", "interactive"}});
  auto idle = Submit(*d, {{"queue", "interactive"}});
  // The fake launcher's pids are not real processes: the script names the busy job's pid.
  int device = -1;
  const Json all = d->Slices();
  for (const auto& sl : all["slices"]) {
    if (sl["job"].get<std::uint64_t>() == busy) device = sl["devices"][0].get<int>();
  }
  std::ofstream(script) << "{\"processes\": [{\"pid\": " << Pid(*d, busy) << ", \"device\": " << device
                        << ", \"sm\": 80}]}";  // percent
  auto samples = [&] {
    int n = 0;
    auto journal = store_->ReadJournal();
    for (const auto& e : *journal) n += e.find("\"t\":\"sample\"") != std::string::npos;
    return n;
  };
  const int before = samples();
  for (int i = 0; i < 600; ++i) {
    now_ += kSecond;
    d->Step();
  }
  const int ten_minutes = samples() - before;
  EXPECT_GE(ten_minutes, 9) << "about one a minute";
  EXPECT_LE(ten_minutes, 12) << "not one a second (600)";
  const Json slices = d->Slices();
  for (const auto& sl : slices["slices"]) {
    if (sl["job"].get<std::uint64_t>() == busy) {
      EXPECT_LE(sl["idle_seconds"].get<double>(), 1.0) << sl.dump();
    }
  }
  // The idle job: 30 min window + 10 min grace; the busy one never warned.
  for (int i = 0; i < 35 * 60; ++i) {
    now_ += kSecond;
    d->Step();
  }
  EXPECT_EQ(State(*d, busy), "running");
  EXPECT_NE(State(*d, idle), "running") << "reclaimed after window + grace";
  auto events = (*d->Events(0, JobId(busy), 1000))["events"];
  for (const auto& e : events) EXPECT_NE(e["type"], "warn") << e.dump();
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
}

// A reservation made on a tick survives a crash: the tick's decision journaled it, so the
// restarted daemon still keeps the devices for the waiting 4-GPU job.
TEST_F(DaemonTest, ReservationForAWaitingWholeJobSurvivesARestart) {
  std::uint64_t big;
  std::vector<std::uint64_t> small;
  {
    auto d = NewDaemon();
    for (int i = 0; i < 4; ++i) small.push_back(Submit(*d, {{"queue", "training"}, {"gpus", 1}}));
    big = Submit(*d, {{"queue", "training"}, {"gpus", 4}});
    EXPECT_EQ(State(*d, big), "pending");
    now_ += 31 * kMinute;  // the built-in training queue reserves after 30 min
    d->Step();
    const Json devices = d->Devices();
    for (const auto& dev : devices["devices"]) EXPECT_EQ(dev["reserved_for"], big) << dev.dump();
  }  // crash
  now_ += kSecond;
  auto d = NewDaemon();
  const Json devices = d->Devices();
  for (const auto& dev : devices["devices"]) EXPECT_EQ(dev["reserved_for"], big) << dev.dump();
  launcher_.Exit(Pid(*d, small[0]), 0);
  now_ += kSecond;
  d->Step();
  auto late = Submit(*d, {{"queue", "training"}, {"gpus", 1}});
  EXPECT_EQ(State(*d, late), "pending") << "the freed GPU is kept for the 4-GPU job";
  for (std::size_t i = 1; i < small.size(); ++i) launcher_.Exit(Pid(*d, small[i]), 0);
  now_ += kSecond;
  d->Step();
  EXPECT_EQ(State(*d, big), "running");
  EXPECT_EQ(State(*d, late), "pending");
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
}

// A NUL byte cannot reach exec(): refused at submit, not failed at start.
TEST_F(DaemonTest, NulBytesInCommandOrEnvironmentAreRefusedAtSubmit) {
  auto d = NewDaemon();
  const std::string nul("a\0b", 3);
  auto r = d->Submit(me_, {{"argv", {"echo", nul}}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("field 'argv'"), std::string::npos) << r.status().ToString();
  r = d->Submit(me_, {{"argv", {"true"}}, {"env", {{"X", nul}}}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("field 'env': entry 'X'"), std::string::npos) << r.status().ToString();
  EXPECT_TRUE((*d->ListJobs({}))["jobs"].empty());
  EXPECT_TRUE(launcher_.launches().empty());
}

TEST_F(DaemonTest, RestartReadoptsLiveJobsRecordsEndedOnesAndStartsNothingTwice) {
  std::uint64_t live, gone, waiting;
  {
    auto d = NewDaemon();
    live = Submit(*d, {{"queue", "training"}, {"gpus", 2}});
    gone = Submit(*d, {{"queue", "training"}, {"gpus", 2}});
    waiting = Submit(*d, {{"queue", "training"}, {"gpus", 1}});  // no device left
    EXPECT_EQ(State(*d, waiting), "pending");
    launcher_.Exit(Pid(*d, gone), 3);  // ends while the daemon is "down"
  }  // the daemon vanishes without a word (as with kill -9)
  now_ += 5 * kSecond;
  auto d = NewDaemon();
  EXPECT_EQ(State(*d, live), "running");
  // What its exec stub recorded, not "lost" and not "succeeded".
  EXPECT_EQ(State(*d, gone), "failed");
  EXPECT_EQ((*d->GetJob(JobId(gone)))["job"]["exit_code"], 3);
  // The ended job's devices went back; the waiting job took them.
  EXPECT_EQ(State(*d, waiting), "running");
  EXPECT_EQ(launcher_.launches().size(), 3u) << "live job not started again";
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
  EXPECT_EQ(d->Slices()["slices"].size(), 2u);
}

// What the crash campaign's checker relies on (scripts/crash-campaign check_view; seed 7,
// trial 12 read it as "device 5 over-committed (1500 milli)"): a stop frees the slice in the
// scheduler's books at once, so the next job may be placed on its device while the stopped
// job's processes are in their grace period (the next job is not exec'd until they are gone);
// /v1/slices still shows the old slice, marked idle_state "stopping", and every device's
// booked milli-GPU equal the slices not stopping. The same after a restart in the middle of
// the grace period: nothing is booked twice, nothing runs beside the stopping job.
TEST_F(DaemonTest, AStoppingSliceIsOutOfTheBooksAndNothingIsBookedTwiceAcrossARestart) {
  auto expect_books_match = [](Daemon& d) {
    std::map<std::int64_t, std::int64_t> booked;
    int stopping = 0;
    const Json slices = d.Slices(), devices = d.Devices();  // kept: the loops below read into them
    for (const auto& s : slices["slices"]) {
      if (s["idle_state"] == "stopping") {
        ++stopping;
        continue;
      }
      for (const auto& dev : s["devices"]) booked[dev.get<std::int64_t>()] += s["milli"].get<std::int64_t>();
    }
    for (const auto& dev : devices["devices"]) {
      const auto index = dev["index"].get<std::int64_t>();
      EXPECT_EQ(dev["used_milli"].get<std::int64_t>(), booked[index]) << dev.dump();
      EXPECT_LE(booked[index], 1000) << dev.dump();
    }
    return stopping;
  };
  std::vector<std::uint64_t> whole;
  std::uint64_t next;
  launcher_.set_ignore_sigterm(true);
  {
    auto d = NewDaemon();
    for (int i = 0; i < 4; ++i) whole.push_back(Submit(*d, {{"queue", "training"}, {"gpus", 1}}));
    next = Submit(*d, {{"queue", "training"}, {"gpus", 1}});
    EXPECT_EQ(State(*d, next), "pending");
    ASSERT_TRUE(d->Cancel(me_, JobId(whole[0])).ok());
    EXPECT_EQ(State(*d, whole[0]), "stopping");
    // Placed on the stopped job's device at once, but not exec'd while its processes run.
    EXPECT_EQ(State(*d, next), "starting");
    EXPECT_EQ(launcher_.launches().size(), 4u);
    const Json cancelled = (*d->GetJob(JobId(whole[0])))["slice"];
    const Json placed = (*d->GetJob(JobId(next)))["slice"];
    EXPECT_EQ(cancelled["devices"], placed["devices"]);
    EXPECT_EQ(d->Slices()["slices"].size(), 5u) << "the stopped job's slice shown until it is gone";
    EXPECT_EQ(expect_books_match(*d), 1);
  }  // kill -9 in the grace period
  now_ += 100 * kMillisecond;
  auto d = NewDaemon();
  EXPECT_EQ(State(*d, whole[0]), "stopping") << "re-adopted, still in its grace period";
  EXPECT_EQ(State(*d, next), "starting") << "still held back by the re-adopted stopping job";
  EXPECT_EQ(launcher_.launches().size(), 4u);
  EXPECT_EQ(expect_books_match(*d), 1);
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
  now_ += 2 * kSecond;
  d->Step();  // grace over: SIGKILL
  d->Step();  // reaped
  EXPECT_EQ(State(*d, whole[0]), "cancelled");
  EXPECT_EQ(State(*d, next), "running") << "exec'd once the device is really free";
  EXPECT_EQ(launcher_.launches().size(), 5u) << "nothing started twice";
  EXPECT_EQ(d->Slices()["slices"].size(), 4u);
  EXPECT_EQ(expect_books_match(*d), 0);
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
}

// No recorded result (the stub was killed): unknown, so `lost` with no exit code, never
// `succeeded`; while the daemon runs and across a restart alike.
TEST_F(DaemonTest, UnrecordedResultIsLostNeverSucceeded) {
  std::uint64_t running, down;
  {
    auto d = NewDaemon();
    running = Submit(*d, {{"queue", "training"}, {"gpus", 1}});
    down = Submit(*d, {{"queue", "training"}, {"gpus", 1}});
    launcher_.Vanish(Pid(*d, running));
    d->Step();
    EXPECT_EQ(State(*d, running), "lost");
    EXPECT_TRUE((*d->GetJob(JobId(running)))["job"]["exit_code"].is_null());
    launcher_.Vanish(Pid(*d, down));
  }
  auto d = NewDaemon();
  EXPECT_EQ(State(*d, down), "lost");
  EXPECT_TRUE((*d->GetJob(JobId(down)))["job"]["exit_code"].is_null());
  EXPECT_NE((*d->GetJob(JobId(down)))["job"]["reason"].get<std::string>().find("unknown"),
            std::string::npos);
  EXPECT_TRUE(d->Slices()["slices"].empty());
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
}

// Compaction round trip: what the API shows is the same after the journal is compacted at a
// restart (snapshot of what still matters + truncation) as before, and after another restart
// that replays only the compacted journal.
TEST_F(DaemonTest, JournalCompactionKeepsTheStateAcrossRestarts) {
  const std::string script = (dir_ / "script.json").string();
  compact_at_ = 0;  // never, for the first life
  std::uint64_t ends;
  {
    auto d = NewDaemon(script);
    std::vector<std::uint64_t> busy;
    for (int i = 0; i < 3; ++i) busy.push_back(Submit(*d, {{"queue", "interactive"}}));
    (void)Submit(*d, {{"queue", "interactive"}});  // idle: warned, then reclaimed
    ends = Submit(*d, {{"queue", "training"}, {"gpus", 1}});
    // The fake launcher's pids are not real processes: the script names the busy jobs' pids.
    Json procs = Json::array();
    const Json slices = d->Slices();  // kept alive while iterating
    for (const auto& sl : slices["slices"]) {
      const std::uint64_t job = sl["job"].get<std::uint64_t>();
      if (std::find(busy.begin(), busy.end(), job) == busy.end()) continue;
      procs.push_back({{"pid", Pid(*d, job)}, {"device", sl["devices"][0].get<int>()}, {"sm", 80}});
    }
    ASSERT_EQ(procs.size(), 3u) << d->Slices().dump();
    std::ofstream(script) << Json{{"processes", procs}}.dump();
    for (int i = 0; i < 1800; ++i) {  // five hours
      now_ += 10 * kSecond;
      if (i == 900) launcher_.Exit(Pid(*d, ends), 0);
      d->Step();
    }
  }
  const auto jobs = *store_->ListJobs();
  EXPECT_EQ(std::count_if(jobs.begin(), jobs.end(),
                          [](const store::JobRecord& j) { return j.state == store::JobState::kReclaimed; }),
            1);
  const std::size_t before = store_->ReadJournal()->size();
  auto view = [](Daemon& d) {
    Json out = *d.ListJobs({});
    const Json slices = d.Slices();  // kept alive while iterating
    for (const auto& s : slices["slices"]) {
      out["slices"].push_back({s["id"], s["job"], s["devices"], s["idle_state"], s["milli"]});
    }
    const Json devices = d.Devices();
    for (auto dev : devices["devices"]) {
      dev.erase("util_percent");
      dev.erase("memory_used");
      out["devices"].push_back(dev);
    }
    return out;
  };
  compact_at_ = DaemonOptions{}.compact_journal_at;
  Json expected = view(*NewDaemon(script));  // replays the full journal (below the threshold)
  EXPECT_EQ(store_->ReadJournal()->size(), before);
  compact_at_ = 50;
  Json compacted = view(*NewDaemon(script));
  const std::size_t after = store_->ReadJournal()->size();
  EXPECT_LT(after * 2, before) << after << " of " << before << " entries kept";
  EXPECT_EQ(compacted, expected);
  auto d = NewDaemon(script);  // replays only the compacted journal
  EXPECT_EQ(store_->ReadJournal()->size(), after) << "nothing more to compact";
  EXPECT_EQ(view(*d), expected);
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
  EXPECT_EQ(State(*d, ends), "succeeded");
}

// A failed store commit leaves the scheduler ahead of the store. The library does not exit the
// process (it once called _Exit(70) inside CommitAndAct, so this test died): it stops deciding
// and acting, reports Failure(), answers mutations with that error, and serve exits. A restart
// on the store recovers what was committed: nothing of the failed batches.
TEST_F(DaemonTest, FailedCommitStopsTheDaemonWithoutExitingAndARestartRecovers) {
  auto d = NewDaemon();
  const auto kept = Submit(*d, {{"queue", "interactive"}});
  EXPECT_TRUE(d->Failure().ok());
  fail_commits_ = true;
  Json body{{"queue", "interactive"}, {"argv", {"sleep", "1"}}};
  auto r = d->Submit(me_, body);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("disk full (scripted)"), std::string::npos) << r.status().ToString();
  ASSERT_FALSE(d->Failure().ok());
  EXPECT_EQ(d->Failure().code(), StatusCode::kUnavailable);
  const auto launches = launcher_.launches().size();
  EXPECT_EQ(launches, 1u) << "the failed pid commit killed the second job's child; it never ran";
  fail_commits_ = false;  // even once the store works again, this daemon does nothing more
  now_ += kSecond;
  d->Step();
  EXPECT_EQ(launcher_.launches().size(), launches);
  auto c = d->Cancel(me_, JobId(kept));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(launcher_.signals().size(), 0u) << "nothing acted on";
  EXPECT_EQ(State(*d, kept), "running");

  d.reset();
  auto again = NewDaemon();
  EXPECT_TRUE(again->Failure().ok());
  auto jobs = (*again->ListJobs({}))["jobs"];
  ASSERT_EQ(jobs.size(), 1u) << jobs.dump();
  EXPECT_EQ(jobs[0]["id"].get<std::uint64_t>(), kept);
  EXPECT_EQ(State(*again, kept), "running");
  EXPECT_TRUE(again->CheckConsistency().ok()) << again->CheckConsistency().ToString();
}

}  // namespace
}  // namespace gpuslice::daemon
