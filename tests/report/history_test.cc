// The store's history: folding keeps totals (span, measured and idle time exactly; utilisation
// within rounding), compaction in small steps folds the same as in one, unknown utilisation
// stays unknown, old points go, and a report over compacted history gives the same GPU-hours
// as over the original points. On both stores (SQLite in a real file).
#include <unistd.h>

#include <filesystem>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "report/report.h"
#include "store/retention.h"
#include "store/store.h"

namespace gpuslice::store {
namespace {

constexpr Micros kDay = 24 * kHour;
constexpr Micros kT0 = 1796083200LL * kSecond;  // 2026-12-01T00:00:00Z

class HistoryTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("history_test_" + std::to_string(getpid()) + (GetParam() ? "_sqlite" : "_memory"));
    std::filesystem::remove_all(dir_);
    if (GetParam()) {
      auto s = OpenSqliteStore(dir_.string(), Sync::kProcess);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      store_ = std::move(s).value();
    } else {
      store_ = NewMemoryStore();
    }
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // `days` of one-minute points for two devices and a slice: utilisation varies, one hour in
  // six is unmeasured (-1), some minutes are half idle.
  void Fill(int days) {
    std::mt19937 rng(7);
    WriteBatch b;
    for (Micros t = kT0 + kMinute; t <= kT0 + days * kDay; t += kMinute) {
      for (const char* subject : {"device/0", "device/1", "slice/1"}) {
        SampleRecord p;
        p.time = t;
        p.subject = subject;
        p.span = kMinute;
        p.memory_used = static_cast<Bytes>(rng() % 1000);
        const bool unknown = ((t - kT0) / kHour) % 6 == 5;
        p.util_permille = unknown ? -1 : static_cast<int>(rng() % 1001);
        p.known = unknown ? 0 : kMinute;
        p.idle = unknown ? 0 : (rng() % 4 == 0 ? kMinute / 2 : 0);
        b.samples.push_back(p);
      }
      if (b.samples.size() > 5000) {
        ASSERT_TRUE(store_->Commit(b).ok());
        b = {};
      }
    }
    ASSERT_TRUE(store_->Commit(b).ok());
  }

  std::map<std::string, SampleSum> Totals() {
    auto r = store_->SumSamples(0, kT0 + 1000 * kDay, 0);
    EXPECT_TRUE(r.ok());
    std::map<std::string, SampleSum> out;
    for (auto& s : *r) out[s.subject] = s;
    return out;
  }
  std::size_t Points(const std::string& subject) { return store_->ListSamples(subject, 0)->size(); }

  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
};

TEST_P(HistoryTest, CompactionKeepsTotals) {
  Fill(3);
  const auto before = Totals();
  ASSERT_EQ(Points("slice/1"), 3u * 24 * 60);
  RetentionPolicy policy;  // 1 min for 2 days, 10 min to 35 days, hourly after
  auto st = ApplyRetention(*store_, policy, kT0 + 40 * kDay, 500);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_GT(st->steps, 3) << "small steps, not one transaction";
  EXPECT_EQ(st->dropped, 0);
  // 40 days on, every point is past 35 days: three days of hourly buckets.
  EXPECT_EQ(Points("slice/1"), 3u * 24);
  const auto after = Totals();
  for (const auto& [subject, b] : before) {
    const SampleSum& a = after.at(subject);
    EXPECT_EQ(a.span, b.span) << subject;
    EXPECT_EQ(a.known, b.known) << subject;
    EXPECT_EQ(a.idle, b.idle) << subject;
    // Each fold rounds a point's mean to the permille: at most half a permille of its measured
    // time, per level (1 min -> 10 min -> 1 h): at most 1 permille of the measured time.
    EXPECT_LE(std::llabs(a.util_known - b.util_known), b.known) << subject;
    EXPECT_NE(a.util_known, 0);
  }
}

TEST_P(HistoryTest, UnknownStaysUnknownAndTiersApplyByAge) {
  Fill(3);
  // At day 3: day 1 is past 2 days (10-minute buckets), days 2-3 stay as sampled.
  ASSERT_TRUE(ApplyRetention(*store_, RetentionPolicy{}, kT0 + 3 * kDay, 100000).ok());
  auto pts = *store_->ListSamples("slice/1", 0);
  std::size_t coarse = 0, unknown = 0;
  for (const auto& p : pts) {
    if (p.resolution == 10 * kMinute) {
      ++coarse;
      EXPECT_EQ(p.span, 10 * kMinute);
      EXPECT_EQ(p.time % (10 * kMinute), 0);
    }
    // A point made only of the unmeasured hour of every six: still unknown, never 0%.
    const Micros first = p.time - p.span + kMinute - kT0, last = p.time - kT0;
    if (first / kHour == last / kHour && (last / kHour) % 6 == 5) {
      EXPECT_EQ(p.util_permille, -1) << p.time;
      EXPECT_EQ(p.known, 0);
      ++unknown;
    }
  }
  EXPECT_EQ(coarse, 24u * 6);
  EXPECT_EQ(pts.size(), 24u * 6 + 2 * 24 * 60);
  EXPECT_GT(unknown, 0u);
}

TEST_P(HistoryTest, OldPointsAreDroppedAndSizeStaysBounded) {
  Fill(2);
  RetentionPolicy p;
  p.keep = kDay;
  auto st = ApplyRetention(*store_, p, kT0 + 2 * kDay + kHour, 1000);
  ASSERT_TRUE(st.ok());
  EXPECT_GT(st->dropped, 0);
  auto oldest = store_->OldestSample();
  ASSERT_TRUE(oldest.ok() && oldest->has_value());
  EXPECT_GE(**oldest, kT0 + kDay + kHour);
}

TEST_P(HistoryTest, ReportIsTheSameBeforeAndAfterCompaction) {
  Fill(3);
  WriteBatch b;
  SliceRecord s;
  s.id = SliceId(1);
  s.job = JobId(1);
  s.kind = SliceKind::kWhole;
  s.devices = {0, 1};
  s.milli = kOneGpu;
  s.active = false;
  s.created = kT0;
  s.released = kT0 + 3 * kDay;
  b.slices.push_back(s);
  JobRecord j;
  j.id = JobId(1);
  j.user = "alice";
  j.queue = "training";
  j.state = JobState::kSucceeded;
  j.submit_time = kT0;
  j.start_time = kT0;
  j.end_time = kT0 + 3 * kDay;
  j.slice = SliceId(1);
  b.jobs.push_back(j);
  ASSERT_TRUE(store_->Commit(b).ok());
  report::ReportOptions o;
  o.now = kT0 + 40 * kDay;
  o.period = {kT0, kT0 + 4 * kDay};
  auto r1 = report::BuildReport(*store_, o);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  ASSERT_TRUE(ApplyRetention(*store_, RetentionPolicy{}, o.now, 700).ok());
  auto r2 = report::BuildReport(*store_, o);
  ASSERT_TRUE(r2.ok());
  const auto& t1 = (*r1)["totals"];
  const auto& t2 = (*r2)["totals"];
  EXPECT_DOUBLE_EQ(t1["held_gpu_hours"].get<double>(), 144.0);  // 2 GPUs x 72 h
  // 1 hour in 6 unmeasured: 60 of 72 hours measured.
  EXPECT_DOUBLE_EQ(t1["measured_gpu_hours"].get<double>(), 120.0);
  EXPECT_DOUBLE_EQ(t1["unknown_gpu_hours"].get<double>(), 24.0);
  EXPECT_DOUBLE_EQ(t1["coverage_percent"].get<double>(), 83.3);
  for (const char* k : {"held_gpu_hours", "measured_gpu_hours", "unknown_gpu_hours", "idle_gpu_hours"}) {
    EXPECT_DOUBLE_EQ(t1[k].get<double>(), t2[k].get<double>()) << k;
  }
  EXPECT_NEAR(t1["used_gpu_hours"].get<double>(), t2["used_gpu_hours"].get<double>(), 0.01);
}

INSTANTIATE_TEST_SUITE_P(Stores, HistoryTest, ::testing::Values(true, false),
                         [](const auto& i) { return i.param ? std::string("Sqlite") : std::string("Memory"); });

// Points of an unmeasured slice: held hours are reported, used is unknown (null), not 0.
TEST(ReportUnknown, UnmeasuredSliceIsUnknownNotZero) {
  auto store = NewMemoryStore();
  WriteBatch b;
  SliceRecord s;
  s.id = SliceId(3);
  s.job = JobId(3);
  s.kind = SliceKind::kWhole;
  s.devices = {0};
  s.milli = kOneGpu;
  s.active = false;
  s.created = kT0;
  s.released = kT0 + 2 * kHour;
  b.slices.push_back(s);
  JobRecord j;
  j.id = JobId(3);
  j.user = "bob";
  j.queue = "training";
  j.state = JobState::kSucceeded;
  j.submit_time = kT0;
  j.start_time = kT0;
  j.end_time = kT0 + 2 * kHour;
  b.jobs.push_back(j);
  for (Micros t = kT0 + kMinute; t <= kT0 + 2 * kHour; t += kMinute) {
    b.samples.push_back({t, "slice/3", -1, -1, kMinute, 0, 0, 0});
  }
  ASSERT_TRUE(store->Commit(b).ok());
  report::ReportOptions o;
  o.now = kT0 + 3 * kHour;
  o.period = {kT0, kT0 + 3 * kHour};
  o.by = report::GroupBy::kUser;
  auto r = report::BuildReport(*store, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& t = (*r)["totals"];
  EXPECT_DOUBLE_EQ(t["held_gpu_hours"].get<double>(), 2.0);
  EXPECT_TRUE(t["used_gpu_hours"].is_null()) << t.dump();
  EXPECT_DOUBLE_EQ(t["unknown_gpu_hours"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(t["coverage_percent"].get<double>(), 0.0);
  EXPECT_TRUE(t["used_percent"].is_null());
  EXPECT_EQ((*r)["verdict"]["code"], "unmeasured") << (*r)["verdict"].dump();
  ASSERT_EQ((*r)["groups"].size(), 1u);
  EXPECT_EQ((*r)["groups"][0]["key"], "bob");
  EXPECT_TRUE((*r)["groups"][0]["used_gpu_hours"].is_null());
  // The timeline says unknown too, and the SVG draws no "used" bar for it.
  for (const auto& p : (*r)["timeline"]["points"]) EXPECT_TRUE(p["used_gpus"].is_null());
  EXPECT_EQ(report::TimelineSvg(*r).find("class=\"used\""), std::string::npos);
  EXPECT_NE(report::FormatTable(*r).find("unknown"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::store

namespace gpuslice::store {
namespace {

// The brief listings the report reads give the same fields as the full ones (SQLite extracts
// them in SQL).
TEST(BriefListings, MatchTheFullRecords) {
  const auto dir = std::filesystem::temp_directory_path() / ("brief_test_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  {
    auto store = std::move(OpenSqliteStore(dir.string(), Sync::kProcess)).value();
    WriteBatch b;
    for (int i = 1; i <= 3; ++i) {
      JobRecord j;
      j.id = JobId(static_cast<std::uint64_t>(i));
      j.user = i == 2 ? "b\xc3\xa9" : "alice";
      j.queue = i == 3 ? "training" : "interactive";
      j.state = i == 1 ? JobState::kReclaimed : JobState::kRunning;
      j.submit_time = 10 * i;
      j.start_time = 20 * i;
      j.end_time = i == 1 ? 99 : 0;
      j.deadline = 1000 + i;
      j.slice = SliceId(static_cast<std::uint64_t>(i));
      j.argv = {"x"};
      b.jobs.push_back(j);
      SliceRecord s;
      s.id = j.slice;
      s.job = j.id;
      s.kind = i == 3 ? SliceKind::kWhole : SliceKind::kShared;
      s.devices = i == 3 ? std::vector<int>{2, 13} : std::vector<int>{7};
      s.milli = i == 3 ? 1000 : 250;
      s.active = i != 1;
      s.created = 5 * i;
      s.released = i == 1 ? 99 : 0;
      b.slices.push_back(s);
    }
    ASSERT_TRUE(store->Commit(b).ok());
    auto full = *store->ListJobs();
    auto brief = store->ListJobsBrief();
    ASSERT_TRUE(brief.ok()) << brief.status().ToString();
    ASSERT_EQ(brief->size(), full.size());
    for (std::size_t i = 0; i < full.size(); ++i) {
      const JobRecord &f = full[i], &r = (*brief)[i];
      EXPECT_EQ(r.id, f.id);
      EXPECT_EQ(r.user, f.user);
      EXPECT_EQ(r.queue, f.queue);
      EXPECT_EQ(r.state, f.state);
      EXPECT_EQ(r.submit_time, f.submit_time);
      EXPECT_EQ(r.start_time, f.start_time);
      EXPECT_EQ(r.end_time, f.end_time);
      EXPECT_EQ(r.deadline, f.deadline);
      EXPECT_EQ(r.slice, f.slice);
    }
    auto sfull = *store->ListSlices(false);
    auto sbrief = *store->ListSlicesBrief();
    ASSERT_EQ(sbrief.size(), sfull.size());
    for (std::size_t i = 0; i < sfull.size(); ++i) {
      SliceRecord f = sfull[i];
      f.uuids.clear();
      EXPECT_EQ(sbrief[i], f);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpuslice::store

namespace gpuslice::store {
namespace {

// The worker the daemon runs folds on its own thread, and stops when asked.
TEST(RetentionWorker, FoldsOnItsThreadAndStops) {
  auto store = NewMemoryStore();
  WriteBatch b;
  for (Micros t = kT0 + kMinute; t <= kT0 + kHour; t += kMinute) {
    b.samples.push_back({t, "device/0", 500, 0, kMinute, kMinute, 0, 0});
  }
  ASSERT_TRUE(store->Commit(b).ok());
  RetentionWorker w(*store, RetentionPolicy{}, [] { return kT0 + 40 * kDay; }, std::chrono::milliseconds(5),
                    std::chrono::milliseconds(1));
  w.Start();
  for (int i = 0; i < 2000 && w.passes() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  w.Stop();
  EXPECT_GT(w.passes(), 0);
  auto pts = *store->ListSamples("device/0", 0);
  ASSERT_EQ(pts.size(), 1u);  // an hour of minutes, past 35 days: one hourly point
  EXPECT_EQ(pts[0].span, kHour);
  EXPECT_EQ(pts[0].util_permille, 500);
}

}  // namespace
}  // namespace gpuslice::store
