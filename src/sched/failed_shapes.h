#pragma once
// Internal to the scheduler: the request shapes that failed to place in the current pass. Jobs of
// one shape fit or fail together, so a pass (Scheduler::Impl::SchedulePass) tries a shape's jobs
// only until one fails. A new pass forgets every failure in O(1): each shape keeps the number of
// the pass it last failed in, instead of a flag cleared per shape (a shape is made per distinct
// request, and MIG needs are bytes, so there can be as many as jobs). Not thread-safe (owned by
// ShapeBooks, shape_books.h).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpuslice::sched {

class FailedShapes {
 public:
  // A new pass, over the shapes 0 .. shapes-1, in which none has failed yet.
  void NewPass(std::size_t shapes) {
    ++pass_;
    if (failed_in_.size() < shapes) failed_in_.resize(shapes, 0);
  }
  bool Failed(int shape) const { return failed_in_[static_cast<std::size_t>(shape)] == pass_; }
  void MarkFailed(int shape) { failed_in_[static_cast<std::size_t>(shape)] = pass_; }

 private:
  std::vector<std::uint64_t> failed_in_;  // per shape, the pass it last failed in (0: none)
  std::uint64_t pass_ = 0;                 // passes so far
};

}  // namespace gpuslice::sched
