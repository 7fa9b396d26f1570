#pragma once
// Journal codec: scheduler Events as one-line JSON, so the daemon can record every event it
// feeds the (pure, deterministic) Scheduler in the same store transaction as that event's
// effects, and rebuild the Scheduler exactly at restart by replaying them.
// Free functions; thread-safe.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sched/decisions.h"
#include "sched/events.h"
#include "sched/scheduler.h"

namespace gpuslice::daemon {

std::string EncodeEvent(const sched::Event& e);
Result<sched::Event> DecodeEvent(std::string_view text);

// Whether feeding `e` can change the Scheduler's state. Ticks and empty Samples cannot (they
// only move its clock forward, which the next recorded event does too), so they need not be
// journaled unless they produced decisions. Any slice's sample can (an idle-looking one ends
// an "unmeasured" stretch).
bool CanChangeState(const sched::Event& e);

// Journal compaction: the replay of a journal observed entry by entry, then rewritten without
// what can no longer change the Scheduler, so restart time does not grow with how long slices
// have been busy (a busy slice journals about one Sample a minute).
//
// What is dropped, and why that is exact. A Sample only sets its slices' activity fields
// (last_active, idle state back to active; no decision, no other state), and only a Tick reads
// them, and only for a slice whose timer is due: idle timer = last_active + the queue's idle
// window. So of the active Samples of one slice, one may be dropped as long as, at every
// journaled Tick, the slice's last kept Sample is recent enough that its idle timer is not due
// either (then the Tick passes the slice by in both journals); otherwise, or when the Tick ends
// the slice, the latest Sample is kept, making both states equal again. The first active Sample
// after an idle warning is kept (it changes the idle state, not only the time), as is the last
// Sample of every slice still running. Parts of slices that did not exist, and inactive parts,
// did nothing and go. Everything else is kept: Submits, Finishes, Cancels, Requeues, devices, MIG, Ticks
// (journaled only when they decided something). A Sample left with no part is dropped when that
// moves no clock (its time is not after the next kept entry's), else kept empty.
// An ActivityReport reads its slice's last_active too (whether the GPU was active since its busy
// budget began: sched::BusyBudgetStart), so the latest active Sample before each report of the
// slice is kept, as before a Tick that reads it.
// So a busy slice keeps about one Sample per idle window while Ticks are journaled (and one per
// journaled report of it), and none otherwise. Compact() replays its result and refuses unless it rebuilds the same scheduler
// state (jobs, slices, devices, pending order, clock; only the count of handled events differs).
// Not thread-safe; one compaction at a time.
class JournalCompactor {
 public:
  // Call for every entry in order: the event, the decisions it produced, and the scheduler
  // right after handling it.
  void Observe(const sched::Event& e, const std::vector<sched::Decision>& decisions,
               const sched::Scheduler& after);

  // The entries to keep (re-encoded where a Sample lost parts), given the observed
  // `entries`. Replays the result with `config` and `seed` and compares it with `full` (the
  // scheduler that replayed every entry); on any difference returns an Internal error and
  // nothing should be replaced.
  Result<std::vector<std::string>> Compact(const std::vector<std::string>& entries,
                                           const sched::Config& config, std::uint64_t seed,
                                           const sched::Scheduler& full) const;

 private:
  enum class Kind : std::uint8_t { kOther, kSample, kTick };
  struct Part {
    SliceId slice;
    bool active = false;  // shows activity under its queue's idle policy
    bool alive = false;   // the slice existed (else the scheduler ignored this part)
  };
  struct Life {
    std::size_t created = 0;
    std::size_t ended = static_cast<std::size_t>(-1);  // still running
    Micros window = 0;                                  // idle window; 0: idle policy off
  };
  std::vector<Kind> kinds_;
  std::vector<Micros> times_;  // the event's own time
  std::vector<Micros> clock_;  // the scheduler's clock after it
  std::vector<std::uint32_t> part_begin_ = {0};  // entry i's parts: [begin[i], begin[i+1])
  std::vector<Part> parts_;
  std::map<SliceId, Life> lives_;
  std::map<std::size_t, std::vector<SliceId>> idle_warned_;  // entry -> slices warned idle
  std::map<std::size_t, SliceId> reported_;                  // entry -> slice an activity report reads
  std::map<JobId, SliceId> running_;                         // job -> its live slice
};

// The Scheduler's observable state as text (jobs, slices, devices, pending order, clock), to
// compare two schedulers; not the count of events they handled.
std::string SchedulerDigest(const sched::Scheduler& s);

}  // namespace gpuslice::daemon
