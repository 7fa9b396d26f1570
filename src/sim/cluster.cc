#include "sim/cluster.h"

#include <algorithm>
#include <cassert>

#include "sched/placement/fgd_frag.h"

namespace gpuslice::sim {

Cluster::Cluster(std::span<const TraceNode> nodes) {
  nodes_.reserve(nodes.size());
  for (const TraceNode& t : nodes) {
    SimNode n;
    n.name = t.name;
    n.model = t.model;
    n.cpu_total = n.cpu_free = t.cpu_milli;
    n.memory_total = n.memory_free = t.memory;
    n.gpus.assign(t.gpus, sched::GpuView{kOneGpu, 0, true});
    capacity_ += static_cast<MilliGpu>(t.gpus) * kOneGpu;
    nodes_.push_back(std::move(n));
    Summarise(nodes_.size() - 1);
  }
}

Cluster Cluster::Uniform(int count, int gpus, std::string model, std::int64_t cpu_milli, Bytes memory) {
  Cluster c;
  c.nodes_.resize(count);
  for (int i = 0; i < count; ++i) {
    SimNode& n = c.nodes_[i];
    n.name = "node-" + std::to_string(i);
    n.model = model;
    n.cpu_total = n.cpu_free = cpu_milli;
    n.memory_total = n.memory_free = memory;
    n.gpus.assign(gpus, sched::GpuView{kOneGpu, 0, true});
    c.Summarise(i);
  }
  c.capacity_ = static_cast<MilliGpu>(count) * gpus * kOneGpu;
  return c;
}

sched::NodeView Cluster::View(std::size_t i) const {
  const SimNode& n = nodes_[i];
  sched::NodeView v;
  v.index = static_cast<std::uint32_t>(i);
  v.model = n.model;
  v.cpu_milli_free = n.cpu_free;
  v.cpu_milli_total = n.cpu_total;
  v.memory_free = n.memory_free;
  v.memory_total = n.memory_total;
  v.gpus = n.gpus;
  for (std::size_t k = 0; k < n.kind_count.size(); ++k) {
    if (n.kind_count[k] > 0) v.gpu_pod_kinds |= 1u << k;
  }
  v.gpu_pod_kinds_known = true;
  return v;
}

bool Cluster::Fits(const sched::PlacementRequest& req, std::size_t i) const {
  const SimNode& n = nodes_[i];
  if (n.cpu_free < req.cpu_milli || n.memory_free < req.host_memory) return false;
  if (req.num_gpus == 0) return true;
  if (!req.allowed_models.empty() && !sched::ModelAllowed(req.allowed_models, n.model)) return false;
  // One GPU (a share or a whole one) and whole GPUs, which are all the FGD traces ask, from the
  // node's summary; anything else counted.
  if (req.num_gpus == 1 && req.milli_per_gpu > 0) return n.max_free >= req.milli_per_gpu;
  if (req.milli_per_gpu == kOneGpu) return n.whole_free >= req.num_gpus;
  int enough = 0;
  for (const sched::GpuView& g : n.gpus) {
    enough += static_cast<int>(g.usable) & static_cast<int>(g.free_milli >= req.milli_per_gpu);
  }
  return enough >= req.num_gpus;
}

void Cluster::Apply(const sched::PlacementRequest& req, std::size_t i, std::span<const int> gpus, int sign) {
  SimNode& n = nodes_[i];
  n.cpu_free -= sign * req.cpu_milli;
  n.memory_free -= sign * req.host_memory;
  for (int g : gpus) {
    n.gpus[g].free_milli -= sign * req.milli_per_gpu;
    assert(n.gpus[g].free_milli >= 0 && n.gpus[g].free_milli <= kOneGpu);
  }
  if (const std::uint32_t bit = sched::GpuPodKindBit(req.num_gpus, req.milli_per_gpu); bit != 0) {
    n.kind_count[std::countr_zero(bit)] += sign;
    assert(n.kind_count[std::countr_zero(bit)] >= 0);
  }
  allocated_ += sign * req.milli_per_gpu * static_cast<MilliGpu>(gpus.size());
  ++n.version;
  Summarise(i);
  assert(n.cpu_free >= 0 && n.memory_free >= 0);
}

void Cluster::Summarise(std::size_t i) {
  SimNode& n = nodes_[i];
  n.max_free = 0;
  n.whole_free = 0;
  for (const sched::GpuView& g : n.gpus) {
    if (!g.usable) continue;
    n.max_free = std::max(n.max_free, g.free_milli);
    n.whole_free += g.free_milli >= kOneGpu ? 1 : 0;
  }
}

}  // namespace gpuslice::sim
