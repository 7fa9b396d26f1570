// `gpuslice sim`: trace-driven simulation (src/sim). Thin shell over the sim library.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "finish.h"
#include "registry.h"
#include "sim/fgd_command.h"
#include "sim/output.h"
#include "sim/replay_command.h"

namespace {
const std::string kDataDir = GPUSLICE_DATA_DIR;
const std::string kDefaultTrace = kDataDir + "/alibaba-gpu-v2023/openb_pod_list_default.csv";
const std::string kDefaultExpected = kDataDir + "/fgd-kss-expected-results/analysis_allo_discrete.csv";

int ExitFor(const gpuslice::Status& s) { return gpuslice::cli::Finish(s); }

// --policy must name at least one policy ("" or "," names none: an empty table that exited 0).
gpuslice::Status CheckPolicies(const std::vector<std::string>& policies, const std::string& text) {
  if (!policies.empty()) return gpuslice::Status::Ok();
  return gpuslice::InvalidArgument(fmt::format("--policy '{}': names no placement policy (e.g. fgd,gpuslice)", text));
}

// --out is checked before a run that may take minutes: a directory this user can write, made if
// it does not exist.
gpuslice::Status CheckOutDir(const std::string& dir) {
  if (dir.empty()) return gpuslice::Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec)) {
    return gpuslice::InvalidArgument(fmt::format("--out '{}': cannot be made a directory: {}", dir,
                                                 ec ? ec.message() : "not a directory"));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return gpuslice::PermissionDenied(fmt::format("--out '{}': not writable: {}", dir, std::strerror(errno)));
  }
  return gpuslice::Status::Ok();
}
// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view rest = text; !rest.empty();) {
    const std::size_t comma = rest.find(',');
    if (comma != 0) out.emplace_back(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return out;
}
}  // namespace

GPUSLICE_COMMAND(sim) {
  auto* sim = app.add_subcommand("sim", "Replay traces through the scheduler and placement policies (simulated clock)");
  sim->require_subcommand(1);

  // --- sim fgd ---------------------------------------------------------------------------
  struct FgdFlags {
    std::string trace = kDefaultTrace;
    std::string nodes;
    std::string policies = "random,dot-product,gpu-clustering,gpu-packing,best-fit-fgd,fgd,gpuslice";
    std::string seeds = "42-51";
    double inflation = 1.3;
    std::string out;
    std::string expected = "auto";
    bool skip_bad_rows = false;
    bool markdown = false;
  };
  auto f = std::make_shared<FgdFlags>();
  auto* fgd = sim->add_subcommand("fgd", "The FGD paper's protocol (ATC'23) on an openb trace, vs published results");
  fgd->footer(
      "Examples:\n"
      "  gpuslice sim fgd                                   # default trace, all policies, seeds 42-51\n"
      "  gpuslice sim fgd --trace data/alibaba-gpu-v2023/openb_pod_list_gpushare40.csv --policy fgd,gpuslice\n"
      "  gpuslice sim fgd --seeds 42-44 --out /tmp/fgd      # CSV + SVG plots in /tmp/fgd\n"
      "  gpuslice sim fgd --policy gpuslice,gpuslice+keep-cpu,fgd+refuse-cpu-only  # admission options");
  fgd->add_option("--trace", f->trace, "openb pod list CSV")->capture_default_str();
  fgd->add_option("--nodes", f->nodes, "openb node list CSV (default: openb_node_list_gpu_node.csv beside the trace)");
  fgd->add_option("--policy", f->policies,
                  "comma-separated placement policies, each optionally with an admission option: "
                  "+keep-cpu (keep a node's CPU for its free GPUs from CPU-only pods) or +refuse-cpu-only")->capture_default_str();
  fgd->add_option("--seeds", f->seeds, "seeds: range 42-51 or list 42,43")->capture_default_str();
  fgd->add_option("--inflation", f->inflation, "arrived GPU demand to reach, x capacity")->capture_default_str();
  fgd->add_option("--out", f->out, "directory for CSV of every metric and SVG plots");
  fgd->add_option("--expected", f->expected,
                  "published results CSV (analysis_allo_discrete.csv); 'auto': the bundled one; 'none'")
      ->capture_default_str();
  fgd->add_flag("--skip-bad-rows", f->skip_bad_rows, "count and report bad trace rows instead of failing");
  fgd->add_flag("--markdown", f->markdown, "print the table as Markdown");
  fgd->callback([f, exit_code] {
    gpuslice::sim::FgdCommandOptions o;
    o.trace = f->trace;
    o.nodes = f->nodes;
    o.policies = SplitList(f->policies);
    for (const auto& st : {CheckPolicies(o.policies, f->policies), CheckOutDir(f->out)}) {
      if (!st.ok()) {
        *exit_code = ExitFor(st);
        return;
      }
    }
    auto seeds = gpuslice::sim::ParseSeeds(f->seeds);
    if (!seeds.ok()) {
      *exit_code = ExitFor(seeds.status());
      return;
    }
    o.seeds = *seeds;
    o.inflation = f->inflation;
    o.out_dir = f->out;
    if (f->expected == "auto") {
      o.expected = std::filesystem::exists(kDefaultExpected) ? kDefaultExpected : "";
    } else if (f->expected != "none") {
      o.expected = f->expected;
    }
    o.skip_bad_rows = f->skip_bad_rows;
    o.markdown = f->markdown;
    o.progress = gpuslice::sim::StderrIsTerminal();
    auto r = gpuslice::sim::RunFgdCommand(o, std::cout, std::cerr);
    if (!r.ok()) {
      *exit_code = ExitFor(r.status());
      return;
    }
    *exit_code = gpuslice::cli::kExitOk;
  });

  // --- sim replay ------------------------------------------------------------------------
  struct ReplayFlags {
    std::string trace;
    std::string nodes;
    std::string cluster;
    std::string policies = "gpuslice";
    std::string config;
    std::string compare_config;
    std::uint64_t seed = 1;
    std::string out;
    bool skip_bad_rows = false;
  };
  auto r = std::make_shared<ReplayFlags>();
  auto* replay = sim->add_subcommand(
      "replay", "Online replay through the scheduler: queues, limits, idle reclaim, MIG, queueing delay, allocation");
  replay->footer(
      "Trace: a generic CSV (submit,duration,gpus[,queue,user,memory,cpu,model,id,utilisation]; docs/sim.md)\n"
      "or an openb pod list (creation_time/deletion_time; rows go to the default queue).\n"
      "Without --config every queue of the trace places with --policy and has no limits; with --config the\n"
      "file's queues, limits and idle policies apply (and --policy, if given, replaces every queue's placement).\n"
      "Examples:\n"
      "  gpuslice sim replay --trace jobs.csv --cluster 100x8 --policy gpuslice,best-fit-fgd --out /tmp/r\n"
      "  gpuslice sim replay --trace jobs.csv --cluster 16x8:A100-80GB --config /etc/gpuslice/gpuslice.toml\n"
      "  gpuslice sim replay --trace data/alibaba-gpu-v2023/openb_pod_list_default.csv \\\n"
      "      --nodes data/alibaba-gpu-v2023/openb_node_list_gpu_node.csv --policy fgd,gpuslice");
  replay->add_option("--trace", r->trace, "job trace CSV")->required();
  replay->add_option("--nodes", r->nodes, "openb node list CSV for the cluster");
  replay->add_option("--cluster", r->cluster, "synthetic cluster NODESxGPUS[:MODEL[:CPUS[:MEMORY]]] (default 1213x8)");
  auto* policy_opt =
      replay->add_option("--policy", r->policies, "comma-separated placement policies (one run each)")->capture_default_str();
  replay->add_option("--config", r->config, "scheduler config TOML (gpuslice.toml): its queues, limits, idle policies");
  replay->add_option("--compare-config", r->compare_config,
                     "a second config replayed as the run 'compare' (e.g. other team guarantees; docs/teams.md)");
  replay->add_option("--seed", r->seed, "scheduler seed (random tie-breaks)")->capture_default_str();
  replay->add_option("--out", r->out, "directory for CSV of every metric and SVG plots");
  replay->add_flag("--skip-bad-rows", r->skip_bad_rows, "count and report bad trace rows instead of failing");
  replay->callback([r, policy_opt, exit_code] {
    gpuslice::sim::ReplayCommandOptions o;
    o.trace = r->trace;
    o.nodes = r->nodes;
    o.cluster = r->cluster;
    // With a config, the queues keep their own placement unless --policy is given.
    if (r->config.empty() || policy_opt->count() > 0) {
      o.policies = SplitList(r->policies);
      if (auto st = CheckPolicies(o.policies, r->policies); !st.ok()) {
        *exit_code = ExitFor(st);
        return;
      }
    }
    if (auto st = CheckOutDir(r->out); !st.ok()) {
      *exit_code = ExitFor(st);
      return;
    }
    o.config = r->config;
    o.compare_config = r->compare_config;
    o.seed = r->seed;
    o.out_dir = r->out;
    o.skip_bad_rows = r->skip_bad_rows;
    o.progress = gpuslice::sim::StderrIsTerminal();
    auto res = gpuslice::sim::RunReplayCommand(o, std::cout, std::cerr);
    if (!res.ok()) {
      *exit_code = ExitFor(res.status());
      return;
    }
    *exit_code = gpuslice::cli::kExitOk;
  });
}
