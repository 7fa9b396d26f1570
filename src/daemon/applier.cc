// Applying the scheduler's decisions to the daemon's records: a placed slice, a warning, a
// stop (SIGTERM after the commit), a rejection, a MIG reconfiguration (devices/mig_actuator.h).
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/daemon_impl.h"
#include "devices/mig_actuator.h"
#include "memcap/env.h"

namespace gpuslice::daemon {
namespace {

JobState FinalStateFor(const sched::Stop& s) {
  switch (s.reason) {
    case sched::StopReason::kTimeLimit: return JobState::kTimedOut;
    case sched::StopReason::kCancelled: return JobState::kCancelled;
    case sched::StopReason::kDeviceLost: return JobState::kFailed;
  }
  return JobState::kFailed;
}

}  // namespace

void Daemon::Impl::Apply(const sched::Decision& d, store::WriteBatch& b, Actions& act) {
  Micros now = Now();
  std::visit(
      Overloaded{
          [&](const sched::StartSlice& s) {
            JobRecord& j = jobs_.at(s.job);
            SliceRecord r;
            r.id = s.slice;
            r.job = s.job;
            r.kind = s.kind;
            for (auto di : s.devices) r.devices.push_back(static_cast<int>(di.value()));
            r.uuids = s.uuids;
            r.milli = s.milli;
            r.memory_cap = s.memory_cap;
            r.mps_thread_percent = s.mps_thread_percent;
            r.mig = s.mig;
            r.created = now;
            slices_[r.id] = r;
            all_slices_share_[s.job] = s.milli * static_cast<MilliGpu>(s.devices.size());
            b.slices.push_back(r);
            j.state = JobState::kStarting;
            j.slice = s.slice;
            j.deadline = s.deadline;
            j.warning.clear();
            // Placed: why it last stopped or waited (requeued, preempted) no longer holds, as
            // for a first start; the requeue count and the events keep the history.
            j.reason.clear();
            b.jobs.push_back(j);
            to_launch_.insert(s.job);
            AddEvent(b, s.job, "place", fmt::format("job {}: {}", s.job.value(), sched::FormatDecision(d)));
          },
          [&](const sched::Warn& w) {
            JobRecord& j = jobs_.at(w.job);
            j.warning = w.message;
            j.warn_deadline = w.deadline;
            b.jobs.push_back(j);
            AddEvent(b, w.job, "warn", fmt::format("job {}: {} warning: {}", w.job.value(),
                                                   sched::WarnReasonName(w.reason), w.message));
            act.log_lines.emplace_back(w.job, fmt::format("gpuslice: WARNING ({}): {}",
                                                          sched::WarnReasonName(w.reason), w.message));
          },
          [&](const sched::ClearWarning& c) {
            JobRecord& j = jobs_.at(c.job);
            // Only the idle warning goes; a time-limit one (its deadline is the job's) stays.
            if (j.warning.empty() || (j.deadline > 0 && j.warn_deadline == j.deadline)) return;
            j.warning.clear();
            j.warn_deadline = 0;
            b.jobs.push_back(j);
            AddEvent(b, c.job, "unwarn", fmt::format("job {}: {}", c.job.value(), c.message));
            act.log_lines.emplace_back(c.job, "gpuslice: " + c.message);
          },
          [&](const sched::Reclaim& r) {
            BeginStop(r.job, JobState::kReclaimed, "idle reclaim: " + r.reason, b, act);
          },
          [&](const sched::Stop& s) {
            std::string why = s.reason == sched::StopReason::kTimeLimit ? "time limit reached"
                              : s.reason == sched::StopReason::kCancelled ? "cancelled"
                                                                          : "device lost";
            BeginStop(s.job, FinalStateFor(s), why, b, act);
          },
          [&](const sched::Preempt& p) {
            BeginStop(p.job, p.requeue ? JobState::kPending : JobState::kCancelled,
                      "preempted: " + p.reason, b, act);
          },
          [&](const sched::Drain& dr) {
            AddEvent(b, JobId(), "drain", fmt::format("device {}: draining: {}",
                                                      dr.device.index.value(), dr.reason));
          },
          [&](const sched::Reserve& r) { AddEvent(b, r.job, "reserve", r.reason); },
          [&](const sched::ReconfigureMig& r) {
            AddEvent(b, JobId(), "reconfigure", sched::FormatDecision(d));
            act.reconfigure.push_back(r);
          },
          [&](const sched::Reject& r) {
            JobRecord& j = jobs_.at(r.job);
            j.state = JobState::kRejected;
            j.reason = r.status.message();
            j.end_time = now;
            b.jobs.push_back(j);
            AddEvent(b, r.job, "reject", j.reason);
          },
      },
      d);
}

// Stop/Reclaim/Preempt: the scheduler has freed the slice in its books; the processes get
// SIGTERM after the commit and SIGKILL after the grace period; the store keeps the slice
// active until they are gone.
void Daemon::Impl::BeginStop(JobId id, JobState final, std::string reason, store::WriteBatch& b,
                             Actions& act) {
  JobRecord& j = jobs_.at(id);
  auto p = procs_.find(id);
  if (p == procs_.end() && (j.state == JobState::kRunning || j.state == JobState::kStopping)) {
    // Recovery, before the job's processes are re-adopted (a device vanished while the daemon
    // was down): the job is stopping; step 3 of Start ends it and frees the slice once its
    // processes are gone, as for any job stopped before a restart.
    j.state = JobState::kStopping;
    j.reason = reason;
    b.jobs.push_back(j);
    AddEvent(b, id, "stop", fmt::format("job {}: stopping ({})", id.value(), reason));
    return;
  }
  if (p == procs_.end()) {
    // Not exec'd yet (starting): nothing to kill.
    to_launch_.erase(id);
    j.state = final;
    j.reason = reason;
    if (final != JobState::kPending) j.end_time = Now();
    ReleaseSlice(j, b);
    b.jobs.push_back(j);
    AddEvent(b, id, "stop", fmt::format("job {} {} before it started: {}", id.value(),
                                        store::JobStateName(final), reason));
    return;
  }
  p->second.stopping = true;
  p->second.final_state = final;
  p->second.final_reason = reason;
  j.state = JobState::kStopping;
  j.reason = reason;
  b.jobs.push_back(j);
  AddEvent(b, id, "stop", fmt::format("job {}: stopping ({}): SIGTERM, then SIGKILL after {}",
                                      id.value(), reason, FormatDuration(opt_.grace)));
  act.terminate.push_back(id);
  act.log_lines.emplace_back(id, fmt::format("gpuslice: stopping job: {}", reason));
}

void Daemon::Impl::ReleaseSlice(JobRecord& j, store::WriteBatch& b) {
  auto s = slices_.find(j.slice);
  if (s == slices_.end()) return;
  s->second.active = false;
  s->second.released = Now();
  b.slices.push_back(s->second);
  FlushDown(s->first, b);
  EndSliceMechanisms(s->second);
  slices_.erase(s);
  slice_util_.erase(j.slice);
  agent_->Unbind(j.slice);
}

// Brings the device to the decided layout (devices/mig_actuator.h) and tells the scheduler the
// layout it has now (done, or as far as it got).
void Daemon::Impl::ApplyMig(const sched::ReconfigureMig& r, store::WriteBatch& b, Actions& act) {
  DeviceIndex idx = r.device.index;
  const DeviceModel* model = nullptr;
  if (auto it = device_info_.find(static_cast<int>(idx.value())); it != device_info_.end()) {
    model = it->second.model;
  }
  Status st = devices::ApplyMigLayout(*backend_, idx, r.mig_mode, r.layout, model);
  sched::ReconfigureDone done;
  done.now = Now();
  done.device = r.device;
  done.ok = st.ok();
  done.error = st.ok() ? "" : st.ToString();
  auto after = backend_->ListDevices();
  if (after.ok()) {
    for (const auto& d : *after) {
      if (d.index != idx) continue;
      device_info_[static_cast<int>(idx.value())] = d;
      for (const auto& gi : d.gpu_instances) done.layout.push_back({gi.profile_id, gi.start});
    }
  }
  std::sort(done.layout.begin(), done.layout.end(),
            [](const MigPlacement& a, const MigPlacement& b) { return a.start < b.start; });
  if (!st.ok()) spdlog::error("MIG reconfigure of device {}: {}", idx.value(), st.ToString());
  Feed(done, b, act);
}

void Daemon::Impl::ReleaseSliceById(SliceId sid, store::WriteBatch& b) {
  auto s = slices_.find(sid);
  if (s == slices_.end()) return;
  s->second.active = false;
  s->second.released = Now();
  b.slices.push_back(s->second);
  FlushDown(sid, b);
  EndSliceMechanisms(s->second);
  slices_.erase(s);
  slice_util_.erase(sid);
  agent_->Unbind(sid);
}

}  // namespace gpuslice::daemon
