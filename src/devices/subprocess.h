#pragma once
// Runs a helper program (nvidia-cuda-mps-control, ...) with extra environment, optional stdin
// text, captured stdout+stderr and a deadline; kills it (SIGKILL) past the deadline. Uses
// fork+execve with everything prepared before the fork, so it is safe in threaded programs.
// Free functions; thread-safe.

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::devices {

struct ProcessResult {
  int exit_code = -1;     // -1 if killed by a signal
  std::string output;     // stdout and stderr together (empty when not captured)
};

struct RunOptions {
  std::map<std::string, std::string> env;  // added to / overriding the inherited environment
  std::string stdin_text;
  // false for programs that daemonise: their children keep the pipe open, so we must not
  // wait for EOF; output then goes to /dev/null.
  bool capture_output = true;
  Micros timeout = 10 * kSecond;
};

// Looks `program` up on PATH unless it contains a '/'. NotFound if absent / not executable.
Result<std::string> FindExecutable(const std::string& program);

// DeadlineExceeded past the timeout; Unavailable if it cannot be started.
Result<ProcessResult> RunProcess(const std::vector<std::string>& argv, const RunOptions& options);

}  // namespace gpuslice::devices
