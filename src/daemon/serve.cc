#include "daemon/serve.h"

#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "api/exit_code.h"
#include "api/http.h"
#include "api/tokens.h"
#include "daemon/daemon.h"
#include "daemon/routes.h"
#include "daemon/service.h"
#include "daemon/state_dir.h"
#include "devices/clock.h"
#include "devices/fake.h"
#include "devices/scripted.h"
#include "exec/launcher.h"
#include "sched/config.h"
#include "store/store.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

constexpr int kExitSoftware = 70;  // EX_SOFTWARE: the daemon cannot go on; a restart recovers

// Logs why serve cannot go on; the exit code is the one every command uses for that status
// (api::ExitCodeFor: bad input 2, not found 3, denied 4, unavailable 5, else 1).
int Fail(const Status& st) {
  spdlog::error("{}", st.ToString());
  return api::ExitCodeFor(st);
}
int Fail(int code, const Status& st) {
  spdlog::error("{}", st.ToString());
  return code;
}

// cgroup v2 where this process may create groups (root on a unified hierarchy); else "".
std::string DetectCgroupParent() {
  if (geteuid() != 0 || !fs::exists("/sys/fs/cgroup/cgroup.controllers")) return "";
  std::error_code ec;
  fs::create_directories("/sys/fs/cgroup/gpuslice", ec);
  if (ec || access("/sys/fs/cgroup/gpuslice", W_OK) != 0) return "";
  return "/sys/fs/cgroup/gpuslice";
}

// Creates the missing directories of `dir` with mode 0755: the socket's and MPS's
// directories must be reachable by every user although the daemon's umask is 077.
void CreatePublicDirs(const fs::path& dir) {
  std::vector<fs::path> missing;
  std::error_code ec;
  for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (mkdir(it->c_str(), 0755) == 0) chmod(it->c_str(), 0755);
  }
}

// The names a TCP request's Host may give besides the loopback ones (daemon/ui.h CheckHost):
// the address the listener is bound to, this machine's name, and --allowed-host.
std::vector<std::string> TcpNames(const ServeOptions& o) {
  std::vector<std::string> names = o.allowed_hosts;
  if (o.tcp.empty()) return names;
  names.push_back(o.tcp.substr(0, o.tcp.rfind(':')));
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0 && host[0] != 0) names.emplace_back(host);
  return names;
}

// A group the config names must exist (a typo would silently leave nobody but root an admin);
// the built-in default may be missing, and the log says what that means.
Status CheckAdminGroup(const sched::Config& c, const std::string& path) {
  if (getgrnam(c.admin_group.c_str()) != nullptr) return Status::Ok();
  if (c.admin_group_from_file) {
    return InvalidArgument(fmt::format("{}: admin_group = '{}': no such group on this host (getent group {})",
                                       path, c.admin_group, c.admin_group));
  }
  spdlog::warn("admin group '{}' (the default) does not exist: only root may act on other users' jobs",
               c.admin_group);
  return Status::Ok();
}

// SIGHUP (`systemctl reload gpuslice`): reads the config file again and puts it in force. A
// file that does not parse changes nothing; the error names the file, the key and the value.
// systemd hears RELOADING=1 first and READY=1 after, whatever the outcome.
void Reload(Daemon& daemon, const ServeOptions& o) {
  (void)NotifyService("RELOADING=1\nSTATUS=reloading the config");
  std::string status;
  if (o.config_path.empty()) {
    spdlog::warn("reload: serve runs with the built-in queues (no --config): nothing to read");
    status = "serving (built-in queues; no --config to reload)";
  } else if (auto config = sched::LoadConfigFile(o.config_path); !config.ok()) {
    spdlog::error("reload refused, the config in force is unchanged: {}", config.status().message());
    status = fmt::format("serving config {} (last reload refused: {})",
                         daemon.ConfigInfo()["version"].get<std::string>(), config.status().message());
  } else if (Status g = CheckAdminGroup(*config, o.config_path); !g.ok()) {
    spdlog::error("reload refused, the config in force is unchanged: {}", g.message());
    status = fmt::format("serving config {} (last reload refused: {})",
                         daemon.ConfigInfo()["version"].get<std::string>(), g.message());
  } else if (auto r = daemon.Reconfigure(std::move(config).value(), o.config_path); !r.ok()) {
    spdlog::error("reload failed, the config in force is unchanged: {}", r.status().ToString());
    status = "serving (last reload failed)";
  } else {
    status = fmt::format("serving config {}", (*r)["version"].get<std::string>());
  }
  (void)NotifyService("READY=1\nSTATUS=" + status);
}

}  // namespace

int RunServe(const ServeOptions& o) {
  // Signals: handled synchronously by the control loop. Blocked before any thread exists (the
  // launcher's stub refill thread starts with the daemon): a thread that did not block them
  // would take a SIGHUP or SIGTERM and die of it, killing the daemon. Every thread inherits
  // the mask; the launcher clears it in job processes.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  AdoptNotifySocket();
  ConfigureServeLogging();
  // Everything the daemon itself creates (store, WAL, logs, lock) is private unless made
  // public on purpose (the socket, its directory, MPS pipes).
  umask(077);
  // Config.
  Result<sched::Config> config =
      o.config_path.empty() ? Result<sched::Config>(sched::DefaultConfig())
                            : sched::LoadConfigFile(o.config_path);
  if (!config.ok()) return Fail(config.status());
  if (Status g = CheckAdminGroup(*config, o.config_path); !g.ok()) return Fail(g);
  if (Status q = o.quotas.Validate(); !q.ok()) return Fail(q);
  // API limits and TCP identities: checked before anything starts.
  if (Status lim = o.http_limits.Validate(); !lim.ok()) return Fail(lim);
  std::vector<api::TcpIdentity> tcp_ids;
  if (!o.tcp.empty()) {
    if (o.token_file.empty()) {
      return Fail(InvalidArgument("--tcp needs --token-file (bearer tokens)"));
    }
    auto ids = api::LoadTokenFile(o.token_file);
    if (!ids.ok()) return Fail(ids.status());
    tcp_ids = std::move(ids).value();
  }

  // Devices.
  std::unique_ptr<devices::DeviceBackend> backend;
  bool simulated = false;
  std::string simulate = o.simulate;
  if (simulate.empty()) {
    devices::BackendOptions bo;
    bo.kind = "nvml";
    auto nvml = devices::OpenBackend(bo);
    if (nvml.ok()) {
      backend = std::move(nvml).value();
    } else if (!o.fallback_simulate.empty()) {
      spdlog::warn("no NVIDIA driver ({}); falling back to simulated devices {}",
                   nvml.status().message(), o.fallback_simulate);
      simulate = o.fallback_simulate;
    } else {
      return Fail(
                  Unavailable(fmt::format("devices: {} (pass --simulate 8xH100-80GB to run on "
                                          "simulated devices)", nvml.status().message())));
    }
  }
  if (!simulate.empty()) {
    auto fake = devices::FakeBackend::Create(simulate, devices::SystemClock());
    if (!fake.ok()) return Fail(fake.status().WithContext("--simulate: "));
    backend = std::move(fake).value();
    simulated = true;
  }
  if (!o.simulate_script.empty() && !simulated) {
    return Fail(InvalidArgument("--simulate-script: only with simulated devices"));
  }
  if (!o.simulate_script.empty()) {
    // Scripted activity is a wrapper at the interface: the daemon sees a DeviceBackend.
    auto scripted = std::make_unique<devices::ScriptedBackend>(std::move(backend), o.simulate_script);
    if (Status st = scripted->Load(); !st.ok()) return Fail(st);
    backend = std::move(scripted);
  }

  // State directory: private, and ours alone for as long as we run. Checked before anything
  // is opened or started, so a refused second daemon changes nothing.
  if (Status ps = PrepareStateDir(o.state_dir); !ps.ok()) return Fail(ps);
  auto lock = StateDirLock::Acquire(o.state_dir);
  if (!lock.ok()) return Fail(lock.status());
  const fs::path socket_dir = fs::path(o.socket_path).parent_path();
  CreatePublicDirs(socket_dir);
  if (Status ss = PrepareSocketPath(o.socket_path); !ss.ok()) return Fail(ss);

  // Store.
  auto store = store::OpenSqliteStore(
      o.state_dir, o.sync_machine ? store::Sync::kMachine : store::Sync::kProcess);
  if (!store.ok()) return Fail(store.status());

  DaemonOptions dopt;
  dopt.state_dir = o.state_dir;
  dopt.simulated = simulated;
  dopt.grace = o.grace;
  dopt.sample_interval = o.sample_interval;
  dopt.cgroup_parent = DetectCgroupParent();
  dopt.max_log_size = o.max_log_size;
  dopt.store_retention = true;
  dopt.config_source = o.config_path;
  dopt.quotas = o.quotas;
  // Read-only connections for the history views (reports, events, samples), one per two HTTP
  // workers: they never wait for the daemon's commits, nor hold them up.
  if (auto readers = store::OpenSqliteReaders(o.state_dir, std::max(2, o.http_limits.workers / 2)); readers.ok()) {
    dopt.report_store = std::move(readers).value();
  } else {
    spdlog::warn("history views will share the store's connection: {}", readers.status().ToString());
  }
  // MPS clients of every user reach the pipes; the state directory is 0700.
  dopt.mps_dir = (fs::absolute(socket_dir.empty() ? fs::path(".") : socket_dir) / "mps").string();
  // Moved: the daemon holds the only references to the read-only connections, and closes them
  // before its writer, whose close then folds the WAL into the database and removes it.
  Daemon daemon(*config, std::move(dopt), std::move(store).value(), std::move(backend),
                exec::NewProcessLauncher(), devices::SystemClock());


  Status st = daemon.Start();
  if (!st.ok()) return Fail(st);

  api::HttpServer server(MakeApiHandler(daemon, TcpNames(o)), o.http_limits);
  // Root and admins may use the share of connections and streams kept for them.
  server.SetPrivileged([&daemon](const api::Peer& p) { return p.uid == 0 || daemon.IsAdmin(Caller{p.uid, p.gid}); });
  st = server.ListenUnix(o.socket_path);
  if (!st.ok()) return Fail(st);
  if (!o.tcp.empty()) {
    for (const auto& id : tcp_ids) {
      if (id.uid == 0) spdlog::warn("TCP token '{}' acts as root (uid 0)", id.name);
    }
    st = server.ListenTcp(o.tcp, std::move(tcp_ids));
    if (!st.ok()) return Fail(st);
  }
  server.Start();

  Json devs = daemon.Devices();
  spdlog::info("gpuslice serve: {} devices via {} ({}){}", devs["devices"].size(),
               devs["backend"].get<std::string>(), devs["backend_description"].get<std::string>(),
               simulated ? " -- SIMULATED devices (no NVIDIA driver)" : "");
  spdlog::info("listening on unix:{}{}; state in {}", o.socket_path,
               o.tcp.empty() ? "" : fmt::format(" and tcp:{}", o.tcp), o.state_dir);
  spdlog::info("submit with: gpuslice submit --socket {} -- CMD...", o.socket_path);
  std::fflush(nullptr);
  if (Status n = NotifyService(fmt::format("READY=1\nSTATUS=serving config {}",
                                           daemon.ConfigInfo()["version"].get<std::string>()));
      !n.ok()) {
    spdlog::warn("systemd notification: {}", n.ToString());
  }

  timespec tick{static_cast<time_t>(o.tick / kSecond),
                static_cast<long>((o.tick % kSecond) * 1000)};
  while (true) {
    int sig = sigtimedwait(&sigs, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      spdlog::info("signal {}: stopping (jobs keep running and are re-adopted on restart)", sig);
      (void)NotifyService("STOPPING=1\nSTATUS=stopping; jobs keep running");
      break;
    }
    if (sig == SIGHUP) {
      Reload(daemon, o);
      std::fflush(nullptr);
    }
    daemon.Step();
    if (Status f = daemon.Failure(); !f.ok()) {
      server.Stop();
      return Fail(kExitSoftware, f);
    }
  }
  server.Stop();
  return 0;
}

}  // namespace gpuslice::daemon
