#pragma once
// Clocks for backends that make up or play back time (fake, replay). A Clock returns µs since
// the Unix epoch. ManualClock is set by tests; thread-safe (atomic).

#include <atomic>
#include <functional>

#include "core/units.h"

namespace gpuslice::devices {

using Clock = std::function<Micros()>;

// Wall-clock µs since the epoch (what NVML's sample timestamps use).
Micros WallMicros();
Clock SystemClock();

class ManualClock {
 public:
  explicit ManualClock(Micros start = 0) : now_(start) {}
  Micros now() const { return now_.load(); }
  void Set(Micros t) { now_.store(t); }
  void Advance(Micros d) { now_.fetch_add(d); }
  // A Clock reading this one; the ManualClock must outlive it.
  Clock AsClock() const { return [this] { return now(); }; }

 private:
  std::atomic<Micros> now_;
};

}  // namespace gpuslice::devices
