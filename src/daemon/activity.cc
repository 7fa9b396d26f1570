#include "daemon/activity.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "api/bounded_json.h"
#include "core/text.h"

namespace gpuslice::daemon {
namespace {

using nlohmann::json;

// A count field: a non-negative integer (at most a million: no session has more kernels).
Status CountField(const json& body, const char* name, int& out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > 1000000) {
    return InvalidArgument(fmt::format("field '{}': value '{}' must be an integer 0..1000000", name,
                                       api::ShownJson(*it)));
  }
  out = static_cast<int>(it->get<std::int64_t>());
  return Status::Ok();
}

}  // namespace

Result<sched::ActivityReport> ParseActivityReport(const json& body, JobId job, Micros now) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  static constexpr const char* kKnown[] = {"source", "busy", "last_activity_us", "kernels", "connections"};
  for (const auto& item : body.items()) {
    const std::string& k = item.key();  // a plain name: clang 14 (the fuzz build) captures no binding
    if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* n) { return k == n; }) ==
        std::end(kKnown)) {
      return InvalidArgument(fmt::format("field '{}': unknown (expected source, busy, last_activity_us, "
                                         "kernels, connections)", api::ShownText(k)));
    }
  }
  sched::ActivityReport e;
  e.now = now;
  e.job = job;
  auto src = body.find("source");
  if (src == body.end() || !src->is_string()) {
    return InvalidArgument(fmt::format("field 'source': {} is not a name such as \"jupyter\" (required; "
                                       "[a-z0-9_-], 1 to {} characters)",
                                       src == body.end() ? "missing" : "value '" + api::ShownJson(*src) + "'",
                                       kMaxSourceLength));
  }
  e.source = src->get<std::string>();
  const bool name_ok = !e.source.empty() && e.source.size() <= kMaxSourceLength &&
                       std::all_of(e.source.begin(), e.source.end(), [](char c) {
                         return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
                       });
  if (!name_ok) {
    return InvalidArgument(fmt::format("field 'source': value '{}' must be [a-z0-9_-], 1 to {} characters",
                                       api::ShownText(e.source), kMaxSourceLength));
  }
  auto busy = body.find("busy");
  if (busy == body.end() || !busy->is_boolean()) {
    return InvalidArgument(fmt::format("field 'busy': {} must be true or false (required)",
                                       busy == body.end() ? "missing" : "value '" + api::ShownJson(*busy) + "'"));
  }
  e.busy = busy->get<bool>();
  if (auto la = body.find("last_activity_us"); la != body.end() && !la->is_null()) {
    if (!la->is_number_integer()) {
      return InvalidArgument(fmt::format("field 'last_activity_us': value '{}' must be an integer "
                                         "(microseconds since the Unix epoch)", api::ShownJson(*la)));
    }
    // Unsigned values above INT64_MAX are refused here too (is_number_integer accepts them).
    if (la->is_number_unsigned() && la->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<Micros>::max())) {
      return InvalidArgument(fmt::format("field 'last_activity_us': value '{}' is out of range", api::ShownJson(*la)));
    }
    const Micros t = la->get<Micros>();
    if (t < kReportEarliest) {
      return InvalidArgument(fmt::format("field 'last_activity_us': value '{}' is before 2000-01-01 (expected "
                                         "microseconds since the Unix epoch, not seconds)", t));
    }
    if (t > now + kReportFutureSkew) {
      return InvalidArgument(fmt::format("field 'last_activity_us': value '{}' is {} ahead of the daemon's "
                                         "clock (at most {} of skew is taken as now)", t,
                                         FormatDuration(t - now), FormatDuration(kReportFutureSkew)));
    }
    e.last_activity = std::min(t, now);  // a little skew ahead: now
  }
  GPUSLICE_RETURN_IF_ERROR(CountField(body, "kernels", e.kernels));
  GPUSLICE_RETURN_IF_ERROR(CountField(body, "connections", e.connections));
  return e;
}

Status ActivityDesk::Admit(JobId job, Micros now) {
  Bucket& b = buckets_[job];
  if (now - b.start >= kReportBurstWindow || now < b.start) b = Bucket{now, 0};
  if (b.count >= kReportBurst) {
    return ResourceExhausted(fmt::format("job {}: too many activity reports (at most {} per {}); try again "
                                         "in {}", job.value(), kReportBurst, FormatDuration(kReportBurstWindow),
                                         FormatDuration(b.start + kReportBurstWindow - now)));
  }
  ++b.count;
  return Status::Ok();
}

bool ActivityDesk::Due(const sched::SliceView& v, const sched::IdlePolicy& idle, const sched::ActivityReport& e,
                       Micros quantum) const {
  if (!v.report) return true;
  if (e.now - v.report->received >= quantum) return true;
  if (e.busy && !v.report->busy) return true;
  if (v.idle != sched::IdleState::kActive && idle.CountsReports(e.source)) {
    // Would it withdraw the warning? The same test as the scheduler's, on a copy.
    sched::SliceView after = v;
    after.report = sched::SliceReport{e.source, e.busy, e.last_activity, e.kernels, e.connections, e.now,
                                      sched::BusyBudgetStart(v, e.busy, e.now)};
    return e.now - sched::EffectiveLastActive(idle, after, e.now) < idle.window;
  }
  return false;
}

void ActivityDesk::Remember(const sched::ActivityReport& e) { latest_[e.job] = e; }

void ActivityDesk::Prune(const std::set<JobId>& running) {
  std::erase_if(latest_, [&](const auto& kv) { return !running.contains(kv.first); });
  std::erase_if(buckets_, [&](const auto& kv) { return !running.contains(kv.first); });
}

const sched::ActivityReport* ActivityDesk::Latest(JobId job) const {
  auto it = latest_.find(job);
  return it == latest_.end() ? nullptr : &it->second;
}

json ActivityReportJson(const sched::ActivityReport* latest, const sched::SliceView* v,
                        const sched::IdlePolicy& idle, Micros now) {
  sched::SliceReport r;
  if (latest != nullptr && (v == nullptr || !v->report || latest->now >= v->report->received)) {
    r = sched::SliceReport{latest->source, latest->busy, latest->last_activity, latest->kernels,
                           latest->connections, latest->now, 0};
  } else if (v != nullptr && v->report) {
    r = *v->report;
  } else {
    return nullptr;
  }
  const bool fresh = now - r.received < idle.report_stale;
  return json{{"source", r.source},
              {"busy", r.busy},
              {"last_activity_us", r.last_activity >= 0 ? json(r.last_activity) : json()},
              {"kernels", r.kernels >= 0 ? json(r.kernels) : json()},
              {"connections", r.connections >= 0 ? json(r.connections) : json()},
              {"received_us", r.received},
              {"fresh", fresh},
              {"counted", fresh && idle.enabled && idle.CountsReports(r.source)}};
}

std::string_view IdleStateName(const sched::SliceView& v) {
  switch (v.idle) {
    case sched::IdleState::kWarned: return "warned";
    case sched::IdleState::kReported: return "reported";
    case sched::IdleState::kReclaimable: return "reclaimable";
    case sched::IdleState::kActive: break;
  }
  return v.unmeasured ? "unmeasured" : "active";
}

std::string IdleStateText(const sched::SliceView& v, const sched::IdlePolicy& idle) {
  switch (v.idle) {
    case sched::IdleState::kWarned:
      return idle.reclaim == sched::IdleReclaim::kOnDemand
                 ? "warned: idle, reclaimable on demand once the grace period ends"
                 : "warned: reclaimed when the grace period ends unless used";
    case sched::IdleState::kReported: return "idle (reported, not reclaimed)";
    case sched::IdleState::kReclaimable:
      return "idle, reclaimable on demand (reclaimed when a waiting job needs the room)";
    case sched::IdleState::kActive: break;
  }
  return v.unmeasured ? "unmeasured (no usable signal; not reclaimed for idleness)" : "active";
}

std::string_view IdleReclaimMode(const sched::IdlePolicy& idle) {
  if (!idle.enabled || idle.action != sched::ReclaimAction::kReclaim) return "off";
  return sched::IdleReclaimName(idle.reclaim);
}

json IdleSignalsJson(const sched::IdlePolicy& idle) {
  json a = json::array();
  if (idle.activity.sm_utilisation) a.push_back("sm");
  if (idle.activity.memory_traffic) a.push_back("memory");
  if (idle.activity.process_presence) a.push_back("processes");
  for (const std::string& s : idle.report_sources) a.push_back(s);
  return a;
}

}  // namespace gpuslice::daemon
