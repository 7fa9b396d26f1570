#include "sched/workload_model.h"

#include <algorithm>
#include <utility>

#include "sched/placement/fgd_frag.h"

namespace gpuslice::sched {

void WorkloadModel::HostResized(std::size_t before, std::size_t after) {
  if (before > 0) {
    auto it = hosts_by_size_.find(before);
    if (--it->second == 0) hosts_by_size_.erase(it);
  }
  if (after > 0) ++hosts_by_size_[after];
  hosts_changed_ = true;
}

std::span<const WorkloadShape> WorkloadModel::Shapes() {
  if (version_ != 0 && shapes_of_ == learned_.version() && !hosts_changed_) return shapes_;
  // One host view per distinct device count, not per host: the shares are remade at every
  // refresh of the learned workload.
  const std::span<const WorkloadShape> learned = learned_.Shapes();
  std::vector<WorkloadShape> shapes(learned.begin(), learned.end());
  const std::vector<GpuView> gpus(hosts_by_size_.empty() ? 0 : hosts_by_size_.rbegin()->first);
  std::vector<NodeView> sizes;
  std::vector<std::int64_t> copies;
  for (const auto& [size, count] : hosts_by_size_) {
    sizes.emplace_back().gpus = std::span(gpus.data(), size);
    copies.push_back(count);
  }
  SetSupplyShares(shapes, sizes, copies);
  shapes_of_ = learned_.version();
  hosts_changed_ = false;
  auto same = [](const WorkloadShape& a, const WorkloadShape& b) {
    return a.num_gpus == b.num_gpus && a.milli_per_gpu == b.milli_per_gpu && a.frequency == b.frequency &&
           a.supply_share == b.supply_share;
  };
  if (version_ == 0 || !std::equal(shapes.begin(), shapes.end(), shapes_.begin(), shapes_.end(), same)) {
    shapes_ = std::move(shapes);
    ++version_;
  }
  return shapes_;
}

}  // namespace gpuslice::sched
