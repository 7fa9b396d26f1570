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

void Scheduler::Impl::FairShareLevels() {
  fair_levels_.resize(static_cast<std::size_t>(teams_.size()));
  for (int t = 0; t < teams_.size(); ++t) {
    const TeamConfig* c = config_.teams.Find(teams_.name(t));
    fair_levels_[static_cast<std::size_t>(t)] = teams_.Usage(t, now_) / (c ? c->weight : 1);
  }
}

std::vector<TeamStanding> Scheduler::Impl::TeamStandings() const {
  constexpr double kMilliGpuMicrosPerGpuHour = 1000.0 * static_cast<double>(kHour);
  std::vector<TeamStanding> out;
  std::vector<double> level;
  for (const TeamConfig& c : config_.teams.teams) {
    TeamStanding s{c.name, c.weight};
    double usage = 0;
    if (const int t = teams_.Find(c.name); t != TeamBooks::kNone) {
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
// reclaim). MIG requests do not take back (an instance's shape is not a sum of freed shares).
// One job is served per call; true: slices were taken back.
bool Scheduler::Impl::TakeBack() {
  const Resolved* want = nullptr;
  for (const auto& [k, r] : pending_.all()) {
    if (r->kind == SliceKind::kMig || !WithinGuarantee(*r) || CapBlocks(*r) || !Feasible(*r).ok()) continue;
    want = r;
    break;
  }
  if (want == nullptr) return false;
  std::vector<const SliceView*> lent;
  for (const auto& [sid, s] : slices_) {
    const Resolved& v = resolved_.at(s.job);
    if (v.queue->preemptible && v.team != want->team) lent.push_back(&s);
  }
  std::sort(lent.begin(), lent.end(), [](const SliceView* a, const SliceView* b) {
    return std::pair(a->start_time, a->slice) > std::pair(b->start_time, b->slice);
  });
  std::map<std::pair<int, std::string>, MilliGpu> may_give;  // (team, queue): what it holds past its guarantee
  std::vector<const SliceView*> cands;
  for (const SliceView* s : lent) {
    const Resolved& v = resolved_.at(s->job);
    auto [it, added] = may_give.try_emplace({v.team, v.queue->name}, 0);
    if (added) {
      const TeamConfig* t = TeamConfigOf(v);
      it->second = v.team < 0 ? kMaxMilliGpu
                              : teams_.Held(v.team, v.queue->name) - (t ? t->GuaranteeIn(v.queue->name) : 0);
    }
    if (SliceUsage(*s) > it->second) continue;
    it->second -= SliceUsage(*s);
    cands.push_back(s);
  }
  std::vector<const SliceView*> need = RoomFrom(*want, cands);
  if (need.empty()) return false;
  const std::string team = teams_.name(want->team);
  std::vector<JobId> victims;
  for (const SliceView* v : need) victims.push_back(v->job);
  for (JobId job : victims) {
    out_.push_back(Preempt{job, resolved_.at(job).slice->first,
                           fmt::format("taken back for team {}: job {} is within the team's guarantee in queue '{}'",
                                       team, want->job.value(), want->queue->name),
                           /*requeue=*/true});
    ++stats_.preempted;
    EndRunning(job, "preempted", /*requeue=*/true);
  }
  return true;
}

}  // namespace gpuslice::sched
