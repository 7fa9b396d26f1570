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

std::string Trim(std::string_view s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

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

}  // namespace

Result<std::vector<SimulatedProcess>> ParseSimulateScript(const std::string& text) {
  std::vector<SimulatedProcess> out;
  std::istringstream lines(text);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    if (Trim(line).empty()) continue;
    std::istringstream words(line);
    SimulatedProcess p;
    int percent = -1;
    std::string memory;
    if (!(words >> p.device >> p.pid >> percent) || p.device < 0 || p.pid <= 0 || percent < 0 || percent > 100)
      return InvalidArgument(fmt::format("simulate script line {}: '{}': expected '<device> <pid> <sm-util 0-100> [<memory>]'",
                                         n, Trim(line)));
    p.sm_util = percent * 10;
    if (words >> memory) {
      auto b = ParseBytes(memory);
      if (!b.ok()) return InvalidArgument(fmt::format("simulate script line {}: {}", n, b.status().message()));
      p.memory = *b;
    }
    out.push_back(p);
  }
  return out;
}

SlurmAgent::SlurmAgent(devices::DeviceBackend& backend, devices::FakeBackend* fake, SlurmAgentOptions options)
    : backend_(backend),
      fake_(fake),
      options_(std::move(options)),
      proc_(options_.proc_root),
      tracker_(options_.policy) {}

void SlurmAgent::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
  else std::cerr << Timestamp(devices::WallMicros()) << " " << line << std::endl;
}

Status SlurmAgent::ApplySimulateScript() {
  if (fake_ == nullptr || options_.simulate_script.empty()) return Status::Ok();
  std::ifstream f(options_.simulate_script);
  if (!f) return NotFound(fmt::format("--simulate-script '{}': cannot be opened", options_.simulate_script));
  std::stringstream ss;
  ss << f.rdbuf();
  if (ss.str() == script_seen_) return Status::Ok();
  GPUSLICE_ASSIGN_OR_RETURN(auto procs, ParseSimulateScript(ss.str()));
  GPUSLICE_ASSIGN_OR_RETURN(auto devices, backend_.ListDevices());
  for (const auto& d : devices) {
    devices::FakeStep step;
    for (const auto& p : procs) {
      if (p.device != static_cast<int>(d.index.value())) continue;
      step.gpu_util = std::min(1000, step.gpu_util + p.sm_util);
      step.processes.push_back(devices::FakeProcess{.pid = p.pid, .memory = p.memory, .sm_util = p.sm_util,
                                                    .mem_util = 0, .mig_uuid = "", .exits_during_lookup = false});
    }
    fake_->SetState(d.index, step);
  }
  for (const auto& p : procs) {
    if (p.device >= static_cast<int>(devices.size()))
      return InvalidArgument(fmt::format("--simulate-script: device {} does not exist ({} devices)", p.device,
                                         devices.size()));
  }
  script_seen_ = ss.str();
  return Status::Ok();
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
    jobs[r.job_id] = RunningJob{r.partition, r.user};
  }
  return jobs;
}

std::optional<std::string> SlurmAgent::JobOfProcess(int pid) const {
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

std::vector<ReclaimDecision> SlurmAgent::RunRound(Micros now) {
  if (Status st = ApplySimulateScript(); !st.ok()) Log("simulate script: " + st.ToString());
  auto running = ListRunning();
  if (!running.ok()) Log("cannot list Slurm jobs: " + running.status().ToString());

  // Devices and their processes.
  agent::MetricsInput metrics;
  metrics.hostname = options_.hostname;
  if (auto devs = backend_.ListDevices(); devs.ok()) metrics.devices = *devs;
  struct Acc {
    std::vector<int> pids;
    std::vector<DeviceIndex> devices;
    devices::Permille sm = 0, mem = 0;
    bool sm_known = true, mem_known = true;
    Bytes memory = 0;
  };
  std::map<std::string, Acc> acc;
  for (const auto& d : metrics.devices) {
    auto s = backend_.Sample(d.index);
    if (!s.ok()) {
      ++metrics.sample_errors;
      Log(fmt::format("sample of GPU {} failed: {}", d.index.value(), s.status().ToString()));
      continue;
    }
    for (const auto& p : s->processes) {
      auto job = JobOfProcess(p.pid);
      if (!job) {
        ++metrics.unattributed_processes;
        continue;
      }
      Acc& a = acc[*job];
      a.pids.push_back(p.pid);
      if (std::find(a.devices.begin(), a.devices.end(), d.index) == a.devices.end()) a.devices.push_back(d.index);
      if (p.sm_util.ok()) a.sm += p.sm_util.value(); else a.sm_known = false;
      if (p.mem_util.ok()) a.mem += p.mem_util.value(); else a.mem_known = false;
      if (p.memory_used.ok()) a.memory += p.memory_used.value();
    }
    metrics.samples.push_back(std::move(*s));
  }

  std::vector<ReclaimDecision> applied;
  std::vector<JobUsage> usage;
  if (running.ok()) {
    std::map<std::string, ReclaimTracker::JobIdle> idle_in;
    for (auto it = detectors_.begin(); it != detectors_.end();) {
      it = running->count(it->first) ? std::next(it) : detectors_.erase(it);
    }
    for (const auto& [id, job] : *running) {
      const sched::QueueConfig* q = options_.policy.FindQueue(job.partition);
      auto det = detectors_.try_emplace(id, q->idle).first;
      const Acc a = acc.count(id) ? acc[id] : Acc{};
      // A job with no GPU process has measurably zero utilisation on its GPUs.
      agent::SeriesPoint point{now, a.sm_known ? std::optional(a.sm) : std::nullopt,
                               a.mem_known ? std::optional(a.mem) : std::nullopt, a.memory,
                               static_cast<int>(a.pids.size())};
      const agent::IdleState& st = det->second.Observe(point);
      idle_in[id] = {job.partition, st};
      usage.push_back(JobUsage{id, job.partition, job.user, a.pids, point.sm_util, a.memory, st,
                               ReclaimTracker::Phase::kActive});
      agent::SliceMetrics sm;
      if (auto num = Numeric(id)) {
        sm.slice = SliceId(*num);
        sm.job = JobId(*num);
      }
      sm.user = job.user;
      sm.queue = job.partition;
      sm.kind = std::string(sched::SliceKindName(q->default_kind));
      for (auto dev : a.devices) sm.gpu += (sm.gpu.empty() ? "" : ",") + std::to_string(dev.value());
      sm.sm_util = point.sm_util ? devices::Reading<devices::Permille>::Of(*point.sm_util)
                                 : devices::Reading<devices::Permille>::NotSupported("MIG: per-process utilisation");
      sm.mem_util = point.mem_util ? devices::Reading<devices::Permille>::Of(*point.mem_util)
                                   : devices::Reading<devices::Permille>::NotSupported("per-process memory traffic");
      sm.memory_used = devices::Reading<Bytes>::Of(a.memory);
      sm.processes = static_cast<int>(a.pids.size());
      sm.idle = st.idle;
      sm.idle_for = st.idle_for;
      metrics.slices.push_back(sm);
    }
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
      text += fmt::format("gpuslice_slurm_job_gpu_memory_used_bytes{{{}}} {}\n", labels(u), u.memory_used);
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
    if (st.ok()) ++reclaims_;
    else Log(fmt::format("job {}: {} failed: {}", d.job_id, ReclaimKindName(d.kind), st.ToString()));
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
}

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
