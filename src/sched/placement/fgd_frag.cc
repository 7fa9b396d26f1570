#include "sched/placement/fgd_frag.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <new>

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

double NodeFragmentation(const NodeView& node, std::span<const WorkloadShape> shapes, Resources resources) {
  const bool count_memory = resources == Resources::kCpuAndMemory;
  const MilliGpu free_total = FreeMilli(node);
  if (free_total == 0) return 0;
  double frag = 0;
  for (const WorkloadShape& s : shapes) {
    bool fits = s.milli_per_gpu > 0 && node.cpu_milli_free >= s.cpu_milli &&
                (!count_memory || node.memory_free >= s.host_memory) && ModelAllowed(s.allowed_models, node.model);
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

void SetSupplyShares(std::span<WorkloadShape> shapes, std::span<const NodeView> nodes,
                     std::span<const std::int64_t> copies) {
  // The GPUs nodes[i] and its copies have.
  auto gpus = [&](std::size_t i) {
    return static_cast<std::int64_t>(nodes[i].gpus.size()) * (copies.empty() ? 1 : copies[i]);
  };
  std::int64_t all = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) all += gpus(i);
  for (WorkloadShape& s : shapes) {
    std::int64_t eligible = 0;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const NodeView& n = nodes[i];
      if (static_cast<int>(n.gpus.size()) < std::max(1, s.num_gpus) || n.cpu_milli_total < s.cpu_milli ||
          n.memory_total < s.host_memory || !ModelAllowed(s.allowed_models, n.model)) {
        continue;
      }
      eligible += gpus(i);
    }
    s.supply_share = eligible > 0 ? static_cast<double>(eligible) / static_cast<double>(all) : 1;
  }
}

namespace {
bool AllSupplyOne(std::span<const WorkloadShape> shapes) {
  for (const WorkloadShape& s : shapes) {
    if (s.supply_share != 1) return false;
  }
  return true;
}

// frequency / supply_share summed over `shapes` (the kSupply weights' normaliser).
double SupplyNormaliser(std::span<const WorkloadShape> shapes) {
  double total = 0;
  for (const WorkloadShape& s : shapes) total += s.frequency / s.supply_share;
  return total;
}
}  // namespace

std::vector<WorkloadShape> SupplyWeighted(std::span<const WorkloadShape> shapes) {
  std::vector<WorkloadShape> out(shapes.begin(), shapes.end());
  if (AllSupplyOne(shapes)) return out;
  const double total = SupplyNormaliser(shapes);
  for (WorkloadShape& s : out) s.frequency = s.frequency / s.supply_share / total;
  return out;
}

double NodeStrandedFragmentation(const NodeView& node, std::span<const WorkloadShape> shapes, Resources resources) {
  const FragmentationEval eval(node, shapes, resources, {.stranded = true});
  return eval.before_stranded();
}

double NodePooledFragmentation(const NodeView& node, std::span<const WorkloadShape> shapes, Resources resources) {
  const FragmentationEval eval(node, shapes, resources, {.pooled = true});
  return eval.before_pooled();
}

double NodeCpuFragmentation(const NodeView& node, std::span<const WorkloadShape> shapes, Resources resources) {
  const FragmentationEval eval(node, shapes, resources, {.cpu = true});
  return eval.before_cpu();
}

double NodeDemandFragmentation(const NodeView& node, std::span<const WorkloadShape> shapes, Resources resources) {
  const FragmentationEval eval(node, shapes, resources, {.demand = true});
  return eval.before_demand();
}

namespace {
// The GPU a pod of shape `s` asks, times the shape's weight `w` (NodeDemandFragmentation).
double DemandOf(const WorkloadShape& s, double w) {
  return w * static_cast<double>(s.num_gpus) * static_cast<double>(s.milli_per_gpu);
}

// One shape's stranded fragment (see NodeStrandedFragmentation): `pods` the GPUs could take,
// `k` of them the host can feed (FedUpTo()), `below` the free milli under its share, `total`
// all free.
double StrandedTerm(std::int64_t pods, std::int64_t k, MilliGpu below, MilliGpu total) {
  if (k <= 0) return static_cast<double>(total);
  // The host feeds every pod (the common case): the formula below gives `below` exactly.
  if (k == pods) return static_cast<double>(below);
  return static_cast<double>(below) +
         static_cast<double>(total - below) * (1.0 - static_cast<double>(k) / static_cast<double>(pods));
}
}  // namespace


// Inlined: a call per shape per evaluation showed in profiles (as Moved()).
[[gnu::always_inline]] inline std::int64_t FragmentationEval::PodsOnGpus(const WorkloadShape& s, int enough,
                                                                         std::int64_t share_pods) {
  if (IsShareShape(s)) return share_pods;
  return s.num_gpus <= 1 ? enough : enough / s.num_gpus;
}

[[gnu::always_inline]] inline std::int64_t FragmentationEval::FedUpTo(const WorkloadShape& s, std::int64_t pods,
                                                                      std::int64_t cpu_free, Bytes memory_free) const {
  // min(pods, what the CPU feeds, what the memory feeds), dividing only where the host cannot
  // feed them all (a division costs more than the rest of a shape's term).
  std::int64_t k = pods;
  if (k <= 0) return k;
  if (s.cpu_milli > 0 && cpu_free < k * s.cpu_milli) k = std::max<std::int64_t>(0, cpu_free) / s.cpu_milli;
  if (count_memory_ && s.host_memory > 0 && memory_free < k * s.host_memory) {
    k = std::max<Bytes>(0, memory_free) / s.host_memory;
  }
  return k;
}

// Inlined: it runs for every shape of every evaluation where the CPU measure is asked.
[[gnu::always_inline]] inline double FragmentationEval::CpuTerm(const WorkloadShape& s, bool eligible, std::int64_t fed,
                                                                std::int64_t cpu_free, Bytes memory_free) const {
  const std::int64_t free = std::max<std::int64_t>(0, cpu_free);
  if (s.cpu_milli <= 0) return static_cast<double>(free);  // its pods use none of it
  if (s.milli_per_gpu <= 0) {
    // A CPU-only shape: as many pods as the CPU and memory feed (no multiplication, which
    // could overflow for a shape that asks much memory).
    fed = free / s.cpu_milli;
    if (count_memory_ && s.host_memory > 0) fed = std::min<std::int64_t>(fed, std::max<Bytes>(0, memory_free) / s.host_memory);
  } else if (!eligible) {
    return static_cast<double>(free);
  }
  return static_cast<double>(free - fed * s.cpu_milli);
}

double FragmentationEval::CpuWithoutGpus(std::int64_t cpu_free, Bytes memory_free) const {
  double frag = 0;
  for (std::size_t k = 0; k < shapes_.size(); ++k) frag += weight(k) * CpuTerm(shapes_[k], counts_[k].eligible, 0, cpu_free, memory_free);
  return frag;
}

namespace {
// The pooled measure's steps (HoleStep) of the shapes `eligible(i)` says are eligible, with the
// weights `weights` (ShapeTable::weights()'s layout), into `out`.
template <typename Eligible>
void BuildHoleSteps(std::span<const WorkloadShape> shapes, const double* weights, Eligible eligible,
                    std::vector<HoleStep>& out) {
  // The eligible shapes by share, ascending (equal shares in shape order), then running sums:
  // a free share takes every shape whose share is at most it.
  struct Fit {
    MilliGpu milli;
    std::size_t shape;
  };
  std::vector<Fit> fits;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (eligible(i)) fits.push_back({shapes[i].milli_per_gpu, i});
  }
  std::stable_sort(fits.begin(), fits.end(), [](const Fit& a, const Fit& b) { return a.milli < b.milli; });
  double cpu = 0;
  double memory = 0;
  double gpu = 0;
  for (std::size_t j = 0; j < fits.size(); ++j) {
    const WorkloadShape& s = shapes[fits[j].shape];
    const double w = weights[2 * fits[j].shape];
    cpu += w * static_cast<double>(s.cpu_milli);
    memory += w * static_cast<double>(s.host_memory);
    gpu += w * static_cast<double>(s.milli_per_gpu) * static_cast<double>(std::max(1, s.num_gpus));
    if (j + 1 < fits.size() && fits[j + 1].milli == fits[j].milli) continue;
    out.push_back({fits[j].milli, gpu > 0 ? cpu / gpu : 0, gpu > 0 ? memory / gpu : 0});
  }
}
}  // namespace

ShapeTable::ShapeTable(std::span<const WorkloadShape> shapes, ShapeWeights weights)
    : shapes_(shapes), weights_(2 * shapes.size()) {
  Fill(shapes, weights, /*with_demand=*/true, weights_);
  BuildHoleSteps(
      shapes, weights_.data(),
      [&](std::size_t i) { return shapes[i].milli_per_gpu > 0 && shapes[i].allowed_models.empty(); }, steps_);
  for (const WorkloadShape& naming : shapes) {
    for (const std::string& model : naming.allowed_models) {
      if (named_model(model) != nullptr) continue;
      if (named_.size() == kMaxNamedModels) {
        named_.clear();
        knows_models_ = false;
        return;
      }
      NamedModel& m = named_.emplace_back();
      m.name = model;
      for (const WorkloadShape& s : shapes) {
        m.eligible.push_back(s.milli_per_gpu > 0 && ModelAllowed(s.allowed_models, model) ? 1 : 0);
      }
      BuildHoleSteps(shapes, weights_.data(), [&](std::size_t i) { return m.eligible[i] != 0; }, m.steps);
    }
  }
}

const ShapeTable::NamedModel* ShapeTable::named_model(std::string_view model) const {
  for (const NamedModel& m : named_) {
    if (m.name == model) return &m;
  }
  return nullptr;
}

void ShapeTable::Fill(std::span<const WorkloadShape> shapes, ShapeWeights weights, bool with_demand,
                      std::span<double> out) {
  // Each shape's weight (SupplyWeighted()'s arithmetic, in its order).
  const double supply_total =
      weights == ShapeWeights::kSupply && !AllSupplyOne(shapes) ? SupplyNormaliser(shapes) : 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const WorkloadShape& s = shapes[i];
    out[2 * i] = supply_total > 0 ? s.frequency / s.supply_share / supply_total : s.frequency;
  }
  if (!with_demand) return;
  // The demand weights: weight x GPU asked, normalised over the shapes that ask a GPU.
  double demand_total = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) demand_total += DemandOf(shapes[i], out[2 * i]);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    out[2 * i + 1] = demand_total > 0 ? DemandOf(shapes[i], out[2 * i]) / demand_total : 0;
  }
}

FragmentationEval::FragmentationEval(const NodeView& node, std::span<const WorkloadShape> shapes,
                                     Resources resources, ExtraMeasures extra, ShapeWeights weights)
    : node_(node), shapes_(shapes), count_memory_(resources == Resources::kCpuAndMemory), demand_(extra.demand) {
  Init(nullptr, nullptr, weights, extra);
}

FragmentationEval::FragmentationEval(const NodeView& node, const ShapeTable& table, Resources resources,
                                     ExtraMeasures extra, WideWorkload wide)
    : node_(node),
      shapes_(table.shapes()),
      count_memory_(resources == Resources::kCpuAndMemory),
      demand_(extra.demand) {
  // (A wider workload that cannot be one, too short or short of weights, is not taken: the
  // counts are sized by it.)
  if (!wide.shapes.empty() && wide.shapes.size() >= shapes_.size() && wide.weights.size() == wide.shapes.size()) {
    wide_shapes_ = wide.shapes;
    wide_weights_ = wide.weights.data();
  }
  Init(&table, table.weights(), ShapeWeights::kFrequency, extra);
}

bool Extends(std::span<const WorkloadShape> wide, std::span<const WorkloadShape> shapes) {
  if (wide.size() < shapes.size()) return false;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const WorkloadShape& a = wide[i];
    const WorkloadShape& b = shapes[i];
    if (a.cpu_milli != b.cpu_milli || a.num_gpus != b.num_gpus || a.milli_per_gpu != b.milli_per_gpu ||
        a.host_memory != b.host_memory || a.allowed_models != b.allowed_models) {
      return false;
    }
  }
  return true;
}

void FragmentationEval::Init(const ShapeTable* table, const double* weights, ShapeWeights mode, ExtraMeasures extra) {
  const NodeView& node = node_;
  const std::span<const WorkloadShape> shapes = shapes_;
  // Counts, then (without a table) the weights, then (with the pooled measure) each GPU's need;
  // all 8-byte aligned, left uninitialised (an array of std::byte creates the objects in it).
  const std::size_t counts_bytes = counted() * sizeof(Counts);
  const std::size_t weights_bytes = weights == nullptr ? 2 * shapes.size() * sizeof(double) : 0;
  const std::size_t bytes = counts_bytes + weights_bytes + (extra.pooled ? node.gpus.size() * sizeof(HostNeed) : 0);
  storage_.reset(new std::byte[bytes]);
  counts_ = std::launder(reinterpret_cast<Counts*>(storage_.get()));
  if (extra.pooled) gpu_need_ = std::launder(reinterpret_cast<HostNeed*>(storage_.get() + counts_bytes + weights_bytes));
  if (weights == nullptr) {
    double* own = std::launder(reinterpret_cast<double*>(storage_.get() + counts_bytes));
    ShapeTable::Fill(shapes, mode, demand_, std::span<double>(own, 2 * shapes.size()));
    weights = own;
  }
  weights_ = weights;
  // The usable GPUs' free shares, ascending, with prefix sums: a shape's counts are then the
  // position of its share among them (integers, so any way of counting gives the same).
  constexpr int kSorted = 16;
  std::array<MilliGpu, kSorted> sorted;
  std::array<MilliGpu, kSorted + 1> prefix;
  prefix[0] = 0;
  int n = 0;
  bool small = true;
  for (const GpuView& g : node.gpus) {
    if (!g.usable) continue;
    free_total_ += g.free_milli;
    if (n == kSorted) {
      small = false;
      continue;
    }
    int j = n++;
    while (j > 0 && sorted[j - 1] > g.free_milli) {
      sorted[j] = sorted[j - 1];
      --j;
    }
    sorted[j] = g.free_milli;
  }
  if (small) {
    for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + sorted[i];
  }
  // Whether the table knows which of its shapes the node's model is eligible for, and then its
  // view of the model (null: no shape names it).
  const bool by_table = table != nullptr && table->knows_models();
  const ShapeTable::NamedModel* named = by_table ? table->named_model(node.model) : nullptr;
  // A shape's counts (the same for the WideWorkload's copy of one of the shapes); shape `i` of
  // the evaluation's shapes, or one of the WideWorkload's others.
  auto count = [&](std::size_t i, const WorkloadShape& s, Counts& c) {
    if (by_table && i < shapes.size()) {
      c.eligible = named != nullptr ? named->eligible[i] != 0 : s.milli_per_gpu > 0 && s.allowed_models.empty();
    } else {
      // (The empty check inline: the scheduler's shapes allow any model, and the call showed.)
      c.eligible = s.milli_per_gpu > 0 && (s.allowed_models.empty() || ModelAllowed(s.allowed_models, node.model));
    }
    c.enough = 0;
    c.share_pods = 0;
    c.below = 0;
    c.whole_pods = c.eligible && IsShareShape(s) ? static_cast<std::uint16_t>(kOneGpu / s.milli_per_gpu) : 0;
    if (!c.eligible) return;
    if (small) {
      int below = 0;
      while (below < n && sorted[below] < s.milli_per_gpu) ++below;
      c.enough = n - below;
      c.below = static_cast<std::int32_t>(prefix[below]);
      return;
    }
    for (const GpuView& g : node.gpus) {
      if (!g.usable) continue;
      if (g.free_milli >= s.milli_per_gpu) {
        ++c.enough;
      } else {
        c.below += static_cast<std::int32_t>(g.free_milli);
      }
    }
  };
  // A shape's term of FGD's measure (without its weight).
  auto term = [&](const WorkloadShape& s, const Counts& c) {
    const bool fits = c.eligible && HostFits(s, node.cpu_milli_free, node.memory_free) && c.enough >= s.num_gpus;
    return static_cast<double>(fits ? c.below : free_total_);
  };
  // Each shape's counts, and its term of the fragmentation as NodeFragmentation() sums them
  // (the same products in the same order).
  double frag = 0;
  bool hosts = false;        // some shape that needs a GPU asks CPU or counted memory
  bool constrained = false;  // some shape that names models is eligible
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const WorkloadShape& s = shapes[i];
    Counts& c = counts_[i];
    count(i, s, c);
    const double t = term(s, c);
    frag += weight(i) * t;
    if (demand_) before_demand_ += demand_weight(i) * t;
    if (wide_weights_ != nullptr) before_wide_ += wide_weights_[i] * t;
    // The stranded measures can differ only if a shape that needs a GPU asks CPU or memory.
    hosts = hosts || (s.milli_per_gpu > 0 && (s.cpu_milli > 0 || (count_memory_ && s.host_memory > 0)));
    constrained = constrained || (c.eligible && !s.allowed_models.empty());
    if (extra.pooled) weight_sum_ += weight(i);
  }
  // The WideWorkload's other shapes.
  for (std::size_t i = shapes.size(); i < counted(); ++i) {
    count(i, wide_shapes_[i], counts_[i]);
    before_wide_ += wide_weights_[i] * term(wide_shapes_[i], counts_[i]);
  }
  if (free_total_ == 0) before_wide_ = 0;
  strands_ = extra.stranded && hosts;
  pools_ = extra.pooled && hosts;
  before_ = free_total_ == 0 ? 0 : frag;
  if (free_total_ == 0) before_demand_ = 0;
  if (pools_) {
    if (table != nullptr && !constrained) {
      hole_steps_ = table->unconstrained_steps();
    } else if (named != nullptr) {
      hole_steps_ = named->steps;
    } else {
      BuildHoleSteps(shapes, weights_, [&](std::size_t i) { return counts_[i].eligible; }, own_steps_);
      hole_steps_ = own_steps_;
    }
    for (std::size_t i = 0; i < node.gpus.size(); ++i) {
      const GpuView& g = node.gpus[i];
      gpu_need_[i] = g.usable ? HoleNeed(g.free_milli) : HostNeed{};
      if (!g.usable) continue;
      need_.cpu += gpu_need_[i].cpu;
      need_.memory += gpu_need_[i].memory;
    }
    before_pooled_ =
        free_total_ == 0 ? 0 : before_ + Pooled(before_, free_total_, need_, node.cpu_milli_free, node.memory_free);
  }
  cpu_ = extra.cpu;
  if (!strands_ && !cpu_) return;
  // The stranded and the CPU measures (a second pass, only where asked and, for the stranded
  // one, where it can differ: not in the daemon).
  double stranded_frag = 0;
  double cpu_frag = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const WorkloadShape& s = shapes[i];
    Counts& c = counts_[i];
    if (c.eligible && IsShareShape(s)) {
      for (const GpuView& g : node.gpus) {
        if (g.usable && g.free_milli >= s.milli_per_gpu) c.share_pods += static_cast<std::int32_t>(g.free_milli / s.milli_per_gpu);
      }
    }
    const std::int64_t pods = c.eligible ? PodsOnGpus(s, c) : 0;
    const std::int64_t fed = c.eligible ? FedUpTo(s, pods, node.cpu_milli_free, node.memory_free) : 0;
    if (strands_) {
      stranded_frag += weight(i) * (c.eligible ? StrandedTerm(pods, fed, c.below, free_total_) : static_cast<double>(free_total_));
    }
    if (cpu_) cpu_frag += weight(i) * CpuTerm(s, c.eligible, fed, node.cpu_milli_free, node.memory_free);
  }
  if (strands_) before_stranded_ = free_total_ == 0 ? 0 : stranded_frag;
  before_cpu_ = cpu_frag;
}

FragmentationEval::HostNeed FragmentationEval::HoleNeed(MilliGpu free) const {
  std::size_t j = 0;
  while (j < hole_steps_.size() && hole_steps_[j].from <= free) ++j;
  if (j == 0) return {};
  const double f = static_cast<double>(free);
  return {f * hole_steps_[j - 1].cpu, count_memory_ ? f * hole_steps_[j - 1].memory : 0};
}

FragmentationEval::HostNeed FragmentationEval::NeedAfter(const Chosen& chosen, MilliGpu milli) const {
  if (chosen.usable == 0) return need_;
  // The chosen GPUs' needs at their new free shares (once where they are alike), the others'
  // as counted, summed in GPU order as a fresh evaluation of the node after sums them.
  const HostNeed moved = chosen.uniform ? HoleNeed(chosen.free - milli) : HostNeed{};
  HostNeed need;
  for (std::size_t g = 0; g < node_.gpus.size(); ++g) {
    const GpuView& v = node_.gpus[g];
    if (!v.usable) continue;
    HostNeed h = gpu_need_[g];
    if (std::find(chosen.gpus.begin(), chosen.gpus.end(), static_cast<int>(g)) != chosen.gpus.end()) {
      h = chosen.uniform ? moved : HoleNeed(v.free_milli - milli);
    }
    need.cpu += h.cpu;
    need.memory += h.memory;
  }
  return need;
}

double FragmentationEval::Pooled(double frag, MilliGpu total, HostNeed need, std::int64_t cpu_free,
                                 Bytes memory_free) const {
  double fed = 1;
  if (need.cpu > 0) fed = std::min(fed, static_cast<double>(std::max<std::int64_t>(0, cpu_free)) / need.cpu);
  if (need.memory > 0) fed = std::min(fed, static_cast<double>(std::max<Bytes>(0, memory_free)) / need.memory);
  // weight_sum_ x total - frag: each fitting shape's weighted free milli at or above its share.
  return (weight_sum_ * static_cast<double>(total) - frag) * (1 - fed);
}

FragmentationEval::Chosen FragmentationEval::Summarise(std::span<const int> gpus) const {
  Chosen out{.gpus = gpus};
  for (int i : gpus) {
    const GpuView& g = node_.gpus[i];
    if (!g.usable) continue;
    if (out.usable++ == 0) {
      out.free = g.free_milli;
    } else if (g.free_milli != out.free) {
      out.uniform = false;
    }
  }
  return out;
}

template <bool kSharePods, bool kOne>
[[gnu::always_inline]] inline FragmentationEval::MovedCounts FragmentationEval::Moved(const WorkloadShape& s,
                                                                                    const Counts& c,
                                                                                    const Chosen& chosen,
                                                                                    MilliGpu milli) const {
  // Only the chosen GPUs change: move each one's contribution from its old free share to its
  // new one (across the shape's threshold or not). share_pods is read only for shares.
  MovedCounts out{c.enough, c.below, c.share_pods};
  const bool share_pods = kSharePods && c.whole_pods != 0;  // IsShareShape(s) (c is eligible)
  // One GPU's move, `times` times. Which side of the shape's share each free share falls is
  // what varies from shape to shape, so the counts move without a branch on it.
  auto move = [&](MilliGpu before, int times) {
    const MilliGpu m = s.milli_per_gpu;
    const MilliGpu after = before - milli;
    const bool had = before >= m;
    const bool has = after >= m;
    out.enough += times * (static_cast<int>(has) - static_cast<int>(had));
    out.below += times * ((has ? 0 : after) - (had ? 0 : before));
    if (share_pods) {
      if (had) out.share_pods -= times * (before / m);
      if (has) out.share_pods += times * (after / m);
    }
  };
  if (kOne) {
    move(chosen.free, 1);
    return out;
  }
  if (chosen.uniform) {
    if (chosen.usable > 0) move(chosen.free, chosen.usable);
    return out;
  }
  for (int i : chosen.gpus) {
    const GpuView& g = node_.gpus[i];
    if (g.usable) move(g.free_milli, 1);
  }
  return out;
}

double FragmentationEval::AfterStranded(std::int64_t cpu, std::span<const int> gpus, MilliGpu milli, Bytes memory) const {
  if (!strands_) return After(cpu, gpus, milli, memory);
  const Chosen chosen = Summarise(gpus);
  const MilliGpu total = FreeAfter(chosen, milli);
  if (total == 0) return 0;
  const std::int64_t cpu_free = node_.cpu_milli_free - cpu;
  const Bytes memory_free = node_.memory_free - memory;
  double frag = 0;
  for (std::size_t k = 0; k < shapes_.size(); ++k) {
    const WorkloadShape& s = shapes_[k];
    if (!counts_[k].eligible) {
      frag += weight(k) * static_cast<double>(total);
      continue;
    }
    const MovedCounts c = Moved<true>(s, counts_[k], chosen, milli);
    const std::int64_t pods = PodsOnGpus(s, c);
    frag += weight(k) * StrandedTerm(pods, FedUpTo(s, pods, cpu_free, memory_free), c.below, total);
  }
  return frag;
}

double FragmentationEval::After(std::int64_t cpu, std::span<const int> gpus, MilliGpu milli, Bytes memory,
                                double* demand) const {
  const Chosen chosen = Summarise(gpus);
  const MilliGpu total = FreeAfter(chosen, milli);
  const bool with_demand = demand_ && demand != nullptr;
  if (demand != nullptr) *demand = 0;
  if (total == 0) return 0;
  const std::int64_t cpu_free = node_.cpu_milli_free - cpu;
  const Bytes memory_free = node_.memory_free - memory;
  double frag = 0;
  double demand_frag = 0;
  for (std::size_t k = 0; k < shapes_.size(); ++k) {
    const WorkloadShape& s = shapes_[k];
    bool fits = counts_[k].eligible && HostFits(s, cpu_free, memory_free);
    MilliGpu below = 0;
    if (fits) {
      const MovedCounts c = Moved<false>(s, counts_[k], chosen, milli);
      below = c.below;
      fits = c.enough >= s.num_gpus;
    }
    const double term = static_cast<double>(fits ? below : total);
    frag += weight(k) * term;
    if (with_demand) demand_frag += demand_weight(k) * term;
  }
  if (with_demand) *demand = demand_frag;
  return frag;
}

template <FragmentationEval::Move kMove>
[[gnu::always_inline]] inline FragmentationEval::MovedCounts FragmentationEval::MovedBy(const WorkloadShape& s,
                                                                                      const Counts& c,
                                                                                      const Chosen& chosen,
                                                                                      MilliGpu milli) const {
  if constexpr (kMove == Move::kNone) {
    return {c.enough, c.below, c.share_pods};
  } else if constexpr (kMove == Move::kWhole) {
    // Whole free GPUs taken whole: each leaves every shape's count of GPUs with its share free
    // (every share up to a whole GPU fits in one) and adds nothing below it; a share shape
    // loses the pods a whole GPU holds.
    if (s.milli_per_gpu > kOneGpu) return Moved<true>(s, c, chosen, milli);
    return {c.enough - chosen.usable, c.below, c.share_pods - std::int64_t{chosen.usable} * c.whole_pods};
  } else {
    return Moved<true, kMove == Move::kOne>(s, c, chosen, milli);
  }
}

FragmentationEval::Sums FragmentationEval::AfterAllSums(const Chosen& chosen, MilliGpu milli, MilliGpu total,
                                                        std::int64_t cpu_free, Bytes memory_free, bool with_demand,
                                                        bool with_stranded, bool with_wide, bool with_cpu) const {
  // The same terms in the same order as After() and AfterStranded(), in four sums.
  Sums sums;
  for (std::size_t k = 0; k < shapes_.size(); ++k) {
    const WorkloadShape& s = shapes_[k];
    const Counts& before = counts_[k];
    double term = static_cast<double>(total);
    if (before.eligible) {
      const bool host = HostFits(s, cpu_free, memory_free);
      // Short of the CPU or memory the shape asks for one pod: every free milli in every
      // measure (not HostFits(), and FedUpTo() is 0).
      const bool starved = (s.cpu_milli > 0 && cpu_free < s.cpu_milli) ||
                           (count_memory_ && s.host_memory > 0 && memory_free < s.host_memory);
      if (starved) {
        if (with_stranded) sums.stranded += weight(k) * term;
        if (with_cpu) sums.cpu += weight(k) * CpuTerm(s, true, 0, cpu_free, memory_free);
      } else if (with_stranded || with_cpu) {
        const MovedCounts c = Moved<true>(s, before, chosen, milli);
        if (host && c.enough >= s.num_gpus) term = static_cast<double>(c.below);
        const std::int64_t pods = PodsOnGpus(s, c);
        const std::int64_t fed = FedUpTo(s, pods, cpu_free, memory_free);
        if (with_stranded) sums.stranded += weight(k) * StrandedTerm(pods, fed, c.below, total);
        if (with_cpu) sums.cpu += weight(k) * CpuTerm(s, true, fed, cpu_free, memory_free);
      } else if (host) {
        const MovedCounts c = Moved<false>(s, before, chosen, milli);
        if (c.enough >= s.num_gpus) term = static_cast<double>(c.below);
      }
    } else {
      if (with_stranded) sums.stranded += weight(k) * static_cast<double>(total);
      if (with_cpu) sums.cpu += weight(k) * CpuTerm(s, false, 0, cpu_free, memory_free);
    }
    sums.frag += weight(k) * term;
    if (with_demand) sums.demand += demand_weight(k) * term;
    if (with_wide) sums.wide += wide_weights_[k] * term;
  }
  if (!with_wide) return sums;
  // The WideWorkload's other shapes: FGD's terms, as After() counts them.
  for (std::size_t k = shapes_.size(); k < wide_shapes_.size(); ++k) {
    const WorkloadShape& s = wide_shapes_[k];
    double term = static_cast<double>(total);
    if (counts_[k].eligible && HostFits(s, cpu_free, memory_free)) {
      const MovedCounts c = Moved<false>(s, counts_[k], chosen, milli);
      if (c.enough >= s.num_gpus) term = static_cast<double>(c.below);
    }
    sums.wide += wide_weights_[k] * term;
  }
  return sums;
}

template <FragmentationEval::Move kMove, bool kWide, bool kCpu>
FragmentationEval::Sums FragmentationEval::AfterAllFast(const Chosen& chosen, MilliGpu milli, MilliGpu total,
                                                        std::int64_t cpu_free, Bytes memory_free) const {
  // AfterAllSums() with memory counted, every measure asked, and the host's free CPU and memory
  // not negative: a shape is then short of one pod's CPU or memory exactly where it does not
  // get them (HostFits()), and the host feeds a shape that asks none of either without limit.
  // The same terms in the same order.
  Sums sums;
  const double all = static_cast<double>(total);
  for (std::size_t k = 0; k < shapes_.size(); ++k) {
    const WorkloadShape& s = shapes_[k];
    const Counts& before = counts_[k];
    double term = all;
    if (!before.eligible) {
      sums.stranded += weight(k) * all;
      if (kCpu) sums.cpu += weight(k) * CpuTerm(s, false, 0, cpu_free, memory_free);
    } else if (cpu_free < s.cpu_milli || memory_free < s.host_memory) {
      sums.stranded += weight(k) * all;
      // (Every free CPU: FedUpTo() is 0.)
      if (kCpu) sums.cpu += weight(k) * static_cast<double>(cpu_free);
    } else {
      const MovedCounts c = MovedBy<kMove>(s, before, chosen, milli);
      if (c.enough >= s.num_gpus) term = static_cast<double>(c.below);
      std::int64_t pods = before.whole_pods != 0 ? c.share_pods : s.num_gpus <= 1 ? c.enough : c.enough / s.num_gpus;
      // FedUpTo() without its guards: where the host cannot feed `pods` pods, the shape asks
      // some of what runs short (a positive divisor), and what the host has is not negative.
      std::int64_t fed = pods;
      if (fed > 0) {
        if (cpu_free < fed * s.cpu_milli) fed = cpu_free / s.cpu_milli;
        if (memory_free < fed * s.host_memory) fed = memory_free / s.host_memory;
      }
      sums.stranded += weight(k) * StrandedTerm(pods, fed, c.below, total);
      // CpuTerm() of an eligible shape, the host's CPU not negative.
      if (kCpu) sums.cpu += weight(k) * static_cast<double>(s.cpu_milli > 0 ? cpu_free - fed * s.cpu_milli : cpu_free);
    }
    sums.frag += weight(k) * term;
    sums.demand += demand_weight(k) * term;
    if (kWide) sums.wide += wide_weights_[k] * term;
  }
  if (!kWide) return sums;
  // The WideWorkload's other shapes: FGD's terms.
  for (std::size_t k = shapes_.size(); k < wide_shapes_.size(); ++k) {
    const WorkloadShape& s = wide_shapes_[k];
    const Counts& before = counts_[k];
    double term = all;
    if (before.eligible && cpu_free >= s.cpu_milli && memory_free >= s.host_memory) {
      const MovedCounts c = MovedBy<kMove>(s, before, chosen, milli);
      if (c.enough >= s.num_gpus) term = static_cast<double>(c.below);
    }
    sums.wide += wide_weights_[k] * term;
  }
  return sums;
}

template <bool kWide, bool kCpu>
FragmentationEval::Sums FragmentationEval::AfterAllFastBy(const Chosen& chosen, MilliGpu milli, MilliGpu total,
                                                          std::int64_t cpu_free, Bytes memory_free) const {
  // CPU-only work moves no GPU.
  if (chosen.usable == 0) return AfterAllFast<Move::kNone, kWide, kCpu>(chosen, milli, total, cpu_free, memory_free);
  if (chosen.uniform && chosen.free == kOneGpu && milli == kOneGpu) {
    return AfterAllFast<Move::kWhole, kWide, kCpu>(chosen, milli, total, cpu_free, memory_free);
  }
  if (chosen.usable == 1) return AfterAllFast<Move::kOne, kWide, kCpu>(chosen, milli, total, cpu_free, memory_free);
  return AfterAllFast<Move::kAny, kWide, kCpu>(chosen, milli, total, cpu_free, memory_free);
}

double FragmentationEval::AfterAll(std::int64_t cpu, std::span<const int> gpus, MilliGpu milli, Bytes memory,
                                   double* demand, double* stranded, double* pooled, double* wide,
                                   double* cpu_frag) const {
  const Chosen chosen = Summarise(gpus);
  const MilliGpu total = FreeAfter(chosen, milli);
  const std::int64_t cpu_free = node_.cpu_milli_free - cpu;
  const Bytes memory_free = node_.memory_free - memory;
  const bool with_cpu = cpu_ && cpu_frag != nullptr;
  if (demand != nullptr) *demand = 0;
  if (stranded != nullptr) *stranded = 0;
  if (pooled != nullptr) *pooled = 0;
  if (wide != nullptr) *wide = 0;
  if (cpu_frag != nullptr) *cpu_frag = 0;
  if (total == 0) {
    // No free GPU left: every GPU measure is 0, but the CPU may still serve CPU-only pods.
    if (with_cpu) *cpu_frag = CpuWithoutGpus(cpu_free, memory_free);
    return 0;
  }
  const bool with_demand = demand_ && demand != nullptr;
  const bool with_stranded = strands_ && stranded != nullptr;
  const bool with_wide = wide_weights_ != nullptr && wide != nullptr;
  Sums sums;
  if (count_memory_ && with_demand && with_stranded && cpu_free >= 0 && memory_free >= 0) {
    // The simulator's case, one loop for each way the GPUs move and measure asked.
    if (with_wide) {
      sums = with_cpu ? AfterAllFastBy<true, true>(chosen, milli, total, cpu_free, memory_free)
                      : AfterAllFastBy<true, false>(chosen, milli, total, cpu_free, memory_free);
    } else {
      sums = with_cpu ? AfterAllFastBy<false, true>(chosen, milli, total, cpu_free, memory_free)
                      : AfterAllFastBy<false, false>(chosen, milli, total, cpu_free, memory_free);
    }
  } else {
    sums = AfterAllSums(chosen, milli, total, cpu_free, memory_free, with_demand, with_stranded, with_wide, with_cpu);
  }
  const double frag = sums.frag;
  if (with_cpu) *cpu_frag = sums.cpu;
  if (with_demand) *demand = sums.demand;
  if (with_wide) *wide = sums.wide;
  if (stranded != nullptr) *stranded = with_stranded ? sums.stranded : frag;
  if (pooled != nullptr && pools_) {
    *pooled = frag + Pooled(frag, total, NeedAfter(chosen, milli), cpu_free, memory_free);
  } else if (pooled != nullptr) {
    *pooled = frag;
  }
  return frag;
}

double FragmentationDrop(const PlacementRequest& req, const NodeView& node, std::span<const int> gpus,
                         double before, std::span<const WorkloadShape> shapes) {
  const FragmentationEval eval(node, shapes);
  return before - eval.After(req.cpu_milli, gpus, req.milli_per_gpu);
}

double FgdQuantisedScore(double drop) {
  constexpr double kMaxNodeScore = 100;
  return static_cast<double>(static_cast<std::int64_t>(kMaxNodeScore / (1.0 + std::exp(-drop / 1000))));
}

std::optional<NodeChoice> FgdChoice(const PlacementRequest& req, const NodeView& node,
                                    std::span<const WorkloadShape> shapes, Resources resources) {
  const FragmentationEval eval(node, shapes, resources);
  return FgdChoice(req, node, eval);
}

std::optional<NodeChoice> FgdChoice(const PlacementRequest& req, const NodeView& node,
                                    const FragmentationEval& eval) {
  const double before = eval.before();
  if (!IsShare(req)) {
    std::vector<int> gpus = BestFitGpus(req, node);
    if (req.num_gpus > 0 && gpus.empty()) return std::nullopt;
    const double score = FgdQuantisedScore(before - eval.After(req.cpu_milli, gpus, req.milli_per_gpu, req.host_memory));
    return NodeChoice{score, std::move(gpus)};
  }
  int best = -1;
  double best_score = 0;
  for (int i = 0; i < static_cast<int>(node.gpus.size()); ++i) {
    const GpuView& g = node.gpus[i];
    if (!g.usable || g.free_milli < req.milli_per_gpu) continue;
    const double s = FgdQuantisedScore(before - eval.AfterOne(req.cpu_milli, i, req.milli_per_gpu, req.host_memory));
    if (best < 0 || s > best_score) {
      best = i;
      best_score = s;
    }
  }
  if (best < 0) return std::nullopt;
  return NodeChoice{best_score, {best}};
}

}  // namespace gpuslice::sched
