// The FGD paper's baseline policies (as its artifact, hkust-adsl/kubernetes-scheduler-simulator,
// scores them; described in docs/evaluation.md), FGD itself, and gpuslice's default policy.
// Every policy here is stateless and const; scores depend only on the node's state and the
// request (plus ctx.rng for "random"), which lets the simulator cache them per node version.

#include <algorithm>
#include <bit>
#include <memory>

#include "sched/placement/fgd_frag.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

// Normalisers of the artifact: the largest openb node (128 CPUs, 8 GPUs).
constexpr double kMaxSpecCpu = 128000;
constexpr double kMaxSpecGpu = 8000;
constexpr std::int64_t kMaxNodeScore = 100;

// Free CPU and GPU left after the request, as the artifact's resource vectors see them.
struct Leftover {
  double cpu_free;
  double gpu_free;
};
Leftover FreeVector(const NodeView& node) {
  return {static_cast<double>(node.cpu_milli_free), static_cast<double>(FreeMilli(node))};
}
double TotalMilli(const PlacementRequest& req) {
  return static_cast<double>(req.milli_per_gpu) * req.num_gpus;
}

std::optional<NodeChoice> Choice(double score, std::vector<int> gpus, const PlacementRequest& req) {
  if (req.num_gpus > 0 && gpus.empty()) return std::nullopt;
  return NodeChoice{score, std::move(gpus)};
}

// "random": each feasible node gets a random score, so the best is a uniformly random node
// whatever the tie-break; a share goes on a random GPU that fits (artifact: RandomScore, which
// marks one random feasible node, + gpuSel random). Without ctx.rng every node scores 0.
class RandomPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "random"; }
  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext& ctx) const override {
    const double score = ctx.rng != nullptr ? static_cast<double>((*ctx.rng)() >> 11) : 0;
    return Choice(score, RandomFitGpus(req, node, ctx.rng), req);
  }
};

// "dot-product" (Tetris): 1 - <free, request>/2 over (CPU, total GPU) normalised by the largest
// node, as an integer 0..100; best-fit GPU within the node (artifact: dimExt merge, norm max).
class DotProductPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "dot-product"; }
  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext&) const override {
    const Leftover f = FreeVector(node);
    const double dot = (f.cpu_free / kMaxSpecCpu) * (req.cpu_milli / kMaxSpecCpu) +
                       (f.gpu_free / kMaxSpecGpu) * (TotalMilli(req) / kMaxSpecGpu);
    const auto score = static_cast<std::int64_t>(kMaxNodeScore * (1.0 - dot / 2));
    return Choice(static_cast<double>(score), BestFitGpus(req, node), req);
  }
};

// "gpu-clustering": prefer nodes already running pods of the same GPU kind ("share-gpu",
// "1-gpu", "2-gpu", ...), then fuller nodes (artifact's GpuClusteringScore). The kinds come from
// the pods on the node when the caller tracks them (NodeView::gpu_pod_kinds, as the simulator
// does); otherwise they are inferred from GPU states: a partly used GPU means shares, a fully
// used one whole-GPU pods, which cannot tell 1-GPU from 2-GPU pods (see evaluation.md).
class GpuClusteringPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "gpu-clustering"; }
  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext&) const override {
    std::vector<int> gpus = BestFitGpus(req, node);
    if (req.num_gpus <= 0) return NodeChoice{0, {}};
    bool mine = false;
    int kinds = 0;
    if (node.gpu_pod_kinds_known) {
      mine = (node.gpu_pod_kinds & GpuPodKindBit(req.num_gpus, req.milli_per_gpu)) != 0;
      kinds = std::popcount(node.gpu_pod_kinds);
    } else {
      bool has_share = false;
      bool has_whole = false;
      for (const GpuView& g : node.gpus) {
        if (g.free_milli > 0 && g.free_milli < kOneGpu) has_share = true;
        if (g.free_milli == 0) has_whole = true;
      }
      mine = IsShare(req) ? has_share : has_whole;
      kinds = static_cast<int>(has_share) + static_cast<int>(has_whole);
    }
    const std::int64_t fill =
        kMaxNodeScore / 4 * (static_cast<std::int64_t>(kMaxSpecGpu) - FreeMilli(node)) /
        static_cast<std::int64_t>(kMaxSpecGpu);
    std::int64_t band = 0;
    if (mine) {
      band = kinds == 1 ? kMaxNodeScore * 3 / 4 : kMaxNodeScore * 2 / 4;
    } else if (kinds == 0) {
      band = kMaxNodeScore / 4;
    }
    return Choice(static_cast<double>(fill + band), std::move(gpus), req);
  }
};

// "gpu-packing": shares on partly used GPUs first, then free GPUs of used nodes, then empty
// nodes (artifact's GpuPackingScore, integer bands).
class GpuPackingPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "gpu-packing"; }
  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext&) const override {
    std::vector<int> gpus = BestFitGpus(req, node);
    if (req.num_gpus <= 0) return NodeChoice{0, {}};
    if (gpus.empty()) return std::nullopt;
    std::int64_t fully_free = 0;
    for (const GpuView& g : node.gpus) fully_free += g.free_milli == kOneGpu ? 1 : 0;
    std::int64_t score = 0;
    if (fully_free == static_cast<std::int64_t>(node.gpus.size())) {
      score = std::max(kMaxNodeScore / 3 - fully_free, fully_free);
    } else {
      // The artifact takes the least-free sufficient GPUs (stable order), which is what
      // BestFitGpus chose.
      std::int64_t fully_free_used = 0;
      std::int64_t free_pct = 0;
      for (int i : gpus) {
        fully_free_used += node.gpus[i].free_milli == kOneGpu ? 1 : 0;
        free_pct += node.gpus[i].free_milli * 100 / kOneGpu;
      }
      if (fully_free_used > 0) {
        score = std::max(kMaxNodeScore / 2 - fully_free_used, kMaxNodeScore / 3);
      } else {
        score = std::max(kMaxNodeScore - free_pct / 10, kMaxNodeScore / 2);
      }
    }
    return NodeChoice{static_cast<double>(score), std::move(gpus)};
  }
};

// "best-fit-fgd": the paper's BestFit — least weighted free CPU and GPU left after placing.
class BestFitFgdPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "best-fit-fgd"; }
  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext&) const override {
    const Leftover f = FreeVector(node);
    const double left = (f.cpu_free - req.cpu_milli) / kMaxSpecCpu * 0.5 +
                        (f.gpu_free - TotalMilli(req)) / kMaxSpecGpu * 0.5;
    const auto score = static_cast<std::int64_t>((1.0 - left) * kMaxNodeScore);
    return Choice(static_cast<double>(score), BestFitGpus(req, node), req);
  }
};

// "fgd": place where the node's fragmentation grows least. As in the artifact, the growth is
// scored as int(sigmoid(drop / 1000) * 100): ties (frequent) go to the framework's tie-break,
// and a share takes the first GPU with the best such score. Where the caller prepares (the
// simulator), the shapes' weights are computed once per context and the node's evaluation once
// per node state, as for gpuslice's policy, so that a same-run comparison of the two costs
// measures the policies and not how much of them is kept.
class FgdPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "fgd"; }
  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext& ctx) const override {
    return FgdChoice(req, node, ctx.workload);
  }
  std::unique_ptr<WorkloadPrep> PrepareWorkload(const PlacementContext& ctx) const override {
    return std::make_unique<Weights>(ctx);
  }
  std::unique_ptr<NodePrep> Prepare(const NodeView& node, const PlacementContext& /*ctx*/,
                                    const WorkloadPrep* workload) const override {
    // `workload` comes from PrepareWorkload() above (placement.h); without it Score() stands.
    if (workload == nullptr) return nullptr;
    return std::make_unique<NodeEval>(node, static_cast<const Weights*>(workload)->table);
  }
  std::optional<NodeChoice> ScorePrepared(const PlacementRequest& req, const NodeView& node,
                                          const PlacementContext& ctx, const NodePrep* prep) const override {
    // `prep` comes from Prepare() above.
    if (prep == nullptr) return Score(req, node, ctx);
    const FragmentationEval& eval = static_cast<const NodeEval*>(prep)->eval;
    eval.Prefetch();
    return FgdChoice(req, node, eval);
  }

 private:
  struct Weights final : WorkloadPrep {
    explicit Weights(const PlacementContext& ctx) : table(ctx.workload, ShapeWeights::kFrequency) {}
    const ShapeTable table;
  };
  struct NodeEval final : NodePrep {
    NodeEval(const NodeView& node, const ShapeTable& table) : eval(node, table) {}
    const FragmentationEval eval;
  };
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeGpusliceFragPolicy();  // fgd_gpuslice.cc

std::vector<PolicyEntry> FgdPolicies() {
  return {
      {"random", [] { return std::unique_ptr<PlacementPolicy>(new RandomPolicy); }},
      {"dot-product", [] { return std::unique_ptr<PlacementPolicy>(new DotProductPolicy); }},
      {"gpu-clustering", [] { return std::unique_ptr<PlacementPolicy>(new GpuClusteringPolicy); }},
      {"gpu-packing", [] { return std::unique_ptr<PlacementPolicy>(new GpuPackingPolicy); }},
      {"best-fit-fgd", [] { return std::unique_ptr<PlacementPolicy>(new BestFitFgdPolicy); }},
      {"fgd", [] { return std::unique_ptr<PlacementPolicy>(new FgdPolicy); }},
      {"gpuslice", &MakeGpusliceFragPolicy},
  };
}

}  // namespace gpuslice::sched
