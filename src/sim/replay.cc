#include "sim/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "core/catalogue.h"
#include "core/overloaded.h"
#include "sched/placement/fgd_frag.h"
#include "sched/scheduler.h"
#include "sim/placement_replay.h"

namespace gpuslice::sim {
namespace {

constexpr std::string_view kDefaultQueue = "default";
constexpr std::string_view kDefaultUser = "sim";

// The utilisation percent a job reports on every sample (unknown: busy). A job with recorded
// activity runs is sampled as busy only while a busy run lasts.
int ReportedPercent(const ReplayJob& j) {
  if (!j.activity.empty()) return 100;
  return j.utilisation < 0 ? 100 : static_cast<int>(std::lround(j.utilisation * 100));
}

// What a sample of a recorded run says: busy, idle (one process, nothing running), or nothing
// measured at all (unknown: the Scheduler never reclaims a slice for idleness while so).
sched::SliceSample RunSample(SliceId slice, RunState state) {
  switch (state) {
    case RunState::kActive: return sched::SliceSample{slice, 100, 100, 1};
    case RunState::kIdle: return sched::SliceSample{slice, 0, 0, 1};
    case RunState::kUnknown: break;
  }
  sched::SliceSample s{slice, 0, 0, 0};
  s.sm_known = s.memory_known = s.processes_known = false;
  return s;
}

// Whether a sample of `percent` SM and memory utilisation with one process counts as activity
// (the Scheduler's own rule); used only to decide which slices need idle timers, while the
// Scheduler itself decides from the samples it is fed.
bool CountsAsActive(const sched::IdlePolicy& idle, int percent) {
  return sched::SampleShowsActivity(idle, sched::SliceSample{SliceId(), percent, percent, 1});
}

}  // namespace

std::string_view EndKindName(EndKind k) {
  switch (k) {
    case EndKind::kFinished: return "finished";
    case EndKind::kReclaimed: return "reclaimed";
    case EndKind::kTimeLimit: return "time-limit";
    case EndKind::kPreempted: return "preempted";
    case EndKind::kStopped: return "stopped";
    case EndKind::kRejected: return "rejected";
    case EndKind::kNeverStarted: return "never-started";
  }
  return "finished";
}

double DelayPercentile(const std::vector<Micros>& sorted, double q) {
  if (sorted.empty()) return 0;
  const std::size_t rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return static_cast<double>(sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1]) / kSecond;
}

void SummariseDelays(ReplayResult& r) {
  std::sort(r.delays.begin(), r.delays.end());
  r.delay_p50_s = DelayPercentile(r.delays, 0.50);
  r.delay_p95_s = DelayPercentile(r.delays, 0.95);
  r.delay_p99_s = DelayPercentile(r.delays, 0.99);
  double sum = 0;
  for (Micros d : r.delays) sum += static_cast<double>(d);
  r.delay_mean_s = r.delays.empty() ? 0 : sum / static_cast<double>(r.delays.size()) / kSecond;
}

std::vector<sched::WorkloadShape> ReplayShapes(const std::vector<ReplayJob>& jobs) {
  std::map<std::string, std::pair<const sched::PlacementRequest*, std::int64_t>> counts;
  for (const ReplayJob& j : jobs) {
    auto& [req, n] = counts[RequestKey(j.request)];
    req = &j.request;
    ++n;
  }
  std::vector<sched::WorkloadShape> out;
  for (const auto& [key, v] : counts) {
    sched::WorkloadShape s;
    s.cpu_milli = v.first->cpu_milli;
    s.num_gpus = v.first->num_gpus;
    s.milli_per_gpu = v.first->milli_per_gpu;
    s.allowed_models = v.first->allowed_models;
    s.frequency = static_cast<double>(v.second) / static_cast<double>(jobs.size());
    out.push_back(std::move(s));
  }
  return out;
}

Result<sched::Config> ReplayConfig(std::string_view policy, const std::vector<ReplayJob>& jobs) {
  std::set<std::string> names{std::string(kDefaultQueue)};
  for (const ReplayJob& j : jobs)
    if (!j.queue.empty()) names.insert(j.queue);
  sched::Config c;
  c.default_queue = std::string(kDefaultQueue);
  for (const std::string& name : names) {  // std::set: sorted by name, as Config wants
    sched::QueueConfig q;
    q.name = name;
    q.allowed_kinds = {sched::SliceKind::kWhole, sched::SliceKind::kShared};
    q.default_kind = sched::SliceKind::kWhole;
    q.placement = std::string(policy);
    c.queues.push_back(std::move(q));
  }
  GPUSLICE_RETURN_IF_ERROR(sched::ValidateConfig(c));
  return c;
}

sched::JobRequest ToJobRequest(const ReplayJob& job, const sched::QueueConfig& q) {
  using sched::SliceKind;
  const sched::PlacementRequest& p = job.request;
  sched::JobRequest r;
  SliceKind kind = q.default_kind;
  if (p.num_gpus > 1 && kind != SliceKind::kWhole && q.Allows(SliceKind::kWhole)) kind = SliceKind::kWhole;
  if (p.milli_per_gpu < kOneGpu && kind == SliceKind::kWhole) {
    for (SliceKind k : {SliceKind::kShared, SliceKind::kMps, SliceKind::kMig}) {
      if (q.Allows(k)) {
        kind = k;
        break;
      }
    }
  }
  if (job.kind && q.Allows(*job.kind)) kind = *job.kind;
  r.kind = kind;
  r.gpus = std::max(1, p.num_gpus);
  if (kind != SliceKind::kWhole) {  // a whole slice takes whole devices: a fraction holds one
    r.milli = std::min<MilliGpu>(p.milli_per_gpu, kOneGpu);
    r.memory = p.gpu_memory_per_gpu;
  }
  if (p.allowed_models.size() == 1) {
    if (auto m = FindModel(p.allowed_models.front()); m.ok()) r.model = (*m)->name;
  }
  return r;
}

Status CheckQueues(std::vector<ReplayJob>& jobs, const sched::Config& config, bool skip_bad_rows,
                   SkippedRows& skipped) {
  std::vector<std::string> names;
  for (const sched::QueueConfig& q : config.queues) names.push_back(q.name);
  std::vector<ReplayJob> kept;
  kept.reserve(jobs.size());
  for (ReplayJob& j : jobs) {
    if (j.queue.empty() || config.FindQueue(j.queue)) {
      kept.push_back(std::move(j));
      continue;
    }
    Status st = InvalidArgument(fmt::format("{}: column 'queue': value '{}' is not a queue of the config (queues: {})",
                                            j.where.empty() ? "job '" + j.id + "'" : j.where, j.queue,
                                            fmt::join(names, ", ")));
    if (!skip_bad_rows) return st;
    skipped.Add(st);
  }
  jobs = std::move(kept);
  return Status::Ok();
}

namespace {

// One replay: the Scheduler, the simulated clock's event queue, and the books kept from the
// decisions (what runs where, for metrics).
class Replay {
 public:
  Replay(const Cluster& cluster, std::vector<ReplayJob> jobs, const sched::Config& config,
         std::span<const sched::WorkloadShape> shapes, const ReplayOptions& options, const ReplayHooks& hooks)
      : cluster_(cluster), jobs_(std::move(jobs)), shapes_(shapes), options_(options), hooks_(hooks),
        sched_(config, options.seed), run_(jobs_.size()), queue_of_(jobs_.size(), nullptr),
        first_of_(jobs_.size(), -1) {
    sched_.SetReferencePlacement(options.reference_placement);
    r_.start_digest = 14695981039346656037ULL;
    // Histories usually come in submit order; sorting them anyway moves every job.
    auto by_submit = [](const ReplayJob& a, const ReplayJob& b) { return a.submit < b.submit; };
    if (!std::is_sorted(jobs_.begin(), jobs_.end(), by_submit)) std::stable_sort(jobs_.begin(), jobs_.end(), by_submit);
    first_gpu_.push_back(0);
    for (std::size_t i = 0; i < cluster_.size(); ++i)
      first_gpu_.push_back(first_gpu_.back() + cluster_.node(i).gpus.size());
    used_.assign(first_gpu_.back(), 0);
    const sched::Config& c = sched_.config();
    for (std::size_t j = 0; j < jobs_.size(); ++j)
      queue_of_[j] = c.FindQueue(jobs_[j].queue.empty() ? c.default_queue : jobs_[j].queue);
    if (c.teams.enabled()) {
      for (const sched::TeamConfig& t : c.teams.teams) {
        TeamReplayFigures f;
        f.team = t.name;
        for (const auto& [queue, g] : t.guarantee) f.guaranteed += g;
        r_.teams.push_back(std::move(f));
      }
      r_.teams.emplace_back();  // no team
      team_of_.assign(jobs_.size(), -1);
    }
  }

  ReplayResult Run(const std::function<void(double)>& progress) {
    r_.jobs = static_cast<std::int64_t>(jobs_.size());
    if (jobs_.empty()) return std::move(r_);
    const Micros start = jobs_.front().submit;
    for (const ReplayJob& j : jobs_) horizon_ = std::max(horizon_, j.submit + j.duration);
    step_ = std::max<Micros>(1, (horizon_ - start) / std::max(1, options_.samples));
    next_sample_ = last_time_ = reason_time_ = start;
    capacity_ = static_cast<double>(cluster_.capacity_milli());
    AnnounceDevices(start);

    std::size_t next = 0;
    const std::size_t traced = jobs_.size();  // follow-ups are appended after these
    const double total = 2.0 * static_cast<double>(traced);
    std::uint64_t steps = 0;
    while (next < traced || !events_.empty() || !late_.empty() || !follow_ups_.empty()) {
      AddFollowUps();
      const Micros t_next = next < traced ? jobs_[next].submit : INT64_MAX;
      const Micros t_late = late_.empty() ? INT64_MAX : late_.top().first;
      const Micros t_arr = std::min(t_next, t_late);
      const Micros t_ev = events_.empty() ? INT64_MAX : events_.top().time;
      if (t_ev == INT64_MAX && t_arr == INT64_MAX) break;
      if (t_ev <= t_arr) {
        Advance(t_ev);
        Step(t_ev);
      } else if (t_next <= t_late) {
        Advance(t_arr);
        Arrive(static_cast<std::uint32_t>(next++), t_arr);
      } else {
        const std::uint32_t j = late_.top().second;
        late_.pop();
        Advance(t_arr);
        Arrive(j, t_arr);
      }
      if (progress && (++steps & 4095) == 0)
        progress(std::min(1.0, static_cast<double>(next + finished_events_) / total));
    }
    r_.never_started = submitted_ - r_.rejected - running_ - done_;
    if (hooks_.on_slice_end) {
      for (std::uint32_t j = 0; j < jobs_.size(); ++j) {
        if (run_[j].submitted && !run_[j].started && !run_[j].rejected) Report(j, -1, last_time_, EndKind::kNeverStarted);
      }
    }
    r_.reclaimed_on_demand = static_cast<std::int64_t>(sched_.stats().reclaimed_on_demand);
    SummariseDelays(r_);
    const double span = static_cast<double>(last_time_ - start);
    r_.mean_alloc_pct = span > 0 ? 100 * alloc_integral_ / span / capacity_ : 0;
    SummariseTeams(span);
    if (progress) progress(1.0);
    return std::move(r_);
  }

 private:
  // Simulated-clock events; at one instant: finishes, MIG acknowledgements, then timers.
  enum class Kind : std::uint8_t { kFinish = 0, kMigDone = 1, kActivity = 2, kTimer = 3 };
  struct Ev {
    Micros time;
    Kind kind;
    std::uint64_t seq;  // insertion order: the stable tie-break
    std::uint32_t job;  // kMigDone: index into mig_done_
    SliceId slice;
    bool operator>(const Ev& o) const {
      return std::tie(time, kind, seq) > std::tie(o.time, o.kind, o.seq);
    }
  };
  struct JobRun {
    SliceId slice;                  // while running
    Micros start = 0;               // of the current slice
    MilliGpu milli = 0;             // per device
    std::uint32_t node = 0;         // cluster index
    std::vector<DeviceIndex> devices;
    sched::SliceKind kind = sched::SliceKind::kWhole;
    std::optional<MigPlacement> mig;
    std::uint32_t run = 0;          // recorded activity: the current run
    RunState state = RunState::kActive;  // ... and what the Scheduler was last told of it
    Micros busy_due = -1;           // busy_due_: when the busy slice is next sampled; -1 none
    bool submitted = false;
    bool started = false;           // at least once
    bool rejected = false;
  };

  // The pending jobs' reasons hold from the last event to `now` (asked once per instant; the
  // question has no side effect on the Scheduler, so decisions are the same without it).
  void CountWaits(Micros now) {
    if (!options_.wait_reasons || now <= reason_time_) return;
    if (reasons_dirty_) {
      reason_counts_ = sched_.PendingReasonCounts();
      reasons_dirty_ = false;
    }
    for (std::size_t k = 0; k < reason_counts_.size(); ++k)
      r_.wait_by_reason[k] += reason_counts_[k] * (now - reason_time_);
    reason_time_ = now;
  }

  void Push(Micros t, Kind k, std::uint32_t job, SliceId slice) {
    events_.push(Ev{t, k, seq_++, job, slice});
  }

  void AnnounceDevices(Micros now) {
    for (std::size_t i = 0; i < cluster_.size(); ++i) {
      const SimNode& n = cluster_.node(i);
      for (std::size_t g = 0; g < n.gpus.size(); ++g) {
        sched::DeviceAdded d;
        d.now = now;
        d.device = {NodeId(static_cast<std::uint32_t>(i + 1)), DeviceIndex(static_cast<std::uint32_t>(g))};
        d.uuid = fmt::format("GPU-sim-{}-{}", i + 1, g);
        d.model = n.model;
        d.mig_capable = true;  // the Scheduler keeps it only if the catalogue model supports MIG
        Feed(d, now);
      }
    }
  }

  void Feed(const sched::Event& e, Micros now) {
    std::vector<sched::Decision> out = sched_.Handle(e);
    reasons_dirty_ = true;
    ++r_.events;
    r_.decisions += out.size();
    if (options_.check_invariants && r_.invariant_error.empty()) {
      if (Status st = sched_.CheckInvariants(); !st.ok())
        r_.invariant_error = fmt::format("after {} at {}: {}", sched::EventName(e), now, st.message());
    }
    for (const sched::Decision& d : out) Apply(d, now);
  }

  void Apply(const sched::Decision& d, Micros now) {
    std::visit(Overloaded{
                   [&](const sched::StartSlice& x) { Start(x, now); },
                   [&](const sched::Warn&) { ++r_.warnings; },
                   [&](const sched::ClearWarning&) {},
                   [&](const sched::Reclaim& x) {
                     ++r_.reclaimed;
                     End(Index(x.job), now, true, EndKind::kReclaimed);
                   },
                   [&](const sched::Stop& x) {
                     const bool limit = x.reason == sched::StopReason::kTimeLimit;
                     if (limit) ++r_.time_limited;
                     End(Index(x.job), now, true, limit ? EndKind::kTimeLimit : EndKind::kStopped);
                   },
                   [&](const sched::Preempt& x) {
                     ++r_.preempted;
                     End(Index(x.job), now, !x.requeue, EndKind::kPreempted);
                   },
                   [&](const sched::Drain&) {},
                   [&](const sched::Reserve&) { ++r_.reservations; },
                   [&](const sched::ReconfigureMig& x) {
                     ++r_.reconfigurations;
                     mig_done_.push_back(sched::ReconfigureDone{0, x.device, true, x.layout, {}});
                     Push(now + options_.mig_reconfigure_delay, Kind::kMigDone,
                          static_cast<std::uint32_t>(mig_done_.size() - 1), SliceId());
                   },
                   [&](const sched::Reject& x) {
                     ++r_.rejected;
                     const std::uint32_t j = Index(x.job);
                     run_[j].rejected = true;
                     if (hooks_.on_slice_end) Report(j, -1, now, EndKind::kRejected);
                   },
               },
               d);
  }

  static std::uint32_t Index(JobId id) { return static_cast<std::uint32_t>(id.value() - 1); }

  // With teams: the figures of job j's team (the Scheduler's choice, asked once per job; it
  // keeps every pending and running job, so this is asked while j is one of them).
  TeamReplayFigures& TeamOf(std::uint32_t j) {
    int& t = team_of_[j];
    if (t < 0) {
      const std::string& name = sched_.jobs().at(JobId(j + 1)).team;
      auto it = std::find_if(r_.teams.begin(), r_.teams.end(), [&](const TeamReplayFigures& f) { return f.team == name; });
      t = static_cast<int>(it == r_.teams.end() ? r_.teams.size() - 1 : it - r_.teams.begin());
    }
    return r_.teams[static_cast<std::size_t>(t)];
  }

  void SummariseTeams(double span) {
    if (r_.teams.empty()) return;
    for (std::uint32_t j = 0; j < jobs_.size(); ++j)
      if (run_[j].submitted && !run_[j].started && !run_[j].rejected) ++TeamOf(j).never_started;
    const double gpu_hours = capacity_ / kOneGpu * span / kHour;
    for (TeamReplayFigures& t : r_.teams) {
      std::sort(t.delays.begin(), t.delays.end());
      t.wait_p50_s = DelayPercentile(t.delays, 0.50);
      t.wait_p95_s = DelayPercentile(t.delays, 0.95);
      t.guarantee_pct = 100.0 * static_cast<double>(t.guaranteed) / capacity_;
      t.share_pct = gpu_hours > 0 ? 100.0 * t.gpu_hours_held / gpu_hours : 0;
    }
  }
  void Digest(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      r_.start_digest ^= (v >> (8 * i)) & 0xff;
      r_.start_digest *= 1099511628211ULL;
    }
  }

  void Start(const sched::StartSlice& x, Micros now) {
    const std::uint32_t j = Index(x.job);
    Digest(x.job.value());
    Digest(x.node.value());
    for (DeviceIndex di : x.devices) Digest(di.value());
    JobRun& jr = run_[j];
    jr.slice = x.slice;
    jr.start = now;
    jr.milli = x.milli;
    jr.node = x.node.value() - 1;
    jr.devices = x.devices;
    jr.kind = x.kind;
    jr.mig = x.mig;
    for (DeviceIndex di : x.devices) used_[first_gpu_[jr.node] + di.value()] += x.milli;
    allocated_ += x.milli * static_cast<MilliGpu>(x.devices.size());
    ++running_;
    if (x.kind == sched::SliceKind::kMig) ++r_.mig_slices;
    if (!jr.started) {
      first_of_[j] = now;
      jr.started = true;
      ++r_.started;
      r_.delays.push_back(now - jobs_[j].submit);
      if (!r_.teams.empty()) {
        TeamReplayFigures& t = TeamOf(j);
        ++t.started;
        t.delays.push_back(now - jobs_[j].submit);
      }
    }
    const Micros end = now + jobs_[j].duration;
    Push(end, Kind::kFinish, j, x.slice);
    // Timers: only where the Scheduler could act before the job ends by itself.
    const sched::QueueConfig& q = *queue_of_[j];
    auto timer = [&](Micros t) {
      if (t < end) Push(t, Kind::kTimer, j, x.slice);
    };
    if (x.deadline > 0) {
      if (const Micros lead = q.TimeLimitWarnLead(x.deadline - now); lead > 0) timer(x.deadline - lead);
      timer(x.deadline);
    }
    if (q.idle.enabled && !jobs_[j].activity.empty()) {
      jr.run = 0;
      jr.state = RunState::kActive;  // as the Scheduler takes a new slice: active since its start
      EnterRun(j, now, true);
    } else if (q.idle.enabled) {
      if (CountsAsActive(q.idle, ReportedPercent(jobs_[j]))) {
        Track(j, now + q.idle.window);
      } else {
        timer(now + q.idle.window);
        if (q.idle.action == sched::ReclaimAction::kReclaim) timer(now + q.idle.window + q.idle.grace);
      }
    }
  }

  // The job's slice is gone (finished, stopped, reclaimed or preempted): release it in the books.
  void End(std::uint32_t j, Micros now, bool done, EndKind how) {
    JobRun& jr = run_[j];
    const MilliGpu held = jr.milli * static_cast<MilliGpu>(jr.devices.size());
    const double share = static_cast<double>(held) / kOneGpu;
    const double hours = share * static_cast<double>(now - jr.start) / kHour;
    r_.gpu_hours_held += hours;
    if (!r_.teams.empty()) {
      TeamReplayFigures& t = TeamOf(j);
      t.gpu_hours_held += hours;
      t.preempted += how == EndKind::kPreempted;
    }
    const ReplayJob& job = jobs_[j];
    if (!job.activity.empty()) {
      // Measured time only; busy runs whose level is known count at that level.
      const ActivityTotals t = Integrate(job.activity, 0, now - jr.start);
      r_.gpu_hours_held_known += share * static_cast<double>(t.active_level_known + t.idle) / kHour;
      r_.gpu_hours_used += share * static_cast<double>(t.used_permille_us) / 1000.0 / kHour;
    } else if (job.utilisation >= 0) {
      r_.gpu_hours_held_known += hours;
      r_.gpu_hours_used += hours * job.utilisation;
    }
    if (hooks_.on_slice_end) Report(j, jr.start, now, how);
    if (hooks_.follow_up && (how == EndKind::kReclaimed || how == EndKind::kTimeLimit)) {
      if (std::optional<ReplayJob> next = hooks_.follow_up(job, jr.start, now, how)) {
        next->submit = std::max(next->submit, now);
        follow_ups_.push_back(std::move(*next));
      }
    }
    for (DeviceIndex di : jr.devices) used_[first_gpu_[jr.node] + di.value()] -= jr.milli;
    allocated_ -= held;
    jr.busy_due = -1;  // untracked
    jr.slice = SliceId();
    jr.devices.clear();
    --running_;
    if (done) ++done_;
  }

  void Arrive(std::uint32_t j, Micros now) {
    const ReplayJob& job = jobs_[j];
    if (job.request.num_gpus == 0) {
      ++r_.cpu_only;
      return;
    }
    ++submitted_;
    run_[j].submitted = true;
    sched::Submit s;
    s.now = now;
    s.job = JobId(j + 1);
    s.user = job.user.empty() ? std::string(kDefaultUser) : job.user;
    s.queue = job.queue;
    if (queue_of_[j]) s.request = ToJobRequest(job, *queue_of_[j]);
    Feed(s, now);  // an unknown queue (caller skipped CheckQueues) is the Scheduler's Reject
  }

  // Everything due at `now` in the event queue.
  void Step(Micros now) {
    bool tick = false;
    while (!events_.empty() && events_.top().time == now) {
      const Ev e = events_.top();
      events_.pop();
      switch (e.kind) {
        case Kind::kFinish:
          ++finished_events_;
          if (run_[e.job].slice != e.slice) break;  // ended earlier
          End(e.job, now, true, EndKind::kFinished);
          ++r_.finished;
          Feed(sched::Finish{now, JobId(e.job + 1)}, now);
          break;
        case Kind::kMigDone: {
          sched::ReconfigureDone done = mig_done_[e.job];
          done.now = now;
          Feed(done, now);
          break;
        }
        case Kind::kActivity:
          if (run_[e.job].slice == e.slice) {
            ++run_[e.job].run;
            EnterRun(e.job, now, false);
          }
          break;
        case Kind::kTimer:
          if (run_[e.job].slice == e.slice) tick = true;
          break;
      }
      // Timers come last at an instant: tick once for all of them.
      if (tick && (events_.empty() || events_.top().time != now)) {
        // Only busy slices whose idle window would end by now need a sample (a fresh one keeps
        // them active); each is then due again one window later. A busy slice is so sampled at
        // least once per window, which is all the idle state machine can tell apart.
        sched::Sample sample{now, {}};
        while (!busy_due_.empty() && busy_due_.top().due <= now) {
          const BusyDue b = busy_due_.top();
          busy_due_.pop();
          JobRun& jr = run_[b.job];
          if (jr.slice != b.slice || jr.busy_due != b.due) continue;  // untracked or refiled since
          sample.slices.push_back(sched::SliceSample{b.slice, b.percent, b.percent, 1});
          Track(b.job, now + queue_of_[b.job]->idle.window);
        }
        if (!sample.slices.empty()) Feed(sample, now);
        Feed(sched::Tick{now}, now);
        tick = false;
      }
    }
  }

  // Job j's slice enters its current activity run (run_[j].run) at `now` (at_start: as it
  // starts). The Scheduler is told what changed: busy again (an active sample), idle from now
  // (an active sample at the end of a busy run, so its idle time counts from here exactly; an
  // idle one after an unknown stretch), or unknown (nothing measured). Timers go where the
  // idle window and grace would end; the run's end is the next change.
  void EnterRun(std::uint32_t j, Micros now, bool at_start) {
    JobRun& jr = run_[j];
    const ReplayJob& job = jobs_[j];
    const sched::QueueConfig& q = *queue_of_[j];
    const RunState next = jr.run < job.activity.size() ? job.activity[jr.run].state : RunState::kUnknown;
    if (!at_start && next == jr.state) return;  // (runs are merged; past the last run: unknown)
    sched::Sample sample{now, {}};
    if (!at_start && jr.state == RunState::kActive) sample.slices.push_back(RunSample(jr.slice, RunState::kActive));
    if (next != RunState::kActive || !at_start) {
      if (!(next == RunState::kIdle && jr.state == RunState::kActive)) sample.slices.push_back(RunSample(jr.slice, next));
    }
    if (!sample.slices.empty()) Feed(sample, now);  // (a sample never ends a slice)
    jr.state = next;
    jr.busy_due = -1;  // untracked
    const Micros end = jr.start + job.duration;
    if (next == RunState::kActive) {
      Track(j, now + q.idle.window);
    } else if (next == RunState::kIdle) {
      if (now + q.idle.window < end) Push(now + q.idle.window, Kind::kTimer, j, jr.slice);
      const Micros reclaim = now + q.idle.window + q.idle.grace;
      if (q.idle.action == sched::ReclaimAction::kReclaim && reclaim < end) Push(reclaim, Kind::kTimer, j, jr.slice);
    }
    if (jr.run < job.activity.size() && now + job.activity[jr.run].length < end) {
      Push(now + job.activity[jr.run].length, Kind::kActivity, j, jr.slice);
    }
  }

  // Job j's running slice is busy: sampled (as its ReportedPercent) at the first tick at or
  // after `due`, so its idle window never ends while it is.
  void Track(std::uint32_t j, Micros due) {
    JobRun& jr = run_[j];
    jr.busy_due = due;
    busy_due_.push(BusyDue{due, jr.slice, j, static_cast<std::int16_t>(ReportedPercent(jobs_[j]))});
  }

  // The caller's view of one slice (or of a job that never got one: start -1).
  void Report(std::uint32_t j, Micros start, Micros now, EndKind how) {
    const JobRun& jr = run_[j];
    SliceEnd e;
    e.job = &jobs_[j];
    e.tag = jobs_[j].tag;
    e.submit = jobs_[j].submit;
    e.start = start;
    e.end = now;
    e.first = start >= 0 && first_of_[j] == start;
    e.how = how;
    if (start >= 0) {
      e.kind = jr.kind;
      e.milli = jr.milli;
      e.devices = static_cast<int>(jr.devices.size());
      e.mig = jr.mig;
      e.model = &cluster_.node(jr.node).model;
    }
    hooks_.on_slice_end(e);
  }

  // Follow-ups asked for while applying decisions join the jobs between steps (so no reference
  // into jobs_ is held across the growth), each arriving at its own submit time.
  void AddFollowUps() {
    if (follow_ups_.empty()) return;
    const sched::Config& c = sched_.config();
    for (ReplayJob& f : follow_ups_) {
      const std::uint32_t j = static_cast<std::uint32_t>(jobs_.size());
      queue_of_.push_back(c.FindQueue(f.queue.empty() ? c.default_queue : f.queue));
      late_.emplace(f.submit, j);
      horizon_ = std::max(horizon_, f.submit + f.duration);
      jobs_.push_back(std::move(f));
      run_.emplace_back();
      first_of_.push_back(-1);
      ++r_.follow_ups;
      ++r_.jobs;
    }
    follow_ups_.clear();
  }

  // Time passes up to `now`: the allocation integral, the sampled series and the wait by reason.
  void Advance(Micros now) {
    CountWaits(now);
    while (next_sample_ <= now && next_sample_ <= horizon_) {
      double frag = 0;
      std::vector<sched::GpuView> gpus;
      for (std::size_t i = 0; i < cluster_.size(); ++i) {
        const SimNode& n = cluster_.node(i);
        gpus.assign(n.gpus.size(), sched::GpuView{});
        for (std::size_t g = 0; g < gpus.size(); ++g) gpus[g].free_milli = kOneGpu - used_[first_gpu_[i] + g];
        sched::NodeView v;
        v.index = static_cast<std::uint32_t>(i);
        v.model = n.model;
        v.cpu_milli_free = v.cpu_milli_total = n.cpu_total;  // CPU is not simulated
        v.memory_free = v.memory_total = n.memory_total;
        v.gpus = gpus;
        frag += sched::NodeFragmentation(v, shapes_);
      }
      r_.series.push_back(ReplaySample{next_sample_, 100 * static_cast<double>(allocated_) / capacity_,
                                       100 * frag / capacity_, submitted_ - r_.rejected - running_ - done_,
                                       running_});
      next_sample_ += step_;
    }
    alloc_integral_ += static_cast<double>(allocated_) * static_cast<double>(now - last_time_);
    last_time_ = now;
  }

  const Cluster& cluster_;
  std::vector<ReplayJob> jobs_;
  std::span<const sched::WorkloadShape> shapes_;
  ReplayOptions options_;
  const ReplayHooks& hooks_;
  sched::Scheduler sched_;
  std::vector<JobRun> run_;
  std::vector<const sched::QueueConfig*> queue_of_;  // into sched_.config(); nullptr: unknown queue
  std::priority_queue<Ev, std::vector<Ev>, std::greater<>> events_;
  // Follow-up jobs: asked for (not yet in jobs_), then waiting to arrive (time, job).
  std::vector<ReplayJob> follow_ups_;
  std::priority_queue<std::pair<Micros, std::uint32_t>, std::vector<std::pair<Micros, std::uint32_t>>, std::greater<>>
      late_;
  std::vector<Micros> first_of_;  // each job's first start (-1: none yet)
  std::vector<int> team_of_;      // with teams: each job's index in r_.teams (-1: not asked yet)
  std::uint64_t seq_ = 0;
  std::vector<sched::ReconfigureDone> mig_done_;
  // Running slices in idle-policed queues whose samples count as activity, with when their idle
  // window would end without a new sample: a min-heap in (due, slice) order, the order they
  // are sampled in. An entry is current only while its job's slice and busy_due (JobRun) still
  // match it; untracking leaves it behind, to be skipped (no search per slice end).
  struct BusyDue {
    Micros due;
    SliceId slice;
    std::uint32_t job;
    std::int16_t percent;
    bool operator>(const BusyDue& o) const { return std::tie(due, slice) > std::tie(o.due, o.slice); }
  };
  std::priority_queue<BusyDue, std::vector<BusyDue>, std::greater<>> busy_due_;
  std::vector<std::size_t> first_gpu_;     // cluster node -> its first GPU in used_
  std::vector<MilliGpu> used_;             // per GPU, allocated share (from the decisions)
  MilliGpu allocated_ = 0;
  double capacity_ = 0;
  std::int64_t submitted_ = 0, running_ = 0, done_ = 0;
  std::uint64_t finished_events_ = 0;
  Micros horizon_ = 0, step_ = 1, next_sample_ = 0, last_time_ = 0;
  Micros reason_time_ = 0;  // wait by reason counted up to here
  std::array<std::int64_t, sched::kWaitReasonKinds> reason_counts_{};
  bool reasons_dirty_ = false;
  double alloc_integral_ = 0;
  ReplayResult r_;
};

}  // namespace

ReplayResult RunReplay(const Cluster& cluster, std::vector<ReplayJob> jobs, const sched::Config& config,
                       std::string name, std::span<const sched::WorkloadShape> shapes,
                       const ReplayOptions& options, const std::function<void(double)>& progress,
                       const ReplayHooks& hooks) {
  const auto t0 = std::chrono::steady_clock::now();
  Replay replay(cluster, std::move(jobs), config, shapes, options, hooks);
  ReplayResult r = replay.Run(progress);
  r.policy = std::move(name);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace gpuslice::sim
