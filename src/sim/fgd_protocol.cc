#include "sim/fgd_protocol.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "sched/placement/fgd_frag.h"
#include "sim/cluster.h"
#include "sim/placer.h"

namespace gpuslice::sim {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::int64_t kDefaultCpuRequest = 100;  // Kubernetes' non-zero default for 0 CPU

std::int64_t NonZeroCpu(std::int64_t cpu) { return cpu == 0 ? kDefaultCpuRequest : cpu; }

// FNV-1a of the 8 bytes of `v` into `h`.
void Digest(std::uint64_t& h, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ULL;
  }
}

using ShapeKey = std::tuple<std::int64_t, MilliGpu, int, std::string>;  // cpu, milli, num, spec
}  // namespace

double RoundHalfEven(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::nearbyint(x * scale) / scale;  // default rounding mode: to nearest, ties to even
}

namespace {
// A shape's pods: how many, their CPU requests and host memory, and one of them (its model
// constraint).
struct ShapePods {
  std::int64_t count = 0;
  std::vector<std::int64_t> cpu;
  std::vector<Bytes> memory;
  const TracePod* example = nullptr;
  void Add(const TracePod& p) {
    ++count;
    cpu.push_back(NonZeroCpu(p.cpu_milli));
    memory.push_back(p.memory);
    if (example == nullptr) example = &p;
  }
};

// The lower median of `v` (reordered).
template <typename T>
T LowerMedian(std::vector<T>& v) {
  std::nth_element(v.begin(), v.begin() + (v.size() - 1) / 2, v.end());
  return v[(v.size() - 1) / 2];
}

sched::WorkloadShape ShapeOf(std::int64_t cpu, MilliGpu milli, int num, ShapePods& pods, double total) {
  sched::WorkloadShape s;
  s.cpu_milli = cpu;
  s.milli_per_gpu = milli;
  s.num_gpus = num;
  s.allowed_models = pods.example->allowed_models;
  s.frequency = static_cast<double>(pods.count) / total;
  // The key leaves memory out, as the artifact's does, so its pods may ask different amounts.
  s.host_memory = LowerMedian(pods.memory);
  return s;
}

// The pods by shape, in TypicalShapes() order, and how many of them are typical.
struct CountedShapes {
  std::vector<std::pair<ShapeKey, ShapePods>> sorted;
  std::size_t typical = 0;
  double typical_pods = 0;
};

CountedShapes CountShapes(const std::vector<TracePod>& pods, double coverage) {
  std::map<ShapeKey, ShapePods> by_key;
  for (const TracePod& p : pods) {
    by_key[ShapeKey{NonZeroCpu(p.cpu_milli), p.milli_per_gpu, p.num_gpus, p.gpu_spec}].Add(p);
  }
  CountedShapes out;
  out.sorted.assign(std::make_move_iterator(by_key.begin()), std::make_move_iterator(by_key.end()));
  std::sort(out.sorted.begin(), out.sorted.end(), [](const auto& a, const auto& b) {
    if (a.second.count != b.second.count) return a.second.count > b.second.count;
    return a.first > b.first;  // the artifact's reverse order on (cpu, milli, num, spec)
  });
  const double wanted = coverage * static_cast<double>(pods.size());
  while (out.typical_pods < wanted && out.typical < out.sorted.size()) {
    out.typical_pods += static_cast<double>(out.sorted[out.typical++].second.count);
  }
  return out;
}

// The GPU a shape's pods ask, in milli-GPU.
double GpuAsked(MilliGpu milli, int num, std::int64_t count) {
  return static_cast<double>(milli) * num * static_cast<double>(count);
}
}  // namespace

std::vector<sched::WorkloadShape> TypicalShapes(const std::vector<TracePod>& pods, double coverage) {
  CountedShapes c = CountShapes(pods, coverage);
  std::vector<sched::WorkloadShape> out;
  for (std::size_t i = 0; i < c.typical; ++i) {
    auto& [key, shape_pods] = c.sorted[i];
    out.push_back(ShapeOf(std::get<0>(key), std::get<1>(key), std::get<2>(key), shape_pods, c.typical_pods));
  }
  return out;
}

std::vector<sched::WorkloadShape> DemandShapes(const std::vector<TracePod>& pods, double coverage) {
  CountedShapes c = CountShapes(pods, coverage);
  double asked = 0;
  double covered = 0;
  for (std::size_t i = 0; i < c.sorted.size(); ++i) {
    const auto& [key, shape_pods] = c.sorted[i];
    const double gpu = GpuAsked(std::get<1>(key), std::get<2>(key), shape_pods.count);
    asked += gpu;
    if (i < c.typical) covered += gpu;
  }
  // The other pods by GPU request (milli, GPU count, spec), CPU-only ones left out (they ask none).
  std::map<std::tuple<MilliGpu, int, std::string>, ShapePods> groups;
  for (std::size_t i = c.typical; i < c.sorted.size(); ++i) {
    const auto& [key, shape_pods] = c.sorted[i];
    if (std::get<1>(key) <= 0 || std::get<2>(key) <= 0) continue;
    ShapePods& g = groups[{std::get<1>(key), std::get<2>(key), std::get<3>(key)}];
    g.count += shape_pods.count;
    g.cpu.insert(g.cpu.end(), shape_pods.cpu.begin(), shape_pods.cpu.end());
    g.memory.insert(g.memory.end(), shape_pods.memory.begin(), shape_pods.memory.end());
    if (g.example == nullptr) g.example = shape_pods.example;
  }
  std::vector<std::pair<std::tuple<MilliGpu, int, std::string>, ShapePods>> by_gpu(
      std::make_move_iterator(groups.begin()), std::make_move_iterator(groups.end()));
  // Most GPU asked first; equal ones in key order (the map's, kept by the stable sort).
  std::stable_sort(by_gpu.begin(), by_gpu.end(), [](const auto& a, const auto& b) {
    return GpuAsked(std::get<0>(a.first), std::get<1>(a.first), a.second.count) >
           GpuAsked(std::get<0>(b.first), std::get<1>(b.first), b.second.count);
  });
  std::size_t added = 0;
  double total = c.typical_pods;
  while (added < by_gpu.size() && covered < coverage * asked) {
    const auto& [key, g] = by_gpu[added++];
    covered += GpuAsked(std::get<0>(key), std::get<1>(key), g.count);
    total += static_cast<double>(g.count);
  }
  std::vector<sched::WorkloadShape> out;
  for (std::size_t i = 0; i < c.typical; ++i) {
    auto& [key, shape_pods] = c.sorted[i];
    out.push_back(ShapeOf(std::get<0>(key), std::get<1>(key), std::get<2>(key), shape_pods, total));
  }
  for (std::size_t i = 0; i < added; ++i) {
    auto& [key, g] = by_gpu[i];
    out.push_back(ShapeOf(LowerMedian(g.cpu), std::get<0>(key), std::get<1>(key), g, total));
  }
  return out;
}

FgdInputs MakeFgdInputs(std::vector<TraceNode> nodes, std::vector<TracePod> pods) {
  FgdInputs in{std::move(nodes), std::move(pods), {}, {}, 0};
  in.shapes = TypicalShapes(in.pods);
  in.demand_shapes = DemandShapes(in.pods);
  // Nothing beyond the typical shapes (then with the same frequencies): a policy reading it
  // would only compute the same measure twice.
  if (in.demand_shapes.size() == in.shapes.size()) in.demand_shapes.clear();
  const Cluster empty(in.nodes);
  std::vector<sched::NodeView> views;
  views.reserve(empty.size());
  for (std::size_t i = 0; i < empty.size(); ++i) views.push_back(empty.View(i));
  sched::SetSupplyShares(in.shapes, views);
  sched::SetSupplyShares(in.demand_shapes, views);
  double cpu = 0, gpu = 0;
  for (const sched::NodeView& v : views) {
    cpu += static_cast<double>(v.cpu_milli_total);
    gpu += static_cast<double>(v.gpus.size()) * kOneGpu;
  }
  in.cpu_per_gpu_milli = gpu > 0 ? cpu / gpu : 0;
  return in;
}

sched::PlacementRequest ToRequest(const TracePod& pod) {
  sched::PlacementRequest r;
  r.cpu_milli = NonZeroCpu(pod.cpu_milli);
  r.host_memory = pod.memory;
  r.num_gpus = pod.num_gpus;
  r.milli_per_gpu = pod.milli_per_gpu;
  r.allowed_models = pod.allowed_models;
  return r;
}

std::vector<int> ArrivalOrder(const std::vector<TracePod>& pods, std::uint64_t seed, double inflation,
                              MilliGpu capacity_milli) {
  std::vector<int> order(pods.size());
  for (std::size_t i = 0; i < pods.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return pods[a].name < pods[b].name; });
  std::mt19937_64 rng(seed);
  for (std::size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[sched::UniformIndex(rng, i)]);
  }
  MilliGpu total = 0;
  for (const TracePod& p : pods) total += p.milli_per_gpu * p.num_gpus;
  const double target = inflation * static_cast<double>(capacity_milli);
  if (inflation <= 0 || static_cast<double>(total) >= target || total == 0) return order;
  const std::vector<int> originals = order;
  for (;;) {
    const int pick = originals[sched::UniformIndex(rng, originals.size())];
    // The artifact's stop test adds the drawn pod's per-GPU milli, while the running total
    // grows by its total milli; kept as is to reproduce its pod counts.
    if (static_cast<double>(total + pods[pick].milli_per_gpu) > target) break;
    total += pods[pick].milli_per_gpu * pods[pick].num_gpus;
    order.push_back(pick);
  }
  return order;
}

IdleBreakdown ClassifyIdle(const sched::NodeView& node, std::span<const sched::WorkloadShape> shapes) {
  const double free = static_cast<double>(sched::FreeMilli(node));
  double gpu_frequency = 0, cpu_only = 0;
  for (const sched::WorkloadShape& s : shapes) (s.num_gpus > 0 ? gpu_frequency : cpu_only) += s.frequency;
  if (gpu_frequency <= 0) return IdleBreakdown{.usable = 0, .stranded = 0, .no_fit = free};
  // FGD's measure, without the CPU-only shapes (each counts every free milli) and renormalised:
  // on the node as it is (what is stranded or fits no GPU request), and on the node with
  // unbounded CPU and memory (what fits no GPU request).
  auto fragment = [&](const sched::NodeView& n) {
    return (sched::NodeFragmentation(n, shapes, sched::Resources::kCpuAndMemory) - cpu_only * free) / gpu_frequency;
  };
  sched::NodeView unbounded = node;
  unbounded.cpu_milli_free = std::numeric_limits<std::int64_t>::max();
  unbounded.memory_free = std::numeric_limits<Bytes>::max();
  const double all = fragment(node), no_fit = fragment(unbounded);
  return IdleBreakdown{.usable = free - all, .stranded = all - no_fit, .no_fit = no_fit};
}

FgdRun RunFgdOnce(const FgdInputs& in, const sched::PlacementPolicy& policy, std::uint64_t seed,
                  double inflation, const std::function<void(double)>& progress, TieBreak tie) {
  const auto t0 = std::chrono::steady_clock::now();
  Cluster cluster(in.nodes);
  const MilliGpu capacity = cluster.capacity_milli();
  const std::vector<int> order = ArrivalOrder(in.pods, seed, inflation, capacity);

  // Requests and their dense classes (identical requests share a class, for the score cache).
  std::vector<sched::PlacementRequest> requests;
  std::vector<int> klass(in.pods.size());
  {
    std::map<std::tuple<std::int64_t, Bytes, int, MilliGpu, std::string>, int> ids;
    for (std::size_t i = 0; i < in.pods.size(); ++i) {
      const TracePod& p = in.pods[i];
      auto [it, added] = ids.emplace(std::make_tuple(NonZeroCpu(p.cpu_milli), p.memory, p.num_gpus, p.milli_per_gpu, p.gpu_spec),
                                     static_cast<int>(requests.size()));
      if (added) requests.push_back(ToRequest(p));
      klass[i] = it->second;
    }
  }

  std::mt19937_64 tie_rng(seed * 0x9E3779B97F4A7C15ULL + 1);
  std::mt19937_64 policy_rng(seed * 0xD1B54A32D192ED03ULL + 7);
  sched::PlacementContext ctx{in.shapes, &policy_rng, in.demand_shapes, in.cpu_per_gpu_milli};
  Placer placer(policy, ctx, tie, &tie_rng);

  std::vector<double> node_frag(cluster.size());
  double frag_total = 0;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    node_frag[i] = sched::NodeFragmentation(cluster.View(i), in.shapes);
    frag_total += node_frag[i];
  }

  std::array<double, kMaxPercent + 1> sum_alloc{}, sum_frag{}, sum_rate{};
  std::array<int, kMaxPercent + 1> rows{};
  const double gpus = static_cast<double>(capacity) / kOneGpu;
  FgdRun run;
  run.policy = std::string(policy.name());
  run.seed = seed;
  run.pods = static_cast<std::int64_t>(order.size());
  run.capacity_milli = capacity;
  MilliGpu arrived = 0;
  std::size_t done = 0;
  for (int pod : order) {
    const sched::PlacementRequest& req = requests[klass[pod]];
    arrived += req.milli_per_gpu * req.num_gpus;
    std::optional<Chosen> c = placer.Place(cluster, req, klass[pod]);
    Digest(run.digest, static_cast<std::uint64_t>(pod));
    Digest(run.digest, c ? c->node : ~std::uint64_t{0});
    if (c) {
      for (int g : c->gpus) Digest(run.digest, static_cast<std::uint64_t>(g));
    }
    if (c) {
      cluster.Apply(req, c->node, c->gpus, +1);
      frag_total -= node_frag[c->node];
      node_frag[c->node] = sched::NodeFragmentation(cluster.View(c->node), in.shapes);
      frag_total += node_frag[c->node];
    } else {
      ++run.failed;
      const bool cpu_only = req.num_gpus == 0;
      run.failed_cpu_only += cpu_only ? 1 : 0;
      if (placer.last_fitted()) {
        ++run.refused;
        run.refused_cpu_only += cpu_only ? 1 : 0;
      }
    }
    // One row per pod, bucketed like the authors' analysis: arrived % rounded half-even.
    const double arrived_pct = static_cast<double>(arrived) / gpus / 10;
    const double bucket = RoundHalfEven(arrived_pct, 0);
    if (bucket >= 0 && bucket <= kMaxPercent) {
      const int b = static_cast<int>(bucket);
      const double idle = static_cast<double>(capacity - cluster.allocated_milli());
      sum_alloc[b] += RoundHalfEven(static_cast<double>(cluster.allocated_milli()) / gpus / 10, 2);
      sum_frag[b] += 100 * frag_total / static_cast<double>(capacity);
      sum_rate[b] += idle > 0 ? 100 * frag_total / idle : 0;
      ++rows[b];
    }
    ++done;
    if (progress && (done & 255) == 0) progress(static_cast<double>(done) / static_cast<double>(order.size()));
  }
  for (int x = 0; x <= kMaxPercent; ++x) {
    // Like the analysis: the rows of bucket x, else those of x-1..x+1.
    double a = sum_alloc[x], f = sum_frag[x], r = sum_rate[x];
    int n = rows[x];
    if (n == 0) {
      for (int y = std::max(0, x - 1); y <= std::min(kMaxPercent, x + 1); ++y) {
        a += sum_alloc[y];
        f += sum_frag[y];
        r += sum_rate[y];
        n += rows[y];
      }
    }
    run.curves.alloc_pct[x] = n ? RoundHalfEven(a / n, 2) : kNaN;
    run.curves.frag_pct[x] = n ? f / n : kNaN;
    run.curves.frag_rate_pct[x] = n ? r / n : kNaN;
  }
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    run.final_idle += ClassifyIdle(cluster.View(i), in.shapes);
    run.cpu_total_milli += cluster.node(i).cpu_total;
    run.final_cpu_alloc_milli += cluster.node(i).cpu_total - cluster.node(i).cpu_free;
  }
  run.final_alloc_milli = cluster.allocated_milli();
  run.final_arrived_pct = static_cast<double>(arrived) / gpus / 10;
  run.scored = placer.scored();
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (progress) progress(1.0);
  return run;
}

FgdCurves MeanCurves(const std::vector<const FgdRun*>& runs) {
  FgdCurves out;
  for (int x = 0; x <= kMaxPercent; ++x) {
    double a = 0, f = 0, r = 0;
    bool all = !runs.empty();
    for (const FgdRun* run : runs) {
      if (std::isnan(run->curves.alloc_pct[x])) all = false;
      a += run->curves.alloc_pct[x];
      f += run->curves.frag_pct[x];
      r += run->curves.frag_rate_pct[x];
    }
    const double n = static_cast<double>(runs.size());
    out.alloc_pct[x] = all ? a / n : kNaN;
    out.frag_pct[x] = all ? f / n : kNaN;
    out.frag_rate_pct[x] = all ? r / n : kNaN;
  }
  return out;
}

}  // namespace gpuslice::sim
