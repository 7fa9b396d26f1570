#pragma once
// Internal to the scheduler: what each team's running jobs hold, per queue (milli-GPU, as the
// per-user caps count it: a slice's share times its devices). Teams are numbered in order of
// first use and keep their number across config reloads (a job keeps its team's name; a team a
// reload removed keeps its books, with no guarantee or limit). Not thread-safe.

#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/units.h"

namespace gpuslice::sched {

class TeamBooks {
 public:
  static constexpr int kNone = -1;

  // The team's number, adding it when new.
  int IdOf(std::string_view name);
  const std::string& name(int team) const { return names_[static_cast<std::size_t>(team)]; }
  int size() const { return static_cast<int>(names_.size()); }

  // What the team's running jobs in `queue` hold.
  MilliGpu Held(int team, std::string_view queue) const;
  void Add(int team, std::string_view queue, MilliGpu delta);
  // Every team holds nothing (before the books are counted again, after a reload).
  void ClearHeld();
  // Each queue the team holds something in, with what it holds.
  const std::map<std::string, MilliGpu, std::less<>>& HeldBy(int team) const {
    return held_[static_cast<std::size_t>(team)];
  }

 private:
  std::vector<std::string> names_;
  std::unordered_map<std::string, int> ids_;
  std::vector<std::map<std::string, MilliGpu, std::less<>>> held_;  // per team, per queue; no zeros
};

}  // namespace gpuslice::sched
