#include "sched/team_books.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

namespace gpuslice::sched {

int TeamBooks::IdOf(std::string_view name) {
  auto [it, added] = ids_.try_emplace(std::string(name), size());
  if (added) {
    names_.emplace_back(name);
    teams_.emplace_back();
  }
  return it->second;
}

int TeamBooks::Find(std::string_view name) const {
  auto it = ids_.find(std::string(name));
  return it == ids_.end() ? kNone : it->second;
}

MilliGpu TeamBooks::Held(int team, std::string_view queue) const {
  const auto& q = teams_[static_cast<std::size_t>(team)].held;
  auto it = q.find(queue);
  return it == q.end() ? 0 : it->second;
}

void TeamBooks::Add(int team, std::string_view queue, MilliGpu delta, MilliGpu guarantee, Micros now) {
  Team& t = teams_[static_cast<std::size_t>(team)];
  Advance(t, now);
  auto it = t.held.find(queue);
  if (it == t.held.end()) it = t.held.emplace(std::string(queue), 0).first;
  const MilliGpu before = std::max<MilliGpu>(0, it->second - guarantee);
  it->second += delta;
  t.borrowed += std::max<MilliGpu>(0, it->second - guarantee) - before;
  if (it->second == 0) t.held.erase(it);
}

void TeamBooks::ClearHeld(Micros now) {
  for (Team& t : teams_) {
    Advance(t, now);
    t.held.clear();
    t.borrowed = 0;
  }
}

// Between changes the borrowed amount b is constant: usage(t0 + dt) = usage(t0)·d + b·τ·(1 − d),
// d = e^(−dt/τ), τ = h / ln 2 (the mean life of a half-life h).
double TeamBooks::UsageAt(const Team& t, Micros now) const {
  if (now <= t.since) return t.usage;
  const double tau = static_cast<double>(half_life_) / std::numbers::ln2;
  const double x = static_cast<double>(now - t.since) / tau;
  return t.usage * std::exp(-x) - static_cast<double>(t.borrowed) * tau * std::expm1(-x);
}

void TeamBooks::Advance(Team& t, Micros now) {
  if (now <= t.since) return;
  t.usage = UsageAt(t, now);
  t.since = now;
}

double TeamBooks::Usage(int team, Micros now) const { return UsageAt(teams_[static_cast<std::size_t>(team)], now); }

void TeamBooks::SetHalfLife(Micros half_life, Micros now) {
  if (half_life == half_life_) return;
  for (Team& t : teams_) Advance(t, now);
  half_life_ = half_life;
}

std::string TeamBooks::Digest() const {
  std::string out;
  for (std::size_t i = 0; i < teams_.size(); ++i) {
    const Team& t = teams_[i];
    out += fmt::format("team {} borrowed {} usage {:a} since {} held", names_[i], t.borrowed, t.usage, t.since);
    for (const auto& [queue, milli] : t.held) out += fmt::format(" {}={}", queue, milli);
    out += '\n';
  }
  return out;
}

}  // namespace gpuslice::sched
