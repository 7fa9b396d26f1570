// gpuslice's default placement policy: fragmentation gradient descent (FGD) that also counts
// the GPUs a node's CPU and memory cannot feed, keeps large nodes whole and fills GPUs tightly.
//
// Primary: the FGD score — the drop of the node's fragmentation against the expected workload,
// on FGD's coarse integer scale int(sigmoid(drop / 1000) * 100). The coarse scale matters: small
// differences in fragmentation (mostly the share of CPU-only shapes) are noise for what comes
// next, and ranking nodes by them was measurably worse (docs/evaluation.md). Unlike the paper's
// measure, a typical shape counts as unable to use the node when the node lacks its host memory
// (its median), as when it lacks its CPU: GPUs stranded behind exhausted memory are fragment too.
// Then, among placements FGD scores equal:
//   1. the drop of the *stranded* fragmentation (fgd_frag.h: besides FGD's fragment, the part of
//      a node's free GPU that its CPU and memory cannot feed pod by pod), on the same scale.
//      FGD only sees stranding when the last pod no longer fits; this key keeps CPU and memory
//      beside free GPUs before that, which is where CPU-heavy workloads lose GPUs;
//   2. a node already in use beats an empty node (an empty node is the only place a request as
//      large as the node can go, and those are too rare to be among FGD's typical shapes);
//   3. then the node with fewer GPUs (same reason, one size down).
// Within a node, a share goes on the GPU with the best (FGD score, stranded score); among
// equals, on the one whose exact fragmentation grows least, then the least free one (best fit)
// — FGD takes the first index. Remaining ties are left to the framework's tie-break. Nothing
// here depends on a trace. Where no shape asks CPU or memory (the daemon) the stranded score is
// the FGD score, so the keys order nodes as before it existed.

#include <memory>

#include "sched/placement/fgd_frag.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

// Weights of the secondary keys, each below one step of the key before it (lexicographic): the
// stranded score (integer 0..100) x 0.009 < 1 FGD step; the used-node bonus 0.004 < one
// stranded step (0.009); the small-node bonus at most 0.001 < the used-node bonus.
constexpr double kStrandedWeight = 0.009;
constexpr double kUsedNodeBonus = 0.004;
constexpr double kSmallNodeBonus = 0.001;
constexpr double kMaxGpusPerNode = 64;

// Equal drops computed in different orders may differ in the last bits.
constexpr double kDropEpsilon = 1e-9;

// FGD's score plus the stranded score's key, of the placement `after` / `after_stranded` give.
template <typename After, typename AfterStranded>
double Scores(const FragmentationEval& eval, After after, AfterStranded after_stranded, double* drop) {
  *drop = eval.before() - after();
  const double fgd = FgdQuantisedScore(*drop);
  const double stranded = eval.strands() ? FgdQuantisedScore(eval.before_stranded() - after_stranded()) : fgd;
  return fgd + kStrandedWeight * stranded;
}

// A share's GPU: best (FGD score, stranded score), then the smallest exact fragmentation growth,
// then best fit.
std::optional<NodeChoice> ShareChoice(const PlacementRequest& req, const NodeView& node,
                                      std::span<const WorkloadShape> shapes) {
  const FragmentationEval eval(node, shapes, Resources::kCpuAndMemory, true);
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
      score = Scores(
          eval, [&] { return eval.AfterOne(req.cpu_milli, i, req.milli_per_gpu, req.host_memory); },
          [&] { return eval.AfterStrandedOne(req.cpu_milli, i, req.milli_per_gpu, req.host_memory); }, &drop);
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

// Whole GPUs (the first free ones, as FGD) or CPU-only work.
std::optional<NodeChoice> WholeChoice(const PlacementRequest& req, const NodeView& node,
                                      std::span<const WorkloadShape> shapes) {
  std::vector<int> gpus = BestFitGpus(req, node);
  if (req.num_gpus > 0 && gpus.empty()) return std::nullopt;
  const FragmentationEval eval(node, shapes, Resources::kCpuAndMemory, true);
  double drop = 0;
  const double score = Scores(
      eval, [&] { return eval.After(req.cpu_milli, gpus, req.milli_per_gpu, req.host_memory); },
      [&] { return eval.AfterStranded(req.cpu_milli, gpus, req.milli_per_gpu, req.host_memory); }, &drop);
  return NodeChoice{score, std::move(gpus)};
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
    std::optional<NodeChoice> choice = IsShare(req) ? ShareChoice(req, node, ctx.workload) : WholeChoice(req, node, ctx.workload);
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
