#pragma once
// Internal to the scheduler: its team part. What each team's running jobs hold and what the
// team has used (TeamBooks), the running slices take-back may requeue (the take-back index),
// and each team's fair-share level for the current pass. A slice starts and ends in both books
// through Count() only, so the index lists a team's slices exactly when the books count them
// (and, without a team, the slices of no team). The books are read through TeamBooks' own
// calls; their writes other than Count() and Clear() are hidden. Not thread-safe (owned by one
// Scheduler, like its other books).

#include <limits>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/ids.h"
#include "core/units.h"
#include "sched/config.h"
#include "sched/resolved.h"
#include "sched/views.h"
#include "sched/team_books.h"

namespace gpuslice::sched {

class TeamShares : private TeamBooks {
 public:
  // A running slice of a preemptible queue, newest first (start time, then slice id).
  struct Takeable {
    Micros start;
    SliceId slice;
    const SliceView* view;
    const Resolved* job;
    bool operator<(const Takeable& o) const { return std::pair(start, slice) > std::pair(o.start, o.slice); }
  };
  // The take-back candidates per (team, queue version); kNone: jobs of no team. No empty sets.
  using TakeBackIndex = std::map<std::pair<int, const QueueConfig*>, std::set<Takeable>>;

  using TeamBooks::TeamBooks;
  using TeamBooks::kNone;
  using TeamBooks::IdOf;
  using TeamBooks::Find;
  using TeamBooks::name;
  using TeamBooks::size;
  using TeamBooks::Held;
  using TeamBooks::HeldBy;
  using TeamBooks::Borrowed;
  using TeamBooks::Usage;
  using TeamBooks::SetHalfLife;
  using TeamBooks::half_life;
  using TeamBooks::Digest;

  // Slice `s` of job `r`, holding `usage`, starts (sign +1) or ends (-1) at `now`: into or out
  // of its team's books in r's queue (`guarantee`: the team's there) and, when `take_back` (teams
  // are on and the queue is preemptible), the take-back index. An end must mirror its start.
  void Count(const Resolved& r, const SliceView& s, MilliGpu usage, MilliGpu guarantee, bool take_back, int sign,
             Micros now);
  // Nothing runs (before the running slices are counted again, after a reload); usage is kept,
  // decayed up to `now`.
  void Clear(Micros now);
  const TakeBackIndex& take_back() const { return take_back_; }

  // Each team's fair-share level at `now`: its decayed usage over its weight in `teams` (1 for a
  // team a reload removed). Lower is served first in the over-quota pool. Usage only accrues over
  // time, so the levels are computed once per pass and stay until the next call.
  void ComputeLevels(const TeamsConfig& teams, Micros now);
  // The team's level from the last ComputeLevels (which must have seen the team); kNone: after
  // every team.
  double LevelOf(int team) const {
    return team < 0 ? std::numeric_limits<double>::infinity() : levels_[static_cast<std::size_t>(team)];
  }

 private:
  TakeBackIndex take_back_;
  std::vector<double> levels_;  // per team
};

}  // namespace gpuslice::sched
