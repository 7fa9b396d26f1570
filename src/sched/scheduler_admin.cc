// An admin's orders (AdminDrain, AdminMigMode, AdminHold, AdminRequeue; events.h). Part of
// Scheduler::Impl (scheduler_impl.h); self-contained so that it moves as one piece when the
// Impl is split into parts. Each order only sets a flag the rest already honours: a drained
// device is not Schedulable(), a device out of the planner's hands is skipped by PlanMig, a
// held job is out of the pending queue (PendingQueue::Hold), a requeue is a preemption.
#include <fmt/format.h>

#include "sched/scheduler_impl.h"

namespace gpuslice::sched {

std::string_view MigAdminName(MigAdmin m) {
  switch (m) {
    case MigAdmin::kAuto: return "auto";
    case MigAdmin::kOn: return "on";
    case MigAdmin::kOff: return "off";
  }
  return "?";
}

void Scheduler::Impl::OnAdminDrain(const AdminDrain& e) {
  auto it = cluster_.devices().find(e.device);
  if (it == cluster_.devices().end()) return;
  if (e.drained && it->second.reserved_for.valid()) ReleaseReservation();  // kept elsewhere
  cluster_.Mutate(it->second, [&](DeviceView& d) {
    d.admin_drained = e.drained;
    d.drain_reason = e.drained ? e.reason : "";
  });
  if (e.drained) {
    out_.push_back(Drain{e.device, e.reason.empty() ? "drained by an admin" : e.reason});
  } else {
    Schedule(std::nullopt);  // its room is usable again
  }
}

void Scheduler::Impl::OnAdminMigMode(const AdminMigMode& e) {
  auto it = cluster_.devices().find(e.device);
  if (it == cluster_.devices().end() || !it->second.mig_capable) return;
  const DeviceView& d = it->second;
  cluster_.Mutate(d, [&](DeviceView& dv) {
    dv.mig_admin = !e.enabled ? MigAdmin::kAuto : *e.enabled ? MigAdmin::kOn : MigAdmin::kOff;
  });
  if (!e.enabled) {
    // Given back to the planner: a drain the admin's order started (not yet a layout change)
    // is called off, so that the planner still changes one GPU at a time.
    if (d.draining && !d.reconfiguring) {
      cluster_.Mutate(d, [](DeviceView& dv) {
        dv.draining = false;
        dv.target_layout.clear();
      });
    }
    Schedule(std::nullopt);  // the planner may use it again
    return;
  }
  StartAdminMigChange(d);
}

void Scheduler::Impl::StartAdminMigChange(const DeviceView& d) {
  if (d.mig_admin == MigAdmin::kAuto || mig_.broken(d.ref)) return;
  const bool want = d.mig_admin == MigAdmin::kOn;
  // Already so, or on its way: a drain in flight ends as MaybeFinishDrain decides (it reads
  // mig_admin); a layout change in flight calls this again when done (OnReconfigureDone).
  if (want == (d.mode == DeviceMode::kMig) || d.draining || d.reconfiguring) return;
  cluster_.Mutate(d, [](DeviceView& dv) {
    dv.draining = true;
    dv.target_layout.clear();
  });
  out_.push_back(Drain{d.ref, fmt::format("MIG mode {} (an admin's order): no new slices until it is empty",
                                          want ? "on" : "off")});
  MaybeFinishDrain(d);
}

void Scheduler::Impl::OnAdminHold(const AdminHold& e) {
  Resolved* rp = jobs_.FindRecord(e.job);
  if (!rp || rp->view->state != JobState::kPending) return;
  Resolved& r = *rp;
  if (r.view->held == e.held) return;
  if (e.held) {
    const bool kept = reservations_.Holds(e.job);
    ReleaseReservationOf(e.job);
    pending_.Hold(r);
    if (kept) Schedule(std::nullopt);  // the kept devices are free for others again
    return;
  }
  pending_.Release(r);  // in its old place: its key (priority, submit time, id) is unchanged
  Schedule(std::nullopt);
}

void Scheduler::Impl::OnAdminRequeue(const AdminRequeue& e) {
  const Resolved* r = jobs_.FindRecord(e.job);
  if (!r || r->view->state != JobState::kRunning) return;
  out_.push_back(Preempt{e.job, r->view->slice,
                         e.reason.empty() ? "requeued by an admin" : e.reason, /*requeue=*/true});
  ++stats_.preempted;
  EndRunning(e.job, "requeued", /*requeue=*/true);
  Schedule(std::nullopt);
}

}  // namespace gpuslice::sched
