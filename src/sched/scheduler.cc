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

Scheduler::Impl::Impl(Config config, std::uint64_t seed)
    : config_(std::move(config)), rng_(seed), teams_(config_.teams.half_life) {
  InstallQueues();
}

std::vector<Decision> Scheduler::Impl::Handle(const Event& e) {
  out_.clear();
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
                 [&](const Requeue& ev) { OnRequeue(ev); },
                 [&](const ConfigReload& ev) { OnConfigReload(ev); },
                 [&](const AdminDrain& ev) { OnAdminDrain(ev); },
                 [&](const AdminMigMode& ev) { OnAdminMigMode(ev); },
                 [&](const AdminHold& ev) { OnAdminHold(ev); },
                 [&](const AdminRequeue& ev) { OnAdminRequeue(ev); },
             },
             e);
  return std::move(out_);
}

// ---- views
std::vector<JobId> Scheduler::Impl::Pending(std::optional<std::string_view> queue) const {
  std::vector<JobId> ids;
  for (const auto& [k, r] : pending_.all()) {
    if (!queue || r->queue->name == *queue) ids.push_back(k.job);
  }
  return ids;
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
const QueueConfig* Scheduler::QueueOf(JobId job) const { return impl_->QueueOf(job); }
const SchedulerStats& Scheduler::stats() const { return impl_->stats(); }
Micros Scheduler::now() const { return impl_->now(); }
std::vector<TeamStanding> Scheduler::TeamStandings() const { return impl_->TeamStandings(); }
std::string Scheduler::TeamBooksDigest() const { return impl_->TeamBooksDigest(); }
Status Scheduler::CheckInvariants() const { return impl_->CheckInvariants(); }
void Scheduler::SetReferencePlacement(bool on) { impl_->set_reference_placement(on); }
std::optional<WaitReason> Scheduler::PendingReason(JobId job) const { return impl_->PendingReason(job); }
std::array<std::int64_t, kWaitReasonKinds> Scheduler::PendingReasonCounts() const {
  return impl_->PendingReasonCounts();
}

}  // namespace gpuslice::sched
