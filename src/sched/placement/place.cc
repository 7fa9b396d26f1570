// The framework half of placement.h: the shared Filter (Fits) and the select step (Place).
#include <algorithm>

#include "sched/placement/placement.h"

namespace gpuslice::sched {

bool Fits(const PlacementRequest& req, const NodeView& node) {
  if (req.cpu_milli > node.cpu_milli_free) return false;
  if (req.host_memory > node.memory_free) return false;
  if (!req.allowed_models.empty() &&
      std::find(req.allowed_models.begin(), req.allowed_models.end(), node.model) ==
          req.allowed_models.end()) {
    return false;
  }
  if (req.num_gpus <= 0) return true;
  int fitting = 0;
  for (const GpuView& g : node.gpus) {
    if (!g.usable || g.free_milli < req.milli_per_gpu) continue;
    if (req.gpu_memory_per_gpu > 0 && g.free_memory < req.gpu_memory_per_gpu) continue;
    if (++fitting >= req.num_gpus) return true;
  }
  return false;
}

std::optional<Placement> Place(const PlacementPolicy& policy, const PlacementRequest& req,
                               std::span<const NodeView> nodes, const PlacementContext& ctx) {
  // The nodes of the best score so far, in scan order, with their choices. With an RNG, one
  // draw over them once the scan is over picks one, each equally likely (not a draw for every
  // tie on the way: the by-state path, which must make the same draws, would then pay one per
  // tied host); without one, the lowest node index.
  std::vector<Placement> tied;
  double best_score = 0;
  for (const NodeView& node : nodes) {
    if (!Fits(req, node)) continue;
    std::optional<NodeChoice> choice = policy.Score(req, node, ctx);
    if (!choice) continue;
    if (tied.empty() || choice->score > best_score) {
      tied.clear();
      best_score = choice->score;
    } else if (choice->score != best_score) {
      continue;
    }
    tied.push_back(Placement{node.index, std::move(choice->gpu_indices)});
  }
  if (tied.empty()) return std::nullopt;
  std::size_t k = 0;
  if (tied.size() > 1) {
    if (ctx.rng != nullptr) {
      k = static_cast<std::size_t>(std::uniform_int_distribution<std::uint64_t>(0, tied.size() - 1)(*ctx.rng));
    } else {
      k = static_cast<std::size_t>(std::min_element(tied.begin(), tied.end(), [](const auto& a, const auto& b) {
                                     return a.node_index < b.node_index;
                                   }) - tied.begin());
    }
  }
  return std::move(tied[k]);
}

}  // namespace gpuslice::sched
