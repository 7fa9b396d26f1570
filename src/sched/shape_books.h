#pragma once
// Internal to the scheduler: request shapes. Jobs of one shape fit or fail together: two
// requests are one shape when their kind, size, memory, MIG need, model, queue version, MPS user
// and team are the same (Resolved::ShapeKey(); Resolved::shape holds the id). The books number the shapes in order of
// first use and keep, for the current pass (Scheduler::Impl::SchedulePass), the shapes that
// failed in it (FailedShapes): the pass tries a shape's jobs only until one fails. Not
// thread-safe (owned by one Scheduler).

#include <cstddef>
#include <functional>
#include <string>
#include <tuple>
#include <unordered_map>

#include "sched/failed_shapes.h"
#include "sched/resolved.h"

namespace gpuslice::sched {

class ShapeBooks {
 public:
  // The shape id of `r`'s request (Resolved::ShapeKey(); Resolved::shape is not read).
  int IdOf(const Resolved& r) {
    auto [it, _] = ids_.try_emplace(Key(r.ShapeKey()), static_cast<int>(ids_.size()));
    return it->second;
  }
  // Shapes so far: their ids are 0 .. size()-1.
  std::size_t size() const { return ids_.size(); }

  // A new pass, in which no shape so far has failed yet.
  void NewPass() { failed_.NewPass(ids_.size()); }
  bool Failed(int shape) const { return failed_.Failed(shape); }
  void MarkFailed(int shape) { failed_.MarkFailed(shape); }

 private:
  // Hashed: a what-if's right-sized MIG requests make about one shape per job, each looked up
  // at its submit.
  using Key = std::tuple<SliceKind, int, MilliGpu, Bytes, Bytes, std::string, const QueueConfig*, std::string, int>;
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      const auto& [kind, gpus, milli, memory, mig_need, model, queue, mps_user, team] = k;
      std::size_t h = std::hash<std::string>()(model) ^ std::hash<std::string>()(mps_user) * 31;
      for (std::size_t v : {static_cast<std::size_t>(kind), static_cast<std::size_t>(gpus), static_cast<std::size_t>(milli),
                            static_cast<std::size_t>(memory), static_cast<std::size_t>(mig_need),
                            std::hash<const QueueConfig*>()(queue), static_cast<std::size_t>(team)})
        h = (h ^ v) * 0x100000001b3ULL;
      return h;
    }
  };
  std::unordered_map<Key, int, KeyHash> ids_;
  FailedShapes failed_;  // the shapes that failed in the current pass
};

}  // namespace gpuslice::sched
