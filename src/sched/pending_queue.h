#pragma once
// Internal to the scheduler: the waiting jobs in the order they are served (PendingKey), with
// the subsets the scheduler walks instead of every waiting job: the MIG requests, the whole-GPU
// jobs that may earn a reservation (per queue), and one queue per request shape (jobs of a shape
// fit or fail together, so a pass visits each live shape's head). The jobs an admin holds wait
// too, but out of the queue until released; they are only counted here. The records are the
// scheduler's (Resolved, stable addresses). Not thread-safe.

#include <algorithm>
#include <cstddef>
#include <map>
#include <set>
#include <vector>

#include "sched/node_pool.h"
#include "sched/resolved.h"

namespace gpuslice::sched {

class PendingQueue {
 public:
  using Book = std::map<PendingKey, Resolved*>;

  // A whole-GPU job whose queue reserves devices for jobs that waited (reserve_after).
  static bool MayReserve(const Resolved& r) { return r.kind == SliceKind::kWhole && r.queue->reserve_after > 0; }

  // `r` waits (it is not in the queue).
  void Add(Resolved* r);
  // `r` no longer waits (it is in the queue).
  void Remove(const Resolved& r);

  // An admin holds `r` (it is in the queue): it leaves the queue, flagged JobView::held, and
  // waits for Release(), which puts it back in its old place (its key is unchanged).
  void Hold(Resolved& r);
  void Release(Resolved& r);
  // A held job `r` no longer waits (cancelled): no longer held or counted.
  void EndHeld(Resolved& r);
  // Jobs an admin holds (none of them in the queue).
  std::size_t held() const { return held_; }

  bool empty() const { return all_.empty(); }
  std::size_t size() const { return all_.size(); }
  bool contains(const Resolved& r) const { return all_.contains(PendingKeyOf(r)); }

  const Book& all() const { return all_; }
  const Book& mig() const { return mig_; }
  const std::map<const QueueConfig*, Book>& reserving() const { return reserving_; }
  // The shapes with waiting jobs, and each one's queue (non-empty for a live shape).
  const std::set<int>& live_shapes() const { return live_shapes_; }
  const Book& of_shape(int shape) const { return by_shape_[static_cast<std::size_t>(shape)]; }
  // Jobs of `shape` waiting (0 for a shape never seen).
  std::size_t count_of_shape(int shape) const {
    return static_cast<std::size_t>(shape) < by_shape_.size() ? of_shape(shape).size() : 0;
  }

  // Shows visit(r) the waiting jobs in the order of the strict weak order `after` on heads
  // (Head, true: the first goes after the second), by merging the shapes' queues: only the head
  // job of each live shape is in the merge, and visit(r) returns true to end the turn of r's
  // shape (it failed: its later jobs would too), false to go on with the shape's next job. So a
  // walk costs O(shapes + jobs visited), not O(waiting jobs). visit may remove the job it is
  // shown (Remove()), no other, and add none. Not re-entered: visit must not walk again.
  struct Head {
    PendingKey key;
    int shape;
    const Resolved* r;
  };
  template <typename After, typename Visit>
  void WalkByShape(const After& after, const Visit& visit);

 private:
  Book all_;
  Book mig_;                                     // the kMig subset of all_
  std::map<const QueueConfig*, Book> reserving_;  // the MayReserve() subset, per queue
  std::vector<Book> by_shape_;                   // all_ split by shape id
  std::set<int> live_shapes_;                    // shapes with waiting jobs
  std::size_t held_ = 0;                         // held jobs (JobView::held), out of all_
  // WalkByShape()'s heads: a min-heap in a reused vector (the keys are distinct: the order of
  // a std::set, without a node allocation per head).
  std::vector<Head> heads_;
  // A step of a busy cluster ends a job and starts one: keep the nodes (node_pool.h).
  NodePool<Book, 8> book_nodes_;
  NodePool<std::set<int>> live_shape_nodes_;
};

template <typename After, typename Visit>
void PendingQueue::WalkByShape(const After& after, const Visit& visit) {
  heads_.clear();
  for (int shape : live_shapes_) {
    const auto& [key, r] = *of_shape(shape).begin();
    heads_.push_back(Head{key, shape, r});
  }
  std::make_heap(heads_.begin(), heads_.end(), after);
  while (!heads_.empty()) {
    std::pop_heap(heads_.begin(), heads_.end(), after);
    const Head h = heads_.back();
    heads_.pop_back();
    if (visit(*h.r)) continue;  // the shape's turn ends
    const Book& q = of_shape(h.shape);
    auto next = q.upper_bound(h.key);  // visit may have removed h.r
    if (next != q.end()) {
      heads_.push_back(Head{next->first, h.shape, next->second});
      std::push_heap(heads_.begin(), heads_.end(), after);
    }
  }
}

}  // namespace gpuslice::sched
