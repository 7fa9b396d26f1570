// A job whose start the daemon recorded but whose go-ahead never came (the daemon was killed in
// between, so nothing of the user's command ran) goes back to the queue, keeps its id, request,
// command, environment and submit time, and runs when it fits; after 3 such requeues the next
// one fails it with the reason. Real parts: the exec stub, a SQLite file, and a daemon killed
// with SIGKILL (in a child process) right after the commit that records a job's start, which
// is exactly the instant in question.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "daemon/daemon.h"
#include "devices/clock.h"
#include "devices/fake.h"
#include "exec/launcher.h"
#include "exec/proc.h"
#include "store/store.h"
#include "tests/daemon/shared_store.h"
#include "testing/files.h"

namespace gpuslice::daemon {
namespace {

using gpuslice::testing::Slurp;

namespace fs = std::filesystem;

// The SQLite store of a daemon that dies (SIGKILL, as kill -9) right after a commit that
// records a job's start: the pid is durable, and the go-ahead is never sent.
class DiesAfterStartCommit : public SharedStore {
 public:
  explicit DiesAfterStartCommit(std::unique_ptr<store::Store> s) : SharedStore(s.get()), owned_(std::move(s)) {}
  Status Commit(const store::WriteBatch& b) override {
    Status st = SharedStore::Commit(b);
    for (const auto& e : b.events) {
      if (st.ok() && e.type == "start") raise(SIGKILL);
    }
    return st;
  }

 private:
  std::unique_ptr<store::Store> owned_;
};

class RequeueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test: a job a test leaves running (the daemon is gone, its process is not)
    // may still append to its runs file after the next test has begun; it must not be that
    // test's file (seen under load: "2 hello" from the test before in a test of job 1).
    dir_ = fs::temp_directory_path() / ("requeue_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  // A job a test leaves running may still create files in dir_ (its log) while it is removed:
  // remove_all then fails ("Directory not empty", seen under load); try again a few times.
  void TearDown() override {
    std::error_code ec;
    for (int i = 0; i < 50; ++i) {
      fs::remove_all(dir_, ec);
      if (!ec) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "cannot remove " << dir_ << ": " << ec.message();
  }

  std::string StateDir() const { return (dir_ / "state").string(); }

  // Job `id` (an H100 job) started on `spec` and the daemon killed between the start and the
  // go-ahead: its stub is gone, its record says running on device 0 (the lowest free index).
  void CrashOnH100(const std::string& spec, JobId id, store::JobRecord* first) {
    spec_ = spec;
    Json body = Body();
    body["model"] = "H100-80GB";
    ASSERT_EQ(CrashAtStart(&body, id), "");
    *first = Stored(id);
    ASSERT_EQ(first->state, store::JobState::kRunning);
    ASSERT_TRUE(StubGone(first->pid));
    ASSERT_EQ(SliceOf(*first).devices, std::vector<int>{0});
  }

  // No slice left, in the daemon's view and in the store, and the two agree.
  void ExpectEverySliceReleased(Daemon& d) {
    EXPECT_TRUE(d.Slices()["slices"].empty());
    auto active = store::OpenSqliteReader(StateDir()).value()->ListSlices(true);
    ASSERT_TRUE(active.ok());
    EXPECT_TRUE(active->empty()) << "every slice it held is released in the store";
    EXPECT_TRUE(d.CheckConsistency().ok()) << d.CheckConsistency().ToString();
  }
  fs::path Runs() const { return dir_ / "runs"; }

  // Null if the store does not open (the caller reports it).
  std::unique_ptr<Daemon> NewDaemon(bool dies_after_start) {
    DaemonOptions o;
    o.state_dir = StateDir();
    o.simulated = true;
    o.grace = kSecond;
    auto s = store::OpenSqliteStore(StateDir(), store::Sync::kProcess);
    if (!s.ok()) return nullptr;
    std::unique_ptr<store::Store> st = std::move(s).value();
    if (dies_after_start) st = std::make_unique<DiesAfterStartCommit>(std::move(st));
    auto fake = devices::FakeBackend::Create(spec_, devices::SystemClock());
    if (!fake.ok()) return nullptr;
    return std::make_unique<Daemon>(sched::DefaultConfig(), o, std::move(st), std::move(fake).value(),
                                    exec::NewProcessLauncher("", 0), devices::SystemClock());
  }

  Json Body() const {
    return Json{{"queue", "training"},
                {"gpus", 1},
                {"cwd", dir_.string()},
                {"env", {{"PATH", "/usr/bin:/bin"}, {"GREETING", "hello"}}},
                {"argv", {"sh", "-c", "echo \"$GPUSLICE_JOB_ID $GREETING\" >> " + Runs().string()}}};
  }

  // Runs a daemon in a child process that dies right after committing a job's start (after
  // submitting `body`, if given; else a restart's requeue starts the job again). Returns ""
  // when it died so, else what happened. Then waits until the job's exec stub, left without
  // its go-ahead, has recorded that it never started.
  std::string CrashAtStart(const Json* body, JobId job) {
    pid_t pid = fork();
    if (pid < 0) return "fork failed";
    if (pid == 0) {
      auto d = NewDaemon(true);
      if (d == nullptr) _exit(10);
      if (!d->Start().ok()) _exit(11);
      if (body != nullptr && !d->Submit(me_, *body).ok()) _exit(12);
      // At a restart the stub may still be exiting: the job is then re-adopted and reaped by
      // a later step, which requeues it.
      for (int i = 0; i < 500; ++i) {
        d->Step();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      _exit(13);  // never started the job: did not die
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return "waitpid failed";
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
      return "the daemon did not die after the start's commit: status " + std::to_string(status);
    }
    const fs::path exit_file = fs::path(StateDir()) / "status" / (std::to_string(job.value()) + ".exit");
    for (int i = 0; i < 500; ++i) {
      if (Slurp(exit_file).find("never-started") != std::string::npos) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return "the stub recorded no never-started in " + exit_file.string() + ": '" + Slurp(exit_file) + "'";
  }

  // The job as the store holds it between crashes (no connection is kept across a fork).
  store::JobRecord Stored(JobId id) {
    auto s = store::OpenSqliteReader(StateDir());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return {};
    auto j = (*s)->GetJob(id);
    EXPECT_TRUE(j.ok() && j->has_value());
    return j.ok() && j->has_value() ? **j : store::JobRecord{};
  }

  // Steps the daemon until the job has ended; returns its view.
  Json WaitEnded(Daemon& d, JobId id) {
    Json j;
    for (int i = 0; i < 1000; ++i) {
      d.Step();
      j = (*d.GetJob(id))["job"];
      const std::string st = j["state"];
      if (st != "pending" && st != "starting" && st != "running" && st != "stopping") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return j;
  }

  std::vector<store::EventRecord> EventsOf(Daemon& d, JobId id, std::string_view type) {
    std::vector<store::EventRecord> out;
    auto events = d.Events(0, id, 1000);
    EXPECT_TRUE(events.ok()) << events.status().ToString();
    if (!events.ok()) return out;
    for (const auto& e : (*events)["events"]) {
      if (e["type"].get<std::string>() != type) continue;
      out.push_back({e["seq"].get<std::int64_t>(), e["time_us"].get<Micros>(), id,
                     e["type"].get<std::string>(), e["message"].get<std::string>()});
    }
    return out;
  }

  // The first slice a job got, from the store.
  store::SliceRecord SliceOf(const store::JobRecord& j) {
    auto s = store::OpenSqliteReader(StateDir());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return {};
    auto all = (*s)->ListSlices(false);
    EXPECT_TRUE(all.ok());
    if (all.ok()) {
      for (const auto& x : *all) {
        if (x.id == j.slice) return x;
      }
    }
    ADD_FAILURE() << "no slice " << j.slice.value();
    return {};
  }

  // Until the exec stub is gone (a zombie counts as gone): a restart then reads its end.
  static bool StubGone(int pid) {
    for (int i = 0; i < 500; ++i) {
      if (!exec::ProcessStartTicks(pid)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  fs::path dir_;
  std::string spec_ = "1xH100-80GB";  // the simulated devices of the next daemon
  Caller me_{static_cast<std::int64_t>(geteuid()), static_cast<std::int64_t>(getegid())};
};

TEST_F(RequeueTest, AJobTheDaemonDiedBeforeGivingTheGoAheadRunsLaterWithTheSameId) {
  const JobId id(1);
  const Json body = Body();
  ASSERT_EQ(CrashAtStart(&body, id), "");
  const store::JobRecord first = Stored(id);
  EXPECT_EQ(first.state, store::JobState::kRunning) << "the start (its pid) was committed";
  EXPECT_GT(first.pid, 0);
  EXPECT_FALSE(fs::exists(Runs())) << "nothing ran";
  // Killed again at the same point once: the restart requeued it and started it again.
  ASSERT_EQ(CrashAtStart(nullptr, id), "");
  const store::JobRecord second = Stored(id);
  EXPECT_EQ(second.never_started_requeues, 1);
  EXPECT_EQ(second.state, store::JobState::kRunning);
  EXPECT_NE(second.slice, first.slice) << "the first slice was released";
  EXPECT_EQ(second.submit_time, first.submit_time) << "its place in the queue";
  EXPECT_FALSE(fs::exists(Runs())) << "nothing ran";

  auto d = NewDaemon(false);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->Start().ok());
  Json j = WaitEnded(*d, id);
  EXPECT_EQ(j["state"], "succeeded") << j.dump();
  EXPECT_EQ(j["exit_code"], 0) << j.dump();
  EXPECT_EQ(j["submit_time_us"], first.submit_time);
  EXPECT_EQ(j["argv"], body["argv"]);
  EXPECT_EQ(Slurp(Runs()), "1 hello\n") << "it ran once, same id, same environment";
  auto requeues = EventsOf(*d, id, "requeue");
  ASSERT_EQ(requeues.size(), 2u);
  EXPECT_NE(requeues[0].message.find("requeued: the daemon stopped between recording the start "
                                     "and the go-ahead, so nothing ran"),
            std::string::npos)
      << requeues[0].message;
  EXPECT_EQ(EventsOf(*d, id, "start").size(), 3u) << "two starts that never got the go-ahead";
  auto exits = EventsOf(*d, id, "exit");
  ASSERT_EQ(exits.size(), 1u) << "one end: the run that got its go-ahead";
  EXPECT_EQ(exits[0].message, "job 1 succeeded");
  auto log = d->LogPath(id);
  ASSERT_TRUE(log.ok());
  EXPECT_NE(Slurp(*log).find("gpuslice: requeued: "), std::string::npos) << Slurp(*log);
  ExpectEverySliceReleased(*d);
}

TEST_F(RequeueTest, AJobThatNeverStartsAgainAndAgainFailsAfterThreeRequeues) {
  const JobId id(1);
  const Json body = Body();
  ASSERT_EQ(CrashAtStart(&body, id), "");
  for (int i = 1; i <= 3; ++i) {
    ASSERT_EQ(CrashAtStart(nullptr, id), "") << "crash " << i + 1;
    EXPECT_EQ(Stored(id).never_started_requeues, i);
  }
  auto d = NewDaemon(false);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->Start().ok());
  Json j = WaitEnded(*d, id);
  EXPECT_EQ(j["state"], "failed") << j.dump();
  const std::string reason = j["reason"];
  EXPECT_EQ(reason.rfind("never started: ", 0), 0u) << reason;
  EXPECT_NE(reason.find("this happened 4 times and it was requeued 3 times, the limit"), std::string::npos) << reason;
  EXPECT_TRUE(j["exit_code"].is_null()) << j.dump();
  EXPECT_FALSE(fs::exists(Runs())) << "nothing ran, ever";
  EXPECT_EQ(EventsOf(*d, id, "requeue").size(), 3u);
  EXPECT_EQ(EventsOf(*d, id, "start").size(), 4u);
  EXPECT_TRUE(d->Slices()["slices"].empty());
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
  // The device is free again: the next job runs.
  auto r = d->Submit(me_, Body());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const JobId next((*r)["job"]["id"].get<std::uint64_t>());
  EXPECT_EQ(WaitEnded(*d, next)["state"], "succeeded");
  EXPECT_EQ(Slurp(Runs()), std::to_string(next.value()) + " hello\n");
}

TEST_F(RequeueTest, ARequeuedJobRunsWithoutTheRequeueReasonAndCountsItsRequeue) {
  const JobId id(1);
  Json body = Body();
  body["argv"] = {"sh", "-c", "echo \"$GPUSLICE_JOB_ID $GREETING\" >> " + Runs().string() + "; sleep 2"};
  ASSERT_EQ(CrashAtStart(&body, id), "");
  ASSERT_TRUE(StubGone(Stored(id).pid));
  auto d = NewDaemon(false);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->Start().ok());
  Json j;
  for (int i = 0; i < 500; ++i) {
    d->Step();
    j = (*d->GetJob(id))["job"];
    if (j["state"] == "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["reason"], "") << "it runs: why it was requeued no longer holds";
  EXPECT_EQ(j["requeues"], 1) << j.dump();
  const Json listed = (*d->ListJobs({}))["jobs"];
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["requeues"], 1) << listed.dump();
  j = WaitEnded(*d, id);
  EXPECT_EQ(j["state"], "succeeded") << j.dump();
  EXPECT_EQ(j["requeues"], 1) << j.dump();
  // The record of why is kept in the events and the log.
  auto requeues = EventsOf(*d, id, "requeue");
  ASSERT_EQ(requeues.size(), 1u);
  EXPECT_NE(requeues[0].message.find("requeued: the daemon stopped between"), std::string::npos)
      << requeues[0].message;
  EXPECT_NE(Slurp(*d->LogPath(id)).find("gpuslice: requeued: "), std::string::npos);
  // A job never requeued says 0.
  auto r = d->Submit(me_, Body());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["job"]["requeues"], 0) << r->dump();
}

// The device a never-started job was placed on is gone at the restart: nothing of the job ran
// there, so it is requeued like any never-started job (not ended "device lost") and runs on the
// other device. (A job that did run there still ends "device lost": state_test.cc.)
TEST_F(RequeueTest, ANeverStartedJobWhoseDeviceVanishedWhileTheDaemonWasDownRunsOnAnother) {
  const JobId id(1);
  store::JobRecord first;
  ASSERT_NO_FATAL_FAILURE(CrashOnH100("2xH100-80GB", id, &first));
  const store::SliceRecord was = SliceOf(first);
  // While the daemon was down its device went: index 0 now reports another model (the fake's
  // UUIDs follow the index, so it is another device); the other H100 stays.
  spec_ = "1xA100-80GB,1xH100-80GB";
  const int other = 1;

  auto d = NewDaemon(false);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->Start().ok());
  Json j = WaitEnded(*d, id);
  EXPECT_EQ(j["state"], "succeeded") << j.dump();
  EXPECT_EQ(j["requeues"], 1) << j.dump();
  EXPECT_EQ(Slurp(Runs()), "1 hello\n") << "it ran once, same id, same environment";
  const store::JobRecord last = Stored(id);
  EXPECT_EQ(SliceOf(last).devices, std::vector<int>{other}) << "on the device that is still there";
  auto requeues = EventsOf(*d, id, "requeue");
  ASSERT_EQ(requeues.size(), 1u);
  EXPECT_NE(requeues[0].message.find(fmt::format("and its device {} ({}) vanished while the daemon was down",
                                                 was.devices[0], was.uuids.at(0))),
            std::string::npos)
      << requeues[0].message;
  for (const auto& e : EventsOf(*d, id, "stop")) ADD_FAILURE() << "stopped: " << e.message;
  EXPECT_EQ(EventsOf(*d, id, "start").size(), 2u);
  ExpectEverySliceReleased(*d);
}

// Two devices went: requeued from the first, the job is placed on the second before that one
// is removed too (the scheduler takes the lowest free index); never exec'd there, it goes back
// again, uncounted, and runs on the third.
TEST_F(RequeueTest, AJobRequeuedFromAVanishedDeviceAndPlacedOnAnotherThatVanishedRunsOnAThird) {
  const JobId id(1);
  store::JobRecord first;
  ASSERT_NO_FATAL_FAILURE(CrashOnH100("3xH100-80GB", id, &first));
  spec_ = "2xA100-80GB,1xH100-80GB";  // devices 0 and 1 are other models now
  auto d = NewDaemon(false);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->Start().ok());
  Json j = WaitEnded(*d, id);
  EXPECT_EQ(j["state"], "succeeded") << j.dump();
  EXPECT_EQ(j["requeues"], 1) << "one start that never got its go-ahead";
  EXPECT_EQ(Slurp(Runs()), "1 hello\n");
  EXPECT_EQ(SliceOf(Stored(id)).devices, std::vector<int>{2});
  auto requeues = EventsOf(*d, id, "requeue");
  ASSERT_EQ(requeues.size(), 2u);
  EXPECT_NE(requeues[0].message.find("vanished while the daemon was down"), std::string::npos) << requeues[0].message;
  EXPECT_NE(requeues[1].message.find("requeued: its device 1 ("), std::string::npos) << requeues[1].message;
  EXPECT_NE(requeues[1].message.find("vanished before the job started, so nothing ran"), std::string::npos)
      << requeues[1].message;
  for (const auto& e : EventsOf(*d, id, "stop")) ADD_FAILURE() << "stopped: " << e.message;
  ExpectEverySliceReleased(*d);
}

}  // namespace
}  // namespace gpuslice::daemon
