// `gpuslice config check FILE` (what gpuslice.service's ExecReload runs before SIGHUP) and
// `gpuslice config show` (the daemon's config in force: GET /v1/config).
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>

#include "api/cli.h"
#include "core/text.h"
#include "finish.h"
#include "registry.h"
#include "sched/config.h"
#include "sched/config_format.h"

namespace {

namespace cli = gpuslice::cli;
namespace sched = gpuslice::sched;
using gpuslice::ForTerminal;

int Check(const std::string& path, bool quiet) {
  auto config = sched::LoadConfigFile(path);
  if (!config.ok()) {
    std::fprintf(stderr, "error: %s\n", ForTerminal(config.status().message()).c_str());
    return config.status().code() == gpuslice::StatusCode::kNotFound ? cli::kExitNotFound
                                                                     : cli::kExitUsage;
  }
  if (quiet) return cli::kExitOk;
  std::cout << ForTerminal(path) << ": valid, config " << sched::ConfigVersion(*config) << "\n";
  for (const std::string& line : sched::DescribeConfig(*config)) std::cout << "  " << line << "\n";
  for (const sched::QueueConfig& q : sched::DefaultConfig().queues) {
    if (config->FindQueue(q.name) == nullptr) {
      std::cout << "  note: built-in queue '" << q.name
                << "' is not in this file, so it is not offered (the [queues] tables are the "
                   "complete list)\n";
    }
  }
  return cli::kExitOk;
}

int Show(const gpuslice::api::ClientFlags& flags, bool text) {
  auto client = gpuslice::api::Connect(flags);
  auto info = client.ok() ? client->Get("/v1/config") : gpuslice::Result<nlohmann::json>(client.status());
  if (!info.ok()) return cli::Finish(info.status());
  if (flags.json) {
    std::cout << info->dump(2) << "\n";
    return cli::kExitOk;
  }
  if (text) {
    std::cout << ForTerminal(info->value("text", "")) << std::flush;
    return cli::kExitOk;
  }
  const std::time_t at = static_cast<std::time_t>(info->value("loaded_at_us", std::int64_t{0}) / 1000000);
  char when[64] = "?";
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&at));
  const std::string source = info->value("source", "");
  std::cout << "config " << ForTerminal(info->value("version", "")) << " from "
            << ForTerminal(source.empty() ? "the built-in queues" : source) << ", in force since "
            << when << "\n";
  std::cout << "queues:";
  for (const auto& q : info->value("queues", nlohmann::json::array())) {
    std::cout << " " << ForTerminal(q.get<std::string>());
  }
  std::cout << "\n";
  for (const auto& q : info->value("retired_queues", nlohmann::json::array())) {
    std::cout << "removed queue " << ForTerminal(q.get<std::string>())
              << ": its jobs finish under its last settings\n";
  }
  return cli::kExitOk;
}

}  // namespace

GPUSLICE_COMMAND(config) {
  auto* config = app.add_subcommand("config", "Check a config file, or show the daemon's config in force");
  config->require_subcommand(1);

  static std::string path;
  static bool quiet = false;
  auto* check = config->add_subcommand(
      "check", "Check a config file (as a reload would read it) and print every queue's settings");
  check->add_option("FILE", path, "Config file (TOML)")->required();
  check->add_flag("--quiet,-q", quiet, "Print nothing when the file is valid");
  check->footer(
      "Exit: 0 valid, 2 invalid (the error names the file, the key and the value), 3 no such file.\n"
      "Example: gpuslice config check /etc/gpuslice/gpuslice.toml && systemctl reload gpuslice");
  check->callback([exit_code] { *exit_code = Check(path, quiet); });

  auto flags = std::make_shared<gpuslice::api::ClientFlags>();
  static bool text = false;
  auto* show = config->add_subcommand("show", "The daemon's config in force: version, source, queues");
  show->add_option("--socket", flags->socket,
                   "Daemon socket (default $GPUSLICE_SOCKET or /run/gpuslice/gpuslice.sock)");
  show->add_option("--token-file", flags->token_file, "Bearer token file (TCP)");
  show->add_flag("--json", flags->json, "Machine-readable JSON output");
  show->add_flag("--text", text, "The config in force as TOML (every key explicit)");
  show->callback([flags, exit_code] { *exit_code = Show(*flags, text); });
}
