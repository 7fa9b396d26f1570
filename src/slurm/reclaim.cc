#include "slurm/reclaim.h"

namespace gpuslice::slurm {

std::string_view ReclaimKindName(ReclaimKind kind) {
  switch (kind) {
    case ReclaimKind::kWarn: return "warn";
    case ReclaimKind::kActivityResumed: return "activity-resumed";
    case ReclaimKind::kCancel: return "cancel";
    case ReclaimKind::kRequeue: return "requeue";
  }
  return "?";
}

ReclaimTracker::Phase ReclaimTracker::PhaseOf(const std::string& job_id) const {
  auto it = tracks_.find(job_id);
  return it == tracks_.end() ? Phase::kActive : it->second.phase;
}

std::vector<ReclaimDecision> ReclaimTracker::Observe(const std::map<std::string, JobIdle>& jobs, Micros now) {
  std::vector<ReclaimDecision> out;
  for (auto it = tracks_.begin(); it != tracks_.end();) {
    it = jobs.count(it->first) ? std::next(it) : tracks_.erase(it);
  }
  for (const auto& [id, job] : jobs) {  // std::map: decisions come in job-id order
    const sched::QueueConfig* q = policy_.FindQueue(job.partition);
    if (q == nullptr || !q->idle.enabled) continue;  // not ours to touch
    Track& t = tracks_[id];
    const bool reclaim = q->idle.action == sched::ReclaimAction::kReclaim;
    ReclaimDecision d{ReclaimKind::kWarn, id, job.partition, job.idle.idle_for, 0, !reclaim};
    switch (t.phase) {
      case Phase::kActive:
        if (job.idle.idle) {
          t.phase = Phase::kWarned;
          t.deadline = now + q->idle.grace;
          d.deadline = reclaim ? t.deadline : 0;
          out.push_back(d);
        }
        break;
      case Phase::kWarned:
        if (!job.idle.idle) {
          t.phase = Phase::kActive;
          d.kind = ReclaimKind::kActivityResumed;
          out.push_back(d);
        } else if (reclaim && now >= t.deadline) {
          t.phase = Phase::kReclaimed;
          d.kind = q->preemptible ? ReclaimKind::kRequeue : ReclaimKind::kCancel;
          d.deadline = t.deadline;
          out.push_back(d);
        }
        break;
      case Phase::kReclaimed:
        break;  // Slurm is ending it; a requeued job comes back under a new start and is
                // tracked afresh once it has left the running set.
    }
  }
  return out;
}

}  // namespace gpuslice::slurm
