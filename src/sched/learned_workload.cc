#include "sched/learned_workload.h"

#include <iterator>

namespace gpuslice::sched {

void LearnedWorkload::Count(int gpus, MilliGpu milli) {
  // Weight 2 a request, so that halving keeps a single old request as 1 for one more window.
  auto [it, added] = counts_.try_emplace({gpus, milli}, 0);
  it->second += 2;
  total_ += 2;
  since_refresh_ += 2;
  bool refresh = added || since_refresh_ * kRefresh >= total_;
  if (total_ >= 2 * kWindow) {
    total_ = 0;
    for (auto c = counts_.begin(); c != counts_.end();) {
      c->second /= 2;
      total_ += c->second;
      c = c->second == 0 ? counts_.erase(c) : std::next(c);
    }
    refresh = true;
  }
  if (refresh) Refresh();
}

void LearnedWorkload::Refresh() {
  shapes_.clear();
  for (const auto& [shape, n] : counts_) {
    WorkloadShape w;
    w.num_gpus = shape.first;
    w.milli_per_gpu = shape.second;
    w.frequency = static_cast<double>(n) / static_cast<double>(total_);
    shapes_.push_back(w);
  }
  since_refresh_ = 0;
  ++version_;
}

}  // namespace gpuslice::sched
