// `gpuslice report`: flags only; the work is in src/report/cli.h.
#include <memory>

#include "finish.h"
#include "registry.h"
#include "report/cli.h"

GPUSLICE_COMMAND(report) {
  namespace cli = gpuslice::cli;
  auto* sub = app.add_subcommand("report", "GPU-hours held and used over a period, and whether the host needs more GPUs");
  auto c = std::make_shared<gpuslice::api::ClientFlags>();
  auto f = std::make_shared<gpuslice::report::ReportFlags>();
  sub->add_option("--socket", c->socket, "Daemon socket (default $GPUSLICE_SOCKET or /run/gpuslice/gpuslice.sock); tcp://HOST:PORT for TCP");
  sub->add_option("--token-file", c->token_file, "Bearer token file (TCP)");
  sub->add_flag("--json", c->json, "The report as JSON (the document GET /v1/report returns)");
  sub->add_flag("--csv", f->csv, "One CSV row per group, then the totals");
  sub->add_option("--since", f->since, "Period: this long back from now (7d, 12h); default 7d");
  sub->add_option("--from", f->from, "Period start: 2026-12-01, 2026-12-01T10:00[:00][Z] (UTC) or epoch seconds");
  sub->add_option("--to", f->to, "Period end (same forms); default now");
  sub->add_option("--by", f->by, "Group by user | queue | device | job (default queue)");
  sub->add_option("--out", f->out, "Write SVG plots (held_vs_used.svg, by_<group>.svg) into this directory");
  sub->add_option("--state-dir", f->state_dir, "Read this state directory's store instead of asking the daemon");
  sub->footer("Examples:\n"
              "  gpuslice report --since 7d --by queue\n"
              "  gpuslice report --from 2026-11-01 --to 2026-12-01 --by user --csv\n"
              "  gpuslice report --since 30d --out /tmp/report      # SVG plots\n"
              "See docs/report.md for every figure and the verdict.");
  sub->callback([c, f, exit_code] {
    *exit_code = cli::Finish(gpuslice::report::RunReport(*c, *f), c->json);
  });
}
