// What the daemon does so that a slice is isolated as its kind says on real hardware, on the
// stand-ins (fake backend, fake launcher, in-memory store): one user per GPU's MPS server (the
// second user's mps job waits with its reason; the server is stopped after the first user's last
// mps slice and started again for the next), memory set aside for the driver and each process's
// context, the strongest cap mechanism the device offers (driver limits, else the interposer,
// which must load or the slice is not started), and MIG profiles from the driver winning over
// the catalogue's.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "core/catalogue.h"
#include "daemon/daemon.h"
#include "devices/fake.h"
#include "exec/fake_launcher.h"
#include "exec/launcher.h"
#include "store/store.h"
#include "tests/daemon/shared_store.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

std::map<std::string, std::string> EnvOf(const exec::LaunchSpec& spec) {
  return std::map<std::string, std::string>(spec.env.begin(), spec.env.end());
}

class IsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("isolation_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    h100_ = (*FindModel("H100-80GB"))->mig_profiles;
  }
  void TearDown() override {
    ASSERT_TRUE(UseDriverMigProfiles("H100-80GB", h100_).ok());  // the catalogue as it was
    fs::remove_all(dir_);
  }

  // A daemon on `spec` devices; `before` configures the fake backend before the daemon starts.
  std::unique_ptr<Daemon> NewDaemon(const std::string& spec, const std::function<void(devices::FakeBackend&)>& before = {}) {
    DaemonOptions o;
    o.state_dir = dir_.string();
    o.simulated = true;
    o.grace = kSecond;
    o.cgroup_parent = cgroup_parent_;
    auto fake = devices::FakeBackend::Create(spec, [this] { return now_; });
    fake_ = fake->get();
    if (before) before(*fake_);
    auto d = std::make_unique<Daemon>(sched::DefaultConfig(), o, std::make_unique<SharedStore>(store_.get()),
                                      std::move(fake).value(), std::make_unique<exec::FakeLauncherRef>(&launcher_),
                                      [this] { return now_; });
    Status st = d->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
    return d;
  }
  std::uint64_t Submit(Daemon& d, const Caller& who, Json body) {
    body["argv"] = {"sleep", "100"};
    auto r = d.Submit(who, body);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["job"]["id"].get<std::uint64_t>() : 0;
  }
  Json JobOf(Daemon& d, std::uint64_t id) { return (*d.GetJob(JobId(id)))["job"]; }
  Json SliceOf(Daemon& d, std::uint64_t id) { return (*d.GetJob(JobId(id)))["slice"]; }
  // The launch of job `id` (the fake launcher keeps every one).
  exec::LaunchSpec LaunchOf(std::uint64_t id) {
    for (const auto& l : launcher_.launches())
      if (l.job == JobId(id)) return l;
    ADD_FAILURE() << "job " << id << " was not launched";
    return {};
  }
  void Exit(Daemon& d, std::uint64_t id) {
    launcher_.Exit(JobOf(d, id)["pid"].get<int>(), 0);
    now_ += kSecond;
    d.Step();
  }

  fs::path dir_;
  std::string cgroup_parent_;
  Micros now_ = 1'000 * kSecond;
  std::unique_ptr<store::Store> store_ = store::NewMemoryStore();
  exec::FakeLauncher launcher_;
  devices::FakeBackend* fake_ = nullptr;
  std::vector<MigProfile> h100_;
  Caller root_{0, 0};
  Caller nobody_{65534, 65534};
};

TEST_F(IsolationTest, MpsServerServesOneUserAndTheNextWaitsWithItsReason) {
  if (!exec::CanSwitchUsers()) GTEST_SKIP() << "two users' jobs need a daemon running as root";
  auto d = NewDaemon("1xH100-80GB");
  const Json mps = {{"queue", "interactive"}, {"kind", "mps"}, {"gpu", "250m"}, {"memory", "4GiB"}};
  const auto a = Submit(*d, root_, mps);
  ASSERT_EQ(JobOf(*d, a)["state"], "running");
  auto st = fake_->GetMpsStatus(DeviceIndex(0));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, devices::MpsState::kRunning);
  EXPECT_EQ(st->server_uid, 0) << "the server is started for the slice's user";
  auto env = EnvOf(LaunchOf(a));
  EXPECT_EQ(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
  EXPECT_FALSE(env["CUDA_MPS_PIPE_DIRECTORY"].empty());
  EXPECT_EQ(SliceOf(*d, a)["mps_user"], "root");

  const auto b = Submit(*d, nobody_, mps);
  Json jb = JobOf(*d, b);
  EXPECT_EQ(jb["state"], "pending") << "bob's clients would hang behind root's server";
  EXPECT_EQ(jb["pending_reason"]["kind"], "mps-other-user");
  EXPECT_EQ(jb["pending_reason"]["mps_user"], "root");
  const Json devs = d->Devices();
  EXPECT_EQ(devs["devices"][0]["mps_user"], "root");
  EXPECT_NE(devs["mps_note"].get<std::string>().find("not measurable per client"), std::string::npos);

  Exit(*d, a);
  jb = JobOf(*d, b);
  ASSERT_EQ(jb["state"], "running") << jb.dump();
  st = fake_->GetMpsStatus(DeviceIndex(0));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->server_uid, 65534) << "root's server was stopped; the new one serves the next user";
  EXPECT_EQ(d->Devices()["devices"][0]["mps_user"], "nobody");
  Exit(*d, b);
  st = fake_->GetMpsStatus(DeviceIndex(0));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, devices::MpsState::kStopped) << "no mps slice left: no server";
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
}

// The first user's job stopped (not ended by itself): the scheduler frees its slice at the stop
// decision and places the second user's at once, but that one launches only once the first's
// processes are gone, and its server must then be the second user's.
TEST_F(IsolationTest, AStoppedMpsJobHandsTheServerToTheNextUser) {
  if (!exec::CanSwitchUsers()) GTEST_SKIP() << "two users' jobs need a daemon running as root";
  auto d = NewDaemon("1xH100-80GB");
  const Json mps = {{"queue", "interactive"}, {"kind", "mps"}, {"gpu", "250m"}};
  const auto a = Submit(*d, root_, mps);
  const auto b = Submit(*d, nobody_, mps);
  ASSERT_EQ(JobOf(*d, b)["state"], "pending");
  ASSERT_TRUE(d->Cancel(root_, JobId(a)).ok());
  for (int i = 0; i < 3; ++i) {
    now_ += kSecond;
    d->Step();
  }
  const Json jb = JobOf(*d, b);
  ASSERT_EQ(jb["state"], "running") << jb.dump();
  auto st = fake_->GetMpsStatus(DeviceIndex(0));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->server_uid, 65534);
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
}

TEST_F(IsolationTest, DriverReserveIsSetAsideAndEachProcessContextIsCharged) {
  auto d = NewDaemon("1xH100-80GB");
  const DeviceModel& h100 = **FindModel("H100-80GB");
  const Json dev = d->Devices()["devices"][0];
  EXPECT_EQ(dev["memory"].get<Bytes>(), h100.memory - h100.driver_reserved);
  EXPECT_EQ(dev["reserved_memory"].get<Bytes>(), h100.driver_reserved);
  EXPECT_EQ(dev["context_reserve"].get<Bytes>(), h100.context_reserve);
  EXPECT_EQ(dev["cap_shared"], "interposer");
  EXPECT_EQ(dev["cap_mps"], "mps-client-limit");

  const auto id = Submit(*d, root_, {{"queue", "interactive"}, {"gpu", "100m"}, {"memory", "10GiB"}});
  ASSERT_EQ(JobOf(*d, id)["state"], "running");
  auto env = EnvOf(LaunchOf(id));
  EXPECT_NE(env["LD_PRELOAD"].find("libgpuslice-cuda.so"), std::string::npos);
  EXPECT_EQ(env["GPUSLICE_MEMCAP_BYTES"], std::to_string(10 * kGiB + h100.context_reserve))
      << "the job can allocate the 10 GiB it asked for; its context is booked on top";
  EXPECT_EQ(env["GPUSLICE_MEMCAP_CONTEXT_BYTES"], std::to_string(h100.context_reserve));
  EXPECT_EQ(SliceOf(*d, id)["cap_mechanism"], "interposer");
}

TEST_F(IsolationTest, DriverMemoryLimitsHoldTheCapWhereTheDriverOffersThem) {
  cgroup_parent_ = (dir_ / "cgroup").string();
  fs::create_directories(cgroup_parent_);
  auto d = NewDaemon("2xH100-80GB", [](devices::FakeBackend& f) { f.SetMemoryLimitsSupported(DeviceIndex(0), true); });
  const Json devs = d->Devices()["devices"];
  EXPECT_EQ(devs[0]["cap_shared"], "driver-limits");
  EXPECT_EQ(devs[0]["cap_mps"], "driver-limits");
  EXPECT_EQ(devs[1]["cap_shared"], "interposer") << "device 1's driver offers none";

  // Two slices of more than half a GPU each: one lands on each device, so each mechanism holds one.
  const auto first = Submit(*d, root_, {{"queue", "interactive"}, {"gpu", "600m"}, {"memory", "10GiB"}});
  const auto second = Submit(*d, root_, {{"queue", "interactive"}, {"gpu", "600m"}, {"memory", "10GiB"}});
  ASSERT_EQ(JobOf(*d, first)["state"], "running");
  ASSERT_EQ(JobOf(*d, second)["state"], "running");
  const auto on0 = SliceOf(*d, first)["devices"][0].get<int>() == 0 ? first : second;
  const auto on1 = on0 == first ? second : first;
  ASSERT_EQ(SliceOf(*d, on1)["devices"][0].get<int>(), 1);
  const Bytes cap = 10 * kGiB + (*FindModel("H100-80GB"))->context_reserve;

  auto env = EnvOf(LaunchOf(on0));
  EXPECT_FALSE(env.contains("LD_PRELOAD")) << "the driver holds the cap: no interposer";
  EXPECT_FALSE(env.contains("GPUSLICE_MEMCAP_BYTES"));
  const auto limits = fake_->MemoryLimits();
  const std::string cg = cgroup_parent_ + "/job-" + std::to_string(on0);
  ASSERT_TRUE(limits.contains({0u, cg})) << "the limit is on the job's own cgroup";
  EXPECT_EQ(limits.at({0u, cg}), std::make_pair(cap, cap));
  EXPECT_TRUE(fs::is_directory(cg)) << "made before the job, so the limit holds from its first CUDA call";
  EXPECT_EQ(SliceOf(*d, on0)["cap_mechanism"], "driver-limits");

  auto env1 = EnvOf(LaunchOf(on1));
  EXPECT_EQ(env1["GPUSLICE_MEMCAP_BYTES"], std::to_string(cap)) << "device 1: the interposer";
  EXPECT_EQ(limits.size(), 1u);
  EXPECT_EQ(SliceOf(*d, on1)["cap_mechanism"], "interposer");
}

TEST_F(IsolationTest, AnInterposerThatCannotLoadRefusesTheSliceNotTheCap) {
  // A missing library (or one needing a newer glibc): the cap cannot hold, so the job does not
  // start, and says why in its state and its log. Whole slices need no cap and still run.
  ASSERT_EQ(setenv("GPUSLICE_CUDA_LIB", (dir_ / "gone" / "libgpuslice-cuda.so").c_str(), 1), 0);
  auto d = NewDaemon("2xH100-80GB");
  ASSERT_EQ(unsetenv("GPUSLICE_CUDA_LIB"), 0);
  EXPECT_EQ(d->Devices()["devices"][0]["cap_shared"], "none");
  EXPECT_NE(d->Devices()["interposer_problem"].get<std::string>().find("gone"), std::string::npos);
  const auto id = Submit(*d, root_, {{"queue", "interactive"}, {"gpu", "250m"}});
  const Json j = JobOf(*d, id);
  EXPECT_EQ(j["state"], "failed");
  const std::string reason = j["reason"].get<std::string>();
  EXPECT_NE(reason.find("cannot be enforced"), std::string::npos) << reason;
  EXPECT_NE(reason.find("would have run without its cap"), std::string::npos) << reason;
  std::ifstream log(j["log_path"].get<std::string>());
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("cannot be enforced"), std::string::npos) << text;
  for (const auto& l : launcher_.launches()) EXPECT_NE(l.job, JobId(id)) << "never launched uncapped";
  const auto whole = Submit(*d, root_, {{"queue", "training"}, {"gpus", 1}});
  EXPECT_EQ(JobOf(*d, whole)["state"], "running");
}

TEST_F(IsolationTest, TheDriversMigTableWinsOverTheCatalogues) {
  // A driver whose 3g profile can only start at memory slice 4 (the catalogue, copied from
  // another board, says 0 or 4) and that reports another 1g memory figure.
  std::vector<MigProfile> driver = h100_;
  for (MigProfile& p : driver) {
    if (p.id == 9) {
      p.placement_starts = {4};
      p.max_instances = 1;
    }
    if (p.id == 19) p.memory = 9 * kGiB;
  }
  auto d = NewDaemon("1xH100-80GB", [&](devices::FakeBackend& f) { f.SetMigProfiles(DeviceIndex(0), driver); });
  const MigProfile* three = (*FindModel("H100-80GB"))->FindProfileById(9);
  ASSERT_NE(three, nullptr);
  EXPECT_EQ(three->placement_starts, std::vector<int>{4});
  EXPECT_EQ((*FindModel("H100-80GB"))->FindProfileById(19)->memory, 9 * kGiB);

  const auto id = Submit(*d, root_, {{"queue", "inference"}, {"kind", "mig"}, {"memory", "30GiB"}});
  for (int i = 0; i < 5 && JobOf(*d, id)["state"] != "running"; ++i) {
    now_ += kSecond;
    d->Step();
  }
  ASSERT_EQ(JobOf(*d, id)["state"], "running") << JobOf(*d, id).dump();
  EXPECT_EQ(SliceOf(*d, id)["mig"], "profile=9 start=4") << "placed where the driver allows";
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
}

TEST(MigTableDifferencesTest, SaysWhatDiffersProfileByProfile) {
  const DeviceModel& h100 = **FindModel("H100-80GB");
  EXPECT_TRUE(devices::MigTableDifferences(h100, h100.mig_profiles).empty());
  std::vector<MigProfile> driver = h100.mig_profiles;
  driver.erase(std::remove_if(driver.begin(), driver.end(), [](const MigProfile& p) { return p.id == 20; }),
               driver.end());
  driver[0].placement_starts = {0, 1, 2};
  driver[1].memory += driver[1].memory / 50;  // 2%: past rounding
  driver[2].memory += driver[2].memory / 200;  // 0.5%: rounding
  MigProfile extra = driver[0];
  extra.id = 99;
  driver.push_back(extra);
  const auto diffs = devices::MigTableDifferences(h100, driver);
  auto has = [&](const std::string& s) {
    return std::any_of(diffs.begin(), diffs.end(), [&](const std::string& d) { return d.find(s) != std::string::npos; });
  };
  EXPECT_TRUE(has("profile 20 (1g.10gb+me): in the catalogue, not offered by the driver"));
  EXPECT_TRUE(has("placement starts 0,1,2,3,4,5,6 in the catalogue, 0,1,2 from the driver"));
  EXPECT_TRUE(has("profile 99"));
  EXPECT_EQ(diffs.size(), 4u) << "the 0.5% memory difference is rounding";
}

}  // namespace
}  // namespace gpuslice::daemon
