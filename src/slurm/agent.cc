#include "slurm/agent.h"

#include <charconv>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "agent/metrics.h"
#include "devices/clock.h"

namespace gpuslice::slurm {
namespace {

std::string Timestamp(Micros t) {
  std::time_t secs = static_cast<std::time_t>(t / kSecond);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A Slurm job id, from squeue or from a process's SLURM_JOB_ID (which its user sets freely).
// Digits that overflow are no job id: stoull threw out of the agent's round.
std::optional<std::uint64_t> Numeric(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// Slurm's owner resolver: a GPU process is a job's when SLURM_JOB_ID is in its environment or
// its cgroup path holds job_<id>. Sampling thread only (RunRound's).
class SlurmResolver : public agent::OwnerResolver {
 public:
  SlurmResolver(std::string proc_root, const std::map<std::string, SliceId>* slice_of)
      : proc_(std::move(proc_root)), slice_of_(slice_of) {}

  agent::Owner Resolve(DeviceIndex, const devices::ProcessSample& p, const std::vector<agent::SliceBinding>&,
                       agent::AttributionStats* stats) override {
    if (auto job = JobOfProcess(p.pid)) {
      if (auto it = slice_of_->find(*job); it != slice_of_->end()) {
        ++stats->attributed;
        return agent::Owner{it->second, false, false};
      }
    }
    if (!proc_.Stat(p.pid).ok()) {
      ++stats->vanished;
      return agent::Owner{std::nullopt, false, false};
    }
    ++stats->unattributed;
    return agent::Owner{std::nullopt, false, true};
  }

 private:
  std::optional<std::string> JobOfProcess(int pid) const {
    if (auto v = proc_.EnvironValue(pid, "SLURM_JOB_ID"); v.ok() && Numeric(*v)) return *v;
    // Slurm's cgroup plugins put job processes under .../job_<id>/step_<s>/...
    if (auto cg = proc_.Cgroup(pid); cg.ok()) {
      auto pos = cg->find("/job_");
      if (pos != std::string::npos) {
        std::string digits;
        for (std::size_t i = pos + 5; i < cg->size() && std::isdigit(static_cast<unsigned char>((*cg)[i])); ++i)
          digits += (*cg)[i];
        if (!digits.empty()) return digits;
      }
    }
    return std::nullopt;
  }

  agent::ProcessTable proc_;
  const std::map<std::string, SliceId>* slice_of_;
};

agent::AgentOptions AgentOptionsFor(const SlurmAgentOptions& o) {
  agent::AgentOptions a;
  a.interval = o.interval;
  a.hostname = o.hostname;
  a.proc_root = o.proc_root;
  return a;
}

}  // namespace

SlurmAgent::SlurmAgent(devices::DeviceBackend& backend, SlurmAgentOptions options)
    : backend_(backend),
      options_(std::move(options)),
      // RunRound samples synchronously (the agent's own thread is not started).
      agent_(backend, AgentOptionsFor(options_), nullptr,
             std::make_unique<SlurmResolver>(options_.proc_root, &slice_of_)),
      tracker_(options_.policy),
      usage_(options_.usage_log) {}

void SlurmAgent::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
  else std::cerr << Timestamp(devices::WallMicros()) << " " << line << std::endl;
}

Result<std::map<std::string, SlurmAgent::RunningJob>> SlurmAgent::ListRunning() {
  // All running jobs on our nodes; partitions are filtered here, not with -p, so that a policy
  // queue Slurm lacks does not make every round fail.
  ListOptions lo;
  lo.slurm = options_.slurm;
  GPUSLICE_ASSIGN_OR_RETURN(auto rows, ListSlurmJobs(lo));
  std::map<std::string, RunningJob> jobs;
  for (const auto& r : rows) {
    if (r.state != "RUNNING") continue;
    if (options_.policy.FindQueue(r.partition) == nullptr) continue;
    if (!options_.nodes.empty()) {
      bool ours = false;
      // nodes_or_reason holds the job's node list for running jobs ("node1" or "node[1-2]").
      for (const auto& n : options_.nodes) ours = ours || r.nodes_or_reason == n;
      if (!ours) continue;
    }
    jobs[r.job_id] = RunningJob{r.partition, r.user, r.gres};
  }
  return jobs;
}

std::vector<ReclaimDecision> SlurmAgent::RunRound(Micros now) {
  auto running = ListRunning();
  if (!running.ok()) Log("cannot list Slurm jobs: " + running.status().ToString());

  // Running jobs are the agent's slices; then one sampling round over every device.
  if (running.ok()) {
    for (auto it = slice_of_.begin(); it != slice_of_.end();) {
      if (running->count(it->first)) {
        ++it;
        continue;
      }
      agent_.Unbind(it->second);
      job_of_.erase(it->second);
      it = slice_of_.erase(it);
    }
    std::vector<DeviceIndex> all;
    if (auto devs = backend_.ListDevices(); devs.ok()) {
      for (const auto& d : *devs) all.push_back(d.index);
    }
    for (const auto& [id, job] : *running) {
      const sched::QueueConfig* q = options_.policy.FindQueue(job.partition);
      auto [it, fresh] = slice_of_.try_emplace(id, SliceId());
      if (fresh) {
        it->second = Numeric(id) ? SliceId(*Numeric(id)) : SliceId(next_slice_++);
        job_of_[it->second] = id;
      }
      agent::SliceBinding b;
      b.slice = it->second;
      b.job = Numeric(id) ? JobId(*Numeric(id)) : JobId();
      b.user = job.user;
      b.queue = job.partition;
      // Which of the node's GPUs Slurm gave the job is not known here: its processes say;
      // the figures are per process (summed, capped at 100%), as for a shared slice.
      b.kind = sched::SliceKind::kShared;
      b.devices = all;
      b.idle = q->idle;
      agent_.Bind(b);  // re-binding keeps the history
    }
  }
  const agent::Round round = agent_.SampleOnce();
  for (const auto& e : round.errors) Log("sample failed: " + e.ToString());
  agent::MetricsInput metrics = agent_.MetricsSnapshot();

  std::vector<ReclaimDecision> applied;
  std::vector<JobUsage> usage;
  if (running.ok()) {
    std::map<std::string, ReclaimTracker::JobIdle> idle_in;
    for (const auto& a : round.slices) {
      auto job = job_of_.find(a.slice);
      if (job == job_of_.end()) continue;
      const RunningJob& rj = running->at(job->second);
      const agent::IdleState st = agent_.Idle(a.slice).value_or(agent::IdleState{});
      idle_in[job->second] = {rj.partition, st};
      usage.push_back(JobUsage{job->second, rj.partition, rj.user, a.pids, a.sm_util.optional(),
                               a.memory_used.optional(), st, ReclaimTracker::Phase::kActive});
    }
    // The agent knows slices by number; the metrics show the Slurm job id and its devices.
    for (auto& m : metrics.slices) {
      auto job = job_of_.find(m.slice);
      if (job == job_of_.end()) continue;
      m.kind = options_.policy.FindQueue(running->at(job->second).partition)->default_kind;
      m.gpu.clear();
      for (const auto& a : round.slices) {
        if (a.slice != m.slice) continue;
        for (const auto& s : round.samples) {
          for (const auto& p : s.processes) {
            if (std::find(a.pids.begin(), a.pids.end(), p.pid) == a.pids.end()) continue;
            const std::string g = std::to_string(s.index.value());
            if (("," + m.gpu + ",").find("," + g + ",") == std::string::npos) m.gpu += (m.gpu.empty() ? "" : ",") + g;
          }
        }
      }
    }
    // Usage runs (only while Slurm answers: a job missing from a failed squeue has not left).
    std::vector<UsageRecorder::Round> rounds;
    for (const JobUsage& u : usage) {
      rounds.push_back({u.job_id, u.user, u.partition, running->at(u.job_id).gres, u.idle.activity,
                        u.sm_util ? std::optional<int>(*u.sm_util) : std::nullopt, u.memory_used});
    }
    if (Status st = usage_.Observe(now, rounds); !st.ok()) Log("usage log: " + st.ToString());
    for (const ReclaimDecision& d : tracker_.Observe(idle_in, now)) {
      Apply(d);
      applied.push_back(d);
    }
    for (auto& u : usage) u.phase = tracker_.PhaseOf(u.job_id);
  }

  // Snapshot for /metrics: device and slice families from the agent library, then ours.
  std::string text = agent::RenderPrometheus(metrics);
  text += "# HELP gpuslice_slurm_up 1 if the last squeue answered.\n# TYPE gpuslice_slurm_up gauge\n";
  text += fmt::format("gpuslice_slurm_up {}\n", running.ok() ? 1 : 0);
  auto labels = [&](const JobUsage& u) {
    return fmt::format("job_id=\"{}\",partition=\"{}\",user=\"{}\",node=\"{}\"", agent::EscapeLabel(u.job_id),
                       agent::EscapeLabel(u.partition), agent::EscapeLabel(u.user),
                       agent::EscapeLabel(options_.hostname));
  };
  if (!usage.empty()) {
    text += "# HELP gpuslice_slurm_job_gpu_utilization_percent SM utilisation of the job's GPU processes, "
            "summed (percent of one GPU).\n# TYPE gpuslice_slurm_job_gpu_utilization_percent gauge\n";
    for (const auto& u : usage)
      if (u.sm_util) text += fmt::format("gpuslice_slurm_job_gpu_utilization_percent{{{}}} {:.1f}\n", labels(u), *u.sm_util / 10.0);
    text += "# HELP gpuslice_slurm_job_gpu_memory_used_bytes GPU memory of the job's processes.\n"
            "# TYPE gpuslice_slurm_job_gpu_memory_used_bytes gauge\n";
    for (const auto& u : usage)
      if (u.memory_used) text += fmt::format("gpuslice_slurm_job_gpu_memory_used_bytes{{{}}} {}\n", labels(u), *u.memory_used);
    text += "# HELP gpuslice_slurm_job_idle_seconds Time since the job's last GPU activity.\n"
            "# TYPE gpuslice_slurm_job_idle_seconds gauge\n";
    for (const auto& u : usage)
      text += fmt::format("gpuslice_slurm_job_idle_seconds{{{}}} {}\n", labels(u), u.idle.idle_for / kSecond);
    text += "# HELP gpuslice_slurm_job_warned 1 while the job is warned and due for reclaim.\n"
            "# TYPE gpuslice_slurm_job_warned gauge\n";
    for (const auto& u : usage)
      text += fmt::format("gpuslice_slurm_job_warned{{{}}} {}\n", labels(u),
                          u.phase == ReclaimTracker::Phase::kWarned ? 1 : 0);
  }
  text += "# HELP gpuslice_slurm_reclaims_total Jobs cancelled or requeued for idleness by this agent.\n"
          "# TYPE gpuslice_slurm_reclaims_total counter\n";
  text += fmt::format("gpuslice_slurm_reclaims_total {}\n", reclaims_);
  {
    std::lock_guard lock(mu_);
    metrics_ = std::move(text);
    jobs_ = std::move(usage);
  }
  return applied;
}

void SlurmAgent::Apply(const ReclaimDecision& d) {
  const sched::QueueConfig* q = options_.policy.FindQueue(d.partition);
  std::string line;
  switch (d.kind) {
    case ReclaimKind::kWarn:
      line = d.report_only
                 ? fmt::format("gpuslice: WARNING job {} (partition {}) has not used its GPU for {} (utilisation "
                               "below {}%); queue '{}' reports idle jobs and does not reclaim them",
                               d.job_id, d.partition, FormatDuration(d.idle_for), q->idle.util_threshold_percent,
                               d.partition)
                 : fmt::format("gpuslice: WARNING job {} (partition {}) has not used its GPU for {} (utilisation "
                               "below {}%); it will be {} at {} unless it uses the GPU",
                               d.job_id, d.partition, FormatDuration(d.idle_for), q->idle.util_threshold_percent,
                               q->preemptible ? "requeued" : "cancelled", Timestamp(d.deadline));
      break;
    case ReclaimKind::kActivityResumed:
      line = fmt::format("gpuslice: job {} is using its GPU again; the idle warning is withdrawn", d.job_id);
      break;
    case ReclaimKind::kCancel:
    case ReclaimKind::kRequeue:
      line = fmt::format("gpuslice: job {} (partition {}) idle for {}: {}", d.job_id, d.partition,
                         FormatDuration(d.idle_for), d.kind == ReclaimKind::kCancel ? "cancelling" : "requeueing");
      break;
  }
  Log(line);
  // The user reads the job's output; the line goes there before any action is taken.
  auto job = ShowJob(d.job_id, options_.slurm);
  if (!job.ok()) {
    Log(fmt::format("job {}: cannot find its output file: {}", d.job_id, job.status().ToString()));
  } else if (auto it = job->find("StdOut"); it != job->end() && !it->second.empty()) {
    std::ofstream out(it->second, std::ios::app);
    out << line << "\n";
    if (!out) Log(fmt::format("job {}: cannot append to {}", d.job_id, it->second));
  }
  if (d.kind == ReclaimKind::kCancel || d.kind == ReclaimKind::kRequeue) {
    Status st = d.kind == ReclaimKind::kCancel ? CancelJob(d.job_id, options_.slurm)
                                               : RequeueJob(d.job_id, options_.slurm);
    if (st.ok()) {
      ++reclaims_;
      usage_.MarkReclaimed(d.job_id, d.kind == ReclaimKind::kCancel ? "cancel" : "requeue");
    } else Log(fmt::format("job {}: {} failed: {}", d.job_id, ReclaimKindName(d.kind), st.ToString()));
  }
}

void SlurmAgent::Run() {
  while (!stop_.load()) {
    auto start = std::chrono::steady_clock::now();
    RunRound(devices::WallMicros());
    auto until = start + std::chrono::microseconds(options_.interval);
    while (!stop_.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (Status st = FlushUsage(); !st.ok()) Log("usage log: " + st.ToString());
}

Status SlurmAgent::FlushUsage() { return usage_.Flush(); }

void SlurmAgent::Stop() { stop_.store(true); }

std::string SlurmAgent::MetricsText() const {
  std::lock_guard lock(mu_);
  return metrics_;
}

std::vector<JobUsage> SlurmAgent::Jobs() const {
  std::lock_guard lock(mu_);
  return jobs_;
}

struct SlurmAgentServer::Impl {
  httplib::Server server;
  std::thread thread;
};

SlurmAgentServer::SlurmAgentServer(SlurmAgent& agent, std::string listen)
    : agent_(agent), listen_(std::move(listen)), impl_(std::make_unique<Impl>()) {}

SlurmAgentServer::~SlurmAgentServer() { Stop(); }

Status SlurmAgentServer::Start() {
  auto colon = listen_.rfind(':');
  if (colon == std::string::npos)
    return InvalidArgument(fmt::format("--listen = '{}': expected HOST:PORT", listen_));
  std::string host = listen_.substr(0, colon);
  int port = 0;
  try {
    port = std::stoi(listen_.substr(colon + 1));
  } catch (...) {  // parsing edge
    return InvalidArgument(fmt::format("--listen = '{}': bad port", listen_));
  }
  impl_->server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(agent_.MetricsText(), "text/plain; version=0.0.4; charset=utf-8");
  });
  impl_->server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  if (port == 0) port_ = impl_->server.bind_to_any_port(host);
  else port_ = impl_->server.bind_to_port(host, port) ? port : -1;
  if (port_ <= 0) return Unavailable(fmt::format("--listen = '{}': cannot bind", listen_));
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
  return Status::Ok();
}

void SlurmAgentServer::Stop() {
  if (impl_ && impl_->thread.joinable()) {
    impl_->server.stop();
    impl_->thread.join();
  }
}

}  // namespace gpuslice::slurm
