// What the daemon decides from what a shared GPU really reports: per case, a busy job must
// never be warned or reclaimed for idleness (unknown is not idle), an idle one still is, and
// the slice view says which signals decided. In-process daemon, in-memory store, fake
// launcher, and the fake backend scripted directly through the DeviceBackend the daemon holds
// (the test keeps a pointer; the daemon never knows the type).
#include <unistd.h>
#include <sys/wait.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "daemon/daemon.h"
#include "devices/fake.h"
#include "exec/fake_launcher.h"
#include "store/store.h"

namespace gpuslice::daemon {
namespace {

// A real process whose comm is the MPS server's ("nvidia-cuda-mps-server" truncated by the
// kernel to 15 characters): a copy of sleep under that name.
class FakeMpsServer {
 public:
  explicit FakeMpsServer(const std::filesystem::path& dir) {
    const auto exe = dir / "nvidia-cuda-mps-server";
    std::filesystem::copy_file("/bin/sleep", exe, std::filesystem::copy_options::overwrite_existing);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execl(exe.c_str(), "nvidia-cuda-mps-server", "60", nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 200; ++i) {
      std::ifstream in("/proc/" + std::to_string(pid_) + "/comm");
      std::string comm;
      std::getline(in, comm);
      if (comm == "nvidia-cuda-mps") break;
      ::usleep(5000);
    }
  }
  ~FakeMpsServer() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  int pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

struct Running {
  std::uint64_t id = 0;
  int pid = 0;
  int device = -1;
  std::string visible;  // CUDA_VISIBLE_DEVICES it was started with (a MIG device's uuid)
};

struct World {
  devices::FakeBackend* fake = nullptr;
  std::filesystem::path dir;
  std::vector<Running> jobs;  // in submission order
  std::unique_ptr<FakeMpsServer> mps_server;
};

struct Case {
  std::string name;
  std::vector<Json> submit;       // request bodies (argv added)
  std::function<void(World&)> script;
  std::vector<bool> busy;         // per job: must survive (never warned)
  std::vector<std::string> activity;  // per job, the view's "activity" after the first sample
  std::vector<std::string> basis;     // per job, its "activity_basis" ("" = any)
  Micros run_for = 45 * kMinute;  // past the window + grace of the queue
  Micros step = kSecond;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ActivityTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    world_.dir = std::filesystem::temp_directory_path() /
                 ("activity_test_" + std::to_string(getpid()) + "_" + GetParam().name);
    std::filesystem::create_directories(world_.dir);
  }
  void TearDown() override {
    world_.mps_server.reset();
    std::filesystem::remove_all(world_.dir);
  }

  std::unique_ptr<Daemon> NewDaemon() {
    DaemonOptions o;
    o.state_dir = world_.dir.string();
    o.simulated = true;
    o.grace = kSecond;
    auto backend = devices::FakeBackend::Create("4xH100-80GB", [this] { return now_; });
    world_.fake = backend->get();
    auto d = std::make_unique<Daemon>(sched::DefaultConfig(), o, store::NewMemoryStore(),
                                      std::move(backend).value(), std::make_unique<exec::FakeLauncherRef>(&launcher_),
                                      [this] { return now_; });
    EXPECT_TRUE(d->Start().ok());
    return d;
  }


  Json SliceOf(Daemon& d, std::uint64_t job) {
    const Json all = d.Slices();
    for (const auto& s : all["slices"]) {
      if (s["job"].get<std::uint64_t>() == job) return s;
    }
    return Json();
  }

  Micros now_ = 1'000 * kSecond;
  exec::FakeLauncher launcher_;
  Caller me_{static_cast<std::int64_t>(geteuid()), static_cast<std::int64_t>(getegid())};
  World world_;
};

TEST_P(ActivityTest, BusyJobsStayIdleOnesGo) {
  const Case& c = GetParam();
  auto d = NewDaemon();
  for (Json body : c.submit) {
    body["argv"] = {"sleep", "100000"};
    auto r = d->Submit(me_, body);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Running run;
    run.id = (*r)["job"]["id"].get<std::uint64_t>();
    world_.jobs.push_back(run);
  }
  // MIG slices start once the scheduler's layout is applied: let it settle.
  for (int i = 0; i < 5; ++i) {
    now_ += kSecond;
    d->Step();
  }
  for (auto& run : world_.jobs) {
    const Json job = (*d->GetJob(JobId(run.id)))["job"];
    ASSERT_EQ(job["state"], "running") << job.dump();
    run.pid = job["pid"].get<int>();
    const Json slice = SliceOf(*d, run.id);
    ASSERT_FALSE(slice.is_null());
    run.device = slice["devices"][0].get<int>();
    for (const auto& spec : launcher_.launches()) {
      for (const auto& [k, v] : spec.env) {
        if (k == "GPUSLICE_JOB_ID" && v == std::to_string(run.id)) {
          for (const auto& [k2, v2] : spec.env) {
            if (k2 == "CUDA_VISIBLE_DEVICES") run.visible = v2;
          }
        }
      }
    }
  }
  c.script(world_);
  now_ += c.step;
  d->Step();
  now_ += c.step;
  d->Step();
  for (std::size_t i = 0; i < world_.jobs.size(); ++i) {
    const Json slice = SliceOf(*d, world_.jobs[i].id);
    EXPECT_EQ(slice.value("activity", ""), c.activity[i]) << "job " << i << ": " << slice.dump();
    if (!c.basis[i].empty()) {
      EXPECT_EQ(slice.value("activity_basis", ""), c.basis[i]) << slice.dump();
    }
    if (c.activity[i] == "unmeasured") {
      EXPECT_EQ(slice.value("idle_state", ""), "unmeasured") << slice.dump();
      EXPECT_TRUE(slice.value("util_percent", Json()).is_null()) << "unknown is not 0: " << slice.dump();
    }
  }
  const std::string metrics = d->Metrics();
  for (std::size_t i = 0; i < world_.jobs.size(); ++i) {
    EXPECT_NE(metrics.find("job_id=\"" + std::to_string(world_.jobs[i].id) + "\""), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("activity=\"" + c.activity[i] + "\""), std::string::npos) << metrics;
  }
  for (Micros t = 0; t < c.run_for; t += c.step) {
    now_ += c.step;
    d->Step();
  }
  for (std::size_t i = 0; i < world_.jobs.size(); ++i) {
    const std::uint64_t id = world_.jobs[i].id;
    const std::string state = (*d->GetJob(JobId(id)))["job"]["state"].get<std::string>();
    bool warned = false;
    const Json events = *d->Events(0, JobId(id), 1000);
    for (const auto& e : events["events"]) warned |= e["type"] == "warn";
    if (c.busy[i]) {
      EXPECT_EQ(state, "running") << "job " << i;
      EXPECT_FALSE(warned) << "job " << i << " is busy: never warned for idleness";
    } else {
      EXPECT_TRUE(warned) << "job " << i << " is idle: warned";
      if (c.submit[i].value("queue", "") == "interactive") {
        EXPECT_NE(state, "running") << "job " << i << " is reclaimed";
      }
    }
  }
  EXPECT_TRUE(d->CheckConsistency().ok()) << d->CheckConsistency().ToString();
}

devices::FakeProcess Proc(int pid, devices::Permille sm, Bytes memory = 2 * kGiB, std::string mig = "") {
  devices::FakeProcess p;
  p.pid = pid;
  p.memory = memory;
  p.sm_util = sm;
  p.mig_uuid = std::move(mig);
  return p;
}

// Two interactive shares land on the same GPU (best-fit packs them).
const Json kShared = {{"queue", "interactive"}};
const Json kMps = {{"queue", "interactive"}, {"kind", "mps"}};
const Json kMig = {{"queue", "inference"}, {"kind", "mig"}, {"memory", "10GiB"}};

INSTANTIATE_TEST_SUITE_P(
    Cases, ActivityTest,
    ::testing::Values(
        // The driver gives no per-process utilisation (some drivers, vGPU): the busy job's
        // share cannot be measured, so it is unmeasured and kept; the job with no GPU process
        // is measurably idle and reclaimed. The old sampler read the busy job as 0%.
        Case{"PerProcessUnsupportedOnSharedGpu", {kShared, kShared},
             [](World& w) {
               ASSERT_EQ(w.jobs[0].device, w.jobs[1].device);
               const DeviceIndex dev(static_cast<std::uint32_t>(w.jobs[0].device));
               w.fake->SetProcessUtilSupported(dev, false);
               devices::FakeStep s;
               s.gpu_util = 800;
               s.processes = {Proc(w.jobs[0].pid, 800)};
               w.fake->SetState(dev, s);
             },
             {true, false}, {"unmeasured", "idle"}, {"", "sm,mem,procs"}},
        // Per-process figures work: only the busy one's share counts for it.
        Case{"TwoSlicesOneGpuOnlyOneBusy", {kShared, kShared},
             [](World& w) {
               ASSERT_EQ(w.jobs[0].device, w.jobs[1].device);
               devices::FakeStep s;
               s.gpu_util = 700;
               s.processes = {Proc(w.jobs[0].pid, 700), Proc(w.jobs[1].pid, 0)};
               w.fake->SetState(DeviceIndex(static_cast<std::uint32_t>(w.jobs[0].device)), s);
             },
             {true, false}, {"active", "idle"}, {"sm", "sm,mem"}},
        // MPS: the driver charges the client's kernels to the server process. The slice is
        // the device's only MPS slice, so the server's figure is its own.
        Case{"KernelsAttributedToTheMpsServer", {kMps},
             [](World& w) {
               w.mps_server = std::make_unique<FakeMpsServer>(w.dir);
               devices::FakeStep s;
               s.gpu_util = 600;
               s.processes = {Proc(w.jobs[0].pid, 0), Proc(w.mps_server->pid(), 600)};
               w.fake->SetState(DeviceIndex(static_cast<std::uint32_t>(w.jobs[0].device)), s);
             },
             {true}, {"active"}, {"sm"}},
        // Two MPS slices behind one server: neither can be told apart, both unmeasured.
        Case{"TwoMpsSlicesBehindOneServer", {kMps, kMps},
             [](World& w) {
               ASSERT_EQ(w.jobs[0].device, w.jobs[1].device);
               w.mps_server = std::make_unique<FakeMpsServer>(w.dir);
               devices::FakeStep s;
               s.gpu_util = 600;
               s.processes = {Proc(w.jobs[0].pid, 0), Proc(w.jobs[1].pid, 0), Proc(w.mps_server->pid(), 600)};
               w.fake->SetState(DeviceIndex(static_cast<std::uint32_t>(w.jobs[0].device)), s);
             },
             {true, true}, {"unmeasured", "unmeasured"}, {"", ""}},
        // MIG with per-instance utilisation (GPM): a busy instance is active, an idle one idle.
        Case{"MigInstances", {kMig, kMig},
             [](World& w) {
               for (const auto& j : w.jobs) ASSERT_EQ(j.visible.rfind("MIG-", 0), 0u) << j.visible;
               ASSERT_EQ(w.jobs[0].device, w.jobs[1].device);
               devices::FakeStep s;
               s.processes = {Proc(w.jobs[0].pid, 0, 4 * kGiB, w.jobs[0].visible),
                              Proc(w.jobs[1].pid, 0, 4 * kGiB, w.jobs[1].visible)};
               s.mig_util = {{w.jobs[0].visible, 650}, {w.jobs[1].visible, 0}};
               w.fake->SetState(DeviceIndex(static_cast<std::uint32_t>(w.jobs[0].device)), s);
             },
             {true, false}, {"active", "idle"}, {"sm", "sm"}, 7 * kHour, 10 * kSecond},
        // MIG without per-instance utilisation (A100: no GPM): unmeasured, never reported idle.
        Case{"MigWithoutInstanceUtilisation", {kMig},
             [](World& w) {
               const DeviceIndex dev(static_cast<std::uint32_t>(w.jobs[0].device));
               w.fake->SetMigUtilSupported(dev, false);
               devices::FakeStep s;
               s.processes = {Proc(w.jobs[0].pid, 0, 4 * kGiB, w.jobs[0].visible)};
               w.fake->SetState(dev, s);
             },
             {true}, {"unmeasured"}, {""}, 7 * kHour, 10 * kSecond}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace gpuslice::daemon
