#pragma once
// Internal to the scheduler: the books of jobs. Every job the scheduler keeps a view of
// (JobView: pending, running, and ended ones up to kEndedHistory, so that the API and metrics
// still see a job for a while after it ends), and the Resolved record of each pending and
// running job. Resolved records and views keep their addresses while kept (Resolved::view,
// PendingQueue and the placement memo hold them). The map nodes of forgotten entries are kept
// for the next inserts (node_pool.h): a step of a busy cluster ends a job and starts one.
// Not thread-safe (owned by one Scheduler, like its other books).

#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "sched/node_pool.h"
#include "sched/resolved.h"
#include "sched/views.h"

namespace gpuslice::sched {

class JobBooks {
 public:
  using Views = std::map<JobId, JobView>;
  using Records = std::unordered_map<JobId, Resolved>;

  // Ended jobs kept for views, the newest; older ones are forgotten so that a long-running
  // daemon or simulation does not grow without bound.
  static constexpr std::size_t kEndedHistory = 10000;

  // Every kept job, for Scheduler::jobs().
  const Views& views() const { return views_; }
  // Pending and running jobs' records (ended jobs have none).
  const Records& records() const { return records_; }

  JobView* Find(JobId id) {
    auto it = views_.find(id);
    return it == views_.end() ? nullptr : &it->second;
  }
  const JobView* Find(JobId id) const { return const_cast<JobBooks*>(this)->Find(id); }
  JobView& at(JobId id) { return views_.at(id); }
  const JobView& at(JobId id) const { return views_.at(id); }

  // The record of a pending or running job; nullptr otherwise. A hash lookup, not a walk of
  // every kept job: most events name live jobs.
  Resolved* FindRecord(JobId id) {
    auto it = records_.find(id);
    return it == records_.end() ? nullptr : &it->second;
  }
  const Resolved* FindRecord(JobId id) const { return const_cast<JobBooks*>(this)->FindRecord(id); }
  Resolved& RecordOf(JobId id) { return records_.at(id); }
  const Resolved& RecordOf(JobId id) const { return records_.at(id); }

  // Where job `id`'s view goes (a submit looks once, then adds there if it is new). Valid for
  // Add* until the books change.
  Views::iterator Where(JobId id) { return views_.lower_bound(id); }
  bool Has(Views::const_iterator where, JobId id) const { return where != views_.end() && where->first == id; }

  // A new job's view at `where` (!Has(where, view.job)), without a record: one that ends at
  // once (End()). Taken as rvalues: moved once, into the kept node.
  JobView& AddView(Views::const_iterator where, JobView&& view) {
    const JobId id = view.job;
    return job_nodes_.InsertAt(views_, where, id, std::move(view))->second;
  }
  // A new pending job: its view at `where` (!Has(where, view.job)) and its record, which
  // points at the view.
  Resolved& Add(Views::const_iterator where, JobView&& view, Resolved&& record) {
    const JobId id = view.job;
    JobView* v = &AddView(where, std::move(view));
    Resolved* r = &resolved_nodes_.Insert(records_, id, std::move(record)).first->second;
    r->view = v;
    return *r;
  }

  // The job ends at `now`: its record (if any) is dropped, its view joins the ended history,
  // which forgets its oldest beyond kEndedHistory. `view` stays valid (it is the newest).
  void End(JobView& view, Micros now, std::string_view reason) {
    view.state = JobState::kEnded;
    view.end_time = now;
    view.end_reason = std::string(reason);
    resolved_nodes_.Erase(records_, view.job);
    ended_.push_back(view.job);
    while (ended_.size() > kEndedHistory) {
      job_nodes_.Erase(views_, ended_.front());
      ended_.pop_front();
    }
  }

 private:
  Views views_;
  Records records_;
  std::deque<JobId> ended_;  // oldest first
  NodePool<Views> job_nodes_;
  NodePool<Records> resolved_nodes_;
};

}  // namespace gpuslice::sched
