// Scheduler::Impl: the scheduler's state and the declarations of its parts. Private to src/sched/
// (include it only from the scheduler*.cc files); the contract is scheduler.h. Definitions out of
// the class: scheduler.cc (construction, Handle(), views, CheckInvariants); scheduler_reasons.cc,
// scheduler_devices.cc, scheduler_placement.cc, scheduler_jobs.cc.
// Not thread-safe, like Scheduler (scheduler.h).
#pragma once

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

#include "sched/capacity_index.h"
#include "sched/host_states.h"
#include "sched/mig_plan.h"
#include "sched/placement/placement.h"
#include "sched/scheduler.h"

namespace gpuslice::sched {

// How the built-in policies order candidates (device level, see docs/config.md).
enum class FastOrder { kNone, kTightest, kLoosest };

inline DeviceMode ModeFor(SliceKind kind) {
  switch (kind) {
    case SliceKind::kWhole: return DeviceMode::kWhole;
    case SliceKind::kMig: return DeviceMode::kMig;
    case SliceKind::kMps: return DeviceMode::kMps;
    case SliceKind::kShared: return DeviceMode::kShared;
  }
  return DeviceMode::kFree;
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

inline int ModelIndex(const DeviceModel* m) {
  if (!m) return -1;
  return static_cast<int>(m - AllModels().data());
}

class Scheduler::Impl {
 public:
  Impl(Config config, std::uint64_t seed);
  std::vector<Decision> Handle(const Event& e);

  // ---- views
  const Config& config() const { return config_; }
  const std::map<JobId, JobView>& jobs() const { return jobs_; }
  const std::map<SliceId, SliceView>& slices() const { return slices_; }
  const std::map<DeviceRef, DeviceView>& devices() const { return devices_; }
  const SchedulerStats& stats() const { return stats_; }
  Micros now() const { return now_; }

  std::vector<JobId> Pending(std::optional<std::string_view> queue) const;

  Status CheckInvariants() const;

  void set_reference_placement(bool on) { reference_placement_ = on; }

  // ---- pending reasons (scheduler_reasons.cc)
  std::optional<WaitReason> PendingReason(JobId job) const;
  std::array<std::int64_t, kWaitReasonKinds> PendingReasonCounts() const;

 private:
  // ---- pending reasons (scheduler_reasons.cc)
  struct ReasonScan;
  const WaitReason& ShapeReasonOf(const Resolved& r, ReasonScan& scan) const;
  WaitReason ReasonFor(const Resolved& r, ReasonScan& scan) const;
  std::optional<UserCap> CapReason(const Resolved& r) const;
  const DeviceView* ChangingDevice(ReasonScan& scan) const;
  bool FitsWith(const Resolved& r, NodeId node, const std::vector<const DeviceView*>& extra) const;
  WaitReason ShapeReason(const Resolved& r, ReasonScan& scan) const;
  std::optional<std::string> NeverFitsWhy(const Resolved& r) const;

  // ---- devices and indexes (scheduler_devices.cc)
  const DeviceModel* ModelOf(const DeviceRef& ref) const { return devices_.at(ref).catalogue; }

  static int MpsLimit(const DeviceView& d) {
    return d.catalogue && d.catalogue->mps_max_clients > 0 ? d.catalogue->mps_max_clients : 48;
  }

  static bool Schedulable(const DeviceView& d) {
    return !d.draining && !d.reconfiguring && !d.reserved_for.valid();
  }

  MigLayout InUse(const DeviceView& d) const;
  static void SortByStart(MigLayout& l);
  MigLayout InUseFromSlices(const DeviceView& d) const;
  DeviceFacts Facts(const DeviceView& d) const;

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
  void SetMode(DeviceView& d, DeviceMode mode);
  void CountCapacity(const DeviceView& d, int delta);
  void OnDeviceAdded(const DeviceAdded& e);
  void OnDeviceRemoved(const DeviceRemoved& e);

  // ---- placement (scheduler_placement.cc)
  struct Choice {
    NodeId node;
    std::vector<DeviceIndex> devices;
    std::optional<MigPlacement> mig;
  };
  bool SharedFits(const Resolved& r, const DeviceView& d) const;
  std::optional<Choice> PlaceFractionalFast(const Resolved& r, FastOrder order);
  std::optional<Choice> PlaceWholeFast(const Resolved& r, FastOrder order);
  std::optional<Choice> PlaceGeneric(const Resolved& r, const PlacementPolicy& policy);
  GpuView ViewOf(const Resolved& r, const DeviceView& d) const;
  static constexpr int kAnyModel = -2;  // ViewOfKey()'s `model` when r.model is empty
  static GpuView ViewOfKey(const Resolved& r, int model, const DeviceStateKey& k);
  void RefileHost(NodeId nid);
  std::optional<Choice> PlaceByState(const Resolved& r, const PlacementPolicy& policy);
  void ScoreState(const Resolved& r, const PlacementPolicy& policy, const PlacementRequest& req,
                  const PlacementContext& ctx, HostStates::State& s);

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
  const ViewMemo& LookupViews(int model, int usable, F compute);

  static constexpr std::int64_t kWorkloadWindow = 10000;  // see CountShape()
  void CountShape(const Resolved& r);
  std::span<const WorkloadShape> Workload();
  std::optional<Choice> PlaceMig(const Resolved& r);
  std::optional<Choice> TryPlace(const Resolved& r);

  // ---- jobs (scheduler_jobs.cc)
  Result<Resolved> Resolve(const Submit& e) const;

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

  Status Feasible(const Resolved& r) const;
  void OnSubmit(const Submit& e);
  void AddPending(Resolved* r);
  void RemovePending(const Resolved& r);
  void EndJob(JobView& j, std::string_view reason);
  static constexpr std::size_t kEndedHistory = 10000;  // see Remember()
  void Remember(JobId ended);
  void RejectPending(JobId id, const Status& st);
  void OnCancel(const Cancel& e);
  void OnEnd(JobId id, std::string_view reason);
  void EndRunning(JobId id, std::string_view reason, bool requeue = false);

  // The memory a (non-MIG) slice holds on one of its devices. A whole slice holds all of each
  // device, its own size: booking one figure on every device over-commits the smaller ones
  // when a multi-device job spans models (an 80GB H100 and a 40GB A100).
  static Bytes ReservedOn(const SliceView& s, const DeviceView& d) {
    return s.kind == SliceKind::kWhole ? d.memory : s.memory;
  }

  static MilliGpu SliceUsage(const SliceView& s) {
    return s.milli * static_cast<MilliGpu>(s.devices.size());
  }

  bool CapBlocks(const Resolved& r) const;
  void Start(const Resolved& r, const Choice& c);
  void Schedule(std::optional<JobId> only);
  void SchedulePass(std::optional<JobId> only);

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

  std::map<std::pair<int, MilliGpu>, std::int64_t> workload_counts_;  // (gpus, milli) -> weight
  std::int64_t workload_total_ = 0;
  std::vector<WorkloadShape> workload_;
  bool workload_dirty_ = false;
  std::uint64_t workload_version_ = 0;  // bumped by every CountShape()

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
    std::uint64_t workload = 0;
    const PlacementPolicy* policy = nullptr;
    bool operator==(const MemoKey&) const = default;
  };
  MemoKey memo_key_;
  std::uint64_t memo_generation_ = 0;
  std::vector<std::pair<double, HostStates::State*>> scratch_levels_;  // (score, state) of fitting states
  std::vector<std::pair<NodeId, HostStates::State*>> scratch_ties_;    // (host, state) of the top level
  struct LevelRecord {
    std::size_t begin, end;       // range of scratch_levels_
    NodeId first;                 // the level's first host
    std::optional<NodeId> bound;  // first host of any higher score (none for the top)
  };
  std::vector<LevelRecord> scratch_records_;
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

}  // namespace gpuslice::sched
