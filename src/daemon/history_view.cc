// The history views, read from the store outside the daemon's lock (on serve's read-only
// connections where it opened them): events, a job's samples over time, the usage report.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "daemon/daemon_impl.h"
#include "report/report.h"

namespace gpuslice::daemon {

Result<Json> Daemon::Impl::Events(std::int64_t after, JobId job, int limit) const {
  // From a read-only connection where serve opened them: reads never wait for, nor hold up,
  // the daemon's commits.
  store::Store& from = opt_.report_store ? *opt_.report_store : *store_;
  GPUSLICE_ASSIGN_OR_RETURN(auto evs, from.ListEvents(after, job, limit));
  Json arr = Json::array();
  for (const auto& e : evs) {
    arr.push_back(api::EventView{e.seq, e.time, e.job.value(), e.type, e.message}.ToJson());
  }
  return Json{{"events", arr}, {"simulated", opt_.simulated}};
}

Result<Json> Daemon::Impl::Samples(JobId id) const {
  // What the answer needs from memory is copied under the lock; the store is read after it,
  // on a read-only connection where serve opened one (reads of history never hold the lock).
  JobRecord j;
  Json job_json;
  std::map<int, devices::DeviceInfo> device_info;
  std::optional<std::deque<Point>> recent;
  {
    std::shared_lock lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound(fmt::format("job {}: no such job", id.value()));
    j = it->second;
    job_json = JobJson(j);
    device_info = device_info_;
    if (auto r = recent_.find(id); r != recent_.end()) recent = r->second;
  }
  store::Store& from = opt_.report_store ? *opt_.report_store : *store_;
  // Every slice the job has held (a preempted job may have had several); the store has
  // ended ones too.
  GPUSLICE_ASSIGN_OR_RETURN(auto all, from.ListSlices(false));
  std::vector<SliceRecord> mine;
  for (const auto& s : all) {
    if (s.job == id) mine.push_back(s);
  }
  Json slices = Json::array();
  Json total = nullptr;  // the latest slice's memory; null when a device's size is unknown
  std::string model;
  for (const auto& s : mine) {
    // A capped slice's memory is its cap; an uncapped one's the sum of its devices', unknown
    // (null) when any of them is (a partial sum would pass for a measurement).
    std::optional<Bytes> cap = s.memory_cap;
    if (*cap <= 0) {
      for (int d : s.devices) {
        auto di = device_info.find(d);
        if (di == device_info.end() || !di->second.memory_total.ok()) {
          cap.reset();
          break;
        }
        *cap += di->second.memory_total.value();
      }
    }
    const Json cap_json = cap && *cap > 0 ? Json(*cap) : Json(nullptr);
    total = cap_json;
    for (int d : s.devices) {
      auto di = device_info.find(d);
      if (di != device_info.end() && model.empty()) model = di->second.name;
    }
    slices.push_back({{"id", s.id.value()}, {"kind", SliceKindName(s.kind)}, {"devices", s.devices},
                      {"memory_total", cap_json}});
  }
  Micros first_raw = recent && !recent->empty() ? recent->front().t : std::numeric_limits<Micros>::max();
  std::vector<std::tuple<Micros, std::optional<int>, std::optional<Bytes>, bool>> pts;
  for (const auto& s : mine) {
    GPUSLICE_ASSIGN_OR_RETURN(auto stored,
                              from.ListSamples(fmt::format("slice/{}", s.id.value()),
                                                  j.submit_time));
    for (const auto& p : stored) {
      if (p.time >= first_raw) continue;
      pts.emplace_back(p.time, p.util_permille == kUnknownPermille ? std::nullopt : std::optional(p.util_permille),
                       p.memory_used < 0 ? std::nullopt : std::optional(p.memory_used), false);
    }
  }
  if (recent) {
    for (const auto& p : *recent) pts.emplace_back(p.t, p.util_permille, p.used, true);
  }
  std::sort(pts.begin(), pts.end());
  Json samples = Json::array();
  for (const auto& [t, u, used, raw] : pts) {
    samples.push_back({{"t", t}, {"util_permille", u ? Json(*u) : Json(nullptr)}, {"memory_used", used ? Json(*used) : Json(nullptr)},
                       {"downsampled", !raw}});
  }
  return Json{{"job", std::move(job_json)},
              {"simulated", opt_.simulated},
              {"device_model", model},
              {"memory_total", total},
              {"slices", slices},
              {"sample_interval_us", opt_.sample_interval},
              {"downsample_window_us", opt_.downsample_window},
              {"samples", samples}};
}

namespace {
// Runs `fn` on a thread of its own at a lower CPU priority (nice 10) and waits for it: a report
// reads a year of history (about a second of CPU), and on a busy host other users' requests
// should not queue behind it for the CPU. A thread of its own, because an unprivileged
// process may lower a thread's priority but not raise it back.
template <class F>
auto AtLowPriority(F fn) -> decltype(fn()) {
  std::optional<decltype(fn())> out;
  std::thread t([&] {
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
    out.emplace(fn());
  });
  t.join();
  return *std::move(out);
}
}  // namespace

Result<Json> Daemon::Impl::Report(const Caller& c, const std::map<std::string, std::string>& query) const {
  GPUSLICE_ASSIGN_OR_RETURN(report::ReportOptions o, report::OptionsFromQuery(query, Now()));
  {
    std::shared_lock lock(mu_);
    o.devices = static_cast<int>(device_info_.size());
  }
  o.simulated = opt_.simulated;
  // A report costs about a second of CPU and a scan of the history: a few at a time in total and
  // one per user, so a user looping reports cannot take the daemon's workers or CPU (the rest
  // are refused at once, holding nothing, and may try again).
  {
    std::lock_guard lock(reports_mu_);
    int& mine = reports_by_uid_[c.uid];
    if (reports_running_ >= opt_.max_reports || mine >= opt_.max_reports_per_user) {
      const bool total = reports_running_ >= opt_.max_reports;
      if (mine == 0) reports_by_uid_.erase(c.uid);
      return ResourceExhausted(
          total ? fmt::format("{} usage reports are being built, the most at once; try again in a few seconds",
                              reports_running_)
                : fmt::format("uid {} already has {} usage report(s) being built, the most per user; try "
                              "again when it is done", c.uid, mine));
    }
    ++mine;
    ++reports_running_;
  }
  // Outside the daemon's lock: the store is thread-safe, and the report reads only it; on its
  // own connection where serve opened one, so the daemon's commits do not wait for it.
  auto r = AtLowPriority([&] { return report::BuildReport(opt_.report_store ? *opt_.report_store : *store_, o); });
  {
    std::lock_guard lock(reports_mu_);
    --reports_running_;
    if (auto it = reports_by_uid_.find(c.uid); it != reports_by_uid_.end() && --it->second <= 0) {
      reports_by_uid_.erase(it);
    }
  }
  return r;
}

}  // namespace gpuslice::daemon
