#pragma once
// Daemon::Impl: the state behind the Daemon façade (daemon.h) and the declarations of its
// parts. Private to src/daemon; one file per responsibility defines its members:
//   daemon.cc      construction, the control loop (Step), the consistency check
//   recovery.cc    Start: rebuild the scheduler from the journal, reconcile devices and
//                  processes; journal compaction; the status directory
//   commit.cc      the commit of a batch and its actions (CommitAndAct), Feed, events
//   applier.cc     applying the scheduler's decisions (Apply, BeginStop, ReleaseSlice, ApplyMig)
//   job_runner.cc  starting, reaping and ending jobs' processes (over exec::Launcher)
//   job_logs.cc    the daemon's lines in job logs and the log cap
//   slice_env.cc   a slice's part of the job environment (CUDA, MPS, memcap, MIG UUID)
//   sampling.cc    the agent round each step, activity to the scheduler, downsampling
//   requests.cc    the API's mutations (Submit, Cancel) and the submit body's parsing
//   quotas.cc      per-user storage quotas (UserLedger), fed by every commit
//   callers.cc     what a caller may do: the admin group, a job's owner (Authorize), whoami
//   jobs_view.cc   GET /v1/jobs, /v1/jobs/ID: a job's view, the listing, its log path
//   history_view.cc events, a job's samples over time, the usage report (read from the store)
//   slices_view.cc GET /v1/slices, a slice's view (memory mechanism, utilisation, idle clock)
//   devices_view.cc GET /v1/devices and the devices' history for the web page
//   queues_view.cc GET /v1/queues (teams_view.cc: /v1/teams; whatif_view.cc: /v1/whatif)
//   wait_reason_json.cc  a pending job's reason (sched::WaitReason) as the API's JSON
//   metrics.cc     /metrics
//   reload.cc      config reloads (Reconfigure), the config's base for replays, its log lines
//   admin.cc       an admin's orders: drain, MIG mode, hold, requeue
// MIG actuation on a device is devices/mig_actuator.h.
//
// Thread-safety: as Daemon. Public entry points take mu_ (shared for reads); every other
// member requires mu_ held exclusively.

#include <sys/types.h>

#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/overloaded.h"
#include "agent/agent.h"
#include "api/submit_request.h"
#include "api/views.h"
#include "daemon/activity.h"
#include "daemon/cap_mechanism.h"
#include "daemon/daemon.h"
#include "daemon/journal.h"
#include "daemon/waiting.h"
#include "daemon/quotas.h"
#include "daemon/rw_mutex.h"
#include "store/codec.h"
#include "store/retention.h"
#include "store/store.h"
#include "whatif/dashboard.h"

namespace gpuslice::daemon {

using store::JobRecord;
using store::JobState;
using store::SliceRecord;

// The user (uid, primary gid) is in the Unix group named `group` (primary or supplementary).
// (callers.cc)
bool InGroup(std::int64_t uid, std::int64_t gid, const std::string& group);

class Daemon::Impl {
 public:
  Impl(sched::Config config, DaemonOptions options, std::unique_ptr<store::Store> store,
       std::unique_ptr<devices::DeviceBackend> backend, std::unique_ptr<exec::Launcher> launcher,
       WallClock clock);
  // Stops retention and closes the read-only connections first: the writer's connection, closed
  // last, then folds the WAL into the database and removes it (an ended job's environment may
  // still sit in old WAL frames until then).
  ~Impl();

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

  // ---- the façade's entry points (each takes mu_)
  // (recovery.cc)
  Status Start();
  // (daemon.cc)
  void Step();
  Status CheckConsistency() const;
  Status Failure() const;
  // (requests.cc)
  Result<Json> Submit(const Caller& c, const Json& body);
  Result<Json> Cancel(const Caller& c, JobId id);
  Result<Json> ReportActivity(const Caller& c, JobId id, const Json& body);
  // (jobs_view.cc)
  Result<std::string> ListJobsText(const std::map<std::string, std::string>& q) const;
  Result<Json> GetJob(JobId id) const;
  Result<std::string> LogPath(JobId id) const;
  bool JobEnded(JobId id) const;
  // (slices_view.cc)
  Json Slices() const;
  // (devices_view.cc)
  Json Devices() const;
  Result<Json> DeviceHistory(const std::map<std::string, std::string>& q) const;
  // (queues_view.cc, teams_view.cc)
  Json Queues() const;
  Json Teams() const;
  Json TeamsLocked() const;  // the same, under mu_ held (shared) by the caller
  // (history_view.cc)
  Result<Json> Events(std::int64_t after, JobId job, int limit) const;
  Result<Json> Samples(JobId id) const;
  Result<Json> Report(const Caller& c, const std::map<std::string, std::string>& query) const;
  // (callers.cc)
  Json Whoami(const Caller& c) const;
  Status Authorize(const Caller& c, JobId id) const;
  bool IsAdmin(const Caller& c) const;
  // (whatif_view.cc)
  Result<Json> Whatif(const std::map<std::string, std::string>& query) const;
  // (metrics.cc)
  std::string Metrics() const;
  // (reload.cc)
  Result<Json> Reconfigure(sched::Config config, const std::string& source);
  Json ConfigInfo() const;
  // (admin.cc)
  Result<Json> AdminDevice(const Caller& c, std::uint32_t index, std::string_view action, const Json& body);
  Result<Json> AdminJob(const Caller& c, JobId id, std::string_view action, const Json& body);

 private:
  Micros Now() const { return clock_(); }
  // (daemon.cc)
  static std::string Hostname();

  // (admin.cc)
  Status RequireAdmin(const Caller& c, std::string_view what) const;
  Status Order(const Caller& c, JobId job, const std::string& what, const sched::Event& e);

  // (reload.cc)
  // The config the stored journal's replay starts from (meta "journal_config"); a store made
  // before reloads existed has none, and its journal is replayed with the config given now,
  // which is then recorded.
  Status InitBaseConfig();
  // After the replay at start: the config given now, put in force when the journal left
  // another one (the file was edited while the daemon was down).
  void ApplyConfigAtStart(store::WriteBatch& b, Actions& act);
  void NoteConfig(Micros now, const std::string& source);
  Json ConfigInfoLocked() const;
  void LogConfig(std::string_view why) const;

  // (recovery.cc)
  Status InitSeed();
  bool CompactionDue() const;
  void CompactJournal(const std::vector<std::string>& journal, const JournalCompactor& c,
                      const sched::Scheduler& full);
  void CompactWhileRunning();
  static JobState StoppingFinal(const JobRecord& j);
  void RemoveVanishedDevices(Micros now, const std::vector<devices::DeviceInfo>& devs,
                             store::WriteBatch& b, Actions& act);
  // Jobs with a slice on `index` of which nothing ran, back to pending in the records (their
  // ids, for DeviceRemoved::requeue): never exec'd (starting), or exec'd but their stub got
  // no go-ahead and has ended so (within kMaxNeverStartedRequeues).
  std::vector<JobId> RequeueNothingRanOn(int index, const std::string& device, store::WriteBatch& b,
                                         Actions& act);
  // Where each job's exec stub records its exit status (exec/launcher.h, "Results"): only the
  // daemon's user (root) may write or read it, so a job cannot forge its own result.
  std::string StatusDir() const { return (std::filesystem::absolute(opt_.state_dir) / "status").string(); }
  Status MakeStatusDir() const;
  void ForgetStaleStatusFiles();

  // (commit.cc)
  void AddEvent(store::WriteBatch& b, JobId job, std::string type, std::string message);
  void Feed(const sched::Event& e, store::WriteBatch& b, Actions& act);
  void MergePending(store::WriteBatch& b);
  Status CommitAndAct(store::WriteBatch& batch, Actions& act);
  Status CommitFailed(const Status& st);
  // A job record just committed: the quota ledger follows it, an ended job's environment and
  // most of its argv leave memory as they left the store (store::PrivateCopy), and its rendered
  // view is dropped so the next listing renders it again.
  void Committed(const JobRecord& j);

  // (applier.cc)
  void Apply(const sched::Decision& d, store::WriteBatch& b, Actions& act);
  // `final` kPending: the job is requeued once its processes are gone.
  void BeginStop(JobId id, JobState final, std::string reason, store::WriteBatch& b, Actions& act);
  void ReleaseSlice(JobRecord& j, store::WriteBatch& b);
  void ReleaseSliceById(SliceId sid, store::WriteBatch& b);
  void ApplyMig(const sched::ReconfigureMig& r, store::WriteBatch& b, Actions& act);

  // (job_runner.cc)
  std::string StatusPath(JobId id) const;
  void LaunchReady();
  bool Blocked(JobId id, const SliceRecord& s) const;
  void Launch(JobRecord& j, const SliceRecord& s);
  void Reap(Micros now, store::WriteBatch& b, Actions& act);
  // Signals a job's process group; a refusal is logged (the stop goes on: SIGKILL follows after
  // the grace period, and Reap sees the processes gone whichever way they went).
  void SignalJob(JobId id, const exec::ProcessHandle& h, int sig) const;
  void EndJob(JobId id, Proc p, Micros now, store::WriteBatch& b, Actions& act);
  // A job whose start the daemon recorded but whose go-ahead never came (it stopped in
  // between) is requeued up to this many times; the next such start fails it (EndJob).
  static constexpr int kMaxNeverStartedRequeues = 3;
  // Its records only (the caller feeds the scheduler): pending again, the count, the reason
  // (with `also` after its first part), the event and the log line.
  void RequeueNeverStarted(JobRecord& j, std::string_view also, store::WriteBatch& b, Actions& act);
  // Back to pending in its old place because nothing of it ran: slice released, `reason` kept,
  // a "requeue" event and a line in its log. The caller tells the scheduler.
  void BackToPending(JobRecord& j, std::string reason, store::WriteBatch& b, Actions& act);
  void BindSlice(JobId id);

  // (job_logs.cc)
  void AppendToLog(JobId id, const std::string& path, const std::string& text);
  static off_t WriteAt(int fd, off_t at, const std::string& text);
  void EnforceLogCaps(store::WriteBatch& b);
  void AppendLog(JobId id, const std::string& line);

  // (slice_env.cc)
  static std::string SliceKey(SliceId id) { return fmt::format("slice-{}", id.value()); }
  // Before the scheduler exists: each MIG-capable model's profiles as the driver reports them
  // replace the catalogue's (a difference is logged; the driver wins).
  void AdoptDriverMigTables();
  // What holds shared and mps slices' memory on each device (cap_mechanism.h).
  void ChooseMechanisms(const std::vector<devices::DeviceInfo>& devs);
  // The slice's memory held by the device's mechanism: the driver's limits on the job's cgroup,
  // else the interposer's environment (refused, with why, when it cannot load).
  Status HoldSharedMemory(const JobRecord& j, const SliceRecord& s,
                          std::vector<std::pair<std::string, std::string>>& env, std::string* note);
  // A slice ends: its memcap segment goes; the last mps slice on a device stops its MPS server
  // (the next user's starts with their first mps slice there).
  void EndSliceMechanisms(const SliceRecord& s);
  const sched::DeviceView* SchedDevice(int index) const;
  std::int64_t SliceUid(const SliceRecord& s) const;
  bool MpsSliceOf(std::int64_t uid, int device, SliceId except) const;
  Result<std::string> MigUuid(const SliceRecord& s);
  Result<std::vector<std::pair<std::string, std::string>>> SliceEnv(const JobRecord& j,
                                                                    const SliceRecord& s,
                                                                    std::string* note);

  // (sampling.cc)
  void SampleDevices(Micros now, store::WriteBatch& b, Actions& act);
  const sched::QueueConfig* QueueOf(JobId job) const;
  Micros ActivityQuantum(const sched::IdlePolicy& idle) const;
  Micros LastActive(const sched::SliceView& v) const;
  // Stored points are means of the known figures; a window with no known utilisation is
  // stored as kUnknownPermille (the store's column is an integer), never as 0.
  static constexpr int kUnknownPermille = -1;
  static constexpr Bytes kUnknownBytes = -1;  // a stored point whose memory was never measured
  // A stored point says how long it covers and how much of that was measured (and measured
  // idle), so reports and compaction keep GPU-hours exact (store.h SampleRecord).
  void Downsample(Micros now, const std::string& subject, std::optional<int> permille,
                  std::optional<Bytes> used, store::WriteBatch& b, bool idle = false);
  void EmitDown(const std::string& subject, store::WriteBatch& b);
  // A slice's open point is stored when it ends (else its last minute would read unknown).
  void FlushDown(SliceId sid, store::WriteBatch& b);
  // A "wait" event each time a pending job's reason changes kind ("<kind>: <text>"), so the
  // report can count wait time by reason (report/report.h).
  void RecordWaitReasons(store::WriteBatch& b);

  // (requests.cc)
  // The request's site-dependent checks (queue, kind allowed there, amounts, time within the
  // queue's limit, model) into `j`; changes nothing else.
  Status ParseRequest(const api::SubmitRequest& req, JobRecord* j) const;
  // The team a submit of the caller runs in ([teams], docs/teams.md): the one the body names
  // (field 'team'), which must list the user or one of the user's groups; else the user's
  // default, else the first team (by name) that has the user by group; "" without one.
  // Reads only `tc` (a copy of config_.teams): called without mu_, as it may look groups up.
  static Result<std::string> TeamOfSubmit(const sched::TeamsConfig& tc, const std::optional<std::string>& named,
                                          const Caller& c,
                                          const std::string& user);
  // A submit whose idempotency key this uid already used: the earlier job's answer (or an error
  // when the request differs); nullopt when the key is new.
  std::optional<Result<Json>> Deduplicate(const JobRecord& j) const;
  static sched::JobRequest Request(const JobRecord& j);

  // (callers.cc)
  Status AuthorizeLocked(const Caller& c, const JobRecord& j) const;
  bool IsAdminLocked(const Caller& c) const;  // root or the config's admin group; mu_ held

  // (jobs_view.cc)
  // `places`: every pending job's place (waiting.h), when the caller has them; else computed.
  Json JobJson(const JobRecord& j, const std::map<JobId, QueuePlace>* places = nullptr) const;
  // What the record alone says (no live state, no clock): an ended job's whole view but its
  // queue's idle_reclaim_mode and its MIG instance text.
  static api::JobView RecordView(const JobRecord& j);
  std::optional<std::string> MigInstanceText(const JobRecord& j, const sched::QueueConfig* q) const;

  // (slices_view.cc)
  // The daemon's one idle clock of a running slice: since when it is idle by every counting
  // signal (the GPU as last seen, fresh activity reports); nullopt while unmeasured. `ps`,
  // `show`, the dashboard and /metrics all read it.
  std::optional<Micros> IdleSince(const sched::SliceView& v, const sched::QueueConfig* q, Micros now) const;
  void IdleClock(const sched::SliceView& v, const sched::QueueConfig* q, Micros now,
                 api::SliceView::Figures& o) const;
  static api::SliceView SliceViewOf(const SliceRecord& s);
  // A running slice's cap mechanism and MPS user, as the views show them.
  void Mechanisms(api::SliceView& v) const;

  // (devices_view.cc)
  Json DevicesLocked() const;

  // (wait_reason_json.cc)
  static Json WaitReasonJson(const sched::WaitReason& w, const std::string& queue);

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

  sched::Config config_;       // in force (the scheduler's, but for queues of removed ones' jobs)
  sched::Config base_config_;  // the journal's replay starts from this (InitBaseConfig)
  std::string config_version_;
  std::string config_source_;
  Micros config_loaded_at_ = 0;
  DaemonOptions opt_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<devices::DeviceBackend> backend_;
  std::unique_ptr<exec::Launcher> launcher_;
  WallClock clock_;

  mutable WriterFirstMutex mu_;
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
  memcap::InterposerCheck interposer_;            // checked at Start
  std::map<int, GpuCapMechanism> cap_mechanisms_;  // per device, chosen at Start
  std::map<SliceId, std::string> slice_mechanism_;  // what holds each running slice's memory
  // GET /v1/whatif's computation and cache (thread-safe itself: needs no mu_).
  mutable whatif::DaemonWhatif whatif_;
  std::map<int, devices::DeviceSample> latest_;
  std::map<SliceId, Micros> seen_active_;  // last sample showing activity, every round
  std::map<SliceId, SliceFigures> slice_util_;  // the agent's last round, per running slice
  ActivityDesk activity_;  // activity reports as received, rate limits
  std::unique_ptr<agent::Agent> agent_;          // samples backend_; bound to running jobs
  std::map<std::string, Down> down_;
  Micros last_sample_ = 0;
  std::map<JobId, off_t> log_limit_;  // logs cut at their cap: the size they are kept at
  std::size_t journal_entries_ = 0;  // in the store (counted as they are journaled)
  std::size_t compacted_size_ = 0;   // after the last compaction
  // A store commit failed: the in-memory scheduler is ahead of the store, and only a restart
  // (replaying the store) makes them agree again. From then on nothing is decided, committed
  // or acted on; serve sees Failure() and exits so that a restart recovers.
  Status failure_;
  std::map<JobId, std::string> wait_kind_;  // pending jobs: the reason kind last recorded
  UserLedger ledger_;  // unfinished jobs per user, for the quotas
  std::map<std::pair<std::int64_t, std::string>, JobId> submit_keys_;  // (uid, idempotency key)
  Bytes released_bytes_ = 0;  // of ended jobs' env/argv since the store was last asked to shrink
  // Ended jobs' views, rendered once (an ended job never changes): under views_mu_, which
  // readers take while they hold mu_ shared; writers erase an entry when they commit its job.
  mutable std::mutex views_mu_;
  mutable std::map<JobId, std::shared_ptr<const std::string>> ended_views_;
  std::uint64_t views_generation_ = 0;  // bumped at every committed ended job's record (views_mu_)
  // Reports being built, in total and per uid (Report's gate).
  mutable std::mutex reports_mu_;
  mutable int reports_running_ = 0;
  mutable std::map<std::int64_t, int> reports_by_uid_;
  std::unique_ptr<store::RetentionWorker> retention_;  // last: stops before store_ goes
};

}  // namespace gpuslice::daemon
