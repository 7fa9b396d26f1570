#include "daemon/serve.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "api/http.h"
#include "daemon/daemon.h"
#include "daemon/routes.h"
#include "devices/clock.h"
#include "devices/fake.h"
#include "devices/scripted.h"
#include "exec/launcher.h"
#include "sched/config.h"
#include "store/store.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnavailable = 5;

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

}  // namespace

int RunServe(const ServeOptions& o) {
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  // Config.
  Result<sched::Config> config =
      o.config_path.empty() ? Result<sched::Config>(sched::DefaultConfig())
                            : sched::LoadConfigFile(o.config_path);
  if (!config.ok()) return Fail(kExitUsage, config.status());

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
      return Fail(kExitUnavailable,
                  Unavailable(fmt::format("devices: {} (pass --simulate 8xH100-80GB to run on "
                                          "simulated devices)", nvml.status().message())));
    }
  }
  if (!simulate.empty()) {
    auto fake = devices::FakeBackend::Create(simulate, devices::SystemClock());
    if (!fake.ok()) return Fail(kExitUsage, fake.status().WithContext("--simulate: "));
    backend = std::move(fake).value();
    simulated = true;
  }
  if (!o.simulate_script.empty() && !simulated) {
    return Fail(kExitUsage, InvalidArgument("--simulate-script: only with simulated devices"));
  }
  if (!o.simulate_script.empty()) {
    // Scripted activity is a wrapper at the interface: the daemon sees a DeviceBackend.
    auto scripted = std::make_unique<devices::ScriptedBackend>(std::move(backend), o.simulate_script);
    if (Status st = scripted->Load(); !st.ok()) return Fail(kExitUsage, st);
    backend = std::move(scripted);
  }

  // Store.
  auto store = store::OpenSqliteStore(
      o.state_dir, o.sync_machine ? store::Sync::kMachine : store::Sync::kProcess);
  if (!store.ok()) return Fail(kExitFailure, store.status());

  DaemonOptions dopt;
  dopt.state_dir = o.state_dir;
  dopt.simulated = simulated;
  dopt.grace = o.grace;
  dopt.sample_interval = o.sample_interval;
  dopt.cgroup_parent = DetectCgroupParent();
  Daemon daemon(*config, dopt, std::move(store).value(), std::move(backend),
                exec::NewProcessLauncher(), devices::SystemClock());

  // Signals: handled synchronously by the control loop; every thread inherits the mask
  // (the launcher clears it in job processes).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Status st = daemon.Start();
  if (!st.ok()) return Fail(kExitFailure, st);

  api::HttpServer server(MakeApiHandler(daemon));
  std::error_code ec;
  fs::create_directories(fs::path(o.socket_path).parent_path(), ec);
  st = server.ListenUnix(o.socket_path);
  if (!st.ok()) return Fail(kExitUnavailable, st);
  if (!o.tcp.empty()) {
    if (o.token_file.empty()) {
      return Fail(kExitUsage, InvalidArgument("--tcp needs --token-file (bearer token)"));
    }
    std::ifstream in(o.token_file);
    std::string token;
    std::getline(in, token);
    struct stat sb {};
    if (!in.good() && token.empty()) {
      return Fail(kExitUsage, InvalidArgument(fmt::format("--token-file '{}': unreadable or empty",
                                                          o.token_file)));
    }
    stat(o.token_file.c_str(), &sb);
    if (sb.st_mode & (S_IROTH | S_IWOTH)) {
      return Fail(kExitUsage, InvalidArgument(fmt::format(
          "--token-file '{}': readable by others (chmod 600 it)", o.token_file)));
    }
    st = server.ListenTcp(o.tcp, token, sb.st_uid, sb.st_gid);
    if (!st.ok()) return Fail(kExitUnavailable, st);
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

  timespec tick{static_cast<time_t>(o.tick / kSecond),
                static_cast<long>((o.tick % kSecond) * 1000)};
  while (true) {
    int sig = sigtimedwait(&sigs, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      spdlog::info("signal {}: stopping (jobs keep running and are re-adopted on restart)", sig);
      break;
    }
    daemon.Step();
  }
  server.Stop();
  return 0;
}

}  // namespace gpuslice::daemon
