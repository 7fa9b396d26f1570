#include "sched/capacity_index.h"

#include <algorithm>
#include <climits>

#include "sched/mig_plan.h"

namespace gpuslice::sched {

const std::set<DeviceIndex>& CapacityIndex::FreeOn(NodeId node) const {
  static const std::set<DeviceIndex> kNone;
  auto it = free_.find(node);
  return it == free_.end() ? kNone : it->second;
}

const std::vector<int>& CapacityIndex::PlaceableBeside(const DeviceFacts& f) const {
  // The key is built in a reused buffer: a lookup that hits (almost all of them) allocates nothing.
  std::vector<int>& key = scratch_key_;
  key.assign(1, f.model_idx);
  for (const MigPlacement& p : f.in_use) {
    key.push_back(p.profile_id);
    key.push_back(p.start);
  }
  auto it = placeable_memo_.find(key);
  if (it != placeable_memo_.end()) return it->second;
  std::vector<int> ok;
  const MigLayout in_use(f.in_use.begin(), f.in_use.end());
  for (const MigProfile& p : f.model->mig_profiles) {
    if (p.media_extensions) continue;  // the planner sizes requests without +me
    if (HasFreeMigPlacement(*f.model, in_use, p.id)) ok.push_back(p.id);
  }
  return placeable_memo_.emplace(key, std::move(ok)).first->second;
}

template <typename OnInstance, typename OnRelayout>
void CapacityIndex::ForEachMigEntry(const DeviceView& d, const DeviceFacts& f, OnInstance on_instance,
                                    OnRelayout on_relayout) const {
  if (d.mode != DeviceMode::kMig || Excluded(d) || !f.model) return;
  std::vector<int>& free_profiles = scratch_free_profiles_;
  free_profiles.clear();
  for (const MigPlacement& inst : d.layout) {
    if (std::find(f.in_use.begin(), f.in_use.end(), inst) != f.in_use.end()) continue;
    on_instance(std::make_tuple(f.model_idx, inst.profile_id, d.ref, inst.start));
    free_profiles.push_back(inst.profile_id);
  }
  for (int p : PlaceableBeside(f)) {
    if (std::find(free_profiles.begin(), free_profiles.end(), p) == free_profiles.end())
      on_relayout(std::make_tuple(f.model_idx, p, d.ref));
  }
}

void CapacityIndex::Add(const DeviceView& d, const DeviceFacts& f) {
  if (Excluded(d)) return;
  switch (d.mode) {
    case DeviceMode::kFree: {
      auto& set = free_[d.ref.node];
      if (!set.empty()) pools_.free_by_node.Erase(free_by_node_, {static_cast<int>(set.size()), d.ref.node});
      pools_.free.Insert(set, d.ref.index);
      pools_.free_by_node.Insert(free_by_node_, {static_cast<int>(set.size()), d.ref.node});
      if (d.mig_capable) pools_.mig_free.Insert(mig_free_, {f.model_idx, d.ref});
      break;
    }
    case DeviceMode::kShared:
      if (d.used_milli < kOneGpu) pools_.share.Insert(shared_, {kOneGpu - d.used_milli, d.ref});
      if (d.mig_capable) pools_.mig_busy.Insert(mig_busy_, d.ref);
      break;
    case DeviceMode::kMps:
      if (d.used_milli < kOneGpu && d.clients < f.mps_limit)
        pools_.share.Insert(mps_, {kOneGpu - d.used_milli, d.ref});
      if (d.mig_capable) pools_.mig_busy.Insert(mig_busy_, d.ref);
      break;
    case DeviceMode::kWhole:
      if (d.mig_capable) pools_.mig_busy.Insert(mig_busy_, d.ref);
      break;
    case DeviceMode::kMig:
      ForEachMigEntry(
          d, f, [&](const auto& e) { pools_.free_instance.Insert(free_instances_, e); },
          [&](const auto& e) { pools_.relayout.Insert(relayout_, e); });
      break;
  }
}

void CapacityIndex::Remove(const DeviceView& d, const DeviceFacts& f) {
  if (Excluded(d)) return;
  switch (d.mode) {
    case DeviceMode::kFree: {
      auto it = free_.find(d.ref.node);
      if (it == free_.end()) break;
      if (!pools_.free.Erase(it->second, d.ref.index)) break;
      int n = static_cast<int>(it->second.size());
      pools_.free_by_node.Erase(free_by_node_, {n + 1, d.ref.node});
      if (n > 0) pools_.free_by_node.Insert(free_by_node_, {n, d.ref.node});
      else free_.erase(it);
      pools_.mig_free.Erase(mig_free_, {f.model_idx, d.ref});
      break;
    }
    case DeviceMode::kShared:
      pools_.share.Erase(shared_, {kOneGpu - d.used_milli, d.ref});
      pools_.mig_busy.Erase(mig_busy_, d.ref);
      break;
    case DeviceMode::kMps:
      pools_.share.Erase(mps_, {kOneGpu - d.used_milli, d.ref});
      pools_.mig_busy.Erase(mig_busy_, d.ref);
      break;
    case DeviceMode::kWhole:
      pools_.mig_busy.Erase(mig_busy_, d.ref);
      break;
    case DeviceMode::kMig:
      ForEachMigEntry(
          d, f, [&](const auto& e) { pools_.free_instance.Erase(free_instances_, e); },
          [&](const auto& e) { pools_.relayout.Erase(relayout_, e); });
      break;
  }
}

std::optional<std::pair<DeviceRef, MigPlacement>> CapacityIndex::FirstFreeInstance(int model_idx,
                                                                                   int profile_id) const {
  auto it = free_instances_.lower_bound({model_idx, profile_id, DeviceRef{}, INT_MIN});
  if (it == free_instances_.end() || std::get<0>(*it) != model_idx || std::get<1>(*it) != profile_id)
    return std::nullopt;
  return std::make_pair(std::get<2>(*it), MigPlacement{profile_id, std::get<3>(*it)});
}

std::vector<DeviceRef> CapacityIndex::RelayoutCandidates(int model_idx, int profile_id, int k) const {
  std::vector<DeviceRef> out;
  for (auto it = relayout_.lower_bound({model_idx, profile_id, DeviceRef{}});
       it != relayout_.end() && std::get<0>(*it) == model_idx && std::get<1>(*it) == profile_id &&
       static_cast<int>(out.size()) < k;
       ++it) {
    out.push_back(std::get<2>(*it));
  }
  return out;
}

std::optional<DeviceRef> CapacityIndex::FirstMigCapableFree(int model_idx) const {
  auto it = mig_free_.lower_bound({model_idx, DeviceRef{}});
  if (it == mig_free_.end() || it->first != model_idx) return std::nullopt;
  return it->second;
}

bool CapacityIndex::operator==(const CapacityIndex& o) const {
  return free_ == o.free_ && free_by_node_ == o.free_by_node_ && shared_ == o.shared_ &&
         mps_ == o.mps_ && free_instances_ == o.free_instances_ && relayout_ == o.relayout_ &&
         mig_free_ == o.mig_free_ && mig_busy_ == o.mig_busy_;
}

}  // namespace gpuslice::sched
