// GET /v1/slices and a slice's view wherever one is shown: its record, what holds its memory,
// its last utilisation verdict and its idle clock (IdleSince, which /metrics reads too).
#include <algorithm>
#include <cstddef>
#include <optional>

#include <fmt/format.h>

#include "core/text.h"
#include "core/usage.h"
#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {

Json Daemon::Impl::Slices() const {
  std::shared_lock lock(mu_);
  Micros now = Now();
  Json arr = Json::array();
  for (const auto& [id, s] : slices_) {
    if (!s.active) continue;
    api::SliceView view = SliceViewOf(s);
    Mechanisms(view);
    api::SliceView::Figures& o = view.figures.emplace();
    // activity: active | idle | unmeasured (the last sample's verdict); activity_basis: the
    // signals that decided it, e.g. "sm,mem"
    const MilliGpu held = s.milli * static_cast<MilliGpu>(std::max<std::size_t>(1, s.devices.size()));
    if (auto u = slice_util_.find(id); u != slice_util_.end()) {
      if (u->second.sm_permille) {
        o.util_percent = (*u->second.sm_permille + 5) / 10;
        o.used_milli = UsedMilli(s.kind, held, *u->second.sm_permille);
      }
      if (u->second.memory_used) o.memory_used = *u->second.memory_used;
      o.activity = agent::ActivityLabel(u->second.verdict.activity);
      o.activity_basis = u->second.verdict.basis;
    }
    const sched::QueueConfig* queue = nullptr;
    if (auto j = jobs_.find(s.job); j != jobs_.end()) {
      o.user = j->second.user;
      o.queue = j->second.queue;
      queue = config_.FindQueue(j->second.queue);
    }
    if (auto v = sched_->slices().find(id); v != sched_->slices().end()) {
      IdleClock(v->second, queue, now, o);
      o.idle_state = IdleStateName(v->second);
    } else {
      o.idle_state = "stopping";
    }
    arr.push_back(view.ToJson());
  }
  return Json{{"slices", arr}, {"simulated", opt_.simulated}};
}

void Daemon::Impl::Mechanisms(api::SliceView& v) const {
  if (auto m = slice_mechanism_.find(SliceId(v.id)); m != slice_mechanism_.end()) v.cap_mechanism = m->second;
  if (v.kind == "mps" && !v.devices.empty()) {
    if (const sched::DeviceView* d = SchedDevice(v.devices[0]); d != nullptr && !d->mps_user.empty())
      v.mps_user = EscapeInvalidUtf8(d->mps_user);
  }
}

api::SliceView Daemon::Impl::SliceViewOf(const SliceRecord& s) {
  api::SliceView o;
  o.id = s.id.value();
  o.job = s.job.value();
  o.kind = SliceKindName(s.kind);
  o.devices = s.devices;
  o.uuids = s.uuids;
  o.milli = s.milli;
  o.memory_cap = s.memory_cap;
  o.mps_thread_percent = s.mps_thread_percent;
  o.mig = store::MigText(s.mig);
  o.active = s.active;
  o.created_us = s.created;
  o.released_us = s.released;
  return o;
}

// A running slice's idle clock, as its queue's policy keeps it: since when it is idle by
// every counting signal (the GPU as the daemon last saw it, fresh activity reports), when the
// warning comes if nothing is used before, and what other than the GPU keeps it active.
std::optional<Micros> Daemon::Impl::IdleSince(const sched::SliceView& v, const sched::QueueConfig* q,
                                              Micros now) const {
  if (v.unmeasured) return std::nullopt;  // how long it has been idle is not known
  const Micros gpu = LastActive(v);
  return q != nullptr ? std::max(gpu, sched::EffectiveLastActive(q->idle, v, now)) : gpu;
}

void Daemon::Impl::IdleClock(const sched::SliceView& v, const sched::QueueConfig* q, Micros now,
                             api::SliceView::Figures& o) const {
  const std::optional<Micros> idle_since = IdleSince(v, q, now);
  if (!idle_since) return;
  const Micros gpu = LastActive(v);
  const Micros since = *idle_since;
  o.idle_seconds = static_cast<double>(std::max<Micros>(0, now - since)) / kSecond;
  if (q == nullptr || !q->idle.enabled) return;
  o.idle_since_us = since;
  if (v.report && sched::ReportCounts(q->idle, *v.report, now) && since > gpu) {
    const bool busy = v.report->busy && q->idle.busy_is_active && since >= now;
    o.protected_by = v.report->source == "jupyter"
                         ? (busy ? "a running notebook cell" : "recent notebook use")
                         : fmt::format("{} ({} report)", busy ? "busy" : "recent activity",
                                       EscapeInvalidUtf8(v.report->source));
  }
  if (v.idle == sched::IdleState::kActive) {
    o.idle_warning_at_us = std::max({now, sched::IdleWindowEnd(q->idle, v), gpu + q->idle.window});
  } else if (v.idle == sched::IdleState::kWarned && q->idle.action == sched::ReclaimAction::kReclaim &&
             q->idle.reclaim == sched::IdleReclaim::kAlways) {
    o.idle_reclaim_at_us = v.idle_deadline;
  }
}

}  // namespace gpuslice::daemon
