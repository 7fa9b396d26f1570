// The journal codec round-trips every scheduler event, and replaying a journal rebuilds the
// same scheduler state (what the daemon's recovery relies on).
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "daemon/journal.h"
#include "sched/scheduler.h"

namespace gpuslice::daemon {
namespace {

std::vector<sched::Event> Events() {
  sched::JobRequest shared;
  shared.kind = sched::SliceKind::kShared;
  shared.milli = 250;
  shared.memory = 8 * kGiB;
  sched::JobRequest whole;
  whole.gpus = 2;
  whole.time_limit = kHour;
  return {
      sched::DeviceAdded{1, {NodeId(1), DeviceIndex(0)}, "GPU-0", "H100-80GB", true, false, {}},
      sched::DeviceAdded{1, {NodeId(1), DeviceIndex(1)}, "GPU-1", "H100-80GB", true, true,
                         {{19, 0}, {14, 4}}},
      sched::DeviceAdded{1, {NodeId(1), DeviceIndex(2)}, "GPU-2", "H100-80GB", true, false, {}},
      sched::Submit{2, JobId(1), "alice", "interactive", shared},
      sched::Submit{3, JobId(2), "bob", "training", whole},
      sched::Submit{3, JobId(4), "carol", "training", whole, "vision"},  // a team named
      sched::Sample{4, {{SliceId(1), 50, 3, 1}}},
      // Unmeasured SM and memory traffic, memory-used change seen: the flags round-trip.
      sched::Sample{4, {{SliceId(1), 0, 0, 1, false, false, true, sched::Activity::kActive,
                         sched::Activity::kUnknown}}},
      sched::Tick{5},
      sched::Cancel{6, JobId(2)},
      sched::Requeue{6, JobId(1), "requeued: never started"},
      sched::Finish{7, JobId(1)},
      sched::ReconfigureDone{8, {NodeId(1), DeviceIndex(1)}, false, {{19, 0}}, "busy"},
      sched::DeviceRemoved{9, {NodeId(1), DeviceIndex(2)}, {}},
      // Jobs on it that never ran go back to pending instead of being stopped.
      sched::DeviceRemoved{9, {NodeId(1), DeviceIndex(3)}, {JobId(1), JobId(3)}},
  };
}

TEST(Journal, EveryEventRoundTrips) {
  for (const auto& e : Events()) {
    std::string text = EncodeEvent(e);
    auto back = DecodeEvent(text);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(EncodeEvent(*back), text);
    EXPECT_EQ(back->index(), e.index());
  }
}

TEST(Journal, ASubmitNamesItsTeamOnlyWhenItHasOne) {
  sched::Submit s{3, JobId(4), "carol", "training", {}, "vision"};
  auto back = DecodeEvent(EncodeEvent(s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::get<sched::Submit>(*back).team, "vision");
  s.team.clear();
  EXPECT_EQ(EncodeEvent(s).find("team"), std::string::npos) << "journals without teams stay as they were";
}

TEST(Journal, ADeviceRemovalNamesTheJobsItRequeuesOnlyWhenThereAreSome) {
  const std::string old = R"({"index":2,"node":1,"now":9,"t":"device_removed"})";
  EXPECT_EQ(EncodeEvent(sched::DeviceRemoved{9, {NodeId(1), DeviceIndex(2)}, {}}), old)
      << "entries written before the field existed read and write the same";
  auto back = DecodeEvent(R"({"index":2,"node":1,"now":9,"t":"device_removed","requeue":[4,7]})");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto& d = std::get<sched::DeviceRemoved>(*back);
  EXPECT_EQ(d.requeue, (std::vector<JobId>{JobId(4), JobId(7)}));
  EXPECT_EQ(DecodeEvent(R"({"index":2,"node":1,"now":9,"t":"device_removed","requeue":["x"]})").status().code(),
            StatusCode::kDataLoss);
}

TEST(Journal, ADevicesMemoryReservesRoundTripAndOlderEntriesHaveNone) {
  sched::DeviceAdded d{1, {NodeId(1), DeviceIndex(0)}, "GPU-0", "H200-141GB", true, false, {}};
  const std::string old = EncodeEvent(d);
  EXPECT_EQ(old.find("reserve"), std::string::npos) << "nothing set aside: written as before";
  d.reserved_memory = 768 * kMiB;
  d.context_reserve = 512 * kMiB;
  auto back = DecodeEvent(EncodeEvent(d));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(std::get<sched::DeviceAdded>(*back).reserved_memory, 768 * kMiB);
  EXPECT_EQ(std::get<sched::DeviceAdded>(*back).context_reserve, 512 * kMiB);
  auto older = DecodeEvent(old);
  ASSERT_TRUE(older.ok());
  EXPECT_EQ(std::get<sched::DeviceAdded>(*older).reserved_memory, 0);
  EXPECT_EQ(DecodeEvent(R"({"t":"device_added","now":1,"node":1,"index":0,"uuid":"u","model":"m","mig_capable":false,)"
                        R"("mig_enabled":false,"layout":[],"context_reserve":"x"})")
                .status()
                .code(),
            StatusCode::kDataLoss);
}

TEST(Journal, CorruptEntriesAreDataLoss) {
  EXPECT_EQ(DecodeEvent("{nope").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeEvent(R"({"t":"warp","now":1})").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeEvent(R"({"t":"finish","now":1})").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeEvent(R"({"t":"sample","now":1,"slices":[[1,0,0,1,3,7,0]]})").status().code(),
            StatusCode::kDataLoss);
}

TEST(Journal, NoOpTicksAndEmptySamplesNeedNoEntry) {
  EXPECT_FALSE(CanChangeState(sched::Tick{5}));
  EXPECT_FALSE(CanChangeState(sched::Sample{5, {}}));
  // An idle-looking sample ends an "unmeasured" stretch (the idle clock restarts there).
  EXPECT_TRUE(CanChangeState(sched::Sample{5, {{SliceId(1), 0, 0, 0}}}));
  EXPECT_TRUE(CanChangeState(sched::Sample{5, {{SliceId(1), 0, 0, 1}}}));
  EXPECT_TRUE(CanChangeState(sched::Finish{5, JobId(1)}));
}

TEST(Journal, ReplayRebuildsTheSameScheduler) {
  sched::Scheduler live(sched::DefaultConfig(), 7);
  std::vector<std::string> journal;
  for (const auto& e : Events()) {
    auto d = live.Handle(e);
    if (CanChangeState(e) || !d.empty()) journal.push_back(EncodeEvent(e));
  }
  sched::Scheduler replayed(sched::DefaultConfig(), 7);
  for (const auto& entry : journal) (void)replayed.Handle(DecodeEvent(entry).value());
  ASSERT_EQ(live.jobs().size(), replayed.jobs().size());
  for (const auto& [id, j] : live.jobs()) {
    EXPECT_EQ(replayed.jobs().at(id).state, j.state);
    EXPECT_EQ(replayed.jobs().at(id).slice, j.slice);
  }
  EXPECT_EQ(live.slices().size(), replayed.slices().size());
  EXPECT_EQ(live.devices().size(), replayed.devices().size());
  EXPECT_TRUE(replayed.CheckInvariants().ok());
}

// ---- compaction

// A busy host's life in the daemon's journaling rule (an entry for what can change the
// scheduler): 8 GPUs, jobs arriving, running for a while busy (one Sample a minute) or going
// idle (warned, reclaimed), finishing or cancelled; a Tick every minute.
class Host {
 public:
  // `reports`: every running slice's session also reports activity every 7 minutes,
  // alternately busy and idle (a notebook's kernels).
  explicit Host(std::uint64_t seed, bool reports = false) : rng_(seed), sched_(sched::DefaultConfig(), 7), reports_(reports) {
    for (std::uint32_t i = 0; i < 8; ++i) {
      Feed(sched::DeviceAdded{0, {NodeId(1), DeviceIndex(i)}, "GPU-" + std::to_string(i),
                              "H100-80GB", true, false, {}});
    }
  }

  // One simulated minute; returns the decisions of every event fed, formatted.
  std::string Minute() {
    now_ += kMinute;
    std::string out;
    std::uniform_int_distribution<int> pct(0, 99);
    if (pct(rng_) < 4) {
      sched::JobRequest r;
      std::string queue = "interactive";
      if (pct(rng_) < 40) {
        queue = "training";
        r.gpus = 1;
      } else {
        r.kind = sched::SliceKind::kShared;
        r.milli = 250;
        r.memory = 8 * kGiB;
      }
      JobId id(next_job_++);
      plan_[id] = {now_ + kMinute * (30 + pct(rng_) * 10), pct(rng_) < 25};
      out += Feed(sched::Submit{now_, id, "u" + std::to_string(id.value() % 3), queue, r});
    }
    sched::Sample sample{now_, {}};
    std::vector<JobId> finish, cancel, requeue;
    for (const auto& [sid, v] : sched_.slices()) {
      auto p = plan_.find(v.job);
      if (p == plan_.end()) continue;
      if (now_ >= p->second.end) {
        finish.push_back(v.job);
      } else if (!p->second.goes_idle || now_ - v.start_time < 20 * kMinute) {
        sample.slices.push_back({sid, 60, 10, 1});
      }
      if (pct(rng_) == 0) cancel.push_back(v.job);
    }
    if (!sample.slices.empty()) out += Feed(sample);
    if (reports_ && (now_ / kMinute) % 7 == 0) {
      std::vector<JobId> running;
      for (const auto& [sid, v] : sched_.slices()) running.push_back(v.job);
      const bool busy = (now_ / kMinute / 7) % 2 == 0;
      for (JobId j : running) out += Feed(sched::ActivityReport{now_, j, "jupyter", busy, now_ - kMinute, 1, 1});
    }
    // Now and then a job's command never ran (the daemon stopped before the go-ahead): it is
    // requeued once, its slice ends and it may start again on another (no random draw, so
    // the rest of the load is as it was).
    for (const auto& [sid, v] : sched_.slices()) {
      if (v.job.value() % 7 == 0 && requeued_.insert(v.job).second) requeue.push_back(v.job);
    }
    for (JobId j : requeue) out += Feed(sched::Requeue{now_, j, "never started"});
    for (JobId j : finish) out += Feed(sched::Finish{now_, j});
    for (JobId j : cancel) out += Feed(sched::Cancel{now_, j});
    out += Feed(sched::Tick{now_ + kSecond});
    return out;
  }

  std::string Feed(const sched::Event& e) {
    auto d = sched_.Handle(e);
    if (CanChangeState(e) || !d.empty()) journal_.push_back(EncodeEvent(e));
    std::string out;
    for (const auto& x : d) out += sched::FormatDecision(x) + "\n";
    return out;
  }

  const std::vector<std::string>& journal() const { return journal_; }
  sched::Scheduler& scheduler() { return sched_; }

 private:
  struct Plan {
    Micros end = 0;
    bool goes_idle = false;
  };
  std::mt19937_64 rng_;
  sched::Scheduler sched_;
  std::vector<std::string> journal_;
  std::map<JobId, Plan> plan_;
  std::set<JobId> requeued_;
  bool reports_ = false;
  std::uint64_t next_job_ = 1;
  Micros now_ = kSecond;
};

std::unique_ptr<sched::Scheduler> Replay(const std::vector<std::string>& journal,
                                         JournalCompactor* compactor = nullptr) {
  auto s = std::make_unique<sched::Scheduler>(sched::DefaultConfig(), 7);
  for (const auto& entry : journal) {
    auto e = DecodeEvent(entry).value();
    auto d = s->Handle(e);
    if (compactor) compactor->Observe(e, d, *s);
  }
  return s;
}

// Compaction drops most entries, and the compacted journal rebuilds a scheduler that is
// the same now and decides the same from then on.
TEST(JournalCompaction, RoundTripKeepsTheStateAndTheFuture) {
  Host host(11);
  for (int m = 0; m < 3 * 24 * 60; ++m) host.Minute();
  const std::vector<std::string> journal = host.journal();
  EXPECT_GT(std::count_if(journal.begin(), journal.end(),
                          [](const std::string& e) { return e.find(R"("t":"requeue")") != std::string::npos; }),
            10)
      << "requeued jobs are part of the load";
  JournalCompactor compactor;
  auto full = Replay(journal, &compactor);
  // The same but for the clock, which the last (unjournaled) Tick moved.
  auto state = [](const sched::Scheduler& s) {
    std::string d = SchedulerDigest(s);
    return d.substr(d.find('\n'));
  };
  ASSERT_EQ(state(*full), state(host.scheduler()));
  auto kept = compactor.Compact(journal, sched::DefaultConfig(), 7, *full);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_LT(kept->size() * 4, journal.size()) << kept->size() << " of " << journal.size();
  EXPECT_GT(full->slices().size(), 0u) << "some slices still run at the cut";
  auto compacted = Replay(*kept);
  EXPECT_EQ(SchedulerDigest(*compacted), SchedulerDigest(*full));
  // The future: the same events from here give the same decisions, minute by minute
  // (idle warnings and reclaims of the slices alive at the cut included).
  std::size_t seen = journal.size();
  for (int m = 0; m < 24 * 60; ++m) {
    host.Minute();
    // The minute's new entries, fed to both rebuilt schedulers.
    for (; seen < host.journal().size(); ++seen) {
      auto e = DecodeEvent(host.journal()[seen]).value();
      std::string a, b;
      for (const auto& d : full->Handle(e)) a += sched::FormatDecision(d) + "\n";
      for (const auto& d : compacted->Handle(e)) b += sched::FormatDecision(d) + "\n";
      ASSERT_EQ(a, b) << "minute " << m << ": " << host.journal()[seen];
    }
    if (m % 60 == 0) {
      ASSERT_EQ(SchedulerDigest(*compacted), SchedulerDigest(*full)) << "minute " << m;
    }
  }
  EXPECT_EQ(SchedulerDigest(*compacted), SchedulerDigest(*full));
  EXPECT_TRUE(compacted->CheckInvariants().ok());
}

// Activity reports read the GPU's last activity (the busy budget runs from the first busy
// report since it), so a report keeps the Sample before it: with sessions reporting busy and
// idle between active Samples, the compacted journal still rebuilds the same scheduler.
TEST(JournalCompaction, SessionsReportingActivityStillCompactExactly) {
  Host host(5, true);
  for (int m = 0; m < 2 * 24 * 60; ++m) host.Minute();
  const std::vector<std::string> journal = host.journal();
  EXPECT_GT(std::count_if(journal.begin(), journal.end(),
                          [](const std::string& e) { return e.find(R"("t":"activity")") != std::string::npos; }),
            100);
  JournalCompactor compactor;
  auto full = Replay(journal, &compactor);
  auto kept = compactor.Compact(journal, sched::DefaultConfig(), 7, *full);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_LT(kept->size() * 2, journal.size()) << kept->size() << " of " << journal.size();
  EXPECT_EQ(SchedulerDigest(*Replay(*kept)), SchedulerDigest(*full));
}

// A compactor that is given another journal than it observed refuses, and one whose result
// would not rebuild the scheduler it is compared with refuses too.
TEST(JournalCompaction, RefusesWhatItCannotProve) {
  Host host(3);
  for (int m = 0; m < 600; ++m) host.Minute();
  JournalCompactor compactor;
  auto full = Replay(host.journal(), &compactor);
  std::vector<std::string> shorter(host.journal().begin(), host.journal().end() - 1);
  EXPECT_FALSE(compactor.Compact(shorter, sched::DefaultConfig(), 7, *full).ok());
  sched::Scheduler other(sched::DefaultConfig(), 7);
  EXPECT_FALSE(compactor.Compact(host.journal(), sched::DefaultConfig(), 7, other).ok());
}

}  // namespace
}  // namespace gpuslice::daemon
