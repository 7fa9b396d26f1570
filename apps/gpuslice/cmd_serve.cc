// `gpuslice serve`: the single-host daemon (logic in src/daemon/serve.cc).
#include "daemon/serve.h"
#include "registry.h"

GPUSLICE_COMMAND(serve) {
  // Flag storage lives for the process (the command is registered once); statics, not leaked
  // heap objects, so LeakSanitizer stays quiet in every gpuslice invocation.
  static gpuslice::daemon::ServeOptions options;
  static std::string grace_text("10s"), tick_text("100ms"), sample_text("1s"), sync_text("process");
  auto* o = &options;
  auto* grace = &grace_text;
  auto* tick = &tick_text;
  auto* sample = &sample_text;
  auto* sub = app.add_subcommand("serve", "Run the gpuslice daemon on this host");
  sub->footer(
      "Examples:\n"
      "  gpuslice serve --config gpuslice.toml --state-dir /var/lib/gpuslice\n"
      "  gpuslice serve --simulate 8xH100-80GB --state-dir /tmp/gs --socket /tmp/gs/gpuslice.sock\n"
      "  gpuslice serve --fallback-simulate 8xH100-80GB ...   # NVML if a driver is present\n"
      "  gpuslice serve --tcp 127.0.0.1:8080 --token-file /etc/gpuslice/token ...\n"
      "Without an NVIDIA driver the daemon runs only with --simulate/--fallback-simulate, and\n"
      "then says SIMULATED in every output.");
  sub->add_option("--config", o->config_path, "Config file (TOML); default: built-in queues");
  sub->add_option("--state-dir", o->state_dir, "State directory (SQLite store, job logs)")
      ->capture_default_str();
  sub->add_option("--socket", o->socket_path, "Unix socket of the API")->capture_default_str();
  sub->add_option("--tcp", o->tcp, "Also listen on TCP HOST:PORT (needs --token-file)");
  sub->add_option("--token-file", o->token_file, "Bearer token for TCP (file mode 600)");
  sub->add_option("--simulate", o->simulate, "Simulated devices, e.g. 8xH100-80GB (no NVML)");
  sub->add_option("--fallback-simulate", o->fallback_simulate,
                  "Use NVML when a driver is present, else simulate these devices");
  sub->add_option("--simulate-script", o->simulate_script,
                  "JSON file scripting simulated utilisation per job (tests, demos)");
  auto* sync = &sync_text;
  sub->add_option("--sync", *sync,
                  "Commit durability: 'process' (survives any daemon crash) or 'machine' "
                  "(also power loss; one fsync per state change)")
      ->check(CLI::IsMember({"process", "machine"}))
      ->capture_default_str();
  sub->add_option("--grace", *grace, "SIGTERM to SIGKILL grace period")->capture_default_str();
  sub->add_option("--tick", *tick, "Control loop period")->capture_default_str();
  sub->add_option("--sample-interval", *sample, "Device sampling period")->capture_default_str();
  sub->callback([=] {
    // Bounds: a tick or sampling period near zero is a busy loop; beyond these, no use.
    using gpuslice::kHour;
    using gpuslice::kMillisecond;
    using gpuslice::kMinute;
    for (auto [text, out, name, lo, hi] :
         {std::tuple{grace, &o->grace, "--grace", kMillisecond, kHour},
          std::tuple{tick, &o->tick, "--tick", kMillisecond, kMinute},
          std::tuple{sample, &o->sample_interval, "--sample-interval", 10 * kMillisecond, kHour}}) {
      auto d = gpuslice::ParseDurationIn(*text, lo, hi);
      if (!d.ok()) {
        std::fprintf(stderr, "error: %s: %s\n", name, d.status().message().c_str());
        *exit_code = gpuslice::cli::kExitUsage;
        return;
      }
      *out = *d;
    }
    o->sync_machine = *sync == "machine";
    *exit_code = gpuslice::daemon::RunServe(*o);
  });
}
