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
  std::optional<Placement> best;
  double best_score = 0;
  std::uint64_t ties = 0;  // reservoir sampling among equal scores when an RNG is given
  for (const NodeView& node : nodes) {
    if (!Fits(req, node)) continue;
    std::optional<NodeChoice> choice = policy.Score(req, node, ctx);
    if (!choice) continue;
    bool take = false;
    if (!best || choice->score > best_score) {
      take = true;
      ties = 1;
    } else if (choice->score == best_score) {
      ++ties;
      if (ctx.rng != nullptr) {
        take = std::uniform_int_distribution<std::uint64_t>(0, ties - 1)(*ctx.rng) == 0;
      } else {
        take = node.index < best->node_index;
      }
    }
    if (take) {
      best_score = choice->score;
      best = Placement{node.index, std::move(choice->gpu_indices)};
    }
  }
  return best;
}

}  // namespace gpuslice::sched
