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

// Whether feeding `e` can change the Scheduler's state. Ticks and all-zero Samples cannot
// (they only move its clock forward, which the next recorded event does too), so they need
// not be journaled unless they produced decisions.
bool CanChangeState(const sched::Event& e);

// Journal compaction: the replay of a journal observed entry by entry, then rewritten without
// what can no longer change the Scheduler, so restart time does not grow with how long slices
// have been busy (a busy slice journals about one Sample a minute).
//
// What is dropped, and why that is exact: a Sample only sets its slices' activity fields
// (last_active, idle state; no decision, no other state), and only a Tick reads them. So one
// slice's part of a Sample is dead when, before any Tick that sees the slice alive, the slice
// is sampled active again (which overwrites those fields) or ends other than by a Tick.
// Everything else is kept: Submits, Finishes, Cancels, devices, MIG, and Ticks (they are
// journaled only when they decided something). A Sample left with no live part is dropped
// when that moves no clock (its time is not after the next kept entry's), else kept empty.
// The replay of the compacted journal yields the same scheduler state (jobs, slices, devices,
// pending order, clock; only the count of handled events differs): Compact() checks this
// itself and refuses to compact otherwise.
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
  std::vector<Kind> kinds_;
  std::vector<Micros> times_;
  std::vector<std::uint32_t> part_begin_ = {0};  // entry i's parts: [begin[i], begin[i+1])
  std::vector<Part> parts_;
  std::map<SliceId, std::size_t> created_, ended_;  // slice -> entry index
  std::map<JobId, SliceId> running_;                // job -> its live slice
};

// The Scheduler's observable state as text (jobs, slices, devices, pending order, clock), to
// compare two schedulers; not the count of events they handled.
std::string SchedulerDigest(const sched::Scheduler& s);

}  // namespace gpuslice::daemon
