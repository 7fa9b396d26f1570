// MpsController against a stand-in control binary that speaks the same protocol as
// nvidia-cuda-mps-control (`-d` daemonises; otherwise commands on stdin, exit 0 iff a daemon
// answers on $CUDA_MPS_PIPE_DIRECTORY). Real processes, real pipe/log directories.

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "devices/mps.h"
#include "testing/files.h"

namespace gpuslice::devices {
namespace {

using gpuslice::testing::Slurp;

namespace fs = std::filesystem;

constexpr const char* kScript = R"(#!/bin/bash
d="${CUDA_MPS_PIPE_DIRECTORY:?}"
alive() { [ -n "$1" ] && [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
if [ "${1:-}" = "-d" ]; then
  echo "launch $CUDA_VISIBLE_DEVICES $CUDA_MPS_LOG_DIRECTORY" >> "$d/launches"
  sleep 60 </dev/null >/dev/null 2>&1 &
  echo $! > "$d/nvidia-cuda-mps-control.pid"
  exit 0
fi
pid=$(cat "$d/nvidia-cuda-mps-control.pid" 2>/dev/null)
alive "$pid" || exit 1
while read -r line; do
  echo "$line" >> "$d/commands"
  case "$line" in
    quit) kill "$pid"; rm -f "$d/nvidia-cuda-mps-control.pid" ;;
    get_default_active_thread_percentage) echo 100 ;;
  esac
done
exit 0
)";

class MpsControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gs-mps-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    binary_ = dir_ / "nvidia-cuda-mps-control";
    std::ofstream(binary_) << kScript;
    fs::permissions(binary_, fs::perms::owner_all);
    config_ = {(dir_ / "pipe").string(), (dir_ / "log").string(), 30, 2 * kGiB};
  }
  void TearDown() override {
    // Never leave the stand-in daemon behind, even when a test failed half-way.
    const std::string pid = Slurp(fs::path(config_.pipe_dir) / "nvidia-cuda-mps-control.pid");
    if (!pid.empty()) ::kill(std::atoi(pid.c_str()), SIGKILL);
    fs::remove_all(dir_);
  }
  int DaemonPid() { return std::atoi(Slurp(fs::path(config_.pipe_dir) / "nvidia-cuda-mps-control.pid").c_str()); }

  fs::path dir_;
  fs::path binary_;
  MpsConfig config_;
};

TEST_F(MpsControllerTest, StartLaunchesOneDaemonWithItsDirectoriesAndLimits) {
  MpsController mps(binary_.string());
  ASSERT_TRUE(mps.Start("GPU-aaaa", config_).ok());
  EXPECT_EQ(Slurp(fs::path(config_.pipe_dir) / "launches"), "launch GPU-aaaa " + config_.log_dir + "\n");
  const std::string commands = Slurp(fs::path(config_.pipe_dir) / "commands");
  EXPECT_NE(commands.find("set_default_active_thread_percentage 30\n"), std::string::npos) << commands;
  EXPECT_NE(commands.find("set_default_device_pinned_mem_limit 0 2G\n"), std::string::npos) << commands;
  auto st = mps.Probe(config_.pipe_dir);
  EXPECT_EQ(st.state, MpsState::kRunning);
  EXPECT_EQ(st.control_pid, DaemonPid());
  EXPECT_GT(st.control_pid, 0);

  // Retry (e.g. after gpuslice restarted): no second daemon.
  ASSERT_TRUE(mps.Start("GPU-aaaa", config_).ok());
  EXPECT_EQ(Slurp(fs::path(config_.pipe_dir) / "launches"), "launch GPU-aaaa " + config_.log_dir + "\n");
  ASSERT_TRUE(mps.Stop(config_.pipe_dir).ok());
}

TEST_F(MpsControllerTest, NoticesADeadDaemonAndRestartsIt) {
  MpsController mps(binary_.string());
  ASSERT_TRUE(mps.Start("GPU-aaaa", config_).ok());
  ASSERT_EQ(::kill(DaemonPid(), SIGKILL), 0);
  // The stand-in is reaped by init asynchronously; poll briefly.
  MpsStatus st;
  for (int i = 0; i < 200; ++i) {
    st = mps.Probe(config_.pipe_dir);
    if (st.state != MpsState::kRunning) break;
    ::usleep(10000);
  }
  EXPECT_EQ(st.state, MpsState::kDied) << st.detail;
  EXPECT_FALSE(st.detail.empty());
  ASSERT_TRUE(mps.Start("GPU-aaaa", config_).ok());
  EXPECT_EQ(mps.Probe(config_.pipe_dir).state, MpsState::kRunning);
  ASSERT_TRUE(mps.Stop(config_.pipe_dir).ok());
}

TEST_F(MpsControllerTest, StopIsIdempotent) {
  MpsController mps(binary_.string());
  ASSERT_TRUE(mps.Start("GPU-aaaa", config_).ok());
  ASSERT_TRUE(mps.Stop(config_.pipe_dir).ok());
  EXPECT_NE(Slurp(fs::path(config_.pipe_dir) / "commands").find("quit\n"), std::string::npos);
  EXPECT_EQ(mps.Probe(config_.pipe_dir).state, MpsState::kStopped);
  EXPECT_TRUE(mps.Stop(config_.pipe_dir).ok());
  EXPECT_TRUE(mps.Stop((dir_ / "never-started").string()).ok());
}

TEST_F(MpsControllerTest, MissingBinaryIsUnavailable) {
  MpsController mps((dir_ / "absent").string());
  Status s = mps.Start("GPU-aaaa", config_);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("absent"), std::string::npos) << s.message();
  MpsController on_path("gpuslice-no-such-mps-control");
  EXPECT_EQ(on_path.Start("GPU-aaaa", config_).code(), StatusCode::kUnavailable);
}

TEST_F(MpsControllerTest, RejectsBadLimitsBeforeStartingAnything) {
  MpsController mps(binary_.string());
  MpsConfig bad = config_;
  bad.default_active_thread_percentage = 101;
  EXPECT_EQ(mps.Start("GPU-aaaa", bad).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(fs::path(config_.pipe_dir) / "launches"));
}

// One server, one user: the server is started for the slice's user right after the defaults
// (which apply to the next server spawned), whom it serves is remembered with the daemon, and
// another user is refused while it runs (their clients would hang at CUDA start-up).
TEST_F(MpsControllerTest, TheServerIsStartedForOneUserAndAnotherIsRefused) {
  MpsController mps(binary_.string());
  MpsConfig alice = config_;
  alice.server_uid = 1234;
  ASSERT_TRUE(mps.Start("GPU-aaaa", alice).ok());
  const std::string commands = Slurp(fs::path(config_.pipe_dir) / "commands");
  const auto limits = commands.find("set_default_device_pinned_mem_limit");
  const auto server = commands.find("start_server -uid 1234\n");
  ASSERT_NE(server, std::string::npos) << commands;
  EXPECT_LT(limits, server) << "the defaults must be set before the server is spawned";
  EXPECT_EQ(mps.Probe(config_.pipe_dir).server_uid, 1234);
  ASSERT_TRUE(mps.Start("GPU-aaaa", alice).ok()) << "a retry for the same user";
  MpsConfig bob = config_;
  bob.server_uid = 5678;
  Status refused = mps.Start("GPU-aaaa", bob);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("serves uid 1234"), std::string::npos) << refused.message();
  ASSERT_TRUE(mps.Stop(config_.pipe_dir).ok());
  ASSERT_TRUE(mps.Start("GPU-aaaa", bob).ok()) << "once stopped, the next user's server starts";
  EXPECT_EQ(mps.Probe(config_.pipe_dir).server_uid, 5678);
  ASSERT_TRUE(mps.Stop(config_.pipe_dir).ok());
}

TEST(MpsMemLimit, UsesGOnlyWhenExact) {
  EXPECT_EQ(MpsMemLimit(2 * kGiB), "2G");
  EXPECT_EQ(MpsMemLimit(1536 * kMiB), "1536M");
  EXPECT_EQ(MpsMemLimit(kMiB + 1), "2M");
}

}  // namespace
}  // namespace gpuslice::devices
