// Why a job is still pending (PendingReason, PendingReasonCounts): derived from the books, no side
// effects.
// Part of Scheduler::Impl (scheduler_impl.h); see scheduler.cc for the order of an event.
#include "sched/scheduler_impl.h"

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include <fmt/format.h>

namespace gpuslice::sched {

// ---------------------------------------------------------------- pending reasons
// Derived from the books as they stand after the last event: placement tries every pending
// job whenever capacity may have been freed, so a job still pending after a Handle() did not
// fit then, and this says why. Const and free of side effects (no random draw, no counter):
// asking never changes a decision. Order: could never fit, user cap, devices kept for this
// job, devices kept for another job / changing MIG layout, no room.

// What one query learns once and reuses for every job it explains.
struct Scheduler::Impl::ReasonScan {
  std::optional<const DeviceView*> changing;  // the device draining / reconfiguring (or null)
  std::unordered_map<int, WaitReason> by_shape;  // the part that depends only on the shape
};

std::optional<WaitReason> Scheduler::Impl::PendingReason(JobId job) const {
  const Resolved* r = jobs_.FindRecord(job);
  if (r == nullptr || r->view->state != JobState::kPending) return std::nullopt;
  if (r->view->held) return Held{};
  ReasonScan scan;
  return ReasonFor(*r, scan);
}

// The same answers as PendingReason() for every pending job, counted by shape: O(live shapes
// + pending jobs of capped queues), not O(pending), since the simulator asks at every instant.
std::array<std::int64_t, kWaitReasonKinds> Scheduler::Impl::PendingReasonCounts() const {
  std::array<std::int64_t, kWaitReasonKinds> n{};
  n[WaitReason(Held{}).index()] = static_cast<std::int64_t>(pending_.held());  // out of the queue
  ReasonScan scan;
  for (int shape : pending_.live_shapes()) {
    const auto& jobs = pending_.of_shape(shape);
    const Resolved& head = *jobs.begin()->second;
    const QueueConfig& q = *head.queue;
    const Reservations::Reservation* res = reservations_.held();
    const bool holder_here = res && jobs_.RecordOf(res->job).shape == shape;
    if (q.user_max_milli > 0 || q.user_max_jobs > 0) {
      // Within a shape the cap depends only on the user: one answer per user.
      std::unordered_map<std::string_view, std::size_t> by_user;
      for (const auto& [k, r] : jobs) {
        if (holder_here && r->job == res->job) {
          ++n[ReasonFor(*r, scan).index()];
          continue;
        }
        auto [it, fresh] = by_user.try_emplace(r->user, 0);
        if (fresh) it->second = ReasonFor(*r, scan).index();
        ++n[it->second];
      }
      continue;
    }
    std::int64_t same = static_cast<std::int64_t>(jobs.size());
    const WaitReason shaped = ShapeReason(head, scan);  // each live shape is visited once
    if (holder_here && !std::holds_alternative<NeverFits>(shaped)) {
      ++n[WaitReason(WaitingForReservation{}).index()];
      --same;
    }
    n[shaped.index()] += same;
  }
  return n;
}

const WaitReason& Scheduler::Impl::ShapeReasonOf(const Resolved& r, ReasonScan& scan) const {
  auto it = scan.by_shape.find(r.shape);
  if (it == scan.by_shape.end()) it = scan.by_shape.emplace(r.shape, ShapeReason(r, scan)).first;
  return it->second;
}

WaitReason Scheduler::Impl::ReasonFor(const Resolved& r, ReasonScan& scan) const {
  const WaitReason& shaped = ShapeReasonOf(r, scan);
  if (std::holds_alternative<NeverFits>(shaped)) return shaped;
  if (auto team = TeamLimitReason(r)) return *team;
  if (auto cap = CapReason(r)) return *cap;
  if (const Reservations::Reservation* res = reservations_.held(); res && res->job == r.job) {
    WaitingForReservation w{res->node, res->devices, 0};
    for (DeviceIndex di : res->devices) {
      const DeviceView& d = cluster_.devices().at({res->node, di});
      w.busy += !d.slices.empty() || d.mode != DeviceMode::kFree;
    }
    return w;
  }
  return shaped;
}

const DeviceView* Scheduler::Impl::ChangingDevice(ReasonScan& scan) const {
  if (!scan.changing) {
    scan.changing = nullptr;
    for (const DeviceRef& ref : mig_.changing()) scan.changing = &cluster_.devices().at(ref);
  }
  return *scan.changing;
}

// Would `r` fit now if the devices `extra` (kept empty or changing layout) could take it?
bool Scheduler::Impl::FitsWith(const Resolved& r, NodeId node, const std::vector<const DeviceView*>& extra) const {
  if (r.kind == SliceKind::kWhole) {
    int n = 0;
    for (DeviceIndex di : cluster_.index().FreeOn(node)) {
      const DeviceView& d = cluster_.devices().at({node, di});
      n += CanHold(r, d, RoomOf(d));
    }
    for (const DeviceView* d : extra) n += CanHold(r, *d, RoomOf(*d));
    return n >= r.gpus;
  }
  return std::any_of(extra.begin(), extra.end(), [&](const DeviceView* d) { return CanHold(r, *d, RoomOf(*d)); });
}

WaitReason Scheduler::Impl::ShapeReason(const Resolved& r, ReasonScan& scan) const {
  if (Status st = cluster_.Feasible(r); !st.ok()) return NeverFits{std::string(st.message())};
  if (auto why = NeverFitsWhy(r)) return NeverFits{*why};
  if (const Reservations::Reservation* res = reservations_.held(); res && r.kind != SliceKind::kMig) {
    std::vector<const DeviceView*> kept;
    for (DeviceIndex di : res->devices) kept.push_back(&cluster_.devices().at({res->node, di}));
    if (FitsWith(r, res->node, kept)) return ReservedForOther{res->job, res->node, res->devices};
  }
  if (const DeviceView* d = ChangingDevice(scan)) {
    bool helps = r.kind == SliceKind::kMig ? ModelOk(r, *d) : FitsWith(r, d->ref.node, {d});
    if (helps) return DrainingForMig{d->ref, d->reconfiguring};
  }
  if (r.kind == SliceKind::kMps) {
    for (const auto& [ref, d] : cluster_.devices())
      if (MpsServesOther(r, d) && TakesButForMpsUser(r, d)) return MpsServesOtherUser{ref, d.mps_user};
  }
  NoDeviceFits n{r.kind, r.model, r.gpus, r.milli, r.kind == SliceKind::kMig ? r.mig_need : r.memory};
  if (r.kind == SliceKind::kWhole) n.memory = 0;
  return n;
}

// Beyond Feasible(): a MIG request is placed on an instance of exactly its smallest fitting
// profile, which only a layout change (mig.enabled, on a device that has not refused one) can
// create where none exists. A device in MIG mode takes only MIG slices, but where gpuslice
// changes layouts it also takes the device out of MIG mode for other work (MaybeLeaveMig): then
// it counts for every request, and no job "could never fit" because of a layout gpuslice chose.
// Only where it cannot (mig.enabled = false, or the device refused a change) does MIG mode count.
std::optional<std::string> Scheduler::Impl::NeverFitsWhy(const Resolved& r) const {
  const std::string what = r.model.empty() ? "" : r.model + " ";
  if (r.kind == SliceKind::kMig) {
    // Whether device `d` can take the request, now or after a layout change.
    auto takes = [&](const DeviceRef& ref, const DeviceView& d) {
      // A device that may not change layout and has none cannot: skipped before the profile
      // lookup (at submit this loop sees every device of the cluster).
      const bool may_change =
          config_.mig.enabled && d.mig_capable && !mig_.broken(ref) && d.mig_admin != MigAdmin::kOff;
      if (!may_change && d.mode != DeviceMode::kMig && !d.reconfiguring) return false;
      if (!d.catalogue || !ModelOk(r, d)) return false;
      const MigProfile* p = d.catalogue->SmallestProfileFor(r.mig_need);
      if (!p) return false;
      if (may_change) return true;
      const MigLayout& l = d.reconfiguring ? d.target_layout : d.layout;
      return std::any_of(l.begin(), l.end(), [&](const MigPlacement& m) { return m.profile_id == p->id; });
    };
    // The device that took the last MIG request is tried first: it nearly always takes the
    // next one too, and the scan below visits every device before the MIG-capable ones of a
    // cluster that lists them last. (Any device that takes it gives the same answer.)
    if (const auto w = cluster_.devices().find(mig_.never_fits_witness()); w != cluster_.devices().end() && takes(w->first, w->second))
      return std::nullopt;
    for (const auto& [ref, d] : cluster_.devices()) {
      if (!takes(ref, d)) continue;
      mig_.set_never_fits_witness(ref);
      return std::nullopt;
    }
    if (!config_.mig.enabled)
      return fmt::format("MIG layouts are not changed (mig.enabled = false) and no {}GPU in MIG mode has an "
                         "instance sized for {}", what, FormatBytes(r.mig_need));
    return fmt::format("every MIG-capable {}GPU that could hold an instance with {} refused a MIG "
                       "reconfiguration or lacks that instance", what, FormatBytes(r.mig_need));
  }
  if (mig_.mig_mode_devices() == 0) return std::nullopt;
  // Stuck in MIG mode: gpuslice will not take it out (see above).
  auto stuck = [&](const DeviceView& d) {
    return d.mode == DeviceMode::kMig && (!config_.mig.enabled || mig_.broken(d.ref));
  };
  if (r.kind == SliceKind::kWhole) {
    // The first host with enough GPUs ends the scan (at submit it sees every host otherwise);
    // only a request that never fits needs the best count, for the message.
    int best = 0;
    for (const auto& [node, indices] : cluster_.nodes()) {
      int n = 0;
      for (DeviceIndex di : indices) {
        const DeviceView& d = cluster_.devices().at({node, di});
        n += !stuck(d) && ModelOk(r, d);
      }
      if (n >= r.gpus) return std::nullopt;
      best = std::max(best, n);
    }
    if (best >= r.gpus) return std::nullopt;  // no host at all, and no GPU asked
    return fmt::format("it needs {} {}GPUs on one host and at most {} are outside MIG mode (a GPU in MIG "
                       "mode only takes MIG slices, and these stay so: {})", r.gpus, what, best,
                       config_.mig.enabled ? "they refused a layout change" : "mig.enabled = false");
  }
  for (const auto& [ref, d] : cluster_.devices()) {
    if (stuck(d) || !ModelOk(r, d)) continue;
    if (d.memory == 0 || d.memory >= MemoryCap(r, d)) return std::nullopt;
  }
  return fmt::format("every {}GPU{} is in MIG mode (a GPU in MIG mode only takes MIG slices)", what,
                     r.memory > 0 ? fmt::format(" with {} of memory", FormatBytes(r.memory)) : "");
}

}  // namespace gpuslice::sched
