#include "profile/analysis.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

namespace gpuslice::profile {
namespace {

// Disjoint, sorted union of spans, for "was the CPU inside X at time t" lookups.
class SpanSet {
 public:
  explicit SpanSet(const std::vector<CpuSpan>& spans) {
    for (const CpuSpan& s : spans) {  // input sorted by start
      if (!v_.empty() && s.start <= v_.back().second) {
        v_.back().second = std::max(v_.back().second, s.end);
      } else {
        v_.emplace_back(s.start, s.end);
      }
    }
  }
  bool Contains(Nanos t) const {
    auto it = std::upper_bound(v_.begin(), v_.end(), t,
                               [](Nanos x, const std::pair<Nanos, Nanos>& p) { return x < p.first; });
    if (it == v_.begin()) return false;
    --it;
    return t >= it->first && t < it->second;
  }

 private:
  std::vector<std::pair<Nanos, Nanos>> v_;
};

// Sweep classes: the GPU-active phases and the two CPU-side phases that can hide GPU idle.
// Order of Phase is the priority order (lower index wins).
constexpr int kFirstCpuPhase = static_cast<int>(Phase::kDataLoading);

struct Edge {
  Nanos t;
  std::int8_t phase;  // Phase index, or -1 for a step boundary
  std::int8_t delta;  // +1 start, -1 end
  std::int32_t step;  // for step boundaries
};

std::vector<ProfilerStep> BuildSteps(const ParsedTrace& t, StepSource* source) {
  std::vector<ProfilerStep> steps;
  if (!t.steps.empty()) {
    *source = StepSource::kProfilerStep;
    steps = t.steps;
  } else if (t.data_loading.size() >= 2) {
    *source = StepSource::kDataLoader;
    Nanos last_end = t.data_loading.back().end;
    for (const GpuEvent& g : t.gpu) last_end = std::max(last_end, g.end);
    for (const CpuSpan& o : t.optimizer) last_end = std::max(last_end, o.end);
    for (std::size_t i = 0; i < t.data_loading.size(); ++i) {
      Nanos end = i + 1 < t.data_loading.size() ? t.data_loading[i + 1].start : last_end;
      steps.push_back({static_cast<std::int64_t>(i), t.data_loading[i].start, end,
                       t.data_loading[i].tid});
    }
  } else if (t.events_read > 0) {
    *source = StepSource::kWholeTrace;
    steps.push_back({0, t.first_ts, t.last_ts, 0});
  }
  // Steps must not overlap for the sweep; a later step cuts an earlier one short.
  for (std::size_t i = 0; i + 1 < steps.size(); ++i) {
    steps[i].end = std::min(steps[i].end, steps[i + 1].start);
  }
  return steps;
}

std::int64_t MainThread(const ParsedTrace& t, const std::vector<ProfilerStep>& steps) {
  if (!steps.empty() && !t.steps.empty()) return steps.front().tid;
  if (!t.data_loading.empty()) return t.data_loading.front().tid;
  std::unordered_map<std::int64_t, std::int64_t> counts;
  for (const Launch& l : t.launches) ++counts[l.tid];
  std::int64_t best = 0, n = -1;
  for (auto [tid, c] : counts) {
    if (c > n || (c == n && tid < best)) { best = tid; n = c; }
  }
  return best;
}

class Sweeper {
 public:
  Sweeper(const ParsedTrace& t, TraceAnalysis* a, std::vector<ProfilerStep> steps, int bins)
      : t_(t), a_(a), steps_(std::move(steps)) {
    if (bins > 0 && !steps_.empty()) {
      Nanos span = std::max<Nanos>(1, steps_.back().end - steps_.front().start);
      a_->timeline.start = steps_.front().start;
      a_->timeline.bin_width = std::max<Nanos>(1, (span + bins - 1) / bins);
      a_->timeline.bins.assign(static_cast<std::size_t>(bins), PhaseTimes{});
    }
    gpu_starts_.reserve(t.gpu.size());
    for (const GpuEvent& g : t.gpu) gpu_starts_.push_back(g.start);
  }

  void Run(const std::vector<Edge>& edges) {
    counts_.fill(0);
    for (std::size_t i = 0; i < edges.size();) {
      Nanos t = edges[i].t;
      if (i > 0) Segment(prev_, t);
      // Apply every edge at this instant: ends and starts together.
      for (; i < edges.size() && edges[i].t == t; ++i) {
        const Edge& e = edges[i];
        if (e.phase < 0) {
          if (e.delta < 0 && cur_step_ == e.step) { CloseIdle(t); cur_step_ = -1; }
          else if (e.delta > 0) cur_step_ = e.step;
        } else {
          counts_[static_cast<std::size_t>(e.phase)] += e.delta;
        }
      }
      prev_ = t;
    }
  }

 private:
  void Segment(Nanos from, Nanos to) {
    if (cur_step_ < 0 || to <= from) return;
    StepBreakdown& s = a_->steps[static_cast<std::size_t>(cur_step_)];
    int phase = -1;
    for (int p = 0; p < static_cast<int>(Phase::kIdleHostBound); ++p) {
      if (counts_[static_cast<std::size_t>(p)] > 0) { phase = p; break; }
    }
    if (counts_[static_cast<std::size_t>(Phase::kCommunication)] > 0) s.communication_raw += to - from;
    if (counts_[static_cast<std::size_t>(Phase::kDataLoading)] > 0) s.data_loading_raw += to - from;
    if (phase < 0) {
      if (idle_start_ < 0) idle_start_ = from;
      return;
    }
    CloseIdle(from);
    s.phases[static_cast<std::size_t>(phase)] += to - from;
    AddBins(from, to, static_cast<Phase>(phase));
  }

  // Splits the idle run [idle_start_, end) into host-bound and waiting (see analysis.h).
  void CloseIdle(Nanos end) {
    if (idle_start_ < 0 || cur_step_ < 0) { idle_start_ = -1; return; }
    Nanos start = idle_start_;
    idle_start_ = -1;
    if (end <= start) return;
    StepBreakdown& s = a_->steps[static_cast<std::size_t>(cur_step_)];
    Nanos host = end - start;  // nothing follows in this step: the CPU is busy elsewhere
    auto it = std::lower_bound(gpu_starts_.begin(), gpu_starts_.end(), end);
    if (it != gpu_starts_.end() && *it < s.end) {
      const GpuEvent& next = t_.gpu[static_cast<std::size_t>(it - gpu_starts_.begin())];
      const Launch* l = t_.FindLaunch(next.correlation);
      host = l == nullptr ? 0 : std::clamp<Nanos>(l->start - start, 0, end - start);
    }
    s.phases[static_cast<std::size_t>(Phase::kIdleHostBound)] += host;
    s.phases[static_cast<std::size_t>(Phase::kIdleWaiting)] += end - start - host;
    AddBins(start, start + host, Phase::kIdleHostBound);
    AddBins(start + host, end, Phase::kIdleWaiting);
  }

  void AddBins(Nanos from, Nanos to, Phase p) {
    TimelineBins& tl = a_->timeline;
    if (tl.bins.empty() || to <= from) return;
    const auto n = static_cast<Nanos>(tl.bins.size());
    Nanos b = (from - tl.start) / tl.bin_width;
    while (from < to && b < n) {
      if (b < 0) b = 0;
      Nanos bin_end = tl.start + (b + 1) * tl.bin_width;
      Nanos piece_end = std::min(to, bin_end);
      if (piece_end > from) tl.bins[static_cast<std::size_t>(b)][static_cast<std::size_t>(p)] += piece_end - from;
      from = piece_end;
      ++b;
    }
  }

  const ParsedTrace& t_;
  TraceAnalysis* a_;
  std::vector<ProfilerStep> steps_;
  std::vector<Nanos> gpu_starts_;
  std::array<int, kPhaseCount> counts_{};
  int cur_step_ = -1;
  Nanos prev_ = 0;
  Nanos idle_start_ = -1;
};

}  // namespace

std::string_view PhaseName(Phase p) {
  switch (p) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kOtherCompute: return "other_compute";
    case Phase::kCommunication: return "communication";
    case Phase::kHostToDevice: return "host_to_device";
    case Phase::kOtherCopy: return "other_copy";
    case Phase::kDataLoading: return "data_loading";
    case Phase::kSynchronisation: return "synchronisation";
    case Phase::kIdleHostBound: return "idle_host_bound";
    case Phase::kIdleWaiting: return "idle_waiting";
    case Phase::kCount: break;
  }
  return "?";
}

std::string_view PhaseLabel(Phase p) {
  switch (p) {
    case Phase::kForward: return "forward compute";
    case Phase::kBackward: return "backward compute";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kOtherCompute: return "other GPU compute";
    case Phase::kCommunication: return "communication (exposed)";
    case Phase::kHostToDevice: return "host-to-device copies";
    case Phase::kOtherCopy: return "other copies/memsets";
    case Phase::kDataLoading: return "data loading";
    case Phase::kSynchronisation: return "synchronisation";
    case Phase::kIdleHostBound: return "GPU idle (host-bound)";
    case Phase::kIdleWaiting: return "GPU idle (waiting)";
    case Phase::kCount: break;
  }
  return "?";
}

bool PhaseIsGpuActive(Phase p) { return static_cast<int>(p) < kFirstCpuPhase; }

std::string_view StepSourceName(StepSource s) {
  switch (s) {
    case StepSource::kProfilerStep: return "ProfilerStep";
    case StepSource::kDataLoader: return "DataLoader calls (no ProfilerStep in the trace)";
    case StepSource::kWholeTrace: return "whole trace (no ProfilerStep or DataLoader events)";
  }
  return "?";
}

Result<TraceAnalysis> AnalyseTrace(const ParsedTrace& t, int timeline_bins) {
  TraceAnalysis a;
  a.path = t.path;
  a.device_name = t.device_name;
  a.device_memory = t.device_memory;
  a.compute_major = t.compute_major;
  a.rank = t.rank;
  a.world_size = t.world_size;
  a.peak_memory_reserved = t.peak_memory_reserved;
  std::vector<ProfilerStep> steps = BuildSteps(t, &a.step_source);
  if (steps.empty()) {
    return InvalidArgument(fmt::format("{}: the trace has no complete ('X') events to analyse", t.path));
  }
  for (const ProfilerStep& s : steps) {
    StepBreakdown b;
    b.number = s.number;
    b.start = s.start;
    b.end = std::max(s.start, s.end);
    a.steps.push_back(b);
  }

  const std::int64_t main_tid = MainThread(t, steps);
  SpanSet optimizer(t.optimizer), backward(t.backward), loading(t.data_loading);
  auto launch_phase = [&](const GpuEvent& g) -> Phase {
    const Launch* l = t.FindLaunch(g.correlation);
    if (l == nullptr) return Phase::kOtherCompute;
    if (optimizer.Contains(l->start)) return Phase::kOptimizer;
    if (backward.Contains(l->start) || l->tid != main_tid) return Phase::kBackward;
    if (loading.Contains(l->start)) return Phase::kOtherCompute;
    return Phase::kForward;
  };

  std::vector<Edge> edges;
  edges.reserve(2 * (t.gpu.size() + t.data_loading.size() + t.synchronisation.size() + steps.size()));
  auto add = [&](Nanos s, Nanos e, Phase p) {
    if (e <= s) return;
    edges.push_back({s, static_cast<std::int8_t>(p), +1, 0});
    edges.push_back({e, static_cast<std::int8_t>(p), -1, 0});
  };
  std::vector<Nanos> kernel_durations;
  std::unordered_map<std::int32_t, KernelTotal> per_name;
  auto step_of = [&](Nanos ts) -> int {
    auto it = std::upper_bound(a.steps.begin(), a.steps.end(), ts,
                               [](Nanos x, const StepBreakdown& s) { return x < s.start; });
    if (it == a.steps.begin()) return -1;
    --it;
    return ts < it->end ? static_cast<int>(it - a.steps.begin()) : -1;
  };
  for (const GpuEvent& g : t.gpu) {
    Phase p = Phase::kOtherCopy;
    switch (g.kind) {
      case GpuKind::kKernel: {
        const KernelClass& kc = t.kernel_classes[static_cast<std::size_t>(g.name_id)];
        p = kc.communication ? Phase::kCommunication : launch_phase(g);
        if (step_of(g.start) >= 0) {
          Nanos d = g.end - g.start;
          ++a.kernels;
          a.kernel_time += d;
          kernel_durations.push_back(d);
          if (kc.tc_eligible) a.tc_eligible_time += d;
          if (kc.tensor_core) a.tensor_core_time += d;
          if (const Launch* l = t.FindLaunch(g.correlation)) {
            ++a.kernels_with_launch;
            if (d < l->end - l->start) ++a.short_kernels;
          }
          KernelTotal& k = per_name[g.name_id];
          k.time += d;
          ++k.count;
        }
        break;
      }
      case GpuKind::kMemcpyHtoD: p = Phase::kHostToDevice; break;
      case GpuKind::kMemcpyOther:
      case GpuKind::kMemset: p = Phase::kOtherCopy; break;
    }
    add(g.start, g.end, p);
  }
  for (const CpuSpan& s : t.data_loading) add(s.start, s.end, Phase::kDataLoading);
  for (const CpuSpan& s : t.synchronisation) add(s.start, s.end, Phase::kSynchronisation);
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    edges.push_back({a.steps[i].start, -1, +1, static_cast<std::int32_t>(i)});
    edges.push_back({a.steps[i].end, -1, -1, static_cast<std::int32_t>(i)});
  }
  // At one instant, ends go before starts so a step that ends where the next begins closes
  // first and zero-length overlaps do not count.
  std::sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) {
    if (x.t != y.t) return x.t < y.t;
    return x.delta < y.delta;
  });
  Sweeper sweeper(t, &a, steps, timeline_bins);
  sweeper.Run(edges);

  for (StepBreakdown& s : a.steps) {
    for (int p = 0; p < kFirstCpuPhase; ++p) s.gpu_busy += s.phases[static_cast<std::size_t>(p)];
    for (int p = 0; p < kPhaseCount; ++p) a.total[static_cast<std::size_t>(p)] += s.phases[static_cast<std::size_t>(p)];
    a.total_step_time += s.duration();
    a.total_gpu_busy += s.gpu_busy;
    a.total_data_loading_raw += s.data_loading_raw;
    a.total_communication_raw += s.communication_raw;
  }
  if (!kernel_durations.empty()) {
    auto mid = kernel_durations.begin() + static_cast<std::ptrdiff_t>(kernel_durations.size() / 2);
    std::nth_element(kernel_durations.begin(), mid, kernel_durations.end());
    a.median_kernel = *mid;
  }
  for (auto& [id, k] : per_name) {
    k.name = t.kernel_names[static_cast<std::size_t>(id)];
    a.top_kernels.push_back(k);
  }
  std::sort(a.top_kernels.begin(), a.top_kernels.end(), [](const KernelTotal& x, const KernelTotal& y) {
    return x.time != y.time ? x.time > y.time : x.name < y.name;
  });
  if (a.top_kernels.size() > 5) a.top_kernels.resize(5);
  return a;
}

double Share(const TraceAnalysis& a, Phase p) {
  if (a.total_step_time <= 0) return 0;
  return static_cast<double>(a.total[static_cast<std::size_t>(p)]) / static_cast<double>(a.total_step_time);
}

double MedianShare(const TraceAnalysis& a, Phase p) {
  std::vector<double> v;
  for (const StepBreakdown& s : a.steps) {
    if (s.duration() > 0) {
      v.push_back(static_cast<double>(s.phases[static_cast<std::size_t>(p)]) / static_cast<double>(s.duration()));
    }
  }
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace gpuslice::profile
