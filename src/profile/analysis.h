#pragma once
// Step-time breakdown of a parsed Kineto trace: where each ProfilerStep's wall time goes.
//
// Every nanosecond of a step is given to exactly one phase, by priority (the way the
// TensorBoard plugin and HTA do it: work the GPU is doing hides CPU-side waiting):
//   GPU compute kernels (forward / backward / optimizer / other, by the CPU phase that
//   launched them) > communication kernels (NCCL/RCCL) > host-to-device copies > other GPU
//   copies and memsets > data loading (enumerate(DataLoader)…) > synchronisation
//   (cuda*Synchronize) > GPU idle.
// GPU idle is split into host-bound (the next GPU operation was launched only after the GPU
// went idle: the CPU did not enqueue work fast enough) and waiting (the work was already
// queued: dependencies, other streams, events).
// So phases sum to the step time, and the phases where the GPU is active sum to the union of
// GPU activity within the step.
//
// Steps come from ProfilerStep#N; without them, from consecutive DataLoader calls; without
// those either, the whole trace is one step.
//
// Plain values and free functions; thread-compatible.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "profile/trace.h"

namespace gpuslice::profile {

enum class Phase : int {
  kForward = 0,
  kBackward,
  kOptimizer,
  kOtherCompute,   // kernels whose launch we cannot place (no correlation, launched elsewhere)
  kCommunication,
  kHostToDevice,
  kOtherCopy,      // DtoH/DtoD copies and memsets
  kDataLoading,
  kSynchronisation,
  kIdleHostBound,
  kIdleWaiting,
  kCount
};
inline constexpr int kPhaseCount = static_cast<int>(Phase::kCount);
std::string_view PhaseName(Phase p);   // "forward", "idle_host_bound", ...
std::string_view PhaseLabel(Phase p);  // "forward compute", "GPU idle (host-bound)", ...
bool PhaseIsGpuActive(Phase p);

using PhaseTimes = std::array<Nanos, kPhaseCount>;

struct StepBreakdown {
  std::int64_t number = -1;
  Nanos start = 0;
  Nanos end = 0;
  PhaseTimes phases{};
  Nanos gpu_busy = 0;        // union of GPU activity in the step (= sum of GPU-active phases)
  Nanos data_loading_raw = 0;  // DataLoader span time, before GPU work hides any of it
  Nanos communication_raw = 0; // communication kernel time (union), overlapped or not
  Nanos duration() const { return end - start; }
};

enum class StepSource { kProfilerStep, kDataLoader, kWholeTrace };
std::string_view StepSourceName(StepSource s);

// Timeline bins for the SVG: the trace span from the first step's start to the last step's
// end cut into equal bins, with phase time per bin.
struct TimelineBins {
  Nanos start = 0;
  Nanos bin_width = 1;
  std::vector<PhaseTimes> bins;
};

struct KernelTotal {
  std::string name;
  Nanos time = 0;
  std::int64_t count = 0;
};

struct TraceAnalysis {
  std::string path;
  std::string device_name;
  Bytes device_memory = 0;
  int compute_major = -1;
  int rank = -1;
  int world_size = -1;
  StepSource step_source = StepSource::kProfilerStep;
  std::vector<StepBreakdown> steps;
  PhaseTimes total{};          // summed over steps
  Nanos total_step_time = 0;
  Nanos total_gpu_busy = 0;
  Nanos total_data_loading_raw = 0;
  Nanos total_communication_raw = 0;
  // Kernels (within steps).
  std::int64_t kernels = 0;
  Nanos kernel_time = 0;              // summed durations (not union)
  Nanos tc_eligible_time = 0;         // GEMM/conv kernels
  Nanos tensor_core_time = 0;         // of which on tensor cores
  std::int64_t short_kernels = 0;     // GPU duration shorter than the launch call (HTA)
  std::int64_t kernels_with_launch = 0;
  Nanos median_kernel = 0;
  Bytes peak_memory_reserved = 0;
  std::vector<KernelTotal> top_kernels;  // by time, at most 5
  TimelineBins timeline;
};

// `timeline_bins` = number of bins for the SVG (0: none).
Result<TraceAnalysis> AnalyseTrace(const ParsedTrace& trace, int timeline_bins = 600);

// Median over steps of a per-step share in [0,1] (steps of zero length are skipped).
double MedianShare(const TraceAnalysis& a, Phase p);
double Share(const TraceAnalysis& a, Phase p);  // total[p] / total_step_time

}  // namespace gpuslice::profile
