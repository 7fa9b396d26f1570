// CheckInvariants(): rebuilds the indexes and counters from the records and compares.
// Part of Scheduler::Impl (scheduler_impl.h); see scheduler.cc for the order of an event.
#include "sched/scheduler_impl.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace gpuslice::sched {

Status Scheduler::Impl::CheckInvariants() const {
  if (!violation_.empty()) return Internal(violation_);
  if (!cluster_.violation().empty()) return Internal(cluster_.violation());
  auto where = [](const DeviceView& d) {
    return fmt::format("device {}/{}", d.ref.node.value(), d.ref.index.value());
  };
  CapacityIndex fresh;
  fresh.ShareMemo(cluster_.index());
  int in_flight = 0, planner_in_flight = 0;
  for (const auto& [ref, d] : cluster_.devices()) {
    MilliGpu milli = 0;
    Bytes mem = 0;
    std::set<std::pair<int, int>> instances;
    for (SliceId sid : d.slices) {
      auto it = cluster_.slices().find(sid);
      if (it == cluster_.slices().end())
        return Internal(fmt::format("{}: unknown slice {}", where(d), sid.value()));
      const SliceView& s = it->second;
      if (ModeFor(s.kind) != d.mode)
        return Internal(fmt::format("{} in mode {} holds a {} slice {}", where(d),
                                    DeviceModeName(d.mode), SliceKindName(s.kind), sid.value()));
      if (s.kind == SliceKind::kMig) {
        if (!s.mig) return Internal(fmt::format("mig slice {} without instance", sid.value()));
        if (std::find(d.layout.begin(), d.layout.end(), *s.mig) == d.layout.end())
          return Internal(fmt::format("{}: slice {} on an instance not in the layout", where(d), sid.value()));
        if (!instances.insert({s.mig->profile_id, s.mig->start}).second)
          return Internal(fmt::format("{}: two slices on one MIG instance", where(d)));
      } else {
        milli += s.milli;
        mem += ReservedOn(s, d);
      }
      if (s.kind == SliceKind::kMps && jobs_.at(s.job).user != d.mps_user)
        return Internal(fmt::format("{}: MPS slice {} of user {} on a device serving MPS for '{}'", where(d),
                                    sid.value(), jobs_.at(s.job).user, d.mps_user));
    }
    if ((d.mode == DeviceMode::kMps) != !d.mps_user.empty())
      return Internal(fmt::format("{}: in mode {} with MPS user '{}'", where(d), DeviceModeName(d.mode), d.mps_user));
    if (milli != d.used_milli || mem != d.used_memory || static_cast<int>(d.slices.size()) != d.clients)
      return Internal(fmt::format("{}: books disagree with its slices", where(d)));
    if (milli > kOneGpu) return Internal(fmt::format("{}: compute over-committed ({})", where(d), milli));
    if (d.memory > 0 && mem > d.memory)
      return Internal(fmt::format("{}: memory over-committed ({} > {})", where(d), FormatBytes(mem),
                                  FormatBytes(d.memory)));
    if (d.mode == DeviceMode::kWhole && d.slices.size() != 1)
      return Internal(fmt::format("{}: whole device with {} slices", where(d), d.slices.size()));
    if (d.mode == DeviceMode::kMps && d.clients > MpsLimit(d))
      return Internal(fmt::format("{}: {} MPS clients over the limit", where(d), d.clients));
    if (d.slices.empty() && (d.mode == DeviceMode::kWhole || d.mode == DeviceMode::kShared ||
                             d.mode == DeviceMode::kMps))
      return Internal(fmt::format("{}: empty but left in mode {}", where(d), DeviceModeName(d.mode)));
    if (d.reconfiguring && !d.slices.empty() && d.mode != DeviceMode::kMig)
      return Internal(fmt::format("{}: reconfiguring with slices on it", where(d)));
    if (d.mode == DeviceMode::kMig) {
      if (const DeviceModel* m = d.catalogue) {
        Status st = ValidateLayout(*m, d.layout);
        if (!st.ok()) return Internal(fmt::format("{}: illegal layout: {}", where(d), st.message()));
      }
    }
    if (d.draining || d.reconfiguring) {
      ++in_flight;
      planner_in_flight += d.mig_admin == MigAdmin::kAuto;
      if (!mig_.changing().contains(d.ref))
        return Internal(fmt::format("{}: changing MIG layout, not in the devices changing", where(d)));
    }
    if (mig_.InUse(d) != InUseFromSlices(d))
      return Internal(fmt::format("{}: MIG in-use record disagrees with its slices", where(d)));
    fresh.Add(d, cluster_.Facts(d));
  }
  if (!(fresh == cluster_.index())) return Internal("placement indexes disagree with the device records");
  if (in_flight != static_cast<int>(mig_.changing().size()))
    return Internal(fmt::format("{} devices changing MIG layout, counted {}", in_flight, mig_.changing().size()));
  // The planner changes one GPU at a time; an admin's orders (AdminMigMode) go beside it.
  if (planner_in_flight > 1)
    return Internal(fmt::format("{} devices changing MIG layout at once", planner_in_flight));
  const auto mig_mode = std::count_if(cluster_.devices().begin(), cluster_.devices().end(),
                                      [](const auto& kv) { return kv.second.mode == DeviceMode::kMig; });
  if (mig_mode != mig_.mig_mode_devices())
    return Internal(fmt::format("{} devices in MIG mode, counted {}", mig_mode, mig_.mig_mode_devices()));
  std::size_t reserved = 0;
  const Reservations::Reservation* reservation = reservations_.held();
  for (const auto& [ref, d] : cluster_.devices()) {
    if (!d.reserved_for.valid()) continue;
    ++reserved;
    if (!reservation || reservation->job != d.reserved_for || reservation->node != ref.node ||
        std::find(reservation->devices.begin(), reservation->devices.end(), ref.index) ==
            reservation->devices.end())
      return Internal(fmt::format("device {}/{}: reserved for job {} outside the reservation",
                                  ref.node.value(), ref.index.value(), d.reserved_for.value()));
  }
  if (reservation) {
    const JobView* j = jobs_.Find(reservation->job);
    if (j == nullptr || j->state != JobState::kPending || j->kind != SliceKind::kWhole)
      return Internal(fmt::format("reservation for job {} that is not a waiting whole-GPU job",
                                  reservation->job.value()));
    if (reserved != reservation->devices.size())
      return Internal(fmt::format("reservation of {} devices marks {}", reservation->devices.size(), reserved));
  }
  std::size_t timed = 0;
  for (const auto& [sid, s] : cluster_.slices()) {
    const Micros want = NextTimer(s, *jobs_.RecordOf(s.job).queue);
    const std::optional<Micros> at = timers_.At(sid);
    if (want != SliceTimers::kNever) ++timed;
    if ((want == SliceTimers::kNever) != !at.has_value() || (at && *at != want))
      return Internal(fmt::format("slice {}: timer index disagrees with its record", sid.value()));
  }
  if (timed != timers_.size() || !timers_.Consistent())
    return Internal("timer index holds slices that are not running");
  std::size_t reclaimable = 0;
  for (const auto& [sid, s] : cluster_.slices()) {
    if ((s.idle == IdleState::kReclaimable) != timers_.reclaimable().contains(sid))
      return Internal(fmt::format("slice {}: reclaimable set disagrees with its idle state", sid.value()));
    reclaimable += s.idle == IdleState::kReclaimable;
  }
  if (reclaimable != timers_.reclaimable().size()) return Internal("reclaimable set holds slices that are not running");
  for (const auto& [sid, s] : cluster_.slices()) {
    const JobView* j = jobs_.Find(s.job);
    if (j == nullptr || j->state != JobState::kRunning || j->slice != sid)
      return Internal(fmt::format("slice {} does not belong to a running job", sid.value()));
    for (DeviceIndex di : s.devices) {
      auto d = cluster_.devices().find({s.node, di});
      if (d == cluster_.devices().end() ||
          std::find(d->second.slices.begin(), d->second.slices.end(), sid) == d->second.slices.end())
        return Internal(fmt::format("slice {} not recorded on its device {}/{}", sid.value(),
                                    s.node.value(), di.value()));
    }
  }
  std::vector<int> per_shape(shapes_.size(), 0);
  std::size_t mig = 0;
  for (const auto& [k, r] : pending_.all()) {
    if (jobs_.at(k.job).state != JobState::kPending)
      return Internal(fmt::format("job {} queued but not pending", k.job.value()));
    ++per_shape[r->shape];
    if (r->kind == SliceKind::kMig) {
      if (!pending_.mig().contains(k))
        return Internal(fmt::format("pending MIG job {} missing from the MIG queue", k.job.value()));
      ++mig;
    }
  }
  if (mig != pending_.mig().size()) return Internal("MIG queue holds jobs that are not pending");
  // Every pending job is in the books but those an admin holds, which are not.
  std::size_t pending = 0, held = 0;
  for (const auto& [id, r] : jobs_.records()) {
    if (r.view->state != JobState::kPending) continue;
    ++pending;
    held += r.view->held;
    if (pending_.contains(r) == r.view->held)
      return Internal(fmt::format("pending job {} is {} the books", id.value(), r.view->held ? "held but in" : "not in"));
  }
  if (held != pending_.held() || pending - held != pending_.size())
    return Internal(fmt::format("{} pending, {} held (counted {}), {} in the books", pending, held, pending_.held(),
                                pending_.size()));
  for (std::size_t i = 0; i < per_shape.size(); ++i) {
    const std::size_t queued = pending_.count_of_shape(static_cast<int>(i));
    if (queued != static_cast<std::size_t>(per_shape[i]))
      return Internal(fmt::format("shape {}: {} pending, {} in its queue", i, per_shape[i], queued));
    if (pending_.live_shapes().contains(static_cast<int>(i)) != (per_shape[i] > 0))
      return Internal(fmt::format("shape {}: live-shape set is wrong", i));
  }
  // With teams, the take-back candidates are the running slices of preemptible queues.
  if (config_.teams.enabled()) {
    std::size_t takeable = 0;
    for (const auto& [sid, s] : cluster_.slices()) {
      const Resolved& r = jobs_.RecordOf(s.job);
      if (!r.queue->preemptible) continue;
      ++takeable;
      const TeamShares::TakeBackIndex& index = teams_.take_back();
      auto of = index.find({r.team, r.queue});
      auto it = of == index.end() ? std::set<TeamShares::Takeable>::const_iterator()
                                  : of->second.find(TeamShares::Takeable{s.start_time, s.slice, nullptr, nullptr});
      if (of == index.end() || it == of->second.end() || it->view != &s || it->job != &r)
        return Internal(fmt::format("slice {}: not among the take-back candidates as it runs", sid.value()));
    }
    std::size_t listed = 0;
    for (const auto& [key, slices] : teams_.take_back()) listed += slices.size();
    if (takeable != listed)
      return Internal(fmt::format("{} take-back candidates for {} preemptible slices", listed, takeable));
  } else if (!teams_.take_back().empty()) {
    return Internal("take-back candidates without teams");
  }
  // The per-user caps' books are the sum of the running slices of capped queues.
  std::map<std::pair<std::string, std::string>, UserCaps::Usage> capped;
  for (const auto& [sid, s] : cluster_.slices()) {
    const Resolved& r = jobs_.RecordOf(s.job);
    if (!UserCaps::Capped(*r.queue)) continue;
    UserCaps::Usage& u = capped[{r.queue->name, r.view->user}];
    u.milli += SliceUsage(s);
    ++u.jobs;
  }
  for (const auto& [key, u] : user_caps_.all()) {
    auto it = capped.find(key);
    const UserCaps::Usage want = it == capped.end() ? UserCaps::Usage{} : it->second;
    if (u.milli != want.milli || u.jobs != want.jobs)
      return Internal(fmt::format("user {} in queue {}: caps count {} jobs holding {} milli-GPU, running {} holding {}",
                                  key.second, key.first, u.jobs, u.milli, want.jobs, want.milli));
    if (it != capped.end()) capped.erase(it);
  }
  if (!capped.empty())
    return Internal(fmt::format("user {} in queue {}: runs in a capped queue but the caps do not count it",
                                capped.begin()->first.second, capped.begin()->first.first));
  // Each team's books are the sum of its running slices.
  std::vector<std::map<std::string, MilliGpu, std::less<>>> team_held(static_cast<std::size_t>(teams_.size()));
  for (const auto& [sid, s] : cluster_.slices()) {
    const Resolved& r = jobs_.RecordOf(s.job);
    if (r.team >= 0) team_held[static_cast<std::size_t>(r.team)][r.queue->name] += SliceUsage(s);
  }
  for (int t = 0; t < teams_.size(); ++t) {
    std::erase_if(team_held[static_cast<std::size_t>(t)], [](const auto& e) { return e.second == 0; });
    if (team_held[static_cast<std::size_t>(t)] != teams_.HeldBy(t))
      return Internal(fmt::format("team {}: its books disagree with its running slices", teams_.name(t)));
    const TeamConfig* c = config_.teams.Find(teams_.name(t));
    MilliGpu borrowed = 0;
    for (const auto& [queue, held] : teams_.HeldBy(t))
      borrowed += std::max<MilliGpu>(0, held - (c ? c->GuaranteeIn(queue) : 0));
    if (borrowed != teams_.Borrowed(t))
      return Internal(fmt::format("team {}: borrows {}, its books say {}", teams_.name(t), borrowed, teams_.Borrowed(t)));
  }
  return Status::Ok();
}

}  // namespace gpuslice::sched
