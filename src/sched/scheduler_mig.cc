// MIG planning: re-laying out, or draining, one GPU for unmet MIG demand.
// Part of Scheduler::Impl (scheduler_impl.h); see scheduler.cc for the order of an event.
#include "sched/scheduler_impl.h"

#include <algorithm>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "sched/mig_plan.h"

namespace gpuslice::sched {

// ---------------------------------------------------------------- MIG planning
std::vector<Bytes> Scheduler::Impl::NeedsFor(const std::vector<const Resolved*>& jobs, const DeviceView& d) const {
  std::vector<Bytes> needs;
  for (const Resolved* r : jobs)
    if (ModelOk(*r, d)) needs.push_back(r->mig_need);
  return needs;
}

// One GPU at a time: prefer a MIG device whose free instances can be re-laid out (no drain),
// then an empty MIG-capable device, then drain a device in another mode (fewest slices). While a
// drain is under way, a GPU that needs none (one that has just freed, a MIG device's room) is
// still taken for the demand, and the drain is called off: the request never waits for a busy
// GPU to empty while another stands free, and lower-priority work does not take the free one.
void Scheduler::Impl::PlanMig(const std::vector<const Resolved*>& unmet, bool allow_drain) {
  if (unmet.empty()) return;
  const DeviceView* draining = nullptr;
  if (!mig_.changing().empty()) {
    for (const DeviceRef& ref : mig_.changing()) {  // in device order, as the cluster state lists them
      const DeviceView& d = cluster_.devices().at(ref);
      if (d.reconfiguring) return;  // a layout change is being applied: wait for it
      // A drain an admin ordered (AdminMigMode) is never called off by the planner.
      if (d.draining && d.mig_admin == MigAdmin::kAuto) draining = &d;
    }
    allow_drain = false;  // one drain at a time
  }
  std::set<DeviceRef> candidates;
  for (const auto& [name, cap] : cluster_.capacity()) {
    if (name.empty() || cap.mig_capable == 0 || !cap.model) continue;
    int mi = ModelIndex(cap.model);
    std::set<int> profiles;
    for (const Resolved* r : unmet) {
      if (!r->model.empty() && r->model != name) continue;
      if (const MigProfile* p = cap.model->SmallestProfileFor(r->mig_need)) profiles.insert(p->id);
    }
    if (profiles.empty()) continue;
    for (int p : profiles)
      for (const DeviceRef& ref : cluster_.index().RelayoutCandidates(mi, p, kRelayoutCandidates))
        candidates.insert(ref);
    if (auto ref = cluster_.index().FirstMigCapableFree(mi)) candidates.insert(*ref);
  }
  if (candidates.empty() && allow_drain) {
    // Only now look at devices that would need a drain.
    for (const DeviceRef& ref : cluster_.index().mig_capable_busy()) {
      if (mig_.broken(ref)) continue;
      candidates.insert(ref);
      if (candidates.size() >= kDrainCandidates) break;
    }
  }
  struct Candidate {
    int rank;  // 0: MIG mode, 1: empty, 2: needs a drain
    int satisfied;
    int clients;
    DeviceRef ref;
    MigLayout layout;
  };
  std::optional<Candidate> best;
  for (const DeviceRef& ref : candidates) {
    if (mig_.broken(ref)) continue;
    const DeviceView& d = cluster_.devices().at(ref);
    if (d.draining) continue;  // the drain under way is what a better candidate replaces
    // An admin decides this device's mode, or drained it.
    if (d.mig_admin == MigAdmin::kOff || d.admin_drained) continue;
    std::vector<Bytes> needs = NeedsFor(unmet, d);
    if (needs.empty()) continue;
    int rank = d.mode == DeviceMode::kMig ? 0 : d.mode == DeviceMode::kFree && d.slices.empty() ? 1 : 2;
    if (rank == 2 && !allow_drain) continue;
    auto plan = PlanMigLayout(*ModelOf(ref), rank == 0 ? mig_.InUse(d) : MigLayout{}, needs);
    if (!plan.ok() || plan->satisfied == 0) continue;
    if (rank == 0 && plan->layout == d.layout) continue;
    Candidate c{rank, plan->satisfied, d.clients, ref, plan->layout};
    auto key = [](const Candidate& x) { return std::make_tuple(x.rank, -x.satisfied, x.clients, x.ref); };
    if (!best || key(c) < key(*best)) best = std::move(c);
  }
  if (!best) return;
  if (draining != nullptr) {
    // Called off: the device takes new slices again, and keeps its mode and what runs there.
    cluster_.Mutate(*draining, [](DeviceView& dv) {
      dv.draining = false;
      dv.target_layout.clear();
    });
  }
  if (best->rank < 2) {
    Reconfigure(best->ref, best->layout);
    return;
  }
  cluster_.Mutate(best->ref, [&](DeviceView& dv) {
    dv.draining = true;
    dv.target_layout = best->layout;
  });
  out_.push_back(Drain{best->ref, fmt::format("MIG layout for {} pending inference request(s)",
                                              best->satisfied)});
  if (config_.mig.drain == MigDrainPolicy::kPreempt) {
    std::vector<SliceId> victims = cluster_.devices().at(best->ref).slices;
    for (SliceId s : victims) {
      JobId job = cluster_.slices().at(s).job;
      if (!jobs_.RecordOf(job).queue->preemptible) continue;
      out_.push_back(Preempt{job, s, "drain for MIG reconfiguration", true});
      ++stats_.preempted;
      EndRunning(job, "preempted", /*requeue=*/true);
    }
  }
  MaybeFinishDrain(cluster_.devices().at(best->ref));
}

void Scheduler::Impl::Reconfigure(const DeviceRef& ref, const MigLayout& layout, bool mig_mode) {
  const DeviceView& d = cluster_.devices().at(ref);
  MigLayout old = d.mode == DeviceMode::kMig ? d.layout : MigLayout{};
  cluster_.Mutate(ref, [&](DeviceView& dv) {
    dv.reconfiguring = true;
    dv.draining = false;
    dv.target_layout = layout;
    dv.leaving_mig = !mig_mode;
  });
  out_.push_back(ReconfigureMig{ref, d.uuid, std::move(old), layout, mig_mode});
  ++stats_.reconfigurations;
}

void Scheduler::Impl::MaybeFinishDrain(const DeviceView& d) {
  if (!d.draining || !d.slices.empty()) return;
  if (d.mig_admin == MigAdmin::kOff) {  // an admin takes it out of MIG mode
    Reconfigure(d.ref, {}, /*mig_mode=*/false);
    return;
  }
  // Re-plan now: demand may have changed while draining.
  std::vector<const Resolved*> mig_pending;
  for (const auto& [k, r] : pending_.mig()) {
    if (mig_pending.size() >= kMaxPlannedNeeds) break;
    mig_pending.push_back(r);
  }
  auto plan = PlanMigLayout(*d.catalogue, {}, NeedsFor(mig_pending, d));
  MigLayout layout = plan.ok() && plan->satisfied > 0 ? plan->layout : d.target_layout;
  Reconfigure(d.ref, layout);
}

void Scheduler::Impl::OnReconfigureDone(const ReconfigureDone& e) {
  auto it = cluster_.devices().find(e.device);
  if (it == cluster_.devices().end() || !it->second.reconfiguring) return;
  // A reported layout that is illegal for the model (or drops an instance in use) is treated
  // as a failure: the books keep what they knew.
  const DeviceModel* m = it->second.catalogue;
  bool legal = m && ValidateLayout(*m, e.layout).ok();
  for (const MigPlacement& used : mig_.InUse(it->second))
    legal = legal && std::find(e.layout.begin(), e.layout.end(), used) != e.layout.end();
  bool ok = e.ok && legal;
  const bool leaving = it->second.leaving_mig;
  if (leaving) ok = e.ok && e.layout.empty();  // out of MIG mode: no instance may be left
  cluster_.Mutate(e.device, [&](DeviceView& d) {
    d.reconfiguring = false;
    d.draining = false;
    d.leaving_mig = false;
    d.target_layout.clear();
    if (ok && leaving) {
      // Out of MIG mode (MaybeLeaveMig, or an admin's order): whole, shared and MPS work again.
      d.layout.clear();
      cluster_.SetMode(d, d.slices.empty() ? DeviceMode::kFree : DeviceMode::kMig);
    } else if (ok) {
      cluster_.SetMode(d, DeviceMode::kMig);
      d.layout = e.layout;
    } else if (d.mode == DeviceMode::kMig && legal) {
      d.layout = e.layout;  // what the device reports it has now
    }
  });
  if (!ok) mig_.MarkBroken(e.device);  // don't loop on a device that refuses
  mig_.NoteUse(it->second, now_);
  StartAdminMigChange(it->second);  // an admin's order that came while this change was applied
  Schedule(std::nullopt);
}

// The way back from MIG mode (kMigReleaseAfter is the hysteresis). One device at a time, and
// only while nothing else changes layout; called at the end of every scheduling pass.
void Scheduler::Impl::MaybeLeaveMig() {
  if (!config_.mig.enabled || !mig_.changing().empty() || !mig_.any_empty() || pending_.empty()) return;
  // The devices empty for kMigReleaseAfter, in device order: the first that qualifies is the
  // one released.
  for (const DeviceRef& ref : mig_.EmptyFor(now_, kMigReleaseAfter)) {
    if (mig_.broken(ref)) continue;
    const DeviceView& d = cluster_.devices().at(ref);
    if (d.mode != DeviceMode::kMig || !mig_.InUse(d).empty() || d.draining || d.reconfiguring) continue;
    if (d.mig_admin != MigAdmin::kAuto || d.admin_drained) continue;  // an admin's to decide
    // Whether some pending MIG request could use it, else some other request waits for it:
    // each search stops at the first such job (a backlog is not walked once per device).
    const bool mig_demand = std::any_of(pending_.mig().begin(), pending_.mig().end(), [&](const auto& kr) {
      const Resolved& r = *kr.second;
      return ModelOk(r, d) && !CapBlocks(r) &&
             (d.catalogue == nullptr || d.catalogue->SmallestProfileFor(r.mig_need) != nullptr);
    });
    if (mig_demand) continue;
    const bool other_waits = pending_.size() > pending_.mig().size() &&
                             std::any_of(pending_.all().begin(), pending_.all().end(), [&](const auto& kr) {
                               const Resolved& r = *kr.second;
                               return r.kind != SliceKind::kMig && ModelOk(r, d) && !CapBlocks(r);
                             });
    if (!other_waits) continue;
    Reconfigure(ref, MigLayout{}, /*mig_mode=*/false);
    return;
  }
}

}  // namespace gpuslice::sched
