// End-to-end through the real socket: placement per queue, the environment a job sees, bad
// requests, permissions, time limit, idle reclaim, logs --follow, CLI output and exit codes.
#include <unistd.h>

#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/catalogue.h"
#include "tests/daemon/harness.h"

namespace gpuslice::testing_e2e {
namespace {

// Short timers so the suite stays fast; idle reclaim effectively off except in its own test.
const std::string kConfig = QueuesConfig({.interactive = R"(warn_before = "1s")"});

TEST(DaemonE2E, EachQueuePlacesOnItsSliceKindAndTheJobSeesItsEnvironment) {
  DaemonHarness h("queues", kConfig);
  h.Start();
  const std::vector<std::string> cmd = {"sh", "-c", "env; echo ENV-DONE; sleep 30"};
  auto a = h.Submit(cmd, {{"queue", "interactive"}, {"fraction", "0.25"}, {"mem", "8GiB"},
                          {"env", {{"PATH", "/usr/bin:/bin"}, {"MY_VAR", "kept"}}}});
  auto b = h.Submit(cmd, {{"queue", "training"}, {"gpus", 2}});
  auto c = h.Submit(cmd, {{"queue", "inference"}, {"mem", "10GiB"}});

  json ja = h.WaitJob(a, Running), jb = h.WaitJob(b, Running), jc = h.WaitJob(c, Running);
  EXPECT_EQ(ja["slice"]["kind"], "shared");
  EXPECT_EQ(ja["slice"]["milli"], 250);
  // The cap is what was asked plus one CUDA context (the H100 catalogue's reserve).
  auto h100 = FindModel("H100-80GB");
  ASSERT_TRUE(h100.ok());
  ASSERT_GT((*h100)->context_reserve, 0);
  const long long cap = (8LL << 30) + (*h100)->context_reserve;
  EXPECT_EQ(ja["slice"]["memory_cap"], cap);
  ASSERT_EQ(ja["slice"]["uuids"].size(), 1u);
  EXPECT_EQ(jb["slice"]["kind"], "whole");
  ASSERT_EQ(jb["slice"]["uuids"].size(), 2u);
  EXPECT_EQ(jc["slice"]["kind"], "mig");
  EXPECT_FALSE(jc["slice"]["mig"].get<std::string>().empty());
  EXPECT_TRUE(ja["simulated"].get<bool>());

  ASSERT_TRUE(h.WaitLog(a, "ENV-DONE"));
  ASSERT_TRUE(h.WaitLog(b, "ENV-DONE"));
  ASSERT_TRUE(h.WaitLog(c, "ENV-DONE"));
  std::string la = h.Log(a), lb = h.Log(b), lc = h.Log(c);
  EXPECT_NE(la.find("CUDA_VISIBLE_DEVICES=" + ja["slice"]["uuids"][0].get<std::string>() + "\n"),
            std::string::npos) << la;
  EXPECT_NE(la.find("GPUSLICE_MEMCAP_BYTES=" + std::to_string(cap) + "\n"), std::string::npos) << la;
  EXPECT_NE(la.find("GPUSLICE_SLICE=slice-"), std::string::npos) << la;
  EXPECT_NE(la.find("GPUSLICE_SIMULATED=1"), std::string::npos);
  EXPECT_NE(la.find("MY_VAR=kept"), std::string::npos) << "the submitter's environment";
  EXPECT_NE(lb.find("CUDA_VISIBLE_DEVICES=" + jb["slice"]["uuids"][0].get<std::string>() + "," +
                    jb["slice"]["uuids"][1].get<std::string>() + "\n"),
            std::string::npos) << lb;
  EXPECT_NE(lc.find("CUDA_VISIBLE_DEVICES=MIG-"), std::string::npos) << lc;
  EXPECT_NE(la.find("SIMULATED devices (no NVIDIA driver)"), std::string::npos);

  // The CLI says plainly that the devices are simulated, in every listing.
  std::string out;
  EXPECT_EQ(h.Cli({"devices"}, &out), 0) << out;
  EXPECT_NE(out.find("SIMULATED devices (no NVIDIA driver)"), std::string::npos) << out;
  EXPECT_NE(out.find("H100-80GB"), std::string::npos);
  EXPECT_EQ(h.Cli({"ps"}, &out), 0) << out;
  EXPECT_NE(out.find("SIMULATED"), std::string::npos);
  EXPECT_NE(out.find("training"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"top", "--once"}, &out), 0) << out;
  EXPECT_NE(out.find("SIMULATED"), std::string::npos);
  EXPECT_NE(out.find("mig"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"queues"}, &out), 0) << out;
  EXPECT_NE(out.find("inference"), std::string::npos);
  EXPECT_EQ(h.Cli({"show", std::to_string(a)}, &out), 0) << out;
  EXPECT_NE(out.find("enforced by libgpuslice-cuda"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"ps", "--json"}, &out), 0);
  EXPECT_EQ(json::parse(out)["jobs"].size(), 3u) << out;

  auto client = h.Client();
  auto metrics = client.GetText("/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->find("gpuslice_simulated 1"), std::string::npos);
  EXPECT_NE(metrics->find("gpuslice_queue_pending_jobs{queue=\"training\"} 0"), std::string::npos);
  EXPECT_NE(metrics->find("gpuslice_slice_idle_seconds{slice="), std::string::npos) << *metrics;
  // Device figures under dcgm-exporter's names, reclaim in base units.
  EXPECT_NE(metrics->find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\""), std::string::npos) << *metrics;
  EXPECT_NE(metrics->find("gpuslice_reclaimed_gpu_seconds_total"), std::string::npos);
  EXPECT_EQ(metrics->find("gpuslice_device_utilization_ratio"), std::string::npos) << "the old name is gone";

  EXPECT_EQ(h.Cli({"cancel", std::to_string(a), std::to_string(b), std::to_string(c)}, &out), 0)
      << out;
  for (auto id : {a, b, c}) {
    json j = h.WaitJob(id, Ended);
    EXPECT_EQ(j["job"]["state"], "cancelled");
  }
  auto slices = client.Get("/v1/slices");
  ASSERT_TRUE(slices.ok());
  EXPECT_TRUE((*slices)["slices"].empty()) << "slices freed once the processes are gone";
}

TEST(DaemonE2E, BadRequestsGetClearErrorsAndChangeNothing) {
  DaemonHarness h("bad", kConfig);
  h.Start();
  auto c = h.Client();
  auto before_jobs = c.Get("/v1/jobs");
  auto before_events = c.Get("/v1/events");
  ASSERT_TRUE(before_jobs.ok() && before_events.ok());

  struct Case {
    json body;
    StatusCode code;
    std::vector<std::string> mentions;
  };
  std::vector<Case> cases = {
      {{{"argv", {"true"}}, {"fraction", "2.5"}}, StatusCode::kInvalidArgument, {"fraction", "2.5"}},
      {{{"argv", {"true"}}, {"fraction", 2.5}}, StatusCode::kInvalidArgument, {"fraction", "2.5"}},
      {{{"argv", {"true"}}, {"queue", "nope"}}, StatusCode::kInvalidArgument, {"queue", "nope"}},
      {{{"argv", json::array()}}, StatusCode::kInvalidArgument, {"argv"}},
      {{{"argv", {"true"}}, {"mem", "lots"}}, StatusCode::kInvalidArgument, {"mem", "lots"}},
      {{{"argv", {"true"}}, {"time", "9h"}}, StatusCode::kInvalidArgument, {"time", "9h"}},
      {{{"argv", {"true"}}, {"colour", "red"}}, StatusCode::kInvalidArgument, {"colour"}},
      {{{"argv", {"true"}}, {"kind", "whole"}}, StatusCode::kInvalidArgument, {"kind", "whole"}},
      {{{"argv", {"true"}}, {"gpus", 0}, {"queue", "training"}}, StatusCode::kInvalidArgument, {"gpus"}},
  };
  for (const auto& cs : cases) {
    auto r = c.Post("/v1/jobs", cs.body);
    ASSERT_FALSE(r.ok()) << cs.body.dump();
    EXPECT_EQ(r.status().code(), cs.code) << r.status().ToString();
    for (const auto& m : cs.mentions) {
      EXPECT_NE(r.status().message().find(m), std::string::npos)
          << r.status().message() << " should mention " << m;
    }
  }
  api::HttpClient raw(h.socket());
  auto bad_json = raw.Request("POST", "/v1/jobs", "{not json");
  ASSERT_TRUE(bad_json.ok());
  EXPECT_EQ(bad_json->status, 400);
  EXPECT_NE(bad_json->body.find("\"code\":\"INVALID_ARGUMENT\""), std::string::npos) << bad_json->body;
  auto unknown = raw.Request("GET", "/v1/nothing");
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->status, 404);
  EXPECT_NE(unknown->body.find("NOT_FOUND"), std::string::npos);
  auto bad_id = raw.Request("GET", "/v1/jobs/abc");
  ASSERT_TRUE(bad_id.ok());
  EXPECT_EQ(bad_id->status, 400);

  EXPECT_EQ(*c.Get("/v1/jobs"), *before_jobs) << "no job was created";
  EXPECT_EQ((*c.Get("/v1/events"))["events"].size(), (*before_events)["events"].size());

  std::string out;
  EXPECT_EQ(h.Cli({"submit", "--fraction", "2.5", "--", "true"}, &out), 2) << out;
  EXPECT_NE(out.find("fraction"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"show", "999"}, &out), 3) << out;
  EXPECT_EQ(h.Cli({"cancel", "999"}, &out), 3) << out;
  EXPECT_EQ(h.Cli({"ps", "--socket", h.dir() + "/no.sock"}, &out), 5) << out;
}

TEST(DaemonE2E, OnlyTheOwnerRootOrAdminMayCancel) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  DaemonHarness h("perm", kConfig);
  h.Start();
  auto root_job = h.Submit({"sleep", "30"});
  h.WaitJob(root_job, Running);

  std::string out;
  const int nobody = 65534;
  EXPECT_EQ(h.Cli({"ps"}, &out, nobody), 0) << out;  // anyone may list
  EXPECT_NE(out.find("root"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"cancel", std::to_string(root_job)}, &out, nobody), 4) << out;
  EXPECT_NE(out.find("PERMISSION_DENIED"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"logs", std::to_string(root_job)}, &out, nobody), 4) << out;
  EXPECT_EQ(h.Job(root_job)["job"]["state"], "running") << "a denied cancel changes nothing";

  // nobody's own job runs as nobody, and nobody may cancel it.
  EXPECT_EQ(h.Cli({"submit", "--json", "--", "sh", "-c", "id -u; id -g; sleep 30"}, &out, nobody), 0)
      << out;
  auto mine = json::parse(out)["job"]["id"].get<std::uint64_t>();
  json j = h.WaitJob(mine, Running);
  EXPECT_EQ(j["job"]["user"], "nobody");
  ASSERT_TRUE(h.WaitLog(mine, "65534\n65534\n")) << h.Log(mine);
  EXPECT_EQ(h.Cli({"cancel", std::to_string(mine)}, &out, nobody), 0) << out;
  EXPECT_EQ(h.WaitJob(mine, Ended)["job"]["state"], "cancelled");

  EXPECT_EQ(h.Cli({"cancel", std::to_string(root_job)}, &out), 0) << out;  // root may
  EXPECT_EQ(h.WaitJob(root_job, Ended)["job"]["state"], "cancelled");
}

TEST(DaemonE2E, TimeLimitWarnsThenTermsThenFreesTheSlice) {
  // The warning comes 5 s before the limit: `ps` below must see the job between the two even
  // when a loaded CI machine runs this under ASan (a 1 s window was missed there once).
  DaemonHarness h("limit", QueuesConfig({.interactive = R"(warn_before = "5s")"}));
  h.Start();
  auto id = h.Submit({"sh", "-c", "trap 'echo got TERM; exit 0' TERM; while true; do sleep 0.1; done"},
                     {{"queue", "interactive"}, {"time", "7s"}});
  h.WaitJob(id, Running);
  json warned = h.WaitJob(id, [](const json& j) { return !j["warning"].get<std::string>().empty(); });
  EXPECT_EQ(warned["job"]["state"], "running") << "warned first, still running";
  std::string out;
  EXPECT_EQ(h.Cli({"ps"}, &out), 0);
  EXPECT_NE(out.find("WARNING"), std::string::npos) << out;
  json done = h.WaitJob(id, Ended);
  EXPECT_EQ(done["job"]["state"], "timed_out");
  EXPECT_TRUE(done["slice"].is_null());
  std::string log = h.Log(id);
  size_t warn = log.find("gpuslice: WARNING");
  size_t term = log.find("got TERM");
  ASSERT_NE(warn, std::string::npos) << log;
  ASSERT_NE(term, std::string::npos) << log;
  EXPECT_LT(warn, term);
  auto c = h.Client();
  auto ev = c.Get("/v1/events?job=" + std::to_string(id));
  ASSERT_TRUE(ev.ok());
  std::vector<std::string> types;
  for (const auto& e : (*ev)["events"]) types.push_back(e["type"]);
  auto pos = [&](const std::string& t) { return std::find(types.begin(), types.end(), t) - types.begin(); };
  EXPECT_LT(pos("warn"), pos("stop"));
  EXPECT_LT(pos("stop"), pos("end"));
  EXPECT_LT(pos("end"), static_cast<long>(types.size()));
}

TEST(DaemonE2E, IdleReclaimTakesOnlyTheIdleJob) {
  DaemonHarness h("idle", QueuesConfig({.idle_window = "2s", .idle_grace = "1s"}), {"--simulate-script", DaemonHarness::kScript});
  // Job 1 is busy (80% SM scripted on the fake device, attributed through its pid); job 2
  // does nothing. Only job 2 is warned and reclaimed.
  h.WriteScript({{"jobs", {{"1", {{"sm", 80}, {"memory", "2GiB"}}}}}});
  h.Start();
  auto busy = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  auto idle = h.Submit({"sleep", "60"}, {{"queue", "interactive"}});
  ASSERT_EQ(busy, 1u);
  h.WaitJob(busy, Running);
  h.WaitJob(idle, Running);
  json j = h.WaitJob(idle, Ended, std::chrono::seconds(20));
  EXPECT_EQ(j["job"]["state"], "reclaimed");
  EXPECT_NE(h.Log(idle).find("gpuslice: WARNING (idle)"), std::string::npos) << h.Log(idle);
  json b = h.Job(busy);
  EXPECT_EQ(b["job"]["state"], "running") << "the busy job is never reclaimed";
  EXPECT_TRUE(b["job"]["warning"].get<std::string>().empty()) << b.dump();

  auto c = h.Client();
  auto ev = c.Get("/v1/events?job=" + std::to_string(idle));
  ASSERT_TRUE(ev.ok());
  std::string types;
  for (const auto& e : (*ev)["events"]) types += e["type"].get<std::string>() + " ";
  EXPECT_NE(types.find("warn stop"), std::string::npos) << types;
  auto top = c.Get("/v1/slices");
  ASSERT_TRUE(top.ok());
  ASSERT_EQ((*top)["slices"].size(), 1u);
  EXPECT_EQ((*top)["slices"][0]["util_percent"], 80) << "attributed by pid";
  auto metrics = c.GetText("/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(metrics->find("gpuslice_reclaimed_gpu_seconds_total 0.000"), std::string::npos)
      << "the reclaimed share counts";
}

TEST(DaemonE2E, ProfileJobDiagnosesWhatTheDaemonRecorded) {
  DaemonHarness h("profile", kConfig, {"--simulate-script", DaemonHarness::kScript});
  // Job 1 is under-used with its memory nearly full; job 2 keeps its GPU busy.
  h.WriteScript({{"jobs", {{"1", {{"sm", 30}, {"memory", "76GiB"}}},
                           {"2", {{"sm", 90}, {"memory", "10GiB"}}}}}});
  h.Start();
  auto low = h.Submit({"sleep", "60"}, {{"queue", "training"}});
  auto busy = h.Submit({"sleep", "60"}, {{"queue", "training"}});
  ASSERT_EQ(low, 1u);
  ASSERT_EQ(busy, 2u);
  h.WaitJob(low, Running);
  h.WaitJob(busy, Running);
  auto c = h.Client();
  size_t seen = 0;
  for (int i = 0; i < 150 && seen < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto a = c.Get("/v1/jobs/1/samples");
    auto b = c.Get("/v1/jobs/2/samples");
    ASSERT_TRUE(a.ok() && b.ok());
    seen = std::min((*a)["samples"].size(), (*b)["samples"].size());
  }
  ASSERT_GE(seen, 3u) << "the daemon samples every 200 ms here";
  auto a = c.Get("/v1/jobs/1/samples");
  ASSERT_TRUE(a.ok());
  for (const auto& p : (*a)["samples"]) {
    EXPECT_EQ(p["util_permille"], 300) << a->dump();
    EXPECT_EQ(p["memory_used"], 76ll << 30) << a->dump();
  }

  std::string out;
  ASSERT_EQ(h.Cli({"profile", "--job", std::to_string(low)}, &out), 0) << out;
  EXPECT_NE(out.find("job 1 (") , std::string::npos) << out;
  EXPECT_NE(out.find("mean utilisation 30.0%"), std::string::npos) << out;
  EXPECT_NE(out.find("peak memory 76GiB"), std::string::npos) << out;
  EXPECT_NE(out.find("GPU under-used"), std::string::npos) << out;
  EXPECT_NE(out.find("Device memory nearly full"), std::string::npos) << out;
  EXPECT_EQ(out.find("GPU-bound"), std::string::npos) << out;

  ASSERT_EQ(h.Cli({"profile", "--job", std::to_string(busy), "--json"}, &out), 0) << out;
  json report = json::parse(out, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << out;
  EXPECT_EQ(report["kind"], "job");
  EXPECT_NEAR(report["gpu_busy_share"].get<double>(), 0.9, 1e-9) << out;
  std::set<std::string> ids;
  for (const auto& f : report["findings"]) ids.insert(f["id"].get<std::string>());
  EXPECT_TRUE(ids.contains("gpu-bound")) << out;
  EXPECT_FALSE(ids.contains("low-utilisation")) << out;
  EXPECT_FALSE(ids.contains("memory")) << out;

  EXPECT_EQ(h.Cli({"profile", "--job", "99"}, &out), 3) << out;  // kExitNotFound
  EXPECT_NE(out.find("job 99"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"profile", "--job", "x1"}, &out), 2) << out;  // kExitUsage
}

TEST(DaemonE2E, LogsFollowStreamsUntilTheJobEnds) {
  DaemonHarness h("follow", kConfig);
  h.Start();
  auto id = h.Submit({"sh", "-c", "echo first; sleep 1; echo second"});
  std::string out;
  EXPECT_EQ(h.Cli({"logs", "-f", std::to_string(id)}, &out), 0) << out;
  size_t first = out.find("first\n"), second = out.find("second\n");
  ASSERT_NE(first, std::string::npos) << out;
  ASSERT_NE(second, std::string::npos) << out;
  EXPECT_LT(first, second);
  EXPECT_EQ(h.Job(id)["job"]["state"], "succeeded");
}

TEST(DaemonE2E, ShowAndPsSayWhyAPendingJobWaits) {
  DaemonHarness h("reason", kConfig);
  h.Start();
  auto all = h.Submit({"sleep", "30"}, {{"queue", "training"}, {"gpus", 8}});
  h.WaitJob(all, Running);
  auto waits = h.Submit({"sleep", "30"}, {{"queue", "training"}, {"gpus", 1}});
  json j = h.Job(waits)["job"];
  ASSERT_EQ(j["state"], "pending") << j.dump();
  ASSERT_TRUE(j["pending_reason"].is_object()) << j.dump();
  EXPECT_EQ(j["pending_reason"]["kind"], "no-device-fits");
  EXPECT_EQ(j["pending_reason"]["gpus"], 1);
  EXPECT_EQ(j["pending_reason"]["text"], "pending in training: no host with 1 free GPU");

  std::string out;
  EXPECT_EQ(h.Cli({"show", std::to_string(waits)}, &out), 0) << out;
  EXPECT_NE(out.find("waiting:      pending in training: no host with 1 free GPU\n"), std::string::npos) << out;
  EXPECT_EQ(h.Cli({"ps"}, &out), 0) << out;
  EXPECT_NE(out.find(fmt::format("job {}: pending in training: no host with 1 free GPU", waits)),
            std::string::npos) << out;

  // The cause goes away: the job runs and has no reason any more.
  EXPECT_EQ(h.Cli({"cancel", std::to_string(all)}, &out), 0) << out;
  j = h.WaitJob(waits, Running)["job"];
  EXPECT_TRUE(j["pending_reason"].is_null()) << j.dump();
  EXPECT_EQ(h.Cli({"show", std::to_string(waits)}, &out), 0) << out;
  EXPECT_EQ(out.find("waiting:"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpuslice::testing_e2e
