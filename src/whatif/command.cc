#include "whatif/command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "api/client.h"
#include "api/http.h"
#include "core/text.h"
#include "report/report.h"
#include "sim/output.h"
#include "whatif/csv_history.h"
#include "whatif/document.h"
#include "whatif/sacct_history.h"
#include "whatif/store_history.h"
#include "whatif/verdict.h"

namespace gpuslice::whatif {
namespace {

Micros WallNow() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Result<std::vector<sim::TraceNode>> NodesFromFlags(const WhatifFlags& f, const sim::ReadOptions& ro, bool required,
                                                   std::string_view input) {
  if (!f.cluster.empty() && !f.nodes.empty()) return InvalidArgument("--cluster and --nodes: give one of them");
  if (!f.nodes.empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(sim::NodeList list, sim::ReadOpenbNodes(f.nodes, ro));
    if (list.nodes.empty()) return InvalidArgument(fmt::format("--nodes '{}': no nodes", EscapeInvalidUtf8(f.nodes)));
    return list.nodes;
  }
  if (!f.cluster.empty()) return NodesFromSpec(f.cluster);
  if (required) {
    return InvalidArgument(fmt::format("--cluster: needed with {} (the GPUs the jobs ran on, e.g. --cluster 4x8:A100-80GB)", input));
  }
  return std::vector<sim::TraceNode>{};
}

}  // namespace

Result<nlohmann::json> BuildDocument(const History& h, const WhatifSpec& spec, const RunOptions& o) {
  // The scenarios are most of the work, the verdict's search the rest: progress 0..0.8, 0.8..1.
  RunOptions scenarios = o;
  if (o.progress) scenarios.progress = [&o](double f) { o.progress(0.8 * f); };
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<ScenarioResult> results, RunScenarios(h, spec, scenarios));
  GPUSLICE_ASSIGN_OR_RETURN(Verdict v, Decide(h, spec, results, o));
  if (o.progress) o.progress(1.0);
  return ToJson(h, spec, results, v);
}

Status RunWhatif(const api::ClientFlags& c, const WhatifFlags& f) {
  // Every flag is checked before any input is read.
  const int inputs = !f.state_dir.empty() + !f.sacct.empty() + !f.trace.empty();
  if (inputs > 1) return InvalidArgument("--state-dir, --sacct and --trace: give at most one of them");
  if (f.csv && c.json) return InvalidArgument("--csv and --json: give one of them");
  if (f.threads < 1 || f.threads > 64) return InvalidArgument(fmt::format("--threads {}: expected 1..64", f.threads));
  if (!f.slurm_usage.empty() && f.sacct.empty()) return InvalidArgument("--slurm-usage: only with --sacct");
  const bool period_flags = !f.since.empty() || !f.from.empty() || !f.to.empty();
  if (period_flags && (!f.sacct.empty() || !f.trace.empty())) {
    return InvalidArgument("--since/--from/--to: only for the daemon's history (a dump or trace is replayed whole)");
  }
  const Micros now = WallNow();
  GPUSLICE_ASSIGN_OR_RETURN(report::Period period, report::ParsePeriod(f.since, f.from, f.to, now));
  nlohmann::json doc;
  if (inputs == 0) {
    for (const auto& [flag, value] : {std::pair{"--scenarios", &f.scenarios}, {"--config", &f.config},
                                      {"--cluster", &f.cluster}, {"--nodes", &f.nodes}}) {
      if (!value->empty()) {
        return InvalidArgument(fmt::format("{}: only with --state-dir, --sacct or --trace (the daemon runs the built-in "
                                           "scenarios on its own config and GPUs)", flag));
      }
    }
    std::string token;
    if (!c.token_file.empty()) {
      std::ifstream in(c.token_file);
      if (!in) return InvalidArgument(fmt::format("--token-file '{}': cannot read", EscapeInvalidUtf8(c.token_file)));
      std::getline(in, token);
    }
    std::string target = "/v1/whatif?";
    if (!f.since.empty()) target += "since=" + api::UrlEncode(f.since) + "&";
    if (!f.from.empty()) target += "from=" + api::UrlEncode(f.from) + "&";
    if (!f.to.empty()) target += "to=" + api::UrlEncode(f.to) + "&";
    target.pop_back();
    api::ApiClient client(c.socket.empty() ? api::DefaultSocket() : c.socket, token);
    GPUSLICE_ASSIGN_OR_RETURN(doc, client.Get(target));
  } else {
    WhatifSpec spec = DefaultSpec();
    if (!f.scenarios.empty()) {
      GPUSLICE_ASSIGN_OR_RETURN(spec, LoadSpecFile(f.scenarios));
    }
    std::optional<sched::Config> config;
    if (!f.config.empty()) {
      auto cfg = sched::LoadConfigFile(f.config);
      if (!cfg.ok()) return cfg.status().WithContext("--config: ");
      config = std::move(cfg).value();
    }
    const sim::ReadOptions ro{f.skip_bad_rows};
    const std::string input = !f.state_dir.empty() ? "--state-dir" : !f.sacct.empty() ? "--sacct" : "--trace";
    GPUSLICE_ASSIGN_OR_RETURN(std::vector<sim::TraceNode> nodes, NodesFromFlags(f, ro, f.state_dir.empty(), input));
    History h;
    if (!f.state_dir.empty()) {
      std::error_code ec;
      if (!std::filesystem::exists(std::filesystem::path(f.state_dir) / "gpuslice.db", ec)) {
        return NotFound(fmt::format("--state-dir '{}': no gpuslice.db there", EscapeInvalidUtf8(f.state_dir)));
      }
      GPUSLICE_ASSIGN_OR_RETURN(auto store, store::OpenSqliteReader(f.state_dir));
      StoreHistoryOptions so;
      so.period = period;
      so.config = config ? *config : sched::DefaultConfig();
      so.nodes = std::move(nodes);
      so.source = "store " + f.state_dir;
      GPUSLICE_ASSIGN_OR_RETURN(h, HistoryFromStore(*store, so));
      if (!config) h.notes.push_back("no --config: the built-in queues (give the daemon's gpuslice.toml)");
    } else if (!f.sacct.empty()) {
      SacctOptions so;
      so.shards_per_gpu = f.shards_per_gpu;
      so.read = ro;
      GPUSLICE_ASSIGN_OR_RETURN(h, HistoryFromSacct(f.sacct, f.slurm_usage, std::move(nodes), config, so));
    } else {
      GPUSLICE_ASSIGN_OR_RETURN(h, HistoryFromCsv(f.trace, std::move(nodes), config, ro));
    }
    sim::Progress bar(std::cerr, f.progress, "whatif");
    RunOptions o;
    o.threads = f.threads;
    o.seed = f.seed;
    o.progress = [&bar](double x) { bar.Update(x); };
    auto built = BuildDocument(h, spec, o);
    bar.Done();
    if (!built.ok()) return built.status();
    doc = std::move(built).value();
  }
  if (!f.out.empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(auto files, WriteSvgs(doc, f.out));
    for (const auto& p : files) std::fprintf(stderr, "wrote %s\n", ForTerminal(p).c_str());
  }
  const std::string text = c.json ? doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"
                           : f.csv ? FormatCsv(doc)
                                   : FormatTable(doc);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return Status::Ok();
}

}  // namespace gpuslice::whatif
