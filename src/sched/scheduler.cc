// The scheduling core. See scheduler.h for the contract; the rules, in order of an event:
//  1. apply the event to the books (devices, jobs, slices, per-user usage);
//  2. run timers on Tick (time limits, idle state machines);
//  3. if capacity may have been freed (or a job arrived), try pending jobs in queue order
//     (priority, submit time, JobId); shapes that failed once in a pass are not retried in it;
//  4. if MIG demand is unmet, plan a new layout for ONE GPU (reconfigure, or drain first).
//
// Indexes (kept in step with the records; CheckInvariants recomputes them) make the built-in
// policies O(log n) per decision: free devices per node, shared and MPS devices by free share.
#include "sched/scheduler.h"

#include <algorithm>
#include <cassert>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "sched/placement/placement.h"
#include "sched/mig_plan.h"

namespace gpuslice::sched {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};

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
  SliceKind kind = SliceKind::kShared;
  int gpus = 1;
  MilliGpu milli = 0;   // per device (whole: 1000; shared / mps: share)
  Bytes memory = 0;     // per device cap; 0: proportional share of the device (shared / mps)
  Bytes mig_need = 0;   // mig: memory the instance must have
  std::string model;    // canonical name or empty
  Micros limit = 0;
  const QueueConfig* queue = nullptr;
  // Pending-pass memo key: jobs with equal keys fit or fail together.
  auto Key() const { return std::tie(kind, gpus, milli, memory, mig_need, model, queue); }
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

class Scheduler::Impl {
 public:
  Impl(Config config, std::uint64_t seed) : config_(std::move(config)), rng_(seed) {
    for (const QueueConfig& q : config_.queues) {
      auto p = MakePolicy(q.placement);
      // ValidateConfig guarantees known names; an unknown one here is a caller bug.
      assert(p.ok());
      if (p.ok()) policies_[q.name] = std::move(p).value();
    }
  }

  std::vector<Decision> Handle(const Event& e) {
    out_.clear();
    now_ = std::max(now_, EventTime(e));
    ++stats_.events;
    std::visit(Overloaded{
                   [&](const DeviceAdded& ev) { OnDeviceAdded(ev); },
                   [&](const DeviceRemoved& ev) { OnDeviceRemoved(ev); },
                   [&](const Submit& ev) { OnSubmit(ev); },
                   [&](const Finish& ev) { OnEnd(ev.job, "finished", std::nullopt); },
                   [&](const Cancel& ev) { OnCancel(ev); },
                   [&](const Sample& ev) { OnSample(ev); },
                   [&](const Tick&) { OnTick(); },
                   [&](const ReconfigureDone& ev) { OnReconfigureDone(ev); },
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
    for (const PendingKey& k : pending_) {
      if (!queue || jobs_.at(k.job).queue == *queue) ids.push_back(k.job);
    }
    return ids;
  }

  Status CheckInvariants() const;

 private:
  // ---------------------------------------------------------------- devices and indexes
  const DeviceModel* ModelOf(const DeviceRef& ref) const {
    auto it = models_.find(ref);
    return it == models_.end() ? nullptr : it->second;
  }

  int MpsLimit(const DeviceRef& ref) const {
    const DeviceModel* m = ModelOf(ref);
    return m && m->mps_max_clients > 0 ? m->mps_max_clients : 48;
  }

  bool Schedulable(const DeviceView& d) const { return !d.draining && !d.reconfiguring; }

  // Removes the device from every index; call before changing it, then Index() after.
  void Unindex(const DeviceView& d) {
    auto& node = nodes_[d.ref.node];
    if (node.free.erase(d.ref.index) > 0) {
      free_by_node_.erase({static_cast<int>(node.free.size()) + 1, d.ref.node});
      if (!node.free.empty()) free_by_node_.insert({static_cast<int>(node.free.size()), d.ref.node});
    }
    shared_index_.erase({kOneGpu - d.used_milli, d.ref});
    mps_index_.erase({kOneGpu - d.used_milli, d.ref});
    mig_devices_.erase(d.ref);
  }

  void Index(const DeviceView& d) {
    if (!Schedulable(d)) return;
    switch (d.mode) {
      case DeviceMode::kFree: {
        auto& node = nodes_[d.ref.node];
        if (!node.free.empty()) free_by_node_.erase({static_cast<int>(node.free.size()), d.ref.node});
        node.free.insert(d.ref.index);
        free_by_node_.insert({static_cast<int>(node.free.size()), d.ref.node});
        break;
      }
      case DeviceMode::kShared:
        if (d.used_milli < kOneGpu) shared_index_.insert({kOneGpu - d.used_milli, d.ref});
        break;
      case DeviceMode::kMps:
        if (d.used_milli < kOneGpu && d.clients < MpsLimit(d.ref))
          mps_index_.insert({kOneGpu - d.used_milli, d.ref});
        break;
      case DeviceMode::kMig:
        mig_devices_.insert(d.ref);
        break;
      case DeviceMode::kWhole:
        break;
    }
  }

  template <typename F>
  void Mutate(const DeviceRef& ref, F f) {
    DeviceView& d = devices_.at(ref);
    Unindex(d);
    f(d);
    Index(d);
  }

  void SetMode(DeviceView& d, DeviceMode mode) {
    if (d.mode != mode && !d.slices.empty() && violation_.empty()) {
      violation_ = fmt::format("device {}/{} changed mode {} -> {} with {} slices", d.ref.node.value(),
                               d.ref.index.value(), DeviceModeName(d.mode), DeviceModeName(mode),
                               d.slices.size());
    }
    d.mode = mode;
  }

  void OnDeviceAdded(const DeviceAdded& e) {
    if (devices_.contains(e.device)) return;  // idempotent: agents re-announce
    DeviceView d;
    d.ref = e.device;
    d.uuid = e.uuid;
    const DeviceModel* model = nullptr;
    if (auto m = FindModel(e.model); m.ok()) model = *m;
    d.model = model ? model->name : e.model;
    d.memory = model ? model->memory : 0;
    d.mig_capable = e.mig_capable && model && model->supports_mig();
    d.mode = e.mig_enabled && d.mig_capable ? DeviceMode::kMig : DeviceMode::kFree;
    if (d.mode == DeviceMode::kMig) d.layout = e.mig_layout;
    models_[e.device] = model;
    nodes_[e.device.node].devices.insert(e.device.index);
    auto [it, _] = devices_.emplace(e.device, std::move(d));
    Index(it->second);
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
    Unindex(it->second);
    nodes_[e.device.node].devices.erase(e.device.index);
    if (nodes_[e.device.node].devices.empty()) nodes_.erase(e.device.node);
    devices_.erase(it);
    models_.erase(e.device);
    mig_broken_.erase(e.device);
    // Pending jobs that can no longer ever fit are rejected now rather than waiting forever.
    std::vector<JobId> doomed;
    for (const PendingKey& k : pending_) {
      if (!Feasible(resolved_.at(k.job)).ok()) doomed.push_back(k.job);
    }
    for (JobId j : doomed) {
      Status st = Feasible(resolved_.at(j));
      RejectPending(j, st);
    }
    Schedule(std::nullopt);
  }

  // ---------------------------------------------------------------- jobs
  Result<Resolved> Resolve(const Submit& e) const {
    Resolved r;
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

  // GPU share counted against per-user caps (mig: the smallest profile's compute fraction,
  // approximated as one seventh per compute slice before placement).
  static MilliGpu UsageMilli(const Resolved& r) {
    return r.kind == SliceKind::kMig ? r.milli : r.milli * r.gpus;
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
    switch (r.kind) {
      case SliceKind::kWhole: {
        for (const auto& [nid, node] : nodes_) {
          int n = 0;
          for (DeviceIndex i : node.devices)
            if (ModelOk(r, devices_.at({nid, i}))) ++n;
          if (n >= r.gpus) return Status::Ok();
        }
        return ResourceExhausted(fmt::format("no host has {} {}devices", r.gpus,
                                             r.model.empty() ? "" : r.model + " "));
      }
      case SliceKind::kShared:
      case SliceKind::kMps:
        for (const auto& [ref, d] : devices_) {
          if (!ModelOk(r, d)) continue;
          if (d.memory > 0 && r.memory > d.memory) continue;
          return Status::Ok();
        }
        return ResourceExhausted(fmt::format("no {}device has {} of memory",
                                             r.model.empty() ? "" : r.model + " ",
                                             FormatBytes(r.memory)));
      case SliceKind::kMig:
        for (const auto& [ref, d] : devices_) {
          const DeviceModel* m = ModelOf(ref);
          if (!d.mig_capable || !ModelOk(r, d) || !m) continue;
          if (m->SmallestProfileFor(r.mig_need)) return Status::Ok();
        }
        return ResourceExhausted(fmt::format("no MIG-capable {}device has an instance with {}",
                                             r.model.empty() ? "" : r.model + " ",
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
      j.state = JobState::kEnded;
      j.end_time = now_;
      j.end_reason = "rejected";
      jobs_.emplace(e.job, std::move(j));
      out_.push_back(Reject{e.job, st.WithContext(fmt::format("job {}", e.job.value()))});
      ++stats_.rejected;
      return;
    }
    j.kind = r->kind;
    jobs_.emplace(e.job, std::move(j));
    resolved_.emplace(e.job, *r);
    pending_.insert({-r->queue->priority, now_, e.job});
    Schedule(e.job);
  }

  void RejectPending(JobId id, const Status& st) {
    JobView& j = jobs_.at(id);
    pending_.erase({-resolved_.at(id).queue->priority, j.submit_time, id});
    resolved_.erase(id);
    j.state = JobState::kEnded;
    j.end_time = now_;
    j.end_reason = "rejected";
    out_.push_back(Reject{id, st.WithContext(fmt::format("job {}", id.value()))});
    ++stats_.rejected;
  }

  void OnCancel(const Cancel& e) {
    auto it = jobs_.find(e.job);
    if (it == jobs_.end() || it->second.state == JobState::kEnded) return;
    if (it->second.state == JobState::kPending) {
      pending_.erase({-resolved_.at(e.job).queue->priority, it->second.submit_time, e.job});
      resolved_.erase(e.job);
      it->second.state = JobState::kEnded;
      it->second.end_time = now_;
      it->second.end_reason = "cancelled";
      return;
    }
    out_.push_back(Stop{e.job, it->second.slice, StopReason::kCancelled});
    ++stats_.stopped;
    OnEnd(e.job, "cancelled", std::nullopt);
  }

  // A running job ends (finished, cancelled, reclaimed, stopped): release, then reschedule.
  void OnEnd(JobId id, std::string_view reason, std::optional<bool>) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.state != JobState::kRunning) return;
    EndRunning(id, reason);
    Schedule(std::nullopt);
  }

  // Releases a running job's slice; the job is ended (or pending again when `requeue`).
  void EndRunning(JobId id, std::string_view reason, bool requeue = false) {
    JobView& j = jobs_.at(id);
    SliceView s = slices_.at(j.slice);
    const Resolved& r = resolved_.at(id);
    Usage& u = usage_[{j.queue, j.user}];
    u.milli -= SliceUsage(s);
    u.jobs -= 1;
    for (DeviceIndex di : s.devices) {
      DeviceRef ref{s.node, di};
      Mutate(ref, [&](DeviceView& d) {
        d.slices.erase(std::find(d.slices.begin(), d.slices.end(), s.slice));
        d.clients -= 1;
        if (s.kind != SliceKind::kMig) {
          d.used_milli -= s.milli;
          d.used_memory -= s.memory;
        }
        if (d.slices.empty() && d.mode != DeviceMode::kMig) SetMode(d, DeviceMode::kFree);
      });
    }
    slices_.erase(s.slice);
    j.slice = SliceId();
    if (requeue) {
      j.state = JobState::kPending;
      pending_.insert({-r.queue->priority, j.submit_time, id});
    } else {
      j.state = JobState::kEnded;
      j.end_time = now_;
      j.end_reason = std::string(reason);
      resolved_.erase(id);
    }
    // A draining device that became empty is reconfigured now.
    for (DeviceIndex di : s.devices) MaybeFinishDrain({s.node, di});
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
    if (r.kind == SliceKind::kMps && d.clients >= MpsLimit(d.ref)) return false;
    return true;
  }

  std::optional<Choice> PlaceFractionalFast(const Resolved& r, FastOrder order) {
    const auto& index = r.kind == SliceKind::kMps ? mps_index_ : shared_index_;
    auto from_free = [&]() -> std::optional<Choice> {
      // A free device: best-fit takes it from the host with the fewest free devices (keeps
      // whole hosts free for multi-GPU jobs); spread from the host with the most.
      auto try_node = [&](NodeId nid) -> std::optional<Choice> {
        for (DeviceIndex di : nodes_.at(nid).free) {
          if (SharedFits(r, devices_.at({nid, di}))) return Choice{nid, {di}, std::nullopt};
        }
        return std::nullopt;
      };
      if (order == FastOrder::kLoosest) {
        for (auto it = free_by_node_.rbegin(); it != free_by_node_.rend(); ++it)
          if (auto c = try_node(it->second)) return c;
      } else {
        for (const auto& [count, nid] : free_by_node_)
          if (auto c = try_node(nid)) return c;
      }
      return std::nullopt;
    };
    if (order == FastOrder::kLoosest) {
      if (auto c = from_free()) return c;
      for (auto it = index.rbegin(); it != index.rend() && it->first >= r.milli; ++it) {
        ++stats_.placement_attempts;
        if (SharedFits(r, devices_.at(it->second))) return Choice{it->second.node, {it->second.index}, std::nullopt};
      }
      return std::nullopt;
    }
    for (auto it = index.lower_bound({r.milli, DeviceRef{}}); it != index.end(); ++it) {
      ++stats_.placement_attempts;
      if (SharedFits(r, devices_.at(it->second))) return Choice{it->second.node, {it->second.index}, std::nullopt};
    }
    return from_free();
  }

  std::optional<Choice> PlaceWholeFast(const Resolved& r, FastOrder order) {
    auto try_node = [&](NodeId nid) -> std::optional<Choice> {
      Choice c{nid, {}, std::nullopt};
      for (DeviceIndex di : nodes_.at(nid).free) {
        if (!ModelOk(r, devices_.at({nid, di}))) continue;
        c.devices.push_back(di);
        if (static_cast<int>(c.devices.size()) == r.gpus) return c;
      }
      return std::nullopt;
    };
    if (order == FastOrder::kLoosest) {
      for (auto it = free_by_node_.rbegin(); it != free_by_node_.rend() && it->first >= r.gpus; ++it)
        if (auto c = try_node(it->second)) return c;
      return std::nullopt;
    }
    for (auto it = free_by_node_.lower_bound({r.gpus, NodeId{}}); it != free_by_node_.end(); ++it) {
      ++stats_.placement_attempts;
      if (auto c = try_node(it->second)) return c;
    }
    return std::nullopt;
  }

  // Other policies (fgd, gpuslice, ...): Filter/Score over every host, via placement.h.
  std::optional<Choice> PlaceGeneric(const Resolved& r, const PlacementPolicy& policy) {
    scratch_gpus_.clear();
    scratch_nodes_.clear();
    scratch_refs_.clear();
    for (const auto& [nid, node] : nodes_) {
      for (DeviceIndex di : node.devices) {
        const DeviceView& d = devices_.at({nid, di});
        GpuView g;
        bool ok = r.kind == SliceKind::kWhole
                      ? (Schedulable(d) && d.mode == DeviceMode::kFree && ModelOk(r, d))
                      : SharedFits(r, d);
        g.usable = ok;
        g.free_milli = ok ? kOneGpu - d.used_milli : 0;
        g.free_memory = ok ? std::max<Bytes>(d.memory - d.used_memory, 0) : 0;
        scratch_gpus_.push_back(g);
        scratch_refs_.push_back({nid, di});
      }
    }
    std::size_t pos = 0;
    std::uint32_t index = 0;
    for (const auto& [nid, node] : nodes_) {
      NodeView v;
      v.index = index++;
      v.model = devices_.at({nid, *node.devices.begin()}).model;
      v.cpu_milli_free = v.cpu_milli_total = 1 << 30;
      v.memory_free = v.memory_total = Bytes{1} << 50;
      v.gpus = std::span<const GpuView>(scratch_gpus_.data() + pos, node.devices.size());
      pos += node.devices.size();
      scratch_nodes_.push_back(v);
    }
    PlacementRequest req;
    req.num_gpus = r.gpus;
    req.milli_per_gpu = r.milli;
    PlacementContext ctx;
    ctx.rng = &rng_;
    ++stats_.placement_attempts;
    auto p = Place(policy, req, scratch_nodes_, ctx);
    if (!p) return std::nullopt;
    // Map back: node_index -> first device position of that node.
    std::size_t first = 0;
    std::uint32_t i = 0;
    for (const auto& [nid, node] : nodes_) {
      if (i++ == p->node_index) {
        Choice c{nid, {}, std::nullopt};
        for (int g : p->gpu_indices) c.devices.push_back(scratch_refs_[first + g].index);
        // The generic Filter does not know per-slice memory caps; re-check.
        for (DeviceIndex di : c.devices) {
          const DeviceView& d = devices_.at({nid, di});
          if (r.kind != SliceKind::kWhole && !SharedFits(r, d)) return std::nullopt;
        }
        return c;
      }
      first += node.devices.size();
    }
    return std::nullopt;
  }

  // MIG: a free instance of the smallest fitting profile on a MIG-mode device (first in
  // device order: deterministic).
  std::optional<Choice> PlaceMig(const Resolved& r) {
    for (const DeviceRef& ref : mig_devices_) {
      const DeviceView& d = devices_.at(ref);
      const DeviceModel* m = ModelOf(ref);
      if (!m || !ModelOk(r, d)) continue;
      const MigProfile* p = m->SmallestProfileFor(r.mig_need);
      if (!p) continue;
      ++stats_.placement_attempts;
      for (const MigPlacement& inst : d.layout) {
        if (inst.profile_id != p->id || InstanceUsed(d, inst)) continue;
        return Choice{ref.node, {ref.index}, inst};
      }
    }
    return std::nullopt;
  }

  bool InstanceUsed(const DeviceView& d, const MigPlacement& inst) const {
    for (SliceId s : d.slices) {
      const SliceView& sv = slices_.at(s);
      if (sv.mig && *sv.mig == inst) return true;
    }
    return false;
  }

  std::optional<Choice> TryPlace(const Resolved& r) {
    if (r.kind == SliceKind::kMig) return PlaceMig(r);
    const std::string& pname = r.queue->placement;
    FastOrder order = FastOrderFor(pname);
    if (order == FastOrder::kNone) return PlaceGeneric(r, *policies_.at(r.queue->name));
    if (r.kind == SliceKind::kWhole) return PlaceWholeFast(r, order);
    return PlaceFractionalFast(r, order);
  }

  bool CapBlocks(const JobView& j, const Resolved& r) const {
    const QueueConfig& q = *r.queue;
    if (q.user_max_milli == 0 && q.user_max_jobs == 0) return false;
    auto it = usage_.find({j.queue, j.user});
    Usage u = it == usage_.end() ? Usage{} : it->second;
    if (q.user_max_jobs > 0 && u.jobs + 1 > q.user_max_jobs) return true;
    if (q.user_max_milli > 0 && u.milli + UsageMilli(r) > q.user_max_milli) return true;
    return false;
  }

  void Start(JobId id, const Resolved& r, const Choice& c) {
    JobView& j = jobs_.at(id);
    pending_.erase({-r.queue->priority, j.submit_time, id});
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
    const DeviceView& first = devices_.at({c.node, c.devices.front()});
    switch (r.kind) {
      case SliceKind::kWhole:
        s.milli = kOneGpu;
        s.memory = first.memory;
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
    for (DeviceIndex di : c.devices) {
      DeviceRef ref{c.node, di};
      d.uuids.push_back(devices_.at(ref).uuid);
      Mutate(ref, [&](DeviceView& dv) {
        if (dv.mode == DeviceMode::kFree) SetMode(dv, ModeFor(r.kind));
        dv.slices.insert(std::upper_bound(dv.slices.begin(), dv.slices.end(), s.slice), s.slice);
        dv.clients += 1;
        if (r.kind != SliceKind::kMig) {
          dv.used_milli += s.milli;
          dv.used_memory += s.memory;
        }
      });
    }
    Usage& u = usage_[{j.queue, j.user}];
    u.milli += SliceUsage(s);
    u.jobs += 1;
    j.state = JobState::kRunning;
    j.start_time = now_;
    j.slice = s.slice;
    slices_.emplace(s.slice, std::move(s));
    out_.push_back(std::move(d));
    ++stats_.started;
  }

  // Tries pending jobs (or just `only`) in order; then plans MIG for unmet demand.
  void Schedule(std::optional<JobId> only) {
    std::vector<JobId> order;
    if (only) {
      order.push_back(*only);
    } else {
      order.reserve(pending_.size());
      for (const PendingKey& k : pending_) order.push_back(k.job);
    }
    std::set<std::tuple<SliceKind, int, MilliGpu, Bytes, Bytes, std::string, const QueueConfig*>> failed;
    std::vector<JobId> mig_unmet;
    for (JobId id : order) {
      const JobView& j = jobs_.at(id);
      const Resolved& r = resolved_.at(id);
      if (CapBlocks(j, r)) continue;
      auto key = r.Key();
      if (failed.contains(key)) {
        if (r.kind == SliceKind::kMig) mig_unmet.push_back(id);
        continue;
      }
      if (auto c = TryPlace(r)) {
        Start(id, r, *c);
      } else {
        failed.insert(key);
        if (r.kind == SliceKind::kMig) mig_unmet.push_back(id);
      }
    }
    if (!mig_unmet.empty() && config_.mig.enabled) PlanMig(mig_unmet);
  }

  // ---------------------------------------------------------------- MIG planning
  bool MigChangeInFlight() const {
    for (const auto& [ref, d] : devices_)
      if (d.draining || d.reconfiguring) return true;
    return false;
  }

  MigLayout InUse(const DeviceView& d) const {
    MigLayout in_use;
    for (SliceId s : d.slices) {
      const SliceView& sv = slices_.at(s);
      if (sv.mig) in_use.push_back(*sv.mig);
    }
    std::sort(in_use.begin(), in_use.end(), [](const MigPlacement& a, const MigPlacement& b) {
      return std::tie(a.start, a.profile_id) < std::tie(b.start, b.profile_id);
    });
    return in_use;
  }

  std::vector<Bytes> NeedsFor(const std::vector<JobId>& jobs, const DeviceView& d) const {
    std::vector<Bytes> needs;
    for (JobId id : jobs) {
      const Resolved& r = resolved_.at(id);
      if (ModelOk(r, d)) needs.push_back(r.mig_need);
    }
    return needs;
  }

  // One GPU at a time: prefer a MIG device whose free instances can be re-laid out (no drain),
  // then an empty MIG-capable device, then drain a device in another mode (fewest slices).
  void PlanMig(const std::vector<JobId>& unmet) {
    if (MigChangeInFlight()) return;
    struct Candidate {
      int rank;        // 0: mig, 1: free, 2: needs drain
      int satisfied;
      int clients;
      DeviceRef ref;
      MigLayout layout;
    };
    std::optional<Candidate> best;
    for (const auto& [ref, d] : devices_) {
      if (!d.mig_capable || mig_broken_.contains(ref) || !Schedulable(d)) continue;
      const DeviceModel* m = ModelOf(ref);
      std::vector<Bytes> needs = NeedsFor(unmet, d);
      if (needs.empty()) continue;
      int rank = d.mode == DeviceMode::kMig ? 0 : d.mode == DeviceMode::kFree ? 1 : 2;
      MigLayout keep = rank == 0 ? InUse(d) : MigLayout{};
      auto plan = PlanMigLayout(*m, keep, needs);
      if (!plan.ok() || plan->satisfied == 0) continue;
      if (rank == 0 && plan->layout == d.layout) continue;
      Candidate c{rank, plan->satisfied, d.clients, ref, plan->layout};
      auto better = [](const Candidate& a, const Candidate& b) {
        return std::make_tuple(a.rank, -a.satisfied, a.clients, a.ref) <
               std::make_tuple(b.rank, -b.satisfied, b.clients, b.ref);
      };
      if (!best || better(c, *best)) best = std::move(c);
    }
    if (!best) return;
    DeviceView& d = devices_.at(best->ref);
    if (best->rank < 2) {
      Reconfigure(d, best->layout);
      return;
    }
    Mutate(best->ref, [&](DeviceView& dv) {
      dv.draining = true;
      dv.target_layout = best->layout;
    });
    out_.push_back(Drain{best->ref, fmt::format("MIG layout for {} pending inference request(s)",
                                                best->satisfied)});
    if (config_.mig.drain == MigDrainPolicy::kPreempt) {
      std::vector<SliceId> victims = d.slices;
      for (SliceId s : victims) {
        const SliceView& sv = slices_.at(s);
        const Resolved& r = resolved_.at(sv.job);
        if (!r.queue->preemptible) continue;
        out_.push_back(Preempt{sv.job, s, "drain for MIG reconfiguration", true});
        ++stats_.preempted;
        EndRunning(sv.job, "preempted", /*requeue=*/true);
      }
    }
    MaybeFinishDrain(best->ref);
  }

  void Reconfigure(DeviceView& d, const MigLayout& layout) {
    MigLayout old = d.mode == DeviceMode::kMig ? d.layout : MigLayout{};
    Mutate(d.ref, [&](DeviceView& dv) {
      dv.reconfiguring = true;
      dv.draining = false;
      dv.target_layout = layout;
    });
    out_.push_back(ReconfigureMig{d.ref, d.uuid, old, layout});
    ++stats_.reconfigurations;
  }

  void MaybeFinishDrain(const DeviceRef& ref) {
    auto it = devices_.find(ref);
    if (it == devices_.end() || !it->second.draining || !it->second.slices.empty()) return;
    DeviceView& d = it->second;
    // Re-plan now: demand may have changed while draining.
    std::vector<JobId> mig_pending;
    for (const PendingKey& k : pending_)
      if (resolved_.at(k.job).kind == SliceKind::kMig) mig_pending.push_back(k.job);
    const DeviceModel* m = ModelOf(ref);
    auto plan = PlanMigLayout(*m, {}, NeedsFor(mig_pending, d));
    MigLayout layout = plan.ok() && plan->satisfied > 0 ? plan->layout : d.target_layout;
    Reconfigure(d, layout);
  }

  void OnReconfigureDone(const ReconfigureDone& e) {
    auto it = devices_.find(e.device);
    if (it == devices_.end() || !it->second.reconfiguring) return;
    Mutate(e.device, [&](DeviceView& d) {
      d.reconfiguring = false;
      d.draining = false;
      d.target_layout.clear();
      if (e.ok) {
        SetMode(d, DeviceMode::kMig);
        d.layout = e.layout;
      } else if (d.mode == DeviceMode::kMig) {
        d.layout = e.layout;  // what the device reports it has now
      }
    });
    if (!e.ok) mig_broken_.insert(e.device);  // don't loop on a device that refuses
    Schedule(std::nullopt);
  }

  // ---------------------------------------------------------------- timers and samples
  void OnSample(const Sample& e) {
    for (const SliceSample& s : e.slices) {
      auto it = slices_.find(s.slice);
      if (it == slices_.end()) continue;
      SliceView& sv = it->second;
      const IdlePolicy& idle = resolved_.at(sv.job).queue->idle;
      int thr = idle.util_threshold_percent;
      bool active = (idle.activity.sm_utilisation && s.sm_percent >= thr && s.sm_percent > 0) ||
                    (idle.activity.memory_traffic && s.memory_percent >= thr && s.memory_percent > 0) ||
                    (idle.activity.process_presence && s.processes > 0);
      if (active) {
        sv.last_active = now_;
        sv.idle = IdleState::kActive;
        sv.idle_deadline = 0;
      }
    }
  }

  void OnTick() {
    std::vector<std::pair<JobId, std::string>> ended;
    for (auto& [sid, s] : slices_) {
      const JobView& j = jobs_.at(s.job);
      const QueueConfig& q = *resolved_.at(s.job).queue;
      if (s.deadline > 0) {
        if (now_ >= s.deadline) {
          out_.push_back(Stop{s.job, sid, StopReason::kTimeLimit});
          ++stats_.stopped;
          ended.emplace_back(s.job, "time-limit");
          continue;
        }
        if (q.warn_before > 0 && !s.limit_warned && now_ >= s.deadline - q.warn_before) {
          s.limit_warned = true;
          out_.push_back(Warn{s.job, sid, WarnReason::kTimeLimit, s.deadline,
                              fmt::format("job {} of {} reaches its time limit at {}", s.job.value(),
                                          j.user, FormatDuration(s.deadline))});
        }
      }
      if (!q.idle.enabled) continue;
      switch (s.idle) {
        case IdleState::kActive:
          if (now_ - s.last_active >= q.idle.window) {
            Micros idle_for = now_ - s.last_active;
            if (q.idle.action == ReclaimAction::kReport) {
              s.idle = IdleState::kReported;
              s.idle_deadline = now_;
              out_.push_back(Warn{s.job, sid, WarnReason::kIdle, now_,
                                  fmt::format("slice idle for {} (reported, not reclaimed)",
                                              FormatDuration(idle_for))});
              break;
            }
            s.idle = IdleState::kWarned;
            s.idle_deadline = now_ + q.idle.grace;
            out_.push_back(Warn{s.job, sid, WarnReason::kIdle, s.idle_deadline,
                                fmt::format("slice idle for {}; reclaimed in {} unless used",
                                            FormatDuration(idle_for), FormatDuration(q.idle.grace))});
          }
          if (s.idle != IdleState::kWarned || now_ < s.idle_deadline) break;
          [[fallthrough]];
        case IdleState::kWarned:
          if (now_ >= s.idle_deadline) {
            out_.push_back(Reclaim{s.job, sid,
                                   fmt::format("idle since {}", FormatDuration(s.last_active))});
            ++stats_.reclaimed;
            ended.emplace_back(s.job, "idle");
          }
          break;
        case IdleState::kReported:
          break;
      }
    }
    for (const auto& [job, reason] : ended) EndRunning(job, reason);
    if (!ended.empty()) Schedule(std::nullopt);
  }

  // ---------------------------------------------------------------- state
  struct Node {
    std::set<DeviceIndex> devices;
    std::set<DeviceIndex> free;  // schedulable devices in kFree mode
  };

  Config config_;
  std::mt19937_64 rng_;
  Micros now_ = 0;
  std::vector<Decision> out_;
  SchedulerStats stats_;
  std::map<std::string, std::unique_ptr<PlacementPolicy>> policies_;

  std::map<JobId, JobView> jobs_;
  std::unordered_map<JobId, Resolved> resolved_;  // pending and running jobs
  std::map<SliceId, SliceView> slices_;
  std::map<DeviceRef, DeviceView> devices_;
  std::map<DeviceRef, const DeviceModel*> models_;
  std::map<NodeId, Node> nodes_;
  std::set<PendingKey> pending_;
  std::map<std::pair<std::string, std::string>, Usage> usage_;  // (queue, user)
  std::uint64_t last_slice_ = 0;
  std::set<DeviceRef> mig_broken_;
  std::string violation_;

  // Indexes.
  std::set<std::pair<int, NodeId>> free_by_node_;             // (free device count, node)
  std::set<std::pair<MilliGpu, DeviceRef>> shared_index_;     // (free share, device)
  std::set<std::pair<MilliGpu, DeviceRef>> mps_index_;
  std::set<DeviceRef> mig_devices_;

  // Scratch for the generic placement path.
  std::vector<GpuView> scratch_gpus_;
  std::vector<NodeView> scratch_nodes_;
  std::vector<DeviceRef> scratch_refs_;

  friend class Scheduler;
};

Status Scheduler::Impl::CheckInvariants() const {
  if (!violation_.empty()) return Internal(violation_);
  auto where = [](const DeviceView& d) { return fmt::format("device {}/{}", d.ref.node.value(), d.ref.index.value()); };
  std::set<std::pair<int, NodeId>> free_by_node;
  std::set<std::pair<MilliGpu, DeviceRef>> shared, mps;
  std::set<DeviceRef> mig;
  std::map<NodeId, int> free_count;
  for (const auto& [ref, d] : devices_) {
    MilliGpu milli = 0;
    Bytes mem = 0;
    std::set<std::pair<int, int>> instances;
    for (SliceId sid : d.slices) {
      auto it = slices_.find(sid);
      if (it == slices_.end()) return Internal(fmt::format("{}: unknown slice {}", where(d), sid.value()));
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
        mem += s.memory;
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
    if (d.mode == DeviceMode::kMps && d.clients > MpsLimit(ref))
      return Internal(fmt::format("{}: {} MPS clients over the limit", where(d), d.clients));
    if (d.slices.empty() && (d.mode == DeviceMode::kWhole || d.mode == DeviceMode::kShared ||
                             d.mode == DeviceMode::kMps))
      return Internal(fmt::format("{}: empty but left in mode {}", where(d), DeviceModeName(d.mode)));
    if (d.mode == DeviceMode::kMig) {
      if (const DeviceModel* m = ModelOf(ref)) {
        Status st = ValidateLayout(*m, d.layout);
        if (!st.ok()) return Internal(fmt::format("{}: illegal layout: {}", where(d), st.message()));
      }
    }
    if (Schedulable(d)) {
      switch (d.mode) {
        case DeviceMode::kFree: ++free_count[ref.node]; break;
        case DeviceMode::kShared:
          if (d.used_milli < kOneGpu) shared.insert({kOneGpu - d.used_milli, ref});
          break;
        case DeviceMode::kMps:
          if (d.used_milli < kOneGpu && d.clients < MpsLimit(ref)) mps.insert({kOneGpu - d.used_milli, ref});
          break;
        case DeviceMode::kMig: mig.insert(ref); break;
        case DeviceMode::kWhole: break;
      }
    }
  }
  for (const auto& [nid, n] : free_count) free_by_node.insert({n, nid});
  if (free_by_node != free_by_node_ || shared != shared_index_ || mps != mps_index_ || mig != mig_devices_)
    return Internal("placement indexes disagree with the device records");
  for (const auto& [sid, s] : slices_) {
    auto j = jobs_.find(s.job);
    if (j == jobs_.end() || j->second.state != JobState::kRunning || j->second.slice != sid)
      return Internal(fmt::format("slice {} does not belong to a running job", sid.value()));
    for (DeviceIndex di : s.devices) {
      auto d = devices_.find({s.node, di});
      if (d == devices_.end() ||
          std::find(d->second.slices.begin(), d->second.slices.end(), sid) == d->second.slices.end())
        return Internal(fmt::format("slice {} not recorded on its device {}/{}", sid.value(), s.node.value(), di.value()));
    }
  }
  for (const PendingKey& k : pending_) {
    if (jobs_.at(k.job).state != JobState::kPending)
      return Internal(fmt::format("job {} queued but not pending", k.job.value()));
  }
  return Status::Ok();
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

}  // namespace gpuslice::sched
