// /metrics: the agent's device and slice families (dcgm-exporter names) and the daemon's own
// gpuslice_* families for queues, jobs, reclaim and teams, in base units.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {
namespace {

// Teams (docs/teams.md), from the GET /v1/teams view: per team and queue what it is guaranteed,
// holds, borrows, may hold and has waiting, in GPUs; per team its fair-share usage and rank.
void RenderTeams(const Json& view, std::string& out) {
  auto head = [&](const char* name, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
  };
  auto per_queue = [&](const char* name, const char* help, const char* field) {
    head(name, help);
    for (const Json& t : view["teams"])
      for (const Json& q : t["queues"]) {
        if (!q[field].is_number()) continue;  // a limit of null: none
        out += fmt::format("{}{{team=\"{}\",queue=\"{}\"}} {:.3f}\n", name,
                           agent::EscapeLabel(t["name"].get<std::string>()),
                           agent::EscapeLabel(q["queue"].get<std::string>()), q[field].get<double>() / kOneGpu);
      }
  };
  per_queue("gpuslice_team_guaranteed_gpus", "GPUs guaranteed to the team in the queue.", "guaranteed");
  per_queue("gpuslice_team_held_gpus", "GPUs the team's running jobs hold in the queue.", "held");
  per_queue("gpuslice_team_borrowed_gpus", "GPUs the team holds past its guarantee in the queue.", "borrowed");
  per_queue("gpuslice_team_limit_gpus", "The most the team may hold in the queue (absent: no limit).", "limit");
  head("gpuslice_team_pending_jobs", "Jobs of the team waiting in the queue.");
  for (const Json& t : view["teams"])
    for (const Json& q : t["queues"])
      out += fmt::format("gpuslice_team_pending_jobs{{team=\"{}\",queue=\"{}\"}} {}\n",
                         agent::EscapeLabel(t["name"].get<std::string>()),
                         agent::EscapeLabel(q["queue"].get<std::string>()), q["waiting"].get<int>());
  head("gpuslice_team_usage_gpu_seconds", "The team's borrowed GPU-seconds, decayed with the half-life (fair share).");
  for (const Json& t : view["teams"])
    if (t["usage_gpu_hours"].is_number())
      out += fmt::format("gpuslice_team_usage_gpu_seconds{{team=\"{}\"}} {:.3f}\n",
                         agent::EscapeLabel(t["name"].get<std::string>()), 3600 * t["usage_gpu_hours"].get<double>());
  head("gpuslice_team_fair_share_rank", "The team's place in the over-quota order (1: served first).");
  for (const Json& t : view["teams"])
    if (t["rank"].is_number())
      out += fmt::format("gpuslice_team_fair_share_rank{{team=\"{}\"}} {}\n",
                         agent::EscapeLabel(t["name"].get<std::string>()), t["rank"].get<int>());
}

}  // namespace

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
  if (config_.teams.enabled()) RenderTeams(TeamsLocked(), out);
  head("gpuslice_jobs", "gauge", "Jobs by state.");
  std::map<std::string, int> by_state;
  for (const auto& [id, j] : jobs_) ++by_state[std::string(store::JobStateName(j.state))];
  for (const auto& [s, n] : by_state) out += fmt::format("gpuslice_jobs{{state=\"{}\"}} {}\n", s, n);
  return out;
}

}  // namespace gpuslice::daemon
