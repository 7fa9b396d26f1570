// The journal codec round-trips every scheduler event, and replaying a journal rebuilds the
// same scheduler state (what the daemon's recovery relies on).
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
      sched::Sample{4, {{SliceId(1), 50, 3, 1}}},
      // Unmeasured SM and memory traffic, memory-used change seen: the flags round-trip.
      sched::Sample{4, {{SliceId(1), 0, 0, 1, false, false, true, sched::Activity::kActive,
                         sched::Activity::kUnknown}}},
      sched::Tick{5},
      sched::Cancel{6, JobId(2)},
      sched::Finish{7, JobId(1)},
      sched::ReconfigureDone{8, {NodeId(1), DeviceIndex(1)}, false, {{19, 0}}, "busy"},
      sched::DeviceRemoved{9, {NodeId(1), DeviceIndex(2)}},
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

}  // namespace
}  // namespace gpuslice::daemon
