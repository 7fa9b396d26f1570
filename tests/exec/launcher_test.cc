// Launcher contract (real fork/exec and fake), plus what only real processes can show:
// environment, log, process group, user switch, and "commit failed => never ran".
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "exec/fake_launcher.h"
#include "exec/launcher.h"
#include "exec/proc.h"

namespace gpuslice::exec {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("exec_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  fs::permissions(d, fs::perms::all);
  return d;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls until the job's processes are all gone (bounded: 10 s).
std::optional<ExitInfo> WaitGone(Launcher& l, const ProcessHandle& h) {
  for (int i = 0; i < 1000; ++i) {
    auto e = l.Poll(h);
    if (e && e->group_gone) return e;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

LaunchSpec Spec(const fs::path& dir, std::vector<std::string> argv) {
  LaunchSpec s;
  s.job = JobId(1);
  s.argv = std::move(argv);
  s.cwd = dir.string();
  s.env = {{"PATH", "/usr/bin:/bin"}, {"GPUSLICE_JOB_ID", "1"}};
  s.log_path = (dir / "job.log").string();
  return s;
}

struct Impl {
  std::string name;
  std::function<std::unique_ptr<Launcher>()> make;
};

class LauncherContract : public ::testing::TestWithParam<Impl> {};

TEST_P(LauncherContract, CommitSeesThePidAndTermEndsTheJob) {
  auto dir = TempDir("contract_" + GetParam().name);
  auto l = GetParam().make();
  ProcessHandle committed;
  auto h = l->Start(Spec(dir, {"sleep", "30"}), [&](const ProcessHandle& ph) {
    committed = ph;
    return Status::Ok();
  });
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(committed.pid, h->pid);
  EXPECT_GT(h->pid, 0);
  EXPECT_FALSE(l->Poll(*h).has_value());
  EXPECT_TRUE(l->StillAlive(*h));
  ASSERT_TRUE(l->Signal(*h, SIGTERM).ok());
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->signal, SIGTERM);
  EXPECT_FALSE(l->StillAlive(*h));
  fs::remove_all(dir);
}

TEST_P(LauncherContract, FailedCommitMeansNothingRuns) {
  auto dir = TempDir("commitfail_" + GetParam().name);
  auto l = GetParam().make();
  int pid = 0;
  auto h = l->Start(Spec(dir, {"touch", (dir / "ran").string()}), [&](const ProcessHandle& ph) {
    pid = ph.pid;
    return Internal("disk full");
  });
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(), "disk full");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(fs::exists(dir / "ran"));
  EXPECT_FALSE(l->StillAlive(ProcessHandle{pid, 1, false}));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(All, LauncherContract,
                         ::testing::Values(Impl{"process", [] { return NewProcessLauncher(); }},
                                           Impl{"fake", [] {
                                                  return std::unique_ptr<Launcher>(
                                                      std::make_unique<FakeLauncher>());
                                                }}),
                         [](const auto& info) { return info.param.name; });

TEST(ProcessLauncher, JobSeesItsEnvironmentAndCwdAndLogsBothStreams) {
  auto dir = TempDir("env");
  auto l = NewProcessLauncher();
  auto spec = Spec(dir, {"sh", "-c", "echo out; echo err >&2; pwd; env; exit 3"});
  spec.env.emplace_back("CUDA_VISIBLE_DEVICES", "GPU-abc");
  auto h = l->Start(spec, [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 3);
  std::string log = Slurp(dir / "job.log");
  EXPECT_NE(log.find("out\n"), std::string::npos);
  EXPECT_NE(log.find("err\n"), std::string::npos);
  EXPECT_NE(log.find(dir.string() + "\n"), std::string::npos);
  EXPECT_NE(log.find("CUDA_VISIBLE_DEVICES=GPU-abc"), std::string::npos);
  EXPECT_NE(log.find("GPUSLICE_JOB_ID=1"), std::string::npos);
  EXPECT_EQ(log.find("HOME="), std::string::npos) << "only the given environment";
  fs::remove_all(dir);
}

TEST(ProcessLauncher, SignalReachesTheWholeGroupAndGroupKeepsJobAlive) {
  auto dir = TempDir("group");
  auto l = NewProcessLauncher();
  // The leader exits at once, leaving a background child in its group.
  auto h = l->Start(Spec(dir, {"sh", "-c", "sleep 30 & echo $! > child.pid"}),
                    [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok());
  std::optional<ExitInfo> e;
  for (int i = 0; i < 500 && !e; ++i) {
    e = l->Poll(*h);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_FALSE(e->group_gone) << "the background sleep is still in the group";
  EXPECT_TRUE(ProcessGroupAlive(h->pid));
  ASSERT_TRUE(l->Signal(*h, SIGKILL).ok());
  auto gone = WaitGone(*l, *h);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->exit_code, 0) << "the leader's own status is kept";
  fs::remove_all(dir);
}

TEST(ProcessLauncher, MissingProgramFailsInTheLogWith127) {
  auto dir = TempDir("missing");
  auto l = NewProcessLauncher();
  auto h = l->Start(Spec(dir, {"no-such-program-gpuslice"}),
                    [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok());
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 127);
  EXPECT_NE(Slurp(dir / "job.log").find("exec no-such-program-gpuslice"), std::string::npos);
  fs::remove_all(dir);
}

TEST(ProcessLauncher, RunsAsTheSubmittingUser) {
  if (!CanSwitchUsers()) GTEST_SKIP() << "needs root";
  auto dir = TempDir("user");
  auto l = NewProcessLauncher();
  auto spec = Spec(dir, {"sh", "-c", "id -u; id -g; id -G"});
  spec.uid = 65534;
  spec.gid = 65534;
  spec.user = "nobody";
  auto h = l->Start(spec, [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0);
  std::string log = Slurp(dir / "job.log");
  EXPECT_EQ(log.substr(0, 12), "65534\n65534\n") << log;
  EXPECT_EQ(log.find(" 0"), std::string::npos) << "root's group 0 dropped: " << log;
  fs::remove_all(dir);
}

TEST(ProcessLauncher, ReusedPidIsNotTheJob) {
  auto l = NewProcessLauncher();
  ProcessHandle self{getpid(), ProcessStartTicks(getpid()).value(), true};
  EXPECT_TRUE(l->StillAlive(self));
  EXPECT_FALSE(l->Poll(self).has_value());
  ProcessHandle other{getpid(), self.start_ticks + 1, true};
  auto e = l->Poll(other);
  ASSERT_TRUE(e.has_value());
  EXPECT_FALSE(e->exit_code.has_value()) << "adopted: exit status unknown";
}

TEST(ProcessLauncher, EmptyCommandIsInvalid) {
  auto l = NewProcessLauncher();
  LaunchSpec s;
  auto h = l->Start(s, [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpuslice::exec
