#include "sched/placement/fgd_frag.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace gpuslice::sched {

bool ModelAllowed(std::span<const std::string> allowed, std::string_view model) {
  if (allowed.empty()) return true;
  for (const std::string& m : allowed) {
    if (m == model) return true;
  }
  return false;
}

MilliGpu FreeMilli(const NodeView& node) {
  MilliGpu total = 0;
  for (const GpuView& g : node.gpus) {
    if (g.usable) total += g.free_milli;
  }
  return total;
}

double NodeFragmentation(const NodeView& node, std::span<const WorkloadShape> shapes) {
  const MilliGpu free_total = FreeMilli(node);
  if (free_total == 0) return 0;
  double frag = 0;
  for (const WorkloadShape& s : shapes) {
    bool fits = s.milli_per_gpu > 0 && node.cpu_milli_free >= s.cpu_milli &&
                ModelAllowed(s.allowed_models, node.model);
    MilliGpu below = 0;
    if (fits) {
      int enough = 0;
      for (const GpuView& g : node.gpus) {
        if (!g.usable) continue;
        if (g.free_milli >= s.milli_per_gpu) {
          ++enough;
        } else {
          below += g.free_milli;
        }
      }
      fits = enough >= s.num_gpus;
    }
    frag += s.frequency * static_cast<double>(fits ? below : free_total);
  }
  return frag;
}

namespace {
bool GpuMemoryFits(const PlacementRequest& req, const GpuView& g) {
  return req.gpu_memory_per_gpu == 0 || g.free_memory == 0 || g.free_memory >= req.gpu_memory_per_gpu;
}

std::vector<int> FirstFreeWhole(const PlacementRequest& req, const NodeView& node) {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(node.gpus.size()) && static_cast<int>(out.size()) < req.num_gpus; ++i) {
    const GpuView& g = node.gpus[i];
    if (g.usable && g.free_milli >= kOneGpu && GpuMemoryFits(req, g)) {
      out.push_back(i);
    }
  }
  if (static_cast<int>(out.size()) < req.num_gpus) out.clear();
  return out;
}

bool ShareFits(const PlacementRequest& req, const GpuView& g) {
  return g.usable && g.free_milli >= req.milli_per_gpu && GpuMemoryFits(req, g);
}
}  // namespace

std::vector<int> BestFitGpus(const PlacementRequest& req, const NodeView& node) {
  if (req.num_gpus <= 0) return {};
  if (!IsShare(req)) return FirstFreeWhole(req, node);
  int best = -1;
  for (int i = 0; i < static_cast<int>(node.gpus.size()); ++i) {
    if (!ShareFits(req, node.gpus[i])) continue;
    if (best < 0 || node.gpus[i].free_milli < node.gpus[best].free_milli) best = i;
  }
  if (best < 0) return {};
  return {best};
}

std::vector<int> RandomFitGpus(const PlacementRequest& req, const NodeView& node,
                               std::mt19937_64* rng) {
  if (req.num_gpus <= 0) return {};
  if (!IsShare(req)) return FirstFreeWhole(req, node);
  int chosen = -1;
  std::uint64_t seen = 0;
  for (int i = 0; i < static_cast<int>(node.gpus.size()); ++i) {
    if (!ShareFits(req, node.gpus[i])) continue;
    ++seen;
    // Reservoir sampling: the i-th fitting GPU replaces the choice with probability 1/seen.
    if (chosen < 0 || (rng != nullptr && UniformIndex(*rng, seen) == 0)) chosen = i;
  }
  if (chosen < 0) return {};
  return {chosen};
}

namespace {
// A node view with a request applied on chosen GPUs, without heap allocation for up to 16 GPUs.
class NodeAfter {
 public:
  NodeAfter(const NodeView& node, std::int64_t cpu, std::span<const int> gpus, MilliGpu milli) : view_(node) {
    const std::size_t n = node.gpus.size();
    GpuView* buf = small_.data();
    if (n > small_.size()) {
      large_.resize(n);
      buf = large_.data();
    }
    std::copy(node.gpus.begin(), node.gpus.end(), buf);
    for (int i : gpus) buf[i].free_milli -= milli;
    view_.gpus = std::span<const GpuView>(buf, n);
    view_.cpu_milli_free -= cpu;
  }
  const NodeView& view() const { return view_; }

 private:
  NodeView view_;
  std::array<GpuView, 16> small_{};
  std::vector<GpuView> large_;
};
}  // namespace

double FragmentationDrop(const PlacementRequest& req, const NodeView& node, std::span<const int> gpus,
                         double before, std::span<const WorkloadShape> shapes) {
  const NodeAfter after(node, req.cpu_milli, gpus, req.milli_per_gpu);
  return before - NodeFragmentation(after.view(), shapes);
}

double FgdQuantisedScore(double drop) {
  constexpr double kMaxNodeScore = 100;
  return static_cast<double>(static_cast<std::int64_t>(kMaxNodeScore / (1.0 + std::exp(-drop / 1000))));
}

std::optional<NodeChoice> FgdChoice(const PlacementRequest& req, const NodeView& node,
                                    std::span<const WorkloadShape> shapes) {
  const double before = NodeFragmentation(node, shapes);
  if (!IsShare(req)) {
    std::vector<int> gpus = BestFitGpus(req, node);
    if (req.num_gpus > 0 && gpus.empty()) return std::nullopt;
    const double score = FgdQuantisedScore(FragmentationDrop(req, node, gpus, before, shapes));
    return NodeChoice{score, std::move(gpus)};
  }
  std::optional<NodeChoice> best;
  for (int i = 0; i < static_cast<int>(node.gpus.size()); ++i) {
    const GpuView& g = node.gpus[i];
    if (!g.usable || g.free_milli < req.milli_per_gpu) continue;
    const int one[1] = {i};
    const double s = FgdQuantisedScore(FragmentationDrop(req, node, one, before, shapes));
    if (!best || s > best->score) best = NodeChoice{s, {i}};
  }
  return best;
}

}  // namespace gpuslice::sched
