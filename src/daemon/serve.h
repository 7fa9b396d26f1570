#pragma once
// `gpuslice serve`: opens the store, the device backend and the API sockets, recovers, and
// runs the control loop until SIGINT/SIGTERM. Not thread-safe; call once from main.

#include <string>
#include <vector>

#include "api/http.h"
#include "daemon/quotas.h"
#include "core/units.h"

namespace gpuslice::daemon {

struct ServeOptions {
  std::string config_path;        // "" : built-in defaults
  std::string state_dir = "/var/lib/gpuslice";
  std::string socket_path = "/run/gpuslice/gpuslice.sock";
  std::string tcp;                // "127.0.0.1:8080"; "" : no TCP
  std::string token_file;         // TCP identities (api/tokens.h)
  std::string simulate;           // "8xH100-80GB": fake backend, never NVML
  std::string fallback_simulate;  // NVML when a driver is present, else simulate this
  std::string simulate_script;    // fake only: scripted utilisation (see DaemonOptions)
  bool sync_machine = false;      // --sync machine: fsync every commit (power-loss safe)
  Micros grace = 10 * kSecond;
  Micros tick = 100 * kMillisecond;
  Micros sample_interval = kSecond;
  api::HttpLimits http_limits;    // what one API client may hold (docs/security.md "Limits")
  std::vector<std::string> allowed_hosts;  // more names TCP requests may give as Host
  UserQuotas quotas;              // what one user's unfinished jobs may hold
  Bytes max_log_size = 64 * kMiB;  // per job log (see DaemonOptions::max_log_size)
};

// Returns a process exit code (apps/gpuslice/registry.h conventions).
int RunServe(const ServeOptions& options);

}  // namespace gpuslice::daemon
