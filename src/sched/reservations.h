#pragma once
// Internal to the scheduler: its reservation (devices kept empty for a whole-GPU job that has
// waited its queue's reserve_after; one at a time) and the search for the job that gets the next
// one. The search visits, in queue order, only the jobs that have waited long enough: per queue
// a prefix of its waiting whole-GPU jobs (by submit time), merged lazily, so a long queue costs
// what is visited, not a sort per event. Which devices a job gets, and marking them
// (DeviceView::reserved_for, through the scheduler's Mutate so its indexes stay exact), are the
// scheduler's (scheduler_reservations.cc); this part holds which they are. Not thread-safe
// (owned by one Scheduler, like its other books).

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "core/ids.h"
#include "core/units.h"
#include "sched/config.h"
#include "sched/pending_queue.h"
#include "sched/resolved.h"

namespace gpuslice::sched {

class Reservations {
 public:
  struct Reservation {
    JobId job;
    NodeId node;
    std::vector<DeviceIndex> devices;
  };

  // A queue (version) was installed: searching is only worth it once some queue reserves.
  void NoteQueue(const QueueConfig& q) { any_queue_ = any_queue_ || q.reserve_after > 0; }

  // The reservation held; nullptr: none.
  const Reservation* held() const { return held_ ? &*held_ : nullptr; }
  bool Holds(JobId job) const { return held_ && held_->job == job; }
  // None may be held.
  void Hold(Reservation r) { held_ = std::move(r); }
  // Hands back what was held (its devices are to be unmarked), holding none.
  std::optional<Reservation> Release() { return std::exchange(held_, std::nullopt); }

  // Offers the jobs of `queues` (per queue, its waiting whole-GPU jobs in queue order) that have
  // waited their queue's reserve_after at `now`, in queue order, to `reserve` until one gets a
  // reservation (it returns true; the search ends at once, so `reserve` may change the books it
  // searched). Only while none is held and some queue reserves. A job `eligible` refuses is
  // passed over; so is one asking as many devices of a model as, or more than, a job for which
  // `reserve` found no host with room (the devices do not change within a search).
  template <typename Eligible, typename Reserve>
  void Search(const std::map<const QueueConfig*, PendingQueue::Book>& queues, Micros now, Eligible eligible,
              Reserve reserve);

 private:
  struct Head {
    PendingKey key;
    PendingQueue::Book::const_iterator at, end;
  };

  std::optional<Reservation> held_;
  bool any_queue_ = false;  // some queue version has reserve_after
  // Search()'s scratch: the queues' heads (a min-heap), and the (model, GPUs) no host has room for.
  std::vector<Head> heads_;
  std::vector<std::pair<std::string_view, int>> no_room_;
};

template <typename Eligible, typename Reserve>
void Reservations::Search(const std::map<const QueueConfig*, PendingQueue::Book>& queues, Micros now,
                          Eligible eligible, Reserve reserve) {
  if (held_ || !any_queue_) return;
  const auto later = [](const Head& a, const Head& b) { return a.key > b.key; };  // keys are distinct
  heads_.clear();
  for (const auto& [queue, jobs] : queues) {
    if (!jobs.empty()) heads_.push_back(Head{jobs.begin()->first, jobs.begin(), jobs.end()});
  }
  std::make_heap(heads_.begin(), heads_.end(), later);
  no_room_.clear();
  while (!heads_.empty()) {
    std::pop_heap(heads_.begin(), heads_.end(), later);
    const Head h = heads_.back();
    heads_.pop_back();
    const Resolved* r = h.at->second;
    if (now - r->submit < r->queue->reserve_after) continue;  // this queue's later jobs waited less
    if (const auto next = std::next(h.at); next != h.end) {
      heads_.push_back(Head{next->first, next, h.end});
      std::push_heap(heads_.begin(), heads_.end(), later);
    }
    if (!eligible(*r)) continue;
    if (std::any_of(no_room_.begin(), no_room_.end(), [&](const auto& n) { return n.first == r->model && r->gpus >= n.second; }))
      continue;
    if (reserve(*r)) return;
    no_room_.emplace_back(r->model, r->gpus);
  }
}

}  // namespace gpuslice::sched
