// Agent on the fake backend: attribution with real processes (tree, cgroup, environment, MIG
// instance), slice activity per kind, driver errors mid-sample, vanished processes, idle
// signal, series, the sampling thread, and the Prometheus rendering.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "agent/agent.h"
#include "agent/metrics.h"
#include "devices/fake.h"

namespace gpuslice::agent {
namespace {

using devices::FakeBackend;
using devices::FakeProcess;
using devices::FakeStep;
using devices::ManualClock;
using devices::ParseSimulateSpec;

// A real process tree: parent (sleep) with one child (sleep). Killed on destruction.
class ProcessTree {
 public:
  explicit ProcessTree(const char* slice_env = nullptr) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    parent_ = ::fork();
    if (parent_ == 0) {
      if (slice_env != nullptr) ::setenv("GPUSLICE_SLICE_ID", slice_env, 1);
      pid_t child = ::fork();
      if (child == 0) {
        ::execl("/bin/sleep", "sleep", "30", nullptr);
        ::_exit(127);
      }
      (void)!::write(fds[1], &child, sizeof(child));
      ::execl("/bin/sleep", "sleep", "30", nullptr);
      ::_exit(127);
    }
    ::close(fds[1]);
    EXPECT_EQ(::read(fds[0], &child_, sizeof(child_)), static_cast<ssize_t>(sizeof(child_)));
    ::close(fds[0]);
    // Wait until both have exec'd, so their /proc entries are the sleeping processes (the
    // environment /proc shows is the one given at exec, not a forked copy's setenv).
    for (int i = 0; i < 400 && (ReadComm(parent_) != "sleep" || ReadComm(child_) != "sleep"); ++i) {
      ::usleep(5000);
    }
  }
  ~ProcessTree() {
    ::kill(child_, SIGKILL);
    ::kill(parent_, SIGKILL);
    ::waitpid(parent_, nullptr, 0);
  }
  pid_t parent() const { return parent_; }
  pid_t child() const { return child_; }

  static std::string ReadComm(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
    std::string s;
    std::getline(in, s);
    return s;
  }

 private:
  pid_t parent_ = -1;
  pid_t child_ = -1;
};

SeriesPoint Pt(Micros t, std::optional<devices::Permille> sm = std::nullopt,
               std::optional<Bytes> memory = std::nullopt, int processes = 0,
               std::optional<devices::Permille> mem_util = std::nullopt) {
  SeriesPoint p;
  p.t = t;
  p.sm_util = sm;
  p.memory_used = memory;
  p.processes = processes;
  p.mem_util = mem_util;
  return p;
}

// A pid that certainly belongs to no process any more.
pid_t DeadPid() {
  pid_t p = ::fork();
  if (p == 0) ::_exit(0);
  ::waitpid(p, nullptr, 0);
  return p;
}

SliceBinding Binding(std::uint64_t slice, sched::SliceKind kind, std::vector<int> roots, std::uint32_t device = 0) {
  SliceBinding b;
  b.slice = SliceId(slice);
  b.job = JobId(100 + slice);
  b.user = "alice";
  b.queue = "interactive";
  b.kind = kind;
  b.devices = {DeviceIndex(device)};
  b.root_pids = std::move(roots);
  b.idle.enabled = true;
  b.idle.util_threshold_percent = 5;
  b.idle.window = 3 * kSecond;
  return b;
}

class AgentTest : public ::testing::Test {
 protected:
  AgentTest()
      : fake_(*ParseSimulateSpec("2xH100-80GB,1xA100-40GB"), clock_.AsClock()),
        agent_(fake_, AgentOptions{}, clock_.AsClock()) {}

  const SliceActivity* Find(const Round& r, std::uint64_t slice) {
    for (const auto& a : r.slices) {
      if (a.slice == SliceId(slice)) return &a;
    }
    return nullptr;
  }
  const sched::SliceSample* FindEvent(const Round& r, std::uint64_t slice) {
    for (const auto& s : r.event.slices) {
      if (s.slice == SliceId(slice)) return &s;
    }
    return nullptr;
  }

  ManualClock clock_{1'000'000 * kSecond};
  FakeBackend fake_;
  Agent agent_;
};

TEST_F(AgentTest, AttributesByProcessTreeAndCountsStrangersAndVanished) {
  ProcessTree job;
  const pid_t dead = DeadPid();
  FakeStep s;
  s.gpu_util = 700;
  s.processes = {{job.child(), 3 * kGiB, 400, 100, "", false},
                 {static_cast<int>(::getpid()), kGiB, 200, 0, "", false},
                 {dead, kGiB, 100, 0, "", false}};
  fake_.AddStep(DeviceIndex(0), s);
  agent_.Bind(Binding(1, sched::SliceKind::kShared, {job.parent()}));
  clock_.Advance(kSecond);
  Round r = agent_.SampleOnce();
  ASSERT_TRUE(r.errors.empty());
  const SliceActivity* a = Find(r, 1);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->pids, std::vector<int>{job.child()});
  EXPECT_EQ(a->sm_util.value(), 400) << "a shared slice counts only its own processes";
  EXPECT_EQ(a->memory_used.value(), 3 * kGiB);
  EXPECT_EQ(r.attribution.attributed, 1);
  EXPECT_EQ(r.attribution.unattributed, 1);  // the test process itself
  EXPECT_EQ(r.attribution.vanished, 1);
  const sched::SliceSample* e = FindEvent(r, 1);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->sm_percent, 40);
  EXPECT_EQ(e->memory_percent, 10);
  EXPECT_EQ(e->processes, 1);
}

TEST_F(AgentTest, AttributesByEnvironmentAndByCgroup) {
  ProcessTree tagged("7");
  ProcessTree other;
  FakeStep s;
  s.processes = {{tagged.child(), kGiB, 100, 0, "", false}, {other.child(), kGiB, 300, 0, "", false}};
  fake_.AddStep(DeviceIndex(1), s);
  agent_.Bind(Binding(7, sched::SliceKind::kMps, {}, 1));  // no root pids: environment only
  SliceBinding by_cgroup = Binding(8, sched::SliceKind::kShared, {}, 1);
  by_cgroup.cgroup = *ProcessTable().Cgroup(other.child());  // tests share our cgroup
  agent_.Bind(by_cgroup);
  clock_.Advance(kSecond);
  Round r = agent_.SampleOnce();
  // Slice 7 claims its tagged process first (bindings are visited in slice order); the
  // cgroup binding covers the rest of this test's cgroup.
  EXPECT_EQ(Find(r, 7)->pids, std::vector<int>{tagged.child()});
  EXPECT_EQ(Find(r, 8)->pids, std::vector<int>{other.child()});
}

TEST_F(AgentTest, ProcessThatExitsBetweenListingAndLookupIsSkipped) {
  ProcessTree job;
  FakeStep s;
  s.processes = {{job.child(), kGiB, 300, 0, "", false}, {job.parent(), 2 * kGiB, 500, 0, "", true}};
  fake_.AddStep(DeviceIndex(0), s);
  agent_.Bind(Binding(1, sched::SliceKind::kShared, {job.parent()}));
  clock_.Advance(kSecond);
  Round r = agent_.SampleOnce();
  const SliceActivity* a = Find(r, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->sm_util.ok());
  EXPECT_EQ(a->sm_util.value(), 300) << "the vanished process contributes nothing";
  EXPECT_EQ(a->memory_used.value(), kGiB);
}

TEST_F(AgentTest, WholeSliceUsesDeviceFigures) {
  FakeStep s;
  s.gpu_util = 900;
  s.mem_util = 300;
  s.memory_used = 10 * kGiB;
  fake_.AddStep(DeviceIndex(0), s);
  agent_.Bind(Binding(1, sched::SliceKind::kWhole, {}));
  (void)agent_.SampleOnce();
  clock_.Advance(kSecond);
  Round r = agent_.SampleOnce();
  EXPECT_EQ(Find(r, 1)->sm_util.value(), 900);
  EXPECT_EQ(Find(r, 1)->memory_used.value(), 10 * kGiB);
  EXPECT_EQ(FindEvent(r, 1)->sm_percent, 90);
}

TEST_F(AgentTest, MigSliceIsAttributedByInstanceAndUtilisationStaysUnsupported) {
  ASSERT_TRUE(fake_.SetMigMode(DeviceIndex(2), true).ok());
  auto gi = fake_.CreateGpuInstance(DeviceIndex(2), 19, 0);
  ASSERT_TRUE(gi.ok());
  auto ci = fake_.CreateComputeInstance(DeviceIndex(2), gi->id, 0);
  ASSERT_TRUE(ci.ok());
  FakeStep s;
  s.processes = {{DeadPid(), 4 * kGiB, 0, 0, ci->uuid, false}};  // no /proc entry needed
  fake_.AddStep(DeviceIndex(2), s);
  SliceBinding b = Binding(3, sched::SliceKind::kMig, {}, 2);
  b.mig_uuid = ci->uuid;
  agent_.Bind(b);
  clock_.Advance(kSecond);
  Round r = agent_.SampleOnce();
  const SliceActivity* a = Find(r, 3);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->sm_util.unsupported()) << a->sm_util.status().ToString();
  EXPECT_EQ(a->memory_used.value(), 4 * kGiB);
  EXPECT_EQ(a->pids.size(), 1u);
  EXPECT_EQ(r.attribution.attributed, 1);
  // The scheduler still hears about the slice: no utilisation figure, but its processes.
  const sched::SliceSample* e = FindEvent(r, 3);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->processes, 1);
  // And /metrics omits what the driver cannot say instead of printing 0.
  std::string text = RenderPrometheus(agent_.MetricsSnapshot());
  EXPECT_EQ(text.find("gpuslice_slice_sm_utilization_ratio{slice=\"3\""), std::string::npos) << text;
  EXPECT_NE(text.find("gpuslice_slice_memory_used_bytes{slice=\"3\""), std::string::npos) << text;
  EXPECT_EQ(text.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"2\""), std::string::npos) << text;
}

TEST_F(AgentTest, DriverErrorMidSampleMakesTheSliceUnknownForThatRoundOnly) {
  ProcessTree job;
  FakeStep s;
  s.processes = {{job.child(), kGiB, 500, 0, "", false}};
  fake_.AddStep(DeviceIndex(0), s);
  agent_.Bind(Binding(1, sched::SliceKind::kShared, {job.parent()}));
  // Not sampled yet: how long it has been idle is unknown, so /metrics has no idle seconds.
  EXPECT_FALSE(agent_.MetricsSnapshot().slices.at(0).idle_for.has_value());
  fake_.InjectError(devices::FakeCall::kSample, Unavailable("GPU fell off the bus"));
  clock_.Advance(kSecond);
  Round bad = agent_.SampleOnce();
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_NE(bad.errors[0].message().find("fell off"), std::string::npos);
  EXPECT_EQ(bad.samples.size(), 2u) << "the other devices were still read";
  // No evidence this round: the scheduler hears "unknown", not "idle" and not nothing (an
  // absent sample would let idle time run on).
  const sched::SliceSample* unknown = FindEvent(bad, 1);
  ASSERT_NE(unknown, nullptr);
  EXPECT_FALSE(unknown->sm_known);
  EXPECT_FALSE(unknown->memory_known);
  EXPECT_FALSE(unknown->processes_known);
  EXPECT_EQ(Find(bad, 1)->verdict.activity, sched::Activity::kUnknown);
  EXPECT_TRUE(agent_.Series(SliceId(1)).empty());
  clock_.Advance(kSecond);
  Round good = agent_.SampleOnce();
  EXPECT_TRUE(good.errors.empty());
  ASSERT_NE(FindEvent(good, 1), nullptr);
  EXPECT_EQ(FindEvent(good, 1)->sm_percent, 50);
  EXPECT_EQ(agent_.Series(SliceId(1)).size(), 1u);
  EXPECT_EQ(agent_.MetricsSnapshot().sample_errors, 1);
  EXPECT_EQ(agent_.MetricsSnapshot().slices.at(0).idle_for, 0) << "measured active just now";
}

TEST_F(AgentTest, IdleAfterTheWindowAndActivityResetsIt) {
  agent_.Bind(Binding(1, sched::SliceKind::kWhole, {}));
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(kSecond);
    (void)agent_.SampleOnce();
  }
  ASSERT_TRUE(agent_.Idle(SliceId(1)).has_value());
  EXPECT_TRUE(agent_.Idle(SliceId(1))->idle);
  EXPECT_EQ(agent_.Idle(SliceId(1))->idle_for, 3 * kSecond);
  FakeStep busy;
  busy.gpu_util = 800;
  fake_.SetState(DeviceIndex(0), busy);
  clock_.Advance(kSecond);
  (void)agent_.SampleOnce();
  EXPECT_FALSE(agent_.Idle(SliceId(1))->idle);
  EXPECT_EQ(agent_.Idle(SliceId(1))->idle_for, 0);
}

TEST_F(AgentTest, SamplingThreadEmitsEventsUntilStopped) {
  AgentOptions o;
  o.interval = 5 * kMillisecond;
  Agent threaded(fake_, o, clock_.AsClock());
  threaded.Bind(Binding(1, sched::SliceKind::kWhole, {}));
  std::mutex mu;
  int events = 0;
  threaded.SetSampleSink([&](const sched::Sample& s) {
    std::lock_guard lock(mu);
    if (!s.slices.empty()) ++events;
  });
  ASSERT_TRUE(threaded.Start().ok());
  EXPECT_EQ(threaded.Start().code(), StatusCode::kFailedPrecondition);
  for (int i = 0; i < 400 && threaded.rounds() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  threaded.Stop();
  threaded.Stop();
  const int after_stop = threaded.rounds();
  EXPECT_GE(after_stop, 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(threaded.rounds(), after_stop) << "no rounds after Stop";
  std::lock_guard lock(mu);
  EXPECT_GE(events, 3);
}

TEST_F(AgentTest, DownsamplerReceivesBucketsForTheStore) {
  AgentOptions o;
  o.downsample_bucket = 2 * kSecond;
  Agent a(fake_, o, clock_.AsClock());
  std::vector<std::pair<SliceId, SeriesPoint>> got;
  a.SetDownsampleSink([&](SliceId s, const SeriesPoint& p) { got.emplace_back(s, p); });
  a.Bind(Binding(1, sched::SliceKind::kWhole, {}));
  FakeStep busy;
  busy.gpu_util = 600;
  fake_.SetState(DeviceIndex(0), busy);
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(kSecond);
    (void)a.SampleOnce();
  }
  a.Unbind(SliceId(1));  // flushes the open bucket
  ASSERT_GE(got.size(), 2u);
  EXPECT_EQ(got[0].first, SliceId(1));
  EXPECT_EQ(got[1].second.sm_util, 600);
  EXPECT_EQ(got[1].second.t % (2 * kSecond), 0);
}

// ---- pieces ----

TEST(SeriesRing, KeepsTheNewestInOrder) {
  SeriesRing r(3);
  for (int i = 1; i <= 5; ++i) r.Push(Pt(i));
  auto pts = r.Points();
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_EQ(pts[0].t, 3);
  EXPECT_EQ(pts[2].t, 5);
  EXPECT_EQ(r.Latest()->t, 5);
}

TEST(Downsampler, MeansKnownValuesOnlyAndPeaksMemory) {
  std::vector<SeriesPoint> out;
  Downsampler d(10, [&](SliceId, const SeriesPoint& p) { out.push_back(p); });
  d.Add(SliceId(1), Pt(1, 100, 5));
  d.Add(SliceId(1), Pt(2, std::nullopt, 9));
  d.Add(SliceId(1), Pt(3, 300, 7));
  d.Add(SliceId(1), Pt(12, 0));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].t, 0);
  EXPECT_EQ(out[0].sm_util, 200);
  EXPECT_EQ(out[0].memory_used, 9);
  EXPECT_FALSE(out[0].mem_util.has_value());
}

TEST(IdleDetector, BlindSignalsAreUnmeasuredNeverIdleAndMemoryChangeIsActivity) {
  sched::IdlePolicy p;
  p.window = 2 * kSecond;
  IdleDetector d(p);
  // SM unsupported (MIG on A100), no memory traffic figure, a process present: steady memory
  // says nothing (a training step keeps its memory), so the slice stays unmeasured.
  for (Micros t : {Micros{0}, kSecond, 2 * kSecond, 3 * kSecond}) d.Observe(Pt(t, std::nullopt, kGiB, 1));
  EXPECT_FALSE(d.state().idle);
  EXPECT_TRUE(d.state().unmeasured);
  EXPECT_EQ(d.state().basis, "");
  // Memory used moving is activity.
  d.Observe(Pt(4 * kSecond, std::nullopt, 3 * kGiB, 1));
  EXPECT_FALSE(d.state().unmeasured);
  EXPECT_EQ(d.state().activity, sched::Activity::kActive);
  EXPECT_EQ(d.state().basis, "memchange");
  // No process at all is measurably idle: idle a window after the last activity.
  d.Observe(Pt(5 * kSecond, std::nullopt, 3 * kGiB, 0));
  EXPECT_FALSE(d.state().idle);
  d.Observe(Pt(6 * kSecond, std::nullopt, 3 * kGiB, 0));
  EXPECT_TRUE(d.state().idle);
  EXPECT_EQ(d.state().basis, "procs");
  // Blind again: not idle, however long.
  d.Observe(Pt(60 * kSecond, std::nullopt, 3 * kGiB, 1));
  EXPECT_FALSE(d.state().idle);
  EXPECT_TRUE(d.state().unmeasured);
}

TEST(IdleDetector, ProcessPresenceCountsOnlyWhenThePolicySaysSo) {
  sched::IdlePolicy p;
  p.window = kSecond;
  IdleDetector without(p);
  p.activity.process_presence = true;
  IdleDetector with(p);
  for (Micros t : {Micros{0}, kSecond, 2 * kSecond}) {
    SeriesPoint pt = Pt(t, 0, std::nullopt, 1, 0);
    without.Observe(pt);
    with.Observe(pt);
  }
  EXPECT_TRUE(without.state().idle);
  EXPECT_FALSE(with.state().idle);
}

TEST(Prometheus, DcgmNamesLabelsAndEscaping) {
  MetricsInput in;
  in.hostname = "node1";
  devices::DeviceInfo d;
  d.index = DeviceIndex(0);
  d.uuid = "GPU-1";
  d.name = "NVIDIA H100 80GB HBM3";
  in.devices = {d};
  devices::DeviceSample s;
  s.index = DeviceIndex(0);
  s.uuid = "GPU-1";
  s.gpu_util = devices::Reading<devices::Permille>::Of(455);
  s.memory_used = devices::Reading<Bytes>::Of(2 * kGiB);
  s.memory_total = devices::Reading<Bytes>::Of(80 * kGiB);
  s.power_mw = devices::Reading<std::int64_t>::Of(312500);
  s.temperature_c = devices::Reading<int>::NotSupported("no sensor");
  in.samples = {s};
  SliceMetrics m;
  m.slice = SliceId(5);
  m.job = JobId(42);
  m.user = "bob \"the\" \\builder";
  m.queue = "interactive";
  m.kind = SliceKind::kShared;
  m.gpu = "0";
  m.sm_util = devices::Reading<devices::Permille>::Of(250);
  m.processes = 2;
  in.slices = {m};
  const std::string text = RenderPrometheus(in);
  const std::string labels = "gpu=\"0\",UUID=\"GPU-1\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"";
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_UTIL{" + labels + "} 45.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("DCGM_FI_DEV_FB_USED{" + labels + "} 2048\n"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_FB_FREE{" + labels + "} 79872\n"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_POWER_USAGE{" + labels + "} 312.500\n"), std::string::npos);
  EXPECT_EQ(text.find("DCGM_FI_DEV_GPU_TEMP"), std::string::npos) << "unsupported: omitted, not 0";
  EXPECT_NE(text.find("gpuslice_slice_sm_utilization_ratio{slice=\"5\",job_id=\"42\","
                      "user=\"bob \\\"the\\\" \\\\builder\",queue=\"interactive\",kind=\"shared\",gpu=\"0\"} 0.250\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpuslice_slice_processes{slice=\"5\""), std::string::npos);
  EXPECT_EQ(text.find("gpuslice_slice_memory_used_bytes"), std::string::npos) << "not read: omitted";
  EXPECT_EQ(text.find("gpuslice_slice_idle_seconds"), std::string::npos) << "unmeasured: omitted, not 0";
}


// ---- the cases a shared GPU really produces, one table -------------------------------------

// A job leader in its own process group that starts a child and exits: the child, now the
// GPU user, is re-parented to init and keeps only the group.
class ReplacedByChild {
 public:
  ReplacedByChild() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    leader_ = ::fork();
    if (leader_ == 0) {
      ::setpgid(0, 0);
      pid_t child = ::fork();
      if (child == 0) {
        ::execl("/bin/sleep", "sleep", "30", nullptr);
        ::_exit(127);
      }
      (void)!::write(fds[1], &child, sizeof(child));
      ::_exit(0);
    }
    ::close(fds[1]);
    EXPECT_EQ(::read(fds[0], &child_, sizeof(child_)), static_cast<ssize_t>(sizeof(child_)));
    ::close(fds[0]);
    ::waitpid(leader_, nullptr, 0);  // the leader is gone
    for (int i = 0; i < 200 && ProcessTree::ReadComm(child_) != "sleep"; ++i) ::usleep(5000);
  }
  ~ReplacedByChild() { ::kill(child_, SIGKILL); }
  pid_t leader() const { return leader_; }
  pid_t child() const { return child_; }

 private:
  pid_t leader_ = -1;
  pid_t child_ = -1;
};

// A real process whose comm is the MPS server's.
class MpsServerProcess {
 public:
  MpsServerProcess() {
    exe_ = std::filesystem::temp_directory_path() / ("nvidia-cuda-mps-server." + std::to_string(getpid()));
    std::filesystem::copy_file("/bin/sleep", exe_, std::filesystem::copy_options::overwrite_existing);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execl(exe_.c_str(), "nvidia-cuda-mps-server", "30", nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 200 && ProcessTree::ReadComm(pid_) != "nvidia-cuda-mps"; ++i) ::usleep(5000);
  }
  ~MpsServerProcess() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    std::filesystem::remove(exe_);
  }
  pid_t pid() const { return pid_; }

 private:
  std::filesystem::path exe_;
  pid_t pid_ = -1;
};

struct Expect {
  std::uint64_t slice;
  sched::Activity activity;
  std::string basis;
};

struct ActivityCase {
  std::string name;
  // Scripts `fake`, binds slices on `agent`; may keep processes alive in `keep`.
  std::function<void(FakeBackend& fake, Agent& agent, std::vector<std::shared_ptr<void>>& keep)> setup;
  std::vector<Expect> expect;
};

void PrintTo(const ActivityCase& c, std::ostream* os) { *os << c.name; }

class ActivityTable : public ::testing::TestWithParam<ActivityCase> {};

TEST_P(ActivityTable, VerdictAndTheSignalsThatDecided) {
  ManualClock clock{1'000'000 * kSecond};
  FakeBackend fake(*ParseSimulateSpec("2xH100-80GB,1xA100-40GB"), clock.AsClock());
  Agent agent(fake, AgentOptions{}, clock.AsClock());
  std::vector<std::shared_ptr<void>> keep;
  GetParam().setup(fake, agent, keep);
  (void)agent.SampleOnce();
  clock.Advance(kSecond);
  const Round r = agent.SampleOnce();
  for (const Expect& e : GetParam().expect) {
    const SliceActivity* a = nullptr;
    for (const auto& x : r.slices) a = x.slice == SliceId(e.slice) ? &x : a;
    ASSERT_NE(a, nullptr) << "slice " << e.slice;
    EXPECT_EQ(a->verdict.activity, e.activity) << "slice " << e.slice << " basis " << a->verdict.basis;
    EXPECT_EQ(a->verdict.basis, e.basis) << "slice " << e.slice;
    const sched::SliceSample* s = nullptr;
    for (const auto& x : r.event.slices) s = x.slice == SliceId(e.slice) ? &x : s;
    ASSERT_NE(s, nullptr) << "every bound slice is reported, unknown ones too";
    EXPECT_EQ(sched::ClassifySample(Binding(e.slice, sched::SliceKind::kShared, {}).idle, *s).activity, e.activity)
        << "the scheduler reaches the same verdict from the event";
  }
}

FakeProcess P(int pid, devices::Permille sm, std::string mig = "") {
  FakeProcess p;
  p.pid = pid;
  p.memory = 2 * kGiB;
  p.sm_util = sm;
  p.mig_uuid = std::move(mig);
  return p;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ActivityTable,
    ::testing::Values(
        ActivityCase{"PerProcessUnsupportedOnSharedGpu",
                     [](FakeBackend& f, Agent& a, auto& keep) {
                       auto job = std::make_shared<ProcessTree>();
                       keep.push_back(job);
                       f.SetProcessUtilSupported(DeviceIndex(0), false);
                       FakeStep s;
                       s.gpu_util = 800;
                       s.processes = {P(job->child(), 800)};
                       f.AddStep(DeviceIndex(0), s);
                       a.Bind(Binding(1, sched::SliceKind::kShared, {job->parent()}));
                       a.Bind(Binding(2, sched::SliceKind::kShared, {DeadPid()}));
                     },
                     {{1, sched::Activity::kUnknown, ""}, {2, sched::Activity::kIdle, "sm,mem,procs"}}},
        ActivityCase{"TwoSlicesOnOneGpuOnlyOneBusy",
                     [](FakeBackend& f, Agent& a, auto& keep) {
                       auto busy = std::make_shared<ProcessTree>();
                       auto idle = std::make_shared<ProcessTree>();
                       keep.push_back(busy);
                       keep.push_back(idle);
                       FakeStep s;
                       s.gpu_util = 700;
                       s.processes = {P(busy->child(), 700), P(idle->child(), 0)};
                       f.AddStep(DeviceIndex(0), s);
                       a.Bind(Binding(1, sched::SliceKind::kShared, {busy->parent()}));
                       a.Bind(Binding(2, sched::SliceKind::kShared, {idle->parent()}));
                     },
                     {{1, sched::Activity::kActive, "sm"}, {2, sched::Activity::kIdle, "sm,mem"}}},
        ActivityCase{"MigInstancesWithAndWithoutInstanceUtilisation",
                     [](FakeBackend& f, Agent& a, auto&) {
                       std::vector<std::string> uuids;
                       for (std::uint32_t dev : {0u, 2u}) {
                         ASSERT_TRUE(f.SetMigMode(DeviceIndex(dev), true).ok());
                         for (int start : {0, 4}) {
                           auto gi = f.CreateGpuInstance(DeviceIndex(dev), dev == 0 ? 9 : 9, start);
                           ASSERT_TRUE(gi.ok()) << gi.status().ToString();
                           auto ci = f.CreateComputeInstance(DeviceIndex(dev), gi->id, 2);
                           ASSERT_TRUE(ci.ok()) << ci.status().ToString();
                           uuids.push_back(ci->uuid);
                         }
                       }
                       FakeStep h100;
                       h100.processes = {P(DeadPid(), 0, uuids[0]), P(DeadPid(), 0, uuids[1])};
                       h100.mig_util = {{uuids[0], 650}, {uuids[1], 0}};
                       f.AddStep(DeviceIndex(0), h100);
                       FakeStep a100;  // no per-instance utilisation on A100
                       a100.processes = {P(DeadPid(), 0, uuids[2])};
                       f.AddStep(DeviceIndex(2), a100);
                       for (std::uint64_t i = 0; i < 3; ++i) {
                         SliceBinding b = Binding(i + 1, sched::SliceKind::kMig, {}, i < 2 ? 0 : 2);
                         b.mig_uuid = uuids[i];
                         a.Bind(b);
                       }
                     },
                     {{1, sched::Activity::kActive, "sm"},
                      {2, sched::Activity::kIdle, "sm"},
                      {3, sched::Activity::kUnknown, ""}}},
        ActivityCase{"KernelsAttributedToTheMpsServer",
                     [](FakeBackend& f, Agent& a, auto& keep) {
                       auto server = std::make_shared<MpsServerProcess>();
                       auto one = std::make_shared<ProcessTree>();
                       auto two = std::make_shared<ProcessTree>();
                       auto alone = std::make_shared<ProcessTree>();
                       keep.insert(keep.end(), {server, one, two, alone});
                       // Device 0: two MPS slices behind one server; device 1: one.
                       FakeStep s;
                       s.gpu_util = 600;
                       s.processes = {P(one->child(), 0), P(two->child(), 0), P(server->pid(), 600)};
                       f.AddStep(DeviceIndex(0), s);
                       FakeStep t;
                       t.gpu_util = 500;
                       t.processes = {P(alone->child(), 0), P(server->pid(), 500)};
                       f.AddStep(DeviceIndex(1), t);
                       a.Bind(Binding(1, sched::SliceKind::kMps, {one->parent()}));
                       a.Bind(Binding(2, sched::SliceKind::kMps, {two->parent()}));
                       a.Bind(Binding(3, sched::SliceKind::kMps, {alone->parent()}, 1));
                     },
                     {{1, sched::Activity::kUnknown, ""},
                      {2, sched::Activity::kUnknown, ""},
                      {3, sched::Activity::kActive, "sm"}}},
        ActivityCase{"ProcessExitsAndIsReplacedByItsChild",
                     [](FakeBackend& f, Agent& a, auto& keep) {
                       auto job = std::make_shared<ReplacedByChild>();
                       keep.push_back(job);
                       FakeStep s;
                       s.gpu_util = 600;
                       s.processes = {P(job->child(), 600)};
                       f.AddStep(DeviceIndex(0), s);
                       a.Bind(Binding(1, sched::SliceKind::kShared, {job->leader()}));
                     },
                     {{1, sched::Activity::kActive, "sm"}}}),
    [](const ::testing::TestParamInfo<ActivityCase>& i) { return i.param.name; });

}  // namespace
}  // namespace gpuslice::agent

namespace gpuslice::agent {
namespace {

// Buckets of a chart (the web page's device history): unmeasured stays null, never 0.
TEST(BucketMeans, MeansKnownValuesAndLeavesUnmeasuredBucketsEmpty) {
  const auto sm = [](const SeriesPoint& p) -> std::optional<double> {
    if (!p.sm_util) return std::nullopt;
    return *p.sm_util / 10.0;
  };
  // Buckets [100,110) [110,120) [120,130) [130,140).
  std::vector<SeriesPoint> pts = {
      Pt(95, 900),             // before the first bucket: ignored
      Pt(100, 200), Pt(105, 400),  // bucket 0: mean of 20 % and 40 %
      Pt(112),                 // bucket 1: a point, but nothing measured
      // bucket 2: no point at all (the daemon was down, a read failed)
      Pt(139, 0),              // bucket 3: measured 0 is 0
      Pt(140, 1000),           // after the last bucket: ignored
  };
  const auto out = BucketMeans(pts, 100, 10, 4, sm);
  ASSERT_EQ(out.size(), 4u);
  ASSERT_TRUE(out[0].has_value());
  EXPECT_DOUBLE_EQ(*out[0], 30.0);
  EXPECT_FALSE(out[1].has_value());
  EXPECT_FALSE(out[2].has_value());
  ASSERT_TRUE(out[3].has_value());
  EXPECT_DOUBLE_EQ(*out[3], 0.0);
  EXPECT_EQ(BucketMeans(pts, 100, 0, 3, sm), std::vector<std::optional<double>>(3)) << "no step: all unknown";
}

TEST_F(AgentTest, DeviceSeriesHasAPointPerReadAndAFailedReadLeavesAGap) {
  clock_.Advance(kSecond);
  (void)agent_.SampleOnce();
  fake_.InjectError(devices::FakeCall::kSample, Unavailable("GPU fell off the bus"));
  clock_.Advance(kSecond);
  Round bad = agent_.SampleOnce();
  ASSERT_EQ(bad.errors.size(), 1u);
  clock_.Advance(kSecond);
  (void)agent_.SampleOnce();
  const auto series = agent_.DeviceSeries();
  ASSERT_EQ(series.size(), 3u);
  std::size_t total = 0;
  for (const auto& [idx, pts] : series) {
    total += pts.size();
    for (std::size_t i = 1; i < pts.size(); ++i) EXPECT_LT(pts[i - 1].t, pts[i].t) << "oldest first";
  }
  EXPECT_EQ(total, 3u * 3u - 1u) << "the failed read added no point (no made-up 0)";
}

TEST(Prometheus, HeldGpusNextToUtilisationAndOmittedWhenNotKnown) {
  MetricsInput in;
  SliceMetrics m;
  m.slice = SliceId(5);
  m.job = JobId(42);
  m.user = "alice";
  m.queue = "interactive";
  m.kind = SliceKind::kShared;
  m.gpu = "0";
  m.held_milli = 250;
  in.slices = {m};
  m.slice = SliceId(6);
  m.held_milli = 0;  // e.g. the Slurm agent, which does not know the share
  in.slices.push_back(m);
  const std::string text = RenderPrometheus(in);
  EXPECT_NE(text.find("# TYPE gpuslice_slice_held_gpus gauge"), std::string::npos) << text;
  EXPECT_NE(text.find("gpuslice_slice_held_gpus{slice=\"5\""), std::string::npos) << text;
  EXPECT_NE(text.find("} 0.250\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("gpuslice_slice_held_gpus{slice=\"6\""), std::string::npos) << text;
}

}  // namespace
}  // namespace gpuslice::agent
