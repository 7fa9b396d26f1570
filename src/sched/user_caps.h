#pragma once
// Internal to the scheduler: the per-user caps of a queue (QueueConfig::user_max_jobs,
// user_max_milli). It keeps what each user's running jobs hold in each capped queue, so that
// whether one more job passes a cap is a lookup, not a scan of the slices. Only capped queues
// are booked: the scheduler calls Add/Remove for every job that starts or ends and the part
// ignores the rest, so a queue that becomes capped by a reload is booked only after Clear() and
// a recount (scheduler_config.cc). Not thread-safe (owned by one Scheduler, like its other books).

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/units.h"
#include "sched/config.h"
#include "sched/pending_reason.h"

namespace gpuslice::sched {

class UserCaps {
 public:
  // What a user's running jobs hold in one queue.
  struct Usage {
    MilliGpu milli = 0;
    int jobs = 0;
  };

  static bool Capped(const QueueConfig& q) { return q.user_max_milli > 0 || q.user_max_jobs > 0; }

  // A job of `user` holding `milli` starts (Add) or ends (Remove) in `q`; nothing when `q` is not
  // capped. A Remove must match an Add made under a config that capped `q` too.
  void Add(const QueueConfig& q, const std::string& user, MilliGpu milli) {
    if (Capped(q)) Count(q.name, user, milli, +1);
  }
  void Remove(const QueueConfig& q, const std::string& user, MilliGpu milli) {
    if (Capped(q)) Count(q.name, user, -milli, -1);
  }
  // Forgets everything (before a recount under a new config).
  void Clear() { usage_.clear(); }

  // One more job of `user` asking `milli` would pass a cap of `q`. Inline for the uncapped
  // queues: a pass asks this of every head it looks at.
  bool Blocks(const QueueConfig& q, const std::string& user, MilliGpu milli) const {
    return Capped(q) && Passed(q, Of(q.name, user), milli).has_value();
  }
  // The same test, with its figures (the pending reason).
  std::optional<UserCap> Reason(const QueueConfig& q, const std::string& user, MilliGpu milli) const;

  Usage Of(const std::string& queue, const std::string& user) const;
  // Every (queue, user) booked so far, ended users' zeros included (the invariants' recount).
  const std::map<std::pair<std::string, std::string>, Usage>& all() const { return usage_; }

 private:
  void Count(const std::string& queue, const std::string& user, MilliGpu milli, int jobs);
  // The cap that `u` plus one job asking `milli` passes (the jobs cap is checked first).
  static std::optional<UserCap::Limit> Passed(const QueueConfig& q, const Usage& u, MilliGpu milli);

  std::map<std::pair<std::string, std::string>, Usage> usage_;  // (queue, user)
};

}  // namespace gpuslice::sched
