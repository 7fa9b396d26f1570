// Client subcommands: submit, ps, show, cancel, activity, logs, devices, queues, top. Thin shells over
// src/api/cli.h; this file only declares flags and ends each command with cli::Finish.
#include <cstdio>
#include <initializer_list>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "api/cli.h"
#include "finish.h"
#include "registry.h"
#include "slurm/cli.h"

namespace {

using gpuslice::Status;
namespace api = gpuslice::api;
namespace cli = gpuslice::cli;

// A text flag given with an empty value (`--queue ''`) is a mistake, not "the default": said,
// naming the flag, before anything is sent.
Status NoEmptyValues(std::initializer_list<const CLI::Option*> options) {
  for (const CLI::Option* o : options) {
    if (o->count() > 0 && !o->results().empty() && o->results().back().empty()) {
      return gpuslice::InvalidArgument(fmt::format("{} '': an empty value (leave the flag out for the default)",
                                                   o->get_name()));
    }
  }
  return Status::Ok();
}

// --socket / --token-file / --json on every client subcommand.
std::shared_ptr<api::ClientFlags> AddClientFlags(CLI::App* sub) {
  auto f = std::make_shared<api::ClientFlags>();
  sub->add_option("--socket", f->socket,
                  "Daemon socket (default $GPUSLICE_SOCKET or /run/gpuslice/gpuslice.sock); "
                  "tcp://HOST:PORT for TCP");
  sub->add_option("--token-file", f->token_file, "Bearer token file (TCP)");
  sub->add_flag("--json", f->json, "Machine-readable JSON output");
  return f;
}

// --slurm / --policy / --slurm-conf: route to cluster mode (src/slurm) instead of the daemon.
struct SlurmRoute {
  bool enabled = false;
  std::string policy;
  std::string slurm_conf;
};
std::shared_ptr<SlurmRoute> AddSlurmFlags(CLI::App* sub) {
  auto r = std::make_shared<SlurmRoute>();
  sub->add_flag("--slurm", r->enabled, "Cluster mode: go through Slurm (sbatch/squeue), not the daemon");
  sub->add_option("--policy", r->policy, "With --slurm: gpuslice queue policy (TOML); default built-in");
  sub->add_option("--slurm-conf", r->slurm_conf, "With --slurm: slurm.conf to use");
  return r;
}

}  // namespace

GPUSLICE_COMMAND(submit) {
  auto* sub = app.add_subcommand("submit", "Submit a job to the gpuslice daemon");
  auto c = AddClientFlags(sub);
  auto s = std::make_shared<api::SubmitFlags>();
  auto gpus = std::make_shared<int>(0);
  auto* queue_opt = sub->add_option("--queue,-q", s->queue, "interactive | training | inference (or a configured queue)");
  auto* g = sub->add_option("--gpus", *gpus, "Whole devices (training)");
  auto* f = sub->add_option("--fraction", s->fraction, "Share of one GPU: 0.25 or 250m (shared/mps)");
  g->excludes(f);
  auto* mem_opt = sub->add_option("--mem", s->mem, "Memory per device: 10GiB (cap for shared/mps, size for mig)");
  auto* time_opt = sub->add_option("--time", s->time, "Time limit: 4h, 30m (at most the queue's)");
  auto* kind_opt = sub->add_option("--kind", s->kind, "Slice kind: whole | mig | mps | shared (queue default)");
  auto* model_opt = sub->add_option("--model", s->model, "Device model, e.g. H100-80GB");
  auto* team_opt = sub->add_option("--team", s->team, "Team to run in, where the site has teams (default: yours)");
  auto borrow = std::make_shared<bool>(false);
  sub->add_flag("--borrow", *borrow,
                "With --slurm: borrow idle GPUs past the team's share, requeued when a team needs them "
                "(sbatch --qos=gpuslice-borrow; preemptible queues)");
  sub->add_option("--idempotency-key", s->idempotency_key,
                  "Key that makes a retried submit never run twice (default: a new random one, retried "
                  "with after a lost connection)");
  sub->add_option("command", s->command, "The command, after --")->required();
  auto route = AddSlurmFlags(sub);
  sub->footer(
      "Examples:\n"
      "  gpuslice submit -- python notebook_server.py                # interactive, 0.25 GPU\n"
      "  gpuslice submit --fraction 0.5 --mem 20GiB --time 4h -- python dev.py\n"
      "  gpuslice submit --queue training --gpus 4 -- torchrun train.py\n"
      "  gpuslice submit --queue inference --mem 10GiB -- python serve.py   # MIG sized to 10GiB\n"
      "  gpuslice submit --slurm --queue training --gpus 2 -- python train.py  # via sbatch\n"
      "  gpuslice submit --slurm --team nlp --borrow --queue training --gpus 2 -- python train.py");
  sub->callback([=] {
    if (g->count() > 0) s->gpus = *gpus;
    if (auto st = NoEmptyValues({queue_opt, f, mem_opt, time_opt, kind_opt, model_opt, team_opt}); !st.ok()) {
      *exit_code = cli::Finish(st, c->json);
      return;
    }
    if (auto st = api::CheckSubmitFlags(*s); !st.ok()) {
      *exit_code = cli::Finish(st, c->json);
      return;
    }
    if (*borrow && !route->enabled) {
      *exit_code = cli::Finish(gpuslice::InvalidArgument("--borrow: only with --slurm (the daemon lends idle GPUs by itself)"),
                               c->json);
      return;
    }
    if (route->enabled) {
      gpuslice::slurm::SubmitFlags sf;
      sf.policy = route->policy;
      sf.slurm.slurm_conf = route->slurm_conf;
      sf.queue = s->queue;
      sf.gpus = s->gpus.value_or(0);
      sf.fraction = s->fraction;
      sf.memory = s->mem;
      sf.time = s->time;
      sf.kind = s->kind;
      sf.model = s->model;
      sf.team = s->team;
      sf.borrow = *borrow;
      sf.command = s->command;
      *exit_code = cli::Finish(gpuslice::slurm::RunSlurmSubmit(sf, std::cout), c->json);
      return;
    }
    *exit_code = cli::Finish(api::Submit(*c, *s), c->json);
  });
}

GPUSLICE_COMMAND(ps) {
  auto* sub = app.add_subcommand("ps", "List jobs (active ones by default)");
  auto c = AddClientFlags(sub);
  auto all = std::make_shared<bool>(false);
  auto user = std::make_shared<std::string>();
  auto state = std::make_shared<std::string>();
  sub->add_flag("--all,-a", *all, "Include ended jobs");
  sub->add_option("--user,-u", *user, "Only this user's jobs");
  sub->add_option("--state", *state, "Only jobs in this state (pending, running, ...)");
  auto key = std::make_shared<std::string>();
  sub->add_option("--key", *key, "Only the job submitted with this idempotency key (any state)");
  auto route = AddSlurmFlags(sub);
  auto metrics = std::make_shared<std::vector<std::string>>();
  sub->add_option("--metrics", *metrics, "With --slurm: an agent's /metrics URL (repeatable)");
  sub->footer("Examples:\n  gpuslice ps\n  gpuslice ps --all --user alice\n  gpuslice ps --json\n"
              "  gpuslice ps --slurm --metrics http://gpu1:9400/metrics");
  sub->callback([=] {
    if (route->enabled) {
      gpuslice::slurm::PsFlags pf;
      pf.all = *all;
      pf.metrics_urls = *metrics;
      pf.slurm.slurm_conf = route->slurm_conf;
      *exit_code = cli::Finish(gpuslice::slurm::RunSlurmPs(pf, std::cout), c->json);
      return;
    }
    *exit_code = cli::Finish(api::Ps(*c, *all || !key->empty(), *user, *state, *key), c->json);
  });
}

GPUSLICE_COMMAND(show) {
  auto* sub = app.add_subcommand("show", "Show one job: request, slice, memory cap, events");
  auto c = AddClientFlags(sub);
  auto id = std::make_shared<std::uint64_t>(0);
  sub->add_option("id", *id, "Job ID")->required();
  sub->footer("Examples:\n  gpuslice show 12\n  gpuslice show 12 --json");
  sub->callback([=] { *exit_code = cli::Finish(api::Show(*c, *id), c->json); });
}

GPUSLICE_COMMAND(cancel) {
  auto* sub = app.add_subcommand("cancel", "Cancel jobs (owner, root or admin group)");
  auto c = AddClientFlags(sub);
  auto ids = std::make_shared<std::vector<std::uint64_t>>();
  sub->add_option("ids", *ids, "Job IDs")->required();
  sub->footer("Examples:\n  gpuslice cancel 12\n  gpuslice cancel 12 13 14");
  // With --json the answer (successes and errors) is already one document on stdout.
  sub->callback([=] {
    const Status st = api::CancelJobs(*c, *ids);
    *exit_code = c->json ? gpuslice::api::ExitCodeFor(st) : cli::Finish(st);
  });
}

GPUSLICE_COMMAND(activity) {
  auto* sub = app.add_subcommand("activity", "Report a session's activity for a job (owner, root or admin): "
                                             "postpones its idle reclaim where the queue counts the source");
  auto c = AddClientFlags(sub);
  auto id = std::make_shared<std::uint64_t>(0);
  auto a = std::make_shared<api::ActivityFlags>();
  auto idle = std::make_shared<bool>(false);
  sub->add_option("id", *id, "Job ID")->required();
  auto* busy = sub->add_flag("--busy", a->busy, "A kernel is executing (counts as activity while fresh)");
  sub->add_flag("--idle", *idle, "Nothing is executing (the default)")->excludes(busy);
  sub->add_option("--source", a->source, "Reporter name, [a-z0-9_-] (default jupyter)");
  sub->add_option("--last-activity-us", a->last_activity_us,
                  "Last activity, microseconds since the Unix epoch (default: now)");
  sub->footer("Examples:\n  gpuslice activity 12\n  gpuslice activity 12 --busy\n"
              "  gpuslice activity 12 --idle --last-activity-us 1764590000000000");
  sub->callback([=] {
    if (*idle) a->busy = false;  // (--idle excludes --busy; the pointer keeps the flag's target alive)
    *exit_code = cli::Finish(api::ReportActivity(*c, *id, *a), c->json);
  });
}

GPUSLICE_COMMAND(logs) {
  auto* sub = app.add_subcommand("logs", "Print a job's output (stdout + stderr)");
  auto c = AddClientFlags(sub);
  auto id = std::make_shared<std::uint64_t>(0);
  auto follow = std::make_shared<bool>(false);
  sub->add_option("id", *id, "Job ID")->required();
  sub->add_flag("--follow,-f", *follow, "Keep printing until the job ends");
  sub->footer("Examples:\n  gpuslice logs 12\n  gpuslice logs 12 -f");
  sub->callback([=] { *exit_code = cli::Finish(api::Logs(*c, *id, *follow), c->json); });
}

GPUSLICE_COMMAND(devices) {
  auto* sub = app.add_subcommand("devices", "List the daemon's GPUs, their mode and use");
  auto c = AddClientFlags(sub);
  sub->footer("Examples:\n  gpuslice devices\n  gpuslice devices --json");
  sub->callback([=] { *exit_code = cli::Finish(api::Devices(*c), c->json); });
}

GPUSLICE_COMMAND(queues) {
  auto* sub = app.add_subcommand("queues", "List queues, their limits and load");
  auto c = AddClientFlags(sub);
  sub->footer("Examples:\n  gpuslice queues\n  gpuslice queues --json");
  sub->callback([=] { *exit_code = cli::Finish(api::Queues(*c), c->json); });
}

GPUSLICE_COMMAND(teams) {
  auto* sub = app.add_subcommand("teams", "Teams: guaranteed, held, borrowed and lent GPUs, and who waits");
  auto c = AddClientFlags(sub);
  auto slurm = std::make_shared<bool>(false);
  auto policy = std::make_shared<std::string>();
  sub->add_flag("--slurm", *slurm, "Print the Slurm setup of the teams of --policy (as `gpuslice slurm teams`)");
  sub->add_option("--policy", *policy, "With --slurm: gpuslice config with [teams] (TOML)");
  sub->footer("Examples:\n  gpuslice teams\n  gpuslice teams --json\n"
              "  gpuslice teams --slurm --policy /etc/gpuslice/gpuslice.toml   # the Slurm setup (gpuslice slurm teams)");
  sub->callback([=] {
    if (*slurm) {
      gpuslice::slurm::TeamsFlags tf;
      tf.policy = *policy;
      *exit_code = cli::Finish(gpuslice::slurm::RunSlurmTeams(tf, std::cout, std::cerr), c->json);
      return;
    }
    *exit_code = cli::Finish(api::Teams(*c), c->json);
  });
}

GPUSLICE_COMMAND(top) {
  auto* sub = app.add_subcommand("top", "Live utilisation per device and slice");
  auto c = AddClientFlags(sub);
  auto once = std::make_shared<bool>(false);
  auto interval = std::make_shared<std::string>("1s");
  sub->add_flag("--once", *once, "Print once and exit (for scripts)");
  sub->add_option("--interval", *interval, "Refresh period: seconds or a duration (100ms .. 1h)")
      ->capture_default_str();
  sub->footer("Examples:\n  gpuslice top\n  gpuslice top --once --json");
  sub->callback([=] { *exit_code = cli::Finish(api::Top(*c, *once, *interval), c->json); });
}
