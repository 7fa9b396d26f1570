#pragma once
// ChildProcess: runs memcap_child (a CUDA program against the fake libcuda) with a given
// environment and talks to it one command line at a time. For the memcap tests and benchmark.
// Not thread-safe; one object per child.

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace gpuslice::memcap::testing {

using EnvList = std::vector<std::pair<std::string, std::string>>;

class ChildProcess {
 public:
  // Starts `path` with exactly `env` (plus nothing inherited) and the given arguments.
  ChildProcess(const std::string& path, const EnvList& env,
               const std::vector<std::string>& args = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Sends one line and returns the reply line ("" on EOF or after 30 s without an answer).
  std::string Send(const std::string& line);
  // SIGKILLs the child and reaps it.
  void Kill();
  // Closes stdin and waits; returns the exit status (or -1).
  int Finish();

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string buffered_;
};

}  // namespace gpuslice::memcap::testing
