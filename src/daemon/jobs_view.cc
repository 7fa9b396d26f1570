// GET /v1/jobs and /v1/jobs/ID: a job as the API shows it (never its environment), with its
// live state (activity, idle clock, warning, MIG instance, why it waits); the listing renders
// each ended job once.
#include <algorithm>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "api/protocol.h"
#include "core/catalogue.h"
#include "core/text.h"
#include "daemon/daemon_impl.h"
#include "daemon/waiting.h"
#include "store/codec.h"

namespace gpuslice::daemon {

namespace {

// Durations said to people are whole seconds: "14m59s", not "14m59.873s".
Micros RoundToSecond(Micros us) { return (us + kSecond / 2) / kSecond * kSecond; }

}  // namespace

// A listing over a year of history is mostly ended jobs, whose views never change: each is
// rendered once (ended_views_) and shared; under the daemon's lock a listing only filters and
// collects, renders the few unfinished jobs, and the text is joined after the lock is released.
// So a user looping listings holds the lock for microseconds per thousand jobs, and a writer
// (WriterFirstMutex) waits only for the listings already under way.
Result<std::string> Daemon::Impl::ListJobsText(const std::map<std::string, std::string>& q) const {
  std::optional<JobState> state;
  bool active_only = false, ended_only = false;
  if (auto it = q.find("state"); it != q.end() && !it->second.empty()) {
    if (it->second == "active") {
      active_only = true;
    } else if (it->second == "ended") {
      ended_only = true;
    } else {
      auto s = store::ParseJobState(it->second);
      if (!s.ok()) return InvalidArgument("query 'state': " + s.status().message());
      state = *s;
    }
  }
  // limit=N: the N most recent (by end, else submit time), newest first; 0 or none: all, by id.
  std::size_t limit = 0;
  if (auto it = q.find("limit"); it != q.end() && !it->second.empty()) {
    const std::string& v = it->second;
    if (v.size() > 6 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return InvalidArgument(fmt::format("query 'limit': value '{}' is not an integer 0..999999",
                                         EscapeInvalidUtf8(v.substr(0, 32))));
    }
    limit = static_cast<std::size_t>(std::stoul(v));
  }
  const std::string user = q.contains("user") ? q.at("user") : "";
  const std::string queue = q.contains("queue") ? q.at("queue") : "";
  const std::string key = q.contains("key") ? q.at("key") : "";
  // parts[i] is filled under the lock (an unfinished job, or an ended one already rendered) or
  // after it (an ended one rendered for the first time, from a copy of its record).
  std::vector<std::shared_ptr<const std::string>> parts;
  struct Unrendered {
    std::size_t part;
    JobRecord record;
    std::optional<std::string> idle_reclaim_mode;
    std::optional<std::string> mig_instance;
  };
  std::vector<Unrendered> unrendered;
  std::uint64_t generation = 0;
  {
    std::shared_lock lock(mu_);
    std::vector<const JobRecord*> picked;
    bool any_pending = false;
    for (const auto& [id, j] : jobs_) {
      if (state && j.state != *state) continue;
      if (active_only && store::IsTerminal(j.state)) continue;
      if (ended_only && !store::IsTerminal(j.state)) continue;
      if (!user.empty() && j.user != user) continue;
      if (!queue.empty() && j.queue != queue) continue;
      if (!key.empty() && j.idempotency_key != key) continue;
      picked.push_back(&j);
    }
    if (limit > 0 && picked.size() > limit) {
      auto recent = [](const JobRecord* j) { return std::pair(std::max(j->end_time, j->submit_time), j->id); };
      std::partial_sort(picked.begin(), picked.begin() + static_cast<std::ptrdiff_t>(limit), picked.end(),
                        [&](const JobRecord* a, const JobRecord* b) { return recent(a) > recent(b); });
      picked.resize(limit);
    }
    for (const JobRecord* j : picked) any_pending = any_pending || j->state == JobState::kPending;
    // Every pending job's place, once for the listing (not once per job).
    const auto places = any_pending ? QueuePlaces(*sched_) : std::map<JobId, QueuePlace>{};
    std::lock_guard views(views_mu_);
    generation = views_generation_;
    for (const JobRecord* j : picked) {
      if (!store::IsTerminal(j->state)) {
        parts.push_back(std::make_shared<const std::string>(api::DumpJson(JobJson(*j, &places))));
      } else if (auto c = ended_views_.find(j->id); c != ended_views_.end()) {
        parts.push_back(c->second);
      } else {
        const sched::QueueConfig* q = config_.FindQueue(j->queue);
        unrendered.push_back({parts.size(), *j,
                              q ? std::optional<std::string>(IdleReclaimMode(q->idle)) : std::nullopt,
                              MigInstanceText(*j, q)});
        parts.emplace_back();
      }
    }
  }
  // A year of ended jobs seen for the first time is rendered here, without the daemon's lock
  // (JobJson of an ended job is its record, its queue's reclaim mode and its MIG instance text:
  // RecordView).
  for (Unrendered& u : unrendered) {
    api::JobView v = RecordView(u.record);
    v.idle_reclaim_mode = std::move(u.idle_reclaim_mode);
    v.mig_instance = std::move(u.mig_instance);
    parts[u.part] = std::make_shared<const std::string>(api::DumpJson(v.ToJson()));
  }
  if (!unrendered.empty()) {
    // Kept unless a record was committed meanwhile (an ended job's is trimmed once, in memory,
    // after its end): then these are rendered again next time rather than cached stale.
    std::lock_guard views(views_mu_);
    if (generation == views_generation_) {
      for (const Unrendered& u : unrendered) ended_views_.emplace(u.record.id, parts[u.part]);
    }
  }
  std::size_t size = 40;
  for (const auto& p : parts) size += p->size() + 1;
  std::string out;
  out.reserve(size);
  out += R"({"jobs":[)";
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += ',';
    out += *parts[i];
  }
  out += opt_.simulated ? R"(],"simulated":true})" : R"(],"simulated":false})";
  return out;
}

Result<Json> Daemon::Impl::GetJob(JobId id) const {
  std::shared_lock lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound(fmt::format("job {}: no such job", id.value()));
  Json out{{"job", JobJson(it->second)}, {"simulated", opt_.simulated}};
  out["slice"] = nullptr;
  if (auto s = slices_.find(it->second.slice); s != slices_.end()) {
    api::SliceView v = SliceViewOf(s->second);
    Mechanisms(v);
    out["slice"] = v.ToJson();
  }
  return out;
}

// Which MIG instance a MIG job's memory gets, and why when a smaller profile falls short of it
// (the README's "--mem 10GiB" gets a 1g.20gb on an H100: 1g.10gb holds 9.75GiB). The running
// job's own instance; before it runs, the smallest profile that holds the memory on each GPU
// model of the host (the scheduler's rule, DeviceModel::SmallestProfileFor).
std::optional<std::string> Daemon::Impl::MigInstanceText(const JobRecord& j, const sched::QueueConfig* q) const {
  if (q == nullptr) return std::nullopt;
  const std::string kind(sched::SliceKindName(j.kind.value_or(q->default_kind)));
  if (kind != "mig") return std::nullopt;
  const Bytes need = j.memory > 0 ? j.memory : q->default_memory;
  auto say = [&](const DeviceModel& m, const MigProfile& p) {
    std::string s = fmt::format("{} ({}) on {}: the smallest instance that holds {}", p.name, FormatBytes(p.memory),
                                m.name, FormatBytes(need));
    // The next smaller profile (fewer memory slices), when it falls short of the ask.
    const MigProfile* smaller = nullptr;
    for (const MigProfile& o : m.mig_profiles) {
      if (o.media_extensions || o.memory_slices >= p.memory_slices) continue;
      if (smaller == nullptr || o.memory > smaller->memory) smaller = &o;
    }
    if (smaller != nullptr) s += fmt::format(" ({} holds {})", smaller->name, FormatBytes(smaller->memory));
    return s;
  };
  if (auto v = sched_->slices().find(j.slice); v != sched_->slices().end() && v->second.mig) {
    auto d = sched_->devices().find(sched::DeviceRef{v->second.node, v->second.devices.front()});
    if (d != sched_->devices().end() && d->second.catalogue != nullptr) {
      if (const MigProfile* p = d->second.catalogue->FindProfileById(v->second.mig->profile_id)) {
        return say(*d->second.catalogue, *p);
      }
    }
  }
  std::vector<std::string> parts;
  std::set<const DeviceModel*> seen;
  for (const auto& [index, info] : device_info_) {
    if (info.model == nullptr || !info.model->supports_mig() || !seen.insert(info.model).second) continue;
    if (const MigProfile* p = info.model->SmallestProfileFor(need)) parts.push_back(say(*info.model, *p));
  }
  if (parts.empty()) return std::nullopt;
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

Result<std::string> Daemon::Impl::LogPath(JobId id) const {
  std::shared_lock lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound(fmt::format("job {}: no such job", id.value()));
  return it->second.log_path;
}

bool Daemon::Impl::JobEnded(JobId id) const {
  std::shared_lock lock(mu_);
  auto it = jobs_.find(id);
  return it == jobs_.end() || store::IsTerminal(it->second.state);
}

// A job as the API shows it to anybody: never its environment (tokens, keys: only the job
// gets it), and only what holds now: an ended job has no standing warning and no time left.
// What the record alone says (no live state, no clock): all of an ended job's view but its
// queue's idle_reclaim_mode.
api::JobView Daemon::Impl::RecordView(const JobRecord& j) {
  api::JobView o;
  o.id = j.id.value();
  o.user = j.user;
  o.uid = j.uid;
  o.gid = j.gid;
  o.queue = j.queue;
  o.kind = j.kind ? std::string(sched::SliceKindName(*j.kind)) : "";
  o.gpus = j.gpus;
  o.milli = j.milli;
  o.memory = j.memory;
  o.time_limit_us = j.time_limit;
  o.model = j.model;
  o.argv = j.argv;
  o.cwd = j.cwd;
  o.state = std::string(store::JobStateName(j.state));
  // Texts the daemon composed; they may quote a user's bytes, and JSON cannot hold those.
  o.reason = EscapeInvalidUtf8(j.reason);
  o.warning = EscapeInvalidUtf8(j.warning);
  o.warn_deadline_us = j.warn_deadline;
  o.submit_time_us = j.submit_time;
  o.start_time_us = j.start_time;
  o.end_time_us = j.end_time;
  o.deadline_us = j.deadline;
  o.slice = j.slice.value();
  o.pid = j.pid;
  o.requeues = j.never_started_requeues;
  o.log_path = j.log_path;
  o.exit_code = j.exit_code;
  o.exit_signal = j.exit_signal;
  if (!j.idempotency_key.empty()) o.idempotency_key = j.idempotency_key;
  if (j.argv_dropped > 0) o.argv_dropped_bytes = j.argv_dropped;
  if (store::IsTerminal(j.state)) {
    o.warning = "";
    o.warn_deadline_us = 0;
  }
  if (!o.warning.empty()) {
    // A time-limit warning's deadline is the job's own (applier.cc keeps it past ClearWarning).
    const bool limit = j.deadline > 0 && j.warn_deadline == j.deadline;
    o.warning_kind = limit ? "time-limit" : "idle";
  }
  return o;
}

Json Daemon::Impl::JobJson(const JobRecord& j, const std::map<JobId, QueuePlace>* places) const {
  api::JobView o = RecordView(j);
  const bool ended = store::IsTerminal(j.state);
  // The scheduler knows the team (the submit journaled it); forgotten with the job's record there.
  if (auto sj = sched_->jobs().find(j.id); sj != sched_->jobs().end() && !sj->second.team.empty())
    o.team = EscapeInvalidUtf8(sj->second.team);
  // Said as of now, not as of the warning: "in 59m59s" must not stand for an hour.
  if (o.warning_kind == "time-limit" && j.deadline > Now()) {
    const sched::QueueConfig* q = config_.FindQueue(j.queue);
    const Micros length = q != nullptr ? q->EffectiveLimit(j.time_limit) : 0;
    o.warning = fmt::format("job {} reaches its time limit{} in {}", j.id.value(),
                            length > 0 ? " of " + FormatDuration(length) : "",
                            FormatDuration(RoundToSecond(j.deadline - Now())));
  }
  // time_left_us stays unknown: no limit, not started, or ended
  if (!ended && j.deadline > 0 && j.start_time > 0 && j.state != JobState::kPending) {
    o.time_left_us = std::max<Micros>(0, j.deadline - Now());
  }
  // The running slice's last verdict (active / idle / unmeasured) and the signals behind it.
  if (auto u = slice_util_.find(j.slice); u != slice_util_.end() && !ended) {
    o.activity = agent::ActivityLabel(u->second.verdict.activity);
    o.activity_basis = u->second.verdict.basis;
  }
  // The latest activity report and the idle state machine (activity.h).
  const sched::QueueConfig* queue = sched_->QueueOf(j.id);  // a removed queue's: its last
  if (queue != nullptr) o.idle_reclaim_mode = IdleReclaimMode(queue->idle);
  if (auto v = sched_->slices().find(j.slice);
      queue != nullptr && !ended && v != sched_->slices().end() && v->second.job == j.id) {
    o.activity_report = ActivityReportJson(activity_.Latest(j.id), &v->second, queue->idle, Now());
    o.idle_state = IdleStateName(v->second);
    o.idle_state_text = IdleStateText(v->second, queue->idle);
    if (queue->idle.enabled && !v->second.unmeasured) {
      o.idle_since_us = sched::EffectiveLastActive(queue->idle, v->second, Now());
      if (v->second.idle == sched::IdleState::kWarned && queue->idle.reclaim == sched::IdleReclaim::kAlways &&
          v->second.idle_deadline > Now() && o.warning_kind == "idle") {
        o.warning = fmt::format("slice idle for {}; reclaimed in {} unless used",
                                FormatDuration(RoundToSecond(Now() - *o.idle_since_us)),
                                FormatDuration(RoundToSecond(v->second.idle_deadline - Now())));
      }
    }
  }
  o.mig_instance = MigInstanceText(j, queue);
  if (j.state == JobState::kPending) {
    if (auto w = sched_->PendingReason(j.id)) {
      o.pending_reason = WaitReasonJson(*w, j.queue);
      std::optional<QueuePlace> place;
      if (places != nullptr) {
        if (auto p = places->find(j.id); p != places->end()) place = p->second;
      } else if (auto all = QueuePlaces(*sched_); all.contains(j.id)) {
        place = all.at(j.id);
      }
      if (place) {
        o.pending_reason["position"] = place->position;
        o.pending_reason["queue_length"] = place->length;
      }
      // By when the room it waits for is freed at the latest (waiting.h): only for a job that
      // nothing ahead of it could take that room from.
      o.pending_reason["ready_by_us"] = nullptr;
      if (place && place->first) {
        if (auto t = WaitEndsBy(*sched_, *w)) o.pending_reason["ready_by_us"] = *t;
      }
    }
  }
  return o.ToJson();
}

}  // namespace gpuslice::daemon
