// One contract for every Store implementation (SQLite and in-memory).
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "store/codec.h"
#include "store/store.h"

namespace gpuslice::store {
namespace {

struct Impl {
  std::string name;
  std::function<std::unique_ptr<Store>(const std::string& dir)> open;
};

class StoreContract : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("store_contract_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    store_ = GetParam().open(dir_.string());
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
};

JobRecord Job(std::uint64_t id, JobState state = JobState::kPending) {
  JobRecord j;
  j.id = JobId(id);
  j.user = "alice";
  j.uid = 1000;
  j.gid = 1000;
  j.queue = "interactive";
  j.milli = 250;
  j.memory = 10 * kGiB;
  j.argv = {"python", "train.py", "--lr=3e-4"};
  j.cwd = "/home/alice";
  j.state = state;
  j.submit_time = 1'000'000 + static_cast<Micros>(id);
  return j;
}

TEST_P(StoreContract, EmptyStoreHasNothing) {
  EXPECT_TRUE(store_->ListJobs()->empty());
  EXPECT_TRUE(store_->ListSlices(false)->empty());
  EXPECT_TRUE(store_->ReadJournal()->empty());
  EXPECT_FALSE(store_->GetJob(JobId(1))->has_value());
  EXPECT_FALSE(store_->GetMeta("seed")->has_value());
}

TEST_P(StoreContract, AnEndedJobIsStoredWithoutItsEnvironment) {
  JobRecord j = Job(1, JobState::kRunning);
  j.env = {{"HF_TOKEN", "hf_secret"}, {"PATH", "/usr/bin"}};
  ASSERT_TRUE(store_->Commit(WriteBatch{.jobs = {j}}).ok());
  EXPECT_EQ((*store_->GetJob(JobId(1)))->env, j.env);  // a restart may still need it
  for (JobState end : {JobState::kSucceeded, JobState::kFailed, JobState::kLost,
                       JobState::kRejected, JobState::kCancelled}) {
    j.state = end;
    ASSERT_TRUE(store_->Commit(WriteBatch{.jobs = {j}}).ok());
    auto got = store_->GetJob(JobId(1));
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_TRUE((*got)->env.empty()) << JobStateName(end);
    EXPECT_EQ((*got)->argv, j.argv);  // the rest stays
  }
  // Requeued (preempted) jobs are pending, not ended: they keep it to start again.
  JobRecord p = Job(2, JobState::kPending);
  p.env = {{"KEY", "v"}};
  ASSERT_TRUE(store_->Commit(WriteBatch{.jobs = {p}}).ok());
  EXPECT_EQ((*store_->GetJob(JobId(2)))->env, p.env);
}

TEST_P(StoreContract, JobsAreUpsertedById) {
  WriteBatch b;
  b.jobs = {Job(2), Job(1)};
  ASSERT_TRUE(store_->Commit(b).ok());
  JobRecord running = Job(1, JobState::kRunning);
  running.pid = 4242;
  running.pid_start_ticks = 99;
  running.slice = SliceId(7);
  running.exit_code = 3;
  ASSERT_TRUE(store_->Commit(WriteBatch{.jobs = {running}}).ok());

  auto jobs = store_->ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0], running);  // ordered by id, replaced in place
  EXPECT_EQ((*jobs)[1], Job(2));
  auto one = store_->GetJob(JobId(1));
  ASSERT_TRUE(one.ok() && one->has_value());
  EXPECT_EQ(**one, running);
}

TEST_P(StoreContract, SlicesFilterByActive) {
  SliceRecord a{.id = SliceId(1), .job = JobId(1), .kind = SliceKind::kWhole, .devices = {0, 1},
                .uuids = {"GPU-a", "GPU-b"}, .milli = 1000};
  SliceRecord b{.id = SliceId(2), .job = JobId(2), .kind = SliceKind::kShared, .devices = {2},
                .uuids = {"GPU-c"}, .milli = 250, .memory_cap = kGiB};
  SliceRecord c{.id = SliceId(3), .job = JobId(3), .kind = SliceKind::kMig, .devices = {3},
                .uuids = {"GPU-d"}, .milli = 1000, .memory_cap = 10 * kGiB,
                .mig = MigPlacement{.profile_id = 19, .start = 6}};
  ASSERT_TRUE(store_->Commit(WriteBatch{.slices = {a, b, c}}).ok());
  a.active = false;
  a.released = 5;
  ASSERT_TRUE(store_->Commit(WriteBatch{.slices = {a}}).ok());
  auto active = store_->ListSlices(true);
  ASSERT_TRUE(active.ok());
  ASSERT_EQ(active->size(), 2u);
  EXPECT_EQ((*active)[0], b);
  EXPECT_EQ((*active)[1], c) << "kind and MIG placement come back typed";
  auto all = store_->ListSlices(false);
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0], a);
}

TEST_P(StoreContract, EventsGetIncreasingSequenceAndFilter) {
  WriteBatch b;
  b.events = {{0, 10, JobId(1), "submit", "job 1 submitted"},
              {0, 11, JobId(2), "submit", "job 2 submitted"},
              {0, 12, JobId(1), "start", "job 1 started"}};
  ASSERT_TRUE(store_->Commit(b).ok());
  auto all = store_->ListEvents(0, JobId(), 100);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_LT((*all)[0].seq, (*all)[1].seq);
  EXPECT_LT((*all)[1].seq, (*all)[2].seq);
  EXPECT_EQ((*all)[2].type, "start");
  auto job1 = store_->ListEvents(0, JobId(1), 100);
  ASSERT_EQ(job1->size(), 2u);
  auto after = store_->ListEvents((*all)[0].seq, JobId(), 1);
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].job, JobId(2));
}

TEST_P(StoreContract, SamplesAndJournalAppendInOrder) {
  WriteBatch b;
  b.samples = {{100, "device/0", 500, kGiB}, {100, "slice/1", 0, 0}, {200, "device/0", 0, 0}};
  b.journal = {"first", "second"};
  ASSERT_TRUE(store_->Commit(b).ok());
  ASSERT_TRUE(store_->Commit(WriteBatch{.journal = {"third"}}).ok());
  auto dev = store_->ListSamples("device/0", 150);
  ASSERT_TRUE(dev.ok());
  ASSERT_EQ(dev->size(), 1u);
  EXPECT_EQ((*dev)[0].time, 200);
  EXPECT_EQ(*store_->ReadJournal(), (std::vector<std::string>{"first", "second", "third"}));
}

TEST_P(StoreContract, ReplaceJournalReplacesAllOfItAndAppendsContinueAfter) {
  ASSERT_TRUE(store_->Commit(WriteBatch{.journal = {"a", "b", "c", "d"}}).ok());
  ASSERT_TRUE(store_->ReplaceJournal({"b", "d"}).ok());
  EXPECT_EQ(*store_->ReadJournal(), (std::vector<std::string>{"b", "d"}));
  ASSERT_TRUE(store_->Commit(WriteBatch{.journal = {"e"}}).ok());
  EXPECT_EQ(*store_->ReadJournal(), (std::vector<std::string>{"b", "d", "e"}));
  ASSERT_TRUE(store_->ReplaceJournal({}).ok());
  EXPECT_TRUE(store_->ReadJournal()->empty());
}

TEST_P(StoreContract, MetaRoundTripsAndOverwrites) {
  ASSERT_TRUE(store_->PutMeta("seed", "1").ok());
  ASSERT_TRUE(store_->PutMeta("seed", "2").ok());
  EXPECT_EQ(**store_->GetMeta("seed"), "2");
}

TEST_P(StoreContract, EmptyBatchIsANoOp) {
  EXPECT_TRUE(store_->Commit(WriteBatch{}).ok());
  EXPECT_TRUE(store_->ListJobs()->empty());
}

INSTANTIATE_TEST_SUITE_P(
    All, StoreContract,
    ::testing::Values(
        Impl{"memory", [](const std::string&) { return NewMemoryStore(); }},
        Impl{"sqlite",
             [](const std::string& dir) -> std::unique_ptr<Store> {
               auto s = OpenSqliteStore(dir);
               return s.ok() ? std::move(s).value() : nullptr;
             }}),
    [](const auto& info) { return info.param.name; });

TEST(JobCodec, RejectsMissingField) {
  nlohmann::json j = JobToJson(Job(1));
  j.erase("queue");
  auto r = JobFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("queue"), std::string::npos);
}

// A job's requested kind is typed in memory and its name on disk ("" when the queue's default);
// a name the store did not write is data loss naming the field.
TEST(JobCodec, RequestedKindIsTypedAndStoredByName) {
  JobRecord job = Job(1);
  job.kind = SliceKind::kMps;
  nlohmann::json j = JobToJson(job);
  EXPECT_EQ(j["kind"], "mps");
  auto r = JobFromJson(j);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kind, SliceKind::kMps);
  job.kind.reset();
  j = JobToJson(job);
  EXPECT_EQ(j["kind"], "");
  r = JobFromJson(j);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kind, std::nullopt);
  j["kind"] = "gigantic";
  r = JobFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("job record: kind"), std::string::npos) << r.status().ToString();
}

// The count of never-started requeues round-trips; a record written before it existed reads 0.
TEST(JobCodec, NeverStartedRequeuesRoundTripAndDefaultToZero) {
  JobRecord job = Job(1);
  job.never_started_requeues = 2;
  nlohmann::json j = JobToJson(job);
  auto r = JobFromJson(j);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->never_started_requeues, 2);
  j.erase("never_started_requeues");
  r = JobFromJson(j);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->never_started_requeues, 0);
}

// Kind and MIG placement are typed in memory and names on disk ("mig", "profile=19 start=6"),
// as before they were typed; a text the store did not write is data loss naming the field and
// the value, never a slice of another kind or a MIG slice without its place.
TEST(SliceCodec, KindAndMigPlacementAreNamesOnDiskAndCheckedOnTheWayBack) {
  SliceRecord s{.id = SliceId(3), .job = JobId(3), .kind = SliceKind::kMig, .devices = {3},
                .mig = MigPlacement{.profile_id = 19, .start = 6}};
  nlohmann::json j = SliceToJson(s);
  EXPECT_EQ(j["kind"], "mig");
  EXPECT_EQ(j["mig"], "profile=19 start=6");
  auto back = SliceFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, s);
  s.kind = SliceKind::kWhole;
  s.mig.reset();
  EXPECT_EQ(SliceToJson(s)["mig"], "");
  for (auto [field, bad] : {std::pair{"kind", "fractional"}, {"mig", "profile=19"}, {"mig", "profile=19 start=6x"},
                            {"mig", "profile=-1 start=0"}}) {
    nlohmann::json b = j;
    b[field] = bad;
    auto r = SliceFromJson(b);
    ASSERT_FALSE(r.ok()) << field << " = " << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace gpuslice::store
