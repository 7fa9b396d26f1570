#include "daemon/daemon.h"

#include <pwd.h>
#include <unistd.h>

#include <mutex>

#include <fmt/format.h>

#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {

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
// Daemon::Impl: construction and the control loop; its other parts are listed in daemon_impl.h.

Daemon::Impl::Impl(sched::Config config, DaemonOptions options, std::unique_ptr<store::Store> store,
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

Daemon::Impl::~Impl() {
  retention_.reset();
  opt_.report_store.reset();
}

std::string Daemon::Impl::Hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

void Daemon::Impl::Step() {
  std::unique_lock lock(mu_);
  if (!failure_.ok()) return;  // serve exits; nothing more is done
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

Status Daemon::Impl::Failure() const {
  std::shared_lock lock(mu_);
  return failure_;
}

Status Daemon::Impl::CheckConsistency() const {
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
  GPUSLICE_ASSIGN_OR_RETURN(std::string text, impl_->ListJobsText(q));
  return Json::parse(text);  // the daemon's own text: valid, and nested a few levels only
}
Result<std::string> Daemon::ListJobsText(const std::map<std::string, std::string>& q) const {
  return impl_->ListJobsText(q);
}
Result<Json> Daemon::GetJob(JobId id) const { return impl_->GetJob(id); }
Result<Json> Daemon::Cancel(const Caller& c, JobId id) { return impl_->Cancel(c, id); }
Result<Json> Daemon::ReportActivity(const Caller& c, JobId id, const Json& body) {
  return impl_->ReportActivity(c, id, body);
}
Json Daemon::Devices() const { return impl_->Devices(); }
Json Daemon::Queues() const { return impl_->Queues(); }
Json Daemon::Teams() const { return impl_->Teams(); }
Json Daemon::Whoami(const Caller& caller) const { return impl_->Whoami(caller); }
Json Daemon::Slices() const { return impl_->Slices(); }
Result<Json> Daemon::Events(std::int64_t after, JobId job, int limit) const {
  return impl_->Events(after, job, limit);
}
std::string Daemon::Metrics() const { return impl_->Metrics(); }
Result<std::string> Daemon::LogPath(JobId id) const { return impl_->LogPath(id); }
bool Daemon::JobEnded(JobId id) const { return impl_->JobEnded(id); }
Status Daemon::Authorize(const Caller& c, JobId id) const { return impl_->Authorize(c, id); }
bool Daemon::IsAdmin(const Caller& c) const { return impl_->IsAdmin(c); }
Result<Json> Daemon::Samples(JobId id) const { return impl_->Samples(id); }
Result<Json> Daemon::Report(const std::map<std::string, std::string>& q, const Caller& c) const {
  return impl_->Report(c, q);
}
Result<Json> Daemon::Whatif(const std::map<std::string, std::string>& q) const { return impl_->Whatif(q); }
Result<Json> Daemon::DeviceHistory(const std::map<std::string, std::string>& q) const {
  return impl_->DeviceHistory(q);
}
Result<Json> Daemon::Reconfigure(sched::Config config, const std::string& source) {
  return impl_->Reconfigure(std::move(config), source);
}
Json Daemon::ConfigInfo() const { return impl_->ConfigInfo(); }
Result<Json> Daemon::AdminDevice(const Caller& c, std::uint32_t index, std::string_view action,
                                 const Json& body) {
  return impl_->AdminDevice(c, index, action, body);
}
Result<Json> Daemon::AdminJob(const Caller& c, JobId id, std::string_view action, const Json& body) {
  return impl_->AdminJob(c, id, action, body);
}
Status Daemon::CheckConsistency() const { return impl_->CheckConsistency(); }
Status Daemon::Failure() const { return impl_->Failure(); }

}  // namespace gpuslice::daemon
