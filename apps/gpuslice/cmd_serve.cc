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
  // API limits (docs/api.md "Limits"): what one client may hold.
  static std::string header_timeout_text("10s"), body_timeout_text("30s"), idle_timeout_text("60s"),
      write_timeout_text("30s"), max_header_text("64KiB"), max_body_text("4MiB");
  auto* lim = &o->http_limits;
  const char* kLimits = "API limits";
  sub->add_option("--max-connections", lim->max_connections,
                  "Open API connections in total; more get 503")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--max-connections-per-user", lim->max_connections_per_user,
                  "Open API connections per identity (uid; on TCP the token's uid)")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--max-unauthenticated", lim->max_unauthenticated,
                  "TCP connections without a valid token yet, all together (the oldest idle one makes room)")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--max-workers-per-user", lim->max_workers_per_user,
                  "Requests of one identity answered at once; its others wait their turn")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--allowed-host", o->allowed_hosts,
                  "A name TCP requests may give as Host besides the listen address, the hostname and "
                  "localhost (repeatable)")
      ->group(kLimits);
  static std::string env_per_job_text("256KiB"), submitted_text("64MiB");
  const char* kQuotas = "Per-user quotas";
  sub->add_option("--max-pending-per-user", o->quotas.max_pending_jobs, "Pending jobs one user may have")
      ->capture_default_str()->group(kQuotas);
  sub->add_option("--max-env-per-job", env_per_job_text, "Environment one job may carry")
      ->capture_default_str()->group(kQuotas);
  sub->add_option("--max-submitted-per-user", submitted_text,
                  "argv + environment of one user's unfinished jobs together")
      ->capture_default_str()->group(kQuotas);
  sub->add_option("--header-timeout", header_timeout_text,
                  "A request's head must arrive within this (else 408)")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--body-timeout", body_timeout_text,
                  "A request's body must arrive within this after its head (else 408)")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--idle-timeout", idle_timeout_text, "Keep-alive: idle connections close after")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--write-timeout", write_timeout_text,
                  "A client must take each answer (or stream chunk) within this")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--max-header-bytes", max_header_text, "Largest request head (else 431)")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--max-body-bytes", max_body_text, "Largest request body (else 413)")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--http-workers", lim->workers, "Threads answering API requests")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--max-streams", lim->max_streams,
                  "Concurrent streaming answers (logs --follow) in total")
      ->capture_default_str()->group(kLimits);
  sub->add_option("--max-streams-per-user", lim->max_streams_per_user,
                  "Concurrent streaming answers per identity")
      ->capture_default_str()->group(kLimits);
  static std::string log_size_text("64MiB");
  auto* log_size = &log_size_text;
  sub->add_option("--max-log-size", *log_size,
                  "Cap on each job's log; output past it is cut, with a line saying so")
      ->capture_default_str();
  sub->callback([=] {
    // Bounds: a tick or sampling period near zero is a busy loop; beyond these, no use.
    using gpuslice::kHour;
    using gpuslice::kMillisecond;
    using gpuslice::kMinute;
    for (auto [text, out, name, lo, hi] :
         {std::tuple{grace, &o->grace, "--grace", kMillisecond, kHour},
          std::tuple{tick, &o->tick, "--tick", kMillisecond, kMinute},
          std::tuple{sample, &o->sample_interval, "--sample-interval", 10 * kMillisecond, kHour},
          std::tuple{&header_timeout_text, &lim->header_timeout, "--header-timeout",
                     10 * kMillisecond, kHour},
          std::tuple{&body_timeout_text, &lim->body_timeout, "--body-timeout", 10 * kMillisecond,
                     kHour},
          std::tuple{&idle_timeout_text, &lim->idle_timeout, "--idle-timeout", 10 * kMillisecond,
                     kHour},
          std::tuple{&write_timeout_text, &lim->write_timeout, "--write-timeout",
                     10 * kMillisecond, kHour}}) {
      auto d = gpuslice::ParseDurationIn(*text, lo, hi);
      if (!d.ok()) {
        std::fprintf(stderr, "error: %s: %s\n", name, d.status().message().c_str());
        *exit_code = gpuslice::cli::kExitUsage;
        return;
      }
      *out = *d;
    }
    for (auto [text, out, name] :
         {std::tuple{&env_per_job_text, &o->quotas.max_env_bytes_per_job, "--max-env-per-job"},
          std::tuple{&submitted_text, &o->quotas.max_submitted_bytes_per_user, "--max-submitted-per-user"}}) {
      auto b = gpuslice::ParseBytes(*text);
      if (!b.ok()) {
        std::fprintf(stderr, "error: %s '%s': %s\n", name, text->c_str(), b.status().message().c_str());
        *exit_code = gpuslice::cli::kExitUsage;
        return;
      }
      *out = *b;
    }
    for (auto [text, out, name] :
         {std::tuple{&max_header_text, &lim->max_header_bytes, "--max-header-bytes"},
          std::tuple{&max_body_text, &lim->max_body_bytes, "--max-body-bytes"}}) {
      auto b = gpuslice::ParseBytes(*text);
      if (!b.ok() || *b <= 0) {
        std::fprintf(stderr, "error: %s '%s': %s\n", name, text->c_str(),
                     b.ok() ? "must be more than 0" : b.status().message().c_str());
        *exit_code = gpuslice::cli::kExitUsage;
        return;
      }
      *out = static_cast<std::size_t>(*b);
    }
    if (auto st = lim->Validate(); !st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      *exit_code = gpuslice::cli::kExitUsage;
      return;
    }
    auto cap = gpuslice::ParseBytes(*log_size);
    if (!cap.ok() || *cap < 4096) {
      std::fprintf(stderr, "error: --max-log-size '%s': %s\n", log_size->c_str(),
                   cap.ok() ? "must be at least 4KiB" : cap.status().message().c_str());
      *exit_code = gpuslice::cli::kExitUsage;
      return;
    }
    o->max_log_size = *cap;
    o->sync_machine = *sync == "machine";
    *exit_code = gpuslice::daemon::RunServe(*o);
  });
}
