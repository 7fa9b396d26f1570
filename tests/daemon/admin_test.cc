// An admin's orders through the real binary and socket (src/daemon/admin.cc): refused to
// other users; drain, MIG mode, hold, release and requeue applied, journaled and kept across a
// restart; a job the host can never run refused at submit with exit 2.
#include <chrono>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/daemon/harness.h"

namespace gpuslice::testing_e2e {
namespace {

using ::testing::HasSubstr;

json Device(DaemonHarness& h, int index) {
  auto r = h.Client().Get("/v1/devices");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& d : (*r)["devices"]) {
    if (d["index"] == index) return d;
  }
  return json::object();
}

bool Pending(const json& job) { return job["state"] == "pending"; }

TEST(AdminTest, OrdersAreForAdminsAppliedAndKeptAcrossRestarts) {
  DaemonHarness h("admin", QueuesConfig());
  h.SetSimulate("2xH100-80GB");
  h.Start();
  std::string out;
  // Another user may not.
  EXPECT_EQ(h.Cli({"drain", "0"}, &out, 65534), 4) << out;
  EXPECT_THAT(out, HasSubstr("only root or a member of group 'gpuslice-admin' may do this"));
  EXPECT_EQ(h.Cli({"hold", "1"}, &out, 65534), 4) << out;
  EXPECT_EQ(h.Cli({"drain", "7"}, &out), 3) << out;  // no such device

  // Drain GPU 0: a whole-GPU job goes to GPU 1; the next one waits.
  ASSERT_EQ(h.Cli({"drain", "0", "--reason", "fan noise"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("device 0: mode free, drained: fan noise"));
  EXPECT_EQ(Device(h, 0)["drained"], "fan noise");
  const std::uint64_t one = h.Submit({"sleep", "60"}, {{"queue", "training"}});
  json j1 = h.WaitJob(one, Running);
  const std::uint64_t two = h.Submit({"sleep", "60"}, {{"queue", "training"}});
  json j2 = h.Job(two);
  EXPECT_TRUE(Pending(j2["job"])) << j2.dump();
  // Hold the waiting job; it stays pending when GPU 0 is undrained.
  ASSERT_EQ(h.Cli({"hold", std::to_string(two)}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("pending: held by an admin"));

  // Restart: the drain and the hold were journaled.
  h.Terminate();
  h.Start();
  EXPECT_EQ(Device(h, 0)["drained"], "fan noise");
  EXPECT_EQ(h.Job(two)["job"]["pending_reason"]["kind"], "held");
  EXPECT_TRUE(Running(h.Job(one)["job"]));

  ASSERT_EQ(h.Cli({"undrain", "0"}, &out), 0) << out;
  EXPECT_TRUE(Device(h, 0)["drained"].is_null());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(Pending(h.Job(two)["job"]));  // held
  ASSERT_EQ(h.Cli({"release", std::to_string(two)}, &out), 0) << out;
  json r2 = h.WaitJob(two, Running);
  EXPECT_EQ(r2["slice"]["devices"], json({0})) << r2.dump();

  // Requeue the first job: stopped, pending again, and back on its GPU.
  const json before = h.Job(one);
  ASSERT_EQ(h.Cli({"requeue", std::to_string(one), "--reason", "node maintenance"}, &out), 0) << out;
  h.WaitJob(one, [&](const json& j) { return Running(j) && j["pid"] != before["job"]["pid"]; });
  EXPECT_THAT(h.Log(one), HasSubstr("requeued by an admin: node maintenance"));
  auto events = h.Client().Get("/v1/events?job=" + std::to_string(one));
  ASSERT_TRUE(events.ok());
  EXPECT_THAT(events->dump(), HasSubstr("requeued by an admin: node maintenance (by root)"));

  // Orders that do not apply say why.
  EXPECT_EQ(h.Cli({"hold", std::to_string(one)}, &out), 1) << out;
  EXPECT_THAT(out, HasSubstr("only a pending job can be held"));
  EXPECT_EQ(h.Cli({"requeue", "999"}, &out), 3) << out;

  // A job this host can never run: refused at submit, with the reason, exit 2.
  EXPECT_EQ(h.Cli({"submit", "--queue", "training", "--gpus", "3", "--", "true"}, &out), 2) << out;
  EXPECT_THAT(out, HasSubstr("no host has 3 devices"));
  EXPECT_EQ(h.Cli({"cancel", std::to_string(one), std::to_string(two)}, &out), 0) << out;
}

// MIG mode on and off through a drain, on the simulated devices' MIG support.
TEST(AdminTest, MigModeOnAndOffThroughADrain) {
  DaemonHarness h("adminmig", QueuesConfig());
  h.SetSimulate("2xH100-80GB");
  h.Start();
  std::string out;
  const std::uint64_t job = h.Submit({"sleep", "60"}, {{"queue", "interactive"}, {"fraction", "250m"}});
  json j = h.WaitJob(job, Running);
  const int gpu = j["slice"]["devices"][0].get<int>();
  ASSERT_EQ(h.Cli({"mig", std::to_string(gpu), "on"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("(draining)"));
  EXPECT_EQ(Device(h, gpu)["mig_admin"], "on");
  EXPECT_NE(Device(h, gpu)["mode"], "mig");  // its shared slice runs on
  ASSERT_EQ(h.Cli({"cancel", std::to_string(job)}, &out), 0) << out;
  h.WaitJob(job, Ended);
  for (int i = 0; i < 100 && Device(h, gpu)["mode"] != "mig"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Device(h, gpu)["mode"], "mig");
  ASSERT_EQ(h.Cli({"mig", std::to_string(gpu), "off"}, &out), 0) << out;
  for (int i = 0; i < 100 && Device(h, gpu)["mode"] != "free"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Device(h, gpu)["mode"], "free");
  EXPECT_EQ(Device(h, gpu)["mig_admin"], "off");
  EXPECT_EQ(h.Cli({"mig", std::to_string(gpu), "sideways"}, &out), 2) << out;
}

}  // namespace
}  // namespace gpuslice::testing_e2e
