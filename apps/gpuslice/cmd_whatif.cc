// `gpuslice whatif`: flags only; the work is in src/whatif/command.h.
#include <cstdio>
#include <memory>

#include "registry.h"
#include "sim/output.h"
#include "whatif/command.h"

GPUSLICE_COMMAND(whatif) {
  namespace cli = gpuslice::cli;
  auto* sub = app.add_subcommand("whatif", "Replay your own history under cures and GPU counts: more GPUs, or better use?");
  auto c = std::make_shared<gpuslice::api::ClientFlags>();
  auto f = std::make_shared<gpuslice::whatif::WhatifFlags>();
  sub->add_option("--socket", c->socket, "Daemon socket (default $GPUSLICE_SOCKET or /run/gpuslice/gpuslice.sock); tcp://HOST:PORT for TCP");
  sub->add_option("--token-file", c->token_file, "Bearer token file (TCP)");
  sub->add_option("--since", f->since, "The daemon's history: this long back from now (7d, 12h); default 7d");
  sub->add_option("--from", f->from, "... from (2026-12-01, 2026-12-01T10:00[:00][Z] UTC, or epoch seconds)");
  sub->add_option("--to", f->to, "... to (same forms); default now");
  sub->add_option("--state-dir", f->state_dir, "Read this state directory's store instead of asking the daemon");
  sub->add_option("--sacct", f->sacct, "A Slurm accounting dump (sacct --parsable2; see docs/whatif.md)");
  sub->add_option("--slurm-usage", f->slurm_usage, "With --sacct: the usage log gpuslice's Slurm agent wrote (--usage-log)");
  sub->add_option("--shards-per-gpu", f->shards_per_gpu, "With --sacct: shards per GPU of the Slurm config")->capture_default_str();
  sub->add_option("--trace", f->trace, "A generic CSV history (sim replay's columns, plus activity, memory_peak, ended)");
  sub->add_option("--config", f->config, "The scheduler config the history ran under (gpuslice.toml)");
  sub->add_option("--cluster", f->cluster, "GPUs it ran on: NODESxGPUS[:MODEL[:CPUS[:MEMORY]]], e.g. 4x8:H100-80GB");
  sub->add_option("--nodes", f->nodes, "GPUs it ran on, as an openb node list CSV");
  sub->add_option("--scenarios", f->scenarios, "Scenarios and verdict targets (TOML); default: the built-in ones");
  sub->add_option("--threads", f->threads, "Scenarios replayed at once")->capture_default_str();
  sub->add_option("--seed", f->seed, "Scheduler seed (random tie-breaks)")->capture_default_str();
  sub->add_flag("--json", c->json, "The document as JSON (what GET /v1/whatif returns)");
  sub->add_flag("--csv", f->csv, "One CSV row per scenario");
  sub->add_option("--out", f->out, "Write SVG plots into this directory");
  sub->add_flag("--skip-bad-rows", f->skip_bad_rows, "Count and report bad input rows instead of failing");
  sub->footer("Examples:\n"
              "  gpuslice whatif --since 7d                              # the daemon's last week\n"
              "  gpuslice whatif --state-dir /var/lib/gpuslice --config /etc/gpuslice/gpuslice.toml --cluster 1x8:H100-80GB\n"
              "  gpuslice whatif --sacct dump.txt --slurm-usage usage.csv --config policy.toml --cluster 16x8:A100-80GB\n"
              "  gpuslice whatif --trace data/whatif/month.csv --cluster 8x8:H100-80GB --config data/whatif/month.toml --out /tmp/w\n"
              "See docs/whatif.md.");
  sub->callback([c, f, exit_code] {
    f->progress = gpuslice::sim::StderrIsTerminal();
    const gpuslice::Status st = gpuslice::whatif::RunWhatif(*c, *f);
    if (!st.ok()) std::fprintf(stderr, "error: %s\n", gpuslice::api::ErrorForTerminal(st).c_str());
    *exit_code = cli::ExitCodeFor(st);
  });
}
