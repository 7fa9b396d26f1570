// Job lifecycle: resolving a request, the pending set, ending jobs; starting them (Start) and the
// scheduling pass (Schedule, SchedulePass).
// Part of Scheduler::Impl (scheduler_impl.h); see scheduler.cc for the order of an event.
#include "sched/scheduler_impl.h"

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace gpuslice::sched {

// ---------------------------------------------------------------- jobs
Result<Resolved> Scheduler::Impl::Resolve(const Submit& e) const {
  Resolved r;
  r.job = e.job;
  r.user = e.user;
  r.submit = now_;
  const std::string& qname = e.queue.empty() ? config_.default_queue : e.queue;
  r.queue = queues_.Current(qname);
  if (!r.queue) return NotFound(fmt::format("queue '{}' does not exist", qname));
  const QueueConfig& q = *r.queue;
  const JobRequest& req = e.request;
  r.kind = req.kind.value_or(q.default_kind);
  if (!q.Allows(r.kind))
    return InvalidArgument(fmt::format("queue '{}' does not allow slice kind '{}'", q.name,
                                       SliceKindName(r.kind)));
  if (req.gpus < 0) return InvalidArgument(fmt::format("gpus = {}: must not be negative", req.gpus));
  if (req.milli < 0 || req.milli > kOneGpu)
    return InvalidArgument(fmt::format("gpu = {}: must be between 1m and 1", req.milli));
  if (req.memory < 0) return InvalidArgument(fmt::format("memory = {}: must not be negative", req.memory));
  if (req.time_limit < 0)
    return InvalidArgument(fmt::format("time_limit = {}: must not be negative", req.time_limit));
  Micros queue_limit = q.EffectiveLimit(0);
  if (req.time_limit > 0 && queue_limit > 0 && req.time_limit > queue_limit)
    return InvalidArgument(fmt::format("time_limit = {}: longer than queue '{}' allows ({})",
                                       FormatDuration(req.time_limit), q.name,
                                       FormatDuration(queue_limit)));
  r.limit = q.EffectiveLimit(req.time_limit);
  if (!req.model.empty()) {
    auto m = FindModel(req.model);
    if (!m.ok()) return m.status();
    r.model = (*m)->name;
  }
  switch (r.kind) {
    case SliceKind::kWhole:
      r.gpus = req.gpus > 0 ? req.gpus : q.default_gpus;
      if (req.milli > 0 && req.milli != kOneGpu)
        return InvalidArgument(fmt::format("gpu = {}: whole slices take whole devices (use gpus=N)",
                                           FormatMilliGpu(req.milli)));
      r.milli = kOneGpu;
      break;
    case SliceKind::kShared:
    case SliceKind::kMps:
      if (req.gpus > 1)
        return InvalidArgument(fmt::format("gpus = {}: {} slices are on one device", req.gpus,
                                           SliceKindName(r.kind)));
      r.milli = req.milli > 0 ? req.milli : q.default_milli;
      r.memory = req.memory > 0 ? req.memory : q.default_memory;
      if (r.kind == SliceKind::kMps) r.mps_user = r.user;
      break;
    case SliceKind::kMig:
      if (req.gpus > 1)
        return InvalidArgument(fmt::format("gpus = {}: a mig slice is one instance", req.gpus));
      r.mig_need = req.memory > 0 ? req.memory : q.default_memory;
      if (r.mig_need <= 0) r.mig_need = 1;
      break;
  }
  if (q.user_max_milli > 0 && UsageMilli(r) > q.user_max_milli)
    return ResourceExhausted(fmt::format("asks for {} GPU, more than queue '{}' allows one user ({})",
                                         FormatMilliGpu(UsageMilli(r)), q.name,
                                         FormatMilliGpu(q.user_max_milli)));
  return r;
}

void Scheduler::Impl::OnSubmit(const Submit& e) {
  const auto at = jobs_.Where(e.job);  // where the job goes (jobs_ is not changed before)
  if (jobs_.Has(at, e.job)) {
    out_.push_back(Reject{e.job, AlreadyExists(fmt::format("job {} already submitted", e.job.value()))});
    ++stats_.rejected;
    return;
  }
  JobView j;
  j.job = e.job;
  j.user = e.user;
  j.queue = e.queue.empty() ? config_.default_queue : e.queue;
  j.request = e.request;
  j.submit_time = now_;
  auto r = Resolve(e);
  Status st = r.ok() ? cluster_.Feasible(*r) : r.status();
  if (st.ok()) {
    auto team = TeamFor(e);
    if (team.ok()) {
      j.team = *team;
      if (!team->empty()) r->team = teams_.IdOf(*team);
    } else {
      st = team.status();
    }
  }
  // A job the host as configured can never run is refused now rather than left waiting
  // forever (the same rule the pending reason "never-fits" states).
  if (st.ok()) {
    if (auto why = NeverFitsWhy(*r)) st = ResourceExhausted(*why);
  }
  if (!st.ok()) {
    jobs_.End(jobs_.AddView(at, std::move(j)), now_, "rejected");
    out_.push_back(Reject{e.job, st.WithContext(fmt::format("job {}", e.job.value()))});
    ++stats_.rejected;
    return;
  }
  j.kind = r->kind;
  r->shape = shapes_.IdOf(*r);
  Resolved* rp = &jobs_.Add(at, std::move(j), std::move(r).value());
  if (rp->kind != SliceKind::kMig) placement_.CountRequest(rp->gpus, rp->milli);
  pending_.Add(rp);
  Schedule(e.job);
}

void Scheduler::Impl::RejectPending(JobId id, const Status& st) {
  const Resolved& r = jobs_.RecordOf(id);
  ReleaseReservationOf(id);
  pending_.Remove(r);
  jobs_.End(*r.view, now_, "rejected");  // drops r
  out_.push_back(Reject{id, st.WithContext(fmt::format("job {}", id.value()))});
  ++stats_.rejected;
}

void Scheduler::Impl::OnCancel(const Cancel& e) {
  JobView* j = jobs_.Find(e.job);
  if (j == nullptr || j->state == JobState::kEnded) return;
  if (j->state == JobState::kPending) {
    Resolved& r = jobs_.RecordOf(e.job);
    const bool kept = reservations_.Holds(e.job);
    ReleaseReservationOf(e.job);
    if (j->held) {
      pending_.EndHeld(r);  // out of the queue already
    } else {
      pending_.Remove(r);
    }
    jobs_.End(*j, now_, "cancelled");  // drops r
    if (kept) Schedule(std::nullopt);  // the kept devices are free for others again
    return;
  }
  out_.push_back(Stop{e.job, j->slice, StopReason::kCancelled});
  ++stats_.stopped;
  OnEnd(e.job, "cancelled");
}

// A running job ends (finished, cancelled): release, then reschedule.
void Scheduler::Impl::OnEnd(JobId id, std::string_view reason) {
  // Running jobs are among the resolved ones (a hash lookup, not one among every job kept).
  const Resolved* r = jobs_.FindRecord(id);
  if (r == nullptr || r->view->state != JobState::kRunning) return;
  EndRunning(id, reason);
  Schedule(std::nullopt);
}

// A running job that never ran its command goes back to pending, keeping its key (priority,
// submit time, JobId): its place in the queue. Then reschedule, as its capacity is free.
void Scheduler::Impl::OnRequeue(const Requeue& e) {
  const JobView* j = jobs_.Find(e.job);
  if (j == nullptr || j->state != JobState::kRunning) return;
  EndRunning(e.job, e.reason, /*requeue=*/true);
  Schedule(std::nullopt);
}

// Releases a running job's slice; the job is ended (or pending again when `requeue`).
void Scheduler::Impl::EndRunning(JobId id, std::string_view reason, bool requeue) {
  Resolved& r = jobs_.RecordOf(id);
  JobView& j = *r.view;
  auto sit = r.slice;
  const SliceView& s = sit->second;  // released below, after its last use
  std::vector<const DeviceView*> devs = std::move(r.devices);
  r.devices.clear();
  user_caps_.Remove(*r.queue, j.user, SliceUsage(s));
  CountTeam(r, s, -1);
  timers_.Ended(s.slice);
  cluster_.Release(sit, devs);
  for (const DeviceView* dv : devs) mig_.NoteUse(*dv, now_);
  j.slice = SliceId();
  if (requeue) {
    j.state = JobState::kPending;
    pending_.Add(&r);
  } else {
    jobs_.End(j, now_, reason);  // drops r
  }
  // A draining device that became empty is reconfigured now.
  for (const DeviceView* dv : devs) MaybeFinishDrain(*dv);
}

// ---------------------------------------------------------------- starting jobs
void Scheduler::Impl::Start(const Resolved& r, Choice c) {
  JobId id = r.job;
  JobView& j = *r.view;
  Resolved& rw = jobs_.RecordOf(id);
  ReleaseReservationOf(id);  // before the devices change: they become schedulable again
  auto booked = cluster_.TryAllocate(r, c.node, c.devices, c.mig);
  if (!booked.ok()) {
    // Placement offers only devices that hold the job, by the same rule: a refusal is a bug,
    // which CheckInvariants reports. The job keeps waiting.
    if (violation_.empty()) violation_ = fmt::format("placement chose what cannot hold it: {}", booked.status().message());
    return;
  }
  pending_.Remove(r);
  rw.slice = booked->slice;
  rw.devices = std::move(booked->devices);  // the running job's, from now on
  SliceView& rec = rw.slice->second;
  rec.start_time = now_;
  rec.last_active = now_;
  rec.deadline = r.limit > 0 ? now_ + r.limit : 0;
  timers_.Set(rec.slice, NextTimer(rec, *r.queue));
  StartSlice d;
  d.job = id;
  d.slice = rec.slice;
  d.kind = r.kind;
  d.queue = j.queue;
  d.user = j.user;
  d.node = c.node;
  d.mig = c.mig;
  d.deadline = rec.deadline;
  d.milli = rec.milli;
  if (r.kind != SliceKind::kWhole) d.memory_cap = rec.memory;
  if (r.kind == SliceKind::kMps) d.mps_thread_percent = static_cast<int>((r.milli + 9) / 10);
  d.uuids.reserve(rw.devices.size());
  for (const DeviceView* dv : rw.devices) {
    d.uuids.push_back(dv->uuid);
    mig_.NoteUse(*dv, now_);
  }
  user_caps_.Add(*r.queue, j.user, SliceUsage(rec));
  CountTeam(r, rec, +1);
  j.state = JobState::kRunning;
  j.start_time = now_;
  j.slice = rec.slice;
  d.devices = std::move(c.devices);  // the slice record has its copy
  out_.push_back(std::move(d));
  ++stats_.started;
}

// Tries pending jobs (or just `only`) in order; then plans MIG for unmet demand. A shape
// that failed once is not retried in the same pass, and the pass ends once every shape
// present has failed: later jobs could only fail the same way.
void Scheduler::Impl::Schedule(std::optional<JobId> only) {
  SchedulePass(only);
  // On-demand idle reclaim: each round frees at least one slice, so this ends.
  while (!timers_.reclaimable().empty() && !pending_.empty() && ReclaimOnDemand(only)) {
    only.reset();
    SchedulePass(std::nullopt);
  }
  // Teams: capacity lent to other teams is taken back for a team waiting within its guarantee
  // (scheduler_teams.cc). Each round requeues at least one slice of a team past its guarantee
  // (or of no team); bounded per event all the same.
  for (int round = 0; config_.teams.enabled() && !pending_.empty() && round < kTakeBackRounds && TakeBack(); ++round)
    SchedulePass(std::nullopt);
}

void Scheduler::Impl::SchedulePass(std::optional<JobId> only) {
  shapes_.NewPass();
  bool mig_failed = false;
  auto unmet_mig = [&] {
    std::vector<const Resolved*> unmet;
    for (const auto& [k, r] : pending_.mig()) {
      if (unmet.size() >= kMaxPlannedNeeds) break;
      if (!CapBlocks(*r)) unmet.push_back(r);
    }
    return unmet;
  };
  auto attempt = [&](const Resolved& r) -> bool {  // true: failed
    if (CapBlocks(r)) return false;
    if (shapes_.Failed(r.shape)) return false;
    if (auto c = TryPlace(r)) {
      Start(r, std::move(*c));
      return false;
    }
    shapes_.MarkFailed(r.shape);
    if (r.kind == SliceKind::kMig && !mig_failed) {
      mig_failed = true;
      // Plan at once, before the jobs after it in queue order are placed: a GPU that is free
      // now goes to the MIG request (its priority), not to a lower-priority job that happens
      // to be tried later in this pass. Only layouts that need no drain here (no preemption
      // in the middle of a pass); a drain is planned at the end, as before.
      if (config_.mig.enabled) PlanMig(unmet_mig(), /*allow_drain=*/false);
    }
    return true;
  };
  if (only) {
    attempt(jobs_.RecordOf(*only));
  } else {
    // Jobs are tried in global queue order, skipping shapes that already failed in this
    // pass, by merging the per-shape queues (PendingQueue::WalkByShape): a pass costs
    // O(shapes + starts), not O(waiting jobs). attempt() does not schedule (not re-entered).
    // With teams, a first merge tries only jobs within their team's guarantee in their queue
    // (docs/teams.md): they go before everything else. A shape is one team, queue and ask, and
    // a team only grows within a pass, so a head beyond its guarantee ends its shape's turn.
    // The second merge is the over-quota pool: within a queue priority, teams in fair-share
    // order (TeamShares::ComputeLevels; jobs of no team last), then queue order.
    using Head = PendingQueue::Head;
    const auto later = [](const Head& a, const Head& b) { return a.key > b.key; };
    const auto later_fair = [this](const Head& a, const Head& b) {
      if (a.key.neg_priority != b.key.neg_priority) return a.key.neg_priority > b.key.neg_priority;
      const double la = LevelOf(*a.r), lb = LevelOf(*b.r);
      if (la != lb) return la > lb;
      return a.key > b.key;
    };
    // true: the shape's turn ends (it failed: its later jobs would too).
    const auto guaranteed = [&](const Resolved& r) { return !WithinGuarantee(r) || attempt(r); };
    if (config_.teams.enabled()) {
      pending_.WalkByShape(later, guaranteed);
      teams_.ComputeLevels(config_.teams, now_);
      pending_.WalkByShape(later_fair, attempt);
    } else {
      pending_.WalkByShape(later, attempt);
    }
  }
  if (!only) {
    ServeReservation();
    MaybeReserve();
  }
  if (mig_failed && config_.mig.enabled) {
    std::vector<const Resolved*> unmet = unmet_mig();
    if (!unmet.empty()) PlanMig(unmet, /*allow_drain=*/true);
  }
  if (!only) MaybeLeaveMig();
}

}  // namespace gpuslice::sched
