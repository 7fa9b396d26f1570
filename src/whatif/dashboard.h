#pragma once
// The daemon's side of GET /v1/whatif, shown on the dashboard: the built-in scenarios over the
// daemon's own recent history, bounded (at most 31 days and the newest `max_jobs` jobs) and
// cached, so that polling costs nothing and no caller can make the daemon replay more than one
// history at a time. Thread-safe.

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/units.h"
#include "sched/config.h"
#include "sim/openb.h"
#include "store/store.h"

namespace gpuslice::whatif {

// Query since=7d (default), or from=/to= (report/report.h's forms). One computation at a time:
// a second caller while one runs gets Unavailable, to retry; each answer is kept for `ttl`.
class DaemonWhatif {
 public:
  struct Options {
    std::size_t max_jobs = 20000;
    Micros ttl = 10 * kMinute;
    Micros max_period = 31 * 24 * kHour;
    int threads = 1;
  };
  DaemonWhatif();
  explicit DaemonWhatif(Options o);

  Result<nlohmann::json> Get(store::Store& store, const sched::Config& config, std::vector<sim::TraceNode> nodes,
                             const std::map<std::string, std::string>& query, Micros now);

 private:
  Options o_;
  std::mutex run_mu_;    // held while computing
  std::mutex cache_mu_;  // guards cache_
  struct Entry {
    nlohmann::json doc;
    Micros at = 0;
  };
  std::map<std::string, Entry> cache_;
};

}  // namespace gpuslice::whatif
