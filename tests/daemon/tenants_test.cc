// Hostile tenants, in process (issue #32): the daemon's own defences against one user who wants
// to hurt the others, through Daemon and its real API handler over the memory store and the fake
// launcher. Per class: JSON nested deep enough to overflow a recursive walk, refused before the
// tree is built, with errors that never echo it; per-user storage quotas with errors naming the
// limit, and the memory given back once jobs end; submit idempotency keys, durable in the store;
// logs offsets past the end; the submitter's umask; the report gate; the writer-first lock.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "api/bounded_json.h"
#include "daemon/daemon.h"
#include "daemon/routes.h"
#include "daemon/rw_mutex.h"
#include "devices/fake.h"
#include "exec/fake_launcher.h"
#include "store/store.h"
#include "tests/daemon/shared_store.h"

namespace gpuslice::daemon {
namespace {

using ::testing::HasSubstr;

class TenantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tenants_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Daemon> NewDaemon(UserQuotas quotas = {}) {
    DaemonOptions o;
    o.state_dir = dir_.string();
    o.simulated = true;
    o.quotas = quotas;
    auto backend = devices::FakeBackend::Create("1xH100-80GB", [this] { return now_; });
    auto d = std::make_unique<Daemon>(sched::DefaultConfig(), o, std::make_unique<SharedStore>(store_.get()),
                                      std::move(backend).value(), std::make_unique<exec::FakeLauncherRef>(&launcher_),
                                      [this] { return now_; });
    EXPECT_TRUE(d->Start().ok());
    return d;
  }
  // A request through the real handler, as a Unix-socket caller of this uid.
  api::HttpResponse Call(Daemon& d, std::string method, std::string target, std::string body = "") {
    api::HttpRequest r;
    r.method = std::move(method);
    const std::size_t q = target.find('?');
    r.path = target.substr(0, q);
    if (q != std::string::npos) {
      const std::string query = target.substr(q + 1);
      for (std::size_t i = 0; i < query.size();) {
        std::size_t amp = query.find('&', i);
        if (amp == std::string::npos) amp = query.size();
        const std::string kv = query.substr(i, amp - i);
        const std::size_t eq = kv.find('=');
        r.query[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
        i = amp + 1;
      }
    }
    r.body = std::move(body);
    r.peer.authenticated = true;
    r.peer.unix_socket = true;
    r.peer.uid = me_.uid;
    r.peer.gid = me_.gid;
    r.headers["host"] = "localhost";
    return MakeApiHandler(d)(r);
  }
  Result<Json> Submit(Daemon& d, Json body) {
    if (!body.contains("argv")) body["argv"] = {"sleep", "100"};
    return d.Submit(me_, body);
  }

  std::filesystem::path dir_;
  Micros now_ = 1'000 * kSecond;
  std::unique_ptr<store::Store> store_ = store::NewMemoryStore();
  exec::FakeLauncher launcher_;
  Caller me_{static_cast<std::int64_t>(geteuid()), static_cast<std::int64_t>(getegid())};
};

// ---- class 1: JSON nested deep enough to end a recursive walk --------------------------------

TEST(BoundedJson, DepthIsCountedWithoutParsingAndStringsDoNotCount) {
  EXPECT_EQ(api::JsonDepth("{}", 100), 1);
  EXPECT_EQ(api::JsonDepth(R"({"a":[1,{"b":[]}]})", 100), 4);
  EXPECT_EQ(api::JsonDepth(R"({"a":"[[[[{{{{\"[["})", 100), 1) << "brackets inside strings, escaped quotes too";
  EXPECT_EQ(api::JsonDepth(std::string(1'000'000, '['), 40), 41) << "stops as soon as it passes the limit";
}

TEST(BoundedJson, DeepOrLargeInputIsRefusedNamingTheLimitNeverTheValue) {
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  auto r = api::ParseBoundedJson(deep, "body");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("nested deeper than 32"));
  EXPECT_LT(r.status().message().size(), 200u);
  auto big = api::ParseBoundedJson(std::string(2000, ' '), "body", {.max_bytes = 1000, .max_depth = 8});
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(), HasSubstr("2000 bytes of JSON, at most 1000"));
  auto ok = api::ParseBoundedJson(std::string(32, '[') + std::string(32, ']'), "body");
  EXPECT_TRUE(ok.ok()) << "exactly the limit is fine";
}

TEST(BoundedJson, ShownValuesAreBoundedAndNeverNested) {
  EXPECT_EQ(api::ShownJson(Json::parse(R"([[1],[2],[3]])")), "an array of 3 elements");
  EXPECT_EQ(api::ShownJson(Json::parse(R"({"a":{"b":1}})")), "an object of 1 field");
  EXPECT_EQ(api::ShownJson(Json(7)), "7");
  const std::string shown = api::ShownJson(Json(std::string(100'000, 'x')));
  EXPECT_LT(shown.size(), 100u);
  EXPECT_THAT(shown, HasSubstr("(100000 bytes)"));
  EXPECT_EQ(api::ShownText("\xff\xfe"), "\\xff\\xfe");
}

TEST_F(TenantsTest, DeepJsonInAnyBodyIsRefusedAndTheDaemonGoesOn) {
  auto d = NewDaemon();
  ASSERT_TRUE(Submit(*d, {{"queue", "interactive"}}).ok());
  const std::string nest = std::string(150'000, '[') + std::string(150'000, ']');
  const std::string nest_obj = [] {
    std::string s;
    for (int i = 0; i < 100'000; ++i) s += R"({"a":)";
    s += "1";
    return s + std::string(100'000, '}');
  }();
  for (const auto& [target, body] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/jobs", R"({"argv":["true"],"gpus":)" + nest + "}"},
           {"/v1/jobs", R"({"argv":["true"],"env":)" + nest + "}"},
           {"/v1/jobs", R"({"argv":["true"],"queue":)" + nest_obj + "}"},
           {"/v1/jobs/1/activity", R"({"source":"jupyter","busy":)" + nest_obj + "}"},
           {"/v1/jobs/1/cancel", nest}}) {
    api::HttpResponse r = Call(*d, "POST", target, body);
    if (target.ends_with("cancel")) continue;  // cancel reads no body
    EXPECT_EQ(r.status, 400) << target;
    EXPECT_THAT(r.body, HasSubstr("nested deeper than")) << target;
    EXPECT_LT(r.body.size(), 400u) << "the error never echoes the value";
  }
  // Shallow but wrong-typed: named, not dumped.
  api::HttpResponse r = Call(*d, "POST", "/v1/jobs", R"({"argv":["true"],"queue":[[1,2],[3]]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("field 'queue': an array of 2 elements is not a text value"));
  r = Call(*d, "POST", "/v1/jobs", R"({"argv":["true"],"queue":")" + std::string(100'000, 'q') + R"("})");
  EXPECT_THAT(r.body, HasSubstr("field 'queue': 100000 bytes, at most 256"));
  EXPECT_LT(r.body.size(), 400u);
  EXPECT_EQ(Call(*d, "GET", "/v1/health").status, 200);
  EXPECT_TRUE(d->CheckConsistency().ok());
}

// ---- class 4: per-user storage quotas, and space given back --------------------------------

TEST_F(TenantsTest, PendingJobsPerUserAreCappedNamingTheLimit) {
  UserQuotas q;
  q.max_pending_jobs = 3;
  auto d = NewDaemon(q);
  ASSERT_TRUE(Submit(*d, {{"queue", "training"}, {"gpus", 1}}).ok()) << "runs: the one device";
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Submit(*d, {{"queue", "training"}, {"gpus", 1}}).ok()) << i;
  auto over = Submit(*d, {{"queue", "training"}, {"gpus", 1}});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("3 pending jobs"));
  EXPECT_THAT(over.status().message(), HasSubstr("--max-pending-per-user"));
  EXPECT_EQ((*d->ListJobs({}))["jobs"].size(), 4u) << "the refused one changed nothing";
  // Cancelling one gives its place back.
  ASSERT_TRUE(d->Cancel(me_, JobId(4)).ok());
  EXPECT_TRUE(Submit(*d, {{"queue", "training"}, {"gpus", 1}}).ok());
}

TEST_F(TenantsTest, EnvironmentPerJobAndSubmittedBytesPerUserAreCapped) {
  UserQuotas q;
  q.max_env_bytes_per_job = 64 * kKiB;
  q.max_submitted_bytes_per_user = kMiB;
  auto d = NewDaemon(q);
  auto big_env = Submit(*d, {{"env", {{"BIG", std::string(65 * 1024, 'x')}}}});
  ASSERT_FALSE(big_env.ok());
  EXPECT_THAT(big_env.status().message(), HasSubstr("field 'env'"));
  EXPECT_THAT(big_env.status().message(), HasSubstr("--max-env-per-job"));
  // 120 KiB of argv a job: eight fit in 1 MiB, the ninth does not (pending: the device is busy).
  ASSERT_TRUE(Submit(*d, {{"queue", "training"}, {"gpus", 1}}).ok());
  const Json argv = {"sh", "-c", std::string(120 * 1024, 'a')};
  int accepted = 0;
  Status last;
  for (int i = 0; i < 12; ++i) {
    auto r = Submit(*d, {{"queue", "training"}, {"gpus", 1}, {"argv", argv}});
    if (r.ok()) {
      ++accepted;
    } else {
      last = r.status();
    }
  }
  EXPECT_EQ(accepted, 8);
  EXPECT_THAT(last.message(), HasSubstr("--max-submitted-per-user"));
  EXPECT_THAT(last.message(), HasSubstr("1MiB"));
  // Cancelled: their bytes are given back (the quota admits again) and, ended, each keeps only
  // the head of its argv, in the views, the store and memory.
  for (std::uint64_t id = 2; id <= 9; ++id) ASSERT_TRUE(d->Cancel(me_, JobId(id)).ok()) << id;
  EXPECT_TRUE(Submit(*d, {{"queue", "training"}, {"gpus", 1}, {"argv", argv}}).ok());
  Json ended = (*d->GetJob(JobId(2)))["job"];
  EXPECT_EQ(ended["state"], "cancelled");
  EXPECT_EQ(ended["argv_dropped_bytes"], 120 * 1024 + 4 - static_cast<int>(store::kEndedArgvBytes));
  auto stored = store_->GetJob(JobId(2));
  ASSERT_TRUE(stored.ok() && stored->has_value());
  std::size_t kept = 0;
  for (const auto& a : (*stored)->argv) kept += a.size();
  EXPECT_EQ(kept, store::kEndedArgvBytes);
  EXPECT_TRUE((*stored)->env.empty());
}

TEST(StorePrivateCopy, AnEndedJobKeepsTheHeadOfItsArgvCutOnACharacter) {
  store::JobRecord j;
  j.state = store::JobState::kFailed;
  j.env = {{"TOKEN", "secret"}};
  j.argv = {"python", std::string(5000, 'x')};
  store::JobRecord c = store::PrivateCopy(j);
  EXPECT_TRUE(c.env.empty());
  ASSERT_EQ(c.argv.size(), 2u);
  EXPECT_EQ(c.argv[0].size() + c.argv[1].size(), store::kEndedArgvBytes);
  EXPECT_EQ(c.argv_dropped, 5006 - static_cast<std::int64_t>(store::kEndedArgvBytes));
  j.argv = {std::string(4095, 'a') + "\xc3\xa9"};  // "é" across the cut: dropped whole
  c = store::PrivateCopy(j);
  EXPECT_EQ(c.argv[0], std::string(4095, 'a'));
  j.state = store::JobState::kPending;
  EXPECT_EQ(store::PrivateCopy(j), j) << "a job that may still start keeps everything";
}

// ---- class 7: idempotency keys ---------------------------------------------------------------

TEST_F(TenantsTest, ASubmitRetriedWithItsKeyAnswersTheSameJobEvenAfterARestart) {
  auto d = NewDaemon();
  const Json body = {{"queue", "interactive"}, {"idempotency_key", "retry-1"}, {"argv", {"sleep", "9"}}};
  auto first = Submit(*d, body);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->value("deduplicated", false));
  auto again = Submit(*d, body);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)["deduplicated"]);
  EXPECT_EQ((*again)["job"]["id"], (*first)["job"]["id"]);
  EXPECT_EQ(launcher_.launches().size(), 1u) << "started once";
  // Through the handler: 200 (nothing made) instead of 201.
  EXPECT_EQ(Call(*d, "POST", "/v1/jobs", body.dump()).status, 200);
  const Json listed = Json::parse(Call(*d, "GET", "/v1/jobs?key=retry-1").body);
  ASSERT_EQ(listed["jobs"].size(), 1u);
  EXPECT_EQ(listed["jobs"][0]["id"], 1);
  EXPECT_EQ(listed["jobs"][0]["idempotency_key"], "retry-1");
  EXPECT_EQ(Json::parse(Call(*d, "GET", "/v1/jobs?key=other").body)["jobs"].size(), 0u);
  // The same key for another request is an error naming the job, not a second job.
  auto other = Submit(*d, {{"queue", "interactive"}, {"idempotency_key", "retry-1"}, {"argv", {"sleep", "1"}}});
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(), HasSubstr("already used for job 1 with a different request"));
  // Durable: a new daemon on the same store still knows the key.
  d.reset();
  auto d2 = NewDaemon();
  auto after = Submit(*d2, body);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE((*after)["deduplicated"]);
  EXPECT_EQ((*d2->ListJobs({}))["jobs"].size(), 1u);
  // Keys are per user, and checked.
  for (const char* bad : {"", "has space", "x/../y"}) {
    auto r = Submit(*d2, {{"idempotency_key", bad}});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("field 'idempotency_key'"));
  }
  EXPECT_FALSE(Submit(*d2, {{"idempotency_key", std::string(129, 'k')}}).ok());
}

// ---- item 8: logs offsets, umask -----------------------------------------------------------

TEST_F(TenantsTest, ALogOffsetPastTheEndIsAnErrorNotTheWholeLog) {
  auto d = NewDaemon();
  auto r = Submit(*d, {{"queue", "interactive"}});
  ASSERT_TRUE(r.ok());
  const std::string path = (*r)["job"]["log_path"];
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  {
    std::ofstream(path, std::ios::app) << "line one\nline two\n";
  }
  const auto size = std::filesystem::file_size(path);
  api::HttpResponse whole = Call(*d, "GET", "/v1/jobs/1/logs");
  EXPECT_EQ(whole.status, 200);
  EXPECT_EQ(whole.body.size(), size);
  EXPECT_EQ(Call(*d, "GET", "/v1/jobs/1/logs?offset=" + std::to_string(size)).body, "");
  api::HttpResponse tail = Call(*d, "GET", "/v1/jobs/1/logs?offset=" + std::to_string(size - 9));
  EXPECT_EQ(tail.body, "line two\n");
  for (const char* bad : {"9223372036854775807", "99999"}) {
    api::HttpResponse past = Call(*d, "GET", std::string("/v1/jobs/1/logs?offset=") + bad);
    EXPECT_EQ(past.status, 400) << bad;
    EXPECT_THAT(past.body, HasSubstr("past the end of the log"));
  }
  EXPECT_EQ(Call(*d, "GET", "/v1/jobs/1/logs?offset=99999999999999999999").status, 400) << "not an int64";
}

TEST_F(TenantsTest, AJobGetsItsSubmittersUmaskNeverTheDaemons) {
  auto d = NewDaemon();
  ASSERT_TRUE(Submit(*d, {{"queue", "interactive"}, {"umask", "0027"}}).ok());
  ASSERT_TRUE(Submit(*d, {{"queue", "interactive"}}).ok());
  ASSERT_EQ(launcher_.launches().size(), 2u);
  EXPECT_EQ(launcher_.launches()[0].umask, 027);
  EXPECT_EQ(launcher_.launches()[1].umask, 022) << "a client that sent none: the usual 022, not 077";
  for (const char* bad : {"0800", "77777", "-1", "abc", ""}) {
    auto r = Submit(*d, {{"umask", bad}});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("field 'umask'"));
  }
  EXPECT_FALSE(Submit(*d, {{"umask", 18}}).ok()) << "a number is ambiguous: octal text only";
}

// ---- class 3: reads never starve writes --------------------------------------------------------

TEST(WriterFirstMutex, AWaitingWriterGoesBeforeReadersThatComeAfterIt) {
  WriterFirstMutex mu;
  mu.lock_shared();  // a reader under way
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    mu.lock();
    wrote = true;
    mu.unlock();
  });
  // Wait until the writer is queued: from then on a new reader cannot get in.
  bool blocked = false;
  for (int i = 0; i < 2000 && !blocked; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (mu.try_lock_shared()) {
      mu.unlock_shared();
    } else {
      blocked = true;
    }
  }
  EXPECT_TRUE(blocked) << "with std::shared_mutex (readers first) a stream of readers kept the writer out";
  EXPECT_FALSE(wrote);
  mu.unlock_shared();
  writer.join();
  EXPECT_TRUE(wrote);
}

}  // namespace
}  // namespace gpuslice::daemon
