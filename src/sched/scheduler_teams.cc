// Teams ([teams] of the config, docs/teams.md): which team a job runs in, its team's limit, and
// whether it is within its team's guarantee. Part of Scheduler::Impl (scheduler_impl.h).
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sched/scheduler_impl.h"

namespace gpuslice::sched {

Result<std::string> Scheduler::Impl::TeamFor(const Submit& e) const {
  const TeamsConfig& tc = config_.teams;
  if (!tc.enabled()) {
    if (!e.team.empty()) return InvalidArgument(fmt::format("team '{}': this site has no teams", e.team));
    return std::string();
  }
  if (e.team.empty()) {
    const TeamConfig* t = tc.DefaultFor(e.user);
    return t == nullptr ? std::string() : t->name;
  }
  const TeamConfig* t = tc.Find(e.team);
  if (t == nullptr) return NotFound(fmt::format("team '{}' does not exist", e.team));
  if (!t->HasUser(e.user) && t->groups.empty())
    return PermissionDenied(fmt::format("team '{}': {} is not one of its members", e.team, e.user));
  return t->name;
}

std::optional<TeamLimit> Scheduler::Impl::TeamLimitReason(const Resolved& r) const {
  const TeamConfig* t = TeamConfigOf(r);
  if (t == nullptr) return std::nullopt;
  const MilliGpu limit = t->LimitIn(r.queue->name);
  if (limit == 0) return std::nullopt;
  const MilliGpu held = teams_.Held(r.team, r.queue->name);
  if (held + UsageMilli(r) <= limit) return std::nullopt;
  return TeamLimit{t->name, r.queue->name, limit, held, UsageMilli(r)};
}

bool Scheduler::Impl::WithinGuarantee(const Resolved& r) const {
  const TeamConfig* t = TeamConfigOf(r);
  if (t == nullptr) return false;
  const MilliGpu guarantee = t->GuaranteeIn(r.queue->name);
  return guarantee > 0 && teams_.Held(r.team, r.queue->name) + UsageMilli(r) <= guarantee;
}

std::vector<TeamStanding> Scheduler::Impl::TeamStandings() const {
  constexpr double kMilliGpuMicrosPerGpuHour = 1000.0 * static_cast<double>(kHour);
  std::vector<TeamStanding> out;
  std::vector<double> level;
  for (const TeamConfig& c : config_.teams.teams) {
    TeamStanding s{c.name, c.weight};
    double usage = 0;
    if (const int t = teams_.Find(c.name); t != TeamShares::kNone) {
      s.borrowed = teams_.Borrowed(t);
      usage = teams_.Usage(t, now_);
    }
    s.usage_gpu_hours = usage / kMilliGpuMicrosPerGpuHour;
    level.push_back(usage / c.weight);
    out.push_back(std::move(s));
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i].rank = 1 + static_cast<int>(std::count_if(level.begin(), level.end(), [&](double l) { return l < level[i]; }));
  return out;
}

// Take-back: the first waiting job (queue order) within its team's guarantee, which the
// last pass could not place, takes room from slices lent to other teams: slices of preemptible
// queues only (they are requeued), of a team other than its own, newest first, and never so
// many of one team's that it would hold less than its guarantee in that queue (a job without a
// team is all borrowed). The slices taken are the fewest that make room (RoomFrom, as on-demand
// reclaim). A MIG request takes the one instance PlacementEngine::PlaceMig would place it on
// (TakesBackFor).
// One job is served per call; true: slices were taken back.
bool Scheduler::Impl::TakeBack() {
  // The first waiting job in queue order that may take back. The jobs of a shape share team,
  // queue and ask, so all but the user cap is asked once per live shape; per shape, its first
  // job its user's cap does not hold.
  const Resolved* want = nullptr;
  for (int shape : pending_.live_shapes()) {
    const auto& jobs = pending_.of_shape(shape);
    const Resolved& head = *jobs.begin()->second;
    if (want != nullptr && !(jobs.begin()->first < PendingKeyOf(*want))) continue;
    if (!WithinGuarantee(head) || !cluster_.Feasible(head).ok()) continue;
    // A MIG request's share is known only with its instance (UsageMilli() counts 0) and is never
    // 0: a team at its guarantee has no room for one.
    if (head.kind == SliceKind::kMig &&
        teams_.Held(head.team, head.queue->name) >= TeamConfigOf(head)->GuaranteeIn(head.queue->name))
      continue;
    for (const auto& [k, r] : jobs) {
      if (want != nullptr && !(k < PendingKeyOf(*want))) break;
      if (CapBlocks(*r)) continue;
      want = r;
      break;
    }
  }
  if (want == nullptr) return false;
  // A layout being applied may be the one the MIG planner chose for this request: wait for it
  // (its ReconfigureDone schedules again) rather than take a slice back as well.
  if (want->kind == SliceKind::kMig)
    for (const DeviceRef& ref : mig_.changing())
      if (cluster_.devices().at(ref).reconfiguring) return false;
  // Candidates, newest first, drawn only as far as RoomFromNext needs: slices of other teams,
  // each team giving no more than it holds past its guarantee in the queue (a job of no team:
  // all). A (team, queue) with nothing left to give is not walked at all.
  struct Giver {
    std::set<TeamShares::Takeable>::const_iterator at, end;
    MilliGpu left;
  };
  std::vector<Giver> givers;
  for (const auto& [key, slices] : teams_.take_back()) {
    const auto [team, queue] = key;
    if (team == want->team) continue;
    MilliGpu left = kMaxMilliGpu;
    if (team >= 0) {
      const TeamConfig* t = config_.teams.Find(teams_.name(team));
      left = teams_.Held(team, queue->name) - (t ? t->GuaranteeIn(queue->name) : 0);
    }
    if (left > 0) givers.push_back(Giver{slices.begin(), slices.end(), left});
  }
  // The newest candidate its team may give and `takes` accepts (one it refuses costs nothing).
  auto next_that = [&](const auto& takes) -> const SliceView* {
    for (;;) {
      Giver* newest = nullptr;
      for (Giver& g : givers)
        if (g.at != g.end && (newest == nullptr || *g.at < *newest->at)) newest = &g;
      if (newest == nullptr) return nullptr;
      const SliceView* v = (newest->at++)->view;
      const MilliGpu usage = SliceUsage(*v);
      if (usage > newest->left || !takes(*v)) continue;
      newest->left -= usage;
      if (newest->left <= 0) newest->at = newest->end;
      return v;
    }
  };
  std::vector<const SliceView*> need;
  if (want->kind == SliceKind::kMig) {
    if (const SliceView* v = next_that([&](const SliceView& c) { return TakesBackFor(*want, c); })) need.push_back(v);
  } else {
    need = RoomFromNext(*want, [&]() { return next_that([](const SliceView&) { return true; }); });
  }
  if (need.empty()) return false;
  const std::string team = teams_.name(want->team);
  std::vector<JobId> victims;
  for (const SliceView* v : need) victims.push_back(v->job);
  for (JobId job : victims) {
    out_.push_back(Preempt{job, jobs_.RecordOf(job).slice->first,
                           fmt::format("taken back for team {}: job {} is within the team's guarantee in queue '{}'",
                                       team, want->job.value(), want->queue->name),
                           /*requeue=*/true});
    ++stats_.preempted;
    EndRunning(job, "preempted", /*requeue=*/true);
  }
  return true;
}

// A MIG request is placed on a free instance of exactly its smallest fitting profile on a device
// of its model (PlacementEngine::PlaceMig): freeing `v` gives it room when `v` holds such an
// instance on a device new slices may take. Its team stays within its guarantee with it: the
// instance it would get is of `v`'s profile and model, so it counts what `v` counts.
bool Scheduler::Impl::TakesBackFor(const Resolved& r, const SliceView& v) const {
  if (v.kind != SliceKind::kMig || !v.mig) return false;
  const DeviceView& d = cluster_.devices().at({v.node, v.devices.front()});
  if (!Schedulable(d) || !ModelOk(r, d) || d.catalogue == nullptr) return false;
  const MigProfile* p = d.catalogue->SmallestProfileFor(r.mig_need);
  if (p == nullptr || p->id != v.mig->profile_id) return false;
  const TeamConfig* t = TeamConfigOf(r);
  return t != nullptr && teams_.Held(r.team, r.queue->name) + SliceUsage(v) <= t->GuaranteeIn(r.queue->name);
}

}  // namespace gpuslice::sched
