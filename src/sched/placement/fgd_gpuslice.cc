// gpuslice's default placement policy: fragmentation gradient descent (FGD) that weighs the
// workload's shapes by how few nodes can take them, also by the GPU they bring, counts the GPUs a
// node's CPU and memory cannot feed, keeps large nodes whole and fills GPUs tightly. It is
// placement only: it refuses no request on a node where it fits (admission rules, such as keeping
// a node's CPU for its free GPUs, are separate options: admission.h).
//
// Every measure below weighs the typical shapes by supply (fgd_frag.h, ShapeWeights::kSupply):
// a shape's frequency divided by the share of the cluster's GPUs on nodes that could take one of
// its pods, normalised. FGD's frequency alone treats a node that only one kind of node can
// replace (the only model a constrained shape allows; the only size with the CPU and memory of a
// large pod) like any other, and those pods then fail while the cluster is half empty. The
// supply shares come from the cluster's capacity (the caller sets them, see SetSupplyShares());
// where they are not set (1) the weights are FGD's frequencies.
//
// A share is scored against more shapes than the typical ones where the caller knows them
// (PlacementContext::demand_workload): FGD's typical shapes are the most frequent 95% of the
// pods, and a shape a few pods in a hundred ask can be a tenth of the GPU asked (eight whole
// GPUs); shares spread over the empty nodes such pods need, and they fail while the cluster is
// a tenth idle. So a share's FGD score (below) counts the shapes that cover 95% of the GPU asked
// too; its second key, and every key of whole-GPU and CPU-only pods, the typical shapes only
// (with the rare large shapes there, CPU-bound workloads lost most of their margin over FGD:
// docs/evaluation.md, the demand-shape round).
//
// Primary: the FGD score — the drop of the node's fragmentation against the expected workload,
// on FGD's coarse integer scale int(sigmoid(drop / 1000) * 100). The coarse scale matters: small
// differences in fragmentation (mostly the share of CPU-only shapes) are noise for what comes
// next, and ranking nodes by them was measurably worse (docs/evaluation.md). Unlike the paper's
// measure, a typical shape counts as unable to use the node when the node lacks its host memory
// (its median), as when it lacks its CPU: GPUs stranded behind exhausted memory are fragment too.
// Then, among placements FGD scores equal:
//   1. the exact drop, in milli-GPU, of the sum of four more measures of the node (fgd_frag.h):
//      - the *demand-weighted* fragmentation: FGD's with each shape weighted by the GPU its pods
//        bring (frequency x GPUs x share) instead of by their count. FGD's weights make an
//        8-GPU shape, a few pods in a hundred but a large part of the GPU asked, nearly
//        invisible; this one keeps the nodes such shapes need, and CPU-only shapes weigh 0;
//      - the *stranded* fragmentation: besides FGD's fragment, the part of a node's free GPU
//        that its CPU and memory cannot feed pod by pod. FGD only sees stranding when the last
//        pod no longer fits; this keeps CPU and memory beside free GPUs before that, which is
//        where CPU-heavy workloads lose GPUs. It counts only where CPU runs out no later than
//        GPU (RegimeOf(), below); where GPU runs out first FGD's drop stands in its place;
//      - the *pooled stranded* fragmentation: the same, with the CPU and memory that the
//        workload's mix needs to fill the node's free GPU: each shape alone (the measure
//        above) claims all of the node's CPU, in whole pods, for as many pods as the free GPU
//        holds of it, so a share small enough for the holes beside larger shares keeps CPU
//        beside them for pods that mostly do not come, and shapes that each fit do not see
//        that together they do not; the pooled measure sees both, but not that CPU below one
//        pod feeds none, which the one above sees. With it, judged on traces drawn after it
//        was written, every family of workload gained (docs/evaluation.md, issue 35's fourth
//        round); where no shape asks CPU or memory (the daemon) it is left out, as it could
//        only count FGD's drop again;
//      - the *CPU* fragmentation, where CPU runs out no later than GPU (as the stranded
//        measure): FGD's measure turned to the host's CPU, the free CPU each shape's pods cannot
//        use (beside GPUs they cannot take, or below one pod), counted as the GPU it would have
//        come with at the workload's mix (the typical shapes' GPU per CPU). Where CPU runs out
//        first, CPU no pod can use is GPU that pods elsewhere cannot get; the three measures
//        above see CPU only beside free GPUs, and not where a CPU-only pod's CPU goes. Judged
//        on traces drawn after it was written, the mixed workloads gained most and fewer traces
//        were behind FGD; traces that vary only the CPU-only share moved both ways
//        (docs/evaluation.md, issue 35's seventh round).
//      All four are in milli-GPU of expected loss, so they add without a weight;
//   2. a node already in use beats an empty node (an empty node is the only place a request as
//      large as the node can go);
//   3. then the node with fewer GPUs (same reason, one size down).
// Within a node, a share goes on the GPU with the best score; among equals, on the one whose
// exact FGD fragmentation grows least, then the least free one (best fit) — FGD takes the first
// index. Remaining ties are left to the framework's tie-break. Nothing here depends on a trace.
// Where no shape asks CPU or memory (the daemon) the stranded measure is FGD's and the pooled
// and CPU ones are not counted, so the daemon's decisions are what they were without them.

#include <array>
#include <vector>
#include <cmath>
#include <memory>
#include <numbers>
#include <optional>

#include "sched/placement/fgd_frag.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

// The keys in one score (higher wins): FGD's integer score, plus the secondary drop mapped into
// (0, kSecondaryScale) by a monotone squash (so it never outweighs one FGD step), plus bonuses
// for a used and a small node worth 0.014 milli-GPU of secondary drop near 0 and 1.4 at a drop
// of 10 GPUs: in effect they break ties.
constexpr double kSecondaryScale = 0.9;
constexpr double kSecondaryUnit = 1000;  // milli-GPU: the squash is steepest within a GPU of 0
constexpr double kUsedNodeBonus = 4e-6;
constexpr double kSmallNodeBonus = 1e-6;
constexpr double kMaxGpusPerNode = 64;

// Equal drops computed in different orders may differ in the last bits.
constexpr double kDropEpsilon = 1e-9;

// The measures of a node after a placement (AfterAll()): FGD's, the demand-weighted, the
// stranded, the pooled stranded and the CPU one, and `with_wide` FGD's against the demand
// shapes (eval's wide workload; it must have one).
struct After {
  double frag = 0;
  double demand = 0;
  double stranded = 0;
  double pooled = 0;
  double wide = 0;
  double cpu = 0;
};
After Measure(const FragmentationEval& eval, const PlacementRequest& req, std::span<const int> gpus,
              bool with_wide = false) {
  After a;
  a.frag = eval.AfterAll(req.cpu_milli, gpus, req.milli_per_gpu, req.host_memory, &a.demand,
                         eval.strands() ? &a.stranded : nullptr, eval.pools() ? &a.pooled : nullptr,
                         with_wide ? &a.wide : nullptr, eval.cpu_counts() ? &a.cpu : nullptr);
  return a;
}

// Which CPU measures count in the secondary key, from the workload alone.
struct Regime {
  // The stranded measure counts where the workload asks at least as much host CPU per milli-GPU
  // as the cluster has (CPU runs out no later than GPU), and where either is not known. Where
  // GPU runs out first it costs more than it keeps (docs/evaluation.md, issue 35's fifth round):
  // it sees each shape claim all of a node's CPU, and the pooled measure already keeps the CPU
  // the mix needs beside free GPUs.
  bool stranding = true;
  // Where stranding counts and the workload asks CPU and GPU: the milli-GPU its pods bring per
  // milli-CPU they ask (the typical shapes, by frequency), at which the CPU measure's milli-CPU
  // count as milli-GPU: the GPU that CPU no pod can use would have come with, at the
  // workload's mix. 0 elsewhere: the CPU measure does not count (where GPU runs out first, CPU
  // left over costs no GPU; the daemon's shapes ask no CPU).
  double gpu_per_cpu = 0;
};
Regime RegimeOf(const PlacementContext& ctx) {
  double cpu = 0, gpu = 0;
  for (const WorkloadShape& s : ctx.workload) {
    cpu += s.frequency * static_cast<double>(s.cpu_milli);
    gpu += s.frequency * static_cast<double>(s.num_gpus) * static_cast<double>(s.milli_per_gpu);
  }
  Regime r;
  r.stranding = ctx.cpu_per_gpu_milli <= 0 || gpu <= 0 || cpu / gpu >= ctx.cpu_per_gpu_milli;
  if (r.stranding && cpu > 0 && gpu > 0) r.gpu_per_cpu = gpu / cpu;
  return r;
}

// The measures each node evaluation counts: every one, the CPU measure where the regime counts it.
ExtraMeasures TypicalMeasures(const Regime& regime) {
  return {.stranded = true, .demand = true, .pooled = true, .cpu = regime.gpu_per_cpu > 0};
}

// FGD's quantised score `q` of the primary drop `drop`, plus the secondary key: the drop of the
// demand-weighted, the stranded (where the regime says so; else FGD's again), the pooled stranded
// and (where counted) the CPU fragmentation of `eval`, in milli-GPU, from the measures `after`
// the placement.
double Combine(const FragmentationEval& eval, double q, double drop, const After& after, const Regime& regime) {
  const double stranded_drop = regime.stranding && eval.strands() ? eval.before_stranded() - after.stranded : drop;
  // Where the pooled measure cannot differ from FGD's (no shape asks CPU or memory: the daemon)
  // it is left out rather than counting FGD's drop a second time.
  const double pooled_drop = eval.pools() ? eval.before_pooled() - after.pooled : 0;
  const double cpu_drop = eval.cpu_counts() ? regime.gpu_per_cpu * (eval.before_cpu() - after.cpu) : 0;
  const double secondary = (eval.before_demand() - after.demand) + stranded_drop + pooled_drop + cpu_drop;
  return q + kSecondaryScale * (0.5 + std::atan(secondary / kSecondaryUnit) / std::numbers::pi);
}

// The shapes' weights of every evaluation below, once per context (PrepareWorkload()): the
// typical shapes', and the demand shapes' as a wider workload of them (a share's first key):
// the demand shapes where they start with the typical ones (sim fgd's: the typical shapes and
// the rarer ones that bring the GPU asked), else the typical shapes weighing nothing in it
// followed by the demand shapes (the same sums, with zeros added first).
struct WorkloadTables final : WorkloadPrep {
  explicit WorkloadTables(const PlacementContext& ctx)
      : typical(ctx.workload, ShapeWeights::kSupply),
        demand(ctx.demand_workload, ShapeWeights::kSupply),
        regime(RegimeOf(ctx)) {
    if (ctx.demand_workload.empty()) return;
    if (Extends(ctx.demand_workload, ctx.workload)) {
      wide_shapes = ctx.demand_workload;
    } else {
      own_shapes.assign(ctx.workload.begin(), ctx.workload.end());
      own_shapes.insert(own_shapes.end(), ctx.demand_workload.begin(), ctx.demand_workload.end());
      wide_shapes = own_shapes;
      wide_weights.assign(ctx.workload.size(), 0.0);
    }
    for (std::size_t i = 0; i < ctx.demand_workload.size(); ++i) wide_weights.push_back(demand.weights()[2 * i]);
  }
  WorkloadTables(const WorkloadTables&) = delete;  // wide_shapes may point into own_shapes
  WorkloadTables& operator=(const WorkloadTables&) = delete;
  WideWorkload wide() const { return {wide_shapes, wide_weights}; }
  const ShapeTable typical;
  const ShapeTable demand;
  const Regime regime;  // RegimeOf()
  std::vector<WorkloadShape> own_shapes;  // where the demand shapes do not start with the typical ones
  std::span<const WorkloadShape> wide_shapes;
  std::vector<double> wide_weights;
};

constexpr Resources kResources = Resources::kCpuAndMemory;

// The evaluation of one node against the typical shapes (every measure) and, where the
// context has demand shapes, FGD's measure against them for a share's first key. With
// `tables` (of the same ctx; they must outlive this) it shares their weights; without, it
// keeps its own where ctx has demand shapes.
class NodeEvals final : public NodePrep {
 public:
  NodeEvals(const NodeView& node, const PlacementContext& ctx, const WorkloadTables* tables)
      : own_tables_(tables == nullptr && !ctx.demand_workload.empty() ? std::make_unique<WorkloadTables>(ctx)
                                                                       : nullptr),
        regime(tables != nullptr ? tables->regime : own_tables_ != nullptr ? own_tables_->regime : RegimeOf(ctx)),
        eval(Evaluate(node, ctx, tables != nullptr ? tables : own_tables_.get(), regime)) {}

 private:
  static FragmentationEval Evaluate(const NodeView& node, const PlacementContext& ctx, const WorkloadTables* tables,
                                    const Regime& regime) {
    if (tables != nullptr) return FragmentationEval(node, tables->typical, kResources, TypicalMeasures(regime), tables->wide());
    return FragmentationEval(node, ctx.workload, kResources, TypicalMeasures(regime), ShapeWeights::kSupply);
  }
  const std::unique_ptr<const WorkloadTables> own_tables_;

 public:
  const Regime regime;  // RegimeOf()
  const FragmentationEval eval;
};

// A share's GPU: the best score (FGD's, against the demand shapes where there are some, then
// the secondary drop), then the smallest exact FGD fragmentation growth, then best fit. The
// secondary key adds less than one FGD step (kSecondaryScale < 1): where the first key takes a
// pass of its own (no demand shapes) the secondary is evaluated only for the GPUs of the best
// FGD score (the others cannot win); against demand shapes one pass gives both.
std::optional<NodeChoice> ShareChoice(const PlacementRequest& req, const NodeView& node, const NodeEvals& evals) {
  const FragmentationEval& eval = evals.eval;
  // A GPU's scores depend only on its free share: one entry per distinct free share, in order
  // of first appearance (at most one per GPU).
  struct Share {
    MilliGpu free;
    int first_gpu;
    double drop;    // FGD's drop (primary)
    double q;       // its quantised score
    double score;   // with the secondary key, where `scored`
    bool scored;
  };
  constexpr std::size_t kInline = 16;
  std::array<Share, kInline> inline_shares;
  std::vector<Share> heap_shares;
  Share* shares = inline_shares.data();
  if (node.gpus.size() > kInline) {
    heap_shares.resize(node.gpus.size());
    shares = heap_shares.data();
  }
  std::size_t n = 0;
  double best_q = 0;
  for (int i = 0; i < static_cast<int>(node.gpus.size()); ++i) {
    const GpuView& g = node.gpus[i];
    if (!g.usable || g.free_milli < req.milli_per_gpu) continue;
    std::size_t k = 0;
    while (k < n && shares[k].free != g.free_milli) ++k;
    if (k < n) continue;
    const int one[1] = {i};
    Share sh{g.free_milli, i, 0, 0, 0, false};
    if (eval.wide()) {
      // Against the demand shapes, from the pass that gives the secondary key too.
      const After after = Measure(eval, req, one, /*with_wide=*/true);
      sh.drop = eval.before_wide() - after.wide;
      sh.q = FgdQuantisedScore(sh.drop);
      sh.score = Combine(eval, sh.q, sh.drop, after, evals.regime);
      sh.scored = true;
    } else {
      sh.drop = eval.before() - eval.After(req.cpu_milli, one, req.milli_per_gpu, req.host_memory);
      sh.q = FgdQuantisedScore(sh.drop);
    }
    shares[n++] = sh;
    if (n == 1 || sh.q > best_q) best_q = sh.q;
  }
  if (n == 0) return std::nullopt;
  for (std::size_t k = 0; k < n; ++k) {
    Share& sh = shares[k];
    if (sh.q != best_q || sh.scored) continue;
    const int one[1] = {sh.first_gpu};
    sh.score = Combine(eval, sh.q, sh.drop, Measure(eval, req, one), evals.regime);
  }
  int best = -1;
  double best_score = 0;
  double best_drop = 0;
  MilliGpu best_free = 0;
  for (int i = 0; i < static_cast<int>(node.gpus.size()); ++i) {
    const GpuView& g = node.gpus[i];
    if (!g.usable || g.free_milli < req.milli_per_gpu) continue;
    std::size_t k = 0;
    while (shares[k].free != g.free_milli) ++k;
    if (shares[k].q != best_q) continue;
    const double score = shares[k].score;
    const double drop = shares[k].drop;
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
  return NodeChoice{best_score, {best}};
}

// Whole GPUs (the first free ones, as FGD) or CPU-only work.
std::optional<NodeChoice> WholeChoice(const PlacementRequest& req, const NodeView& node, const NodeEvals& evals) {
  std::vector<int> gpus = BestFitGpus(req, node);
  if (req.num_gpus > 0 && gpus.empty()) return std::nullopt;
  const FragmentationEval& eval = evals.eval;
  const After after = Measure(eval, req, gpus);
  const double drop = eval.before() - after.frag;
  return NodeChoice{Combine(eval, FgdQuantisedScore(drop), drop, after, evals.regime), std::move(gpus)};
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
    const NodeEvals evals(node, ctx, nullptr);
    return Choose(req, node, evals);
  }
  std::unique_ptr<WorkloadPrep> PrepareWorkload(const PlacementContext& ctx) const override {
    return std::make_unique<WorkloadTables>(ctx);
  }
  std::unique_ptr<NodePrep> Prepare(const NodeView& node, const PlacementContext& ctx,
                                    const WorkloadPrep* workload) const override {
    // `workload` comes from PrepareWorkload() above (placement.h).
    return std::make_unique<NodeEvals>(node, ctx, static_cast<const WorkloadTables*>(workload));
  }
  std::optional<NodeChoice> ScorePrepared(const PlacementRequest& req, const NodeView& node,
                                          const PlacementContext& ctx, const NodePrep* prep) const override {
    // `prep` comes from Prepare() above (placement.h).
    if (prep == nullptr) return Score(req, node, ctx);
    const NodeEvals& evals = *static_cast<const NodeEvals*>(prep);
    evals.eval.Prefetch();
    return Choose(req, node, evals);
  }

 private:
  static std::optional<NodeChoice> Choose(const PlacementRequest& req, const NodeView& node,
                                          const NodeEvals& evals) {
    std::optional<NodeChoice> choice = IsShare(req) ? ShareChoice(req, node, evals) : WholeChoice(req, node, evals);
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
