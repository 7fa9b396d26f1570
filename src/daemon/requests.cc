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

// Caps on a submitted command (docs/security.md, "Input limits"). Linux execve(2) refuses a single
// string over MAX_ARG_STRLEN (128 KiB) and, with the default 8 MiB stack, more than 2 MiB of
// argv + environment; these stay below both so that an accepted job can always start.
constexpr std::size_t kMaxArgvCount = 4096;
constexpr std::size_t kMaxEnvCount = 4096;
constexpr std::size_t kMaxArgBytes = 128 * 1024;        // one argv element or NAME=value
constexpr std::size_t kMaxCommandBytes = 1024 * 1024;   // argv + env, every string with its NUL
constexpr std::size_t kMaxPathBytes = 4095;             // PATH_MAX less the NUL

constexpr std::size_t kMaxTextField = 256;            // queue, kind, fraction, mem, time, model
constexpr std::size_t kMaxIdempotencyKey = 128;

// Reads one field of a JSON body as text: strings as given, numbers formatted. An array, an
// object or a string longer than kMaxTextField is refused here, naming the field and never
// echoing the value (errors downstream quote it).
Result<std::optional<std::string>> TextField(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) {
    const std::string& v = it->get_ref<const std::string&>();
    if (v.size() > kMaxTextField) {
      return InvalidArgument(fmt::format("field '{}': {} bytes, at most {} are accepted", name, v.size(),
                                         kMaxTextField));
    }
    return std::optional<std::string>(v);
  }
  if (it->is_number_integer()) return std::optional<std::string>(it->dump());
  if (it->is_number()) return std::optional<std::string>(fmt::format("{}", it->get<double>()));
  return InvalidArgument(fmt::format("field '{}': {} is not a text value", name, api::ShownJson(*it)));
}

// A text field that may appear under either of two names (the API's aliases).
Result<std::optional<std::string>> TextField(const Json& body, const char* name, const char* alias) {
  GPUSLICE_ASSIGN_OR_RETURN(auto v, TextField(body, name));
  if (v) return v;
  return TextField(body, alias);
}

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
  JobRecord j;
  GPUSLICE_RETURN_IF_ERROR(ParseRequest(body, &j));
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
  GPUSLICE_ASSIGN_OR_RETURN(const std::string team, TeamOfSubmit(teams, body, c, j.user));

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

Result<std::string> Daemon::Impl::TeamOfSubmit(const sched::TeamsConfig& tc, const Json& body, const Caller& c,
                                                const std::string& user) {
  GPUSLICE_ASSIGN_OR_RETURN(auto named, TextField(body, "team"));
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

// Parses the submit body into `j`; changes nothing else.
Status Daemon::Impl::ParseRequest(const Json& body, JobRecord* j) const {
  static const std::set<std::string> kKnown = {"queue", "kind", "gpus", "fraction", "gpu",
                                               "mem", "memory", "time", "time_limit", "model",
                                               "argv", "cwd", "env", "idempotency_key", "umask", "team"};
  for (const auto& [k, v] : body.items()) {
    if (!kKnown.contains(k)) {
      return InvalidArgument(fmt::format("field '{}': unknown (expected one of queue, kind, "
                                         "gpus, fraction, mem, time, model, argv, cwd, env, "
                                         "idempotency_key, umask, team)", api::ShownText(k)));
    }
  }
  if (auto k = body.find("idempotency_key"); k != body.end() && !k->is_null()) {
    const bool ok = k->is_string() && !k->get_ref<const std::string&>().empty() &&
                    k->get_ref<const std::string&>().size() <= kMaxIdempotencyKey &&
                    std::all_of(k->get_ref<const std::string&>().begin(), k->get_ref<const std::string&>().end(),
                                [](char c) {
                                  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                                         c == '-' || c == '_' || c == '.' || c == ':';
                                });
    if (!ok) {
      return InvalidArgument(fmt::format("field 'idempotency_key': value '{}' must be 1 to {} characters of "
                                         "[A-Za-z0-9._:-]", api::ShownJson(*k), kMaxIdempotencyKey));
    }
    j->idempotency_key = k->get<std::string>();
  }
  if (auto m = body.find("umask"); m != body.end() && !m->is_null()) {
    // Octal text, as the shell's umask prints it: "0022", "027", "77".
    const bool ok = m->is_string() && !m->get_ref<const std::string&>().empty() &&
                    m->get_ref<const std::string&>().size() <= 4 &&
                    std::all_of(m->get_ref<const std::string&>().begin(), m->get_ref<const std::string&>().end(),
                                [](char c) { return c >= '0' && c <= '7'; });
    const int mask = ok ? std::stoi(m->get<std::string>(), nullptr, 8) : -1;
    if (!ok || mask > 0777) {
      return InvalidArgument(fmt::format("field 'umask': value '{}' must be octal text 0000..0777, as the "
                                         "shell's umask prints it", api::ShownJson(*m)));
    }
    j->umask = mask;
  }
  GPUSLICE_ASSIGN_OR_RETURN(auto q, TextField(body, "queue"));
  j->queue = q ? *q : config_.default_queue;
  const sched::QueueConfig* queue = config_.FindQueue(j->queue);
  if (queue == nullptr) {
    std::string names;
    for (const auto& qc : config_.queues) names += (names.empty() ? "" : ", ") + qc.name;
    return InvalidArgument(fmt::format("field 'queue': value '{}' is not a queue (have: {})",
                                       j->queue, names));
  }
  GPUSLICE_ASSIGN_OR_RETURN(auto kind_text, TextField(body, "kind"));
  if (auto& k = kind_text) {
    auto kind = sched::ParseSliceKind(*k);
    if (!kind.ok()) return InvalidArgument(fmt::format("field 'kind': value '{}': {}", *k, kind.status().message()));
    if (!queue->Allows(*kind)) {
      return InvalidArgument(fmt::format("field 'kind': value '{}' is not allowed in queue '{}'",
                                         *k, queue->name));
    }
    j->kind = *k;
  }
  if (body.contains("gpus") && !body["gpus"].is_null()) {
    if (!body["gpus"].is_number_integer() || body["gpus"].get<std::int64_t>() < 1 ||
        body["gpus"].get<std::int64_t>() > 1024) {
      return InvalidArgument(fmt::format("field 'gpus': value '{}' must be an integer 1..1024",
                                         api::ShownJson(body["gpus"])));
    }
    j->gpus = body["gpus"].get<int>();
  }
  GPUSLICE_ASSIGN_OR_RETURN(auto frac, TextField(body, "fraction", "gpu"));
  if (frac) {
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
  GPUSLICE_ASSIGN_OR_RETURN(auto mem, TextField(body, "mem", "memory"));
  if (mem) {
    auto b = ParseJobMemory(*mem);
    if (!b.ok()) return InvalidArgument(fmt::format("field 'mem': {}", b.status().message()));
    j->memory = *b;
  }
  GPUSLICE_ASSIGN_OR_RETURN(auto t, TextField(body, "time", "time_limit"));
  if (t) {
    auto d = ParseTimeLimit(*t);
    if (!d.ok()) return InvalidArgument(fmt::format("field 'time': {}", d.status().message()));
    Micros limit = queue->EffectiveLimit(0);
    if (limit > 0 && *d > limit) {
      return InvalidArgument(fmt::format("field 'time': value '{}' is longer than queue '{}' "
                                         "allows ({})", *t, queue->name, FormatDuration(limit)));
    }
    j->time_limit = *d;
  }
  GPUSLICE_ASSIGN_OR_RETURN(auto model_text, TextField(body, "model"));
  if (auto& m = model_text) {
    auto model = FindModel(*m);
    if (!model.ok()) return InvalidArgument(fmt::format("field 'model': value '{}': {}", *m, model.status().message()));
    j->model = (*model)->name;
  }
  return ParseCommand(body, j);
}

// argv, cwd and env are byte strings (store::BytesFromJson: a JSON string, or {"b64": ...}
// for bytes that are not UTF-8): the job gets exactly these bytes. Sizes are capped here,
// below what execve(2) accepts, so an oversized request is refused at submit, naming the
// field, instead of failing at start or filling the store.
Status Daemon::Impl::ParseCommand(const Json& body, JobRecord* j) {
  std::size_t total = 0;  // bytes execve copies: every string with its NUL
  const auto argv = body.find("argv");
  if (argv == body.end() || !argv->is_array() || argv->empty()) {
    return InvalidArgument("field 'argv': a non-empty list of strings is required (the command)");
  }
  if (argv->size() > kMaxArgvCount) {
    return InvalidArgument(fmt::format("field 'argv': {} elements, at most {} are allowed",
                                       argv->size(), kMaxArgvCount));
  }
  for (std::size_t i = 0; i < argv->size(); ++i) {
    auto a = store::BytesFromJson((*argv)[i], fmt::format("field 'argv': element {}", i));
    if (!a.ok()) return a.status();
    if (a->find('\0') != std::string::npos) {
      return InvalidArgument(fmt::format("field 'argv': element {} ('{}') holds a NUL byte", i,
                                         api::ShownText(*a)));
    }
    if (a->size() > kMaxArgBytes) {
      return InvalidArgument(fmt::format("field 'argv': element {} is {} bytes, at most {} are allowed", i,
                                         a->size(), kMaxArgBytes));
    }
    total += a->size() + 1;
    j->argv.push_back(*std::move(a));
  }
  if (j->argv[0].empty()) return InvalidArgument("field 'argv': the program name is empty");
  if (const auto c = body.find("cwd"); c != body.end() && !c->is_null()) {
    auto cwd = store::BytesFromJson(*c, "field 'cwd'");
    if (!cwd.ok()) return cwd.status();
    if (cwd->empty() || (*cwd)[0] != '/' || cwd->find('\0') != std::string::npos ||
        cwd->size() > kMaxPathBytes) {
      return InvalidArgument(fmt::format("field 'cwd': value '{}' must be an absolute path without NUL "
                                         "bytes, at most {} bytes", api::ShownText(*cwd), kMaxPathBytes));
    }
    j->cwd = *std::move(cwd);
  }
  if (const auto e = body.find("env"); e != body.end() && !e->is_null()) {
    // An object {NAME: value} when every name is UTF-8; else a list of [name, value].
    if (!e->is_object() && !e->is_array()) {
      return InvalidArgument("field 'env': expected an object of strings or a list of [name, value]");
    }
    if (e->size() > kMaxEnvCount) {
      return InvalidArgument(fmt::format("field 'env': {} entries, at most {} are allowed", e->size(),
                                         kMaxEnvCount));
    }
    std::vector<std::pair<std::string, std::string>> env;
    if (e->is_object()) {
      for (const auto& [k, v] : e->items()) {
        auto value = store::BytesFromJson(v, fmt::format("field 'env': entry '{}'", api::ShownText(k)));
        if (!value.ok()) return value.status();
        env.emplace_back(k, *std::move(value));
      }
    } else {
      for (std::size_t i = 0; i < e->size(); ++i) {
        const Json& kv = (*e)[i];
        if (!kv.is_array() || kv.size() != 2) {
          return InvalidArgument(fmt::format("field 'env': element {} is not [name, value]", i));
        }
        auto k = store::BytesFromJson(kv[0], fmt::format("field 'env': element {} name", i));
        if (!k.ok()) return k.status();
        auto v = store::BytesFromJson(kv[1], fmt::format("field 'env': element {} value", i));
        if (!v.ok()) return v.status();
        env.emplace_back(*std::move(k), *std::move(v));
      }
    }
    for (auto& [k, v] : env) {
      if (k.empty() || k.find_first_of(std::string_view("=\0", 2)) != std::string::npos ||
          v.find('\0') != std::string::npos) {
        return InvalidArgument(fmt::format("field 'env': entry '{}' is not NAME: \"value\" (a name without "
                                           "'=' and NUL, a value without NUL)", api::ShownText(k)));
      }
      if (k.size() + 1 + v.size() > kMaxArgBytes) {
        return InvalidArgument(fmt::format("field 'env': entry '{}' is {} bytes, at most {} are allowed",
                                           api::ShownText(k), k.size() + 1 + v.size(), kMaxArgBytes));
      }
      total += k.size() + v.size() + 2;
      j->env.emplace_back(std::move(k), std::move(v));
    }
  }
  if (total > kMaxCommandBytes) {
    return InvalidArgument(fmt::format("fields 'argv' and 'env': {} bytes together, at most {} are allowed",
                                       total, kMaxCommandBytes));
  }
  return Status::Ok();
}

sched::JobRequest Daemon::Impl::Request(const JobRecord& j) {
  sched::JobRequest r;
  if (!j.kind.empty()) r.kind = sched::ParseSliceKind(j.kind).value();
  r.gpus = j.gpus;
  r.milli = j.milli;
  r.memory = j.memory;
  r.time_limit = j.time_limit;
  r.model = j.model;
  return r;
}

}  // namespace gpuslice::daemon
