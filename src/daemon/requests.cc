// The API's mutations: Submit (with the parsing of its body: errors name the field and the
// value, and change nothing) and Cancel.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "api/bounded_json.h"
#include "core/text.h"
#include "daemon/daemon_impl.h"
#include "exec/proc.h"
#include "store/codec.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

}  // namespace

// ---------------------------------------------------------------------------- API
Result<Json> Daemon::Impl::Submit(const Caller& c, const Json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  if (c.uid < 0) return PermissionDenied("caller: unknown identity");
  if (!exec::CanSwitchUsers() && c.uid != static_cast<std::int64_t>(geteuid())) {
    return PermissionDenied(fmt::format(
        "uid {}: this daemon runs as uid {} (not root) and runs jobs only for that user",
        c.uid, geteuid()));
  }
  GPUSLICE_ASSIGN_OR_RETURN(const api::SubmitRequest req, api::SubmitRequest::FromJson(body));
  JobRecord j;
  GPUSLICE_RETURN_IF_ERROR(ParseRequest(req, &j));
  j.uid = c.uid;
  j.gid = c.gid;
  j.user = UserName(c.uid);
  // The team, before the exclusive lock: group lookups go through NSS (LDAP, sssd) and may be
  // slow, and must not hold up everyone else's requests.
  sched::TeamsConfig teams;
  {
    std::shared_lock shared(mu_);
    teams = config_.teams;
  }
  GPUSLICE_ASSIGN_OR_RETURN(const std::string team, TeamOfSubmit(teams, req.team, c, j.user));

  std::unique_lock lock(mu_);
  if (!failure_.ok()) return failure_;
  if (!team.empty() && config_.teams.Find(team) == nullptr)
    return FailedPrecondition(fmt::format("field 'team': team '{}' was removed by a config reload just now; "
                                          "submit again", team));
  if (auto earlier = Deduplicate(j)) return *std::move(earlier);
  // Quotas before anything is decided or stored: the error names the limit.
  GPUSLICE_RETURN_IF_ERROR(ledger_.Admit(j, opt_.quotas));
  Micros now = Now();
  j.id = JobId(next_job_++);
  j.submit_time = now;
  j.state = JobState::kPending;
  j.log_path = (fs::path(opt_.state_dir) / "logs" / fmt::format("{}.log", j.id.value())).string();
  jobs_[j.id] = j;
  store::WriteBatch batch;
  Actions act;
  batch.jobs.push_back(j);
  AddEvent(batch, j.id, "submit",
           fmt::format("job {} submitted by {} to queue '{}'", j.id.value(), j.user, j.queue));
  sched::Submit ev{now, j.id, j.user, j.queue, Request(j), team};
  Feed(ev, batch, act);
  // One commit for "accepted" and "started": the first launch's pid commit carries this
  // batch (its process may exec only after that commit), so a submission that starts at
  // once costs one durable write, not two.
  pending_ = &batch;
  LaunchReady();
  pending_ = nullptr;
  GPUSLICE_RETURN_IF_ERROR(CommitAndAct(batch, act));
  if (!j.idempotency_key.empty()) submit_keys_[{j.uid, j.idempotency_key}] = j.id;
  const JobRecord& out = jobs_.at(j.id);
  if (out.state == JobState::kRejected) {
    // It can never run as asked on this host as configured: a bad request (CLI exit 2).
    return InvalidArgument(fmt::format("job {} rejected: {}", out.id.value(), out.reason));
  }
  return Json{{"job", JobJson(out)}, {"simulated", opt_.simulated}};
}

Result<Json> Daemon::Impl::Cancel(const Caller& c, JobId id) {
  std::unique_lock lock(mu_);
  if (!failure_.ok()) return failure_;
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound(fmt::format("job {}: no such job", id.value()));
  JobRecord& j = it->second;
  GPUSLICE_RETURN_IF_ERROR(AuthorizeLocked(c, j));
  if (store::IsTerminal(j.state)) {
    return FailedPrecondition(fmt::format("job {}: already {}", id.value(),
                                          store::JobStateName(j.state)));
  }
  Micros now = Now();
  store::WriteBatch batch;
  Actions act;
  AddEvent(batch, id, "cancel",
           fmt::format("job {} cancelled by {}", id.value(), UserName(c.uid)));
  if (j.state == JobState::kStopping) {
    // Already being stopped: nothing more to decide.
  } else {
    Feed(sched::Cancel{now, id}, batch, act);
    if (j.state == JobState::kPending || j.state == JobState::kStarting) {
      // Pending in the scheduler (no slice) or chosen but not yet exec'd.
      const auto& views = sched_->jobs();
      auto v = views.find(id);
      if (v != views.end() && v->second.state == sched::JobState::kEnded &&
          j.state == JobState::kPending) {
        j.state = JobState::kCancelled;
        j.end_time = now;
        j.reason = "cancelled before it started";
        batch.jobs.push_back(j);
      }
    }
  }
  GPUSLICE_RETURN_IF_ERROR(CommitAndAct(batch, act));
  LaunchReady();
  return Json{{"job", JobJson(jobs_.at(id))}, {"simulated", opt_.simulated}};
}

// POST /v1/jobs/ID/activity (activity.h): who may, as for Cancel; what is fed, ActivityDesk.
Result<Json> Daemon::Impl::ReportActivity(const Caller& c, JobId id, const Json& body) {
  std::unique_lock lock(mu_);
  if (!failure_.ok()) return failure_;
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound(fmt::format("job {}: no such job", id.value()));
  const JobRecord& j = it->second;
  GPUSLICE_RETURN_IF_ERROR(AuthorizeLocked(c, j));
  if (store::IsTerminal(j.state)) {
    return FailedPrecondition(fmt::format("job {}: already {}; activity is reported for a running job",
                                          id.value(), store::JobStateName(j.state)));
  }
  const Micros now = Now();
  GPUSLICE_ASSIGN_OR_RETURN(sched::ActivityReport ev, ParseActivityReport(body, id, now));
  auto v = sched_->slices().find(j.slice);
  const sched::QueueConfig* queue = QueueOf(id);
  if (j.state == JobState::kPending || v == sched_->slices().end() || v->second.job != id || !queue) {
    return FailedPrecondition(fmt::format("job {}: {}, not running; activity is reported for a running job",
                                          id.value(), store::JobStateName(j.state)));
  }
  GPUSLICE_RETURN_IF_ERROR(activity_.Admit(id, now));
  activity_.Remember(ev);
  if (activity_.Due(v->second, queue->idle, ev, ActivityQuantum(queue->idle))) {
    store::WriteBatch batch;
    Actions act;
    Feed(ev, batch, act);
    GPUSLICE_RETURN_IF_ERROR(CommitAndAct(batch, act));
    LaunchReady();
  }
  std::set<JobId> running;
  for (const auto& [sid, sv] : sched_->slices()) running.insert(sv.job);
  activity_.Prune(running);
  Json job = JobJson(jobs_.at(id));
  Json report = job["activity_report"];
  return Json{{"job", std::move(job)}, {"activity_report", std::move(report)}, {"simulated", opt_.simulated}};
}

std::optional<Result<Json>> Daemon::Impl::Deduplicate(const JobRecord& j) const {
  if (j.idempotency_key.empty()) return std::nullopt;
  auto k = submit_keys_.find({j.uid, j.idempotency_key});
  if (k == submit_keys_.end()) return std::nullopt;
  auto it = jobs_.find(k->second);
  if (it == jobs_.end()) return std::nullopt;
  const JobRecord& prev = it->second;
  // The same request again (a retry after a lost answer): what was asked must match; argv is
  // compared only while the earlier job keeps all of it (an ended job keeps its head).
  const bool same = prev.queue == j.queue && prev.kind == j.kind && prev.gpus == j.gpus && prev.milli == j.milli &&
                    prev.memory == j.memory && prev.time_limit == j.time_limit && prev.model == j.model &&
                    prev.cwd == j.cwd && (prev.argv_dropped > 0 || prev.argv == j.argv);
  if (!same) {
    return Result<Json>(FailedPrecondition(fmt::format(
        "field 'idempotency_key': '{}' was already used for job {} with a different request; a retry must "
        "send the same request, a new job a new key", j.idempotency_key, prev.id.value())));
  }
  return Result<Json>(Json{{"job", JobJson(prev)}, {"deduplicated", true}, {"simulated", opt_.simulated}});
}

Result<std::string> Daemon::Impl::TeamOfSubmit(const sched::TeamsConfig& tc, const std::optional<std::string>& named,
                                                const Caller& c, const std::string& user) {
  auto member_by_group = [&](const sched::TeamConfig& t) {
    return std::any_of(t.groups.begin(), t.groups.end(), [&](const std::string& g) { return InGroup(c.uid, c.gid, g); });
  };
  if (named) {
    if (!tc.enabled()) return InvalidArgument(fmt::format("field 'team': value '{}': this site has no teams", api::ShownText(*named)));
    const sched::TeamConfig* t = tc.Find(*named);
    if (t == nullptr) {
      std::string names;
      for (const auto& x : tc.teams) names += (names.empty() ? "" : ", ") + x.name;
      return InvalidArgument(fmt::format("field 'team': value '{}' is not a team (have: {})", api::ShownText(*named), names));
    }
    if (!t->HasUser(user) && !member_by_group(*t))
      return PermissionDenied(fmt::format("field 'team': value '{}': {} is not one of its members", api::ShownText(*named), user));
    return t->name;
  }
  if (!tc.enabled()) return std::string();
  if (const sched::TeamConfig* t = tc.DefaultFor(user)) return t->name;
  for (const sched::TeamConfig& t : tc.teams)
    if (member_by_group(t)) return t.name;
  return std::string();
}

Status Daemon::Impl::ParseRequest(const api::SubmitRequest& req, JobRecord* j) const {
  if (req.idempotency_key) j->idempotency_key = *req.idempotency_key;
  if (req.umask) j->umask = *req.umask;
  j->queue = req.queue ? *req.queue : config_.default_queue;
  const sched::QueueConfig* queue = config_.FindQueue(j->queue);
  if (queue == nullptr) {
    std::string names;
    for (const auto& qc : config_.queues) names += (names.empty() ? "" : ", ") + qc.name;
    return InvalidArgument(fmt::format("field 'queue': value '{}' is not a queue (have: {})",
                                       j->queue, names));
  }
  if (const auto& k = req.kind) {
    auto kind = sched::ParseSliceKind(*k);
    if (!kind.ok()) return InvalidArgument(fmt::format("field 'kind': value '{}': {}", *k, kind.status().message()));
    if (!queue->Allows(*kind)) {
      return InvalidArgument(fmt::format("field 'kind': value '{}' is not allowed in queue '{}'",
                                         *k, queue->name));
    }
    j->kind = *kind;
  }
  if (req.gpus) j->gpus = *req.gpus;
  if (const auto& frac = req.fraction) {
    auto m = ParseGpuAmount(*frac);
    if (!m.ok()) return InvalidArgument(fmt::format("field 'fraction': value '{}': {}", *frac, m.status().message()));
    if (*m > kOneGpu) {
      return InvalidArgument(fmt::format(
          "field 'fraction': value '{}' is more than one GPU (use gpus=N for whole devices)",
          *frac));
    }
    if (j->gpus > 0) {
      return InvalidArgument("field 'fraction': give either 'gpus' or 'fraction', not both");
    }
    j->milli = *m;
  }
  if (const auto& mem = req.mem) {
    auto b = ParseJobMemory(*mem);
    if (!b.ok()) return InvalidArgument(fmt::format("field 'mem': {}", b.status().message()));
    j->memory = *b;
  }
  if (const auto& t = req.time) {
    auto d = ParseTimeLimit(*t);
    if (!d.ok()) return InvalidArgument(fmt::format("field 'time': {}", d.status().message()));
    Micros limit = queue->EffectiveLimit(0);
    if (limit > 0 && *d > limit) {
      return InvalidArgument(fmt::format("field 'time': value '{}' is longer than queue '{}' "
                                         "allows ({})", *t, queue->name, FormatDuration(limit)));
    }
    j->time_limit = *d;
  }
  if (const auto& m = req.model) {
    auto model = FindModel(*m);
    if (!model.ok()) return InvalidArgument(fmt::format("field 'model': value '{}': {}", *m, model.status().message()));
    j->model = (*model)->name;
  }
  j->argv = req.argv;
  if (req.cwd) j->cwd = *req.cwd;
  j->env = req.env;
  return Status::Ok();
}

sched::JobRequest Daemon::Impl::Request(const JobRecord& j) {
  sched::JobRequest r;
  r.kind = j.kind;
  r.gpus = j.gpus;
  r.milli = j.milli;
  r.memory = j.memory;
  r.time_limit = j.time_limit;
  r.model = j.model;
  return r;
}

}  // namespace gpuslice::daemon
