#pragma once
// Subcommand registry for the gpuslice binary. Each apps/gpuslice/cmd_<name>.cc defines
//   GPUSLICE_COMMAND(name) { ...add a subcommand to `app`, set *exit_code in its callback... }
// and is compiled straight into the executable, so its static registrar always runs.
// Registration happens before main(); not thread-safe, and needs not be.

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "api/exit_code.h"
#include "core/status.h"

namespace gpuslice::cli {

// Exit codes scripts can rely on (documented in README); a Status maps to them in one place,
// api::ExitCodeFor (finish.h ends every command with it).
inline constexpr int kExitOk = api::kExitOk;
inline constexpr int kExitFailure = api::kExitFailure;          // the operation failed
inline constexpr int kExitUsage = api::kExitUsage;              // bad command line or bad input file
inline constexpr int kExitNotFound = api::kExitNotFound;        // the named job/device/queue does not exist
inline constexpr int kExitDenied = api::kExitDenied;            // permission denied
inline constexpr int kExitUnavailable = api::kExitUnavailable;  // daemon, driver or Slurm not reachable

// The exit code for a failed Status (the codes above): the one map, api::ExitCodeFor.
inline int ExitCodeFor(const Status& st) { return api::ExitCodeFor(st); }

using CommandSetup = std::function<void(CLI::App& root, int* exit_code)>;
bool RegisterCommand(const char* name, CommandSetup setup);

}  // namespace gpuslice::cli

#define GPUSLICE_COMMAND(name)                                                          \
  static void GpusliceSetup_##name(CLI::App& app, int* exit_code);                      \
  [[maybe_unused]] static const bool gpuslice_registered_##name =                       \
      ::gpuslice::cli::RegisterCommand(#name, &GpusliceSetup_##name);                   \
  static void GpusliceSetup_##name(CLI::App& app, [[maybe_unused]] int* exit_code)
