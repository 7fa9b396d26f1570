#pragma once
// The FGD paper's evaluation protocol (docs/evaluation.md, ../shared/reference/fgd-protocol.md):
// every pod of the list (CPU-only included) is scheduled once, in a seeded shuffled order,
// inflated with seeded re-draws until arrived GPU demand would pass `inflation` × capacity; a pod
// that fits nowhere is dropped; nothing departs. After each pod the allocation ratio and the
// cluster fragmentation are recorded against arrived demand, and sampled at every whole percent
// as the authors' analysis does. Functions are pure given their inputs; thread-compatible.

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sched/placement/placement.h"
#include "sim/openb.h"
#include "sim/placer.h"

namespace gpuslice::sim {

// FGD's "typical pods": the most frequent resource shapes (cpu, per-GPU milli, GPU count, model
// constraint; CPU-only pods included) covering at least `coverage` of the pods, frequencies
// renormalised to sum to 1, each with the median host memory of its pods (not part of the key).
// Order: count descending, then cpu, milli, count, spec descending.
std::vector<sched::WorkloadShape> TypicalShapes(const std::vector<TracePod>& pods, double coverage = 0.95);

// The typical shapes and the rarer ones that bring the GPU asked. Typical shapes cover 95% of
// the pods by count, and a shape a few pods in a hundred ask (eight whole GPUs with one of
// several CPU sizes) can be a tenth of the GPU asked and count for nothing in them. Here the
// pods outside the typical shapes are grouped by their GPU request (GPU count, per-GPU milli,
// model constraint), and the groups asking the most GPU are added, most first, until the shapes
// cover at least `coverage` of the GPU asked (the same 95%, by GPU instead of by count); each
// group with the median CPU and host memory of its pods (the lower one of an even count). The
// typical shapes come first, in TypicalShapes() order; frequencies sum to 1 over the result.
// Equal to TypicalShapes() when those already cover `coverage` of the GPU.
std::vector<sched::WorkloadShape> DemandShapes(const std::vector<TracePod>& pods, double coverage = 0.95);

// The pod request as the artifact sees it (a zero CPU request counts as 100m, as Kubernetes'
// non-zero defaults do).
sched::PlacementRequest ToRequest(const TracePod& pod);

// Pod indices in arrival order for one seed: sorted by name, shuffled, then inflated.
std::vector<int> ArrivalOrder(const std::vector<TracePod>& pods, std::uint64_t seed, double inflation,
                              MilliGpu capacity_milli);

inline constexpr int kMaxPercent = 130;

// One run's curves, indexed by arrived-demand percent 0..kMaxPercent; NaN where no sample.
struct FgdCurves {
  std::array<double, kMaxPercent + 1> alloc_pct;      // allocated / capacity, %
  std::array<double, kMaxPercent + 1> frag_pct;       // fragmented / capacity, %
  std::array<double, kMaxPercent + 1> frag_rate_pct;  // fragmented / idle, %
};

// Where idle GPU is, by what the workload's GPU shapes can do with it. Each GPU's free share is
// split among its typical shapes that ask GPU, by their frequency (renormalised over them, so
// CPU-only pods, which use no GPU anywhere, do not count), as FGD's fragmentation is:
//  - usable: the share of the shapes whose pod fits on it now (the per-GPU share, and for
//    whole-GPU shapes enough free whole GPUs on the node; an allowed model; the node's free CPU
//    and the shape's median host memory). Usable GPU when arrivals stop is what nothing came for;
//  - stranded: the share of the shapes whose GPU request fits but whose CPU or host memory the
//    node can no longer give;
//  - no_fit: the share of the shapes whose GPU request does not fit (a share hole smaller than
//    theirs, too few free whole GPUs, a model they do not allow).
// The classes sum to the free GPU of the node's usable GPUs (milli-GPU). stranded + no_fit is
// FGD's fragmentation of the node (NodeFragmentation) without its CPU-only shapes, with host
// memory counted like CPU; no_fit is the same with the node's CPU and memory unbounded.
struct IdleBreakdown {
  double usable = 0;
  double stranded = 0;
  double no_fit = 0;
  IdleBreakdown& operator+=(const IdleBreakdown& o) {
    usable += o.usable;
    stranded += o.stranded;
    no_fit += o.no_fit;
    return *this;
  }
};
IdleBreakdown ClassifyIdle(const sched::NodeView& node, std::span<const sched::WorkloadShape> shapes);

struct FgdRun {
  std::string policy;
  std::uint64_t seed = 0;
  std::int64_t pods = 0;
  std::int64_t failed = 0;
  std::int64_t failed_cpu_only = 0;   // of `failed`, pods that ask no GPU
  // Of `failed`, pods that fit on some node but that the policy placed nowhere: what an
  // admission rule (admission.h) refused. Placement alone refuses none.
  std::int64_t refused = 0;
  std::int64_t refused_cpu_only = 0;  // of `refused`, pods that ask no GPU
  std::int64_t cpu_total_milli = 0;   // the cluster's CPU
  std::int64_t final_cpu_alloc_milli = 0;  // CPU allocated when the last pod has arrived
  MilliGpu capacity_milli = 0;
  MilliGpu final_alloc_milli = 0;
  double final_arrived_pct = 0;
  IdleBreakdown final_idle;  // the cluster's idle GPU when the last pod has arrived (typical shapes)
  FgdCurves curves;
  double seconds = 0;
  std::uint64_t scored = 0;  // Score() calls made (after caching)
  // FNV-1a over every decision in order (pod index, node or "failed", GPU indices): equal
  // digests mean the same decisions (how speed-ups are checked to change none).
  std::uint64_t digest = 14695981039346656037ULL;
};

struct FgdInputs {
  std::vector<TraceNode> nodes;
  std::vector<TracePod> pods;
  std::vector<sched::WorkloadShape> shapes;         // TypicalShapes(): every policy's workload
  // DemandShapes(), the context's demand_workload; empty when it adds no shape to `shapes`.
  std::vector<sched::WorkloadShape> demand_shapes;
  // The nodes' CPU over their GPUs, in capacity (the context's cpu_per_gpu_milli).
  double cpu_per_gpu_milli = 0;
};

// The protocol's inputs for a trace: its nodes and pods, their typical shapes and their demand
// shapes, each with its supply share on these nodes (sched::SetSupplyShares(); the paper's
// policies ignore both), and the nodes' CPU per GPU.
FgdInputs MakeFgdInputs(std::vector<TraceNode> nodes, std::vector<TracePod> pods);

// Runs one policy with one seed. `progress` (may be empty) gets the fraction done. Equal best
// scores go to the first node in the artifact's node-name order by default (a seeded random
// node priority fixed for the run, see placer.h), which is what reproduces the published
// results; kRandom is what sched::Place() does.
FgdRun RunFgdOnce(const FgdInputs& in, const sched::PlacementPolicy& policy, std::uint64_t seed,
                  double inflation, const std::function<void(double)>& progress = {},
                  TieBreak tie = TieBreak::kArtifactNames);

// Mean over runs at each percent (NaN where any run lacks the sample).
FgdCurves MeanCurves(const std::vector<const FgdRun*>& runs);

// Python's round-half-even of x to `digits` decimals, as the authors' analysis applies it.
double RoundHalfEven(double x, int digits);

}  // namespace gpuslice::sim
