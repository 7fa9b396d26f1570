// Scheduler::Impl: the scheduler's state and the declarations of its parts. Private to src/sched/
// (include it only from the scheduler_*.cc files); the contract is scheduler.h. The definitions
// live by section: scheduler.cc (construction, Handle(), views), scheduler_reasons.cc,
// scheduler_devices.cc, scheduler_placement.cc, scheduler_jobs.cc, scheduler_reclaim.cc,
// scheduler_reservations.cc, scheduler_mig.cc, scheduler_timers.cc, scheduler_invariants.cc.
// Owned parts with their own interfaces and tests: JobBooks (job_books.h, every kept job's view,
// the ended history and the live jobs' Resolved records), PendingQueue (pending_queue.h, the
// waiting jobs, their subsets and the count of held ones), SliceTimers (slice_timers.h, the timers
// and the slices reclaimable on demand), CapacityIndex, TeamShares (team_shares.h: the TeamBooks,
// take-back candidates and fair-share levels), MigBooks (mig_books.h, the MIG controller's
// books), UserCaps (user_caps.h, the per-user caps), ShapeBooks (shape_books.h, the shape ids and
// the shapes a pass gave up on), Reservations (reservations.h, the devices kept for a whole-GPU
// job), PlacementEngine (placement_engine.h, where requests go: the indexed paths, MIG instances,
// placement by host state (ByStateEngine), the generic Filter/Score path (GenericPlacement) and
// the learned workload policies score against (WorkloadModel)), QueueVersions (queue_versions.h,
// every version of every queue and its placement policy), ClusterState (cluster_state.h, the
// devices, the running slices, the indexes over them and what could ever fit; slices booked all
// or nothing, and every change to a device through its Mutate()).
// Not thread-safe, like Scheduler (scheduler.h).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sched/capacity_index.h"
#include "sched/cluster_state.h"
#include "sched/device_rules.h"
#include "sched/job_books.h"
#include "sched/mig_books.h"
#include "sched/node_pool.h"
#include "sched/placement/placement.h"
#include "sched/pending_queue.h"
#include "sched/placement_engine.h"
#include "sched/queue_versions.h"
#include "sched/reservations.h"
#include "sched/resolved.h"
#include "sched/scheduler.h"
#include "sched/shape_books.h"
#include "sched/slice_timers.h"
#include "sched/team_shares.h"
#include "sched/user_caps.h"

namespace gpuslice::sched {

class Scheduler::Impl {
 public:
  Impl(Config config, std::uint64_t seed);
  std::vector<Decision> Handle(const Event& e);

  // ---- views
  const Config& config() const { return config_; }
  const std::map<JobId, JobView>& jobs() const { return jobs_.views(); }
  const std::map<SliceId, SliceView>& slices() const { return cluster_.slices(); }
  const std::map<DeviceRef, DeviceView>& devices() const { return cluster_.devices(); }
  const SchedulerStats& stats() const { return stats_; }
  Micros now() const { return now_; }
  std::vector<TeamStanding> TeamStandings() const;  // scheduler_teams.cc
  std::string TeamBooksDigest() const { return teams_.Digest(); }

  std::vector<JobId> Pending(std::optional<std::string_view> queue) const;

  Status CheckInvariants() const;

  void set_reference_placement(bool on) { placement_.set_reference(on); }

  // ---- config reloads (scheduler_config.cc)
  const QueueConfig* QueueOf(JobId job) const;

  // ---- pending reasons (scheduler_reasons.cc)
  std::optional<WaitReason> PendingReason(JobId job) const;
  std::array<std::int64_t, kWaitReasonKinds> PendingReasonCounts() const;

 private:
  // ---- pending reasons (scheduler_reasons.cc)
  struct ReasonScan;
  const WaitReason& ShapeReasonOf(const Resolved& r, ReasonScan& scan) const;
  WaitReason ReasonFor(const Resolved& r, ReasonScan& scan) const;
  std::optional<UserCap> CapReason(const Resolved& r) const {
    return user_caps_.Reason(*r.queue, r.user, UsageMilli(r));
  }
  const DeviceView* ChangingDevice(ReasonScan& scan) const;
  bool FitsWith(const Resolved& r, NodeId node, const std::vector<const DeviceView*>& extra) const;
  WaitReason ShapeReason(const Resolved& r, ReasonScan& scan) const;
  std::optional<std::string> NeverFitsWhy(const Resolved& r) const;

  // ---- config reloads (scheduler_config.cc)
  // Adds a version of every queue of config_ to queues_, and tells the parts that depend on
  // the queues' settings (placement_, reservations_).
  void InstallQueues();
  void OnConfigReload(const ConfigReload& e);

  // ---- an admin's orders (scheduler_admin.cc)
  void OnAdminDrain(const AdminDrain& e);
  void OnAdminMigMode(const AdminMigMode& e);
  // Drains `d` towards the MIG mode an admin ordered (then MaybeFinishDrain changes it), unless
  // it is in that mode, on its way, out of the admin's hands (kAuto) or refuses layouts.
  void StartAdminMigChange(const DeviceView& d);
  void OnAdminHold(const AdminHold& e);
  void OnAdminRequeue(const AdminRequeue& e);

  // ---- devices and indexes (scheduler_devices.cc)
  const DeviceModel* ModelOf(const DeviceRef& ref) const { return cluster_.devices().at(ref).catalogue; }

  MigLayout InUseFromSlices(const DeviceView& d) const;
  void OnDeviceAdded(const DeviceAdded& e);
  void OnDeviceRemoved(const DeviceRemoved& e);

  // ---- placement (scheduler_placement.cc)
  using Choice = PlacementChoice;
  // Where `r` goes now, by placement_ under its queue's placement; counts the attempts.
  std::optional<Choice> TryPlace(const Resolved& r);

  // ---- jobs (scheduler_jobs.cc)
  Result<Resolved> Resolve(const Submit& e) const;

  // GPU share counted against per-user caps before placement (a MIG slice's share is only
  // known once its instance is chosen; it counts from then on).
  static MilliGpu UsageMilli(const Resolved& r) {
    return r.kind == SliceKind::kMig ? 0 : r.milli * r.gpus;
  }

  void OnSubmit(const Submit& e);
  void RejectPending(JobId id, const Status& st);
  void OnCancel(const Cancel& e);
  void OnEnd(JobId id, std::string_view reason);
  void OnRequeue(const Requeue& e);
  void EndRunning(JobId id, std::string_view reason, bool requeue = false);

  static MilliGpu SliceUsage(const SliceView& s) {
    return s.milli * static_cast<MilliGpu>(s.devices.size());
  }

  // The job's team limit or its user's cap in its queue keeps it from starting now.
  bool CapBlocks(const Resolved& r) const {
    return (r.team >= 0 && TeamLimitReason(r)) || user_caps_.Blocks(*r.queue, r.user, UsageMilli(r));
  }
  void Start(const Resolved& r, Choice c);
  void Schedule(std::optional<JobId> only);
  void SchedulePass(std::optional<JobId> only);

  // ---- on-demand idle reclaim (scheduler_reclaim.cc)
  bool ReclaimOnDemand(std::optional<JobId> only);
  struct Freed;
  bool FitsFreed(const Resolved& r, const DeviceView& d, const Freed& f) const;
  bool FitsAfter(const Resolved& r, const std::vector<const SliceView*>& set,
                 std::optional<DeviceRef>* device, std::optional<NodeId>* node) const;
  std::vector<const SliceView*> RoomFrom(const Resolved& r, const std::vector<const SliceView*>& cands) const;
  // The same, with candidates drawn in order from `next` (nullptr: no more) only as far as needed.
  std::vector<const SliceView*> RoomFromNext(const Resolved& r, const std::function<const SliceView*()>& next) const;

  // ---- reservations (scheduler_reservations.cc)
  void MaybeReserve();
  std::optional<Choice> ReservationFor(const Resolved& r) const;
  void ServeReservation();
  void ReleaseReservation();
  void ReleaseReservationOf(JobId job);

  // ---- MIG planning (scheduler_mig.cc)
  // The planner searches layouts for these many pending needs at most (a GPU holds <= 7).
  static constexpr std::size_t kMaxPlannedNeeds = 16;
  static constexpr int kRelayoutCandidates = 4;
  static constexpr std::size_t kDrainCandidates = 32;
  std::vector<Bytes> NeedsFor(const std::vector<const Resolved*>& jobs, const DeviceView& d) const;
  // One GPU at a time. A GPU that needs no drain (a MIG device's free room, an empty GPU) is
  // taken before one is drained, also when it frees while a drain is under way (the drain is
  // called off, unless an admin ordered it). `allow_drain`: may start a drain.
  void PlanMig(const std::vector<const Resolved*>& unmet, bool allow_drain);
  // `mig_mode` false: out of MIG mode (`layout` empty); true: in MIG mode with `layout`, which
  // is empty when an admin put the GPU in MIG mode before any MIG work came.
  void Reconfigure(const DeviceRef& ref, const MigLayout& layout, bool mig_mode = true);
  void MaybeFinishDrain(const DeviceView& d);
  void OnReconfigureDone(const ReconfigureDone& e);
  // A GPU in MIG mode with no instance in use for kMigReleaseAfter, no pending MIG request it
  // could serve, and other work waiting for a GPU of its model leaves MIG mode (an empty
  // layout). The hold time is the hysteresis: MIG demand that comes back within it finds its
  // layout still there.
  static constexpr Micros kMigReleaseAfter = 10 * kMinute;
  void MaybeLeaveMig();

  // ---- teams (scheduler_teams.cc)
  // The team a submit runs in: the one it names (which must list the user, unless members
  // also come by group: the daemon checked those), else the user's default; "" without teams.
  Result<std::string> TeamFor(const Submit& e) const;
  const TeamConfig* TeamConfigOf(const Resolved& r) const {
    return r.team < 0 ? nullptr : config_.teams.Find(teams_.name(r.team));
  }
  // The job's team would pass its limit in the job's queue.
  std::optional<TeamLimit> TeamLimitReason(const Resolved& r) const;
  // The job's team, with it, holds no more than its guarantee in the job's queue.
  bool WithinGuarantee(const Resolved& r) const;
  bool TakeBack();
  // Freeing MIG slice `v` gives MIG request `r` room, and keeps `r`'s team within its guarantee.
  bool TakesBackFor(const Resolved& r, const SliceView& v) const;
  static constexpr int kTakeBackRounds = 16;
  // The over-quota pool's order (TeamShares::ComputeLevels, once per pass).
  double LevelOf(const Resolved& r) const { return teams_.LevelOf(r.team); }
  // A running slice's share moves into (+1) or out of (-1) its team's books, and (with teams)
  // into or out of the take-back candidates when its queue is preemptible.
  void CountTeam(const Resolved& r, const SliceView& s, int sign) {
    const TeamConfig* t = TeamConfigOf(r);
    teams_.Count(r, s, SliceUsage(s), t ? t->GuaranteeIn(r.queue->name) : 0,
                 config_.teams.enabled() && r.queue->preemptible, sign, now_);
  }

  // ---- timers and samples (scheduler_timers.cc)
  void OnSample(const Sample& e);
  void OnActivityReport(const ActivityReport& e);
  void OnTick();
  bool TickSlice(SliceId sid, SliceView& s, std::vector<std::pair<JobId, std::string>>& ended);
  // When the slice's next timer could fire: a time-limit warning or stop, the end of its idle
  // window (active) or grace (warned); SliceTimers::kNever: none. Before it, TickSlice does nothing.
  static Micros NextTimer(const SliceView& s, const QueueConfig& q);
  // Re-files a slice in timers_ after its timer fields changed (or it started).
  void Retime(const SliceView& s) { timers_.Set(s.slice, NextTimer(s, *jobs_.RecordOf(s.job).queue)); }

  // ---------------------------------------------------------------- state
  Config config_;
  std::mt19937_64 rng_;
  Micros now_ = 0;
  std::vector<Decision> out_;
  SchedulerStats stats_;
  // Every version of every queue a job was resolved against (Resolved::queue points there),
  // config_'s by name, and how each version places.
  QueueVersions queues_;

  JobBooks jobs_;  // every kept job's view; pending and running jobs' Resolved records
  PendingQueue pending_;  // waiting jobs; those an admin holds are out of the queue, counted
  ShapeBooks shapes_;  // shape ids (Resolved::shape), and the shapes that failed in this pass
  UserCaps user_caps_;  // what each user holds in each capped queue
  // What each team holds and has used, the take-back candidates and the pass's fair-share levels.
  TeamShares teams_;
  Reservations reservations_;  // the devices kept for a whole-GPU job, and the search for the next
  SliceTimers timers_;  // each running slice's next timer (NextTimer()); the reclaimable ones
  // The MIG controller's books: instances in use, devices changing layout or refusing to, MIG
  // mode count, and since when MIG devices stand empty (MaybeLeaveMig's hold).
  MigBooks mig_;
  std::string violation_;  // the first broken invariant seen outside the parts; empty: none

  // Where requests go: the indexed paths, MIG instances, placement by host state and the
  // generic path, and the learned workload policies score against.
  PlacementEngine placement_;

  // The devices, the running slices, the indexes over them and what could ever fit; tells mig_
  // and placement_ of every change to a device.
  ClusterState cluster_{mig_,
                        [this](NodeId node, bool devices_changed) { placement_.MarkDirty(node, devices_changed); }};
};

}  // namespace gpuslice::sched
