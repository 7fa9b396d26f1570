// Timers and samples: time limits, the idle state machine (Tick, Sample, ActivityReport) and the
// idle rules of scheduler.h (ClassifySample, EffectiveLastActive, IdleWindowEnd).
// Part of Scheduler::Impl (scheduler_impl.h); see scheduler.cc for the order of an event.
#include "sched/scheduler_impl.h"

#include <algorithm>
#include <climits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace gpuslice::sched {

// ---------------------------------------------------------------- timers and samples
void Scheduler::Impl::OnSample(const Sample& e) {
  for (const SliceSample& s : e.slices) {
    SliceView* found = cluster_.FindSlice(s.slice);
    if (found == nullptr) continue;
    SliceView& sv = *found;
    const Activity a = ClassifySample(jobs_.RecordOf(sv.job).queue->idle, s).activity;
    if (a == Activity::kActive) {
      if (sv.idle != IdleState::kActive) {
        // The owner was told the slice is idle (and, when warned, that it will be taken):
        // no longer true, so say so rather than let the warning stand.
        out_.push_back(ClearWarning{sv.job, sv.slice, WarnReason::kIdle,
                                    fmt::format("slice {} is busy again; idle warning withdrawn",
                                                sv.slice.value())});
        timers_.ClearReclaimable(sv.slice);
      }
      sv.last_active = now_;
      sv.idle = IdleState::kActive;
      sv.idle_deadline = 0;
      sv.unmeasured = false;
      Retime(sv);
    } else if (a == Activity::kUnknown && !sv.unmeasured) {
      // Unknown is not idle: a warning given on earlier evidence is withdrawn, not carried
      // out while blind.
      sv.unmeasured = true;
      if (sv.idle == IdleState::kWarned || sv.idle == IdleState::kReclaimable) {
        out_.push_back(ClearWarning{sv.job, sv.slice, WarnReason::kIdle,
                                    fmt::format("slice {} can no longer be measured; idle "
                                                "warning withdrawn", sv.slice.value())});
        timers_.ClearReclaimable(sv.slice);
        sv.idle = IdleState::kActive;
      }
      sv.idle_deadline = 0;
      Retime(sv);
    } else if (a == Activity::kIdle && sv.unmeasured) {
      // Measured again: idleness is counted from here, not across the blind stretch.
      sv.unmeasured = false;
      sv.last_active = now_;
      Retime(sv);
    }
  }
}

// A report replaces the slice's earlier one. Only a report that says busy can postpone a
// reclaim, and only for busy_max in total since the GPU was last active: the budget starts at
// the first busy report after the GPU's last activity and an idle report in between neither
// ends nor restarts it (interleaving idle reports used to renew it). An idle report is kept
// for the views and decides nothing, whatever last activity it claims: reporting "idle, last
// active now" every few seconds used to keep a slice from its reclaim forever. One that shows
// activity now withdraws an idle warning, as an active sample does.
void Scheduler::Impl::OnActivityReport(const ActivityReport& e) {
  const Resolved* r = jobs_.FindRecord(e.job);
  if (r == nullptr || r->view->state != JobState::kRunning) return;
  SliceView& sv = r->slice->second;
  const IdlePolicy& p = r->queue->idle;
  SliceReport n;
  n.source = e.source;
  n.busy = e.busy;
  n.last_activity = e.last_activity < 0 ? -1 : std::min(e.last_activity, now_);
  n.kernels = e.kernels;
  n.connections = e.connections;
  n.received = now_;
  n.busy_since = BusyBudgetStart(sv, e.busy, now_);
  sv.report = std::move(n);
  if (p.enabled && !sv.unmeasured && sv.idle != IdleState::kActive && ReportCounts(p, *sv.report, now_) &&
      now_ - EffectiveLastActive(p, sv, now_) < p.window) {
    out_.push_back(ClearWarning{sv.job, sv.slice, WarnReason::kIdle,
                                fmt::format("slice {} is in use again ({} reports activity); idle "
                                            "warning withdrawn", sv.slice.value(), sv.report->source)});
    timers_.ClearReclaimable(sv.slice);
    sv.idle = IdleState::kActive;
    sv.idle_deadline = 0;
  }
  Retime(sv);
}

// Visits only the slices whose next timer is due (timers_), in SliceId order: a slice whose
// time has not come passes through TickSlice without a decision or a change (NextTimer), so
// the decisions are those of a scan over every slice, at O(due log n) instead of O(slices).
void Scheduler::Impl::OnTick() {
  std::vector<std::pair<JobId, std::string>> ended;
  for (SliceId sid : timers_.Due(now_)) {
    SliceView& s = *cluster_.FindSlice(sid);  // due: running
    if (!TickSlice(sid, s, ended)) Retime(s);
  }
  for (const auto& [job, reason] : ended) EndRunning(job, reason);
  const bool newly_reclaimable = timers_.NewlyReclaimable();
  const bool serve = !ended.empty() || (newly_reclaimable && !pending_.empty());
  if (serve) {
    Schedule(std::nullopt);
  } else {
    MaybeReserve();  // a waiting job may have just reached its reserve_after
    MaybeLeaveMig();  // a MIG device may have just been empty long enough
  }
}

// One slice's timers at now_; true if it ends (listed in `ended`).
bool Scheduler::Impl::TickSlice(SliceId sid, SliceView& s, std::vector<std::pair<JobId, std::string>>& ended) {
  const Resolved& r = jobs_.RecordOf(s.job);
  const JobView& j = *r.view;
  const QueueConfig& q = *r.queue;
  if (s.deadline > 0) {
    if (now_ >= s.deadline) {
      out_.push_back(Stop{s.job, sid, StopReason::kTimeLimit});
      ++stats_.stopped;
      ended.emplace_back(s.job, "time-limit");
      return true;
    }
    const Micros lead = q.TimeLimitWarnLead(s.deadline - s.start_time);
    if (lead > 0 && !s.limit_warned && now_ >= s.deadline - lead) {
      s.limit_warned = true;
      out_.push_back(Warn{s.job, sid, WarnReason::kTimeLimit, s.deadline,
                          fmt::format("job {} of {} reaches its time limit in {}", s.job.value(),
                                      j.user, FormatDuration(s.deadline - now_))});
    }
  }
  if (!q.idle.enabled || s.unmeasured) return false;
  const Micros since = EffectiveLastActive(q.idle, s, now_);
  if (s.idle == IdleState::kActive && now_ - since >= q.idle.window) {
    Micros idle_for = now_ - since;
    if (q.idle.action == ReclaimAction::kReport) {
      s.idle = IdleState::kReported;
      s.idle_deadline = now_;
      out_.push_back(Warn{s.job, sid, WarnReason::kIdle, now_,
                          fmt::format("slice idle for {} (reported, not reclaimed)",
                                      FormatDuration(idle_for))});
    } else {
      s.idle = IdleState::kWarned;
      s.idle_deadline = now_ + q.idle.grace;
      out_.push_back(Warn{s.job, sid, WarnReason::kIdle, s.idle_deadline,
                          q.idle.reclaim == IdleReclaim::kOnDemand
                              ? fmt::format("slice idle for {}; reclaimable on demand in {} unless used "
                                            "(then reclaimed when a waiting job needs its room)",
                                            FormatDuration(idle_for), FormatDuration(q.idle.grace))
                              : fmt::format("slice idle for {}; reclaimed in {} unless used",
                                            FormatDuration(idle_for), FormatDuration(q.idle.grace))});
    }
  }
  if (s.idle == IdleState::kWarned && now_ >= s.idle_deadline && q.idle.reclaim == IdleReclaim::kOnDemand) {
    // Past its grace, but nobody may need the room: it runs until a pending job does. The
    // Warn is the decision that records the change (and tells the owner).
    s.idle = IdleState::kReclaimable;
    timers_.SetReclaimable(sid);
    out_.push_back(Warn{s.job, sid, WarnReason::kIdle, now_,
                        fmt::format("slice idle for {}; idle, reclaimable on demand: it is reclaimed "
                                    "as soon as a waiting job needs its room", FormatDuration(now_ - since))});
    return false;
  }
  if (s.idle == IdleState::kWarned && now_ >= s.idle_deadline) {
    out_.push_back(Reclaim{s.job, sid, fmt::format("idle for {}", FormatDuration(now_ - since))});
    ++stats_.reclaimed;
    ended.emplace_back(s.job, "idle");
    return true;
  }
  return false;
}

Micros Scheduler::Impl::NextTimer(const SliceView& s, const QueueConfig& q) {
  Micros t = SliceTimers::kNever;
  if (s.deadline > 0) {
    t = s.deadline;
    const Micros lead = q.TimeLimitWarnLead(s.deadline - s.start_time);
    if (lead > 0 && !s.limit_warned) t = std::min(t, s.deadline - lead);
  }
  if (q.idle.enabled && !s.unmeasured) {
    if (s.idle == IdleState::kActive) t = std::min(t, IdleWindowEnd(q.idle, s));
    else if (s.idle == IdleState::kWarned) t = std::min(t, s.idle_deadline);
  }
  return t;
}

std::string_view ActivityName(Activity a) {
  switch (a) {
    case Activity::kUnknown: return "unknown";
    case Activity::kIdle: return "idle";
    case Activity::kActive: return "active";
  }
  return "unknown";
}

SampleVerdict ClassifySample(const IdlePolicy& idle, const SliceSample& s) {
  const int thr = idle.util_threshold_percent;
  std::string active, idled;
  auto say = [&](bool is_active, const char* name) {
    std::string& to = is_active ? active : idled;
    to += to.empty() ? name : std::string(",") + name;
  };
  if (idle.activity.sm_utilisation && s.sm_known) say(s.sm_percent >= thr && s.sm_percent > 0, "sm");
  if (idle.activity.memory_traffic && s.memory_known) {
    say(s.memory_percent >= thr && s.memory_percent > 0, "mem");
  }
  if (s.processes_known) {
    // No process holding the GPU is idle whatever the driver can or cannot measure; a
    // process is activity only where the policy says presence counts.
    if (s.processes == 0) say(false, "procs");
    else if (idle.activity.process_presence) say(true, "procs");
  }
  const bool gpu_blind = !(idle.activity.sm_utilisation && s.sm_known) &&
                         !(idle.activity.memory_traffic && s.memory_known);
  if (gpu_blind && s.memory_change != Activity::kUnknown) {
    say(s.memory_change == Activity::kActive, "memchange");
  }
  if (s.external != Activity::kUnknown) say(s.external == Activity::kActive, "external");
  if (!active.empty()) return {Activity::kActive, active};
  if (!idled.empty()) return {Activity::kIdle, idled};
  return {Activity::kUnknown, ""};
}

bool SampleShowsActivity(const IdlePolicy& idle, const SliceSample& s) {
  return ClassifySample(idle, s).activity == Activity::kActive;
}

Micros BusyBudgetStart(const SliceView& s, bool busy, Micros now) {
  // The budget of the earlier reports goes on unless the GPU has been active since it began
  // (or there was none): an idle report carries it, a busy one continues it.
  const bool open = s.report && (s.report->busy || s.report->busy_since > 0) && s.report->busy_since >= s.last_active;
  if (open) return s.report->busy_since;
  return busy ? now : 0;
}

bool ReportCounts(const IdlePolicy& idle, const SliceReport& r, Micros t) {
  return idle.CountsReports(r.source) && t - r.received < idle.report_stale;
}

Micros EffectiveLastActive(const IdlePolicy& idle, const SliceView& s, Micros t) {
  Micros e = s.last_active;
  if (!s.report || !ReportCounts(idle, *s.report, t) || !s.report->busy) return e;
  const SliceReport& r = *s.report;
  // A busy report: its last activity, and (busy_is_active) now, within the busy budget.
  const Micros cap = idle.busy_max > 0 ? r.busy_since + idle.busy_max : LLONG_MAX;
  if (r.last_activity >= 0) e = std::max(e, std::min(r.last_activity, cap));
  if (idle.busy_is_active) e = std::max(e, std::min(t, cap));
  return e;
}

// While the report is fresh (before stale_at) the window ends at its latest counted activity +
// window; a busy report without a cap keeps it active until stale_at. Once stale, the GPU rule
// alone applies, so the window ends at stale_at at the earliest. Agrees with
// EffectiveLastActive: t >= IdleWindowEnd(s) iff t - EffectiveLastActive(s, t) >= window.
Micros IdleWindowEnd(const IdlePolicy& idle, const SliceView& s) {
  const Micros gpu_end = s.last_active + idle.window;
  if (!s.report || !idle.CountsReports(s.report->source) || !s.report->busy) return gpu_end;
  const SliceReport& r = *s.report;
  const Micros stale_at = r.received + idle.report_stale;
  const Micros cap = idle.busy_max > 0 ? r.busy_since + idle.busy_max : LLONG_MAX;
  Micros e = s.last_active;
  if (r.last_activity >= 0) e = std::max(e, std::min(r.last_activity, cap));
  if (idle.busy_is_active) {
    if (idle.busy_max <= 0) return std::max(stale_at, gpu_end);
    e = std::max(e, cap);
  }
  const Micros end = e + idle.window;
  return end < stale_at ? end : std::max(stale_at, gpu_end);
}

}  // namespace gpuslice::sched
