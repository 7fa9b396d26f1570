#pragma once
// The daemon's private state on disk and the paths it claims at start (docs/security.md):
//   - the state directory holds every job's environment (in the store) and output (logs/), so
//     it is mode 0700, owned by the daemon's effective user, and its files are 0600;
//   - one `gpuslice serve` per state directory, enforced by an flock held for the daemon's
//     life (two daemons on one store would both schedule, and run a pending job twice);
//   - the API socket path is taken over only from a dead daemon, never from a live one or from
//     something that is not a socket.
// Free functions and a move-only RAII lock; not thread-safe (serve calls them once, at start).

#include <string>

#include "core/status.h"

namespace gpuslice::daemon {

// Creates `dir` with mode 0700 (parents as needed), or checks the existing one: it must be a
// directory (a symlink is refused: whoever controls its target would control the state) owned
// by this process's effective uid; group/other permissions are removed (logged as a warning).
// Files the daemon left there before (gpuslice.db and its -wal/-shm, the lock, logs/*) are
// tightened the same way, so an upgrade from a version that made them world-readable closes
// the hole at the next start. Errors name the path and what is wrong.
Status PrepareStateDir(const std::string& dir);

// An exclusive flock on <dir>/lock, held until destroyed (or the process dies: the kernel
// drops it, so a crashed daemon never leaves a stale lock). The file holds the holder's pid.
// The descriptor is close-on-exec: jobs must not inherit the lock, or a job outliving the
// daemon would keep a restart from ever starting.
class StateDirLock {
 public:
  // FailedPrecondition naming the directory and the holder's pid when another process holds
  // the lock.
  static Result<StateDirLock> Acquire(const std::string& dir);
  StateDirLock(StateDirLock&& other) noexcept;
  StateDirLock& operator=(StateDirLock&& other) noexcept;
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;
  ~StateDirLock();

 private:
  explicit StateDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Makes `path` free for a new Unix socket: nothing there is fine; a stale socket (a socket
// nobody accepts on: connect() is refused) is removed; a live socket (another daemon answers)
// and anything that is not a socket (regular file, directory, symlink, fifo) are refused with
// an error naming the path, and left as they are.
Status PrepareSocketPath(const std::string& path);

}  // namespace gpuslice::daemon
