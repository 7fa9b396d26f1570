#pragma once
// Journal codec: scheduler Events as one-line JSON, so the daemon can record every event it
// feeds the (pure, deterministic) Scheduler in the same store transaction as that event's
// effects, and rebuild the Scheduler exactly at restart by replaying them.
// Free functions; thread-safe.

#include <string>
#include <string_view>

#include "core/status.h"
#include "sched/events.h"

namespace gpuslice::daemon {

std::string EncodeEvent(const sched::Event& e);
Result<sched::Event> DecodeEvent(std::string_view text);

// Whether feeding `e` can change the Scheduler's state. Ticks and empty Samples cannot (they
// only move its clock forward, which the next recorded event does too), so they need not be
// journaled unless they produced decisions. Any slice's sample can (an idle-looking one ends
// an "unmeasured" stretch).
bool CanChangeState(const sched::Event& e);

}  // namespace gpuslice::daemon
