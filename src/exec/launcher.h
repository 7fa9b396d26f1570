#pragma once
// Launcher: starts a job's processes and signals them. Real implementation: fork/exec
// (NewProcessLauncher); fake: records launches and lets tests end them (fake_launcher.h).
//
// Start protocol (why nothing starts twice after a crash): the job's process is the tiny
// gpuslice-exec stub (stub.cc), spawned vfork-style (usually ahead of time) and blocked on a
// socket. Start sends it the job and its log, calls `commit(handle)` — the daemon makes the pid
// durable there — and only then sends the go-ahead, on which the stub drops to the user and
// forks and execs the job. If the daemon dies
// before that, the stub reads EOF and exits 126 without running the job. So a job either has a
// stored pid, or it never ran.
//
// Results (why a restart never rewrites one): the stub stays the job's parent, waits for it
// and writes its exit status to `LaunchSpec::status_path` (atomically, by rename) before it
// exits. Poll reads the result from there, for our own children and for processes re-adopted
// after a restart alike, so a job that ended while the daemon was down keeps its exit code or
// signal. No status file (the stub was killed) means the result is unknown, never success.
// The stub leads the job's process group and ignores catchable signals; Signal(SIGKILL) kills
// every other member and spares it, so it still records the job's end.
//
// Thread-safe: calls may come from any thread.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ids.h"
#include "core/status.h"

namespace gpuslice::exec {

struct LaunchSpec {
  JobId job;
  std::vector<std::string> argv;   // argv[0] looked up on the job's PATH
  std::string cwd;                 // "" : the user's home or /
  std::vector<std::pair<std::string, std::string>> env;  // the complete environment
  std::int64_t uid = -1;           // -1: the daemon's own
  std::int64_t gid = -1;
  std::string user;                // for supplementary groups (getgrouplist)
  std::string log_path;            // stdout + stderr, appended
  // Absolute path where the stub records the job's exit status, in a directory only the
  // daemon's user may write (state/status/<job>.exit). Required.
  std::string status_path;
  std::string cgroup_parent;       // cgroup v2 directory to create job-<id> under; "" : none
  int umask = -1;                  // the job's file mode creation mask (0..0777); -1: the daemon's
};

// Identifies a job's processes across daemon restarts: the group leader's pid (= pgid) and
// its start time, so a reused pid is never mistaken for the job.
// The pid is the exec stub's: it leads the group and is the job's parent.
struct ProcessHandle {
  int pid = 0;
  std::uint64_t start_ticks = 0;
  bool adopted = false;  // not our child (re-adopted after a restart): not reaped by us
  std::string status_path;  // where the stub records the job's exit status (LaunchSpec)
};

// Both unset: the result is unknown (no status recorded: the stub was killed, or the job
// was started before results were recorded).
struct ExitInfo {
  std::optional<int> exit_code;    // normal exit
  std::optional<int> signal;       // killed by a signal
  bool group_gone = true;          // false: the leader exited but other group members live
  bool never_started = false;      // the stub got no go-ahead: the job never ran (last: the
                                   // fakes build ExitInfo positionally)
};

// The exit status recorded in `path` by the stub whose pid is `pid`; both fields unset when
// there is none (or it is another run's, or unreadable).
ExitInfo ReadStatusFile(const std::string& path, int pid);

class Launcher {
 public:
  virtual ~Launcher() = default;

  // Creates the processes; calls `commit` with the handle before the job may exec. A commit
  // error kills the child (it never runs the job) and is returned.
  virtual Result<ProcessHandle> Start(const LaunchSpec& spec,
                                      const std::function<Status(const ProcessHandle&)>& commit) = 0;
  // Sends `sig` to the whole process group (SIGKILL: all but a live exec stub, which must
  // record the end). A gone group is OK.
  virtual Status Signal(const ProcessHandle& h, int sig) = 0;
  // nullopt while the leader runs. Once the leader has exited: the job's status as recorded
  // (see "Results"; unknown if it was not) and whether any other process of its group remains.
  virtual std::optional<ExitInfo> Poll(const ProcessHandle& h) = 0;
  // After a restart: is this handle's leader still the same live process?
  virtual bool StillAlive(const ProcessHandle& h) = 0;
};

// `stub`: path of gpuslice-exec; "" finds it (FindExecStub). When there is none, Start fails
// with Unavailable naming it. `ready`: stubs kept spawned ahead of time, idle (a few hundred
// KiB each) until a job takes one, so a start costs a message and the commit, not a spawn; a
// background thread replaces each one taken. 0: spawn at each start.
inline constexpr int kDefaultReadyStubs = 8;
std::unique_ptr<Launcher> NewProcessLauncher(std::string stub = "", int ready = kDefaultReadyStubs);

// gpuslice-exec next to the running program, in ../libexec/gpuslice/, or in the build tree;
// "" if none is there.
std::string FindExecStub();

// True when this process may run jobs as other users (effective uid 0).
bool CanSwitchUsers();

}  // namespace gpuslice::exec
