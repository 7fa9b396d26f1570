#include "slurm/cli.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "core/text.h"
#include "devices/scripted.h"
#include "slurm/agent.h"
#include "slurm/process.h"

namespace gpuslice::slurm {

Result<sched::Config> LoadPolicy(const std::string& path) {
  if (path.empty()) return sched::DefaultConfig();
  return sched::LoadConfigFile(path);
}

namespace {

Result<SharingGres> ParseSharing(const std::string& sharing) {
  if (sharing == "shard") return SharingGres::kShard;
  if (sharing == "mps") return SharingGres::kMps;
  return InvalidArgument(fmt::format("--sharing = '{}': expected shard or mps", ForTerminal(sharing)));
}

// Writes each (file name, text) under `dir` (created), saying so on `out`.
Status WriteOutDir(const std::string& dir, std::initializer_list<std::pair<const char*, const std::string*>> files,
                   std::ostream& out) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  for (const auto& [name, text] : files) {
    std::string path = dir + "/" + name;
    std::ofstream f(path);
    f << *text;
    if (!f) return Internal(fmt::format("--out-dir: cannot write {}", path));
    out << "wrote " << path << "\n";
  }
  return Status::Ok();
}

}  // namespace

Status RunSlurmConfig(const ConfigFlags& flags, std::ostream& out, std::ostream& err) {
  GPUSLICE_ASSIGN_OR_RETURN(sched::Config policy, LoadPolicy(flags.policy));
  ClusterSpec spec = flags.spec;
  GPUSLICE_ASSIGN_OR_RETURN(spec.sharing, ParseSharing(flags.sharing));
  GPUSLICE_ASSIGN_OR_RETURN(GeneratedConfig g, GenerateSlurmConfig(policy, spec));
  for (const auto& w : g.warnings) err << "warning: " << w << "\n";
  if (flags.out_dir.empty()) {
    out << "######## slurm.conf (merge) ########\n" << g.slurm_conf << "######## gres.conf ########\n" << g.gres_conf;
    return Status::Ok();
  }
  return WriteOutDir(flags.out_dir, {{"slurm.conf.gpuslice", &g.slurm_conf}, {"gres.conf", &g.gres_conf}}, out);
}

Status RunSlurmTeams(const TeamsFlags& flags, std::ostream& out, std::ostream& err) {
  if (flags.policy.empty()) return InvalidArgument("--policy: give the config with [teams] (the built-in one has none)");
  GPUSLICE_ASSIGN_OR_RETURN(sched::Config policy, LoadPolicy(flags.policy));
  TeamsSetupOptions o;
  GPUSLICE_ASSIGN_OR_RETURN(o.sharing, ParseSharing(flags.sharing));
  o.cluster = flags.cluster;
  o.shards_per_gpu = flags.shards_per_gpu;
  o.group_members = SystemGroupMembers();
  o.source = flags.policy;
  GPUSLICE_ASSIGN_OR_RETURN(TeamsSetup t, GenerateTeamsSetup(policy, o));
  for (const auto& w : t.warnings) err << "warning: " << ForTerminal(w) << "\n";
  if (flags.out_dir.empty()) {
    out << "######## slurm.conf (merge) ########\n" << t.slurm_conf << "######## sacctmgr script ########\n"
        << t.script;
    return Status::Ok();
  }
  GPUSLICE_RETURN_IF_ERROR(
      WriteOutDir(flags.out_dir, {{"slurm.conf.teams", &t.slurm_conf}, {"teams-setup.sh", &t.script}}, out));
  std::error_code ec;
  std::filesystem::permissions(flags.out_dir + "/teams-setup.sh", std::filesystem::perms::owner_exec,
                               std::filesystem::perm_options::add, ec);
  return Status::Ok();
}

Status RunSlurmSubmit(const SubmitFlags& f, std::ostream& out) {
  SlurmSubmitRequest r;
  GPUSLICE_ASSIGN_OR_RETURN(r.policy, LoadPolicy(f.policy));
  r.queue = f.queue;
  if (f.gpus != 0) r.gpus = f.gpus;
  if (!f.fraction.empty()) {
    auto m = ParseGpuAmount(f.fraction);
    if (!m.ok()) return InvalidArgument(fmt::format("--fraction: {}", m.status().message()));
    r.fraction = *m;
  }
  if (!f.memory.empty()) {
    auto b = ParseBytes(f.memory);
    if (!b.ok()) return InvalidArgument(fmt::format("--memory: {}", b.status().message()));
    r.memory = *b;
  }
  if (!f.time.empty()) {
    auto t = ParseDuration(f.time);
    if (!t.ok()) return InvalidArgument(fmt::format("--time: {}", t.status().message()));
    r.time = *t;
  }
  if (!f.kind.empty()) {
    auto k = sched::ParseSliceKind(f.kind);
    if (!k.ok()) return InvalidArgument(fmt::format("--kind: {}", k.status().message()));
    r.kind = *k;
  }
  r.model = f.model;
  r.team = f.team;
  r.borrow = f.borrow;
  r.job_name = f.name;
  r.output = f.output;
  r.command = f.command;
  r.slurm = f.slurm;
  if (f.dry_run) {
    GPUSLICE_ASSIGN_OR_RETURN(SlurmSubmission s, PlanSlurmSubmission(r));
    out << ShellJoin(s.sbatch_args) << " <<'EOF'\n" << s.script << "EOF\n";
    return Status::Ok();
  }
  GPUSLICE_ASSIGN_OR_RETURN(std::string id, SubmitToSlurm(r));
  out << id << "\n";
  return Status::Ok();
}

Status RunSlurmPs(const PsFlags& f, std::ostream& out) {
  ListOptions o;
  o.partitions = f.partitions;
  o.all_states = f.all;
  o.metrics_urls = f.metrics_urls;
  o.slurm = f.slurm;
  GPUSLICE_ASSIGN_OR_RETURN(auto rows, ListSlurmJobs(o));
  out << fmt::format("{:<8} {:<12} {:<10} {:<10} {:>10} {:>11} {:<20} {:>6}  {}\n", "JOBID", "PARTITION", "USER",
                     "STATE", "TIME", "LIMIT", "GRES", "GPU%", "NODES/REASON");
  for (const auto& r : rows) {
    std::string gres = r.gres.rfind("gres:", 0) == 0 ? r.gres.substr(5) : r.gres;
    std::string util = r.gpu_util_percent ? fmt::format("{:.1f}", *r.gpu_util_percent) : "-";
    out << fmt::format("{:<8} {:<12} {:<10} {:<10} {:>10} {:>11} {:<20} {:>6}  {}\n", r.job_id, r.partition, r.user,
                       r.state, r.elapsed, r.time_limit, gres, util, r.nodes_or_reason);
  }
  return Status::Ok();
}

Status RunSlurmAgent(const AgentFlags& f, std::ostream& err) {
  SlurmAgentOptions o;
  GPUSLICE_ASSIGN_OR_RETURN(o.policy, LoadPolicy(f.policy));
  auto interval = ParseDurationIn(f.interval, 100 * kMillisecond, 24 * kHour);  // 0 would busy-loop
  if (!interval.ok())
    return InvalidArgument(fmt::format("--interval = '{}': expected a duration such as 15s", f.interval));
  o.interval = *interval;
  o.slurm = f.slurm;
  o.nodes = f.nodes;
  o.hostname = f.hostname;
  o.usage_log = f.usage_log;
  if (o.hostname.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    o.hostname = host;
  }
  if (!f.simulate_script.empty() && f.backend != "fake")
    return InvalidArgument("--simulate-script needs --backend fake");
  devices::BackendOptions bo;
  bo.kind = f.backend;
  bo.simulate = f.simulate;
  GPUSLICE_ASSIGN_OR_RETURN(auto backend, devices::OpenBackend(bo));
  if (!f.simulate_script.empty()) {
    // The one script format (devices/scripted.h), as a wrapper at the interface.
    auto scripted = std::make_unique<devices::ScriptedBackend>(std::move(backend), f.simulate_script);
    GPUSLICE_RETURN_IF_ERROR(scripted->Load());
    backend = std::move(scripted);
  }

  // SIGINT/SIGTERM are taken by sigwait below; threads started after this inherit the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  SlurmAgent agent(*backend, o);
  SlurmAgentServer server(agent, f.listen);
  GPUSLICE_RETURN_IF_ERROR(server.Start());
  err << fmt::format("gpuslice slurm agent: {} backend, serving http://{}/metrics, every {}\n", backend->kind(),
                     f.listen.substr(0, f.listen.rfind(':')) + ":" + std::to_string(server.port()),
                     FormatDuration(o.interval));
  err.flush();
  std::thread loop([&] { agent.Run(); });
  int sig = 0;
  sigwait(&set, &sig);
  agent.Stop();
  loop.join();
  server.Stop();
  err << "gpuslice slurm agent: stopped by signal " << sig << "\n";
  return Status::Ok();
}

}  // namespace gpuslice::slurm
