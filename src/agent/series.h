#pragma once
// Per-slice time series: a fixed-capacity ring of recent points (for /metrics, profile/ and
// idle windows) and a Downsampler that folds points into fixed buckets (e.g. one minute) and
// hands each finished bucket to a sink — the store persists those. Values; not thread-safe
// (the agent guards them with its mutex).

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "core/ids.h"
#include "core/units.h"
#include "devices/backend.h"

namespace gpuslice::agent {

struct SeriesPoint {
  Micros t = 0;
  std::optional<devices::Permille> sm_util;   // nullopt: unsupported / not measured
  std::optional<devices::Permille> mem_util;
  std::optional<Bytes> memory_used;
  int processes = 0;
  friend bool operator==(const SeriesPoint&, const SeriesPoint&) = default;
};

// Means over fixed buckets for a chart: bucket i covers [start + i*step, start + (i+1)*step);
// each holds the mean of the known values of `field` among `points` in it, or nullopt when
// none is known (no point, or only unmeasured ones): a gap, never 0. Points outside
// [start, start + n*step) are ignored. `points` need not be sorted.
std::vector<std::optional<double>> BucketMeans(
    const std::vector<SeriesPoint>& points, Micros start, Micros step, std::size_t n,
    const std::function<std::optional<double>(const SeriesPoint&)>& field);

class SeriesRing {
 public:
  explicit SeriesRing(std::size_t capacity) : buf_(capacity == 0 ? 1 : capacity) {}
  void Push(const SeriesPoint& p);
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return buf_.size(); }
  // Oldest first.
  std::vector<SeriesPoint> Points() const;
  const SeriesPoint* Latest() const { return size_ == 0 ? nullptr : &buf_[(head_ + buf_.size() - 1) % buf_.size()]; }

 private:
  std::vector<SeriesPoint> buf_;
  std::size_t head_ = 0;  // next write position
  std::size_t size_ = 0;
};

// Bucket [k*width, (k+1)*width): means of the known values (nullopt if none known), max of
// processes, memory as the maximum seen (a cap question cares about the peak). `t` of an
// emitted point is the bucket start.
class Downsampler {
 public:
  using Sink = std::function<void(SliceId, const SeriesPoint&)>;
  Downsampler(Micros width, Sink sink) : width_(width), sink_(std::move(sink)) {}
  void Add(SliceId slice, const SeriesPoint& p);
  // Emits the open bucket (e.g. when the slice ends).
  void Flush(SliceId slice);

 private:
  struct Acc {
    Micros bucket = -1;
    long long sm_sum = 0, mem_sum = 0;
    int sm_n = 0, mem_n = 0;
    std::optional<Bytes> mem_max;
    int procs_max = 0;
  };
  void Emit(SliceId slice, Acc& a);

  Micros width_;
  Sink sink_;
  std::vector<std::pair<SliceId, Acc>> acc_;
};

}  // namespace gpuslice::agent
