// ScriptedBackend: the one script format, laid over a wrapped backend's samples at the
// interface; job entries find a real process by its environment; a bad rewrite changes nothing.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "devices/fake.h"
#include "devices/scripted.h"

namespace gpuslice::devices {
namespace {

class ScriptedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() / ("scripted_test_" + std::to_string(getpid()) + ".json");
    auto fake = FakeBackend::Create("2xH100-80GB");
    ASSERT_TRUE(fake.ok());
    backend_ = std::make_unique<ScriptedBackend>(std::move(fake).value(), path_.string());
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }

  std::filesystem::path path_;
  std::unique_ptr<ScriptedBackend> backend_;
};

TEST_F(ScriptedTest, ProcessesAndDeviceFiguresOverlayTheWrappedSample) {
  Write(R"({"devices": {"1": 30}, "processes": [{"pid": 4242, "device": 0, "sm": 40, "memory": "2GiB"},
                                               {"pid": 4343, "device": 0, "sm": 70}]})");
  ASSERT_TRUE(backend_->Load().ok()) << backend_->Load().ToString();
  auto s0 = backend_->Sample(DeviceIndex(0));
  ASSERT_TRUE(s0.ok());
  ASSERT_EQ(s0->processes.size(), 2u);
  EXPECT_EQ(s0->processes[0].pid, 4242);
  EXPECT_EQ(s0->processes[0].sm_util.value(), 400);
  EXPECT_EQ(s0->gpu_util.value(), 1000) << "the processes' sum, capped at 100%";
  EXPECT_EQ(s0->memory_used.value(), 2 * kGiB);
  auto s1 = backend_->Sample(DeviceIndex(1));
  ASSERT_TRUE(s1.ok());
  EXPECT_TRUE(s1->processes.empty());
  EXPECT_EQ(s1->gpu_util.value(), 300);
  EXPECT_EQ(backend_->kind(), "fake") << "forwards what it does not script";
}

TEST_F(ScriptedTest, AJobEntryIsItsTopProcessOnTheDevicesItMayUse) {
  auto devs = backend_->ListDevices();
  ASSERT_TRUE(devs.ok());
  const std::string uuid1 = (*devs)[1].uuid;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t top = ::fork();
  if (top == 0) {
    ::setpgid(0, 0);
    ::setenv("GPUSLICE_JOB_ID", "77", 1);
    ::setenv("CUDA_VISIBLE_DEVICES", uuid1.c_str(), 1);
    if (::fork() == 0) {  // a child carries the same environment: not listed again
      ::execl("/bin/sleep", "sleep", "30", nullptr);
      ::_exit(127);
    }
    (void)!::write(fds[1], "x", 1);
    ::execl("/bin/sleep", "sleep", "30", nullptr);
    ::_exit(127);
  }
  ::close(fds[1]);
  char c;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);
  ::close(fds[0]);
  ::usleep(50000);  // both have exec'd
  Write(R"({"jobs": {"77": {"sm": 80, "memory": "1GiB"}}})");
  auto s1 = backend_->Sample(DeviceIndex(1));
  auto s0 = backend_->Sample(DeviceIndex(0));
  ::kill(-top, SIGKILL);
  ::kill(top, SIGKILL);
  ::waitpid(top, nullptr, 0);
  ASSERT_TRUE(s1.ok() && s0.ok());
  ASSERT_EQ(s1->processes.size(), 1u);
  EXPECT_EQ(s1->processes[0].pid, top);
  EXPECT_EQ(s1->processes[0].sm_util.value(), 800);
  EXPECT_TRUE(s0->processes.empty()) << "CUDA_VISIBLE_DEVICES names device 1 only";
}

TEST_F(ScriptedTest, ABadRewriteChangesNothingAndNamesTheField) {
  Write(R"({"processes": [{"pid": 10, "device": 0, "sm": 50}]})");
  ASSERT_TRUE(backend_->Load().ok());
  Write(R"({"processes": [{"pid": 10, "device": 0, "sm": 150}]})");
  auto s = backend_->Sample(DeviceIndex(0));
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->processes.size(), 1u);
  EXPECT_EQ(s->processes[0].sm_util.value(), 500) << "the last good script stays";
  EXPECT_NE(backend_->last_error().message().find("processes[0].sm = 150"), std::string::npos)
      << backend_->last_error().ToString();
  EXPECT_FALSE(ParseDeviceScript(R"({"job": {}})").ok()) << "unknown field";
  EXPECT_FALSE(ParseDeviceScript(R"({"processes": [{"pid": 1}]})").ok()) << "a process needs a device";
  EXPECT_FALSE(ParseDeviceScript("[1,2]").ok());
}

}  // namespace
}  // namespace gpuslice::devices
