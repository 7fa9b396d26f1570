#include "sched/pending_queue.h"

namespace gpuslice::sched {

void PendingQueue::Add(Resolved* r) {
  const PendingKey k = PendingKeyOf(*r);
  book_nodes_.Insert(all_, k, r);
  if (r->kind == SliceKind::kMig) book_nodes_.Insert(mig_, k, r);
  if (MayReserve(*r)) book_nodes_.Insert(reserving_[r->queue], k, r);
  if (by_shape_.size() <= static_cast<std::size_t>(r->shape)) by_shape_.resize(r->shape + 1);
  book_nodes_.Insert(by_shape_[r->shape], k, r);
  live_shape_nodes_.Insert(live_shapes_, r->shape);
}

void PendingQueue::Remove(const Resolved& r) {
  const PendingKey k = PendingKeyOf(r);
  book_nodes_.Erase(all_, k);
  if (r.kind == SliceKind::kMig) book_nodes_.Erase(mig_, k);
  if (MayReserve(r)) book_nodes_.Erase(reserving_[r.queue], k);
  auto& q = by_shape_[r.shape];
  book_nodes_.Erase(q, k);
  if (q.empty()) live_shape_nodes_.Erase(live_shapes_, r.shape);
}

void PendingQueue::Hold(Resolved& r) {
  Remove(r);
  r.view->held = true;
  ++held_;
}

void PendingQueue::Release(Resolved& r) {
  EndHeld(r);
  Add(&r);
}

void PendingQueue::EndHeld(Resolved& r) {
  r.view->held = false;
  --held_;
}

}  // namespace gpuslice::sched
