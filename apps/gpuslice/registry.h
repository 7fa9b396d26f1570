#pragma once
// Subcommand registry for the gpuslice binary. Each apps/gpuslice/cmd_<name>.cc defines
//   GPUSLICE_COMMAND(name) { ...add a subcommand to `app`, set *exit_code in its callback... }
// and is compiled straight into the executable, so its static registrar always runs.
// Registration happens before main(); not thread-safe, and needs not be.

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace gpuslice::cli {

// Exit codes scripts can rely on (documented in README).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;     // the operation failed
inline constexpr int kExitUsage = 2;       // bad command line or bad input file
inline constexpr int kExitNotFound = 3;    // the named job/device/queue does not exist
inline constexpr int kExitDenied = 4;      // permission denied
inline constexpr int kExitUnavailable = 5; // daemon, driver or Slurm not reachable

// The exit code for a failed Status (the codes above).
inline int ExitCodeFor(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument: return kExitUsage;
    case StatusCode::kNotFound: return kExitNotFound;
    case StatusCode::kPermissionDenied: return kExitDenied;
    case StatusCode::kUnavailable: return kExitUnavailable;
    default: return kExitFailure;
  }
}

// Prints a failed Status on stderr (safe for a terminal) and gives its exit code from the list
// above; OK gives 0. The daemon's client commands share it (defined in cmd_client.cc).
int ExitForStatus(const Status& st);

using CommandSetup = std::function<void(CLI::App& root, int* exit_code)>;
bool RegisterCommand(const char* name, CommandSetup setup);

}  // namespace gpuslice::cli

#define GPUSLICE_COMMAND(name)                                                          \
  static void GpusliceSetup_##name(CLI::App& app, int* exit_code);                      \
  [[maybe_unused]] static const bool gpuslice_registered_##name =                       \
      ::gpuslice::cli::RegisterCommand(#name, &GpusliceSetup_##name);                   \
  static void GpusliceSetup_##name(CLI::App& app, [[maybe_unused]] int* exit_code)
