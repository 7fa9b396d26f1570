#pragma once
// Internal to the scheduler: what each team's running jobs hold, per queue (milli-GPU, as the
// per-user caps count it: a slice's share times its devices), and each team's fair-share usage.
// Teams are numbered in order of first use and keep their number across config reloads (a job
// keeps its team's name; a team a reload removed keeps its books, with no guarantee or limit).
//
// Fair-share usage is what a team held past its guarantees (borrowed, summed over queues),
// integrated over time and decayed with the half-life h: usage(t) = ∫ borrowed(s)·2^(−(t−s)/h) ds,
// in milli-GPU·µs. Borrowed amounts change only when held ones do, so between changes the
// integral has a closed form and the books store usage as of the last change; reading at a
// later time is pure (reads never round anything into the state, so a replay that sees the same
// changes at the same times computes the same figures bit for bit). Not thread-safe.

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

  explicit TeamBooks(Micros half_life = 7 * 24 * kHour) : half_life_(half_life) {}

  // The team's number, adding it when new.
  int IdOf(std::string_view name);
  // The team of that name, or kNone when no job has run in it.
  int Find(std::string_view name) const;
  const std::string& name(int team) const { return names_[static_cast<std::size_t>(team)]; }
  int size() const { return static_cast<int>(names_.size()); }

  // What the team's running jobs in `queue` hold.
  MilliGpu Held(int team, std::string_view queue) const;
  // `guarantee`: the team's guarantee in `queue` (it must not change between calls but through
  // ClearHeld); `now`: when the change happens, never earlier than the last change.
  void Add(int team, std::string_view queue, MilliGpu delta, MilliGpu guarantee, Micros now);
  // Every team holds nothing (before the books are counted again, after a reload); usage is
  // kept, decayed up to `now`.
  void ClearHeld(Micros now);
  // Each queue the team holds something in, with what it holds.
  const std::map<std::string, MilliGpu, std::less<>>& HeldBy(int team) const {
    return teams_[static_cast<std::size_t>(team)].held;
  }

  // What the team holds past its guarantees now, summed over queues.
  MilliGpu Borrowed(int team) const { return teams_[static_cast<std::size_t>(team)].borrowed; }
  // The team's decayed usage at `now` (not before its last change), milli-GPU·µs.
  double Usage(int team, Micros now) const;
  // A new half-life from `now` on (usage so far decays with the old one up to `now`).
  void SetHalfLife(Micros half_life, Micros now);
  Micros half_life() const { return half_life_; }
  // Scheduler::TeamBooksDigest.
  std::string Digest() const;

 private:
  struct Team {
    std::map<std::string, MilliGpu, std::less<>> held;  // per queue; no zeros
    MilliGpu borrowed = 0;
    double usage = 0;  // as of `since`
    Micros since = 0;
  };
  double UsageAt(const Team& t, Micros now) const;
  void Advance(Team& t, Micros now);

  Micros half_life_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, int> ids_;
  std::vector<Team> teams_;
};

}  // namespace gpuslice::sched
