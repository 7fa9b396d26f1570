// The scheduling core. See scheduler.h for the contract; the rules, in order of an event:
//  1. apply the event to the books (devices, jobs, slices, per-user usage);
//  2. run timers on Tick (time limits, idle state machines);
//  3. if capacity may have been freed (or a job arrived), try pending jobs in queue order
//     (priority, submit time, JobId); shapes that failed once in a pass are not retried in it;
//  4. if MIG demand is unmet, plan a new layout for ONE GPU (reconfigure, or drain first).
//
// Indexes (capacity_index.h; kept in step with the records, CheckInvariants rebuilds and
// compares them) make the built-in policies and MIG planning O(log n) per decision; "could
// ever fit" is answered from per-model capacity summaries, not by scanning devices.
//
// The definitions are split by section (see scheduler_impl.h); this file holds construction,
// Handle()'s dispatch, the views and the Scheduler facade.
#include "sched/scheduler.h"

#include <algorithm>
#include <cassert>
#include <optional>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <climits>
#include <set>

#include <fmt/format.h>

#include "core/overloaded.h"
#include "sched/scheduler_impl.h"

namespace gpuslice::sched {

std::string_view DeviceModeName(DeviceMode mode) {
  switch (mode) {
    case DeviceMode::kFree: return "free";
    case DeviceMode::kWhole: return "whole";
    case DeviceMode::kShared: return "shared";
    case DeviceMode::kMps: return "mps";
    case DeviceMode::kMig: return "mig";
  }
  return "?";
}

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending: return "pending";
    case JobState::kRunning: return "running";
    case JobState::kEnded: return "ended";
  }
  return "?";
}

Scheduler::Impl::Impl(Config config, std::uint64_t seed) : config_(std::move(config)), rng_(seed) {
  for (const QueueConfig& q : config_.queues) {
    auto p = MakePolicy(q.placement);
    // ValidateConfig guarantees known names; an unknown one here is a caller bug.
    assert(p.ok());
    if (p.ok()) {
      by_state_ = by_state_ || (*p)->ScoresByNodeState();
      policies_[q.name] = std::move(p).value();
    }
    any_reserve_ = any_reserve_ || q.reserve_after > 0;
  }
}

std::vector<Decision> Scheduler::Impl::Handle(const Event& e) {
  out_.clear();
  out_.reserve(4);
  now_ = std::max(now_, EventTime(e));
  ++stats_.events;
  std::visit(Overloaded{
                 [&](const DeviceAdded& ev) { OnDeviceAdded(ev); },
                 [&](const DeviceRemoved& ev) { OnDeviceRemoved(ev); },
                 [&](const Submit& ev) { OnSubmit(ev); },
                 [&](const Finish& ev) { OnEnd(ev.job, "finished"); },
                 [&](const Cancel& ev) { OnCancel(ev); },
                 [&](const Sample& ev) { OnSample(ev); },
                 [&](const Tick&) { OnTick(); },
                 [&](const ReconfigureDone& ev) { OnReconfigureDone(ev); },
                 [&](const ActivityReport& ev) { OnActivityReport(ev); },
             },
             e);
  return std::move(out_);
}

// ---- views
std::vector<JobId> Scheduler::Impl::Pending(std::optional<std::string_view> queue) const {
  std::vector<JobId> ids;
  for (const auto& [k, r] : pending_) {
    if (!queue || r->queue->name == *queue) ids.push_back(k.job);
  }
  return ids;
}

Status Scheduler::Impl::CheckInvariants() const {
  if (!violation_.empty()) return Internal(violation_);
  auto where = [](const DeviceView& d) {
    return fmt::format("device {}/{}", d.ref.node.value(), d.ref.index.value());
  };
  CapacityIndex fresh;
  fresh.ShareMemo(index_);
  int in_flight = 0;
  for (const auto& [ref, d] : devices_) {
    MilliGpu milli = 0;
    Bytes mem = 0;
    std::set<std::pair<int, int>> instances;
    for (SliceId sid : d.slices) {
      auto it = slices_.find(sid);
      if (it == slices_.end())
        return Internal(fmt::format("{}: unknown slice {}", where(d), sid.value()));
      const SliceView& s = it->second;
      if (ModeFor(s.kind) != d.mode)
        return Internal(fmt::format("{} in mode {} holds a {} slice {}", where(d),
                                    DeviceModeName(d.mode), SliceKindName(s.kind), sid.value()));
      if (s.kind == SliceKind::kMig) {
        if (!s.mig) return Internal(fmt::format("mig slice {} without instance", sid.value()));
        if (std::find(d.layout.begin(), d.layout.end(), *s.mig) == d.layout.end())
          return Internal(fmt::format("{}: slice {} on an instance not in the layout", where(d), sid.value()));
        if (!instances.insert({s.mig->profile_id, s.mig->start}).second)
          return Internal(fmt::format("{}: two slices on one MIG instance", where(d)));
      } else {
        milli += s.milli;
        mem += ReservedOn(s, d);
      }
    }
    if (milli != d.used_milli || mem != d.used_memory || static_cast<int>(d.slices.size()) != d.clients)
      return Internal(fmt::format("{}: books disagree with its slices", where(d)));
    if (milli > kOneGpu) return Internal(fmt::format("{}: compute over-committed ({})", where(d), milli));
    if (d.memory > 0 && mem > d.memory)
      return Internal(fmt::format("{}: memory over-committed ({} > {})", where(d), FormatBytes(mem),
                                  FormatBytes(d.memory)));
    if (d.mode == DeviceMode::kWhole && d.slices.size() != 1)
      return Internal(fmt::format("{}: whole device with {} slices", where(d), d.slices.size()));
    if (d.mode == DeviceMode::kMps && d.clients > MpsLimit(d))
      return Internal(fmt::format("{}: {} MPS clients over the limit", where(d), d.clients));
    if (d.slices.empty() && (d.mode == DeviceMode::kWhole || d.mode == DeviceMode::kShared ||
                             d.mode == DeviceMode::kMps))
      return Internal(fmt::format("{}: empty but left in mode {}", where(d), DeviceModeName(d.mode)));
    if (d.reconfiguring && !d.slices.empty() && d.mode != DeviceMode::kMig)
      return Internal(fmt::format("{}: reconfiguring with slices on it", where(d)));
    if (d.mode == DeviceMode::kMig) {
      if (const DeviceModel* m = d.catalogue) {
        Status st = ValidateLayout(*m, d.layout);
        if (!st.ok()) return Internal(fmt::format("{}: illegal layout: {}", where(d), st.message()));
      }
    }
    if (d.draining || d.reconfiguring) ++in_flight;
    if (InUse(d) != InUseFromSlices(d))
      return Internal(fmt::format("{}: MIG in-use record disagrees with its slices", where(d)));
    fresh.Add(d, Facts(d));
  }
  if (!(fresh == index_)) return Internal("placement indexes disagree with the device records");
  if (in_flight != mig_in_flight_)
    return Internal(fmt::format("{} devices changing MIG layout, counted {}", in_flight, mig_in_flight_));
  if (in_flight > 1) return Internal(fmt::format("{} devices changing MIG layout at once", in_flight));
  const auto mig_mode = std::count_if(devices_.begin(), devices_.end(),
                                      [](const auto& kv) { return kv.second.mode == DeviceMode::kMig; });
  if (mig_mode != mig_mode_devices_)
    return Internal(fmt::format("{} devices in MIG mode, counted {}", mig_mode, mig_mode_devices_));
  std::size_t reserved = 0;
  for (const auto& [ref, d] : devices_) {
    if (!d.reserved_for.valid()) continue;
    ++reserved;
    if (!reservation_ || reservation_->job != d.reserved_for || reservation_->node != ref.node ||
        std::find(reservation_->devices.begin(), reservation_->devices.end(), ref.index) ==
            reservation_->devices.end())
      return Internal(fmt::format("device {}/{}: reserved for job {} outside the reservation",
                                  ref.node.value(), ref.index.value(), d.reserved_for.value()));
  }
  if (reservation_) {
    auto j = jobs_.find(reservation_->job);
    if (j == jobs_.end() || j->second.state != JobState::kPending || j->second.kind != SliceKind::kWhole)
      return Internal(fmt::format("reservation for job {} that is not a waiting whole-GPU job",
                                  reservation_->job.value()));
    if (reserved != reservation_->devices.size())
      return Internal(fmt::format("reservation of {} devices marks {}", reservation_->devices.size(), reserved));
  }
  std::size_t timed = 0;
  for (const auto& [sid, s] : slices_) {
    Micros want = NextTimer(s, *resolved_.at(s.job).queue);
    auto t = timer_of_.find(sid);
    if (want != LLONG_MAX) ++timed;
    if ((want == LLONG_MAX) != (t == timer_of_.end()) || (want != LLONG_MAX && (t->second != want || !timers_.contains({want, sid}))))
      return Internal(fmt::format("slice {}: timer index disagrees with its record", sid.value()));
  }
  if (timed != timer_of_.size() || timed != timers_.size())
    return Internal("timer index holds slices that are not running");
  std::size_t reclaimable = 0;
  for (const auto& [sid, s] : slices_) {
    if ((s.idle == IdleState::kReclaimable) != reclaimable_.contains(sid))
      return Internal(fmt::format("slice {}: reclaimable set disagrees with its idle state", sid.value()));
    reclaimable += s.idle == IdleState::kReclaimable;
  }
  if (reclaimable != reclaimable_.size()) return Internal("reclaimable set holds slices that are not running");
  for (const auto& [sid, s] : slices_) {
    auto j = jobs_.find(s.job);
    if (j == jobs_.end() || j->second.state != JobState::kRunning || j->second.slice != sid)
      return Internal(fmt::format("slice {} does not belong to a running job", sid.value()));
    for (DeviceIndex di : s.devices) {
      auto d = devices_.find({s.node, di});
      if (d == devices_.end() ||
          std::find(d->second.slices.begin(), d->second.slices.end(), sid) == d->second.slices.end())
        return Internal(fmt::format("slice {} not recorded on its device {}/{}", sid.value(),
                                    s.node.value(), di.value()));
    }
  }
  std::vector<int> per_shape(shapes_.size(), 0);
  std::size_t mig = 0;
  for (const auto& [k, r] : pending_) {
    if (jobs_.at(k.job).state != JobState::kPending)
      return Internal(fmt::format("job {} queued but not pending", k.job.value()));
    ++per_shape[r->shape];
    if (r->kind == SliceKind::kMig) {
      if (!pending_mig_.contains(k))
        return Internal(fmt::format("pending MIG job {} missing from the MIG queue", k.job.value()));
      ++mig;
    }
  }
  if (mig != pending_mig_.size()) return Internal("MIG queue holds jobs that are not pending");
  for (std::size_t i = 0; i < per_shape.size(); ++i) {
    std::size_t queued = i < shape_queue_.size() ? shape_queue_[i].size() : 0;
    if (queued != static_cast<std::size_t>(per_shape[i]))
      return Internal(fmt::format("shape {}: {} pending, {} in its queue", i, per_shape[i], queued));
    if (live_shapes_.contains(static_cast<int>(i)) != (per_shape[i] > 0))
      return Internal(fmt::format("shape {}: live-shape set is wrong", i));
  }
  return Status::Ok();
}

std::string_view ActivityName(Activity a) {
  switch (a) {
    case Activity::kUnknown: return "unknown";
    case Activity::kIdle: return "idle";
    case Activity::kActive: return "active";
  }
  return "unknown";
}

SampleVerdict ClassifySample(const IdlePolicy& idle, const SliceSample& s) {
  const int thr = idle.util_threshold_percent;
  std::string active, idled;
  auto say = [&](bool is_active, const char* name) {
    std::string& to = is_active ? active : idled;
    to += to.empty() ? name : std::string(",") + name;
  };
  if (idle.activity.sm_utilisation && s.sm_known) say(s.sm_percent >= thr && s.sm_percent > 0, "sm");
  if (idle.activity.memory_traffic && s.memory_known) {
    say(s.memory_percent >= thr && s.memory_percent > 0, "mem");
  }
  if (s.processes_known) {
    // No process holding the GPU is idle whatever the driver can or cannot measure; a
    // process is activity only where the policy says presence counts.
    if (s.processes == 0) say(false, "procs");
    else if (idle.activity.process_presence) say(true, "procs");
  }
  const bool gpu_blind = !(idle.activity.sm_utilisation && s.sm_known) &&
                         !(idle.activity.memory_traffic && s.memory_known);
  if (gpu_blind && s.memory_change != Activity::kUnknown) {
    say(s.memory_change == Activity::kActive, "memchange");
  }
  if (s.external != Activity::kUnknown) say(s.external == Activity::kActive, "external");
  if (!active.empty()) return {Activity::kActive, active};
  if (!idled.empty()) return {Activity::kIdle, idled};
  return {Activity::kUnknown, ""};
}

bool SampleShowsActivity(const IdlePolicy& idle, const SliceSample& s) {
  return ClassifySample(idle, s).activity == Activity::kActive;
}

bool ReportCounts(const IdlePolicy& idle, const SliceReport& r, Micros t) {
  return idle.CountsReports(r.source) && t - r.received < idle.report_stale;
}

Micros EffectiveLastActive(const IdlePolicy& idle, const SliceView& s, Micros t) {
  Micros e = s.last_active;
  if (!s.report || !ReportCounts(idle, *s.report, t)) return e;
  const SliceReport& r = *s.report;
  if (r.last_activity >= 0) e = std::max(e, r.last_activity);
  if (r.busy && idle.busy_is_active) {
    const Micros cap = idle.busy_max > 0 ? r.busy_since + idle.busy_max : LLONG_MAX;
    e = std::max(e, std::min(t, cap));
  }
  return e;
}

// While the report is fresh (before stale_at) the window ends at its latest counted activity +
// window; a busy report without a cap keeps it active until stale_at. Once stale, the GPU rule
// alone applies, so the window ends at stale_at at the earliest. Agrees with
// EffectiveLastActive: t >= IdleWindowEnd(s) iff t - EffectiveLastActive(s, t) >= window.
Micros IdleWindowEnd(const IdlePolicy& idle, const SliceView& s) {
  const Micros gpu_end = s.last_active + idle.window;
  if (!s.report || !idle.CountsReports(s.report->source)) return gpu_end;
  const SliceReport& r = *s.report;
  const Micros stale_at = r.received + idle.report_stale;
  Micros e = s.last_active;
  if (r.last_activity >= 0) e = std::max(e, r.last_activity);
  if (r.busy && idle.busy_is_active) {
    if (idle.busy_max <= 0) return std::max(stale_at, gpu_end);
    e = std::max(e, r.busy_since + idle.busy_max);
  }
  const Micros end = e + idle.window;
  return end < stale_at ? end : std::max(stale_at, gpu_end);
}

Scheduler::Scheduler(Config config, std::uint64_t seed)
    : impl_(std::make_unique<Impl>(std::move(config), seed)) {}
Scheduler::~Scheduler() = default;
std::vector<Decision> Scheduler::Handle(const Event& e) { return impl_->Handle(e); }
const Config& Scheduler::config() const { return impl_->config(); }
const std::map<JobId, JobView>& Scheduler::jobs() const { return impl_->jobs(); }
const std::map<SliceId, SliceView>& Scheduler::slices() const { return impl_->slices(); }
const std::map<DeviceRef, DeviceView>& Scheduler::devices() const { return impl_->devices(); }
std::vector<JobId> Scheduler::Pending(std::string_view queue) const { return impl_->Pending(queue); }
std::vector<JobId> Scheduler::Pending() const { return impl_->Pending(std::nullopt); }
const SchedulerStats& Scheduler::stats() const { return impl_->stats(); }
Micros Scheduler::now() const { return impl_->now(); }
Status Scheduler::CheckInvariants() const { return impl_->CheckInvariants(); }
void Scheduler::SetReferencePlacement(bool on) { impl_->set_reference_placement(on); }
std::optional<WaitReason> Scheduler::PendingReason(JobId job) const { return impl_->PendingReason(job); }
std::array<std::int64_t, kWaitReasonKinds> Scheduler::PendingReasonCounts() const {
  return impl_->PendingReasonCounts();
}

}  // namespace gpuslice::sched
