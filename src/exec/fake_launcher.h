#pragma once
// FakeLauncher: records launches and lets a test decide when each job "exits". Used by daemon
// unit tests that need no real processes. Thread-safe.

#include <map>
#include <mutex>

#include "exec/launcher.h"

namespace gpuslice::exec {

class FakeLauncher final : public Launcher {
 public:
  Result<ProcessHandle> Start(const LaunchSpec& spec,
                              const std::function<Status(const ProcessHandle&)>& commit) override;
  Status Signal(const ProcessHandle& h, int sig) override;
  std::optional<ExitInfo> Poll(const ProcessHandle& h) override;
  bool StillAlive(const ProcessHandle& h) override;

  // Test controls.
  void Exit(int pid, int code);
  // The processes end with no recorded exit status (as when the exec stub is killed).
  void Vanish(int pid);
  void FailNextStart(Status st);
  std::vector<LaunchSpec> launches() const;
  std::vector<std::pair<int, int>> signals() const;  // (pid, signal)
  // Whether a signal ends the fake process (default: SIGTERM and SIGKILL do).
  void set_ignore_sigterm(bool ignore);

 private:
  mutable std::mutex mu_;
  int next_pid_ = 1000;
  std::map<int, std::optional<ExitInfo>> procs_;
  std::vector<LaunchSpec> launches_;
  std::vector<std::pair<int, int>> signals_;
  Status fail_next_;
  bool ignore_sigterm_ = false;
};

// A Launcher that forwards to a FakeLauncher owned elsewhere: the daemon owns its launcher,
// and a test keeps the fake to script and inspect it (and to hand it to a restarted daemon).
class FakeLauncherRef final : public Launcher {
 public:
  explicit FakeLauncherRef(FakeLauncher* l) : l_(l) {}
  Result<ProcessHandle> Start(const LaunchSpec& spec,
                              const std::function<Status(const ProcessHandle&)>& c) override {
    return l_->Start(spec, c);
  }
  Status Signal(const ProcessHandle& h, int sig) override { return l_->Signal(h, sig); }
  std::optional<ExitInfo> Poll(const ProcessHandle& h) override { return l_->Poll(h); }
  bool StillAlive(const ProcessHandle& h) override { return l_->StillAlive(h); }

 private:
  FakeLauncher* l_;
};

}  // namespace gpuslice::exec
