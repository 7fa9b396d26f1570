#include "agent/series.h"

#include <algorithm>

namespace gpuslice::agent {

std::vector<std::optional<double>> BucketMeans(
    const std::vector<SeriesPoint>& points, Micros start, Micros step, std::size_t n,
    const std::function<std::optional<double>(const SeriesPoint&)>& field) {
  std::vector<double> sum(n, 0.0);
  std::vector<int> count(n, 0);
  if (step > 0) {
    for (const auto& p : points) {
      if (p.t < start) continue;
      const auto i = static_cast<std::size_t>((p.t - start) / step);
      if (i >= n) continue;
      if (auto v = field(p)) {
        sum[i] += *v;
        ++count[i];
      }
    }
  }
  std::vector<std::optional<double>> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (count[i] > 0) out[i] = sum[i] / count[i];
  }
  return out;
}

void SeriesRing::Push(const SeriesPoint& p) {
  buf_[head_] = p;
  head_ = (head_ + 1) % buf_.size();
  size_ = std::min(size_ + 1, buf_.size());
}

std::vector<SeriesPoint> SeriesRing::Points() const {
  std::vector<SeriesPoint> out;
  out.reserve(size_);
  const std::size_t start = (head_ + buf_.size() - size_) % buf_.size();
  for (std::size_t i = 0; i < size_; ++i) out.push_back(buf_[(start + i) % buf_.size()]);
  return out;
}

void Downsampler::Emit(SliceId slice, Acc& a) {
  if (a.bucket < 0) return;
  SeriesPoint p;
  p.t = a.bucket * width_;
  if (a.sm_n > 0) p.sm_util = static_cast<devices::Permille>((a.sm_sum + a.sm_n / 2) / a.sm_n);
  if (a.mem_n > 0) p.mem_util = static_cast<devices::Permille>((a.mem_sum + a.mem_n / 2) / a.mem_n);
  p.memory_used = a.mem_max;
  p.processes = a.procs_max;
  if (sink_) sink_(slice, p);
  a = Acc{};
}

void Downsampler::Add(SliceId slice, const SeriesPoint& p) {
  auto it = std::find_if(acc_.begin(), acc_.end(), [&](const auto& e) { return e.first == slice; });
  if (it == acc_.end()) {
    acc_.emplace_back(slice, Acc{});
    it = std::prev(acc_.end());
  }
  Acc& a = it->second;
  // Floor division, so negative times (never expected) still bucket consistently.
  const Micros bucket = p.t >= 0 ? p.t / width_ : -((-p.t + width_ - 1) / width_);
  if (a.bucket >= 0 && bucket != a.bucket) Emit(slice, a);
  a.bucket = bucket;
  if (p.sm_util) { a.sm_sum += *p.sm_util; ++a.sm_n; }
  if (p.mem_util) { a.mem_sum += *p.mem_util; ++a.mem_n; }
  if (p.memory_used) a.mem_max = std::max(a.mem_max.value_or(0), *p.memory_used);
  a.procs_max = std::max(a.procs_max, p.processes);
}

void Downsampler::Flush(SliceId slice) {
  for (auto it = acc_.begin(); it != acc_.end(); ++it) {
    if (it->first == slice) {
      Emit(slice, it->second);
      acc_.erase(it);
      return;
    }
  }
}

}  // namespace gpuslice::agent
