// Config reloads (ConfigReload, events.h): installing the queues' versions (QueueVersions,
// queue_versions.h), and moving the jobs to the new config's queues. Part of Scheduler::Impl
// (scheduler_impl.h); self-contained so that it moves as one piece when the Impl is split into
// parts.
#include <cassert>
#include <set>
#include <vector>

#include "sched/scheduler_impl.h"

namespace gpuslice::sched {

void Scheduler::Impl::InstallQueues() {
  queues_.Install(config_.queues);
  for (const QueueConfig& q : config_.queues) {
    placement_.UsePolicy(queues_.PlacementOf(queues_.Current(q.name)).policy.get(), cluster_);
    reservations_.NoteQueue(q);
  }
}

const QueueConfig* Scheduler::Impl::QueueOf(JobId job) const {
  if (const Resolved* r = jobs_.FindRecord(job)) return r->queue;
  const JobView* j = jobs_.Find(job);
  return j == nullptr ? nullptr : queues_.Current(j->queue);
}

void Scheduler::Impl::OnConfigReload(const ConfigReload& e) {
  if (!ValidateConfig(e.config).ok()) {
    assert(false && "ConfigReload with an invalid config");
    return;
  }
  // 1. Pending jobs leave the books keyed by their queue's version (priority, shape, queues of
  // whole-GPU jobs); kept devices are chosen again under the new reserve_after.
  ReleaseReservation();
  std::set<JobId> pending;
  for (const auto& [k, r] : pending_.all()) pending.insert(k.job);
  for (JobId id : pending) pending_.Remove(jobs_.RecordOf(id));
  // 2. The new queues.
  config_ = e.config;
  InstallQueues();
  // 3. Each job follows the new queue of its name, if there is one; else it keeps its queue's
  // last settings until it ends. In JobId order: shape ids are handed out in that order.
  for (const auto& [id, view] : jobs_.views()) {
    Resolved* rp = jobs_.FindRecord(id);
    if (rp == nullptr) continue;  // ended
    Resolved& r = *rp;
    const QueueConfig* q = queues_.Current(r.queue->name);
    if (q == nullptr) continue;
    const IdlePolicy old_idle = r.queue->idle;
    r.queue = q;
    r.shape = shapes_.IdOf(r);
    if (view.state == JobState::kPending) {
      r.limit = q->EffectiveLimit(view.request.time_limit);
      continue;
    }
    // Running: its deadline stays; a changed idle policy starts its idle watch again from the
    // slice's last activity (an earlier warning was given under the old rule).
    SliceView& s = r.slice->second;
    if (!(old_idle == q->idle) && s.idle != IdleState::kActive) {
      s.idle = IdleState::kActive;
      s.idle_deadline = 0;
      timers_.ClearReclaimable(s.slice);
    }
    Retime(s);
  }
  // 4. Per-user usage, for the queues now capped.
  user_caps_.Clear();
  for (const auto& [sid, s] : cluster_.slices()) {
    const Resolved& r = jobs_.RecordOf(s.job);
    user_caps_.Add(*r.queue, r.view->user, SliceUsage(s));
  }
  teams_.Clear(now_);
  teams_.SetHalfLife(config_.teams.half_life, now_);
  for (const auto& [sid, s] : cluster_.slices()) CountTeam(jobs_.RecordOf(s.job), s, +1);
  // 5. Back in the pending books, and a pass under the new rules.
  for (JobId id : pending) pending_.Add(&jobs_.RecordOf(id));
  Schedule(std::nullopt);
}

}  // namespace gpuslice::sched
