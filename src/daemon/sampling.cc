// Sampling: one agent round per sample interval (agent::Agent, on the daemon's clock and under
// its lock); the samples that can change the scheduler are fed to it; figures are downsampled
// into the store.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {

// One agent round: device figures for the views and the store, each running slice's verdict
// for the views, and to the scheduler the samples that can change its state.
void Daemon::Impl::SampleDevices(Micros now, store::WriteBatch& b, Actions& act) {
  const agent::Round round = agent_->SampleOnce();
  for (const auto& s : round.samples) {
    const int idx = static_cast<int>(s.index.value());
    latest_[idx] = s;
    Downsample(now, fmt::format("device/{}", idx), s.gpu_util.optional(), s.memory_used.optional(), b);
  }
  std::map<SliceId, const agent::SliceActivity*> by_slice;
  for (const auto& a : round.slices) by_slice[a.slice] = &a;
  sched::Sample ev{now, {}};
  bool due = false;
  for (const auto& [sid, v] : sched_->slices()) {
    auto it = by_slice.find(sid);
    if (it == by_slice.end()) continue;  // not running yet (or no longer): nothing measured
    const agent::SliceActivity& a = *it->second;
    // Only what can change the scheduler is fed, and each fed sample is journaled: feeding
    // every one would journal an entry a second for as long as anything runs. An active
    // slice is fed once per ActivityQuantum, or at once while it is warned or idle; a slice
    // going blind (unknown) or seeing again (idle after unknown) at once. When one is due,
    // every slice with news goes with it. The scheduler's last_active then lags by less
    // than the quantum (a tenth of the idle window, at most a minute): a warning may come
    // that much early, never a reclaim while the job is active during the grace period.
    // Views use the full-resolution time.
    const sched::Activity act_now = a.verdict.activity;
    const sched::QueueConfig* queue = QueueOf(v.job);
    if (act_now == sched::Activity::kActive) {
      seen_active_[sid] = now;
      if (queue != nullptr && (v.idle != sched::IdleState::kActive || v.unmeasured ||
                               now - v.last_active >= ActivityQuantum(queue->idle))) {
        due = true;
      }
      ev.slices.push_back(a.sample);
    } else if ((act_now == sched::Activity::kUnknown) != v.unmeasured) {
      due = true;
      ev.slices.push_back(a.sample);
    }
    slice_util_[sid] = SliceFigures{a.sm_util.optional(), a.memory_used.optional(), a.verdict};
    Downsample(now, fmt::format("slice/{}", sid.value()), a.sm_util.optional(), a.memory_used.optional(), b,
               a.verdict.activity == sched::Activity::kIdle);
    if (auto sr = slices_.find(sid); sr != slices_.end()) {
      auto& q = recent_[sr->second.job];
      q.push_back({now, a.sm_util.optional(), a.memory_used.optional()});
      if (q.size() > kRecentPoints) q.pop_front();
    }
  }
  // Bounded memory: the oldest jobs' raw series go first (their stored averages remain).
  while (recent_.size() > kRecentJobs) recent_.erase(recent_.begin());
  std::erase_if(seen_active_, [&](const auto& e) { return !sched_->slices().contains(e.first); });
  if (due) Feed(ev, b, act);
}

const sched::QueueConfig* Daemon::Impl::QueueOf(JobId job) const {
  return sched_->QueueOf(job);  // a removed queue's job: its last settings
}

Micros Daemon::Impl::ActivityQuantum(const sched::IdlePolicy& idle) const {
  if (!idle.enabled) return kMinute;
  return std::clamp<Micros>(idle.window / 10, std::min(opt_.sample_interval, kMinute), kMinute);
}

// When a slice was last seen active: the daemon's own sample (every round), else the
// scheduler's (after a restart, until the first sample).
Micros Daemon::Impl::LastActive(const sched::SliceView& v) const {
  auto it = seen_active_.find(v.slice);
  return it == seen_active_.end() ? v.last_active : std::max(v.last_active, it->second);
}

void Daemon::Impl::Downsample(Micros now, const std::string& subject, std::optional<int> permille,
                std::optional<Bytes> used, store::WriteBatch& b, bool idle) {
  auto& d = down_[subject];
  if (d.count == 0) d.start = now - opt_.sample_interval;  // a sample stands for the interval before it
  if (permille) {
    d.util += *permille;
    ++d.util_n;
    if (idle) ++d.idle_n;
  }
  if (used) {
    d.used += *used;
    ++d.used_n;
  }
  d.count += 1;
  d.last = now;
  if (now - d.start >= opt_.downsample_window) EmitDown(subject, b);
}

void Daemon::Impl::EmitDown(const std::string& subject, store::WriteBatch& b) {
  auto& d = down_[subject];
  const Micros span = d.last - d.start;
  b.samples.push_back({d.last, subject, d.util_n ? static_cast<int>(d.util / d.util_n) : kUnknownPermille,
                       d.used_n ? d.used / d.used_n : kUnknownBytes, span, span * d.util_n / d.count,
                       span * d.idle_n / d.count});
  d = {};
}

void Daemon::Impl::FlushDown(SliceId sid, store::WriteBatch& b) {
  auto it = down_.find(fmt::format("slice/{}", sid.value()));
  if (it == down_.end()) return;
  if (it->second.count > 0) EmitDown(it->first, b);
  down_.erase(it);
}

void Daemon::Impl::RecordWaitReasons(store::WriteBatch& b) {
  std::map<JobId, std::string> now_kind;
  for (JobId id : sched_->Pending()) {
    auto w = sched_->PendingReason(id);
    if (!w) continue;
    std::string kind(sched::WaitReasonKind(*w));
    auto it = wait_kind_.find(id);
    if (it == wait_kind_.end() || it->second != kind) {
      AddEvent(b, id, "wait", fmt::format("{}: {}", kind, sched::FormatWaitReason(*w)));
    }
    now_kind[id] = std::move(kind);
  }
  wait_kind_ = std::move(now_kind);
}

}  // namespace gpuslice::daemon
