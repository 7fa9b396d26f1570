#pragma once
// Fragmentation as the FGD paper ("Beware of Fragmentation", USENIX ATC'23) defines it, and small
// helpers shared by the FGD-paper placement policies (fgd.cc) and the simulator (src/sim).
//
// A node's fragmentation against one workload shape p (frequency f):
//   - p is CPU-only, or p's model is not allowed on the node, or p cannot run there now (not
//     enough CPU, or fewer than p.num_gpus GPUs with p.milli_per_gpu free): every free milli-GPU
//     of the node counts as fragment, times f;
//   - otherwise the free milli of the GPUs whose free share is below p.milli_per_gpu counts, × f.
// Node fragmentation is the sum over shapes. Memory is not part of it in the paper; with
// Resources::kCpuAndMemory a shape that cannot get its host memory on the node (its
// host_memory above the node's free memory) is counted like one that cannot get its CPU.
// Free functions on values; thread-safe.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sched/placement/placement.h"

namespace gpuslice::sched {

// Which host resources decide whether a shape can run on a node: CPU (the paper's measure), or
// CPU and host memory (gpuslice's).
enum class Resources { kCpu, kCpuAndMemory };

// Stranded fragmentation (gpuslice's second measure). FGD asks whether one more pod of a shape
// fits: a node whose CPU feeds one more pod but whose free GPUs would take six counts as whole
// until its last pod. The stranded measure counts the rest too. For a shape that fits, let P be
// the pods of it the node's usable GPUs could still take (a share: the sum over GPUs of
// free / share; k whole GPUs: GPUs with a whole GPU free, / k) and F the pods its free CPU (and,
// with kCpuAndMemory, host memory) can feed (free / the shape's demand; unlimited where the shape
// asks none). Its fragment is the free milli below its share, as in FGD, plus the fraction
// (P - min(P, F)) / P of the free milli at or above it; a shape that cannot get one pod counts
// all the free milli, as in FGD. Where no shape asks CPU or memory (the daemon, which does not
// model them) it is FGD's measure exactly.
double NodeStrandedFragmentation(const NodeView& node, std::span<const WorkloadShape> shapes,
                                 Resources resources = Resources::kCpu);

// Pooled stranded fragmentation (gpuslice's third measure): the GPU a node's host cannot feed
// when the workload's mix fills what is free, every shape drawing on one pool of CPU and memory.
// Each usable GPU's free share f needs f times the CPU (memory) per milli-GPU that the shapes
// fitting in f bring (their weighted CPU over their weighted GPU; nothing where no shape fits).
// If the node's free CPU (memory) is only a fraction `fed` of what its GPUs need, the measure is
// FGD's plus the fraction 1 - fed of what FGD counts as usable (each fitting shape's free milli
// at or above its share). The stranded measure above lets each shape claim all of the node's
// CPU for as many pods as the free GPU holds of it: a share small enough for the holes beside
// larger shares makes a node look short of CPU for pods that will mostly not come (the holes go
// to other shapes, or to none), and shapes that each fit do not see that together they do not.
// This one sees both, but counts CPU below one pod as feeding part of one, which the stranded
// measure does not. Where no shape that needs a GPU asks CPU or memory it is FGD's measure.
double NodePooledFragmentation(const NodeView& node, std::span<const WorkloadShape> shapes,
                               Resources resources = Resources::kCpu);

// Demand-weighted fragmentation (gpuslice's second key). FGD weighs each shape by how often its
// pods arrive; a shape of eight whole GPUs then counts as much as one of a tenth of a GPU, though
// each of its pods brings 80 times the GPU demand. This measure is FGD's (with the same
// Resources) with each shape weighted by the GPU it is expected to bring: frequency x GPUs x
// share, normalised to sum to 1 over the shapes that ask a GPU (CPU-only shapes weigh 0).
// It is FGD's measure where every shape asks the same GPU.
double NodeDemandFragmentation(const NodeView& node, std::span<const WorkloadShape> shapes,
                               Resources resources = Resources::kCpu);

// CPU fragmentation (gpuslice's fourth measure), in milli-CPU: FGD's measure turned to the host's
// CPU. For each shape, the free CPU of the node that its pods cannot use: all of it where the
// shape cannot get one pod there (it needs a GPU share the node is not eligible for, or lacks
// the CPU or memory of one pod, or asks no CPU), else what is left once the pods of it the node
// can hold have taken theirs: as many as its GPUs take and its CPU and memory feed (the stranded
// measure's count), any number of CPU-only pods that its CPU and memory feed. The sum over the
// shapes, weighted as FGD weighs them (frequency; CPU-only shapes count). The stranded measure
// counts the GPU a node's CPU cannot feed; this one the CPU its GPUs (or, for CPU-only shapes,
// the pod sizes) leave unused: where CPU runs out before GPU, CPU that no pod can use costs GPU
// that pods elsewhere cannot get.
double NodeCpuFragmentation(const NodeView& node, std::span<const WorkloadShape> shapes,
                            Resources resources = Resources::kCpu);

// How a measure weighs the typical shapes. kFrequency: by how often their pods arrive (the
// paper's). kSupply: by that frequency divided by the shape's supply_share, normalised to sum to
// 1 (gpuslice's): a node counts for a shape in proportion to the share of the shape's pods that
// would have to go to it, so a node that only a few kinds of node can replace (the only model a
// shape allows, the only size with the CPU and memory a large pod asks) is kept for the pods
// that need it. Where every supply share is 1 (every node could take every shape: hosts of one
// size, or shares never set) kSupply is kFrequency exactly.
enum class ShapeWeights { kFrequency, kSupply };

// Sets each shape's supply_share from the capacity of `nodes` (their totals, not what is free):
// the GPUs of the nodes with at least max(1, num_gpus) GPUs, the CPU and host memory the shape
// asks, and a model it allows, over all their GPUs; 1 where no node could take it (nothing to
// keep for it) or the nodes have no GPU. With `copies`, nodes[i] stands for copies[i] nodes
// of its capacity (one entry per kind of node instead of one per node).
void SetSupplyShares(std::span<WorkloadShape> shapes, std::span<const NodeView> nodes,
                     std::span<const std::int64_t> copies = {});

// `shapes` with each frequency replaced by its ShapeWeights::kSupply weight; `shapes` unchanged
// where every supply share is 1. A FragmentationEval with kSupply gives, bit for bit, the
// measures of these shapes with kFrequency.
std::vector<WorkloadShape> SupplyWeighted(std::span<const WorkloadShape> shapes);

// Fragmented milli-GPU of `node` against `shapes` (fractional: frequencies are weights).
double NodeFragmentation(const NodeView& node, std::span<const WorkloadShape> shapes,
                         Resources resources = Resources::kCpu);

// Total free milli-GPU of the usable GPUs of `node`.
MilliGpu FreeMilli(const NodeView& node);

// True iff `model` is allowed by `allowed` (empty: any model).
bool ModelAllowed(std::span<const std::string> allowed, std::string_view model);

// Uniform integer in [0, n) from a 64-bit generator (multiply-shift; deterministic on every
// platform, unlike std::uniform_int_distribution). n must be > 0.
inline std::uint64_t UniformIndex(std::mt19937_64& rng, std::uint64_t n) {
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(rng()) * n) >> 64);
}

// GPU choices used by the paper's artifact (Open-Gpu-Share "gpuSelMethod"):
// a share (num_gpus == 1, milli < 1000) goes on the usable GPU with the least free share that
// still fits, first index on ties; whole GPUs are the first num_gpus fully free usable GPUs in
// index order. Empty when nothing fits; CPU-only requests get an empty list too.
std::vector<int> BestFitGpus(const PlacementRequest& req, const NodeView& node);
// As BestFitGpus, but a share goes on a uniformly random GPU among those it fits on.
std::vector<int> RandomFitGpus(const PlacementRequest& req, const NodeView& node,
                               std::mt19937_64* rng);

// The pooled measure's need of a free share (NodePooledFragmentation()) as steps, ascending by
// `from`: a free share of f milli needs f x (cpu, memory) of the last step with from <= f (the
// shapes that fit in f: their weighted CPU and host memory over their weighted milli-GPU), and
// nothing below the first step.
struct HoleStep {
  MilliGpu from;
  double cpu;
  double memory;
};

// Each shape's weight in a FragmentationEval's measures: its ShapeWeights weight, and its weight
// in the demand-weighted measure (NodeDemandFragmentation()). They depend on the workload
// alone, so a caller that keeps evaluations of many nodes against one workload
// (PlacementPolicy::PrepareWorkload()) builds them once and passes them to each: an evaluation
// then keeps per node only the counts, and the simulator keeps one per node. Holds a view of
// `shapes` (it must outlive the table, unchanged). A value; thread-safe to share once built.
class ShapeTable {
 public:
  ShapeTable(std::span<const WorkloadShape> shapes, ShapeWeights weights);
  std::span<const WorkloadShape> shapes() const { return shapes_; }
  // [2k]: shape k's weight, [2k + 1]: its demand weight.
  const double* weights() const { return weights_.data(); }
  // The pooled measure's steps on a node where the shapes that need a GPU and name no model are
  // the eligible ones (every node, where no shape names a model).
  std::span<const HoleStep> unconstrained_steps() const { return steps_; }
  // What the table knows of a node of one model some shape names: which shapes it is eligible
  // for (they need a GPU and allow the model; 1 or 0 per shape) and the pooled measure's steps
  // with those shapes eligible. Null where no shape names `model` (then the eligible shapes are
  // those that need a GPU and name no model, and the steps are unconstrained_steps()).
  struct NamedModel {
    std::string name;
    std::vector<std::uint8_t> eligible;
    std::vector<HoleStep> steps;
  };
  const NamedModel* named_model(std::string_view model) const;
  // False where the shapes name more models than the table keeps views of (kMaxNamedModels: a
  // trace's model lists are not trusted to be few); then named_model() is null for every model
  // and an evaluation compares model names itself.
  bool knows_models() const { return knows_models_; }
  static constexpr std::size_t kMaxNamedModels = 64;
  // Writes the weights of `shapes` into `out` (2 x shapes.size()) as weights() lists them; the
  // demand weights only `with_demand`.
  static void Fill(std::span<const WorkloadShape> shapes, ShapeWeights weights, bool with_demand,
                   std::span<double> out);

 private:
  std::span<const WorkloadShape> shapes_;
  std::vector<double> weights_;
  std::vector<HoleStep> steps_;
  // Per model some shape names (each once, in order of first naming). Built with the table, so
  // that an evaluation of a node of a named model neither compares model names shape by shape
  // nor builds its own steps (a sort and an allocation for every node state, where most shapes
  // name models).
  std::vector<NamedModel> named_;
  bool knows_models_ = true;
};

// The measures a FragmentationEval evaluates besides FGD's.
struct ExtraMeasures {
  bool stranded = false;  // NodeStrandedFragmentation(): before_stranded(), AfterStranded()
  bool demand = false;    // NodeDemandFragmentation(): before_demand(), After()'s `demand`
  bool pooled = false;    // NodePooledFragmentation(): before_pooled(), AfterAll()'s `pooled`
  bool cpu = false;       // NodeCpuFragmentation(): before_cpu(), AfterAll()'s `cpu_frag`
};

// A wider workload than an evaluation's: the evaluation's shapes first (the same fields that
// decide whether and how a shape fits: CPU, GPUs, share, models, host memory; see Extends()),
// then more, with weights of its own. A FragmentationEval given one also gives FGD's measure
// against it, from the same counts and in the same passes: sim fgd scores a share against its
// demand shapes (FGD's typical shapes and the rarer ones that bring the GPU asked) and the rest
// against the typical ones, which are nearly the same list.
struct WideWorkload {
  std::span<const WorkloadShape> shapes;
  std::span<const double> weights;  // one per shape: its weight in the measure (as a frequency)
};
// True iff `wide` starts with `shapes` as WideWorkload asks.
bool Extends(std::span<const WorkloadShape> wide, std::span<const WorkloadShape> shapes);

// A node's fragmentation against a workload, and the fragmentation after hypothetical
// placements on it, without copying the node. The per-shape integers (does the shape fit, how
// many GPUs have its share free, the free milli of the others) are counted once; a placement
// changes only its GPUs' free shares and the CPU, so each "after" costs O(shapes + changed GPUs)
// instead of O(shapes x GPUs). The sums are the same per-shape products in the same order as
// NodeFragmentation(), so the results are bit-identical to it on the node before / after.
// Holds views into `node`'s GPUs and `shapes` (they must outlive it, unchanged); not thread-safe
// (a value).
class FragmentationEval {
 public:
  // `extra`: the measures besides FGD's to evaluate; `weights`: how every measure weighs the
  // shapes (kSupply: the same as evaluating SupplyWeighted(shapes) with kFrequency). The weights
  // are computed for this evaluation (a pass over the shapes).
  FragmentationEval(const NodeView& node, std::span<const WorkloadShape> shapes,
                    Resources resources = Resources::kCpu, ExtraMeasures extra = {},
                    ShapeWeights weights = ShapeWeights::kFrequency);
  // The same measures, with the shapes and weights of `table` (it must outlive the evaluation).
  // With `wide` (its shapes must extend the table's: Extends(); both must outlive the
  // evaluation), also FGD's measure against it: before_wide(), AfterAll()'s `wide`. One with
  // fewer shapes than the table, or not one weight per shape, is not taken (wide() is false).
  FragmentationEval(const NodeView& node, const ShapeTable& table, Resources resources = Resources::kCpu,
                    ExtraMeasures extra = {}, WideWorkload wide = {});
  FragmentationEval(const FragmentationEval&) = delete;
  FragmentationEval& operator=(const FragmentationEval&) = delete;

  // NodeFragmentation(node, shapes, resources).
  double before() const { return before_; }
  // NodeFragmentation() of the node with `cpu` more CPU and `memory` more host memory taken
  // and `milli` taken from each GPU in `gpus` (distinct indices).
  // With `demand` (needs ExtraMeasures::demand), *demand gets NodeDemandFragmentation() of the
  // same node, from the same pass.
  double After(std::int64_t cpu, std::span<const int> gpus, MilliGpu milli, Bytes memory = 0,
               double* demand = nullptr) const;
  // After() for a share of `milli` on GPU `gpu` and `cpu` CPU (the common case, no span).
  double AfterOne(std::int64_t cpu, int gpu, MilliGpu milli, Bytes memory = 0, double* demand = nullptr) const {
    const int one[1] = {gpu};
    return After(cpu, one, milli, memory, demand);
  }
  // NodeDemandFragmentation(node, shapes, resources); needs ExtraMeasures::demand.
  double before_demand() const { return before_demand_; }

  // Asks the processor for the per-shape counts that every After*() pass reads, all at once. For
  // callers that keep an evaluation (PlacementPolicy::Prepare()): by the time they use it again
  // it has usually left the cache, and a pass that meets each line in turn waits for each.
  // Changes no result; a fresh evaluation has no need of it.
  void Prefetch() const {
    const char* end = reinterpret_cast<const char*>(counts_ + counted());
    for (const char* p = reinterpret_cast<const char*>(counts_); p < end; p += 64) __builtin_prefetch(p);
  }

  // True iff constructed with ExtraMeasures::stranded and some shape that needs a GPU asks CPU
  // or counted memory, so that the stranded measure can differ from FGD's. When false, before_stranded()
  // and AfterStranded() are before() and After().
  bool strands() const { return strands_; }
  // NodeStrandedFragmentation(node, shapes, resources); needs ExtraMeasures::stranded.
  double before_stranded() const { return strands_ ? before_stranded_ : before_; }
  // NodeStrandedFragmentation() after the placement After() describes; needs
  // ExtraMeasures::stranded.
  double AfterStranded(std::int64_t cpu, std::span<const int> gpus, MilliGpu milli, Bytes memory = 0) const;
  double AfterStrandedOne(std::int64_t cpu, int gpu, MilliGpu milli, Bytes memory = 0) const {
    const int one[1] = {gpu};
    return AfterStranded(cpu, one, milli, memory);
  }
  // As strands(), for ExtraMeasures::pooled: when false, before_pooled() and AfterAll()'s
  // `pooled` are FGD's measure.
  bool pools() const { return pools_; }
  // NodePooledFragmentation(node, shapes, resources); needs ExtraMeasures::pooled.
  double before_pooled() const { return pools_ ? before_pooled_ : before_; }
  // True iff constructed with ExtraMeasures::cpu.
  bool cpu_counts() const { return cpu_; }
  // NodeCpuFragmentation(node, shapes, resources), in milli-CPU; needs ExtraMeasures::cpu.
  double before_cpu() const { return before_cpu_; }
  // True iff constructed with a WideWorkload.
  bool wide() const { return wide_weights_ != nullptr; }
  // NodeFragmentation() of the node against the WideWorkload (its weights as frequencies).
  double before_wide() const { return before_wide_; }
  // After(), with *demand (if not null) as After() gives it, *stranded (if not null) as
  // AfterStranded() gives it, *pooled (if not null) NodePooledFragmentation() of the node
  // after (needs ExtraMeasures::pooled), *wide (if not null) NodeFragmentation() of it
  // against the WideWorkload (needs one) and *cpu_frag (if not null) NodeCpuFragmentation() of
  // it (needs ExtraMeasures::cpu), from one pass over the shapes; each bit-identical to the
  // separate call or to a fresh evaluation of the node after.
  double AfterAll(std::int64_t cpu, std::span<const int> gpus, MilliGpu milli, Bytes memory, double* demand,
                  double* stranded, double* pooled = nullptr, double* wide = nullptr,
                  double* cpu_frag = nullptr) const;
  double AfterAllOne(std::int64_t cpu, int gpu, MilliGpu milli, Bytes memory, double* demand, double* stranded,
                     double* pooled = nullptr, double* wide = nullptr, double* cpu_frag = nullptr) const {
    const int one[1] = {gpu};
    return AfterAll(cpu, one, milli, memory, demand, stranded, pooled, wide, cpu_frag);
  }

 private:
  // Left uninitialised (the constructor sets every field of the ones it uses): zeroing them on
  // every call cost more than counting. 16 bytes, 32-bit counts (a node's free milli-GPU is
  // below 2^31 by far): the simulator keeps one per shape per node, and the passes over them
  // wait on memory, so their size is their speed.
  struct Counts {
    bool eligible;            // needs GPU share, and its model is allowed on the node
    std::uint16_t whole_pods; // a share shape's pods in a whole GPU (kOneGpu / its share); else 0
    std::int32_t enough;      // usable GPUs with free >= the shape's milli_per_gpu
    std::int32_t below;       // free milli of the other usable GPUs
    std::int32_t share_pods;  // stranded only: pods of a share the usable GPUs could take
  };
  static_assert(sizeof(Counts) == 16);
  // The shared part of both constructors: `weights` is ShapeTable::weights()'s layout, or null
  // to compute it into this evaluation's storage (as `mode` says).
  // `table`: the ShapeTable `weights` come from, if any.
  void Init(const ShapeTable* table, const double* weights, ShapeWeights mode, ExtraMeasures extra);
  // Whether shape `s` gets its host resources with `cpu_free` CPU and `memory_free` memory.
  bool HostFits(const WorkloadShape& s, std::int64_t cpu_free, Bytes memory_free) const {
    return cpu_free >= s.cpu_milli && (!count_memory_ || memory_free >= s.host_memory);
  }
  // A copy (a few words): the caller's view may be a temporary. Its GPU span must stay valid.
  const NodeView node_;
  std::span<const WorkloadShape> shapes_;
  // The GPUs of a placement, looked at once per call rather than once per shape: where every
  // usable one has the same free share (a share's one GPU; whole GPUs, all free) each shape's
  // counts move by `usable` times one GPU's move (the same integers as GPU by GPU).
  struct Chosen {
    std::span<const int> gpus;
    int usable = 0;         // of `gpus`, the usable ones
    MilliGpu free = 0;      // their free share, when `uniform`
    bool uniform = true;    // every usable one of `gpus` has free share `free`
  };
  Chosen Summarise(std::span<const int> gpus) const;
  // The usable free milli after `milli` is taken from each of the chosen GPUs.
  MilliGpu FreeAfter(const Chosen& chosen, MilliGpu milli) const { return free_total_ - chosen.usable * milli; }
  // Shape `s`'s counts `c` after `milli` is taken from each of the chosen GPUs (share_pods only
  // with kSharePods).
  // (Only the counts a placement changes, so that the rest of Counts is not copied.)
  struct MovedCounts {
    int enough;
    MilliGpu below;
    std::int64_t share_pods;
  };
  // (kOne: `chosen` is one usable GPU.)
  template <bool kSharePods, bool kOne = false>
  MovedCounts Moved(const WorkloadShape& s, const Counts& c, const Chosen& chosen, MilliGpu milli) const;
  // AfterAll()'s sums.
  struct Sums {
    double frag = 0;
    double demand = 0;
    double stranded = 0;
    double wide = 0;  // FGD's against the WideWorkload
    double cpu = 0;   // the CPU measure
  };
  // AfterAll()'s sums over the shapes (`with_demand`, `with_stranded`, `with_wide`, `with_cpu`:
  // which are asked).
  Sums AfterAllSums(const Chosen& chosen, MilliGpu milli, MilliGpu total, std::int64_t cpu_free, Bytes memory_free,
                    bool with_demand, bool with_stranded, bool with_wide, bool with_cpu) const;
  // How a placement moves the chosen GPUs: not at all (CPU-only work), whole free GPUs taken
  // whole, one GPU (a share), or any other way.
  enum class Move { kNone, kWhole, kOne, kAny };
  // Moved<true>(), knowing how the GPUs move.
  template <Move kMove>
  MovedCounts MovedBy(const WorkloadShape& s, const Counts& c, const Chosen& chosen, MilliGpu milli) const;
  // AfterAllSums() where memory counts, every measure but (maybe, kCpu) the CPU one is asked
  // and the host's free CPU and memory after the placement are not negative (the simulator's
  // case), the same bits.
  template <Move kMove, bool kWide, bool kCpu>
  Sums AfterAllFast(const Chosen& chosen, MilliGpu milli, MilliGpu total, std::int64_t cpu_free,
                    Bytes memory_free) const;
  // AfterAllFast() for how `chosen` moves (Move), with or without the wide and the CPU measures.
  template <bool kWide, bool kCpu>
  Sums AfterAllFastBy(const Chosen& chosen, MilliGpu milli, MilliGpu total, std::int64_t cpu_free,
                      Bytes memory_free) const;
  // One shape's term of the CPU measure (NodeCpuFragmentation()) with `cpu_free` CPU and
  // `memory_free` memory free: `fed` is FedUpTo() of the pods its GPUs take, for a shape that
  // needs a GPU and is `eligible` (read only then).
  double CpuTerm(const WorkloadShape& s, bool eligible, std::int64_t fed, std::int64_t cpu_free,
                 Bytes memory_free) const;
  // The CPU measure of the node with `cpu_free` CPU, `memory_free` memory and no free GPU.
  double CpuWithoutGpus(std::int64_t cpu_free, Bytes memory_free) const;
  // The pooled measure's CPU and host memory needs.
  struct HostNeed {
    double cpu = 0;
    double memory = 0;
  };
  // What a free share of `free` milli needs: `free` times the CPU (memory) per milli-GPU of the
  // eligible shapes that fit in it (NodePooledFragmentation()); zero where none fits.
  HostNeed HoleNeed(MilliGpu free) const;
  // The usable GPUs' needs after `milli` is taken from each of the chosen ones, summed as
  // Init() sums need_ (so bit-identical to a fresh evaluation of the node after).
  HostNeed NeedAfter(const Chosen& chosen, MilliGpu milli) const;
  // NodePooledFragmentation() less FGD's: `frag` is FGD's fragmentation of the node, `total` its
  // free milli, `need` what its GPUs' free shares need, `cpu_free` and `memory_free` what the host has.
  double Pooled(double frag, MilliGpu total, HostNeed need, std::int64_t cpu_free, Bytes memory_free) const;
  // Pods of shape `s` its usable GPUs could take, from its counts (share_pods counted).
  static std::int64_t PodsOnGpus(const WorkloadShape& s, int enough, std::int64_t share_pods);
  template <typename C>
  static std::int64_t PodsOnGpus(const WorkloadShape& s, const C& c) {
    return PodsOnGpus(s, c.enough, c.share_pods);
  }
  // min(pods, the pods of shape `s` that `cpu_free` CPU and `memory_free` memory can feed).
  std::int64_t FedUpTo(const WorkloadShape& s, std::int64_t pods, std::int64_t cpu_free, Bytes memory_free) const;
  bool count_memory_ = false;
  bool strands_ = false;
  bool demand_ = false;
  double before_demand_ = 0;
  MilliGpu free_total_ = 0;
  double before_ = 0;
  double before_stranded_ = 0;
  bool pools_ = false;
  double before_pooled_ = 0;
  bool cpu_ = false;
  double before_cpu_ = 0;
  double weight_sum_ = 0;  // pooled only: every shape's weight(), summed
  // Pooled only: HoleNeed()'s steps (the table's where they are this node's), what each GPU's
  // free share needs (in storage_, after the counts and weights; zero for unusable GPUs) and
  // what the usable ones need together.
  std::span<const HoleStep> hole_steps_;
  std::vector<HoleStep> own_steps_;
  HostNeed* gpu_need_ = nullptr;
  HostNeed need_;
  // One Counts per shape, sized exactly: a caller that keeps many evaluations (the simulator
  // keeps one per node, PlacementPolicy::Prepare()) then keeps only what they use, which
  // measurably speeds up the passes over them; an inline buffer of a fixed size did not pay
  // for itself. Built from shapes, the weights follow in the same allocation.
  std::unique_ptr<std::byte[]> storage_;
  // With a WideWorkload: its shapes (counts_ has one per shape of it, the evaluation's first)
  // and weights, and the measure against it before the placement.
  std::span<const WorkloadShape> wide_shapes_;
  const double* wide_weights_ = nullptr;
  double before_wide_ = 0;
  // The shapes counts_ has (the WideWorkload's where there is one).
  std::size_t counted() const { return wide_weights_ != nullptr ? wide_shapes_.size() : shapes_.size(); }
  Counts* counts_ = nullptr;
  const double* weights_ = nullptr;  // ShapeTable::weights()'s layout
  double weight(std::size_t k) const { return weights_[2 * k]; }
  double demand_weight(std::size_t k) const { return weights_[2 * k + 1]; }
};

// Fragmentation drop (before - after; higher is better) of placing `req` on `gpus` of `node`.
double FragmentationDrop(const PlacementRequest& req, const NodeView& node, std::span<const int> gpus,
                         double before, std::span<const WorkloadShape> shapes);

// The FGD artifact's integer score of a drop: int(sigmoid(drop / 1000) * 100).
double FgdQuantisedScore(double drop);

// FGD's choice on one node: whole GPUs / CPU-only as BestFitGpus, a share on the GPU with the best
// quantised score (first index on ties); the score is that quantised score. nullopt: no fit.
std::optional<NodeChoice> FgdChoice(const PlacementRequest& req, const NodeView& node,
                                    std::span<const WorkloadShape> shapes,
                                    Resources resources = Resources::kCpu);
// The same, with the node's evaluation already made (by FGD's frequencies, kCpu resources, as
// above: the simulator keeps one per node state for every request class, as it does gpuslice's).
std::optional<NodeChoice> FgdChoice(const PlacementRequest& req, const NodeView& node,
                                    const FragmentationEval& eval);

inline bool IsShare(const PlacementRequest& req) {
  return req.num_gpus == 1 && req.milli_per_gpu < kOneGpu;
}
inline bool IsShareShape(const WorkloadShape& s) {
  return s.num_gpus == 1 && s.milli_per_gpu > 0 && s.milli_per_gpu < kOneGpu;
}

}  // namespace gpuslice::sched
