#pragma once
// Daemon: the single-host control loop behind `gpuslice serve`. It owns the Scheduler (pure),
// the Store (durable truth), the DeviceBackend and the Launcher, and applies the scheduler's
// decisions to real processes.
//
// Durability and recovery. Every event fed to the Scheduler that can change its state is
// journaled in the same store transaction as its effects (job/slice records, user-visible
// events); the API answers only after that commit. At start the Scheduler is rebuilt by
// replaying the journal (kept short by compaction, journal.h), then reconciled with the world: a job with a stored pid whose process
// (pid + start time) still lives is re-adopted; one whose processes are gone ends with the
// result its exec stub recorded (state/status/<job>.exit; `lost` if none was); a
// job chosen to start whose pid was never stored is started now (the launcher's go-ahead pipe
// guarantees it never ran); one whose pid was stored but whose go-ahead never came (its stub
// recorded never-started) is requeued in its old place, up to 3 times, then failed; a job being
// stopped is stopped again. Slices are freed only when
// their processes are gone.
//
// Thread-safety: every public method is thread-safe (one mutex; reads share it).

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "daemon/quotas.h"
#include "devices/backend.h"
#include "exec/launcher.h"
#include "sched/scheduler.h"
#include "store/store.h"

namespace gpuslice::daemon {

struct DaemonOptions {
  std::string state_dir;               // logs/ and mps/ live here (the store is opened apart)
  bool simulated = false;              // devices are the fake backend, not real GPUs
  Micros grace = 10 * kSecond;         // SIGTERM -> SIGKILL
  Micros sample_interval = kSecond;    // device sampling -> Sample events
  Micros downsample_window = kMinute;  // stored utilisation points are averages over this
  std::string cgroup_parent;           // cgroup v2 dir for per-job cgroups; "" : none
  // Each job's log is cut at this size, with a line saying so (see EnforceLogCaps in
  // daemon.cc for how and why); 0: no cap.
  Bytes max_log_size = 64 * kMiB;
  // MPS pipe and log directories (<mps_dir>/<device>/{pipe,log}), made reachable by every
  // user (mode 0755): they cannot live in the 0700 state directory. "" : <state_dir>/mps.
  std::string mps_dir;
  NodeId node = NodeId(1);
  // Where the config came from, for the log and GET /v1/config ("" : the built-in queues).
  std::string config_source;
  // Journal compaction (journal.h) once the journal holds this many entries and twice as
  // many as after the last compaction; at start and while running. 0: never.
  std::size_t compact_journal_at = 10000;
  // Fold and age out stored samples on a thread of the daemon's (store/retention.h); serve
  // turns it on.
  bool store_retention = false;
  // Read-only connections to the store for the history views (the usage report, events, a
  // job's samples: store::OpenSqliteReaders), so reads never hold up the daemon's commits; null:
  // they read the store.
  std::shared_ptr<store::Store> report_store;
  // What one user's unfinished jobs may hold (daemon/quotas.h).
  UserQuotas quotas;
  // Usage reports built at once: in total and per user; more are refused (409, try again).
  // Each runs on a thread of lower CPU priority, so reports never slow others' requests much.
  int max_reports = 2;
  int max_reports_per_user = 1;
};

// An authenticated API caller.
struct Caller {
  std::int64_t uid = -1;
  std::int64_t gid = -1;
};

using Json = nlohmann::json;
using WallClock = std::function<Micros()>;

class Daemon {
 public:
  Daemon(sched::Config config, DaemonOptions options, std::unique_ptr<store::Store> store,
         std::unique_ptr<devices::DeviceBackend> backend,
         std::unique_ptr<exec::Launcher> launcher, WallClock clock);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Recovery + device discovery. Call once before anything else.
  Status Start();
  // One turn of the control loop: reap and escalate, sample devices, Tick, deferred starts.
  void Step();

  // ---- API (bodies as JSON; errors name the field and value) ----
  // A body with "idempotency_key" that this caller already used answers that job, with
  // "deduplicated": true, instead of making another (docs/api.md).
  Result<Json> Submit(const Caller& caller, const Json& body);
  Result<Json> ListJobs(const std::map<std::string, std::string>& query) const;
  // The same listing as JSON text, most of it copied from ended jobs' views rendered once: the
  // daemon's lock is held only to collect them, never to render a year of history.
  Result<std::string> ListJobsText(const std::map<std::string, std::string>& query) const;
  Result<Json> GetJob(JobId id) const;
  Result<Json> Cancel(const Caller& caller, JobId id);
  // A session's activity from outside the GPU (docs/api.md): owner, root or admin; the job
  // must be running. Answers the job with its "activity_report".
  Result<Json> ReportActivity(const Caller& caller, JobId id, const Json& body);
  Json Devices() const;
  Json Queues() const;
  Json Teams() const;
  Json Slices() const;
  // Who the caller is, as the daemon sees it: {"user", "uid", "admin"} (root or a member of
  // the admin group), for pages that show "my jobs".
  Json Whoami(const Caller& caller) const;
  Result<Json> Events(std::int64_t after, JobId job, int limit) const;
  std::string Metrics() const;
  // Log file of a job and whether the job has ended (logs --follow stops then).
  Result<std::string> LogPath(JobId id) const;
  bool JobEnded(JobId id) const;
  // The job's GPU utilisation and memory over time (for `gpuslice profile --job`): the raw
  // per-sample points the daemon still holds in memory (the last kRecentPoints per job, lost
  // at restart) preceded by the store's downsampled averages of the job's slices.
  Result<Json> Samples(JobId id) const;
  // Every device's recent utilisation in buckets, for the web page (daemon/ui.h).
  Result<Json> DeviceHistory(const std::map<std::string, std::string>& query) const;
  // The usage report (report/report.h) for query since/from/to/by, from the store; at most
  // max_reports at once (max_reports_per_user for `caller`), else RESOURCE_EXHAUSTED.
  Result<Json> Report(const std::map<std::string, std::string>& query, const Caller& caller = {}) const;
  // The what-if over the daemon's recent history (whatif/dashboard.h: since/from/to, cached).
  Result<Json> Whatif(const std::map<std::string, std::string>& query) const;
  // OK when `caller` may act on (cancel, read the log of) job `id`: its owner, root, or a
  // member of the configured admin group.
  Status Authorize(const Caller& caller, JobId id) const;
  // Root or a member of the configured admin group.
  bool IsAdmin(const Caller& caller) const;
  bool simulated() const { return options_.simulated; }

  // ---- config reloads (reload.cc; `systemctl reload gpuslice`, serve's SIGHUP)
  // Puts `config` (valid: ParseConfig made it) in force for every decision from now on, as
  // sched::ConfigReload says, journaled so a restart replays it; logs what changed and every
  // queue's settings. Unchanged: nothing is journaled. Answers the new ConfigInfo() plus
  // "added", "removed" and "changed" queue names.
  Result<Json> Reconfigure(sched::Config config, const std::string& source);
  // The config in force: {"version", "loaded_at_us", "source", "queues": [names],
  // "retired_queues": [removed queues that still have jobs], "text": canonical TOML}.
  Json ConfigInfo() const;

  // ---- an admin's orders (admin.cc): root or the admin group only (else PermissionDenied);
  // each is journaled (it holds across restarts) with an "admin" event naming who.
  // `action` on device `index`: "drain" and "undrain" (body {"reason"}: optional), "mig" (body
  // {"mode": "on" | "off" | "auto"}); answers {"device": ...}.
  Result<Json> AdminDevice(const Caller& caller, std::uint32_t index, std::string_view action,
                           const Json& body);
  // `action` on job `id`: "hold" and "release" (pending jobs), "requeue" (a running job is
  // stopped and pending again in its old place); body {"reason"}: optional. Answers {"job"}.
  Result<Json> AdminJob(const Caller& caller, JobId id, std::string_view action, const Json& body);

  // Cross-checks the Scheduler, the in-memory records and the store (tests call it):
  // every active slice belongs to a live (not ended) job; the Scheduler's slices are active
  // in the store; no ended job has processes.
  Status CheckConsistency() const;

  // OK while the daemon can go on; else why it cannot: a store commit failed, so its memory
  // is ahead of the store. It then decides and does nothing more (Step returns at once, the
  // API's mutations answer this error) and the caller (serve) should exit, so that a restart
  // recovers from the store. Library code never exits the process itself.
  Status Failure() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  DaemonOptions options_;
};

// "uid 1000" -> "alice" (or "uid:1000" when unknown).
std::string UserName(std::int64_t uid);

}  // namespace gpuslice::daemon
