// Daemon recovery (daemon.h, "Durability and recovery"): Start rebuilds the scheduler from the
// journal, reconciles it with the devices and the processes that are (or are not) there, and
// keeps the journal short by compaction (journal.h).
#include <algorithm>
#include <filesystem>
#include <random>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/daemon_impl.h"
#include "daemon/journal.h"

namespace gpuslice::daemon {
namespace {
namespace fs = std::filesystem;
}  // namespace

Status Daemon::Impl::Start() {
  std::unique_lock lock(mu_);
  Micros now = Now();
  GPUSLICE_RETURN_IF_ERROR(InitSeed());
  AdoptDriverMigTables();
  GPUSLICE_RETURN_IF_ERROR(InitBaseConfig());
  sched_ = std::make_unique<sched::Scheduler>(base_config_, seed_);
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
    ledger_.Record(j);
    if (!j.idempotency_key.empty()) submit_keys_[{j.uid, j.idempotency_key}] = j.id;
    jobs_[j.id] = store::PrivateCopy(j);  // as stored already, unless an older version kept more
  }
  GPUSLICE_ASSIGN_OR_RETURN(auto slices, store_->ListSlices(true));
  for (auto& s : slices) slices_[s.id] = std::move(s);
  spdlog::info("recovered {} journal entries, {} jobs, {} active slices", journal.size(),
               jobs_.size(), slices_.size());

  store::WriteBatch batch;
  Actions act;
  // The config given now, if the journal left another one in force.
  ApplyConfigAtStart(batch, act);
  // 2. Devices: the backend's list is the truth. Those the scheduler knows that are gone (or
  // replaced by another device at their index) are removed first, so nothing is placed on
  // them; then the new ones are added.
  GPUSLICE_ASSIGN_OR_RETURN(auto devs, backend_->ListDevices());
  ChooseMechanisms(devs);
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
    // Memory set aside before shares are cut: the driver's own figure where it gives one.
    const sched::DeviceReserve reserve = sched::MemoryReserveFor(config_, d.model, d.memory_reserved.optional());
    ev.reserved_memory = reserve.driver_reserved;
    ev.context_reserve = reserve.context_reserve;
    if (d.model != nullptr) {
      spdlog::info("device {} ({}): {} kept by the driver, {} per process context set aside ({})", d.index.value(),
                   d.model->name, FormatBytes(reserve.driver_reserved), FormatBytes(reserve.context_reserve),
                   reserve.source);
    }
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

Status Daemon::Impl::InitSeed() {
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
bool Daemon::Impl::CompactionDue() const {
  return opt_.compact_journal_at > 0 &&
         journal_entries_ >= std::max(opt_.compact_journal_at, 2 * compacted_size_);
}

// Replaces the stored journal by its compaction; `full` replayed all of `journal`. On any
// error the full journal stays (and is not retried until it has doubled).
void Daemon::Impl::CompactJournal(const std::vector<std::string>& journal, const JournalCompactor& c,
                    const sched::Scheduler& full) {
  compacted_size_ = journal_entries_ = journal.size();
  auto kept = c.Compact(journal, base_config_, seed_, full);
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
void Daemon::Impl::CompactWhileRunning() {
  auto journal = store_->ReadJournal();
  if (!journal.ok()) {
    spdlog::error("journal compaction: {}", journal.status().ToString());
    compacted_size_ = journal_entries_;
    return;
  }
  sched::Scheduler fresh(base_config_, seed_);
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

JobState Daemon::Impl::StoppingFinal(const JobRecord& j) {
  if (j.reason.rfind("idle", 0) == 0) return JobState::kReclaimed;
  if (j.reason.rfind("time limit", 0) == 0) return JobState::kTimedOut;
  if (j.reason.rfind("preempted", 0) == 0) return JobState::kPending;
  if (j.reason.rfind("cancelled", 0) == 0) return JobState::kCancelled;
  return JobState::kFailed;
}

// Recovery: devices the scheduler knows (from the journal) that the backend no longer lists
// at the same index with the same UUID and model vanished while the daemon was down. They
// are removed from scheduling; their slices' jobs are stopped (Stop, device lost) but for
// those of which nothing ran there, which are requeued (RequeueNothingRanOn), and pending
// jobs that can no longer ever fit are rejected with the reason. This runs before the jobs'
// processes are reconciled (Start, step 3), so a job's never-started end is read here.
void Daemon::Impl::RemoveVanishedDevices(Micros now, const std::vector<devices::DeviceInfo>& devs,
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
    // Read per device, just before its removal: a job requeued from an earlier one may have
    // been placed on this one since (and, never exec'd, goes back again).
    sched::DeviceRemoved ev{now, ref, {}};
    ev.requeue = RequeueNothingRanOn(static_cast<int>(ref.index.value()),
                                     fmt::format("{} ({})", ref.index.value(),
                                                 sched_->devices().at(ref).uuid),
                                     b, act);
    Feed(ev, b, act);
  }
}

std::vector<JobId> Daemon::Impl::RequeueNothingRanOn(int index, const std::string& device,
                                                     store::WriteBatch& b, Actions& act) {
  std::vector<JobId> out;
  for (auto& [id, j] : jobs_) {
    if (j.state != JobState::kStarting && j.state != JobState::kRunning) continue;
    auto s = slices_.find(j.slice);
    if (s == slices_.end() ||
        std::find(s->second.devices.begin(), s->second.devices.end(), index) == s->second.devices.end()) {
      continue;
    }
    if (j.state == JobState::kStarting) {
      // Placed, never exec'd (no pid was stored): nothing ran, and nothing counts against
      // the job.
      to_launch_.erase(id);
      BackToPending(j, fmt::format("requeued: its device {} vanished before the job started, so "
                                   "nothing ran", device),
                    b, act);
      out.push_back(id);
      continue;
    }
    // Running in the records (its pid was stored): requeued only if its stub has ended saying
    // it never got the go-ahead. One still exiting (or one that ran) is stopped, device lost.
    if (j.pid <= 0 || procs_.contains(id) || j.never_started_requeues >= kMaxNeverStartedRequeues) continue;
    exec::ProcessHandle h{j.pid, j.pid_start_ticks, true, StatusPath(id)};
    if (launcher_->StillAlive(h)) continue;
    auto e = launcher_->Poll(h);
    if (!e || !e->never_started) continue;
    act.forget_status.push_back(id);
    RequeueNeverStarted(j, fmt::format(", and its device {} vanished while the daemon was down", device),
                        b, act);
    out.push_back(id);
  }
  return out;
}

Status Daemon::Impl::MakeStatusDir() const {
  std::error_code ec;
  fs::create_directories(StatusDir(), ec);
  if (!ec) fs::permissions(StatusDir(), fs::perms::owner_all, ec);
  if (ec) return Internal(fmt::format("status directory '{}': {}", StatusDir(), ec.message()));
  return Status::Ok();
}

// Status files of ended jobs left by a crash between the end's commit and their removal.
void Daemon::Impl::ForgetStaleStatusFiles() {
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

}  // namespace gpuslice::daemon
