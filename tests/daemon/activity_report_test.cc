// POST /v1/jobs/ID/activity through the real socket (and TCP with tokens), against the real
// gpuslice binary on simulated devices, where every job's GPU is idle: who may report, what a
// bad body gets, that a flood does not grow the journal, that reports only postpone a reclaim
// (busy keeps a slice, a stale report or busy_max lets the reclaim happen, a report withdraws
// a warning), that a report survives a restart, and reclaim = "on-demand".
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "store/store.h"
#include "tests/daemon/harness.h"

namespace gpuslice::testing_e2e {
namespace {

namespace fs = std::filesystem;

std::int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Idle reclaim after 2 s + 1 s grace; reports from "jupyter" count, for `stale`, capped at `busy_max`.
std::string Config(const std::string& stale = "10m", const std::string& busy_max = "0",
                   const std::string& window = "2s", const std::string& grace = "1s",
                   const std::string& extra = "") {
  const std::string idle = fmt::format(R"toml(
signals = ["gpu", "jupyter"]
report_stale = "{}"
busy_max = "{}"
{})toml",
                                       stale, busy_max, extra);
  return QueuesConfig({.idle_window = window, .idle_grace = grace, .idle = idle});
}

Result<json> Report(const DaemonHarness& h, std::uint64_t id, json body) {
  auto c = h.Client();
  return c.Post(fmt::format("/v1/jobs/{}/activity", id), body);
}

json Busy() { return {{"source", "jupyter"}, {"busy", true}, {"kernels", 1}, {"connections", 0}}; }

// The value of a slice family's line for one job in /metrics; "" when it has none.
std::string SliceMetric(const std::string& metrics, const std::string& family, std::uint64_t job) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(family + "{") && line.find(fmt::format("job_id=\"{}\"", job)) != std::string::npos)
      return line.substr(line.rfind(' ') + 1);
  return "";
}

int ActivityEntries(const DaemonHarness& h) {
  auto store = store::OpenSqliteStore(h.dir() + "/state");
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return -1;
  auto journal = (*store)->ReadJournal();
  EXPECT_TRUE(journal.ok());
  int n = 0;
  for (const auto& e : *journal) n += e.find("\"t\":\"activity\"") != std::string::npos;
  return n;
}

TEST(ActivityReport, OwnerRootOrAdminMayReportAndAReadOnlyTokenMayNot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  const std::string tokens = (fs::temp_directory_path() / fmt::format("gsact_tokens_{}", getpid())).string();
  std::ofstream(tokens) << "prom read-only prom-token-0123456789ab\nnobody 65534 nobody-token-0123456789\n";
  fs::permissions(tokens, fs::perms::owner_read | fs::perms::owner_write);
  const int port = FreePort();
  DaemonHarness h("actauth", Config(), {"--tcp", fmt::format("127.0.0.1:{}", port), "--token-file", tokens});
  h.Start();
  auto id = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  h.WaitJob(id, Running);

  // The owner (root, over the socket): 200 with the report in the answer.
  auto ok = Report(h, id, Busy());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)["activity_report"]["source"], "jupyter");
  EXPECT_EQ((*ok)["activity_report"]["busy"], true);
  EXPECT_EQ((*ok)["activity_report"]["kernels"], 1);
  EXPECT_EQ((*ok)["activity_report"]["fresh"], true);
  EXPECT_EQ((*ok)["job"]["activity_report"], (*ok)["activity_report"]);

  // Another user through the CLI (peer credentials): denied, and nothing changes.
  std::string out;
  EXPECT_EQ(h.Cli({"activity", std::to_string(id), "--idle"}, &out, 65534), 4) << out;
  EXPECT_NE(out.find("PERMISSION_DENIED"), std::string::npos) << out;
  EXPECT_EQ(h.Job(id)["job"]["activity_report"]["busy"], true) << "a denied report changes nothing";
  // The same user's TCP token: denied; a read-only token: denied before anything is read.
  api::ApiClient nobody(fmt::format("tcp://127.0.0.1:{}", port), "nobody-token-0123456789");
  auto as_nobody = nobody.Post(fmt::format("/v1/jobs/{}/activity", id), Busy());
  EXPECT_EQ(as_nobody.status().code(), StatusCode::kPermissionDenied) << as_nobody.status().ToString();
  api::ApiClient prom(fmt::format("tcp://127.0.0.1:{}", port), "prom-token-0123456789ab");
  auto ro = prom.Post(fmt::format("/v1/jobs/{}/activity", id), Busy());
  EXPECT_EQ(ro.status().code(), StatusCode::kPermissionDenied) << ro.status().ToString();
  EXPECT_NE(ro.status().message().find("read-only"), std::string::npos) << ro.status().ToString();

  // The CLI as the owner: idle, last activity now.
  EXPECT_EQ(h.Cli({"activity", std::to_string(id), "--idle"}, &out), 0) << out;
  EXPECT_NE(out.find("activity reported (jupyter, idle)"), std::string::npos) << out;
  json j = h.Job(id)["job"];
  EXPECT_EQ(j["activity_report"]["busy"], false);
  EXPECT_NEAR(static_cast<double>(j["activity_report"]["last_activity_us"].get<std::int64_t>()),
              static_cast<double>(NowUs()), 30e6);
  EXPECT_EQ(h.Cli({"show", std::to_string(id)}, &out), 0) << out;
  EXPECT_NE(out.find("reported:"), std::string::npos) << out;
  EXPECT_NE(out.find("jupyter, idle"), std::string::npos) << out;

  // No such job: 404; an ended one: 409 (FAILED_PRECONDITION).
  EXPECT_EQ(Report(h, 999, Busy()).status().code(), StatusCode::kNotFound);
  auto c = h.Client();
  ASSERT_TRUE(c.Post(fmt::format("/v1/jobs/{}/cancel", id), json::object()).ok());
  h.WaitJob(id, Ended);
  auto late = Report(h, id, Busy());
  EXPECT_EQ(late.status().code(), StatusCode::kFailedPrecondition) << late.status().ToString();
  EXPECT_TRUE(h.Job(id)["job"]["activity_report"].is_null()) << "an ended job shows no report";
  fs::remove(tokens);
}

TEST(ActivityReport, EachBadFieldIsRefusedNamingItAndChangesNothing) {
  DaemonHarness h("actbad", Config());
  h.Start();
  auto id = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  h.WaitJob(id, Running);
  const std::int64_t now = NowUs();
  struct Case {
    json body;
    std::string names;  // what the error must say
  };
  const std::vector<Case> cases = {
      {json::array(), "body"},
      {{{"busy", true}}, "field 'source'"},
      {{{"source", ""}, {"busy", true}}, "field 'source'"},
      {{{"source", "Jupyter Hub"}, {"busy", true}}, "'Jupyter Hub'"},
      {{{"source", std::string(33, 'a')}, {"busy", true}}, "field 'source'"},
      {{{"source", 7}, {"busy", true}}, "field 'source'"},
      {{{"source", "jupyter"}}, "field 'busy'"},
      {{{"source", "jupyter"}, {"busy", "yes"}}, "field 'busy': value '\"yes\"'"},
      {{{"source", "jupyter"}, {"busy", false}, {"last_activity_us", "soon"}}, "field 'last_activity_us'"},
      {{{"source", "jupyter"}, {"busy", false}, {"last_activity_us", 1.5}}, "field 'last_activity_us'"},
      {{{"source", "jupyter"}, {"busy", false}, {"last_activity_us", now / 1000000}}, "not seconds"},
      {{{"source", "jupyter"}, {"busy", false}, {"last_activity_us", now + 3600LL * 1000000}}, "ahead"},
      {{{"source", "jupyter"}, {"busy", false}, {"last_activity_us", std::uint64_t{18000000000000000000ULL}}},
       "field 'last_activity_us'"},
      {{{"source", "jupyter"}, {"busy", false}, {"kernels", -1}}, "field 'kernels': value '-1'"},
      {{{"source", "jupyter"}, {"busy", false}, {"connections", "2"}}, "field 'connections'"},
      {{{"source", "jupyter"}, {"busy", false}, {"cpu", 3}}, "field 'cpu': unknown"},
  };
  for (const auto& c : cases) {
    auto r = Report(h, id, c.body);
    ASSERT_FALSE(r.ok()) << c.body.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.body.dump() << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.names), std::string::npos) << c.body.dump() << ": " << r.status().ToString();
  }
  EXPECT_TRUE(h.Job(id)["job"]["activity_report"].is_null()) << "no bad body left a report";
  // A little clock skew ahead is taken as now.
  auto skew = Report(h, id, {{"source", "jupyter"}, {"busy", false}, {"last_activity_us", NowUs() + 20 * 1000000}});
  ASSERT_TRUE(skew.ok()) << skew.status().ToString();
  EXPECT_LE((*skew)["activity_report"]["last_activity_us"].get<std::int64_t>(), NowUs());
  std::string out;
  EXPECT_EQ(h.Cli({"activity", std::to_string(id), "--source", "Bad Name"}, &out), 2) << out;
  EXPECT_NE(out.find("field 'source'"), std::string::npos) << out;
  EXPECT_EQ(h.Job(id)["job"]["state"], "running");
}

TEST(ActivityReport, AFloodIsRateLimitedAndJournalsOneEntryPerQuantum) {
  // A 10 minute window: the quantum is a minute, so every report of this burst after the
  // first only updates the view.
  DaemonHarness h("actflood", Config("10m", "0", "10m", "1m"));
  h.Start();
  auto id = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  h.WaitJob(id, Running);
  const int before = ActivityEntries(h);
  int accepted = 0, limited = 0;
  for (int i = 0; i < 40; ++i) {
    json body = {{"source", "jupyter"}, {"busy", i % 2 == 0}, {"last_activity_us", NowUs()}, {"kernels", i}};
    auto r = Report(h, id, body);
    if (r.ok()) {
      ++accepted;
      EXPECT_EQ((*r)["activity_report"]["kernels"], i) << "the view shows the newest report";
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
      EXPECT_NE(r.status().message().find("too many activity reports"), std::string::npos);
      ++limited;
    }
  }
  EXPECT_EQ(accepted, 10) << "at most 10 per 10 s per job";
  EXPECT_EQ(limited, 30);
  EXPECT_EQ(ActivityEntries(h) - before, 1) << "one journaled report for the burst (then one per minute)";
  EXPECT_EQ(h.Job(id)["job"]["state"], "running");
  auto other = h.Client().Get("/v1/health");
  EXPECT_TRUE(other.ok()) << "the daemon still answers";
}

TEST(ActivityReport, ABusyReportKeepsAnIdleGpuSliceFromBeingWarned) {
  DaemonHarness h("actbusy", Config());
  h.Start();
  auto kept = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  h.WaitJob(kept, Running);
  ASSERT_TRUE(Report(h, kept, Busy()).ok());
  auto idle = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  h.WaitJob(idle, Running);
  // The unreported one is warned after 2 s and reclaimed 1 s later; the busy one is not.
  json gone = h.WaitJob(idle, Ended, std::chrono::seconds(20));
  EXPECT_EQ(gone["job"]["state"], "reclaimed");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  json k = h.Job(kept)["job"];
  EXPECT_EQ(k["state"], "running");
  EXPECT_EQ(k["warning"], "") << k.dump();
  EXPECT_EQ(k["idle_state"], "active");
  EXPECT_EQ(k["activity_report"]["counted"], true);
  // /metrics reads the same idle clock: not idle, although its GPU has shown nothing for
  // longer than the window (the agent's GPU-only detector would say idle for 3 s and more).
  auto metrics = h.Client().GetText("/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  EXPECT_EQ(SliceMetric(*metrics, "gpuslice_slice_idle", kept), "0") << *metrics;
  const std::string idle_s = SliceMetric(*metrics, "gpuslice_slice_idle_seconds", kept);
  ASSERT_FALSE(idle_s.empty()) << *metrics;
  EXPECT_LT(std::stoll(idle_s), 2) << "a busy notebook is not idle, whatever its GPU says";
}

TEST(ActivityReport, AReportThatStopsComingGoesStaleAndTheReclaimHappens) {
  DaemonHarness h("actstale", Config("4s"));
  h.Start();
  auto id = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  h.WaitJob(id, Running);
  ASSERT_TRUE(Report(h, id, Busy()).ok());
  const auto t0 = std::chrono::steady_clock::now();
  // Fresh for 4 s: no warning although the GPU has been idle longer than the window.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  json mid = h.Job(id)["job"];
  EXPECT_EQ(mid["state"], "running");
  EXPECT_EQ(mid["warning"], "") << mid.dump();
  json j = h.WaitJob(id, Ended, std::chrono::seconds(20));
  EXPECT_EQ(j["job"]["state"], "reclaimed") << "a silent reporter protects nothing for ever";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  EXPECT_NE(h.Log(id).find("gpuslice: WARNING (idle)"), std::string::npos) << h.Log(id);
}

TEST(ActivityReport, BusyMaxCapsTheProtectionOfABusyButGpuIdleSession) {
  DaemonHarness h("actcap", Config("10m", "2s"));
  h.Start();
  auto id = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  h.WaitJob(id, Running);
  // Busy all along (one report a second): protected for 2 s, then idle 2 s, warned, 1 s grace.
  const auto t0 = std::chrono::steady_clock::now();
  bool ended = false;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    (void)Report(h, id, Busy());
    if (Ended(h.Job(id)["job"])) {
      ended = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  ASSERT_TRUE(ended) << "busy_max ends the protection";
  EXPECT_EQ(h.Job(id)["job"]["state"], "reclaimed");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
}

TEST(ActivityReport, AReportWithdrawsAnIdleWarning) {
  DaemonHarness h("actclear", Config("10m", "0", "2s", "20s"));
  h.Start();
  auto id = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  h.WaitJob(id, Running);
  json w = h.WaitJob(id, [](const json& j) { return !j["warning"].get<std::string>().empty(); });
  EXPECT_EQ(w["job"]["idle_state"], "warned");
  // An idle report withdraws nothing, whatever last activity it claims (reporting "idle, used
  // just now" every few seconds used to keep a slice from its reclaim forever).
  auto idle = Report(h, id, {{"source", "jupyter"}, {"busy", false}, {"last_activity_us", NowUs()}});
  ASSERT_TRUE(idle.ok()) << idle.status().ToString();
  EXPECT_EQ((*idle)["job"]["idle_state"], "warned") << idle->dump();
  EXPECT_NE((*idle)["job"]["warning"], "");
  // "Keep my session" (the notebook banner's button) reports busy: withdrawn.
  auto r = Report(h, id, {{"source", "jupyter"}, {"busy", true}, {"last_activity_us", NowUs()}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["job"]["warning"], "") << r->dump();
  EXPECT_EQ((*r)["job"]["warn_deadline_us"], 0);
  EXPECT_EQ((*r)["job"]["idle_state"], "active");
  EXPECT_TRUE(h.WaitLog(id, "idle warning withdrawn")) << h.Log(id);
  auto ev = h.Client().Get(fmt::format("/v1/events?job={}", id));
  ASSERT_TRUE(ev.ok());
  std::string types;
  for (const auto& e : (*ev)["events"]) types += e["type"].get<std::string>() + " ";
  EXPECT_NE(types.find("warn unwarn"), std::string::npos) << types;
}

TEST(ActivityReport, ARestartKeepsTheReportAndItsProtection) {
  DaemonHarness h("actrestart", Config());
  h.Start();
  auto id = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  h.WaitJob(id, Running);
  auto r = Report(h, id, Busy());
  ASSERT_TRUE(r.ok());
  const json before = (*r)["activity_report"];
  h.Kill9();
  h.Start();
  json j = h.WaitJob(id, Running)["job"];
  ASSERT_TRUE(j["activity_report"].is_object()) << j.dump();
  EXPECT_EQ(j["activity_report"]["source"], "jupyter");
  EXPECT_EQ(j["activity_report"]["busy"], true);
  EXPECT_EQ(j["activity_report"]["received_us"], before["received_us"]);
  EXPECT_EQ(j["activity_report"]["kernels"], 1);
  // Still protected after the window and grace.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  j = h.Job(id)["job"];
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["warning"], "") << j.dump();
}

TEST(ActivityReport, OnDemandKeepsIdleSlicesUntilAWaitingJobNeedsTheirRoom) {
  // One GPU; four idle quarter slices fill it.
  DaemonHarness h("actdemand", Config("10m", "0", "1s", "1s", "reclaim = \"on-demand\""));
  h.SetSimulate("1xH100-80GB");
  h.Start();
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(h.Submit({"sleep", "120"}, {{"queue", "interactive"}, {"fraction", "0.25"}}));
    h.WaitJob(ids.back(), Running);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // distinct idle times
  }
  // Past window + grace, nobody waits: all four keep running, reclaimable on demand.
  for (auto id : ids) {
    json j = h.WaitJob(id, [](const json& x) { return x.value("idle_state", json()) == "reclaimable"; },
                       std::chrono::seconds(15));
    EXPECT_EQ(j["job"]["state"], "running");
    EXPECT_NE(j["job"]["warning"].get<std::string>().find("reclaimable on demand"), std::string::npos) << j.dump();
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (auto id : ids) EXPECT_EQ(h.Job(id)["job"]["state"], "running");
  std::string out;
  EXPECT_EQ(h.Cli({"show", std::to_string(ids[0])}, &out), 0) << out;
  EXPECT_NE(out.find("idle, reclaimable on demand"), std::string::npos) << out;
  EXPECT_NE(out.find("on demand"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"queues"}, &out), 0) << out;
  EXPECT_NE(out.find("on demand"), std::string::npos) << out;
  auto q = h.Client().Get("/v1/queues");
  ASSERT_TRUE(q.ok());
  for (const auto& x : (*q)["queues"])
    if (x["name"] == "interactive") {
      EXPECT_EQ(x["idle_reclaim_mode"], "on-demand") << x.dump();
    }

  // A half-GPU job needs two of them: the two longest idle go, the others stay.
  auto big = h.Submit({"sleep", "120"}, {{"queue", "interactive"}, {"fraction", "0.5"}});
  h.WaitJob(big, Running);
  EXPECT_EQ(h.WaitJob(ids[0], Ended)["job"]["state"], "reclaimed");
  EXPECT_EQ(h.WaitJob(ids[1], Ended)["job"]["state"], "reclaimed");
  EXPECT_NE(h.Job(ids[0])["job"]["reason"].get<std::string>().find("on demand for job"), std::string::npos)
      << h.Job(ids[0]).dump();
  EXPECT_EQ(h.Job(ids[2])["job"]["state"], "running") << "only as many as needed";
  EXPECT_EQ(h.Job(ids[3])["job"]["state"], "running") << "only as many as needed";
}

}  // namespace
}  // namespace gpuslice::testing_e2e
