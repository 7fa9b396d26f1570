#include "sched/team_shares.h"

namespace gpuslice::sched {

void TeamShares::Count(const Resolved& r, const SliceView& s, MilliGpu usage, MilliGpu guarantee, bool take_back,
                       int sign, Micros now) {
  if (take_back) {
    if (sign > 0) {
      take_back_[{r.team, r.queue}].insert(Takeable{s.start_time, s.slice, &s, &r});
    } else if (auto it = take_back_.find({r.team, r.queue}); it != take_back_.end()) {
      it->second.erase(Takeable{s.start_time, s.slice, nullptr, nullptr});
      if (it->second.empty()) take_back_.erase(it);
    }
  }
  if (r.team >= 0) Add(r.team, r.queue->name, sign * usage, guarantee, now);
}

void TeamShares::Clear(Micros now) {
  ClearHeld(now);
  take_back_.clear();
}

void TeamShares::ComputeLevels(const TeamsConfig& teams, Micros now) {
  levels_.resize(static_cast<std::size_t>(size()));
  for (int t = 0; t < size(); ++t) {
    const TeamConfig* c = teams.Find(name(t));
    levels_[static_cast<std::size_t>(t)] = Usage(t, now) / (c ? c->weight : 1);
  }
}

}  // namespace gpuslice::sched
