#include "sched/mig_books.h"

#include <algorithm>
#include <tuple>

namespace gpuslice::sched {

void MigBooks::SortByStart(MigLayout& l) {
  std::sort(l.begin(), l.end(), [](const MigPlacement& a, const MigPlacement& b) {
    return std::tie(a.start, a.profile_id) < std::tie(b.start, b.profile_id);
  });
}

const MigLayout& MigBooks::InUse(const DeviceView& d) const {
  static const MigLayout kNone;
  auto it = in_use_.find(&d);
  return it == in_use_.end() ? kNone : it->second;
}

void MigBooks::AddInUse(const DeviceView& d, const MigPlacement& p) {
  MigLayout& used = in_use_[&d];
  used.push_back(p);
  SortByStart(used);
}

void MigBooks::RemoveInUse(const DeviceView& d, const MigPlacement& p) {
  MigLayout& used = in_use_[&d];
  used.erase(std::find(used.begin(), used.end(), p));
  if (used.empty()) in_use_.erase(&d);
}

void MigBooks::SetChanging(const DeviceRef& ref, bool changing) {
  if (changing) {
    changing_.insert(ref);
  } else {
    changing_.erase(ref);
  }
}

void MigBooks::NoteUse(const DeviceView& d, Micros now) {
  if (d.mode == DeviceMode::kMig && InUse(d).empty()) {
    if (empty_since_.try_emplace(d.ref, now).second) empty_by_time_.emplace(now, d.ref);
  } else {
    ForgetEmpty(d.ref);
  }
}

void MigBooks::ForgetEmpty(const DeviceRef& ref) {
  auto it = empty_since_.find(ref);
  if (it == empty_since_.end()) return;
  empty_by_time_.erase({it->second, ref});
  empty_since_.erase(it);
}

const std::vector<DeviceRef>& MigBooks::EmptyFor(Micros now, Micros hold) {
  scratch_empty_.clear();
  for (const auto& [since, ref] : empty_by_time_) {
    if (now - since < hold) break;
    scratch_empty_.push_back(ref);
  }
  std::sort(scratch_empty_.begin(), scratch_empty_.end());
  return scratch_empty_;
}

void MigBooks::Remove(const DeviceView& d) {
  changing_.erase(d.ref);
  mig_mode_devices_ -= d.mode == DeviceMode::kMig;
  in_use_.erase(&d);
  broken_.erase(d.ref);
  ForgetEmpty(d.ref);
}

}  // namespace gpuslice::sched
