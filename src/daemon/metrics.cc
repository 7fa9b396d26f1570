// /metrics: the agent's device and slice families (dcgm-exporter names) and the daemon's own
// gpuslice_* families for queues, jobs and reclaim, in base units.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {

std::string Daemon::Impl::Metrics() const {
  std::shared_lock lock(mu_);
  Micros now = Now();
  std::string out;
  auto head = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  out += fmt::format("# gpuslice daemon metrics{}\n",
                     opt_.simulated ? " -- SIMULATED devices (no NVIDIA driver)" : "");
  head("gpuslice_simulated", "gauge", "1 when the devices are simulated (no NVIDIA driver).");
  out += fmt::format("gpuslice_simulated {}\n", opt_.simulated ? 1 : 0);
  // Device and slice families come from the agent's exporter (dcgm-exporter names for
  // devices, gpuslice_slice_* for slices), the same text the Slurm agent serves; but a slice's
  // idle figures are the daemon's idle clock (IdleSince, as `ps`, `show` and the dashboard
  // give them), which counts activity reports (a running notebook cell) that the agent's
  // GPU-only detector cannot see.
  agent::MetricsInput snapshot = agent_->MetricsSnapshot();
  for (agent::SliceMetrics& m : snapshot.slices) {
    auto v = sched_->slices().find(m.slice);
    if (v == sched_->slices().end()) continue;  // stopping: the agent's last word stands
    const sched::QueueConfig* q = sched_->QueueOf(v->second.job);
    const std::optional<Micros> since = IdleSince(v->second, q, now);
    m.idle_for = since ? std::optional(std::max<Micros>(0, now - *since)) : std::nullopt;
    m.idle = m.idle_for && q != nullptr && *m.idle_for >= q->idle.window;
  }
  out += agent::RenderPrometheus(snapshot);
  // Each family's samples follow its HELP/TYPE lines (the text format wants them grouped).
  struct QueueFigures {
    int pending = 0;
    double oldest_s = 0, mean_wait_s = 0;
  };
  std::vector<std::pair<std::string, QueueFigures>> queues;
  for (const auto& q : config_.queues) {
    int pending = 0, started = 0;
    Micros oldest = 0, waited = 0;
    for (const auto& [id, j] : jobs_) {
      if (j.queue != q.name) continue;
      if (j.state == JobState::kPending) {
        ++pending;
        oldest = std::max(oldest, now - j.submit_time);
      }
      if (j.start_time > 0) {
        ++started;
        waited += j.start_time - j.submit_time;
      }
    }
    queues.emplace_back(q.name, QueueFigures{pending, static_cast<double>(oldest) / kSecond,
                                             started ? static_cast<double>(waited) / started / kSecond : 0.0});
  }
  head("gpuslice_queue_pending_jobs", "gauge", "Jobs waiting for a slice.");
  for (const auto& [name, f] : queues) {
    out += fmt::format("gpuslice_queue_pending_jobs{{queue=\"{}\"}} {}\n", agent::EscapeLabel(name), f.pending);
  }
  // Why they wait (the pending reason's kind, docs/api.md): only the kinds that occur.
  head("gpuslice_queue_pending_jobs_by_reason", "gauge", "Pending jobs by queue and wait reason.");
  std::map<std::pair<std::string, std::string>, int> by_reason;
  for (const auto& [id, j] : jobs_) {
    if (j.state != JobState::kPending) continue;
    auto w = sched_->PendingReason(j.id);
    ++by_reason[{j.queue, w ? std::string(sched::WaitReasonKind(*w)) : "unknown"}];
  }
  for (const auto& [k, n] : by_reason) {
    out += fmt::format("gpuslice_queue_pending_jobs_by_reason{{queue=\"{}\",reason=\"{}\"}} {}\n",
                       agent::EscapeLabel(k.first), k.second, n);
  }
  head("gpuslice_queue_oldest_wait_seconds", "gauge", "Wait of the oldest pending job.");
  for (const auto& [name, f] : queues) {
    out += fmt::format("gpuslice_queue_oldest_wait_seconds{{queue=\"{}\"}} {:.3f}\n", agent::EscapeLabel(name),
                       f.oldest_s);
  }
  head("gpuslice_queue_mean_wait_seconds", "gauge", "Mean submit-to-start wait of started jobs.");
  for (const auto& [name, f] : queues) {
    out += fmt::format("gpuslice_queue_mean_wait_seconds{{queue=\"{}\"}} {:.3f}\n", agent::EscapeLabel(name),
                       f.mean_wait_s);
  }
  head("gpuslice_reclaimed_gpu_seconds_total", "counter",
       "GPU-seconds returned to the pool by idle reclaim: share x time from reclaim to the "
       "job's time limit (or to now when it had none).");
  double seconds = 0;
  for (const auto& [id, j] : jobs_) {
    if (j.state != JobState::kReclaimed) continue;
    auto s = all_slices_share_.find(j.id);
    double share = s != all_slices_share_.end() ? static_cast<double>(s->second) / kOneGpu : 0;
    // The share was returned for the rest of the job's time limit (documented above), not
    // only until now: reading it right after a reclaim must not show ~0.
    Micros until = j.deadline > 0 ? j.deadline : now;
    seconds += share * static_cast<double>(std::max<Micros>(0, until - j.end_time)) / kSecond;
  }
  out += fmt::format("gpuslice_reclaimed_gpu_seconds_total {:.3f}\n", seconds);
  head("gpuslice_jobs", "gauge", "Jobs by state.");
  std::map<std::string, int> by_state;
  for (const auto& [id, j] : jobs_) ++by_state[std::string(store::JobStateName(j.state))];
  for (const auto& [s, n] : by_state) out += fmt::format("gpuslice_jobs{{state=\"{}\"}} {}\n", s, n);
  return out;
}

}  // namespace gpuslice::daemon
