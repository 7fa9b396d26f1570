// The commit of a batch and its actions: every event fed to the scheduler is journaled in the
// same store transaction as its effects, and side effects (signals, log lines, MIG changes)
// happen only once that transaction is durable.
#include <malloc.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <iterator>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/text.h"
#include "daemon/daemon_impl.h"
#include "daemon/journal.h"

namespace gpuslice::daemon {
namespace {
namespace fs = std::filesystem;

// The events that make a job's life (and the devices' changes) in the daemon's log.
bool LogsLifecycle(const std::string& type) {
  static constexpr std::string_view kTypes[] = {"submit", "place",  "start",  "warn",   "unwarn",
                                                "stop",   "end",    "exit",   "reject", "cancel",
                                                "kill",   "fail",   "adopt",  "requeue", "drain",
                                                "reconfigure", "reserve", "device"};
  return std::find(std::begin(kTypes), std::end(kTypes), type) != std::end(kTypes);
}
}  // namespace

void Daemon::Impl::AddEvent(store::WriteBatch& b, JobId job, std::string type, std::string message) {
  // A message may quote a user's bytes (a path, a name); events are served as JSON text.
  b.events.push_back({0, Now(), job, std::move(type), EscapeInvalidUtf8(message)});
}

// Feeds one event to the scheduler and turns its decisions into records and actions.
void Daemon::Impl::Feed(const sched::Event& e, store::WriteBatch& b, Actions& act) {
  auto decisions = sched_->Handle(e);
  if (CanChangeState(e) || !decisions.empty()) {
    b.journal.push_back(EncodeEvent(e));
    ++journal_entries_;
  }
  for (const auto& d : decisions) Apply(d, b, act);
}

// Moves a batch waiting for the next commit (see Submit) in front of `b`, keeping the
// journal in the order the scheduler saw the events.
void Daemon::Impl::MergePending(store::WriteBatch& b) {
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

// Commits; then performs the side effects. A failed commit stops the daemon (CommitFailed):
// the in-memory scheduler is ahead of the store, and only a restart (replaying the store)
// makes them agree again. The batch's side effects are then never performed.
Status Daemon::Impl::CommitAndAct(store::WriteBatch& batch, Actions& act) {
  while (true) {
    if (!failure_.ok()) return failure_;
    MergePending(batch);
    // A job's life in the daemon's log (info): what was committed, in its events' words. The
    // frequent kinds ("wait" on every change of reason, "log" caps) stay in the store only.
    std::vector<std::string> lifecycle;
    for (const auto& e : batch.events) {
      if (LogsLifecycle(e.type)) lifecycle.push_back(e.message);
    }
    Status st = store_->Commit(batch);
    if (!st.ok()) return CommitFailed(st);
    for (const std::string& line : lifecycle) spdlog::info("{}", EscapeInvalidUtf8(line));
    for (const JobRecord& j : batch.jobs) Committed(j);
    batch = store::WriteBatch{};
    for (JobId id : act.terminate) {
      auto p = procs_.find(id);
      if (p == procs_.end()) continue;
      SignalJob(id, p->second.handle, SIGTERM);
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

void Daemon::Impl::Committed(const JobRecord& j) {
  ledger_.Record(j);
  {
    std::lock_guard lock(views_mu_);
    ended_views_.erase(j.id);
    if (store::IsTerminal(j.state)) ++views_generation_;  // only ended jobs' views are cached
  }
  if (!store::IsTerminal(j.state)) return;
  auto it = jobs_.find(j.id);
  if (it == jobs_.end()) return;
  const Bytes before = UserLedger::SubmittedBytes(it->second);
  it->second = store::PrivateCopy(it->second);
  released_bytes_ += before - UserLedger::SubmittedBytes(it->second);
  // A lot was dropped from the store (cancelled jobs' environments): give its pages back to the
  // file system now rather than at the next retention pass, and the heap's to the system.
  if (released_bytes_ >= 8 * kMiB) {
    released_bytes_ = 0;
    if (retention_) retention_->Nudge();
    malloc_trim(0);
  }
}

// The first failed commit: from then on nothing more is decided, committed or acted on (every
// entry point checks failure_), and serve, seeing Failure(), exits so that a restart recovers
// from the store. The decision to exit is serve's, not the library's.
Status Daemon::Impl::CommitFailed(const Status& st) {
  if (failure_.ok()) {
    failure_ = Unavailable(fmt::format(
        "store commit failed: {}; the daemon must restart to recover from the store", st.ToString()));
    spdlog::critical("{}", failure_.message());
  }
  return failure_;
}

}  // namespace gpuslice::daemon
