// gpuslice's default placement policy: fragmentation gradient descent (FGD) that keeps large
// nodes whole and fills GPUs more tightly.
//
// Primary: the FGD score — the drop of the node's fragmentation against the expected workload,
// on FGD's coarse integer scale int(sigmoid(drop / 1000) * 100). The coarse scale matters: small
// differences in fragmentation (mostly the share of CPU-only shapes) are noise for what comes
// next, and ranking nodes by them was measurably worse (docs/evaluation.md). Unlike the paper's
// measure, a typical shape counts as unable to use the node when the node lacks its host memory
// (its median), as when it lacks its CPU: GPUs stranded behind exhausted memory are fragment too.
// Within a node, a share goes on the GPU with the best FGD score; among equals, on the one whose
// exact fragmentation grows least, then the least free one (best fit) — FGD takes the first index.
// Across nodes, only among placements FGD scores equal:
//   1. a node already in use beats an empty node (an empty node is the only place a request as
//      large as the node can go, and those are too rare to be among FGD's typical shapes);
//   2. then the node with fewer GPUs (same reason, one size down).
// Remaining ties are left to the framework's tie-break. Nothing here depends on a trace.

#include <memory>

#include "sched/placement/fgd_frag.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

// Weights of the secondary keys: far below one FGD score step (1), and ordered.
constexpr double kUsedNodeBonus = 0.1;
constexpr double kSmallNodeBonus = 0.01;
constexpr double kMaxGpusPerNode = 64;

// Equal drops computed in different orders may differ in the last bits.
constexpr double kDropEpsilon = 1e-9;

// A share's GPU: best FGD score, then the smallest exact fragmentation growth, then best fit.
std::optional<NodeChoice> ShareChoice(const PlacementRequest& req, const NodeView& node,
                                      std::span<const WorkloadShape> shapes) {
  const FragmentationEval eval(node, shapes, Resources::kCpuAndMemory);
  const double before = eval.before();
  int best = -1;
  double best_score = 0;
  double best_drop = 0;
  MilliGpu best_free = 0;
  // A GPU's drop depends only on its free share: a GPU with the free share of the last one
  // evaluated (GPUs of equal share are often adjacent) reuses its drop and score, bit for bit.
  MilliGpu last_free = -1;
  double drop = 0;
  double score = 0;
  for (int i = 0; i < static_cast<int>(node.gpus.size()); ++i) {
    const GpuView& g = node.gpus[i];
    if (!g.usable || g.free_milli < req.milli_per_gpu) continue;
    if (g.free_milli != last_free) {
      drop = before - eval.AfterOne(req.cpu_milli, i, req.milli_per_gpu, req.host_memory);
      score = FgdQuantisedScore(drop);
      last_free = g.free_milli;
    }
    bool better = best < 0 || score > best_score;
    if (!better && score == best_score) {
      better = drop > best_drop + kDropEpsilon ||
               (drop > best_drop - kDropEpsilon && g.free_milli < best_free);
    }
    if (better) {
      best = i;
      best_score = score;
      best_drop = drop;
      best_free = g.free_milli;
    }
  }
  // The choice is built once (one allocation), not for every better GPU on the way.
  if (best < 0) return std::nullopt;
  return NodeChoice{best_score, {best}};
}

class GpusliceFragPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "gpuslice"; }
  // Fragmentation, FreeMilli and node size are sums over the GPUs; a share's GPU is the best by
  // (score, drop, least free), first index among equal free shares; whole GPUs are the first
  // free ones. So it qualifies (see placement.h).
  bool ScoresByNodeState() const override { return true; }

  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext& ctx) const override {
    std::optional<NodeChoice> choice = IsShare(req) ? ShareChoice(req, node, ctx.workload)
                                                    : FgdChoice(req, node, ctx.workload, Resources::kCpuAndMemory);
    if (!choice) return std::nullopt;
    const bool empty = FreeMilli(node) == static_cast<MilliGpu>(node.gpus.size()) * kOneGpu;
    choice->score += (empty ? 0 : kUsedNodeBonus) +
                     kSmallNodeBonus * (1 - static_cast<double>(node.gpus.size()) / kMaxGpusPerNode);
    return choice;
  }
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeGpusliceFragPolicy() {
  return std::make_unique<GpusliceFragPolicy>();
}

}  // namespace gpuslice::sched
