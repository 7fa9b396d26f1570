#pragma once
// Runs one outside command (sbatch, squeue, scontrol, scancel, ...) to completion with a hard
// deadline, so that a Slurm controller that is down or hung turns into a clear error instead
// of a hang. The child gets its own process group; on timeout the whole group is killed.
// Free functions; thread-safe (no shared state besides the child it waits for).

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::slurm {

struct CommandSpec {
  std::vector<std::string> argv;            // argv[0] is looked up on PATH
  std::map<std::string, std::string> env;   // added to (or replacing) the inherited environment
  std::string stdin_text;                   // written to the child's stdin, then closed
  Micros timeout = 10 * kSecond;
};

struct CommandResult {
  int exit_code = 0;          // exit status; 128+N when killed by signal N
  std::string out;            // stdout
  std::string err;            // stderr
};

// OK with the exit status when the command ran (a non-zero exit is not an error here).
// Unavailable when it cannot be started (not installed); DeadlineExceeded when it ran past
// `timeout` (it is killed, with its process group).
Result<CommandResult> RunCommand(const CommandSpec& spec);

// "'a b' 'c'" — for messages and for building shell scripts; single-quotes every word.
std::string ShellQuote(const std::string& word);
std::string ShellJoin(const std::vector<std::string>& words);

}  // namespace gpuslice::slurm
