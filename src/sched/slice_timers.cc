#include "sched/slice_timers.h"

#include <algorithm>

namespace gpuslice::sched {

void SliceTimers::Set(SliceId slice, Micros at) {
  Clear(slice);
  if (at == kNever) return;
  by_time_nodes_.Insert(by_time_, {at, slice});
  at_nodes_.Insert(at_, slice, at);
}

void SliceTimers::Clear(SliceId slice) {
  auto it = at_.find(slice);
  if (it == at_.end()) return;
  by_time_nodes_.Erase(by_time_, {it->second, slice});
  at_nodes_.Erase(at_, it);
}

std::optional<Micros> SliceTimers::At(SliceId slice) const {
  auto it = at_.find(slice);
  if (it == at_.end()) return std::nullopt;
  return it->second;
}

const std::vector<SliceId>& SliceTimers::Due(Micros now) {
  due_.clear();
  for (auto it = by_time_.begin(); it != by_time_.end() && it->first <= now; ++it) due_.push_back(it->second);
  std::sort(due_.begin(), due_.end());
  return due_;
}

bool SliceTimers::Consistent() const {
  if (by_time_.size() != at_.size()) return false;
  return std::all_of(at_.begin(), at_.end(), [&](const auto& e) { return by_time_.contains({e.second, e.first}); });
}

}  // namespace gpuslice::sched
