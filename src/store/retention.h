#pragma once
// Retention of the stored utilisation history: points are folded into coarser buckets as they
// age and dropped after a year, so the store's size is bounded (docs/report.md gives the
// figures). Folding keeps the totals reports use (held, measured, used and idle time) within
// rounding (FoldSamples, store.h).
//
// ApplyRetention works in small steps (one transaction each, about `chunk` points), so the
// daemon's commits interleave with it and are never held up for long; RetentionWorker runs it
// on its own thread. ApplyRetention is thread-safe as the Store; RetentionWorker's methods are
// called from one thread (its owner).

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "store/store.h"

namespace gpuslice::store {

struct RetentionTier {
  Micros age = 0;    // points older than this ...
  Micros width = 0;  // ... are folded into buckets of this width
};

struct RetentionPolicy {
  // As sampled (the daemon's downsample window, a minute by default) for 2 days, then 10-minute
  // buckets up to 35 days, hourly up to `keep`.
  std::vector<RetentionTier> tiers = {{2 * 24 * kHour, 10 * kMinute}, {35 * 24 * kHour, kHour}};
  Micros keep = 400 * 24 * kHour;  // older points are deleted (a year, and a month to compare)
};

struct RetentionStats {
  std::int64_t folded = 0;   // points folded into coarser ones
  std::int64_t dropped = 0;  // points deleted for age
  std::int64_t reclaimed_pages = 0;  // free pages given back to the file system (Store::ReclaimSpace)
  int steps = 0;             // transactions
};

// One full pass at `now`: every tier, then the drop, then free pages given back to the file
// system (so the file shrinks after ended jobs' environments were dropped). `stop` (optional)
// is asked between steps.
Result<RetentionStats> ApplyRetention(Store& store, const RetentionPolicy& policy, Micros now,
                                      int chunk = 2000, const std::function<bool()>& stop = {});

// Runs ApplyRetention every `every` of real time on a thread of its own, pausing `pause`
// between steps so a long first pass (an old store) never starves the daemon's writes.
class RetentionWorker {
 public:
  RetentionWorker(Store& store, RetentionPolicy policy, std::function<Micros()> clock,
                  std::chrono::milliseconds every = std::chrono::minutes(10),
                  std::chrono::milliseconds pause = std::chrono::milliseconds(20));
  ~RetentionWorker();  // stops and joins
  RetentionWorker(const RetentionWorker&) = delete;
  RetentionWorker& operator=(const RetentionWorker&) = delete;

  void Start();
  void Stop();
  // Runs the next pass now rather than at the end of the period (the daemon asks after it
  // dropped a lot: cancelled jobs' environments).
  void Nudge();
  int passes() const { return passes_.load(); }

 private:
  void Run();

  Store& store_;
  RetentionPolicy policy_;
  std::function<Micros()> clock_;
  std::chrono::milliseconds every_, pause_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool nudged_ = false;
  std::atomic<int> passes_{0};
  std::thread thread_;
};

}  // namespace gpuslice::store
