#include "daemon/daemon.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/text.h"
#include "agent/agent.h"
#include "daemon/journal.h"
#include "exec/proc.h"
#include "memcap/env.h"
#include "report/report.h"
#include "store/codec.h"
#include "store/retention.h"

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
using store::JobRecord;
using store::JobState;
using store::SliceRecord;

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// NVML compute-instance profile that uses all `compute_slices` of its GPU instance.
int FullCiProfile(int compute_slices) {
  switch (compute_slices) {
    case 1: return 0;
    case 2: return 1;
    case 3: return 2;
    case 4: return 3;
    case 7: return 4;
    case 8: return 5;
    case 6: return 6;
    default: return 0;
  }
}

bool InGroup(std::int64_t uid, std::int64_t gid, const std::string& group) {
  if (group.empty()) return false;
  struct group* g = getgrnam(group.c_str());
  if (g == nullptr) return false;
  if (static_cast<std::int64_t>(g->gr_gid) == gid) return true;
  struct passwd* pw = getpwuid(static_cast<uid_t>(uid));
  if (pw == nullptr) return false;
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (getgrouplist(pw->pw_name, static_cast<gid_t>(gid), groups.data(), &n) < 0) {
    groups.resize(static_cast<size_t>(n));
    getgrouplist(pw->pw_name, static_cast<gid_t>(gid), groups.data(), &n);
  }
  groups.resize(static_cast<size_t>(n));
  return std::find(groups.begin(), groups.end(), g->gr_gid) != groups.end();
}

JobState FinalStateFor(const sched::Stop& s) {
  switch (s.reason) {
    case sched::StopReason::kTimeLimit: return JobState::kTimedOut;
    case sched::StopReason::kCancelled: return JobState::kCancelled;
    case sched::StopReason::kDeviceLost: return JobState::kFailed;
  }
  return JobState::kFailed;
}

// Reads one field of a JSON body as text: strings as given, numbers formatted.
std::optional<std::string> TextField(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_integer()) return std::to_string(it->get<std::int64_t>());
  if (it->is_number()) return fmt::format("{}", it->get<double>());
  return it->dump();
}

}  // namespace

std::string UserName(std::int64_t uid) {
  if (uid < 0) return "unknown";
  struct passwd pw{};
  struct passwd* out = nullptr;
  char buf[4096];
  if (getpwuid_r(static_cast<uid_t>(uid), &pw, buf, sizeof(buf), &out) == 0 && out) {
    return out->pw_name;
  }
  return fmt::format("uid:{}", uid);
}

// ---------------------------------------------------------------------------------------------

class Daemon::Impl {
 public:
  Impl(sched::Config config, DaemonOptions options, std::unique_ptr<store::Store> store,
       std::unique_ptr<devices::DeviceBackend> backend, std::unique_ptr<exec::Launcher> launcher,
       WallClock clock)
      : config_(std::move(config)),
        opt_(std::move(options)),
        store_(std::move(store)),
        backend_(std::move(backend)),
        launcher_(std::move(launcher)),
        clock_(std::move(clock)) {
    agent::AgentOptions ao;
    ao.interval = opt_.sample_interval;
    ao.downsample_bucket = opt_.downsample_window;
    ao.hostname = Hostname();
    // The daemon samples on its own step (under its lock, on its clock), not on the agent's
    // thread: one round per sample interval, in order with the scheduler's events.
    agent_ = std::make_unique<agent::Agent>(*backend_, ao, clock_);
  }

  static std::string Hostname() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
    return buf;
  }

  // ---- processes we are responsible for
  struct Proc {
    exec::ProcessHandle handle;
    SliceId slice;
    std::vector<int> devices;
    bool stopping = false;          // scheduler said stop/reclaim/preempt: final_state follows
    bool cleanup = false;           // leader exited by itself; ending the rest of its group
    JobState final_state = JobState::kSucceeded;
    std::string final_reason;
    std::optional<exec::ExitInfo> leader_exit;
    Micros term_sent = 0;           // 0: no SIGTERM yet
    bool killed = false;
  };

  // Side effects to perform after the batch that decided them is durable.
  struct Actions {
    std::vector<JobId> terminate;                          // SIGTERM the group
    std::vector<std::pair<JobId, std::string>> log_lines;  // appended to the job's log
    std::vector<sched::ReconfigureMig> reconfigure;
    std::vector<JobId> forget_status;  // ended jobs: their status file has served
  };

  Status Start() {
    std::unique_lock lock(mu_);
    Micros now = Now();
    GPUSLICE_RETURN_IF_ERROR(InitSeed());
    sched_ = std::make_unique<sched::Scheduler>(config_, seed_);
    // Job logs are private (0700 directory, 0600 files); the API's logs endpoint, which checks
    // the caller, is the way to read them.
    fs::create_directories(fs::path(opt_.state_dir) / "logs");
    fs::permissions(fs::path(opt_.state_dir) / "logs", fs::perms::owner_all);
    GPUSLICE_RETURN_IF_ERROR(MakeStatusDir());

    // 1. Rebuild the scheduler exactly as it was.
    GPUSLICE_ASSIGN_OR_RETURN(auto journal, store_->ReadJournal());
    JournalCompactor compactor;
    for (const std::string& entry : journal) {
      GPUSLICE_ASSIGN_OR_RETURN(sched::Event e, DecodeEvent(entry));
      compactor.Observe(e, sched_->Handle(e), *sched_);
    }
    journal_entries_ = journal.size();
    if (CompactionDue()) CompactJournal(journal, compactor, *sched_);
    GPUSLICE_ASSIGN_OR_RETURN(auto jobs, store_->ListJobs());
    for (auto& j : jobs) {
      next_job_ = std::max(next_job_, j.id.value() + 1);
      jobs_[j.id] = std::move(j);
    }
    GPUSLICE_ASSIGN_OR_RETURN(auto slices, store_->ListSlices(true));
    for (auto& s : slices) slices_[s.id] = std::move(s);
    spdlog::info("recovered {} journal entries, {} jobs, {} active slices", journal.size(),
                 jobs_.size(), slices_.size());

    store::WriteBatch batch;
    Actions act;
    // 2. Devices: the backend's list is the truth. Those the scheduler knows that are gone (or
    // replaced by another device at their index) are removed first, so nothing is placed on
    // them; then the new ones are added.
    GPUSLICE_ASSIGN_OR_RETURN(auto devs, backend_->ListDevices());
    RemoveVanishedDevices(now, devs, batch, act);
    std::set<std::string> known;
    for (const auto& [ref, d] : sched_->devices()) known.insert(d.uuid);
    for (const auto& d : devs) {
      device_info_[static_cast<int>(d.index.value())] = d;
      if (known.contains(d.uuid)) continue;
      sched::DeviceAdded ev;
      ev.now = now;
      ev.device = {opt_.node, d.index};
      ev.uuid = d.uuid;
      ev.model = d.model ? d.model->name : d.name;
      ev.mig_capable = d.model && d.model->supports_mig() && d.mig_current != devices::MigMode::kUnsupported;
      ev.mig_enabled = d.mig_current == devices::MigMode::kEnabled;
      for (const auto& gi : d.gpu_instances) ev.mig_layout.push_back({gi.profile_id, gi.start});
      Feed(ev, batch, act);
    }

    // 3. Reconcile the jobs with the processes that are (or are not) there.
    for (auto& [id, j] : jobs_) {
      switch (j.state) {
        case JobState::kStarting:
          to_launch_.insert(id);  // never exec'd: the pid was not stored
          break;
        case JobState::kRunning:
        case JobState::kStopping: {
          exec::ProcessHandle h{j.pid, j.pid_start_ticks, true, StatusPath(id)};
          Proc p;
          p.handle = h;
          p.slice = j.slice;
          if (auto s = slices_.find(j.slice); s != slices_.end()) p.devices = s->second.devices;
          if (j.state == JobState::kStopping) {
            p.stopping = true;
            p.final_state = StoppingFinal(j);
            p.final_reason = j.reason;
          }
          if (j.pid > 0 && launcher_->StillAlive(h)) {
            if (p.stopping) act.terminate.push_back(id);
            procs_[id] = std::move(p);
            BindSlice(id);
            AddEvent(batch, id, "adopt", fmt::format("job {} re-adopted after restart (pid {})",
                                                     id.value(), j.pid));
          } else {
            // Ended while the daemon was down: its stub recorded how (or, killed, nothing).
            std::optional<exec::ExitInfo> e;
            if (j.pid > 0) e = launcher_->Poll(h);
            p.leader_exit = e.value_or(exec::ExitInfo{});
            EndJob(id, std::move(p), now, batch, act);
          }
          break;
        }
        default:
          break;
      }
    }
    // 4. Slices the store still holds for ended jobs (crash between decisions): free them.
    for (auto& [sid, s] : slices_) {
      auto j = jobs_.find(s.job);
      if (s.active && (j == jobs_.end() || store::IsTerminal(j->second.state))) {
        s.active = false;
        s.released = now;
        batch.slices.push_back(s);
      }
    }
    GPUSLICE_RETURN_IF_ERROR(CommitAndAct(batch, act));
    ForgetStaleStatusFiles();
    LaunchReady();
    if (opt_.store_retention) {
      retention_ = std::make_unique<store::RetentionWorker>(*store_, store::RetentionPolicy{}, clock_);
      retention_->Start();
    }
    return Status::Ok();
  }

  void Step() {
    std::unique_lock lock(mu_);
    Micros now = Now();
    store::WriteBatch batch;
    Actions act;
    EnforceLogCaps(batch);  // before Reap: a job that just ended has written all its output
    Reap(now, batch, act);
    if (now - last_sample_ >= opt_.sample_interval) {
      last_sample_ = now;
      SampleDevices(now, batch, act);
    }
    Feed(sched::Tick{now}, batch, act);
    RecordWaitReasons(batch);
    (void)CommitAndAct(batch, act);
    LaunchReady();
    if (CompactionDue()) CompactWhileRunning();
  }

  // A "wait" event each time a pending job's reason changes kind ("<kind>: <text>"), so the
  // report can count wait time by reason (report/report.h).
  void RecordWaitReasons(store::WriteBatch& b) {
    std::map<JobId, std::string> now_kind;
    for (JobId id : sched_->Pending()) {
      auto w = sched_->PendingReason(id);
      if (!w) continue;
      std::string kind(sched::WaitReasonKind(*w));
      auto it = wait_kind_.find(id);
      if (it == wait_kind_.end() || it->second != kind) {
        AddEvent(b, id, "wait", fmt::format("{}: {}", kind, sched::FormatWaitReason(*w)));
      }
      now_kind[id] = std::move(kind);
    }
    wait_kind_ = std::move(now_kind);
  }

  Result<Json> Report(const std::map<std::string, std::string>& query) const {
    GPUSLICE_ASSIGN_OR_RETURN(report::ReportOptions o, report::OptionsFromQuery(query, Now()));
    {
      std::shared_lock lock(mu_);
      o.devices = static_cast<int>(device_info_.size());
    }
    o.simulated = opt_.simulated;
    // Outside the daemon's lock: the store is thread-safe, and the report reads only it.
    return report::BuildReport(*store_, o);
  }

  // ---------------------------------------------------------------------------- API
  Result<Json> Submit(const Caller& c, const Json& body) {
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

    std::unique_lock lock(mu_);
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
    sched::Submit ev{now, j.id, j.user, j.queue, Request(j)};
    Feed(ev, batch, act);
    // One commit for "accepted" and "started": the first launch's pid commit carries this
    // batch (its process may exec only after that commit), so a submission that starts at
    // once costs one durable write, not two.
    pending_ = &batch;
    LaunchReady();
    pending_ = nullptr;
    GPUSLICE_RETURN_IF_ERROR(CommitAndAct(batch, act));
    const JobRecord& out = jobs_.at(j.id);
    if (out.state == JobState::kRejected) {
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("job {} rejected: {}", out.id.value(), out.reason));
    }
    return Json{{"job", JobJson(out)}, {"simulated", opt_.simulated}};
  }

  Result<Json> ListJobs(const std::map<std::string, std::string>& q) const {
    std::shared_lock lock(mu_);
    Json arr = Json::array();
    std::optional<JobState> state;
    bool active_only = false;
    if (auto it = q.find("state"); it != q.end() && !it->second.empty()) {
      if (it->second == "active") {
        active_only = true;
      } else {
        auto s = store::ParseJobState(it->second);
        if (!s.ok()) return InvalidArgument("query 'state': " + s.status().message());
        state = *s;
      }
    }
    std::string user = q.contains("user") ? q.at("user") : "";
    std::string queue = q.contains("queue") ? q.at("queue") : "";
    for (const auto& [id, j] : jobs_) {
      if (state && j.state != *state) continue;
      if (active_only && store::IsTerminal(j.state)) continue;
      if (!user.empty() && j.user != user) continue;
      if (!queue.empty() && j.queue != queue) continue;
      arr.push_back(JobJson(j));
    }
    return Json{{"jobs", arr}, {"simulated", opt_.simulated}};
  }

  Result<Json> GetJob(JobId id) const {
    std::shared_lock lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound(fmt::format("job {}: no such job", id.value()));
    Json out{{"job", JobJson(it->second)}, {"simulated", opt_.simulated}};
    out["slice"] = nullptr;
    if (auto s = slices_.find(it->second.slice); s != slices_.end()) {
      out["slice"] = SliceJson(s->second);
    }
    return out;
  }

  Result<Json> Cancel(const Caller& c, JobId id) {
    std::unique_lock lock(mu_);
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

  Json Devices() const {
    std::shared_lock lock(mu_);
    Json arr = Json::array();
    for (const auto& [ref, d] : sched_->devices()) {
      Json o{{"index", ref.index.value()}, {"uuid", d.uuid}, {"model", d.model},
             {"memory", d.memory}, {"mode", sched::DeviceModeName(d.mode)},
             {"draining", d.draining}, {"used_milli", d.used_milli},
             {"reserved_for", d.reserved_for.valid() ? Json(d.reserved_for.value()) : Json()},
             {"used_memory", d.used_memory}, {"clients", d.clients}};
      Json sl = Json::array();
      for (SliceId s : d.slices) sl.push_back(s.value());
      o["slices"] = sl;
      Json layout = Json::array();
      for (const auto& p : d.layout) layout.push_back({{"profile", p.profile_id}, {"start", p.start}});
      o["mig_layout"] = layout;
      o["util_percent"] = nullptr;
      o["memory_used"] = nullptr;
      if (auto s = latest_.find(static_cast<int>(ref.index.value())); s != latest_.end()) {
        if (s->second.gpu_util.ok()) o["util_percent"] = s->second.gpu_util.value() / 10.0;
        if (s->second.memory_used.ok()) o["memory_used"] = s->second.memory_used.value();
      }
      arr.push_back(o);
    }
    Json out{{"devices", arr}, {"simulated", opt_.simulated},
             {"backend", std::string(backend_->kind())},
             {"backend_description", backend_->description()}};
    if (opt_.simulated) out["note"] = "SIMULATED devices (no NVIDIA driver)";
    return out;
  }

  Json Queues() const {
    std::shared_lock lock(mu_);
    Micros now = Now();
    Json arr = Json::array();
    for (const auto& q : config_.queues) {
      int pending = 0, running = 0;
      Micros oldest = 0;
      for (const auto& [id, j] : jobs_) {
        if (j.queue != q.name) continue;
        if (j.state == JobState::kPending) {
          ++pending;
          oldest = std::max(oldest, now - j.submit_time);
        } else if (!store::IsTerminal(j.state)) {
          ++running;
        }
      }
      Json kinds = Json::array();
      for (auto k : q.allowed_kinds) kinds.push_back(sched::SliceKindName(k));
      arr.push_back({{"name", q.name}, {"default_kind", sched::SliceKindName(q.default_kind)},
                     {"allowed_kinds", kinds}, {"priority", q.priority},
                     {"time_limit_us", q.time_limit}, {"max_duration_us", q.max_duration},
                     {"reserve_after_us", q.reserve_after},
                     {"idle_reclaim", q.idle.enabled && q.idle.action == sched::ReclaimAction::kReclaim},
                     {"idle_window_us", q.idle.window}, {"idle_grace_us", q.idle.grace},
                     {"pending", pending}, {"running", running},
                     {"oldest_wait_us", oldest}});
    }
    return Json{{"queues", arr}, {"default_queue", config_.default_queue},
                {"simulated", opt_.simulated}};
  }

  Json Slices() const {
    std::shared_lock lock(mu_);
    Micros now = Now();
    Json arr = Json::array();
    for (const auto& [id, s] : slices_) {
      if (!s.active) continue;
      Json o = SliceJson(s);
      o["util_percent"] = nullptr;
      o["memory_used"] = nullptr;
      o["idle_seconds"] = nullptr;
      o["activity"] = nullptr;        // active | idle | unmeasured (the last sample's verdict)
      o["activity_basis"] = nullptr;  // the signals that decided it, e.g. "sm,mem"
      if (auto u = slice_util_.find(id); u != slice_util_.end()) {
        if (u->second.sm_permille) o["util_percent"] = (*u->second.sm_permille + 5) / 10;
        if (u->second.memory_used) o["memory_used"] = *u->second.memory_used;
        o["activity"] = agent::ActivityLabel(u->second.verdict.activity);
        o["activity_basis"] = u->second.verdict.basis;
      }
      if (auto v = sched_->slices().find(id); v != sched_->slices().end()) {
        // Unmeasured: how long it has been idle is not known.
        if (!v->second.unmeasured) {
          o["idle_seconds"] = static_cast<double>(std::max<Micros>(0, now - LastActive(v->second))) / kSecond;
        }
        o["idle_state"] = v->second.idle == sched::IdleState::kWarned     ? "warned"
                          : v->second.idle == sched::IdleState::kReported ? "reported"
                          : v->second.unmeasured                           ? "unmeasured"
                                                                           : "active";
      } else {
        o["idle_state"] = "stopping";
      }
      if (auto j = jobs_.find(s.job); j != jobs_.end()) {
        o["user"] = j->second.user;
        o["queue"] = j->second.queue;
      }
      arr.push_back(o);
    }
    return Json{{"slices", arr}, {"simulated", opt_.simulated}};
  }

  Result<Json> Events(std::int64_t after, JobId job, int limit) const {
    GPUSLICE_ASSIGN_OR_RETURN(auto evs, store_->ListEvents(after, job, limit));
    Json arr = Json::array();
    for (const auto& e : evs) {
      arr.push_back({{"seq", e.seq}, {"time_us", e.time}, {"job", e.job.value()},
                     {"type", e.type}, {"message", e.message}});
    }
    return Json{{"events", arr}, {"simulated", opt_.simulated}};
  }

  std::string Metrics() const {
    std::shared_lock lock(mu_);
    Micros now = Now();
    std::string out;
    auto head = [&](const char* name, const char* type, const char* help) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    };
    out += fmt::format("# gpuslice daemon metrics{}\n",
                       opt_.simulated ? " -- SIMULATED devices (no NVIDIA driver)" : "");
    head("gpuslice_simulated", "gauge", "1 when the devices are simulated (no NVIDIA driver).");
    out += fmt::format("gpuslice_simulated {}\n", opt_.simulated ? 1 : 0);
    // Device and slice families come from the agent's exporter (dcgm-exporter names for
    // devices, gpuslice_slice_* for slices), the same text the Slurm agent serves.
    out += agent::RenderPrometheus(agent_->MetricsSnapshot());
    // Each family's samples follow its HELP/TYPE lines (the text format wants them grouped).
    struct QueueFigures {
      int pending = 0;
      double oldest_s = 0, mean_wait_s = 0;
    };
    std::vector<std::pair<std::string, QueueFigures>> queues;
    for (const auto& q : config_.queues) {
      int pending = 0, started = 0;
      Micros oldest = 0, waited = 0;
      for (const auto& [id, j] : jobs_) {
        if (j.queue != q.name) continue;
        if (j.state == JobState::kPending) {
          ++pending;
          oldest = std::max(oldest, now - j.submit_time);
        }
        if (j.start_time > 0) {
          ++started;
          waited += j.start_time - j.submit_time;
        }
      }
      queues.emplace_back(q.name, QueueFigures{pending, static_cast<double>(oldest) / kSecond,
                                               started ? static_cast<double>(waited) / started / kSecond : 0.0});
    }
    head("gpuslice_queue_pending_jobs", "gauge", "Jobs waiting for a slice.");
    for (const auto& [name, f] : queues) {
      out += fmt::format("gpuslice_queue_pending_jobs{{queue=\"{}\"}} {}\n", agent::EscapeLabel(name), f.pending);
    }
    head("gpuslice_queue_oldest_wait_seconds", "gauge", "Wait of the oldest pending job.");
    for (const auto& [name, f] : queues) {
      out += fmt::format("gpuslice_queue_oldest_wait_seconds{{queue=\"{}\"}} {:.3f}\n", agent::EscapeLabel(name),
                         f.oldest_s);
    }
    head("gpuslice_queue_mean_wait_seconds", "gauge", "Mean submit-to-start wait of started jobs.");
    for (const auto& [name, f] : queues) {
      out += fmt::format("gpuslice_queue_mean_wait_seconds{{queue=\"{}\"}} {:.3f}\n", agent::EscapeLabel(name),
                         f.mean_wait_s);
    }
    head("gpuslice_reclaimed_gpu_seconds_total", "counter",
         "GPU-seconds returned to the pool by idle reclaim: share x time from reclaim to the "
         "job's time limit (or to now when it had none).");
    double seconds = 0;
    for (const auto& [id, j] : jobs_) {
      if (j.state != JobState::kReclaimed) continue;
      auto s = all_slices_share_.find(j.id);
      double share = s != all_slices_share_.end() ? static_cast<double>(s->second) / kOneGpu : 0;
      // The share was returned for the rest of the job's time limit (documented above), not
      // only until now: reading it right after a reclaim must not show ~0.
      Micros until = j.deadline > 0 ? j.deadline : now;
      seconds += share * static_cast<double>(std::max<Micros>(0, until - j.end_time)) / kSecond;
    }
    out += fmt::format("gpuslice_reclaimed_gpu_seconds_total {:.3f}\n", seconds);
    head("gpuslice_jobs", "gauge", "Jobs by state.");
    std::map<std::string, int> by_state;
    for (const auto& [id, j] : jobs_) ++by_state[std::string(store::JobStateName(j.state))];
    for (const auto& [s, n] : by_state) out += fmt::format("gpuslice_jobs{{state=\"{}\"}} {}\n", s, n);
    return out;
  }

  Result<std::string> LogPath(JobId id) const {
    std::shared_lock lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound(fmt::format("job {}: no such job", id.value()));
    return it->second.log_path;
  }

  Status Authorize(const Caller& c, JobId id) const {
    std::shared_lock lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound(fmt::format("job {}: no such job", id.value()));
    return AuthorizeLocked(c, it->second);
  }

  Status AuthorizeLocked(const Caller& c, const JobRecord& j) const {
    if (c.uid == j.uid || c.uid == 0 || InGroup(c.uid, c.gid, config_.admin_group)) {
      return Status::Ok();
    }
    return PermissionDenied(fmt::format(
        "job {} belongs to {}; only its owner, root or a member of group '{}' may act on it",
        j.id.value(), j.user, config_.admin_group));
  }

  bool JobEnded(JobId id) const {
    std::shared_lock lock(mu_);
    auto it = jobs_.find(id);
    return it == jobs_.end() || store::IsTerminal(it->second.state);
  }

  Status CheckConsistency() const {
    std::shared_lock lock(mu_);
    GPUSLICE_RETURN_IF_ERROR(sched_->CheckInvariants());
    GPUSLICE_ASSIGN_OR_RETURN(auto stored, store_->ListSlices(true));
    std::set<SliceId> active;
    for (const auto& s : stored) {
      active.insert(s.id);
      auto j = jobs_.find(s.job);
      if (j == jobs_.end() || store::IsTerminal(j->second.state)) {
        return Internal(fmt::format("slice {} is active but job {} has ended", s.id.value(),
                                    s.job.value()));
      }
    }
    for (const auto& [sid, v] : sched_->slices()) {
      if (!active.contains(sid)) {
        return Internal(fmt::format("scheduler slice {} (job {}) is not active in the store",
                                    sid.value(), v.job.value()));
      }
    }
    for (const auto& [id, j] : jobs_) {
      if (store::IsTerminal(j.state) && procs_.contains(id)) {
        return Internal(fmt::format("job {} is {} but has processes", id.value(),
                                    store::JobStateName(j.state)));
      }
    }
    return Status::Ok();
  }

 private:
  Micros Now() const { return clock_(); }

  Status InitSeed() {
    GPUSLICE_ASSIGN_OR_RETURN(auto s, store_->GetMeta("scheduler_seed"));
    if (s) {
      seed_ = std::stoull(*s);
      return Status::Ok();
    }
    seed_ = std::random_device{}();
    return store_->PutMeta("scheduler_seed", std::to_string(seed_));
  }

  // ---- journal compaction (journal.h): restart time follows what can still matter, not
  // how long slices have been busy.
  bool CompactionDue() const {
    return opt_.compact_journal_at > 0 &&
           journal_entries_ >= std::max(opt_.compact_journal_at, 2 * compacted_size_);
  }

  // Replaces the stored journal by its compaction; `full` replayed all of `journal`. On any
  // error the full journal stays (and is not retried until it has doubled).
  void CompactJournal(const std::vector<std::string>& journal, const JournalCompactor& c,
                      const sched::Scheduler& full) {
    compacted_size_ = journal_entries_ = journal.size();
    auto kept = c.Compact(journal, config_, seed_, full);
    if (!kept.ok()) {
      spdlog::error("{}", kept.status().ToString());
      return;
    }
    if (kept->size() == journal.size()) return;
    Status st = store_->ReplaceJournal(*kept);
    if (!st.ok()) {
      spdlog::error("journal compaction: {}; keeping the full journal", st.ToString());
      return;
    }
    spdlog::info("journal compacted: {} -> {} entries", journal.size(), kept->size());
    compacted_size_ = journal_entries_ = kept->size();
  }

  // The same, while running: replays the stored journal into a fresh scheduler (it must agree
  // with the live one but for the clock, which unjournaled ticks move) and compacts.
  void CompactWhileRunning() {
    auto journal = store_->ReadJournal();
    if (!journal.ok()) {
      spdlog::error("journal compaction: {}", journal.status().ToString());
      compacted_size_ = journal_entries_;
      return;
    }
    sched::Scheduler fresh(config_, seed_);
    JournalCompactor compactor;
    for (const std::string& entry : *journal) {
      auto e = DecodeEvent(entry);
      if (!e.ok()) {
        spdlog::error("journal compaction: {}", e.status().ToString());
        compacted_size_ = journal_entries_;
        return;
      }
      compactor.Observe(*e, fresh.Handle(*e), fresh);
    }
    auto state = [](const sched::Scheduler& s) {
      std::string d = SchedulerDigest(s);
      return d.substr(d.find('\n') + 1);
    };
    if (state(fresh) != state(*sched_)) {
      spdlog::error("journal compaction: the stored journal does not replay to the live "
                    "scheduler state; not compacting");
      compacted_size_ = journal_entries_ = journal->size();
      return;
    }
    CompactJournal(*journal, compactor, fresh);
  }

  static JobState StoppingFinal(const JobRecord& j) {
    if (j.reason.rfind("idle", 0) == 0) return JobState::kReclaimed;
    if (j.reason.rfind("time limit", 0) == 0) return JobState::kTimedOut;
    if (j.reason.rfind("preempted", 0) == 0) return JobState::kPending;
    if (j.reason.rfind("cancelled", 0) == 0) return JobState::kCancelled;
    return JobState::kFailed;
  }

  // Parses the submit body into `j`; changes nothing else.
  Status ParseRequest(const Json& body, JobRecord* j) const {
    static const std::set<std::string> kKnown = {"queue", "kind", "gpus", "fraction", "gpu",
                                                 "mem", "memory", "time", "time_limit", "model",
                                                 "argv", "cwd", "env"};
    for (const auto& [k, v] : body.items()) {
      if (!kKnown.contains(k)) {
        return InvalidArgument(fmt::format("field '{}': unknown (expected one of queue, kind, "
                                           "gpus, fraction, mem, time, model, argv, cwd, env)", k));
      }
    }
    auto q = TextField(body, "queue");
    j->queue = q ? *q : config_.default_queue;
    const sched::QueueConfig* queue = config_.FindQueue(j->queue);
    if (queue == nullptr) {
      std::string names;
      for (const auto& qc : config_.queues) names += (names.empty() ? "" : ", ") + qc.name;
      return InvalidArgument(fmt::format("field 'queue': value '{}' is not a queue (have: {})",
                                         j->queue, names));
    }
    if (auto k = TextField(body, "kind")) {
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
                                           body["gpus"].dump()));
      }
      j->gpus = body["gpus"].get<int>();
    }
    auto frac = TextField(body, "fraction");
    if (!frac) frac = TextField(body, "gpu");
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
    auto mem = TextField(body, "mem");
    if (!mem) mem = TextField(body, "memory");
    if (mem) {
      auto b = ParseJobMemory(*mem);
      if (!b.ok()) return InvalidArgument(fmt::format("field 'mem': {}", b.status().message()));
      j->memory = *b;
    }
    auto t = TextField(body, "time");
    if (!t) t = TextField(body, "time_limit");
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
    if (auto m = TextField(body, "model")) {
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
  static Status ParseCommand(const Json& body, JobRecord* j) {
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
                                           EscapeInvalidUtf8(*a)));
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
                                           "bytes, at most {} bytes", EscapeInvalidUtf8(*cwd), kMaxPathBytes));
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
          auto value = store::BytesFromJson(v, fmt::format("field 'env': entry '{}'", k));
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
                                             "'=' and NUL, a value without NUL)", EscapeInvalidUtf8(k)));
        }
        if (k.size() + 1 + v.size() > kMaxArgBytes) {
          return InvalidArgument(fmt::format("field 'env': entry '{}' is {} bytes, at most {} are allowed",
                                             EscapeInvalidUtf8(k), k.size() + 1 + v.size(), kMaxArgBytes));
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

  static sched::JobRequest Request(const JobRecord& j) {
    sched::JobRequest r;
    if (!j.kind.empty()) r.kind = sched::ParseSliceKind(j.kind).value();
    r.gpus = j.gpus;
    r.milli = j.milli;
    r.memory = j.memory;
    r.time_limit = j.time_limit;
    r.model = j.model;
    return r;
  }

  // A job as the API shows it to anybody: never its environment (tokens, keys: only the job
  // gets it), and only what holds now: an ended job has no standing warning and no time left.
  Json JobJson(const JobRecord& j) const {
    Json o = store::JobToJson(j);
    o.erase("env");
    o.erase("pid_start_ticks");
    const bool ended = store::IsTerminal(j.state);
    if (ended) {
      o["warning"] = "";
      o["warn_deadline_us"] = 0;
    }
    o["time_left_us"] = nullptr;  // no limit, not started, or ended
    if (!ended && j.deadline > 0 && j.start_time > 0 && j.state != JobState::kPending) {
      o["time_left_us"] = std::max<Micros>(0, j.deadline - Now());
    }
    // The running slice's last verdict (active / idle / unmeasured) and the signals behind it.
    o["activity"] = nullptr;
    o["activity_basis"] = nullptr;
    if (auto u = slice_util_.find(j.slice); u != slice_util_.end() && !store::IsTerminal(j.state)) {
      o["activity"] = agent::ActivityLabel(u->second.verdict.activity);
      o["activity_basis"] = u->second.verdict.basis;
    }
    o["pending_reason"] = nullptr;
    if (j.state == JobState::kPending) {
      if (auto w = sched_->PendingReason(j.id)) o["pending_reason"] = WaitReasonJson(*w, j.queue);
    }
    return o;
  }

  // A pending job's reason for the API: its kind, one line for people and the figures behind it
  // (docs/api.md, "Why a job waits").
  static Json WaitReasonJson(const sched::WaitReason& w, const std::string& queue) {
    // Names in it (user, queue, model) may hold any bytes; the JSON text must stay valid.
    const std::string message = EscapeInvalidUtf8(sched::FormatWaitReason(w));
    Json o{{"kind", std::string(sched::WaitReasonKind(w))},
           {"message", message},
           {"text", EscapeInvalidUtf8(fmt::format("pending in {}: {}", queue, message))}};
    auto devices = [](NodeId node, const std::vector<DeviceIndex>& ds) {
      Json arr = Json::array();
      for (DeviceIndex d : ds) arr.push_back(d.value());
      return Json{{"node", node.value()}, {"devices", arr}};
    };
    std::visit(Overloaded{
                   [&](const sched::NoDeviceFits& r) {
                     o["slice_kind"] = std::string(sched::SliceKindName(r.kind));
                     o["model"] = EscapeInvalidUtf8(r.model);
                     o["gpus"] = r.gpus;
                     o["milli"] = r.milli;
                     o["memory"] = r.memory;
                   },
                   [&](const sched::UserCap& r) {
                     o["queue"] = EscapeInvalidUtf8(r.queue);
                     o["user"] = EscapeInvalidUtf8(r.user);
                     o["limit"] = r.limit == sched::UserCap::Limit::kJobs ? "jobs" : "milli";
                     o["max"] = r.max;
                     o["held"] = r.held;
                     o["asked"] = r.asked;
                   },
                   [&](const sched::ReservedForOther& r) {
                     o["for_job"] = r.job.value();
                     o["kept"] = devices(r.node, r.devices);
                   },
                   [&](const sched::WaitingForReservation& r) {
                     o["kept"] = devices(r.node, r.devices);
                     o["busy"] = r.busy;
                   },
                   [&](const sched::DrainingForMig& r) {
                     o["device"] = Json{{"node", r.device.node.value()}, {"index", r.device.index.value()}};
                     o["reconfiguring"] = r.reconfiguring;
                   },
                   [&](const sched::NeverFits& r) { o["why"] = EscapeInvalidUtf8(r.why); },
               },
               w);
    return o;
  }

  static Json SliceJson(const SliceRecord& s) { return store::SliceToJson(s); }

  void AddEvent(store::WriteBatch& b, JobId job, std::string type, std::string message) {
    // A message may quote a user's bytes (a path, a name); events are served as JSON text.
    b.events.push_back({0, Now(), job, std::move(type), EscapeInvalidUtf8(message)});
  }

  // Feeds one event to the scheduler and turns its decisions into records and actions.
  void Feed(const sched::Event& e, store::WriteBatch& b, Actions& act) {
    auto decisions = sched_->Handle(e);
    if (CanChangeState(e) || !decisions.empty()) {
      b.journal.push_back(EncodeEvent(e));
      ++journal_entries_;
    }
    for (const auto& d : decisions) Apply(d, b, act);
  }

  void Apply(const sched::Decision& d, store::WriteBatch& b, Actions& act) {
    Micros now = Now();
    std::visit(
        Overloaded{
            [&](const sched::StartSlice& s) {
              JobRecord& j = jobs_.at(s.job);
              SliceRecord r;
              r.id = s.slice;
              r.job = s.job;
              r.kind = std::string(sched::SliceKindName(s.kind));
              for (auto di : s.devices) r.devices.push_back(static_cast<int>(di.value()));
              r.uuids = s.uuids;
              r.milli = s.milli;
              r.memory_cap = s.memory_cap;
              r.mps_thread_percent = s.mps_thread_percent;
              if (s.mig) r.mig = fmt::format("profile={} start={}", s.mig->profile_id, s.mig->start);
              r.created = now;
              slices_[r.id] = r;
              all_slices_share_[s.job] = s.milli * static_cast<MilliGpu>(s.devices.size());
              b.slices.push_back(r);
              j.state = JobState::kStarting;
              j.slice = s.slice;
              j.deadline = s.deadline;
              j.warning.clear();
              b.jobs.push_back(j);
              to_launch_.insert(s.job);
              AddEvent(b, s.job, "place", fmt::format("job {}: {}", s.job.value(), sched::FormatDecision(d)));
            },
            [&](const sched::Warn& w) {
              JobRecord& j = jobs_.at(w.job);
              j.warning = w.message;
              j.warn_deadline = w.deadline;
              b.jobs.push_back(j);
              AddEvent(b, w.job, "warn", fmt::format("job {}: {} warning: {}", w.job.value(),
                                                     sched::WarnReasonName(w.reason), w.message));
              act.log_lines.emplace_back(w.job, fmt::format("gpuslice: WARNING ({}): {}",
                                                            sched::WarnReasonName(w.reason), w.message));
            },
            [&](const sched::ClearWarning& c) {
              JobRecord& j = jobs_.at(c.job);
              // Only the idle warning goes; a time-limit one (its deadline is the job's) stays.
              if (j.warning.empty() || (j.deadline > 0 && j.warn_deadline == j.deadline)) return;
              j.warning.clear();
              j.warn_deadline = 0;
              b.jobs.push_back(j);
              AddEvent(b, c.job, "unwarn", fmt::format("job {}: {}", c.job.value(), c.message));
              act.log_lines.emplace_back(c.job, "gpuslice: " + c.message);
            },
            [&](const sched::Reclaim& r) {
              BeginStop(r.job, JobState::kReclaimed, "idle reclaim: " + r.reason, false, b, act);
            },
            [&](const sched::Stop& s) {
              std::string why = s.reason == sched::StopReason::kTimeLimit ? "time limit reached"
                                : s.reason == sched::StopReason::kCancelled ? "cancelled"
                                                                            : "device lost";
              BeginStop(s.job, FinalStateFor(s), why, false, b, act);
            },
            [&](const sched::Preempt& p) {
              BeginStop(p.job, p.requeue ? JobState::kPending : JobState::kCancelled,
                        "preempted: " + p.reason, p.requeue, b, act);
            },
            [&](const sched::Drain& dr) {
              AddEvent(b, JobId(), "drain", fmt::format("device {}: draining: {}",
                                                        dr.device.index.value(), dr.reason));
            },
            [&](const sched::Reserve& r) { AddEvent(b, r.job, "reserve", r.reason); },
            [&](const sched::ReconfigureMig& r) {
              AddEvent(b, JobId(), "reconfigure", sched::FormatDecision(d));
              act.reconfigure.push_back(r);
            },
            [&](const sched::Reject& r) {
              JobRecord& j = jobs_.at(r.job);
              j.state = JobState::kRejected;
              j.reason = r.status.message();
              j.end_time = now;
              b.jobs.push_back(j);
              AddEvent(b, r.job, "reject", j.reason);
            },
        },
        d);
  }

  // Stop/Reclaim/Preempt: the scheduler has freed the slice in its books; the processes get
  // SIGTERM after the commit and SIGKILL after the grace period; the store keeps the slice
  // active until they are gone.
  void BeginStop(JobId id, JobState final, std::string reason, bool requeue,
                 store::WriteBatch& b, Actions& act) {
    JobRecord& j = jobs_.at(id);
    auto p = procs_.find(id);
    if (p == procs_.end() && (j.state == JobState::kRunning || j.state == JobState::kStopping)) {
      // Recovery, before the job's processes are re-adopted (a device vanished while the daemon
      // was down): the job is stopping; step 3 of Start ends it and frees the slice once its
      // processes are gone, as for any job stopped before a restart.
      j.state = JobState::kStopping;
      j.reason = reason;
      b.jobs.push_back(j);
      AddEvent(b, id, "stop", fmt::format("job {}: stopping ({})", id.value(), reason));
      return;
    }
    if (p == procs_.end()) {
      // Not exec'd yet (starting): nothing to kill.
      to_launch_.erase(id);
      j.state = final;
      j.reason = reason;
      if (final != JobState::kPending) j.end_time = Now();
      ReleaseSlice(j, b);
      b.jobs.push_back(j);
      AddEvent(b, id, "stop", fmt::format("job {} {} before it started: {}", id.value(),
                                          store::JobStateName(final), reason));
      return;
    }
    p->second.stopping = true;
    p->second.final_state = final;
    p->second.final_reason = reason;
    j.state = JobState::kStopping;
    j.reason = reason;
    (void)requeue;
    b.jobs.push_back(j);
    AddEvent(b, id, "stop", fmt::format("job {}: stopping ({}): SIGTERM, then SIGKILL after {}",
                                        id.value(), reason, FormatDuration(opt_.grace)));
    act.terminate.push_back(id);
    act.log_lines.emplace_back(id, fmt::format("gpuslice: stopping job: {}", reason));
  }

  void ReleaseSlice(JobRecord& j, store::WriteBatch& b) {
    auto s = slices_.find(j.slice);
    if (s == slices_.end()) return;
    s->second.active = false;
    s->second.released = Now();
    b.slices.push_back(s->second);
    FlushDown(s->first, b);
    if (s->second.kind == "shared") (void)memcap::RemoveSliceSegment(SliceKey(s->first));
    slices_.erase(s);
    slice_util_.erase(j.slice);
    agent_->Unbind(j.slice);
  }

  static std::string SliceKey(SliceId id) { return fmt::format("slice-{}", id.value()); }

  // Recovery: devices the scheduler knows (from the journal) that the backend no longer lists
  // at the same index with the same UUID and model vanished while the daemon was down. They
  // are removed from scheduling; their slices' jobs are stopped (Stop, device lost) and pending
  // jobs that can no longer ever fit are rejected with the reason.
  void RemoveVanishedDevices(Micros now, const std::vector<devices::DeviceInfo>& devs,
                             store::WriteBatch& b, Actions& act) {
    std::vector<std::pair<sched::DeviceRef, std::string>> gone;
    for (const auto& [ref, d] : sched_->devices()) {
      if (ref.node != opt_.node) continue;
      const DeviceIndex index = ref.index;  // a lambda may not capture a structured binding (clang 14)
      auto it = std::find_if(devs.begin(), devs.end(), [&](const devices::DeviceInfo& x) {
        return x.index == index;
      });
      std::string why;
      if (it == devs.end()) {
        why = "no longer present";
      } else if (it->uuid != d.uuid) {
        why = fmt::format("replaced by {}", it->uuid);
      } else if (std::string model = it->model ? it->model->name : it->name;
                 d.catalogue != nullptr && model != d.model) {
        why = fmt::format("now reports model {}", model);
      } else {
        continue;
      }
      gone.emplace_back(ref, fmt::format("device {} ({}, {}) {} since the last start: removed "
                                         "from scheduling", ref.index.value(), d.uuid, d.model, why));
    }
    for (const auto& [ref, message] : gone) {
      spdlog::warn("{}", message);
      AddEvent(b, JobId(), "device", message);
      Feed(sched::DeviceRemoved{now, ref}, b, act);
    }
  }

  // Appends daemon lines to a job's log (created 0600, like the launcher's). In a log already
  // cut at its cap they go right after the notice, and the cap makes room for them.
  void AppendToLog(JobId id, const std::string& path, const std::string& text) {
    auto lim = log_limit_.find(id);
    int fd = open(path.c_str(),
                  O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (lim == log_limit_.end() ? O_APPEND : 0),
                  0600);
    if (fd < 0) return;
    if (lim == log_limit_.end()) {
      (void)!write(fd, text.data(), text.size());
    } else {
      lim->second = WriteAt(fd, lim->second, text);
    }
    close(fd);
  }

  // Cuts the file at `at`, writes `text` there and cuts after it (whatever the job appended
  // meanwhile goes); returns the new end. `fd` must not be O_APPEND (pwrite would append).
  static off_t WriteAt(int fd, off_t at, const std::string& text) {
    (void)!ftruncate(fd, at);
    ssize_t w = pwrite(fd, text.data(), text.size(), at);
    off_t end = at + std::max<ssize_t>(w, 0);
    (void)!ftruncate(fd, end);
    return end;
  }

  // The cap on a job's log (DaemonOptions::max_log_size). The job writes its log directly (the
  // fd is its stdout/stderr, opened O_APPEND), so the daemon cuts it: once it grows past the
  // cap it is truncated to the cap and ends with a line saying so; what the job writes after
  // that is cut again at every turn of the control loop. O_APPEND writers continue at the new
  // end of file, so the job notices nothing. Why this and not the alternatives: a pipe drained
  // by the daemon would break (SIGPIPE/EPIPE) or stall the job whenever the daemon restarts,
  // and jobs outlive the daemon by design; RLIMIT_FSIZE on the job would cap every file it
  // writes (checkpoints!), not its log. Bound: the cap plus what the job writes in one tick
  // (and, while the daemon is down, until it is back: the first turn after a restart cuts).
  void EnforceLogCaps(store::WriteBatch& b) {
    if (opt_.max_log_size <= 0) return;
    for (const auto& [id, p] : procs_) {
      auto jt = jobs_.find(id);
      if (jt == jobs_.end() || jt->second.log_path.empty()) continue;
      const std::string& path = jt->second.log_path;
      struct stat sb {};
      if (stat(path.c_str(), &sb) != 0) continue;
      auto lim = log_limit_.find(id);
      const off_t limit = lim != log_limit_.end() ? lim->second : opt_.max_log_size;
      if (sb.st_size <= limit) continue;
      int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) continue;
      if (lim != log_limit_.end()) {
        (void)!ftruncate(fd, limit);
      } else {
        // The first cut (or the first since a restart: it replaces the earlier notice).
        std::string note = fmt::format(
            "\n[gpuslice: log truncated at {} bytes (serve --max-log-size); further output is "
            "discarded]\n", opt_.max_log_size);
        log_limit_[id] = WriteAt(fd, opt_.max_log_size, note);
        AddEvent(b, id, "log", fmt::format("job {}: log truncated at {} bytes (serve --max-log-size)",
                                           id.value(), opt_.max_log_size));
      }
      close(fd);
    }
    std::erase_if(log_limit_, [&](const auto& e) { return !procs_.contains(e.first); });
  }

  // Where each job's exec stub records its exit status (exec/launcher.h, "Results"): only the
  // daemon's user (root) may write or read it, so a job cannot forge its own result.
  std::string StatusDir() const { return (fs::absolute(opt_.state_dir) / "status").string(); }
  std::string StatusPath(JobId id) const {
    return fmt::format("{}/{}.exit", StatusDir(), id.value());
  }
  Status MakeStatusDir() const {
    std::error_code ec;
    fs::create_directories(StatusDir(), ec);
    if (!ec) fs::permissions(StatusDir(), fs::perms::owner_all, ec);
    if (ec) return Internal(fmt::format("status directory '{}': {}", StatusDir(), ec.message()));
    return Status::Ok();
  }
  // Status files of ended jobs left by a crash between the end's commit and their removal.
  void ForgetStaleStatusFiles() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(StatusDir(), ec)) {
      const std::string name = e.path().filename().string();
      const std::uint64_t id = std::strtoull(name.c_str(), nullptr, 10);
      auto j = jobs_.find(JobId(id));
      if (j == jobs_.end() || store::IsTerminal(j->second.state) ||
          (name.find(".tmp") != std::string::npos && !procs_.contains(JobId(id)))) {
        fs::remove(e.path(), ec);
      }
    }
  }

  // Commits; then performs the side effects. A failed commit is fatal for the process: the
  // in-memory scheduler is ahead of the store, and only a restart (replaying the store)
  // makes them agree again.
  // Moves a batch waiting for the next commit (see Submit) in front of `b`, keeping the
  // journal in the order the scheduler saw the events.
  void MergePending(store::WriteBatch& b) {
    if (pending_ == nullptr || pending_ == &b) return;
    store::WriteBatch p = std::move(*pending_);
    *pending_ = store::WriteBatch{};
    auto front = [](auto& into, auto& from) {
      from.insert(from.end(), std::make_move_iterator(into.begin()),
                  std::make_move_iterator(into.end()));
      into = std::move(from);
    };
    front(b.jobs, p.jobs);
    front(b.slices, p.slices);
    front(b.events, p.events);
    front(b.samples, p.samples);
    front(b.journal, p.journal);
  }

  Status CommitAndAct(store::WriteBatch& batch, Actions& act) {
    while (true) {
      MergePending(batch);
      Status st = store_->Commit(batch);
      if (!st.ok()) {
        spdlog::critical("store commit failed: {}; exiting so a restart recovers", st.ToString());
        std::fflush(nullptr);
        std::_Exit(70);
      }
      batch = store::WriteBatch{};
      for (JobId id : act.terminate) {
        auto p = procs_.find(id);
        if (p == procs_.end()) continue;
        (void)launcher_->Signal(p->second.handle, SIGTERM);
        if (p->second.term_sent == 0) p->second.term_sent = Now();
      }
      for (const auto& [id, line] : act.log_lines) AppendLog(id, line);
      for (JobId id : act.forget_status) {
        std::error_code ec;
        fs::remove(StatusPath(id), ec);  // a leftover is harmless: it names another run's pid
      }
      auto reconf = std::move(act.reconfigure);
      act = Actions{};
      for (const auto& r : reconf) ApplyMig(r, batch, act);
      if (batch.empty()) return Status::Ok();
    }
  }

  void AppendLog(JobId id, const std::string& line) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    AppendToLog(id, it->second.log_path, line + "\n");
  }

  void ApplyMig(const sched::ReconfigureMig& r, store::WriteBatch& b, Actions& act) {
    DeviceIndex idx = r.device.index;
    Status st;
    if (!r.layout.empty()) st = backend_->SetMigMode(idx, true);
    auto cur = backend_->ListDevices();
    if (st.ok() && !cur.ok()) st = cur.status();
    if (st.ok()) {
      for (const auto& d : *cur) {
        if (d.index != idx) continue;
        for (const auto& gi : d.gpu_instances) {
          bool keep = std::any_of(r.layout.begin(), r.layout.end(), [&](const MigPlacement& p) {
            return p.profile_id == gi.profile_id && p.start == gi.start;
          });
          if (!keep && st.ok()) st = backend_->DestroyGpuInstance(idx, gi.id);
        }
      }
    }
    const DeviceModel* model = nullptr;
    if (auto it = device_info_.find(static_cast<int>(idx.value())); it != device_info_.end()) {
      model = it->second.model;
    }
    for (const auto& p : r.layout) {
      if (!st.ok()) break;
      auto gi = backend_->CreateGpuInstance(idx, p.profile_id, p.start);
      if (!gi.ok()) {
        st = gi.status();
        break;
      }
      if (!gi->compute_instances.empty()) continue;  // kept, or made before a crash
      const MigProfile* prof = model ? model->FindProfileById(p.profile_id) : nullptr;
      auto ci = backend_->CreateComputeInstance(idx, gi->id,
                                                FullCiProfile(prof ? prof->compute_slices : 1));
      if (!ci.ok()) st = ci.status();
    }
    sched::ReconfigureDone done;
    done.now = Now();
    done.device = r.device;
    done.ok = st.ok();
    done.error = st.ok() ? "" : st.ToString();
    auto after = backend_->ListDevices();
    if (after.ok()) {
      for (const auto& d : *after) {
        if (d.index != idx) continue;
        device_info_[static_cast<int>(idx.value())] = d;
        for (const auto& gi : d.gpu_instances) done.layout.push_back({gi.profile_id, gi.start});
      }
    }
    std::sort(done.layout.begin(), done.layout.end(),
              [](const MigPlacement& a, const MigPlacement& b) { return a.start < b.start; });
    if (!st.ok()) spdlog::error("MIG reconfigure of device {}: {}", idx.value(), st.ToString());
    Feed(done, b, act);
  }

  // The MIG device UUID for a mig slice (creating the compute instance if it is missing).
  Result<std::string> MigUuid(const SliceRecord& s) {
    int profile = 0, start = 0;
    if (std::sscanf(s.mig.c_str(), "profile=%d start=%d", &profile, &start) != 2 || s.devices.empty()) {
      return Internal(fmt::format("slice {}: no MIG placement", s.id.value()));
    }
    DeviceIndex idx(static_cast<std::uint32_t>(s.devices[0]));
    GPUSLICE_ASSIGN_OR_RETURN(auto devs, backend_->ListDevices());
    for (const auto& d : devs) {
      if (d.index != idx) continue;
      for (const auto& gi : d.gpu_instances) {
        if (gi.profile_id != profile || gi.start != start) continue;
        if (!gi.compute_instances.empty()) return gi.compute_instances[0].uuid;
        const MigProfile* prof = d.model ? d.model->FindProfileById(profile) : nullptr;
        GPUSLICE_ASSIGN_OR_RETURN(auto ci, backend_->CreateComputeInstance(
                                               idx, gi.id, FullCiProfile(prof ? prof->compute_slices : 1)));
        return ci.uuid;
      }
      GPUSLICE_ASSIGN_OR_RETURN(auto gi, backend_->CreateGpuInstance(idx, profile, start));
      const MigProfile* prof = d.model ? d.model->FindProfileById(profile) : nullptr;
      GPUSLICE_ASSIGN_OR_RETURN(auto ci, backend_->CreateComputeInstance(
                                             idx, gi.id, FullCiProfile(prof ? prof->compute_slices : 1)));
      return ci.uuid;
    }
    return NotFound(fmt::format("device {}: gone", idx.value()));
  }

  // The slice's part of the job environment.
  Result<std::vector<std::pair<std::string, std::string>>> SliceEnv(const JobRecord& j,
                                                                    const SliceRecord& s,
                                                                    std::string* note) {
    std::vector<std::pair<std::string, std::string>> env;
    std::string visible;
    if (s.kind == "mig") {
      GPUSLICE_ASSIGN_OR_RETURN(visible, MigUuid(s));
    } else {
      for (const auto& u : s.uuids) visible += (visible.empty() ? "" : ",") + u;
    }
    env.emplace_back("CUDA_VISIBLE_DEVICES", visible);
    env.emplace_back("GPUSLICE_JOB_ID", std::to_string(j.id.value()));
    env.emplace_back("GPUSLICE_SLICE_ID", std::to_string(s.id.value()));
    env.emplace_back("GPUSLICE_SLICE_KIND", s.kind);
    env.emplace_back("GPUSLICE_QUEUE", j.queue);
    env.emplace_back("GPUSLICE_GPU_MILLI", std::to_string(s.milli));
    if (opt_.simulated) env.emplace_back("GPUSLICE_SIMULATED", "1");
    if (s.kind == "mps" && !s.devices.empty()) {
      DeviceIndex idx(static_cast<std::uint32_t>(s.devices[0]));
      devices::MpsConfig mc;
      const fs::path mps = opt_.mps_dir.empty() ? fs::path(opt_.state_dir) / "mps" : fs::path(opt_.mps_dir);
      mc.pipe_dir = (mps / std::to_string(s.devices[0]) / "pipe").string();
      mc.log_dir = (mps / std::to_string(s.devices[0]) / "log").string();
      // Every user's MPS clients must reach the pipes (the daemon's umask is 077). One level at
      // a time, each checked before the next is made in it, and never through a link: the
      // socket's directory may be writable by others (/tmp), and a planted link would have us
      // create and chmod directories in its target.
      std::error_code mk;
      fs::create_directories(mps.parent_path(), mk);
      for (const fs::path& d : {mps, mps / std::to_string(s.devices[0]), fs::path(mc.pipe_dir),
                                fs::path(mc.log_dir)}) {
        (void)mkdir(d.c_str(), 0755);
        struct stat sb {};
        if (lstat(d.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid()) {
          return FailedPrecondition(fmt::format(
              "MPS directory '{}': not a directory of the daemon's own (missing, a link, or "
              "another owner's); refusing to use it", d.string()));
        }
        (void)chmod(d.c_str(), 0755);
      }
      GPUSLICE_RETURN_IF_ERROR(backend_->StartMps(idx, mc));
      env.emplace_back("CUDA_MPS_PIPE_DIRECTORY", mc.pipe_dir);
      env.emplace_back("CUDA_MPS_LOG_DIRECTORY", mc.log_dir);
      if (s.mps_thread_percent > 0) {
        env.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(s.mps_thread_percent));
      }
      if (s.memory_cap > 0) {
        env.emplace_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                         fmt::format("0={}M", std::max<Bytes>(1, s.memory_cap / kMiB)));
      }
    }
    if (s.kind == "shared" && s.memory_cap > 0) {
      auto mc = memcap::SliceEnvironment(SliceKey(s.id), s.memory_cap);
      bool preloaded = false;
      for (auto& [k, v] : mc) {
        if (k == "LD_PRELOAD") {
          preloaded = true;
          for (const auto& [uk, uv] : j.env) {
            if (uk == "LD_PRELOAD" && !uv.empty()) v += ":" + uv;
          }
        }
        env.emplace_back(k, v);
      }
      *note = preloaded ? fmt::format("memory cap {} enforced by libgpuslice-cuda",
                                      FormatBytes(s.memory_cap))
                        : fmt::format("memory cap {} NOT enforced: libgpuslice-cuda.so not found",
                                      FormatBytes(s.memory_cap));
    }
    return env;
  }

  // Starts every chosen job whose devices are free of processes being stopped.
  void LaunchReady() {
    std::vector<JobId> ids(to_launch_.begin(), to_launch_.end());
    for (JobId id : ids) {
      auto jt = jobs_.find(id);
      if (jt == jobs_.end() || jt->second.state != JobState::kStarting) {
        to_launch_.erase(id);
        continue;
      }
      JobRecord& j = jt->second;
      auto st = slices_.find(j.slice);
      if (st == slices_.end()) {
        to_launch_.erase(id);
        continue;
      }
      const SliceRecord& s = st->second;
      if (Blocked(id, s)) continue;
      to_launch_.erase(id);
      Launch(j, s);
    }
  }

  bool Blocked(JobId id, const SliceRecord& s) const {
    if (procs_.contains(id)) return true;  // its previous (preempted) processes still run
    for (const auto& [pid_job, p] : procs_) {
      if (!p.stopping) continue;
      for (int d : p.devices) {
        if (std::find(s.devices.begin(), s.devices.end(), d) != s.devices.end()) return true;
      }
    }
    return false;
  }

  void Launch(JobRecord& j, const SliceRecord& s) {
    store::WriteBatch batch;
    Actions act;
    std::string note;
    auto senv = SliceEnv(j, s, &note);
    Status st = senv.status();
    exec::LaunchSpec spec;
    if (st.ok()) {
      spec.job = j.id;
      spec.argv = j.argv;
      spec.cwd = j.cwd;
      std::map<std::string, std::string> env(j.env.begin(), j.env.end());
      if (!env.contains("PATH")) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
      for (const auto& [k, v] : *senv) env[k] = v;
      spec.env.assign(env.begin(), env.end());
      spec.uid = j.uid;
      spec.gid = j.gid;
      spec.user = j.user;
      spec.log_path = j.log_path;
      spec.status_path = StatusPath(j.id);
      spec.cgroup_parent = opt_.cgroup_parent;
      std::error_code ec;
      fs::remove(spec.status_path, ec);  // an earlier run's (preempted, requeued)
      AppendToLog(j.id, j.log_path,
                  fmt::format("gpuslice: job {} starting on slice {} ({}; CUDA_VISIBLE_DEVICES={}){}\n{}",
                              j.id.value(), s.id.value(), s.kind, env["CUDA_VISIBLE_DEVICES"],
                              opt_.simulated ? " -- SIMULATED devices (no NVIDIA driver)" : "",
                              note.empty() ? "" : "gpuslice: " + note + "\n"));
      auto h = launcher_->Start(spec, [&](const exec::ProcessHandle& ph) {
        j.pid = ph.pid;
        j.pid_start_ticks = ph.start_ticks;
        j.state = JobState::kRunning;
        j.start_time = Now();
        store::WriteBatch b;
        b.jobs.push_back(j);
        AddEvent(b, j.id, "start", fmt::format("job {} started: pid {}, slice {} ({}){}", j.id.value(),
                                               ph.pid, s.id.value(), s.kind,
                                               note.empty() ? "" : "; " + note));
        MergePending(b);
        Status st = store_->Commit(b);
        if (!st.ok()) {
          // Same rule as CommitAndAct: the store is the truth; restart from it.
          spdlog::critical("store commit failed: {}; exiting so a restart recovers", st.ToString());
          std::fflush(nullptr);
          std::_Exit(70);
        }
        return st;
      });
      if (h.ok()) {
        Proc p;
        p.handle = *h;
        p.slice = s.id;
        p.devices = s.devices;
        procs_[j.id] = std::move(p);
        BindSlice(j.id);
        return;
      }
      st = h.status();
    }
    // Could not start: the job fails and its slice goes back.
    spdlog::warn("job {}: start failed: {}", j.id.value(), st.ToString());
    j.pid = 0;
    j.state = JobState::kFailed;
    j.reason = "could not start: " + st.ToString();
    j.end_time = Now();
    ReleaseSlice(j, batch);
    batch.jobs.push_back(j);
    AddEvent(batch, j.id, "fail", fmt::format("job {}: {}", j.id.value(), j.reason));
    AppendLog(j.id, "gpuslice: " + j.reason);
    Feed(sched::Finish{Now(), j.id}, batch, act);
    (void)CommitAndAct(batch, act);
  }

  // Polls every live job; ends those whose processes are all gone; escalates to SIGKILL.
  void Reap(Micros now, store::WriteBatch& b, Actions& act) {
    std::vector<JobId> gone;
    for (auto& [id, p] : procs_) {
      auto e = launcher_->Poll(p.handle);
      if (!e) {
        if (p.term_sent > 0 && !p.killed && now - p.term_sent >= opt_.grace) {
          (void)launcher_->Signal(p.handle, SIGKILL);
          p.killed = true;
          AddEvent(b, id, "kill", fmt::format("job {}: grace period over: SIGKILL", id.value()));
        }
        continue;
      }
      if (!p.leader_exit) p.leader_exit = e;
      if (!e->group_gone) {
        if (!p.stopping && !p.cleanup) {
          // The main process ended by itself; its leftovers are ended like a stop.
          p.cleanup = true;
          (void)launcher_->Signal(p.handle, SIGTERM);
          p.term_sent = now;
        } else if (p.term_sent > 0 && !p.killed && now - p.term_sent >= opt_.grace) {
          (void)launcher_->Signal(p.handle, SIGKILL);
          p.killed = true;
        }
        continue;
      }
      gone.push_back(id);
    }
    for (JobId id : gone) {
      Proc p = std::move(procs_.at(id));
      procs_.erase(id);
      EndJob(id, std::move(p), now, b, act);
    }
  }

  // Records the end of a job whose processes are all gone, with the result its exec stub
  // recorded (p.leader_exit). An unrecorded result stays unknown: a job that was not being
  // stopped is then `lost`, never `succeeded`.
  void EndJob(JobId id, Proc p, Micros now, store::WriteBatch& b, Actions& act) {
    JobRecord& j = jobs_.at(id);
    j.exit_code = p.leader_exit->exit_code;
    j.exit_signal = p.leader_exit->signal;
    act.forget_status.push_back(id);
    if (p.stopping) {
      // The scheduler freed the slice when it decided; the store frees it now.
      if (j.state == JobState::kStopping) {
        j.state = p.final_state;
        if (p.final_state != JobState::kPending) j.end_time = now;
      }
      ReleaseSliceById(p.slice, b);
      b.jobs.push_back(j);
      AddEvent(b, id, "end", fmt::format("job {} {}: {}", id.value(),
                                         store::JobStateName(p.final_state), p.final_reason));
      return;
    }
    if (p.leader_exit->never_started) {
      // Counted as started (the pid commit) but the go-ahead never came: nothing ran.
      j.state = JobState::kFailed;
      j.reason = "never started: the daemon stopped between recording the start and the "
                 "go-ahead, so nothing ran; resubmit it";
    } else if (!j.exit_code && !j.exit_signal) {
      j.state = JobState::kLost;
      j.reason = fmt::format(
          "exit status unknown: its exec stub (pid {}) ended without recording it{}", j.pid,
          p.handle.adopted ? " (while the daemon was down or since its restart)" : "");
    } else if (j.exit_code && *j.exit_code == 0) {
      j.state = JobState::kSucceeded;
      j.reason.clear();
    } else {
      j.state = JobState::kFailed;
      j.reason = j.exit_signal ? fmt::format("killed by signal {}", *j.exit_signal)
                               : fmt::format("exit code {}", j.exit_code.value_or(-1));
    }
    j.end_time = now;
    ReleaseSlice(j, b);
    b.jobs.push_back(j);
    AddEvent(b, id, "exit", fmt::format("job {} {}{}", id.value(), store::JobStateName(j.state),
                                        j.reason.empty() ? "" : ": " + j.reason));
    Feed(sched::Finish{now, id}, b, act);
  }

  void ReleaseSliceById(SliceId sid, store::WriteBatch& b) {
    auto s = slices_.find(sid);
    if (s == slices_.end()) return;
    s->second.active = false;
    s->second.released = Now();
    b.slices.push_back(s->second);
    FlushDown(sid, b);
    if (s->second.kind == "shared") (void)memcap::RemoveSliceSegment(SliceKey(sid));
    slices_.erase(s);
    slice_util_.erase(sid);
    agent_->Unbind(sid);
  }

  // Tells the agent who owns a running job's processes: the job's process group (its
  // leader's pid), its cgroup, its slice id in the environment, its MIG device.
  void BindSlice(JobId id) {
    auto p = procs_.find(id);
    auto j = jobs_.find(id);
    if (p == procs_.end() || j == jobs_.end()) return;
    auto s = slices_.find(p->second.slice);
    if (s == slices_.end()) return;
    agent::SliceBinding bd;
    bd.slice = s->first;
    bd.job = id;
    bd.user = j->second.user;
    bd.queue = j->second.queue;
    if (auto k = sched::ParseSliceKind(s->second.kind); k.ok()) bd.kind = *k;
    for (int d : s->second.devices) bd.devices.push_back(DeviceIndex(static_cast<std::uint32_t>(d)));
    if (bd.kind == sched::SliceKind::kMig) {
      if (auto u = MigUuid(s->second); u.ok()) bd.mig_uuid = *u;
    }
    bd.root_pids = {p->second.handle.pid};
    if (!opt_.cgroup_parent.empty()) {
      // /proc/<pid>/cgroup names the path below the cgroup v2 mount.
      std::string dir = fmt::format("{}/job-{}", opt_.cgroup_parent, id.value());
      constexpr std::string_view kMount = "/sys/fs/cgroup";
      if (dir.starts_with(kMount)) dir = dir.substr(kMount.size());
      bd.cgroup = dir;
    }
    if (const sched::QueueConfig* q = config_.FindQueue(j->second.queue)) bd.idle = q->idle;
    agent_->Bind(bd);
  }

  // One agent round: device figures for the views and the store, each running slice's verdict
  // for the views, and to the scheduler the samples that can change its state.
  void SampleDevices(Micros now, store::WriteBatch& b, Actions& act) {
    const agent::Round round = agent_->SampleOnce();
    for (const auto& s : round.samples) {
      const int idx = static_cast<int>(s.index.value());
      latest_[idx] = s;
      Downsample(now, fmt::format("device/{}", idx), s.gpu_util.optional(), s.memory_used.optional(), b);
    }
    std::map<SliceId, const agent::SliceActivity*> by_slice;
    for (const auto& a : round.slices) by_slice[a.slice] = &a;
    sched::Sample ev{now, {}};
    bool due = false;
    for (const auto& [sid, v] : sched_->slices()) {
      auto it = by_slice.find(sid);
      if (it == by_slice.end()) continue;  // not running yet (or no longer): nothing measured
      const agent::SliceActivity& a = *it->second;
      // Only what can change the scheduler is fed, and each fed sample is journaled: feeding
      // every one would journal an entry a second for as long as anything runs. An active
      // slice is fed once per ActivityQuantum, or at once while it is warned or idle; a slice
      // going blind (unknown) or seeing again (idle after unknown) at once. When one is due,
      // every slice with news goes with it. The scheduler's last_active then lags by less
      // than the quantum (a tenth of the idle window, at most a minute): a warning may come
      // that much early, never a reclaim while the job is active during the grace period.
      // Views use the full-resolution time.
      const sched::Activity act_now = a.verdict.activity;
      const sched::QueueConfig* queue = QueueOf(v.job);
      if (act_now == sched::Activity::kActive) {
        seen_active_[sid] = now;
        if (queue != nullptr && (v.idle != sched::IdleState::kActive || v.unmeasured ||
                                 now - v.last_active >= ActivityQuantum(queue->idle))) {
          due = true;
        }
        ev.slices.push_back(a.sample);
      } else if ((act_now == sched::Activity::kUnknown) != v.unmeasured) {
        due = true;
        ev.slices.push_back(a.sample);
      }
      slice_util_[sid] = SliceFigures{a.sm_util.optional(), a.memory_used.optional(), a.verdict};
      Downsample(now, fmt::format("slice/{}", sid.value()), a.sm_util.optional(), a.memory_used.optional(), b,
                 a.verdict.activity == sched::Activity::kIdle);
      if (auto sr = slices_.find(sid); sr != slices_.end()) {
        auto& q = recent_[sr->second.job];
        q.push_back({now, a.sm_util.optional(), a.memory_used.optional()});
        if (q.size() > kRecentPoints) q.pop_front();
      }
    }
    // Bounded memory: the oldest jobs' raw series go first (their stored averages remain).
    while (recent_.size() > kRecentJobs) recent_.erase(recent_.begin());
    std::erase_if(seen_active_, [&](const auto& e) { return !sched_->slices().contains(e.first); });
    if (due) Feed(ev, b, act);
  }

  const sched::QueueConfig* QueueOf(JobId job) const {
    auto j = sched_->jobs().find(job);
    return j == sched_->jobs().end() ? nullptr : sched_->config().FindQueue(j->second.queue);
  }

  Micros ActivityQuantum(const sched::IdlePolicy& idle) const {
    if (!idle.enabled) return kMinute;
    return std::clamp<Micros>(idle.window / 10, std::min(opt_.sample_interval, kMinute), kMinute);
  }

  // When a slice was last seen active: the daemon's own sample (every round), else the
  // scheduler's (after a restart, until the first sample).
  Micros LastActive(const sched::SliceView& v) const {
    auto it = seen_active_.find(v.slice);
    return it == seen_active_.end() ? v.last_active : std::max(v.last_active, it->second);
  }

  // Stored points are means of the known figures; a window with no known utilisation is
  // stored as kUnknownPermille (the store's column is an integer), never as 0.
  static constexpr int kUnknownPermille = -1;
  static constexpr Bytes kUnknownBytes = -1;  // a stored point whose memory was never measured
  // A stored point says how long it covers and how much of that was measured (and measured
  // idle), so reports and compaction keep GPU-hours exact (store.h SampleRecord).
  void Downsample(Micros now, const std::string& subject, std::optional<int> permille,
                  std::optional<Bytes> used, store::WriteBatch& b, bool idle = false) {
    auto& d = down_[subject];
    if (d.count == 0) d.start = now - opt_.sample_interval;  // a sample stands for the interval before it
    if (permille) {
      d.util += *permille;
      ++d.util_n;
      if (idle) ++d.idle_n;
    }
    if (used) {
      d.used += *used;
      ++d.used_n;
    }
    d.count += 1;
    d.last = now;
    if (now - d.start >= opt_.downsample_window) EmitDown(subject, b);
  }
  void EmitDown(const std::string& subject, store::WriteBatch& b) {
    auto& d = down_[subject];
    const Micros span = d.last - d.start;
    b.samples.push_back({d.last, subject, d.util_n ? static_cast<int>(d.util / d.util_n) : kUnknownPermille,
                         d.used_n ? d.used / d.used_n : kUnknownBytes, span, span * d.util_n / d.count,
                         span * d.idle_n / d.count});
    d = {};
  }
  // A slice's open point is stored when it ends (else its last minute would read unknown).
  void FlushDown(SliceId sid, store::WriteBatch& b) {
    auto it = down_.find(fmt::format("slice/{}", sid.value()));
    if (it == down_.end()) return;
    if (it->second.count > 0) EmitDown(it->first, b);
    down_.erase(it);
  }

  struct Point {
    Micros t = 0;
    std::optional<int> util_permille;  // nullopt: not measured
    std::optional<Bytes> used;
  };
  struct SliceFigures {
    std::optional<int> sm_permille;
    std::optional<Bytes> memory_used;
    sched::SampleVerdict verdict;
  };
  static constexpr size_t kRecentPoints = 3600;  // an hour at the default 1 s sample interval
  static constexpr size_t kRecentJobs = 64;

  // (Daemon::Samples; with the members it reads.)
 public:
  Result<Json> Samples(JobId id) const {
    std::shared_lock lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound(fmt::format("job {}: no such job", id.value()));
    const JobRecord& j = it->second;
    // Every slice the job has held (a preempted job may have had several); the store has
    // ended ones too.
    GPUSLICE_ASSIGN_OR_RETURN(auto all, store_->ListSlices(false));
    std::vector<SliceRecord> mine;
    for (const auto& s : all) {
      if (s.job == id) mine.push_back(s);
    }
    Json slices = Json::array();
    Bytes total = 0;
    std::string model;
    for (const auto& s : mine) {
      Bytes cap = s.memory_cap;
      if (cap <= 0) {
        for (int d : s.devices) {
          auto di = device_info_.find(d);
          if (di != device_info_.end()) cap += di->second.memory_total.value_or(0);
        }
      }
      total = cap;  // the latest slice's
      for (int d : s.devices) {
        auto di = device_info_.find(d);
        if (di != device_info_.end() && model.empty()) model = di->second.name;
      }
      slices.push_back({{"id", s.id.value()}, {"kind", s.kind}, {"devices", s.devices},
                        {"memory_total", cap}});
    }
    auto rec = recent_.find(id);
    Micros first_raw = rec != recent_.end() && !rec->second.empty()
                           ? rec->second.front().t
                           : std::numeric_limits<Micros>::max();
    std::vector<std::tuple<Micros, std::optional<int>, std::optional<Bytes>, bool>> pts;
    for (const auto& s : mine) {
      GPUSLICE_ASSIGN_OR_RETURN(auto stored,
                                store_->ListSamples(fmt::format("slice/{}", s.id.value()),
                                                    j.submit_time));
      for (const auto& p : stored) {
        if (p.time >= first_raw) continue;
        pts.emplace_back(p.time, p.util_permille == kUnknownPermille ? std::nullopt : std::optional(p.util_permille),
                         p.memory_used < 0 ? std::nullopt : std::optional(p.memory_used), false);
      }
    }
    if (rec != recent_.end()) {
      for (const auto& p : rec->second) pts.emplace_back(p.t, p.util_permille, p.used, true);
    }
    std::sort(pts.begin(), pts.end());
    Json samples = Json::array();
    for (const auto& [t, u, used, raw] : pts) {
      samples.push_back({{"t", t}, {"util_permille", u ? Json(*u) : Json(nullptr)}, {"memory_used", used ? Json(*used) : Json(nullptr)},
                         {"downsampled", !raw}});
    }
    return Json{{"job", JobJson(j)},
                {"simulated", opt_.simulated},
                {"device_model", model},
                {"memory_total", total},
                {"slices", slices},
                {"sample_interval_us", opt_.sample_interval},
                {"downsample_window_us", opt_.downsample_window},
                {"samples", samples}};
  }


 private:
  std::map<JobId, std::deque<Point>> recent_;  // raw per-sample points, for profile --job

  struct Down {
    Micros start = 0;
    std::int64_t util = 0;
    Bytes used = 0;
    int util_n = 0;
    int used_n = 0;
    int idle_n = 0;
    int count = 0;
    Micros last = 0;
  };

  sched::Config config_;
  DaemonOptions opt_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<devices::DeviceBackend> backend_;
  std::unique_ptr<exec::Launcher> launcher_;
  WallClock clock_;

  mutable std::shared_mutex mu_;
  std::uint64_t seed_ = 0;
  std::unique_ptr<sched::Scheduler> sched_;
  std::uint64_t next_job_ = 1;
  std::map<JobId, JobRecord> jobs_;
  std::map<SliceId, SliceRecord> slices_;           // active
  std::map<JobId, MilliGpu> all_slices_share_;      // for reclaimed GPU-hours
  std::map<JobId, Proc> procs_;
  std::set<JobId> to_launch_;
  store::WriteBatch* pending_ = nullptr;  // Submit's batch, committed with the first start
  std::map<int, devices::DeviceInfo> device_info_;
  std::map<int, devices::DeviceSample> latest_;
  std::map<SliceId, Micros> seen_active_;  // last sample showing activity, every round
  std::map<SliceId, SliceFigures> slice_util_;  // the agent's last round, per running slice
  std::unique_ptr<agent::Agent> agent_;          // samples backend_; bound to running jobs
  std::map<std::string, Down> down_;
  Micros last_sample_ = 0;
  std::map<JobId, off_t> log_limit_;  // logs cut at their cap: the size they are kept at
  std::size_t journal_entries_ = 0;  // in the store (counted as they are journaled)
  std::size_t compacted_size_ = 0;   // after the last compaction
  std::map<JobId, std::string> wait_kind_;  // pending jobs: the reason kind last recorded
  std::unique_ptr<store::RetentionWorker> retention_;  // last: stops before store_ goes
};

// ---------------------------------------------------------------------------------------------

Daemon::Daemon(sched::Config config, DaemonOptions options, std::unique_ptr<store::Store> store,
               std::unique_ptr<devices::DeviceBackend> backend,
               std::unique_ptr<exec::Launcher> launcher, WallClock clock)
    : impl_(std::make_unique<Impl>(std::move(config), options, std::move(store),
                                   std::move(backend), std::move(launcher), std::move(clock))),
      options_(options) {}

Daemon::~Daemon() = default;

Status Daemon::Start() { return impl_->Start(); }
void Daemon::Step() { impl_->Step(); }
Result<Json> Daemon::Submit(const Caller& c, const Json& body) { return impl_->Submit(c, body); }
Result<Json> Daemon::ListJobs(const std::map<std::string, std::string>& q) const {
  return impl_->ListJobs(q);
}
Result<Json> Daemon::GetJob(JobId id) const { return impl_->GetJob(id); }
Result<Json> Daemon::Cancel(const Caller& c, JobId id) { return impl_->Cancel(c, id); }
Json Daemon::Devices() const { return impl_->Devices(); }
Json Daemon::Queues() const { return impl_->Queues(); }
Json Daemon::Slices() const { return impl_->Slices(); }
Result<Json> Daemon::Events(std::int64_t after, JobId job, int limit) const {
  return impl_->Events(after, job, limit);
}
std::string Daemon::Metrics() const { return impl_->Metrics(); }
Result<std::string> Daemon::LogPath(JobId id) const { return impl_->LogPath(id); }
bool Daemon::JobEnded(JobId id) const { return impl_->JobEnded(id); }
Status Daemon::Authorize(const Caller& c, JobId id) const { return impl_->Authorize(c, id); }
Result<Json> Daemon::Samples(JobId id) const { return impl_->Samples(id); }
Result<Json> Daemon::Report(const std::map<std::string, std::string>& q) const { return impl_->Report(q); }
Status Daemon::CheckConsistency() const { return impl_->CheckConsistency(); }

}  // namespace gpuslice::daemon
