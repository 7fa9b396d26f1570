#include "sched/team_books.h"

namespace gpuslice::sched {

int TeamBooks::IdOf(std::string_view name) {
  auto [it, added] = ids_.try_emplace(std::string(name), size());
  if (added) {
    names_.emplace_back(name);
    held_.emplace_back();
  }
  return it->second;
}

MilliGpu TeamBooks::Held(int team, std::string_view queue) const {
  const auto& q = held_[static_cast<std::size_t>(team)];
  auto it = q.find(queue);
  return it == q.end() ? 0 : it->second;
}

void TeamBooks::Add(int team, std::string_view queue, MilliGpu delta) {
  auto& q = held_[static_cast<std::size_t>(team)];
  auto it = q.find(queue);
  if (it == q.end()) it = q.emplace(std::string(queue), 0).first;
  it->second += delta;
  if (it->second == 0) q.erase(it);
}

void TeamBooks::ClearHeld() {
  for (auto& q : held_) q.clear();
}

}  // namespace gpuslice::sched
