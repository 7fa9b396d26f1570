// best-fit, packing and spread: the classic baselines, as Filter/Score plugins.
//  - best-fit: the GPUs left with the least free share after placement (tightest), then the
//    node left with the fewest fully free GPUs — keeps whole GPUs and whole nodes free.
//  - packing: prefer GPUs and nodes that are already in use (most allocated share first).
//  - spread: the GPUs and node with the most free share (load balancing).
#include <algorithm>
#include <numeric>

#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

enum class Order { kTightest, kMostUsed, kLoosest };

// Usable GPU indices of `node` that can take the request, best first for `order`.
std::vector<int> Candidates(const PlacementRequest& req, const NodeView& node, Order order) {
  std::vector<int> idx;
  for (int i = 0; i < static_cast<int>(node.gpus.size()); ++i) {
    const GpuView& g = node.gpus[i];
    if (!g.usable || g.free_milli < req.milli_per_gpu) continue;
    if (req.gpu_memory_per_gpu > 0 && g.free_memory < req.gpu_memory_per_gpu) continue;
    idx.push_back(i);
  }
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
    MilliGpu fa = node.gpus[a].free_milli, fb = node.gpus[b].free_milli;
    return order == Order::kLoosest ? fa > fb : fa < fb;
  });
  return idx;
}

class SimplePolicy final : public PlacementPolicy {
 public:
  SimplePolicy(std::string_view name, Order order) : name_(name), order_(order) {}
  std::string_view name() const override { return name_; }

  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext&) const override {
    NodeChoice c;
    if (req.num_gpus <= 0) {
      c.score = 0;
      return c;
    }
    std::vector<int> idx = Candidates(req, node, order_);
    if (static_cast<int>(idx.size()) < req.num_gpus) return std::nullopt;
    idx.resize(req.num_gpus);
    std::sort(idx.begin(), idx.end());
    MilliGpu leftover = 0;  // free share left on the chosen GPUs
    for (int i : idx) leftover += node.gpus[i].free_milli - req.milli_per_gpu;
    MilliGpu node_free = 0, node_total = 0;
    int whole_free_after = 0;
    for (int i = 0; i < static_cast<int>(node.gpus.size()); ++i) {
      const GpuView& g = node.gpus[i];
      if (!g.usable) continue;
      bool chosen = std::find(idx.begin(), idx.end(), i) != idx.end();
      MilliGpu f = g.free_milli - (chosen ? req.milli_per_gpu : 0);
      node_free += f;
      node_total += kOneGpu;
      if (f == kOneGpu) ++whole_free_after;
    }
    switch (order_) {
      case Order::kTightest:
        c.score = -static_cast<double>(leftover) * 1024.0 - whole_free_after;
        break;
      case Order::kMostUsed:
        c.score = static_cast<double>(node_total - node_free) - static_cast<double>(leftover) / 1e4;
        break;
      case Order::kLoosest:
        c.score = static_cast<double>(node_free);
        break;
    }
    c.gpu_indices = std::move(idx);
    return c;
  }

 private:
  std::string_view name_;
  Order order_;
};

}  // namespace

std::vector<PolicyEntry> SimplePolicies() {
  return {
      {"best-fit", [] { return std::unique_ptr<PlacementPolicy>(new SimplePolicy("best-fit", Order::kTightest)); }},
      {"packing", [] { return std::unique_ptr<PlacementPolicy>(new SimplePolicy("packing", Order::kMostUsed)); }},
      {"spread", [] { return std::unique_ptr<PlacementPolicy>(new SimplePolicy("spread", Order::kLoosest)); }},
  };
}

}  // namespace gpuslice::sched
