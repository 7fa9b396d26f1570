// gpuslice's default placement policy: fragmentation gradient descent (FGD) that keeps large
// nodes whole.
//
// Primary: the FGD score — the drop of the node's fragmentation against the expected workload,
// on FGD's coarse integer scale int(sigmoid(drop / 1000) * 100). The coarse scale matters: small
// differences in fragmentation (mostly the share of CPU-only shapes) are noise for what comes
// next, and scoring them finely was measurably worse (docs/evaluation.md).
// Secondary, only among placements FGD scores equal:
//   1. a node already in use beats an empty node (an empty node is the only place a request as
//      large as the node can go, and those are too rare to be among FGD's typical shapes);
//   2. then the node with fewer GPUs (same reason, one size down).
// Remaining ties are left to the framework's tie-break. Nothing here depends on a trace.
// GPU choice within a node: the GPU with the best FGD score, first index on ties (as FGD).

#include <memory>

#include "sched/placement/fgd_frag.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

// Weights of the secondary keys: far below one FGD score step (1), and ordered.
constexpr double kUsedNodeBonus = 0.1;
constexpr double kSmallNodeBonus = 0.01;
constexpr double kMaxGpusPerNode = 64;

class GpusliceFragPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "gpuslice"; }

  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext& ctx) const override {
    std::optional<NodeChoice> choice = FgdChoice(req, node, ctx.workload);
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
