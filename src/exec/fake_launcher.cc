#include "exec/fake_launcher.h"

#include <signal.h>

namespace gpuslice::exec {

Result<ProcessHandle> FakeLauncher::Start(
    const LaunchSpec& spec, const std::function<Status(const ProcessHandle&)>& commit) {
  ProcessHandle h;
  {
    std::lock_guard lock(mu_);
    if (!fail_next_.ok()) {
      Status st = fail_next_;
      fail_next_ = Status::Ok();
      return st;
    }
    h = ProcessHandle{next_pid_++, 1, false, spec.status_path};
  }
  GPUSLICE_RETURN_IF_ERROR(commit(h));
  std::lock_guard lock(mu_);
  procs_[h.pid] = std::nullopt;
  launches_.push_back(spec);
  return h;
}

Status FakeLauncher::Signal(const ProcessHandle& h, int sig) {
  std::lock_guard lock(mu_);
  signals_.emplace_back(h.pid, sig);
  auto it = procs_.find(h.pid);
  if (it != procs_.end() && !it->second &&
      (sig == SIGKILL || (sig == SIGTERM && !ignore_sigterm_))) {
    it->second = ExitInfo{std::nullopt, sig, true};
  }
  return Status::Ok();
}

std::optional<ExitInfo> FakeLauncher::Poll(const ProcessHandle& h) {
  std::lock_guard lock(mu_);
  auto it = procs_.find(h.pid);
  if (it == procs_.end()) return ExitInfo{};
  return it->second;
}

bool FakeLauncher::StillAlive(const ProcessHandle& h) {
  std::lock_guard lock(mu_);
  auto it = procs_.find(h.pid);
  return it != procs_.end() && !it->second;
}

void FakeLauncher::Exit(int pid, int code) {
  std::lock_guard lock(mu_);
  procs_[pid] = ExitInfo{code, std::nullopt, true};
}

void FakeLauncher::Vanish(int pid) {
  std::lock_guard lock(mu_);
  procs_[pid] = ExitInfo{};
}

void FakeLauncher::FailNextStart(Status st) {
  std::lock_guard lock(mu_);
  fail_next_ = std::move(st);
}

std::vector<LaunchSpec> FakeLauncher::launches() const {
  std::lock_guard lock(mu_);
  return launches_;
}

std::vector<std::pair<int, int>> FakeLauncher::signals() const {
  std::lock_guard lock(mu_);
  return signals_;
}

void FakeLauncher::set_ignore_sigterm(bool ignore) {
  std::lock_guard lock(mu_);
  ignore_sigterm_ = ignore;
}

}  // namespace gpuslice::exec
