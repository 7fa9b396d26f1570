#pragma once
// Activity reports from outside the GPU (POST /v1/jobs/ID/activity, docs/api.md): the body's
// checks, the per-job rate limit, which reports go to the scheduler (and so into the journal)
// and the views of a job's report and idle state. The scheduler owns the rule
// (sched::IdlePolicy: reports only postpone a reclaim); this is the daemon's edge of it.
//
// Journal growth. A fed report is one journal entry. A report is fed when the scheduler has
// none for the slice, when it would withdraw an idle warning, when it says busy where the
// scheduler's copy says idle, or once the scheduler's copy is a quantum old (the same quantum
// as active samples): a flood adds at most about one entry per quantum per job. The daemon
// keeps the newest report as received for the views, so they are never a quantum behind.
//
// Not thread-safe: the daemon's mutex guards an ActivityDesk.

#include <cstdint>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/ids.h"
#include "core/status.h"
#include "core/units.h"
#include "sched/config.h"
#include "sched/events.h"
#include "sched/scheduler.h"

namespace gpuslice::daemon {

// A last_activity_us up to this far ahead of the daemon's clock is taken as now (clock skew
// between the reporter and the daemon); further ahead it is refused.
inline constexpr Micros kReportFutureSkew = kMinute;
// A last_activity_us before 2000-01-01 is refused: it is most likely seconds, not µs.
inline constexpr Micros kReportEarliest = 946684800LL * kSecond;
// Per job, at most this many reports per kReportBurstWindow; more get 409 (RESOURCE_EXHAUSTED).
inline constexpr int kReportBurst = 10;
inline constexpr Micros kReportBurstWindow = 10 * kSecond;
inline constexpr std::size_t kMaxSourceLength = 32;

// Parses and checks a report body received at `now` (fields: source, busy, last_activity_us,
// kernels, connections; docs/api.md). Errors name the field and the value.
Result<sched::ActivityReport> ParseActivityReport(const nlohmann::json& body, JobId job, Micros now);

class ActivityDesk {
 public:
  // The rate limit: OK, or ResourceExhausted naming the job and when to try again.
  Status Admit(JobId job, Micros now);
  // Whether to feed `e` to the scheduler (see the header comment). `v`: the job's slice.
  bool Due(const sched::SliceView& v, const sched::IdlePolicy& idle, const sched::ActivityReport& e,
           Micros quantum) const;
  void Remember(const sched::ActivityReport& e);
  // Drops what is kept for jobs that are not in `running` (bounded memory).
  void Prune(const std::set<JobId>& running);
  const sched::ActivityReport* Latest(JobId job) const;

 private:
  struct Bucket {
    Micros start = 0;
    int count = 0;
  };
  std::map<JobId, Bucket> buckets_;
  std::map<JobId, sched::ActivityReport> latest_;
};

// The job's "activity_report" (null when none): the newest report as received (`latest`), else
// the scheduler's copy (after a restart), with "fresh" (received less than report_stale ago)
// and "counted" (fresh and its source is one of the queue's idle signals).
nlohmann::json ActivityReportJson(const sched::ActivityReport* latest, const sched::SliceView* v,
                                  const sched::IdlePolicy& idle, Micros now);

// "active", "warned", "reported", "reclaimable" (idle, reclaimable on demand), "unmeasured".
std::string_view IdleStateName(const sched::SliceView& v);
// One line for people: e.g. "idle, reclaimable on demand" or "warned: reclaimed at the end of
// the grace period".
std::string IdleStateText(const sched::SliceView& v, const sched::IdlePolicy& idle);
// "always", "on-demand", or "off" when the queue does not reclaim idle slices.
std::string_view IdleReclaimMode(const sched::IdlePolicy& idle);
// The queue's idle signals as config names: e.g. ["sm", "memory", "jupyter"].
nlohmann::json IdleSignalsJson(const sched::IdlePolicy& idle);

}  // namespace gpuslice::daemon
