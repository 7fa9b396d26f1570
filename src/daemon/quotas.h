#pragma once
// Per-user storage quotas: what one user's jobs may hold in the store and the daemon's memory
// before they run. A job keeps its argv and environment while it may still start (pending,
// starting, running, stopping: a requeued job starts again); without a cap, one user could queue
// thousands of jobs carrying a megabyte of environment each and fill the disk and the daemon's
// memory for everyone. Once a job ends its environment is dropped and its argv cut
// (store::PrivateCopy), so what the quotas bound is what can be held at once.
//
// UserLedger is fed every job record the daemon commits (daemon/commit.cc), so it follows every
// change of state through one door; each update is O(log n). Not thread-safe: the daemon's mutex
// guards it.

#include <cstdint>
#include <map>
#include <string>

#include "core/ids.h"
#include "core/status.h"
#include "core/units.h"
#include "store/store.h"

namespace gpuslice::daemon {

// Defaults in docs/security.md ("Limits and their defaults"); `serve` flags set them.
struct UserQuotas {
  int max_pending_jobs = 500;                      // --max-pending-per-user
  Bytes max_env_bytes_per_job = 256 * kKiB;        // --max-env-per-job
  Bytes max_submitted_bytes_per_user = 64 * kMiB;  // --max-submitted-per-user: argv + env, unfinished jobs
  // Ranges; the message names the flag and the value.
  Status Validate() const;
};

class UserLedger {
 public:
  // A job's environment as execve counts it: every NAME=value with its NUL.
  static Bytes EnvBytes(const store::JobRecord& j);
  // argv and environment together (each string with its NUL).
  static Bytes SubmittedBytes(const store::JobRecord& j);

  // Follows a committed record: counted while the job has not ended, forgotten once it has.
  void Record(const store::JobRecord& j);
  // Whether the new (pending) job `j` fits its user's quotas; else RESOURCE_EXHAUSTED naming the
  // limit, its serve flag and the figures. Changes nothing.
  Status Admit(const store::JobRecord& j, const UserQuotas& q) const;

  int pending(std::int64_t uid) const;
  Bytes submitted_bytes(std::int64_t uid) const;

 private:
  struct Entry {
    std::int64_t uid = -1;
    bool pending = false;
    Bytes bytes = 0;
  };
  struct Totals {
    int pending = 0;
    Bytes bytes = 0;
  };
  void Forget(JobId id);

  std::map<JobId, Entry> entries_;
  std::map<std::int64_t, Totals> by_uid_;
};

}  // namespace gpuslice::daemon
