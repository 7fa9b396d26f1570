// gpuslice: one binary, one subcommand per job (sim, serve, submit, profile, ...).
#include <algorithm>
#include <map>

#include "registry.h"

namespace gpuslice::cli {
namespace {
std::map<std::string, CommandSetup>& Registry() {
  static std::map<std::string, CommandSetup> r;  // sorted: deterministic --help
  return r;
}
}  // namespace

bool RegisterCommand(const char* name, CommandSetup setup) {
  Registry().emplace(name, std::move(setup));
  return true;
}
}  // namespace gpuslice::cli

int main(int argc, char** argv) {
  CLI::App app{"gpuslice: share, measure and reclaim GPUs", "gpuslice"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gpuslice 0.1.0");
  int exit_code = gpuslice::cli::kExitOk;
  for (auto& [name, setup] : gpuslice::cli::Registry()) setup(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : gpuslice::cli::kExitUsage;
  }
  return exit_code;
}
