#include "sched/user_caps.h"

namespace gpuslice::sched {

std::optional<UserCap> UserCaps::Reason(const QueueConfig& q, const std::string& user, MilliGpu milli) const {
  if (!Capped(q)) return std::nullopt;
  const Usage u = Of(q.name, user);
  const std::optional<UserCap::Limit> passed = Passed(q, u, milli);
  if (!passed) return std::nullopt;
  if (*passed == UserCap::Limit::kJobs) return UserCap{q.name, user, UserCap::Limit::kJobs, q.user_max_jobs, u.jobs, 1};
  return UserCap{q.name, user, UserCap::Limit::kMilli, q.user_max_milli, u.milli, milli};
}

UserCaps::Usage UserCaps::Of(const std::string& queue, const std::string& user) const {
  auto it = usage_.find({queue, user});
  return it == usage_.end() ? Usage{} : it->second;
}

void UserCaps::Count(const std::string& queue, const std::string& user, MilliGpu milli, int jobs) {
  Usage& u = usage_[{queue, user}];
  u.milli += milli;
  u.jobs += jobs;
}

std::optional<UserCap::Limit> UserCaps::Passed(const QueueConfig& q, const Usage& u, MilliGpu milli) {
  if (q.user_max_jobs > 0 && u.jobs + 1 > q.user_max_jobs) return UserCap::Limit::kJobs;
  if (q.user_max_milli > 0 && u.milli + milli > q.user_max_milli) return UserCap::Limit::kMilli;
  return std::nullopt;
}

}  // namespace gpuslice::sched
