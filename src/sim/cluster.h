#pragma once
// The simulated cluster: nodes with free CPU, host memory and per-GPU free shares, plus a
// version per node that changes whenever the node changes (so per-node results can be cached).
// Not thread-safe; one simulation owns one Cluster.

#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sched/placement/placement.h"
#include "sim/openb.h"

namespace gpuslice::sim {

struct SimNode {
  std::string name;
  std::string model;
  std::int64_t cpu_total = 0;
  std::int64_t cpu_free = 0;
  Bytes memory_total = 0;
  Bytes memory_free = 0;
  std::vector<sched::GpuView> gpus;
  // Running requests per GPU kind (index = bit of sched::GpuPodKindBit), for NodeView::gpu_pod_kinds.
  std::array<std::int32_t, 32> kind_count{};
  std::uint32_t version = 1;
  // Of the usable GPUs, kept by Cluster for Fits() (which runs for every node at every
  // placement): the largest free share, and how many are wholly free.
  MilliGpu max_free = 0;
  int whole_free = 0;
};

class Cluster {
 public:
  explicit Cluster(std::span<const TraceNode> nodes);
  // `count` identical nodes of `gpus` GPUs each (synthetic clusters for replay and benchmarks).
  static Cluster Uniform(int count, int gpus, std::string model, std::int64_t cpu_milli, Bytes memory);

  std::size_t size() const { return nodes_.size(); }
  const SimNode& node(std::size_t i) const { return nodes_[i]; }
  sched::NodeView View(std::size_t i) const;
  MilliGpu capacity_milli() const { return capacity_; }
  MilliGpu allocated_milli() const { return allocated_; }

  // True iff `req` fits on node i now (CPU, host memory, model, GPUs).
  bool Fits(const sched::PlacementRequest& req, std::size_t i) const;
  // Applies (sign = +1) or releases (sign = -1) `req` on node i's `gpus`.
  void Apply(const sched::PlacementRequest& req, std::size_t i, std::span<const int> gpus, int sign);

 private:
  Cluster() = default;
  // Recomputes node i's max_free and whole_free from its GPUs.
  void Summarise(std::size_t i);
  std::vector<SimNode> nodes_;
  MilliGpu capacity_ = 0;
  MilliGpu allocated_ = 0;
};

}  // namespace gpuslice::sim
