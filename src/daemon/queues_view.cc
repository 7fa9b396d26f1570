// GET /v1/queues: every configured queue's settings and how many of its jobs wait and run.
#include <algorithm>

#include "daemon/activity.h"
#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {

Json Daemon::Impl::Queues() const {
  std::shared_lock lock(mu_);
  Micros now = Now();
  Json arr = Json::array();
  for (const auto& q : config_.queues) {
    int pending = 0, running = 0;
    Micros oldest = 0;
    for (const auto& [id, j] : jobs_) {
      if (j.queue != q.name) continue;
      if (j.state == JobState::kPending) {
        ++pending;
        oldest = std::max(oldest, now - j.submit_time);
      } else if (!store::IsTerminal(j.state)) {
        ++running;
      }
    }
    api::QueueView o;
    o.name = q.name;
    o.default_kind = std::string(sched::SliceKindName(q.default_kind));
    for (auto k : q.allowed_kinds) o.allowed_kinds.emplace_back(sched::SliceKindName(k));
    o.priority = q.priority;
    o.time_limit_us = q.time_limit;
    o.max_duration_us = q.max_duration;
    o.reserve_after_us = q.reserve_after;
    o.idle_reclaim = q.idle.enabled && q.idle.action == sched::ReclaimAction::kReclaim;
    o.idle_window_us = q.idle.window;
    o.idle_grace_us = q.idle.grace;
    o.idle_reclaim_mode = std::string(IdleReclaimMode(q.idle));
    for (const Json& s : IdleSignalsJson(q.idle)) o.idle_signals.push_back(s.get<std::string>());
    o.pending = pending;
    o.running = running;
    o.oldest_wait_us = oldest;
    o.user_max_jobs = q.user_max_jobs;
    o.user_max_milli = q.user_max_milli;
    arr.push_back(o.ToJson());
  }
  return Json{{"queues", arr}, {"default_queue", config_.default_queue},
              {"simulated", opt_.simulated}};
}

}  // namespace gpuslice::daemon
