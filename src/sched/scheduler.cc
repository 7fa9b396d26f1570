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
#include "sched/scheduler.h"

#include <algorithm>
#include <functional>
#include <cassert>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>
#include <climits>
#include <deque>

#include <fmt/format.h>

#include "core/overloaded.h"
#include "sched/capacity_index.h"
#include "sched/host_states.h"
#include "sched/learned_workload.h"
#include "sched/mig_plan.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {

// How the built-in policies order candidates (device level, see docs/config.md).
enum class FastOrder { kNone, kTightest, kLoosest };

FastOrder FastOrderFor(std::string_view policy) {
  if (policy == "best-fit" || policy == "packing") return FastOrder::kTightest;
  if (policy == "spread") return FastOrder::kLoosest;
  return FastOrder::kNone;
}

DeviceMode ModeFor(SliceKind kind) {
  switch (kind) {
    case SliceKind::kWhole: return DeviceMode::kWhole;
    case SliceKind::kMig: return DeviceMode::kMig;
    case SliceKind::kMps: return DeviceMode::kMps;
    case SliceKind::kShared: return DeviceMode::kShared;
  }
  return DeviceMode::kFree;
}

}  // namespace

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

// A job's request resolved against its queue and the catalogue.
struct Resolved {
  JobId job;
  SliceKind kind = SliceKind::kShared;
  int gpus = 1;
  MilliGpu milli = 0;   // per device (whole: 1000; shared / mps: share)
  Bytes memory = 0;     // per device cap; 0: proportional share of the device (shared / mps)
  Bytes mig_need = 0;   // mig: memory the instance must have
  std::string model;    // canonical name or empty
  std::string user;
  Micros limit = 0;
  Micros submit = 0;
  const QueueConfig* queue = nullptr;
  int shape = 0;        // jobs with equal shapes fit or fail together (pending-pass memo)
  // Cached addresses (std::map nodes are stable) so the hot path avoids tree walks.
  JobView* view = nullptr;
  std::map<SliceId, SliceView>::iterator slice;  // while running
  std::vector<DeviceView*> devices;              // while running
  auto ShapeKey() const { return std::tie(kind, gpus, milli, memory, mig_need, model, queue); }
};

struct PendingKey {
  int neg_priority;
  Micros submit;
  JobId job;
  friend auto operator<=>(const PendingKey&, const PendingKey&) = default;
};

struct Usage {
  MilliGpu milli = 0;
  int jobs = 0;
};

// What could ever fit, per model ("" = all models): updated on DeviceAdded / DeviceRemoved.
struct Capacity {
  const DeviceModel* model = nullptr;
  std::multiset<int> host_counts;   // devices per host (hosts with at least one)
  std::multiset<Bytes> memories;    // per device; LLONG_MAX when unknown (not tracked)
  int mig_capable = 0;
};

int ModelIndex(const DeviceModel* m) {
  if (!m) return -1;
  return static_cast<int>(m - AllModels().data());
}

class Scheduler::Impl {
 public:
  Impl(Config config, std::uint64_t seed) : config_(std::move(config)), rng_(seed) {
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

  std::vector<Decision> Handle(const Event& e) {
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
  const Config& config() const { return config_; }
  const std::map<JobId, JobView>& jobs() const { return jobs_; }
  const std::map<SliceId, SliceView>& slices() const { return slices_; }
  const std::map<DeviceRef, DeviceView>& devices() const { return devices_; }
  const SchedulerStats& stats() const { return stats_; }
  Micros now() const { return now_; }

  std::vector<JobId> Pending(std::optional<std::string_view> queue) const {
    std::vector<JobId> ids;
    for (const auto& [k, r] : pending_) {
      if (!queue || r->queue->name == *queue) ids.push_back(k.job);
    }
    return ids;
  }

  Status CheckInvariants() const;

  // ---------------------------------------------------------------- pending reasons
  // Derived from the books as they stand after the last event: placement tries every pending
  // job whenever capacity may have been freed, so a job still pending after a Handle() did not
  // fit then, and this says why. Const and free of side effects (no random draw, no counter):
  // asking never changes a decision. Order: could never fit, user cap, devices kept for this
  // job, devices kept for another job / changing MIG layout, no room.
  std::optional<WaitReason> PendingReason(JobId job) const {
    auto it = resolved_.find(job);
    if (it == resolved_.end() || it->second.view->state != JobState::kPending) return std::nullopt;
    ReasonScan scan;
    return ReasonFor(it->second, scan);
  }

  // The same answers as PendingReason() for every pending job, counted by shape: O(live shapes
  // + pending jobs of capped queues), not O(pending), since the simulator asks at every instant.
  std::array<std::int64_t, kWaitReasonKinds> PendingReasonCounts() const {
    std::array<std::int64_t, kWaitReasonKinds> n{};
    ReasonScan scan;
    for (int shape : live_shapes_) {
      const auto& jobs = shape_queue_[shape];
      const Resolved& head = *jobs.begin()->second;
      const QueueConfig& q = *head.queue;
      const bool holder_here = reservation_ && resolved_.at(reservation_->job).shape == shape;
      if (q.user_max_milli > 0 || q.user_max_jobs > 0) {
        // Within a shape the cap depends only on the user: one answer per user.
        std::unordered_map<std::string_view, std::size_t> by_user;
        for (const auto& [k, r] : jobs) {
          if (holder_here && r->job == reservation_->job) {
            ++n[ReasonFor(*r, scan).index()];
            continue;
          }
          auto [it, fresh] = by_user.try_emplace(r->user, 0);
          if (fresh) it->second = ReasonFor(*r, scan).index();
          ++n[it->second];
        }
        continue;
      }
      std::int64_t same = static_cast<std::int64_t>(jobs.size());
      const WaitReason shaped = ShapeReason(head, scan);  // each live shape is visited once
      if (holder_here && !std::holds_alternative<NeverFits>(shaped)) {
        ++n[WaitReason(WaitingForReservation{}).index()];
        --same;
      }
      n[shaped.index()] += same;
    }
    return n;
  }

 private:
  // What one query learns once and reuses for every job it explains.
  struct ReasonScan {
    std::optional<const DeviceView*> changing;  // the device draining / reconfiguring (or null)
    std::unordered_map<int, WaitReason> by_shape;  // the part that depends only on the shape
  };

  const WaitReason& ShapeReasonOf(const Resolved& r, ReasonScan& scan) const {
    auto it = scan.by_shape.find(r.shape);
    if (it == scan.by_shape.end()) it = scan.by_shape.emplace(r.shape, ShapeReason(r, scan)).first;
    return it->second;
  }

  WaitReason ReasonFor(const Resolved& r, ReasonScan& scan) const {
    const WaitReason& shaped = ShapeReasonOf(r, scan);
    if (std::holds_alternative<NeverFits>(shaped)) return shaped;
    if (auto cap = CapReason(r)) return *cap;
    if (reservation_ && reservation_->job == r.job) {
      WaitingForReservation w{reservation_->node, reservation_->devices, 0};
      for (DeviceIndex di : reservation_->devices) {
        const DeviceView& d = devices_.at({reservation_->node, di});
        w.busy += !d.slices.empty() || d.mode != DeviceMode::kFree;
      }
      return w;
    }
    return shaped;
  }

  // The same test as CapBlocks(), with its figures.
  std::optional<UserCap> CapReason(const Resolved& r) const {
    const QueueConfig& q = *r.queue;
    if (q.user_max_milli == 0 && q.user_max_jobs == 0) return std::nullopt;
    auto it = usage_.find({q.name, r.user});
    Usage u = it == usage_.end() ? Usage{} : it->second;
    if (q.user_max_jobs > 0 && u.jobs + 1 > q.user_max_jobs)
      return UserCap{q.name, r.user, UserCap::Limit::kJobs, q.user_max_jobs, u.jobs, 1};
    if (q.user_max_milli > 0 && u.milli + UsageMilli(r) > q.user_max_milli)
      return UserCap{q.name, r.user, UserCap::Limit::kMilli, q.user_max_milli, u.milli, UsageMilli(r)};
    return std::nullopt;
  }

  const DeviceView* ChangingDevice(ReasonScan& scan) const {
    if (!scan.changing) {
      scan.changing = nullptr;
      if (mig_in_flight_ > 0)
        for (const auto& [ref, d] : devices_)
          if (d.draining || d.reconfiguring) scan.changing = &d;
    }
    return *scan.changing;
  }

  // Would `r` fit now if the devices `extra` (kept empty or changing layout) could take it?
  bool FitsWith(const Resolved& r, NodeId node, const std::vector<const DeviceView*>& extra) const {
    if (r.kind == SliceKind::kWhole) {
      int n = 0;
      for (DeviceIndex di : index_.FreeOn(node)) n += ModelOk(r, devices_.at({node, di}));
      for (const DeviceView* d : extra)
        n += d->slices.empty() && d->mode == DeviceMode::kFree && ModelOk(r, *d);
      return n >= r.gpus;
    }
    for (const DeviceView* d : extra) {
      if (!ModelOk(r, *d)) continue;
      if (d->mode != DeviceMode::kFree && d->mode != ModeFor(r.kind)) continue;
      if (kOneGpu - d->used_milli < r.milli) continue;
      if (d->memory > 0 && d->memory - d->used_memory < MemoryCap(r, *d)) continue;
      if (r.kind == SliceKind::kMps && d->clients >= MpsLimit(*d)) continue;
      return true;
    }
    return false;
  }

  WaitReason ShapeReason(const Resolved& r, ReasonScan& scan) const {
    if (Status st = Feasible(r); !st.ok()) return NeverFits{std::string(st.message())};
    if (auto why = NeverFitsWhy(r)) return NeverFits{*why};
    if (reservation_ && r.kind != SliceKind::kMig) {
      std::vector<const DeviceView*> kept;
      for (DeviceIndex di : reservation_->devices) kept.push_back(&devices_.at({reservation_->node, di}));
      if (FitsWith(r, reservation_->node, kept))
        return ReservedForOther{reservation_->job, reservation_->node, reservation_->devices};
    }
    if (const DeviceView* d = ChangingDevice(scan)) {
      bool helps = r.kind == SliceKind::kMig ? ModelOk(r, *d) : FitsWith(r, d->ref.node, {d});
      if (helps) return DrainingForMig{d->ref, d->reconfiguring};
    }
    NoDeviceFits n{r.kind, r.model, r.gpus, r.milli, r.kind == SliceKind::kMig ? r.mig_need : r.memory};
    if (r.kind == SliceKind::kWhole) n.memory = 0;
    return n;
  }

  // Beyond Feasible(): a device in MIG mode never leaves it, so MIG-mode devices count only for
  // MIG requests; a MIG request is placed on an instance of exactly its smallest fitting
  // profile, which only a layout change (mig.enabled, on a device that has not refused one)
  // can create where none exists.
  std::optional<std::string> NeverFitsWhy(const Resolved& r) const {
    const std::string what = r.model.empty() ? "" : r.model + " ";
    if (r.kind == SliceKind::kMig) {
      for (const auto& [ref, d] : devices_) {
        if (!d.catalogue || !ModelOk(r, d)) continue;
        const MigProfile* p = d.catalogue->SmallestProfileFor(r.mig_need);
        if (!p) continue;
        if (config_.mig.enabled && d.mig_capable && !mig_broken_.contains(ref)) return std::nullopt;
        const MigLayout& l = d.reconfiguring ? d.target_layout : d.layout;
        if ((d.mode == DeviceMode::kMig || d.reconfiguring) &&
            std::any_of(l.begin(), l.end(), [&](const MigPlacement& m) { return m.profile_id == p->id; }))
          return std::nullopt;
      }
      if (!config_.mig.enabled)
        return fmt::format("MIG layouts are not changed (mig.enabled = false) and no {}GPU in MIG mode has an "
                           "instance sized for {}", what, FormatBytes(r.mig_need));
      return fmt::format("every MIG-capable {}GPU that could hold an instance with {} refused a MIG "
                         "reconfiguration or lacks that instance", what, FormatBytes(r.mig_need));
    }
    if (mig_mode_devices_ == 0) return std::nullopt;
    if (r.kind == SliceKind::kWhole) {
      int best = 0;
      for (const auto& [node, indices] : nodes_) {
        int n = 0;
        for (DeviceIndex di : indices) {
          const DeviceView& d = devices_.at({node, di});
          n += d.mode != DeviceMode::kMig && ModelOk(r, d);
        }
        best = std::max(best, n);
      }
      if (best >= r.gpus) return std::nullopt;
      return fmt::format("it needs {} {}GPUs on one host and at most {} are outside MIG mode (a GPU in MIG "
                         "mode only takes MIG slices)", r.gpus, what, best);
    }
    for (const auto& [ref, d] : devices_) {
      if (d.mode == DeviceMode::kMig || !ModelOk(r, d)) continue;
      if (d.memory == 0 || d.memory >= MemoryCap(r, d)) return std::nullopt;
    }
    return fmt::format("every {}GPU{} is in MIG mode (a GPU in MIG mode only takes MIG slices)", what,
                       r.memory > 0 ? fmt::format(" with {} of memory", FormatBytes(r.memory)) : "");
  }

 public:
  void set_reference_placement(bool on) { reference_placement_ = on; }

 private:
  // ---------------------------------------------------------------- devices and indexes
  const DeviceModel* ModelOf(const DeviceRef& ref) const { return devices_.at(ref).catalogue; }

  static int MpsLimit(const DeviceView& d) {
    return d.catalogue && d.catalogue->mps_max_clients > 0 ? d.catalogue->mps_max_clients : 48;
  }

  static bool Schedulable(const DeviceView& d) {
    return !d.draining && !d.reconfiguring && !d.reserved_for.valid();
  }

  // MIG instances with a slice, sorted by start: kept per device (the indexes read it on every
  // change of a MIG device); InUseFromSlices() recomputes it for CheckInvariants.
  MigLayout InUse(const DeviceView& d) const {
    auto it = mig_in_use_.find(&d);
    return it == mig_in_use_.end() ? MigLayout{} : it->second;
  }

  static void SortByStart(MigLayout& l) {
    std::sort(l.begin(), l.end(), [](const MigPlacement& a, const MigPlacement& b) {
      return std::tie(a.start, a.profile_id) < std::tie(b.start, b.profile_id);
    });
  }

  MigLayout InUseFromSlices(const DeviceView& d) const {
    MigLayout in_use;
    for (SliceId s : d.slices) {
      const SliceView& sv = slices_.at(s);
      if (sv.mig) in_use.push_back(*sv.mig);
    }
    SortByStart(in_use);
    return in_use;
  }

  DeviceFacts Facts(const DeviceView& d) const {
    DeviceFacts f;
    f.model = d.catalogue;
    f.model_idx = ModelIndex(f.model);
    f.mps_limit = MpsLimit(d);
    if (d.mode == DeviceMode::kMig) f.in_use = InUse(d);
    return f;
  }

  // Every change to a device goes through here so the indexes stay exact.
  template <typename F>
  void Mutate(const DeviceRef& ref, F f) {
    Mutate(devices_.at(ref), std::move(f));
  }
  template <typename F>
  void Mutate(DeviceView& d, F f) {
    bool was_changing = d.draining || d.reconfiguring;
    index_.Remove(d, Facts(d));
    f(d);
    index_.Add(d, Facts(d));
    if (by_state_) host_states_.MarkDirty(d.ref.node);
    mig_in_flight_ += (d.draining || d.reconfiguring) - was_changing;
  }

  void SetMode(DeviceView& d, DeviceMode mode) {
    mig_mode_devices_ += (mode == DeviceMode::kMig) - (d.mode == DeviceMode::kMig);
    if (d.mode != mode && !d.slices.empty() && violation_.empty()) {
      violation_ = fmt::format("device {}/{} changed mode {} -> {} with {} slices", d.ref.node.value(),
                               d.ref.index.value(), DeviceModeName(d.mode), DeviceModeName(mode),
                               d.slices.size());
    }
    d.mode = mode;
  }

  void CountCapacity(const DeviceView& d, int delta) {
    std::vector<std::string> keys{std::string()};
    if (!d.model.empty()) keys.push_back(d.model);
    for (const std::string& key : keys) {
      Capacity& c = capacity_[key];
      if (!key.empty()) c.model = d.catalogue;
      int& n = host_model_count_[d.ref.node][key];
      if (n > 0) c.host_counts.erase(c.host_counts.find(n));
      n += delta;
      if (n > 0) c.host_counts.insert(n);
      Bytes mem = d.memory > 0 ? d.memory : LLONG_MAX;
      if (delta > 0) c.memories.insert(mem);
      else c.memories.erase(c.memories.find(mem));
      c.mig_capable += d.mig_capable ? delta : 0;
    }
    if (delta < 0) {
      auto& m = host_model_count_[d.ref.node];
      if (m[std::string()] == 0) host_model_count_.erase(d.ref.node);
    }
  }

  void OnDeviceAdded(const DeviceAdded& e) {
    if (devices_.contains(e.device)) return;  // idempotent: agents re-announce
    DeviceView d;
    d.ref = e.device;
    d.uuid = e.uuid;
    const DeviceModel* model = nullptr;
    if (auto m = FindModel(e.model); m.ok()) model = *m;
    d.model = model ? model->name : e.model;
    d.catalogue = model;
    d.memory = model ? model->memory : 0;
    d.mig_capable = e.mig_capable && model && model->supports_mig();
    d.mode = e.mig_enabled && d.mig_capable ? DeviceMode::kMig : DeviceMode::kFree;
    if (d.mode == DeviceMode::kMig) d.layout = e.mig_layout;
    mig_mode_devices_ += d.mode == DeviceMode::kMig;
    nodes_[e.device.node].insert(e.device.index);
    auto [it, _] = devices_.emplace(e.device, std::move(d));
    index_.Add(it->second, Facts(it->second));
    if (by_state_) host_states_.MarkDirty(e.device.node, /*devices_changed=*/true);
    CountCapacity(it->second, +1);
    Schedule(/*only=*/std::nullopt);
  }

  void OnDeviceRemoved(const DeviceRemoved& e) {
    auto it = devices_.find(e.device);
    if (it == devices_.end()) return;
    std::vector<SliceId> lost = it->second.slices;
    for (SliceId s : lost) {
      const SliceView& sv = slices_.at(s);
      out_.push_back(Stop{sv.job, s, StopReason::kDeviceLost});
      ++stats_.stopped;
      EndRunning(sv.job, "device-lost");
    }
    if (it->second.reserved_for.valid()) ReleaseReservation();  // chosen again later, elsewhere
    DeviceView& d = it->second;
    index_.Remove(d, Facts(d));
    if (by_state_) host_states_.MarkDirty(e.device.node, /*devices_changed=*/true);
    if (d.draining || d.reconfiguring) --mig_in_flight_;
    CountCapacity(d, -1);
    mig_mode_devices_ -= d.mode == DeviceMode::kMig;
    mig_in_use_.erase(&d);
    nodes_[e.device.node].erase(e.device.index);
    if (nodes_[e.device.node].empty()) nodes_.erase(e.device.node);
    devices_.erase(it);
    mig_broken_.erase(e.device);
    // Pending jobs that can no longer ever fit are rejected now rather than waiting forever.
    std::vector<std::pair<JobId, Status>> doomed;
    for (const auto& [k, r] : pending_) {
      if (Status st = Feasible(*r); !st.ok()) doomed.emplace_back(k.job, st);
    }
    for (const auto& [j, st] : doomed) RejectPending(j, st);
    Schedule(std::nullopt);
  }

  // ---------------------------------------------------------------- jobs
  Result<Resolved> Resolve(const Submit& e) const {
    Resolved r;
    r.job = e.job;
    r.user = e.user;
    r.submit = now_;
    std::string qname = e.queue.empty() ? config_.default_queue : e.queue;
    r.queue = config_.FindQueue(qname);
    if (!r.queue) return NotFound(fmt::format("queue '{}' does not exist", qname));
    const QueueConfig& q = *r.queue;
    const JobRequest& req = e.request;
    r.kind = req.kind.value_or(q.default_kind);
    if (!q.Allows(r.kind))
      return InvalidArgument(fmt::format("queue '{}' does not allow slice kind '{}'", q.name,
                                         SliceKindName(r.kind)));
    if (req.gpus < 0) return InvalidArgument(fmt::format("gpus = {}: must not be negative", req.gpus));
    if (req.milli < 0 || req.milli > kOneGpu)
      return InvalidArgument(fmt::format("gpu = {}: must be between 1m and 1", req.milli));
    if (req.memory < 0) return InvalidArgument(fmt::format("memory = {}: must not be negative", req.memory));
    if (req.time_limit < 0)
      return InvalidArgument(fmt::format("time_limit = {}: must not be negative", req.time_limit));
    Micros queue_limit = q.EffectiveLimit(0);
    if (req.time_limit > 0 && queue_limit > 0 && req.time_limit > queue_limit)
      return InvalidArgument(fmt::format("time_limit = {}: longer than queue '{}' allows ({})",
                                         FormatDuration(req.time_limit), q.name,
                                         FormatDuration(queue_limit)));
    r.limit = q.EffectiveLimit(req.time_limit);
    if (!req.model.empty()) {
      auto m = FindModel(req.model);
      if (!m.ok()) return m.status();
      r.model = (*m)->name;
    }
    switch (r.kind) {
      case SliceKind::kWhole:
        r.gpus = req.gpus > 0 ? req.gpus : q.default_gpus;
        if (req.milli > 0 && req.milli != kOneGpu)
          return InvalidArgument(fmt::format("gpu = {}: whole slices take whole devices (use gpus=N)",
                                             FormatMilliGpu(req.milli)));
        r.milli = kOneGpu;
        break;
      case SliceKind::kShared:
      case SliceKind::kMps:
        if (req.gpus > 1)
          return InvalidArgument(fmt::format("gpus = {}: {} slices are on one device", req.gpus,
                                             SliceKindName(r.kind)));
        r.milli = req.milli > 0 ? req.milli : q.default_milli;
        r.memory = req.memory > 0 ? req.memory : q.default_memory;
        break;
      case SliceKind::kMig:
        if (req.gpus > 1)
          return InvalidArgument(fmt::format("gpus = {}: a mig slice is one instance", req.gpus));
        r.mig_need = req.memory > 0 ? req.memory : q.default_memory;
        if (r.mig_need <= 0) r.mig_need = 1;
        break;
    }
    if (q.user_max_milli > 0 && UsageMilli(r) > q.user_max_milli)
      return ResourceExhausted(fmt::format("asks for {} GPU, more than queue '{}' allows one user ({})",
                                           FormatMilliGpu(UsageMilli(r)), q.name,
                                           FormatMilliGpu(q.user_max_milli)));
    return r;
  }

  // GPU share counted against per-user caps before placement (a MIG slice's share is only
  // known once its instance is chosen; it counts from then on).
  static MilliGpu UsageMilli(const Resolved& r) {
    return r.kind == SliceKind::kMig ? 0 : r.milli * r.gpus;
  }

  bool ModelOk(const Resolved& r, const DeviceView& d) const {
    return r.model.empty() || d.model == r.model;
  }

  Bytes MemoryCap(const Resolved& r, const DeviceView& d) const {
    if (r.memory > 0) return r.memory;
    return d.memory * r.milli / kOneGpu;
  }

  // "Could ever fit": on the devices present, ignoring what runs now.
  Status Feasible(const Resolved& r) const {
    std::string what = r.model.empty() ? "" : r.model + " ";
    auto it = capacity_.find(r.model);
    const Capacity* c = it == capacity_.end() ? nullptr : &it->second;
    switch (r.kind) {
      case SliceKind::kWhole:
        if (c && !c->host_counts.empty() && *c->host_counts.rbegin() >= r.gpus) return Status::Ok();
        return ResourceExhausted(fmt::format("no host has {} {}devices", r.gpus, what));
      case SliceKind::kShared:
      case SliceKind::kMps:
        if (c && !c->memories.empty() && *c->memories.rbegin() >= r.memory) return Status::Ok();
        return ResourceExhausted(fmt::format("no {}device has {} of memory", what, FormatBytes(r.memory)));
      case SliceKind::kMig:
        for (const auto& [name, cap] : capacity_) {
          if (name.empty() || cap.mig_capable == 0 || !cap.model) continue;
          if (!r.model.empty() && name != r.model) continue;
          if (cap.model->SmallestProfileFor(r.mig_need)) return Status::Ok();
        }
        return ResourceExhausted(fmt::format("no MIG-capable {}device has an instance with {}", what,
                                             FormatBytes(r.mig_need)));
    }
    return Internal("unknown kind");
  }

  void OnSubmit(const Submit& e) {
    if (jobs_.contains(e.job)) {
      out_.push_back(Reject{e.job, AlreadyExists(fmt::format("job {} already submitted", e.job.value()))});
      ++stats_.rejected;
      return;
    }
    JobView j;
    j.job = e.job;
    j.user = e.user;
    j.queue = e.queue.empty() ? config_.default_queue : e.queue;
    j.request = e.request;
    j.submit_time = now_;
    auto r = Resolve(e);
    Status st = r.ok() ? Feasible(*r) : r.status();
    if (!st.ok()) {
      JobView& rec = jobs_.emplace(e.job, std::move(j)).first->second;
      EndJob(rec, "rejected");
      out_.push_back(Reject{e.job, st.WithContext(fmt::format("job {}", e.job.value()))});
      ++stats_.rejected;
      return;
    }
    j.kind = r->kind;
    auto [shape_it, _] = shapes_.try_emplace(
        std::make_tuple(r->kind, r->gpus, r->milli, r->memory, r->mig_need, r->model, r->queue),
        static_cast<int>(shapes_.size()));
    r->shape = shape_it->second;
    JobView* view = &jobs_.emplace(e.job, std::move(j)).first->second;
    Resolved* rp = &resolved_.emplace(e.job, std::move(r).value()).first->second;
    rp->view = view;
    if (rp->kind != SliceKind::kMig) workload_.Count(rp->gpus, rp->milli);
    AddPending(rp);
    Schedule(e.job);
  }

  // The pending set, also kept per shape (a pass visits shapes, not every job) and with the
  // MIG jobs apart (the planner looks at the first few of them).
  void AddPending(Resolved* r) {
    PendingKey k{-r->queue->priority, r->submit, r->job};
    pending_.emplace(k, r);
    if (r->kind == SliceKind::kMig) pending_mig_.emplace(k, r);
    if (MayReserve(*r)) pending_reserve_[r->queue].emplace(k, r);
    if (shape_queue_.size() <= static_cast<std::size_t>(r->shape)) shape_queue_.resize(r->shape + 1);
    shape_queue_[r->shape].emplace(k, r);
    live_shapes_.insert(r->shape);
  }
  void RemovePending(const Resolved& r) {
    PendingKey k{-r.queue->priority, r.submit, r.job};
    pending_.erase(k);
    pending_mig_.erase(k);
    if (MayReserve(r)) pending_reserve_[r.queue].erase(k);
    auto& q = shape_queue_[r.shape];
    q.erase(k);
    if (q.empty()) live_shapes_.erase(r.shape);
  }

  void EndJob(JobView& j, std::string_view reason) {
    j.state = JobState::kEnded;
    j.end_time = now_;
    j.end_reason = std::string(reason);
    Remember(j.job);
  }

  // Ended jobs stay visible for a while (API, metrics), then are forgotten so that a
  // long-running daemon or simulation does not grow without bound.
  static constexpr std::size_t kEndedHistory = 10000;
  void Remember(JobId ended) {
    ended_.push_back(ended);
    while (ended_.size() > kEndedHistory) {
      jobs_.erase(ended_.front());
      ended_.pop_front();
    }
  }

  void RejectPending(JobId id, const Status& st) {
    const Resolved& r = resolved_.at(id);
    ReleaseReservationOf(id);
    RemovePending(r);
    resolved_.erase(id);
    EndJob(jobs_.at(id), "rejected");
    out_.push_back(Reject{id, st.WithContext(fmt::format("job {}", id.value()))});
    ++stats_.rejected;
  }

  void OnCancel(const Cancel& e) {
    auto it = jobs_.find(e.job);
    if (it == jobs_.end() || it->second.state == JobState::kEnded) return;
    if (it->second.state == JobState::kPending) {
      const Resolved& r = resolved_.at(e.job);
      const bool held = reservation_ && reservation_->job == e.job;
      ReleaseReservationOf(e.job);
      RemovePending(r);
      resolved_.erase(e.job);
      EndJob(it->second, "cancelled");
      if (held) Schedule(std::nullopt);  // the kept devices are free for others again
      return;
    }
    out_.push_back(Stop{e.job, it->second.slice, StopReason::kCancelled});
    ++stats_.stopped;
    OnEnd(e.job, "cancelled");
  }

  // A running job ends (finished, cancelled): release, then reschedule.
  void OnEnd(JobId id, std::string_view reason) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.state != JobState::kRunning) return;
    EndRunning(id, reason);
    Schedule(std::nullopt);
  }

  // Releases a running job's slice; the job is ended (or pending again when `requeue`).
  void EndRunning(JobId id, std::string_view reason, bool requeue = false) {
    Resolved& r = resolved_.at(id);
    JobView& j = *r.view;
    auto sit = r.slice;
    const SliceView s = sit->second;  // a copy: the indexes read the record until it is erased
    std::vector<DeviceView*> devs = std::move(r.devices);
    r.devices.clear();
    if (r.queue->user_max_milli > 0 || r.queue->user_max_jobs > 0) {
      Usage& u = usage_[{j.queue, j.user}];
      u.milli -= SliceUsage(s);
      u.jobs -= 1;
    }
    for (DeviceView* dv : devs) {
      Mutate(*dv, [&](DeviceView& d) {
        d.slices.erase(std::find(d.slices.begin(), d.slices.end(), s.slice));
        d.clients -= 1;
        if (s.kind != SliceKind::kMig) {
          d.used_milli -= s.milli;
          d.used_memory -= ReservedOn(s, d);
        } else {
          MigLayout& used = mig_in_use_[&d];
          used.erase(std::find(used.begin(), used.end(), *s.mig));
          if (used.empty()) mig_in_use_.erase(&d);
        }
        if (d.slices.empty() && d.mode != DeviceMode::kMig) SetMode(d, DeviceMode::kFree);
      });
    }
    Untime(s.slice);
    reclaimable_.erase(s.slice);
    slices_.erase(sit);
    j.slice = SliceId();
    if (requeue) {
      j.state = JobState::kPending;
      AddPending(&r);
    } else {
      EndJob(j, reason);
      resolved_.erase(id);
    }
    // A draining device that became empty is reconfigured now.
    for (DeviceView* dv : devs) MaybeFinishDrain(*dv);
  }

  // The memory a (non-MIG) slice holds on one of its devices. A whole slice holds all of each
  // device, its own size: booking one figure on every device over-commits the smaller ones
  // when a multi-device job spans models (an 80GB H100 and a 40GB A100).
  static Bytes ReservedOn(const SliceView& s, const DeviceView& d) {
    return s.kind == SliceKind::kWhole ? d.memory : s.memory;
  }

  static MilliGpu SliceUsage(const SliceView& s) {
    return s.milli * static_cast<MilliGpu>(s.devices.size());
  }

  // ---------------------------------------------------------------- placement
  struct Choice {
    NodeId node;
    std::vector<DeviceIndex> devices;
    std::optional<MigPlacement> mig;
  };

  bool SharedFits(const Resolved& r, const DeviceView& d) const {
    if (!Schedulable(d) || !ModelOk(r, d)) return false;
    DeviceMode want = ModeFor(r.kind);
    if (d.mode != DeviceMode::kFree && d.mode != want) return false;
    if (kOneGpu - d.used_milli < r.milli) return false;
    if (d.memory > 0 && d.memory - d.used_memory < MemoryCap(r, d)) return false;
    if (r.kind == SliceKind::kMps && d.clients >= MpsLimit(d)) return false;
    return true;
  }

  std::optional<Choice> PlaceFractionalFast(const Resolved& r, FastOrder order) {
    const auto& index = r.kind == SliceKind::kMps ? index_.mps() : index_.shared();
    auto try_node = [&](NodeId nid) -> std::optional<Choice> {
      for (DeviceIndex di : index_.FreeOn(nid)) {
        ++stats_.placement_attempts;
        if (SharedFits(r, devices_.at({nid, di}))) return Choice{nid, {di}, std::nullopt};
      }
      return std::nullopt;
    };
    // A free device: best-fit takes it from the host with the fewest free devices (keeps whole
    // hosts free for multi-GPU jobs); spread from the host with the most.
    auto from_free = [&]() -> std::optional<Choice> {
      const auto& hosts = index_.free_by_node();
      if (order == FastOrder::kLoosest) {
        for (auto it = hosts.rbegin(); it != hosts.rend(); ++it)
          if (auto c = try_node(it->second)) return c;
      } else {
        for (const auto& [count, nid] : hosts)
          if (auto c = try_node(nid)) return c;
      }
      return std::nullopt;
    };
    auto at = [](const DeviceRef& ref) { return Choice{ref.node, {ref.index}, std::nullopt}; };
    if (order == FastOrder::kLoosest) {
      if (auto c = from_free()) return c;
      for (auto it = index.rbegin(); it != index.rend() && it->first >= r.milli; ++it) {
        ++stats_.placement_attempts;
        if (SharedFits(r, devices_.at(it->second))) return at(it->second);
      }
      return std::nullopt;
    }
    for (auto it = index.lower_bound({r.milli, DeviceRef{}}); it != index.end(); ++it) {
      ++stats_.placement_attempts;
      if (SharedFits(r, devices_.at(it->second))) return at(it->second);
    }
    return from_free();
  }

  std::optional<Choice> PlaceWholeFast(const Resolved& r, FastOrder order) {
    auto try_node = [&](NodeId nid) -> std::optional<Choice> {
      ++stats_.placement_attempts;
      Choice c{nid, {}, std::nullopt};
      for (DeviceIndex di : index_.FreeOn(nid)) {
        if (!ModelOk(r, devices_.at({nid, di}))) continue;
        c.devices.push_back(di);
        if (static_cast<int>(c.devices.size()) == r.gpus) return c;
      }
      return std::nullopt;
    };
    const auto& hosts = index_.free_by_node();
    if (order == FastOrder::kLoosest) {
      for (auto it = hosts.rbegin(); it != hosts.rend() && it->first >= r.gpus; ++it)
        if (auto c = try_node(it->second)) return c;
      return std::nullopt;
    }
    for (auto it = hosts.lower_bound({r.gpus, NodeId{}}); it != hosts.end(); ++it)
      if (auto c = try_node(it->second)) return c;
    return std::nullopt;
  }

  // Other policies (fgd, gpuslice, ...): Filter/Score over every host, via placement.h.
  // Only hosts the indexes say could take the request are shown to the policy: the others would
  // fail Fits() anyway, so the choice (scores, lowest-index and seeded random tie-breaks, which
  // only count fitting hosts) is the same as over every host, in NodeId order.
  std::optional<Choice> PlaceGeneric(const Resolved& r, const PlacementPolicy& policy) {
    scratch_gpus_.clear();
    scratch_nodes_.clear();
    scratch_refs_.clear();
    scratch_hosts_.clear();
    for (const auto& [count, nid] : index_.free_by_node())
      if (r.kind != SliceKind::kWhole || count >= r.gpus) scratch_hosts_.push_back(nid);
    if (r.kind != SliceKind::kWhole) {
      const auto& idx = r.kind == SliceKind::kMps ? index_.mps() : index_.shared();
      for (auto it = idx.lower_bound({r.milli, DeviceRef{}}); it != idx.end(); ++it)
        scratch_hosts_.push_back(it->second.node);
    }
    std::sort(scratch_hosts_.begin(), scratch_hosts_.end());
    scratch_hosts_.erase(std::unique(scratch_hosts_.begin(), scratch_hosts_.end()), scratch_hosts_.end());
    // devices_ is ordered by (node, index): a host's devices are one run, found with one
    // lookup (the same devices in the same order as nodes_ lists them). Reserved for every
    // device so the spans below stay valid while the vector fills.
    scratch_gpus_.reserve(devices_.size());
    for (NodeId nid : scratch_hosts_) {
      auto it = devices_.lower_bound(DeviceRef{nid, DeviceIndex(0)});
      const std::size_t pos = scratch_gpus_.size();
      const std::string_view model = it->second.model;
      for (; it != devices_.end() && it->first.node == nid; ++it) {
        const DeviceView& d = it->second;
        bool ok = r.kind == SliceKind::kWhole
                      ? (Schedulable(d) && d.mode == DeviceMode::kFree && ModelOk(r, d))
                      : SharedFits(r, d);
        GpuView g;
        g.usable = ok;
        g.free_milli = ok ? kOneGpu - d.used_milli : 0;
        g.free_memory = ok ? std::max<Bytes>(d.memory - d.used_memory, 0) : 0;
        scratch_gpus_.push_back(g);
        scratch_refs_.push_back(it->first);
      }
      NodeView v;
      v.index = static_cast<std::uint32_t>(scratch_nodes_.size());
      v.model = model;
      v.cpu_milli_free = v.cpu_milli_total = 1 << 30;
      v.memory_free = v.memory_total = Bytes{1} << 50;
      v.gpus = std::span<const GpuView>(scratch_gpus_.data() + pos, scratch_gpus_.size() - pos);
      scratch_nodes_.push_back(v);
    }
    PlacementRequest req;
    req.num_gpus = r.gpus;
    req.milli_per_gpu = r.milli;
    PlacementContext ctx;
    ctx.rng = &rng_;
    ctx.workload = workload_.Shapes();
    ++stats_.placement_attempts;
    auto p = Place(policy, req, scratch_nodes_, ctx);
    if (!p) return std::nullopt;
    std::size_t first = 0;
    for (std::uint32_t i = 0; i < p->node_index; ++i) first += scratch_nodes_[i].gpus.size();
    Choice c{scratch_refs_[first].node, {}, std::nullopt};
    for (int g : p->gpu_indices) c.devices.push_back(scratch_refs_[first + g].index);
    std::sort(c.devices.begin(), c.devices.end());
    return c;
  }

  // The GPU view of device `d` for request `r`, as the policy sees it (PlaceGeneric, PlaceByState).
  GpuView ViewOf(const Resolved& r, const DeviceView& d) const {
    bool ok = r.kind == SliceKind::kWhole ? (Schedulable(d) && d.mode == DeviceMode::kFree && ModelOk(r, d))
                                          : SharedFits(r, d);
    GpuView g;
    g.usable = ok;
    g.free_milli = ok ? kOneGpu - d.used_milli : 0;
    g.free_memory = ok ? std::max<Bytes>(d.memory - d.used_memory, 0) : 0;
    return g;
  }

  // ViewOf() from a device's HostStates key (RefileHost() below), without reading the device:
  // the same rules, on the key's copies of the fields they read. `model`: HostStates'
  // id of r.model, kAnyModel when empty, -1 when no device has that model.
  static constexpr int kAnyModel = -2;
  static GpuView ViewOfKey(const Resolved& r, int model, const DeviceStateKey& k) {
    bool ok = k.schedulable && (model == kAnyModel || k.model == model);
    const auto mode = static_cast<DeviceMode>(k.mode);
    if (ok && r.kind == SliceKind::kWhole) {
      ok = mode == DeviceMode::kFree;
    } else if (ok) {  // SharedFits()
      ok = (mode == DeviceMode::kFree || mode == ModeFor(r.kind)) && kOneGpu - k.used_milli >= r.milli &&
           !(k.memory > 0 && k.memory - k.used_memory < (r.memory > 0 ? r.memory : k.memory * r.milli / kOneGpu)) &&
           !(r.kind == SliceKind::kMps && k.clients >= k.mps_limit);
    }
    GpuView g;
    g.usable = ok;
    g.free_milli = ok ? kOneGpu - k.used_milli : 0;
    g.free_memory = ok ? std::max<Bytes>(k.memory - k.used_memory, 0) : 0;
    return g;
  }

  void RefileHost(NodeId nid) {
    scratch_keys_.clear();
    scratch_devs_.clear();
    // The host's devices in index order: as filed last time unless devices came or went.
    // Their models' ids likewise (a lookup by name otherwise).
    const std::vector<int>* models = nullptr;
    if (const std::vector<const DeviceView*>* same = host_states_.IndexOrder(nid)) {
      scratch_devs_.assign(same->begin(), same->end());
      models = &host_states_.IndexModels(nid);
    } else {
      for (auto it = devices_.lower_bound(DeviceRef{nid, DeviceIndex(0)});
           it != devices_.end() && it->first.node == nid; ++it)
        scratch_devs_.push_back(&it->second);
    }
    for (std::size_t i = 0; i < scratch_devs_.size(); ++i) {
      const DeviceView& d = *scratch_devs_[i];
      const int model = models != nullptr ? (*models)[i] : host_states_.ModelId(d.model);
      const bool schedulable = Schedulable(d);
      // ViewOf() shows every request the same unusable GPU for these (host_states.h).
      if (!schedulable || d.mode == DeviceMode::kMig || d.mode == DeviceMode::kWhole) {
        scratch_keys_.push_back(InertKey(model));
        continue;
      }
      DeviceStateKey k;
      k.model = model;
      k.mode = static_cast<int>(d.mode);
      k.schedulable = true;
      k.used_milli = d.used_milli;
      k.memory = d.memory;
      k.used_memory = d.used_memory;
      // Only an MPS slice reads the clients and their limit (SharedFits), and only on a device
      // that is free (no clients) or in MPS mode.
      k.clients = d.mode == DeviceMode::kMps ? d.clients : 0;
      k.mps_limit = d.mode == DeviceMode::kShared ? 0 : MpsLimit(d);
      // Necessary conditions of ViewOf() fitting, for HostStates' quick reject.
      const bool free = d.mode == DeviceMode::kFree;
      k.whole_free = free && d.used_milli == 0;
      k.share_free = free || d.mode == DeviceMode::kShared ? kOneGpu - d.used_milli : -1;
      k.mps_free = free || d.mode == DeviceMode::kMps ? kOneGpu - d.used_milli : -1;
      scratch_keys_.push_back(k);
    }
    host_states_.Set(nid, scratch_keys_, scratch_devs_);
  }

  // Makes memo_slot_/memo_generation_ those of request shape `r` under `policy`: the slot that
  // holds that shape, else the least recently used one, given a new generation. Every slot is
  // given up when the workload the policy sees changes (a new generation for each shape).
  void SelectMemoSlot(const Resolved& r, const PlacementPolicy& policy) {
    if (memo_workload_ != workload_.version()) {
      memo_workload_ = workload_.version();
      for (MemoSlot& slot : memo_slots_) slot = MemoSlot{};
    }
    ++memo_clock_;
    int victim = 0;
    for (int i = 0; i < HostStates::kMemoSlots; ++i) {
      MemoSlot& slot = memo_slots_[i];
      const MemoKey& k = slot.key;
      if (slot.generation != 0 && k.kind == r.kind && k.gpus == r.gpus && k.milli == r.milli &&
          k.memory == r.memory && k.model == r.model && k.policy == &policy) {
        slot.used = memo_clock_;
        memo_slot_ = i;
        memo_generation_ = slot.generation;
        return;
      }
      if (slot.used < memo_slots_[victim].used) victim = i;
    }
    MemoSlot& slot = memo_slots_[victim];
    slot.key = MemoKey{r.kind, r.gpus, r.milli, r.memory, r.model, &policy};
    slot.generation = ++memo_generations_;
    slot.used = memo_clock_;
    memo_slot_ = victim;
    memo_generation_ = slot.generation;
    oldest_live_generation_ = slot.generation;
    for (const MemoSlot& other : memo_slots_) {
      if (other.generation != 0) oldest_live_generation_ = std::min(oldest_live_generation_, other.generation);
    }
  }

  // PlaceGeneric's decision, computed per distinct host state (host_states.h) for policies that
  // ScoresByNodeState(): each live state is scored once (memoised while the request shape and
  // the workload are unchanged), and the host is then chosen exactly as Place() would scan the
  // hosts in NodeId order: Place() collects the hosts of the best score in that order and
  // draws one of them from rng_ (one draw, none for a single host); here the same draw picks
  // the k-th host of the best-scoring states in NodeId order. Cost: O(states that could take
  // the request) + O(best states x log hosts), not O(hosts).
  std::optional<Choice> PlaceByState(const Resolved& r, const PlacementPolicy& policy) {
    host_states_.TakeDirty(scratch_dirty_);
    for (NodeId nid : scratch_dirty_) RefileHost(nid);
    SelectMemoSlot(r, policy);
    PlacementRequest req;
    req.num_gpus = r.gpus;
    req.milli_per_gpu = r.milli;
    PlacementContext ctx;
    ctx.rng = &rng_;
    ctx.workload = workload_.Shapes();
    ++stats_.placement_attempts;
    scratch_levels_.clear();
    request_model_ = r.model.empty() ? kAnyModel : host_states_.FindModelId(r.model);
    // Only states whose summary could take the request (a necessary condition of Fits).
    auto visit = [&](HostStates::State& s) {
      const HostStates::Memo& m = s.memo[memo_slot_];
      if (m.generation != memo_generation_) {
        ScoreState(r, policy, req, ctx, s);
      }
      if (m.fits) scratch_levels_.push_back({m.score, &s});
    };
    if (r.kind == SliceKind::kWhole) {
      host_states_.ForWhole(r.gpus, visit);
    } else {
      host_states_.ForShare(r.kind == SliceKind::kMps, r.milli, visit);
    }
    if (scratch_levels_.empty()) return std::nullopt;
    // The states of the best score; the hosts in them are the ties Place() would collect.
    double top = scratch_levels_.front().first;
    for (const auto& [score, st] : scratch_levels_) top = std::max(top, score);
    scratch_top_.clear();
    std::uint64_t ties = 0;
    for (const auto& [score, st] : scratch_levels_) {
      if (score != top) continue;
      scratch_top_.push_back(st);
      ties += st->hosts.size();
    }
    // Place()'s one draw over the ties, then the k-th of them in NodeId order.
    std::uint64_t k = ties > 1 ? std::uniform_int_distribution<std::uint64_t>(0, ties - 1)(rng_) : 0;
    HostStates::State* chosen_state = scratch_top_.front();
    NodeId chosen = chosen_state->hosts[k];
    if (scratch_top_.size() > 1) {
      // The smallest host id with k + 1 tied hosts at or below it (each state's hosts are sorted).
      auto at_or_below = [&](std::uint32_t id) {
        std::uint64_t n = 0;
        for (const HostStates::State* st : scratch_top_) {
          n += std::upper_bound(st->hosts.begin(), st->hosts.end(), NodeId(id)) - st->hosts.begin();
        }
        return n;
      };
      std::uint32_t lo = UINT32_MAX, hi = 0;
      for (const HostStates::State* st : scratch_top_) {
        lo = std::min(lo, st->hosts.front().value());
        hi = std::max(hi, st->hosts.back().value());
      }
      while (lo < hi) {
        const std::uint32_t mid = lo + (hi - lo) / 2;
        if (at_or_below(mid) >= k + 1) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      chosen = NodeId(lo);
      for (HostStates::State* st : scratch_top_) {
        if (std::binary_search(st->hosts.begin(), st->hosts.end(), chosen)) chosen_state = st;
      }
    }
    Choice c{chosen, {}, std::nullopt};
    const std::vector<const DeviceView*>& order = host_states_.Views(chosen);
    for (int g : chosen_state->memo[memo_slot_].gpus) c.devices.push_back(order[g]->ref.index);
    std::sort(c.devices.begin(), c.devices.end());
    return c;
  }

  // One state's policy result for `r`, on the GPU views of its first host in canonical order
  // with the GPUs the request cannot use moved last (a reordering that keeps the usable GPUs in
  // order, so a policy that ScoresByNodeState() chooses the same, and the unusable GPUs all
  // show the same view). States whose views are then equal get one policy call per generation
  // (view_memo_): whatever else differs between them (what runs on GPUs the request cannot
  // use, memory beyond the request) is invisible to the policy.
  void ScoreState(const Resolved& r, const PlacementPolicy& policy, const PlacementRequest& req,
                  const PlacementContext& ctx, HostStates::State& s) {
    const int n = static_cast<int>(s.devices.size());
    scratch_gpus_.resize(n);
    scratch_pos_.resize(n);
    // Usable GPUs from the front, unusable ones from the back (then put back in order).
    int usable = 0, back = n;
    for (int i = 0; i < n; ++i) {
      const GpuView g = ViewOfKey(r, request_model_, s.devices[i]);
      if (g.usable) {
        scratch_gpus_[usable] = g;
        scratch_pos_[usable++] = i;
      } else {
        scratch_gpus_[--back] = GpuView{0, 0, false};
        scratch_pos_[back] = i;
      }
    }
    std::reverse(scratch_pos_.begin() + usable, scratch_pos_.end());
    HostStates::Memo& m = s.memo[memo_slot_];
    m.generation = memo_generation_;
    m.fits = false;
    m.gpus.clear();
    const ViewMemo& vm = LookupViews(s.host_model_id, usable, [&] {
      ViewMemo e;
      NodeView v;
      v.model = s.host_model;
      v.cpu_milli_free = v.cpu_milli_total = 1 << 30;
      v.memory_free = v.memory_total = Bytes{1} << 50;
      v.gpus = scratch_gpus_;
      if (!Fits(req, v)) return e;
      std::optional<NodeChoice> choice = policy.Score(req, v, ctx);
      if (!choice) return e;
      e.fits = true;
      e.score = choice->score;
      e.gpus = std::move(choice->gpu_indices);
      return e;
    });
    if (!vm.fits) return;
    m.fits = true;
    m.score = vm.score;
    for (int g : vm.gpus) m.gpus.push_back(scratch_pos_[g]);
  }

  // Policy results by (host model, GPU views) for the current memo generation.
  struct ViewMemo {
    bool fits = false;
    double score = 0;
    std::vector<int> gpus;  // positions in the views
  };
  struct ViewMemoEntry {
    std::uint64_t generation = 0;
    std::uint64_t hash = 0;
    int model = 0;
    std::vector<GpuView> views;
    ViewMemo result;
  };
  template <typename F>
  const ViewMemo& LookupViews(int model, int usable, F compute) {
    // The views past `usable` are all the same unusable view: their count stands for them.
    std::uint64_t h = (static_cast<std::uint64_t>(model) * 0x9e3779b97f4a7c15ULL) ^
                      (scratch_gpus_.size() << 32 | static_cast<std::uint64_t>(usable));
    for (int i = 0; i < usable; ++i) {
      const GpuView& g = scratch_gpus_[i];
      h ^= static_cast<std::uint64_t>(g.free_milli) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h ^= static_cast<std::uint64_t>(g.free_memory) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    if (view_memo_.empty()) view_memo_.resize(8192);
    const std::size_t mask = view_memo_.size() - 1;
    auto same = [&](const ViewMemoEntry& e) {
      if (e.hash != h || e.model != model || e.views.size() != scratch_gpus_.size()) return false;
      for (std::size_t i = 0; i < e.views.size(); ++i) {
        const GpuView& a = e.views[i];
        const GpuView& b = scratch_gpus_[i];
        if (a.free_milli != b.free_milli || a.free_memory != b.free_memory || a.usable != b.usable) return false;
      }
      return true;
    };
    // Open addressing, a few probes; an entry older than every memo slot's generation is free
    // (one of another live slot is not). When the probes find neither, the last probed entry
    // is overwritten (a memo, so losing one is only slower).
    std::size_t slot = h & mask;
    for (int probe = 0; probe < 8; ++probe, slot = (slot + 1) & mask) {
      ViewMemoEntry& e = view_memo_[slot];
      if (e.generation == memo_generation_ && same(e)) return e.result;
      if (e.generation < oldest_live_generation_) break;
    }
    ViewMemoEntry& e = view_memo_[slot];
    e.generation = memo_generation_;
    e.hash = h;
    e.model = model;
    e.views.assign(scratch_gpus_.begin(), scratch_gpus_.end());
    e.result = compute();
    return e.result;
  }

  // MIG: a free instance of the smallest fitting profile (lowest device; deterministic).
  std::optional<Choice> PlaceMig(const Resolved& r) {
    std::optional<std::pair<DeviceRef, MigPlacement>> best;
    for (const auto& [name, cap] : capacity_) {
      if (name.empty() || cap.mig_capable == 0 || !cap.model) continue;
      if (!r.model.empty() && name != r.model) continue;
      const MigProfile* p = cap.model->SmallestProfileFor(r.mig_need);
      if (!p) continue;
      ++stats_.placement_attempts;
      auto inst = index_.FirstFreeInstance(ModelIndex(cap.model), p->id);
      if (inst && (!best || inst->first < best->first)) best = inst;
    }
    if (!best) return std::nullopt;
    return Choice{best->first.node, {best->first.index}, best->second};
  }

  std::optional<Choice> TryPlace(const Resolved& r) {
    if (r.kind == SliceKind::kMig) return PlaceMig(r);
    FastOrder order = FastOrderFor(r.queue->placement);
    if (order == FastOrder::kNone) {
      const PlacementPolicy& policy = *policies_.at(r.queue->name);
      if (by_state_ && !reference_placement_ && policy.ScoresByNodeState()) return PlaceByState(r, policy);
      return PlaceGeneric(r, policy);
    }
    if (r.kind == SliceKind::kWhole) return PlaceWholeFast(r, order);
    return PlaceFractionalFast(r, order);
  }

  bool CapBlocks(const Resolved& r) const {
    const QueueConfig& q = *r.queue;
    if (q.user_max_milli == 0 && q.user_max_jobs == 0) return false;
    auto it = usage_.find({q.name, r.user});
    Usage u = it == usage_.end() ? Usage{} : it->second;
    if (q.user_max_jobs > 0 && u.jobs + 1 > q.user_max_jobs) return true;
    if (q.user_max_milli > 0 && u.milli + UsageMilli(r) > q.user_max_milli) return true;
    return false;
  }

  void Start(const Resolved& r, const Choice& c) {
    JobId id = r.job;
    JobView& j = *r.view;
    Resolved& rw = resolved_.at(id);
    ReleaseReservationOf(id);  // before the devices change: they become schedulable again
    RemovePending(r);
    DeviceView& first = devices_.at({c.node, c.devices.front()});
    SliceView s;
    s.slice = SliceId(++last_slice_);
    s.job = id;
    s.kind = r.kind;
    s.node = c.node;
    s.devices = c.devices;
    s.mig = c.mig;
    s.start_time = now_;
    s.last_active = now_;
    s.deadline = r.limit > 0 ? now_ + r.limit : 0;
    StartSlice d;
    d.job = id;
    d.slice = s.slice;
    d.kind = r.kind;
    d.queue = j.queue;
    d.user = j.user;
    d.node = c.node;
    d.devices = c.devices;
    d.mig = c.mig;
    d.deadline = s.deadline;
    switch (r.kind) {
      case SliceKind::kWhole:
        // Each device is reserved in full (ReservedOn); the slice's figure is what the job can
        // count on on every one of its devices, which may be of different models.
        s.milli = kOneGpu;
        s.memory = first.memory;
        for (DeviceIndex di : c.devices) s.memory = std::min(s.memory, devices_.at({c.node, di}).memory);
        break;
      case SliceKind::kShared:
      case SliceKind::kMps:
        s.milli = r.milli;
        s.memory = MemoryCap(r, first);
        d.memory_cap = s.memory;
        if (r.kind == SliceKind::kMps) d.mps_thread_percent = static_cast<int>((r.milli + 9) / 10);
        break;
      case SliceKind::kMig: {
        const DeviceModel* m = ModelOf(first.ref);
        const MigProfile* p = m->FindProfileById(c.mig->profile_id);
        s.milli = p && m->mig_compute_slices > 0 ? kOneGpu * p->compute_slices / m->mig_compute_slices : 0;
        s.memory = p ? p->memory : 0;
        d.memory_cap = s.memory;
        break;
      }
    }
    d.milli = s.milli;
    // The slice is recorded before the devices change: the indexes read it (MIG in-use set).
    rw.slice = slices_.emplace(s.slice, std::move(s)).first;
    SliceView& rec = rw.slice->second;
    Retime(rec);
    for (DeviceIndex di : c.devices) {
      DeviceView& target = di == c.devices.front() ? first : devices_.at({c.node, di});
      rw.devices.push_back(&target);
      Mutate(target, [&](DeviceView& dv) {
        d.uuids.push_back(dv.uuid);
        if (dv.mode == DeviceMode::kFree) SetMode(dv, ModeFor(r.kind));
        dv.slices.insert(std::upper_bound(dv.slices.begin(), dv.slices.end(), rec.slice), rec.slice);
        dv.clients += 1;
        if (r.kind != SliceKind::kMig) {
          dv.used_milli += rec.milli;
          dv.used_memory += ReservedOn(rec, dv);
        } else {
          MigLayout& used = mig_in_use_[&dv];
          used.push_back(*rec.mig);
          SortByStart(used);
        }
      });
    }
    if (r.queue->user_max_milli > 0 || r.queue->user_max_jobs > 0) {
      Usage& u = usage_[{j.queue, j.user}];
      u.milli += SliceUsage(rec);
      u.jobs += 1;
    }
    j.state = JobState::kRunning;
    j.start_time = now_;
    j.slice = rec.slice;
    out_.push_back(std::move(d));
    ++stats_.started;
  }

  // Tries pending jobs (or just `only`) in order; then plans MIG for unmet demand. A shape
  // that failed once is not retried in the same pass, and the pass ends once every shape
  // present has failed: later jobs could only fail the same way.
  void Schedule(std::optional<JobId> only) {
    SchedulePass(only);
    // On-demand idle reclaim: each round frees at least one slice, so this ends.
    while (!reclaimable_.empty() && !pending_.empty() && ReclaimOnDemand(only)) {
      only.reset();
      SchedulePass(std::nullopt);
    }
  }

  // ---------------------------------------------------------------- on-demand idle reclaim
  // Slices idle past their grace in a queue with reclaim = "on-demand" (reclaimable_) keep
  // running while nobody needs their room. A pending job that found none takes it from them:
  // candidates longest idle first (EffectiveLastActive, then SliceId), taken until the job
  // would fit on one device (shared, mps) or host (whole), keeping only those on that
  // device/host and then dropping, most recently idle first, any it does not need. MIG
  // requests do not reclaim (an instance's shape is not a sum of freed shares). Jobs are
  // considered by shape, in queue order of each shape's head (the first not held by a user
  // cap); one job is served per call. True: slices were reclaimed.
  bool ReclaimOnDemand(std::optional<JobId> only) {
    std::vector<const SliceView*> cands;
    for (SliceId sid : reclaimable_) cands.push_back(&slices_.at(sid));
    auto idle_since = [&](const SliceView* v) {
      return EffectiveLastActive(resolved_.at(v->job).queue->idle, *v, now_);
    };
    std::sort(cands.begin(), cands.end(), [&](const SliceView* a, const SliceView* b) {
      return std::pair(idle_since(a), a->slice) < std::pair(idle_since(b), b->slice);
    });
    std::vector<const Resolved*> wanting;
    if (only) {
      auto it = resolved_.find(*only);
      if (it != resolved_.end() && it->second.view->state == JobState::kPending) wanting.push_back(&it->second);
    } else {
      std::vector<std::pair<PendingKey, const Resolved*>> heads;
      for (int shape : live_shapes_) {
        for (const auto& [k, r] : shape_queue_[shape]) {
          if (CapBlocks(*r)) continue;
          heads.emplace_back(k, r);
          break;
        }
      }
      std::sort(heads.begin(), heads.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [k, r] : heads) wanting.push_back(r);
    }
    for (const Resolved* r : wanting) {
      if (r->kind == SliceKind::kMig || CapBlocks(*r) || !Feasible(*r).ok()) continue;
      std::vector<const SliceView*> need = RoomFrom(*r, cands);
      if (need.empty()) continue;
      std::vector<std::pair<JobId, Micros>> take;
      for (const SliceView* v : need) take.emplace_back(v->job, idle_since(v));
      for (const auto& [job, since] : take) {
        const Resolved& victim = resolved_.at(job);
        out_.push_back(Reclaim{job, victim.slice->first,
                               fmt::format("idle for {}; reclaimed on demand for job {}",
                                           FormatDuration(now_ - since), r->job.value())});
        ++stats_.reclaimed;
        ++stats_.reclaimed_on_demand;
        EndRunning(job, "idle");
      }
      return true;
    }
    return false;
  }

  // What freeing `freed` leaves on one device.
  struct Freed {
    MilliGpu milli = 0;
    Bytes memory = 0;
    int clients = 0;
  };
  bool FitsFreed(const Resolved& r, const DeviceView& d, const Freed& f) const {
    // Devices kept for this very job (reserve_after) count: they are what it waits for.
    if (d.draining || d.reconfiguring || (d.reserved_for.valid() && d.reserved_for != r.job)) return false;
    if (!ModelOk(r, d)) return false;
    const int clients = d.clients - f.clients;
    const DeviceMode mode = clients == 0 && d.mode != DeviceMode::kMig ? DeviceMode::kFree : d.mode;
    if (r.kind == SliceKind::kWhole) return clients == 0 && mode == DeviceMode::kFree;
    if (mode != DeviceMode::kFree && mode != ModeFor(r.kind)) return false;
    if (kOneGpu - (d.used_milli - f.milli) < r.milli) return false;
    if (d.memory > 0 && d.memory - (d.used_memory - f.memory) < MemoryCap(r, d)) return false;
    if (r.kind == SliceKind::kMps && clients >= MpsLimit(d)) return false;
    return true;
  }
  // Whether `r` fits once `set` is freed; `target`: where (a device, or a host for whole).
  bool FitsAfter(const Resolved& r, const std::vector<const SliceView*>& set,
                 std::optional<DeviceRef>* device, std::optional<NodeId>* node) const {
    std::map<const DeviceView*, Freed> freed;
    for (const SliceView* v : set) {
      for (DeviceIndex di : v->devices) {
        const DeviceView& d = devices_.at({v->node, di});
        Freed& f = freed[&d];
        f.clients += 1;
        if (v->kind != SliceKind::kMig) {
          f.milli += v->milli;
          f.memory += ReservedOn(*v, d);
        }
      }
    }
    if (r.kind != SliceKind::kWhole) {
      for (const auto& [d, f] : freed) {
        if (FitsFreed(r, *d, f)) {
          if (device) *device = d->ref;
          return true;
        }
      }
      return false;
    }
    std::set<NodeId> hosts;
    for (const auto& [d, f] : freed) hosts.insert(d->ref.node);
    for (NodeId h : hosts) {
      int n = 0;
      for (DeviceIndex di : nodes_.at(h)) {
        const DeviceView& d = devices_.at({h, di});
        auto f = freed.find(&d);
        n += FitsFreed(r, d, f == freed.end() ? Freed{} : f->second);
      }
      if (n >= r.gpus) {
        if (node) *node = h;
        return true;
      }
    }
    return false;
  }
  // The fewest reclaimable slices (from `cands`, longest idle first) that make room for `r`;
  // empty: none would.
  std::vector<const SliceView*> RoomFrom(const Resolved& r, const std::vector<const SliceView*>& cands) const {
    std::vector<const SliceView*> taken;
    std::optional<DeviceRef> device;
    std::optional<NodeId> node;
    bool fits = false;
    for (const SliceView* c : cands) {
      taken.push_back(c);
      // Only the newest candidate's devices changed: look there (a whole job: its host).
      std::vector<const SliceView*> here;
      for (const SliceView* t : taken) {
        if (t->node != c->node) continue;
        if (r.kind == SliceKind::kWhole ||
            std::find_first_of(t->devices.begin(), t->devices.end(), c->devices.begin(), c->devices.end()) !=
                t->devices.end())
          here.push_back(t);
      }
      if (FitsAfter(r, here, &device, &node)) {
        taken = std::move(here);
        fits = true;
        break;
      }
    }
    if (!fits) return {};
    // Drop what is not needed, most recently idle first.
    for (std::size_t i = taken.size(); i-- > 0;) {
      std::vector<const SliceView*> trial = taken;
      trial.erase(trial.begin() + static_cast<std::ptrdiff_t>(i));
      if (!trial.empty() && FitsAfter(r, trial, nullptr, nullptr)) taken = std::move(trial);
    }
    return taken;
  }

  void SchedulePass(std::optional<JobId> only) {
    scratch_failed_.assign(shapes_.size(), 0);
    bool mig_failed = false;
    auto attempt = [&](const Resolved& r) -> bool {  // true: failed
      if (CapBlocks(r)) return false;
      if (scratch_failed_[r.shape]) return false;
      if (auto c = TryPlace(r)) {
        Start(r, *c);
        return false;
      }
      scratch_failed_[r.shape] = 1;
      if (r.kind == SliceKind::kMig) mig_failed = true;
      return true;
    };
    if (only) {
      attempt(resolved_.at(*only));
    } else {
      // Jobs are tried in global queue order, skipping shapes that already failed in this
      // pass, by merging the per-shape queues: only the head job of each live shape is
      // visited, so a pass costs O(shapes + starts), not O(waiting jobs).
      // A min-heap in a reused vector (the pairs are distinct: same order as a std::set,
      // without a node allocation per head). Not re-entered: attempt() does not schedule.
      std::vector<std::pair<PendingKey, int>>& heads = scratch_heads_;
      const std::greater<> later;
      heads.clear();
      for (int shape : live_shapes_) heads.emplace_back(shape_queue_[shape].begin()->first, shape);
      std::make_heap(heads.begin(), heads.end(), later);
      while (!heads.empty()) {
        std::pop_heap(heads.begin(), heads.end(), later);
        const auto [key, shape] = heads.back();
        heads.pop_back();
        const auto& q = shape_queue_[shape];
        const Resolved* r = q.at(key);
        if (attempt(*r)) continue;  // the shape failed: its later jobs would too
        auto next = q.upper_bound(key);  // Start() may have erased `key`
        if (next != q.end()) {
          heads.emplace_back(next->first, shape);
          std::push_heap(heads.begin(), heads.end(), later);
        }
      }
    }
    if (!only) {
      ServeReservation();
      MaybeReserve();
    }
    if (mig_failed && config_.mig.enabled && mig_in_flight_ == 0) {
      std::vector<const Resolved*> unmet;
      for (const auto& [k, r] : pending_mig_) {
        if (unmet.size() >= kMaxPlannedNeeds) break;
        if (!CapBlocks(*r)) unmet.push_back(r);
      }
      if (!unmet.empty()) PlanMig(unmet);
    }
  }

  // ---------------------------------------------------------------- reservations
  // Without them a job needing several whole GPUs can wait forever while single-GPU jobs take
  // each device as it frees up. Once a whole-GPU job has waited its queue's reserve_after, the
  // devices it will get are chosen and kept empty (no new slice may take them) until they are
  // all free; then it starts there. One reservation at a time, for the first job in queue
  // order that qualifies. The host is the one whose devices should free up soonest by what
  // is known: fewest slices without a time limit, then the earliest latest deadline, then the
  // fewest slices, then the lowest node; on it the devices in the same order, then by index.
  struct Reservation {
    JobId job;
    NodeId node;
    std::vector<DeviceIndex> devices;
  };

  void MaybeReserve() {
    if (reservation_ || !any_reserve_) return;
    // The jobs that have waited long enough, in queue order: per queue, a prefix of its
    // pending whole-GPU jobs (ordered by submit time), merged.
    scratch_reserve_.clear();
    for (const auto& [queue, jobs] : pending_reserve_) {
      for (const auto& [k, r] : jobs) {
        if (now_ - r->submit < queue->reserve_after) break;
        scratch_reserve_.emplace_back(k, r);
      }
    }
    std::sort(scratch_reserve_.begin(), scratch_reserve_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [k, r] : scratch_reserve_) {
      if (CapBlocks(*r)) continue;
      if (auto c = ReservationFor(*r)) {
        reservation_ = Reservation{r->job, c->node, c->devices};
        for (DeviceIndex di : c->devices) {
          // (`job` by value: clang 14, the fuzz build's compiler, cannot capture a binding.)
          Mutate({c->node, di}, [job = r->job](DeviceView& d) { d.reserved_for = job; });
        }
        std::vector<std::uint32_t> devs;
        for (DeviceIndex di : c->devices) devs.push_back(di.value());
        // A decision also makes the event that caused it durable in the daemon's journal.
        out_.push_back(Reserve{r->job, c->node, c->devices,
                               fmt::format("job {} has waited {}: devices {} of node {} are kept for it",
                                           r->job.value(), FormatDuration(now_ - r->submit),
                                           fmt::join(devs, ","), c->node.value())});
        ServeReservation();  // already free: starts at once
        return;
      }
    }
  }

  std::optional<Choice> ReservationFor(const Resolved& r) const {
    using Cost = std::tuple<int, Micros, int>;  // (slices without a limit, latest deadline, slices)
    auto cost_of = [&](const DeviceView& d) {
      Cost c{0, 0, static_cast<int>(d.slices.size())};
      for (SliceId sid : d.slices) {
        const SliceView& sv = slices_.at(sid);
        if (sv.deadline == 0) ++std::get<0>(c);
        std::get<1>(c) = std::max(std::get<1>(c), sv.deadline);
      }
      return c;
    };
    std::optional<std::pair<Cost, Choice>> best;
    for (const auto& [nid, indices] : nodes_) {
      std::vector<std::pair<Cost, DeviceIndex>> usable;
      for (DeviceIndex di : indices) {
        const DeviceView& d = devices_.at({nid, di});
        if (d.mode == DeviceMode::kMig || d.draining || d.reconfiguring || !ModelOk(r, d)) continue;
        usable.emplace_back(cost_of(d), di);
      }
      if (static_cast<int>(usable.size()) < r.gpus) continue;
      std::sort(usable.begin(), usable.end());
      Cost host{0, 0, 0};
      Choice c{nid, {}, std::nullopt};
      for (int i = 0; i < r.gpus; ++i) {
        const Cost& dc = usable[i].first;
        std::get<0>(host) += std::get<0>(dc);
        std::get<1>(host) = std::max(std::get<1>(host), std::get<1>(dc));
        std::get<2>(host) += std::get<2>(dc);
        c.devices.push_back(usable[i].second);
      }
      std::sort(c.devices.begin(), c.devices.end());
      if (!best || host < best->first) best.emplace(host, std::move(c));
    }
    if (!best) return std::nullopt;
    return best->second;
  }

  // Starts the reserved job once its devices are all empty (and its user's cap allows).
  void ServeReservation() {
    if (!reservation_) return;
    const Resolved& r = resolved_.at(reservation_->job);
    for (DeviceIndex di : reservation_->devices) {
      const DeviceView& d = devices_.at({reservation_->node, di});
      if (!d.slices.empty() || d.mode != DeviceMode::kFree) return;
    }
    if (CapBlocks(r)) return;
    Start(r, Choice{reservation_->node, reservation_->devices, std::nullopt});  // releases it
  }

  // Gives the devices back (the job started, left the queue, or a device went away).
  void ReleaseReservation() {
    if (!reservation_) return;
    Reservation res = std::move(*reservation_);
    reservation_.reset();
    for (DeviceIndex di : res.devices) {
      auto it = devices_.find({res.node, di});
      if (it != devices_.end()) Mutate(it->second, [](DeviceView& d) { d.reserved_for = JobId(); });
    }
  }
  void ReleaseReservationOf(JobId job) {
    if (reservation_ && reservation_->job == job) ReleaseReservation();
  }

  // ---------------------------------------------------------------- MIG planning
  // The planner searches layouts for these many pending needs at most (a GPU holds <= 7).
  static constexpr std::size_t kMaxPlannedNeeds = 16;
  static constexpr int kRelayoutCandidates = 4;
  static constexpr std::size_t kDrainCandidates = 32;

  std::vector<Bytes> NeedsFor(const std::vector<const Resolved*>& jobs, const DeviceView& d) const {
    std::vector<Bytes> needs;
    for (const Resolved* r : jobs)
      if (ModelOk(*r, d)) needs.push_back(r->mig_need);
    return needs;
  }

  // One GPU at a time: prefer a MIG device whose free instances can be re-laid out (no drain),
  // then an empty MIG-capable device, then drain a device in another mode (fewest slices).
  void PlanMig(const std::vector<const Resolved*>& unmet) {
    if (mig_in_flight_ > 0) return;
    std::set<DeviceRef> candidates;
    for (const auto& [name, cap] : capacity_) {
      if (name.empty() || cap.mig_capable == 0 || !cap.model) continue;
      int mi = ModelIndex(cap.model);
      std::set<int> profiles;
      for (const Resolved* r : unmet) {
        if (!r->model.empty() && r->model != name) continue;
        if (const MigProfile* p = cap.model->SmallestProfileFor(r->mig_need)) profiles.insert(p->id);
      }
      if (profiles.empty()) continue;
      for (int p : profiles)
        for (const DeviceRef& ref : index_.RelayoutCandidates(mi, p, kRelayoutCandidates))
          candidates.insert(ref);
      if (auto ref = index_.FirstMigCapableFree(mi)) candidates.insert(*ref);
    }
    if (candidates.empty()) {
      // Only now look at devices that would need a drain.
      for (const DeviceRef& ref : index_.mig_capable_busy()) {
        if (mig_broken_.contains(ref)) continue;
        candidates.insert(ref);
        if (candidates.size() >= kDrainCandidates) break;
      }
    }
    struct Candidate {
      int rank;  // 0: MIG mode, 1: empty, 2: needs a drain
      int satisfied;
      int clients;
      DeviceRef ref;
      MigLayout layout;
    };
    std::optional<Candidate> best;
    for (const DeviceRef& ref : candidates) {
      if (mig_broken_.contains(ref)) continue;
      const DeviceView& d = devices_.at(ref);
      std::vector<Bytes> needs = NeedsFor(unmet, d);
      if (needs.empty()) continue;
      int rank = d.mode == DeviceMode::kMig ? 0 : d.mode == DeviceMode::kFree ? 1 : 2;
      auto plan = PlanMigLayout(*ModelOf(ref), rank == 0 ? InUse(d) : MigLayout{}, needs);
      if (!plan.ok() || plan->satisfied == 0) continue;
      if (rank == 0 && plan->layout == d.layout) continue;
      Candidate c{rank, plan->satisfied, d.clients, ref, plan->layout};
      auto key = [](const Candidate& x) { return std::make_tuple(x.rank, -x.satisfied, x.clients, x.ref); };
      if (!best || key(c) < key(*best)) best = std::move(c);
    }
    if (!best) return;
    if (best->rank < 2) {
      Reconfigure(best->ref, best->layout);
      return;
    }
    Mutate(best->ref, [&](DeviceView& dv) {
      dv.draining = true;
      dv.target_layout = best->layout;
    });
    out_.push_back(Drain{best->ref, fmt::format("MIG layout for {} pending inference request(s)",
                                                best->satisfied)});
    if (config_.mig.drain == MigDrainPolicy::kPreempt) {
      std::vector<SliceId> victims = devices_.at(best->ref).slices;
      for (SliceId s : victims) {
        JobId job = slices_.at(s).job;
        if (!resolved_.at(job).queue->preemptible) continue;
        out_.push_back(Preempt{job, s, "drain for MIG reconfiguration", true});
        ++stats_.preempted;
        EndRunning(job, "preempted", /*requeue=*/true);
      }
    }
    MaybeFinishDrain(devices_.at(best->ref));
  }

  void Reconfigure(const DeviceRef& ref, const MigLayout& layout) {
    const DeviceView& d = devices_.at(ref);
    MigLayout old = d.mode == DeviceMode::kMig ? d.layout : MigLayout{};
    Mutate(ref, [&](DeviceView& dv) {
      dv.reconfiguring = true;
      dv.draining = false;
      dv.target_layout = layout;
    });
    out_.push_back(ReconfigureMig{ref, d.uuid, std::move(old), layout});
    ++stats_.reconfigurations;
  }

  void MaybeFinishDrain(DeviceView& d) {
    if (!d.draining || !d.slices.empty()) return;
    // Re-plan now: demand may have changed while draining.
    std::vector<const Resolved*> mig_pending;
    for (const auto& [k, r] : pending_mig_) {
      if (mig_pending.size() >= kMaxPlannedNeeds) break;
      mig_pending.push_back(r);
    }
    auto plan = PlanMigLayout(*d.catalogue, {}, NeedsFor(mig_pending, d));
    MigLayout layout = plan.ok() && plan->satisfied > 0 ? plan->layout : d.target_layout;
    Reconfigure(d.ref, layout);
  }

  void OnReconfigureDone(const ReconfigureDone& e) {
    auto it = devices_.find(e.device);
    if (it == devices_.end() || !it->second.reconfiguring) return;
    // A reported layout that is illegal for the model (or drops an instance in use) is treated
    // as a failure: the books keep what they knew.
    const DeviceModel* m = it->second.catalogue;
    bool legal = m && ValidateLayout(*m, e.layout).ok();
    for (const MigPlacement& used : InUse(it->second))
      legal = legal && std::find(e.layout.begin(), e.layout.end(), used) != e.layout.end();
    bool ok = e.ok && legal;
    Mutate(e.device, [&](DeviceView& d) {
      d.reconfiguring = false;
      d.draining = false;
      d.target_layout.clear();
      if (ok) {
        SetMode(d, DeviceMode::kMig);
        d.layout = e.layout;
      } else if (d.mode == DeviceMode::kMig && legal) {
        d.layout = e.layout;  // what the device reports it has now
      }
    });
    if (!ok) mig_broken_.insert(e.device);  // don't loop on a device that refuses
    Schedule(std::nullopt);
  }

  // ---------------------------------------------------------------- timers and samples
  void OnSample(const Sample& e) {
    for (const SliceSample& s : e.slices) {
      auto it = slices_.find(s.slice);
      if (it == slices_.end()) continue;
      SliceView& sv = it->second;
      const Activity a = ClassifySample(resolved_.at(sv.job).queue->idle, s).activity;
      if (a == Activity::kActive) {
        if (sv.idle != IdleState::kActive) {
          // The owner was told the slice is idle (and, when warned, that it will be taken):
          // no longer true, so say so rather than let the warning stand.
          out_.push_back(ClearWarning{sv.job, sv.slice, WarnReason::kIdle,
                                      fmt::format("slice {} is busy again; idle warning withdrawn",
                                                  sv.slice.value())});
          reclaimable_.erase(sv.slice);
        }
        sv.last_active = now_;
        sv.idle = IdleState::kActive;
        sv.idle_deadline = 0;
        sv.unmeasured = false;
        Retime(sv);
      } else if (a == Activity::kUnknown && !sv.unmeasured) {
        // Unknown is not idle: a warning given on earlier evidence is withdrawn, not carried
        // out while blind.
        sv.unmeasured = true;
        if (sv.idle == IdleState::kWarned || sv.idle == IdleState::kReclaimable) {
          out_.push_back(ClearWarning{sv.job, sv.slice, WarnReason::kIdle,
                                      fmt::format("slice {} can no longer be measured; idle "
                                                  "warning withdrawn", sv.slice.value())});
          reclaimable_.erase(sv.slice);
          sv.idle = IdleState::kActive;
        }
        sv.idle_deadline = 0;
        Retime(sv);
      } else if (a == Activity::kIdle && sv.unmeasured) {
        // Measured again: idleness is counted from here, not across the blind stretch.
        sv.unmeasured = false;
        sv.last_active = now_;
        Retime(sv);
      }
    }
  }

  // A report replaces the slice's earlier one. One that shows activity now (it counts, and the
  // slice's effective last activity is within the window) withdraws an idle warning, as an
  // active sample does; an idle-looking one changes nothing but the record: reports only
  // postpone. A busy streak (busy_max) runs across consecutive busy reports.
  void OnActivityReport(const ActivityReport& e) {
    auto rit = resolved_.find(e.job);
    if (rit == resolved_.end() || rit->second.view->state != JobState::kRunning) return;
    SliceView& sv = rit->second.slice->second;
    const IdlePolicy& p = rit->second.queue->idle;
    SliceReport n;
    n.source = e.source;
    n.busy = e.busy;
    n.last_activity = e.last_activity < 0 ? -1 : std::min(e.last_activity, now_);
    n.kernels = e.kernels;
    n.connections = e.connections;
    n.received = now_;
    if (e.busy) n.busy_since = sv.report && sv.report->busy ? sv.report->busy_since : now_;
    sv.report = std::move(n);
    if (p.enabled && !sv.unmeasured && sv.idle != IdleState::kActive && ReportCounts(p, *sv.report, now_) &&
        now_ - EffectiveLastActive(p, sv, now_) < p.window) {
      out_.push_back(ClearWarning{sv.job, sv.slice, WarnReason::kIdle,
                                  fmt::format("slice {} is in use again ({} reports activity); idle "
                                              "warning withdrawn", sv.slice.value(), sv.report->source)});
      reclaimable_.erase(sv.slice);
      sv.idle = IdleState::kActive;
      sv.idle_deadline = 0;
    }
    Retime(sv);
  }

  // Visits only the slices whose next timer is due (timers_), in SliceId order: a slice whose
  // time has not come passes through TickSlice without a decision or a change (NextTimer), so
  // the decisions are those of a scan over every slice, at O(due log n) instead of O(slices).
  void OnTick() {
    std::vector<SliceId> due;
    for (auto it = timers_.begin(); it != timers_.end() && it->first <= now_; ++it) due.push_back(it->second);
    std::sort(due.begin(), due.end());
    std::vector<std::pair<JobId, std::string>> ended;
    for (SliceId sid : due) {
      SliceView& s = slices_.at(sid);
      if (!TickSlice(sid, s, ended)) Retime(s);
    }
    for (const auto& [job, reason] : ended) EndRunning(job, reason);
    const bool serve = !ended.empty() || (became_reclaimable_ && !pending_.empty());
    became_reclaimable_ = false;
    if (serve) {
      Schedule(std::nullopt);
    } else {
      MaybeReserve();  // a waiting job may have just reached its reserve_after
    }
  }

  // One slice's timers at now_; true if it ends (listed in `ended`).
  bool TickSlice(SliceId sid, SliceView& s, std::vector<std::pair<JobId, std::string>>& ended) {
    const Resolved& r = resolved_.at(s.job);
    const JobView& j = *r.view;
    const QueueConfig& q = *r.queue;
    if (s.deadline > 0) {
      if (now_ >= s.deadline) {
        out_.push_back(Stop{s.job, sid, StopReason::kTimeLimit});
        ++stats_.stopped;
        ended.emplace_back(s.job, "time-limit");
        return true;
      }
      if (q.warn_before > 0 && !s.limit_warned && now_ >= s.deadline - q.warn_before) {
        s.limit_warned = true;
        out_.push_back(Warn{s.job, sid, WarnReason::kTimeLimit, s.deadline,
                            fmt::format("job {} of {} reaches its time limit in {}", s.job.value(),
                                        j.user, FormatDuration(s.deadline - now_))});
      }
    }
    if (!q.idle.enabled || s.unmeasured) return false;
    const Micros since = EffectiveLastActive(q.idle, s, now_);
    if (s.idle == IdleState::kActive && now_ - since >= q.idle.window) {
      Micros idle_for = now_ - since;
      if (q.idle.action == ReclaimAction::kReport) {
        s.idle = IdleState::kReported;
        s.idle_deadline = now_;
        out_.push_back(Warn{s.job, sid, WarnReason::kIdle, now_,
                            fmt::format("slice idle for {} (reported, not reclaimed)",
                                        FormatDuration(idle_for))});
      } else {
        s.idle = IdleState::kWarned;
        s.idle_deadline = now_ + q.idle.grace;
        out_.push_back(Warn{s.job, sid, WarnReason::kIdle, s.idle_deadline,
                            q.idle.reclaim == IdleReclaim::kOnDemand
                                ? fmt::format("slice idle for {}; reclaimable on demand in {} unless used "
                                              "(then reclaimed when a waiting job needs its room)",
                                              FormatDuration(idle_for), FormatDuration(q.idle.grace))
                                : fmt::format("slice idle for {}; reclaimed in {} unless used",
                                              FormatDuration(idle_for), FormatDuration(q.idle.grace))});
      }
    }
    if (s.idle == IdleState::kWarned && now_ >= s.idle_deadline && q.idle.reclaim == IdleReclaim::kOnDemand) {
      // Past its grace, but nobody may need the room: it runs until a pending job does. The
      // Warn is the decision that records the change (and tells the owner).
      s.idle = IdleState::kReclaimable;
      reclaimable_.insert(sid);
      became_reclaimable_ = true;
      out_.push_back(Warn{s.job, sid, WarnReason::kIdle, now_,
                          fmt::format("slice idle for {}; idle, reclaimable on demand: it is reclaimed "
                                      "as soon as a waiting job needs its room", FormatDuration(now_ - since))});
      return false;
    }
    if (s.idle == IdleState::kWarned && now_ >= s.idle_deadline) {
      out_.push_back(Reclaim{s.job, sid, fmt::format("idle for {}", FormatDuration(now_ - since))});
      ++stats_.reclaimed;
      ended.emplace_back(s.job, "idle");
      return true;
    }
    return false;
  }

  // When the slice's next timer could fire: a time-limit warning or stop, the end of its idle
  // window (active) or grace (warned); LLONG_MAX: none. Before it, TickSlice does nothing.
  static Micros NextTimer(const SliceView& s, const QueueConfig& q) {
    Micros t = LLONG_MAX;
    if (s.deadline > 0) {
      t = s.deadline;
      if (q.warn_before > 0 && !s.limit_warned) t = std::min(t, s.deadline - q.warn_before);
    }
    if (q.idle.enabled && !s.unmeasured) {
      if (s.idle == IdleState::kActive) t = std::min(t, IdleWindowEnd(q.idle, s));
      else if (s.idle == IdleState::kWarned) t = std::min(t, s.idle_deadline);
    }
    return t;
  }
  // Re-files a slice in timers_ after its timer fields changed (or it started).
  void Retime(const SliceView& s) {
    Untime(s.slice);
    Micros t = NextTimer(s, *resolved_.at(s.job).queue);
    if (t == LLONG_MAX) return;
    timers_.emplace(t, s.slice);
    timer_of_.emplace(s.slice, t);
  }
  void Untime(SliceId id) {
    auto it = timer_of_.find(id);
    if (it == timer_of_.end()) return;
    timers_.erase({it->second, id});
    timer_of_.erase(it);
  }

  // ---------------------------------------------------------------- state
  Config config_;
  std::mt19937_64 rng_;
  Micros now_ = 0;
  std::vector<Decision> out_;
  SchedulerStats stats_;
  std::map<std::string, std::unique_ptr<PlacementPolicy>> policies_;

  std::map<JobId, JobView> jobs_;
  std::deque<JobId> ended_;  // oldest first; see Remember()
  std::unordered_map<JobId, Resolved> resolved_;  // pending and running jobs (stable addresses)
  std::map<SliceId, SliceView> slices_;
  std::map<DeviceRef, DeviceView> devices_;
  std::map<NodeId, std::set<DeviceIndex>> nodes_;
  std::map<PendingKey, Resolved*> pending_;
  std::map<PendingKey, Resolved*> pending_mig_;  // the kMig subset of pending_
  // The MayReserve() subset of pending_, per queue (each in submit order: one priority).
  std::map<const QueueConfig*, std::map<PendingKey, Resolved*>> pending_reserve_;
  std::vector<std::pair<PendingKey, Resolved*>> scratch_reserve_;
  static bool MayReserve(const Resolved& r) { return r.kind == SliceKind::kWhole && r.queue->reserve_after > 0; }
  std::vector<std::map<PendingKey, Resolved*>> shape_queue_;  // pending_ split by shape id
  std::set<int> live_shapes_;                                 // shapes with pending jobs
  std::map<std::tuple<SliceKind, int, MilliGpu, Bytes, Bytes, std::string, const QueueConfig*>, int> shapes_;
  std::map<std::pair<std::string, std::string>, Usage> usage_;  // (queue, user), capped queues only
  std::map<std::string, Capacity> capacity_;                     // by model; "" = all
  std::map<NodeId, std::map<std::string, int>> host_model_count_;
  std::uint64_t last_slice_ = 0;
  std::set<DeviceRef> mig_broken_;
  std::optional<Reservation> reservation_;
  bool any_reserve_ = false;  // some queue has reserve_after
  std::set<std::pair<Micros, SliceId>> timers_;    // (next timer, slice); see NextTimer()
  std::set<SliceId> reclaimable_;  // slices in IdleState::kReclaimable
  bool became_reclaimable_ = false;  // a Tick made a slice reclaimable: serve pending jobs
  std::unordered_map<SliceId, Micros> timer_of_;   // the key of each slice in timers_
  std::unordered_map<const DeviceView*, MigLayout> mig_in_use_;  // see InUse()
  int mig_in_flight_ = 0;  // devices draining or reconfiguring
  int mig_mode_devices_ = 0;  // devices in MIG mode (they never leave it); see NeverFitsWhy()
  std::string violation_;
  CapacityIndex index_;

  LearnedWorkload workload_;  // what fragmentation-aware policies score against

  // Placement by host state (PlaceByState): on when some queue's policy ScoresByNodeState().
  bool by_state_ = false;
  bool reference_placement_ = false;  // tests and benchmarks: use PlaceGeneric instead
  HostStates host_states_;
  struct MemoKey {
    SliceKind kind = SliceKind::kShared;
    int gpus = 0;
    MilliGpu milli = -1;
    Bytes memory = 0;
    std::string model;
    const PlacementPolicy* policy = nullptr;
  };
  struct MemoSlot {
    MemoKey key;
    std::uint64_t generation = 0;  // 0: free
    std::uint64_t used = 0;        // memo_clock_ when last selected
  };
  std::array<MemoSlot, HostStates::kMemoSlots> memo_slots_;
  std::uint64_t memo_workload_ = 0;            // workload_.version() the slots are for
  std::uint64_t memo_clock_ = 0;
  std::uint64_t memo_generations_ = 0;         // generations handed out so far
  std::uint64_t oldest_live_generation_ = 0;  // view_memo_ entries older than this are free
  int memo_slot_ = 0;                          // the current request's slot (SelectMemoSlot)
  std::uint64_t memo_generation_ = 0;          // and its generation
  std::vector<std::pair<double, HostStates::State*>> scratch_levels_;  // (score, state) of fitting states
  std::vector<HostStates::State*> scratch_top_;  // the states of the best score
  std::vector<DeviceStateKey> scratch_keys_;
  std::vector<const DeviceView*> scratch_devs_;
  std::vector<NodeId> scratch_dirty_;
  int request_model_ = kAnyModel;               // PlaceByState: ViewOfKey()'s `model`
  std::vector<int> scratch_pos_;                // ScoreState: view position -> canonical position
  std::vector<ViewMemoEntry> view_memo_;        // see LookupViews()

  // Scratch (reused to avoid allocation per event).
  std::vector<char> scratch_failed_;
  std::vector<std::pair<PendingKey, int>> scratch_heads_;  // SchedulePass: head job of each shape
  std::vector<GpuView> scratch_gpus_;
  std::vector<NodeView> scratch_nodes_;
  std::vector<DeviceRef> scratch_refs_;
  std::vector<NodeId> scratch_hosts_;
};

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
