#include "whatif/dashboard.h"

#include <fmt/format.h>

#include "core/text.h"
#include "report/report.h"
#include "whatif/command.h"
#include "whatif/store_history.h"

namespace gpuslice::whatif {

DaemonWhatif::DaemonWhatif() : DaemonWhatif(Options{}) {}
DaemonWhatif::DaemonWhatif(Options o) : o_(o) {}

Result<nlohmann::json> DaemonWhatif::Get(store::Store& store, const sched::Config& config, std::vector<sim::TraceNode> nodes,
                                         const std::map<std::string, std::string>& query, Micros now) {
  for (const auto& [k, v] : query) {
    if (k != "since" && k != "from" && k != "to") {
      return InvalidArgument(fmt::format("query '{}': unknown parameter (known: since, from, to)", EscapeInvalidUtf8(k)));
    }
  }
  auto get = [&](const char* k) {
    auto it = query.find(k);
    return it == query.end() ? std::string() : it->second;
  };
  GPUSLICE_ASSIGN_OR_RETURN(report::Period period, report::ParsePeriod(get("since"), get("from"), get("to"), now));
  period.to = std::min(period.to, now);
  if (period.to - period.from > o_.max_period) {
    return InvalidArgument(fmt::format("period {} .. {}: longer than the {} the daemon replays (use `gpuslice whatif "
                                       "--state-dir` for more)", report::FormatTimePoint(period.from),
                                       report::FormatTimePoint(period.to), FormatDuration(o_.max_period)));
  }
  // Cached by the period, rounded to the minute, so that "since=7d" asked twice is one run.
  const std::string key = fmt::format("{}:{}", period.from / kMinute, period.to / kMinute);
  {
    std::lock_guard lock(cache_mu_);
    std::erase_if(cache_, [&](const auto& e) { return now - e.second.at >= o_.ttl; });
    if (auto it = cache_.find(key); it != cache_.end()) return it->second.doc;
  }
  std::unique_lock run(run_mu_, std::try_to_lock);
  if (!run.owns_lock()) return Unavailable("a what-if is being computed; try again in a few seconds");
  StoreHistoryOptions so;
  so.period = period;
  so.config = config;
  so.nodes = std::move(nodes);
  so.max_jobs = o_.max_jobs;
  so.source = "the daemon's history";
  GPUSLICE_ASSIGN_OR_RETURN(History h, HistoryFromStore(store, so));
  WhatifSpec spec = DefaultSpec();
  RunOptions ro;
  ro.threads = o_.threads;
  GPUSLICE_ASSIGN_OR_RETURN(nlohmann::json doc, BuildDocument(h, spec, ro));
  doc["computed_at"] = report::FormatTimePoint(now);
  std::lock_guard lock(cache_mu_);
  cache_[key] = Entry{doc, now};
  return doc;
}

}  // namespace gpuslice::whatif
