// The job runner: starts chosen jobs over exec::Launcher (the pid is committed before the job
// may exec), reaps them, escalates SIGTERM to SIGKILL after the grace period, and ends them
// with the result their exec stub recorded.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {
namespace {
namespace fs = std::filesystem;
}  // namespace

std::string Daemon::Impl::StatusPath(JobId id) const {
  return fmt::format("{}/{}.exit", StatusDir(), id.value());
}

// Starts every chosen job whose devices are free of processes being stopped.
void Daemon::Impl::LaunchReady() {
  if (!failure_.ok()) return;
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

bool Daemon::Impl::Blocked(JobId id, const SliceRecord& s) const {
  if (procs_.contains(id)) return true;  // its previous (preempted) processes still run
  for (const auto& [pid_job, p] : procs_) {
    if (!p.stopping) continue;
    for (int d : p.devices) {
      if (std::find(s.devices.begin(), s.devices.end(), d) != s.devices.end()) return true;
    }
  }
  return false;
}

void Daemon::Impl::Launch(JobRecord& j, const SliceRecord& s) {
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
    // The submitter's umask (docs/api.md), never the daemon's own 077: files the job makes are
    // as its user would make them in a shell. A client that sent none gets the usual 022.
    spec.umask = j.umask >= 0 ? j.umask : 022;
    std::error_code ec;
    fs::remove(spec.status_path, ec);  // an earlier run's (preempted, requeued)
    AppendToLog(j.id, j.log_path,
                fmt::format("gpuslice: job {} starting on slice {} ({}; CUDA_VISIBLE_DEVICES={}){}\n{}",
                            j.id.value(), s.id.value(), SliceKindName(s.kind), env["CUDA_VISIBLE_DEVICES"],
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
                                             ph.pid, s.id.value(), SliceKindName(s.kind),
                                             note.empty() ? "" : "; " + note));
      MergePending(b);
      Status st = store_->Commit(b);
      // Same rule as CommitAndAct: the store is the truth; restart from it. The launcher
      // kills the child, which never runs the job.
      if (!st.ok()) return CommitFailed(st);
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
  // The pid's commit failed: the daemon stops; after the restart the job (its pid never
  // stored) is started again.
  if (!failure_.ok()) return;
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

void Daemon::Impl::SignalJob(JobId id, const exec::ProcessHandle& h, int sig) const {
  Status st = launcher_->Signal(h, sig);
  if (!st.ok()) spdlog::warn("job {}: {} not delivered: {}", id.value(), sigabbrev_np(sig), st.ToString());
}

// Polls every live job; ends those whose processes are all gone; escalates to SIGKILL.
void Daemon::Impl::Reap(Micros now, store::WriteBatch& b, Actions& act) {
  std::vector<JobId> gone;
  for (auto& [id, p] : procs_) {
    auto e = launcher_->Poll(p.handle);
    if (!e) {
      if (p.term_sent > 0 && !p.killed && now - p.term_sent >= opt_.grace) {
        SignalJob(id, p.handle, SIGKILL);
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
        SignalJob(id, p.handle, SIGTERM);
        p.term_sent = now;
      } else if (p.term_sent > 0 && !p.killed && now - p.term_sent >= opt_.grace) {
        SignalJob(id, p.handle, SIGKILL);
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
void Daemon::Impl::EndJob(JobId id, Proc p, Micros now, store::WriteBatch& b, Actions& act) {
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
  if (p.leader_exit->never_started && j.never_started_requeues < kMaxNeverStartedRequeues) {
    RequeueNeverStarted(j, "", b, act);
    // After the job's own records: the scheduler may start it again at once (StartSlice
    // updates the same record).
    Feed(sched::Requeue{now, id, j.reason}, b, act);
    return;
  }
  if (p.leader_exit->never_started) {
    // The same, again and again: something stops the daemon at this point every time (a
    // crash on this job's start?). Failing it keeps it from looping silently.
    j.state = JobState::kFailed;
    j.reason = fmt::format("never started: the daemon stopped between recording the start and "
                           "the go-ahead, so nothing ran; this happened {} times and it was "
                           "requeued {} times, the limit; resubmit it",
                           j.never_started_requeues + 1, j.never_started_requeues);
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

// Counted as started (the pid commit) but the go-ahead never came: nothing of the user's
// command ran, through no fault of the job. It goes back to pending in its old place (the
// scheduler keeps its priority, submit time and id; the caller tells it) with the same
// request, command and environment, and starts again when it fits. `also` adds to the reason.
void Daemon::Impl::RequeueNeverStarted(JobRecord& j, std::string_view also, store::WriteBatch& b,
                                       Actions& act) {
  ++j.never_started_requeues;
  j.exit_code.reset();
  j.exit_signal.reset();
  j.pid = 0;
  j.pid_start_ticks = 0;
  j.start_time = 0;
  BackToPending(j,
                fmt::format("requeued: the daemon stopped between recording the start and the "
                            "go-ahead, so nothing ran{} (requeue {} of at most {})",
                            also, j.never_started_requeues, kMaxNeverStartedRequeues),
                b, act);
}

void Daemon::Impl::BackToPending(JobRecord& j, std::string reason, store::WriteBatch& b, Actions& act) {
  j.state = JobState::kPending;
  j.reason = std::move(reason);
  ReleaseSlice(j, b);
  j.slice = SliceId();
  b.jobs.push_back(j);
  AddEvent(b, j.id, "requeue", fmt::format("job {} {}", j.id.value(), j.reason));
  act.log_lines.emplace_back(j.id, "gpuslice: " + j.reason);
}

// Tells the agent who owns a running job's processes: the job's process group (its
// leader's pid), its cgroup, its slice id in the environment, its MIG device.
void Daemon::Impl::BindSlice(JobId id) {
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
  bd.kind = s->second.kind;
  bd.held_milli = s->second.milli * static_cast<std::int64_t>(s->second.devices.size());
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
  if (const sched::QueueConfig* q = sched_->QueueOf(id)) bd.idle = q->idle;
  agent_->Bind(bd);
}

}  // namespace gpuslice::daemon
