// best-fit, packing and spread: the classic baselines, as Filter/Score plugins. They are the
// scheduler's indexed fast paths (scheduler_placement.cc, FastOrder) written as scores, so a
// name means one thing in the daemon, the simulator and a benchmark: the indexed path is this
// plugin's choice found without scoring every host (the scheduler's reference placement runs
// the plugin itself; determinism_test checks both take the same decisions).
//  - best-fit: a share goes to the GPU with the least free share that fits; a share that needs
//    a free GPU, and a whole-GPU request, go to the host with the fewest free GPUs (keeps
//    whole GPUs and whole hosts free). Equal ones: the lowest node, then the lowest GPU.
//  - packing: the same as best-fit (a second name the default config's training queue uses).
//  - spread: the opposite: free GPUs first, from the host with the most; then the GPU with
//    the most free share. Equal ones: the highest node, then the highest GPU.
// The score is the whole order, ties included, so Place() never draws from the RNG for these.
#include <algorithm>
#include <cstdint>

#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

class SimplePolicy final : public PlacementPolicy {
 public:
  SimplePolicy(std::string_view name, bool loosest) : name_(name), loosest_(loosest) {}
  std::string_view name() const override { return name_; }

  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext&) const override {
    NodeChoice c;
    if (req.num_gpus <= 0) {
      c.score = 0;
      return c;
    }
    const int n = static_cast<int>(node.gpus.size());
    auto fits = [&](const GpuView& g) {
      return g.usable && g.free_milli >= req.milli_per_gpu &&
             (req.gpu_memory_per_gpu <= 0 || g.free_memory >= req.gpu_memory_per_gpu);
    };
    int free_gpus = 0;  // fitting GPUs no one uses: the indexes' free count of the host
    for (const GpuView& g : node.gpus) free_gpus += fits(g) && g.free_milli == kOneGpu;
    MilliGpu chosen_free = kOneGpu;  // several GPUs: ranked as whole-GPU requests are
    if (req.num_gpus == 1 && req.milli_per_gpu < kOneGpu) {
      // One GPU: best-fit the tightest, lowest first; spread a free one if any (lowest
      // first, as the indexes list a host's free GPUs), else the loosest, highest first.
      int best = -1;
      for (int i = 0; i < n; ++i) {
        const GpuView& g = node.gpus[i];
        if (!fits(g)) continue;
        const MilliGpu f = g.free_milli;
        if (best < 0) {
          best = i;
        } else if (const MilliGpu b = node.gpus[best].free_milli; loosest_) {
          if (f > b || (f == b && f < kOneGpu)) best = i;
        } else if (f < b) {
          best = i;
        }
      }
      if (best < 0) return std::nullopt;
      c.gpu_indices = {best};
      chosen_free = node.gpus[best].free_milli;
    } else {
      // The lowest fitting GPUs (for whole GPUs: the lowest free ones, as the indexes list them).
      for (int i = 0; i < n && static_cast<int>(c.gpu_indices.size()) < req.num_gpus; ++i)
        if (fits(node.gpus[i])) c.gpu_indices.push_back(i);
      if (static_cast<int>(c.gpu_indices.size()) < req.num_gpus) return std::nullopt;
    }
    // (chosen GPU's free share, the host's free GPUs if it took a free one, node index): each
    // part below 2^10 apart from the index (< 2^32), so the sum is exact in a double (< 2^53).
    const std::uint64_t count = chosen_free == kOneGpu ? static_cast<std::uint64_t>(std::min(free_gpus, 1023)) : 0;
    const std::uint64_t key = ((static_cast<std::uint64_t>(chosen_free) << 10 | count) << 32) | node.index;
    c.score = loosest_ ? static_cast<double>(key) : -static_cast<double>(key);
    return c;
  }

 private:
  std::string_view name_;
  bool loosest_;
};

}  // namespace

std::vector<PolicyEntry> SimplePolicies() {
  return {
      {"best-fit", [] { return std::unique_ptr<PlacementPolicy>(new SimplePolicy("best-fit", false)); }},
      {"packing", [] { return std::unique_ptr<PlacementPolicy>(new SimplePolicy("packing", false)); }},
      {"spread", [] { return std::unique_ptr<PlacementPolicy>(new SimplePolicy("spread", true)); }},
  };
}

}  // namespace gpuslice::sched
