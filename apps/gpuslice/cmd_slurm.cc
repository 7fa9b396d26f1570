// `gpuslice slurm ...`: cluster mode on Slurm (src/slurm). Thin shell: flags -> slurm/cli.h.
#include <functional>
#include <iostream>
#include <memory>

#include "finish.h"
#include "registry.h"
#include "slurm/cli.h"

namespace {

int ExitFor(const gpuslice::Status& s) { return gpuslice::cli::Finish(s, false, "gpuslice slurm"); }

// Adds --slurm-conf and --slurm-timeout to `sub`; its callback fills flags->slurm from them and
// runs `run`.
template <typename Flags>
void RunWithSlurm(CLI::App* sub, std::shared_ptr<Flags> flags, int* exit_code,
                  std::function<gpuslice::Status(const Flags&)> run) {
  auto timeout = std::make_shared<std::string>("10s");
  sub->add_option("--slurm-conf", flags->slurm.slurm_conf, "slurm.conf to use (sets SLURM_CONF for the Slurm commands)");
  sub->add_option("--slurm-timeout", *timeout, "deadline for each Slurm command")->capture_default_str();
  sub->callback([flags, timeout, exit_code, run] {
    auto t = gpuslice::ParseDurationIn(*timeout, gpuslice::kMillisecond, gpuslice::kHour);
    if (!t.ok()) {
      *exit_code = ExitFor(gpuslice::InvalidArgument("--slurm-timeout = '" + *timeout + "': expected e.g. 10s"));
      return;
    }
    flags->slurm.timeout = *t;
    *exit_code = ExitFor(run(*flags));
  });
}

// The node agent's flags and callback; shared by `gpuslice slurm agent` and `gpuslice agent
// --slurm` (the spelling issue 7 and docs/slurm.md use).
void AddAgentCommand(CLI::App* parent, const char* name, const std::string& spelled, int* exit_code,
                     bool needs_slurm_flag) {
  namespace gs = gpuslice::slurm;
  auto af = std::make_shared<gs::AgentFlags>();
  auto* agent = parent->add_subcommand(name, "Node agent: per-job GPU utilisation on /metrics, idle reclaim");
  agent->footer(
      "Examples:\n"
      "  " + spelled + " --policy /etc/gpuslice/gpuslice.toml --listen 0.0.0.0:9400\n"
      "  " + spelled + " --backend fake --simulate 2xH100-80GB --simulate-script gpus.json --interval 1s\n"
      "Simulate script: JSON, e.g. {\"processes\": [{\"pid\": 123, \"device\": 0, \"sm\": 80, \"memory\": \"2GiB\"}]}\n"
      "or {\"jobs\": {\"<slurm job id>\": {\"sm\": 80}}} (the same format as serve's). Stops on SIGINT/SIGTERM.");
  if (needs_slurm_flag) {
    // Only the Slurm agent exists; the flag keeps room for a future standalone mode.
    static bool slurm_mode = false;  // outlives parsing; the command is registered once
    agent->add_flag("--slurm", slurm_mode, "run as the Slurm node agent (required)")->required();
  }
  agent->add_option("--policy", af->policy, "gpuslice queue policy (TOML); default: the built-in queues");
  agent->add_option("--backend", af->backend, "device backend: nvml or fake")->capture_default_str();
  agent->add_option("--simulate", af->simulate, "fake backend devices, e.g. 2xH100-80GB")->capture_default_str();
  agent->add_option("--simulate-script", af->simulate_script, "fake backend: JSON activity script, re-read on change");
  agent->add_option("--listen", af->listen, "HOST:PORT for /metrics (port 0: any)")->capture_default_str();
  agent->add_option("--nodes", af->nodes, "Slurm node names this agent serves (default: all)")->delimiter(',');
  agent->add_option("--interval", af->interval, "sampling round")->capture_default_str();
  agent->add_option("--hostname", af->hostname, "Hostname label on metrics (default: gethostname)");
  agent->add_option("--usage-log", af->usage_log,
                    "append each job's GPU activity here when it ends (for gpuslice whatif --slurm-usage)");
  RunWithSlurm<gs::AgentFlags>(agent, af, exit_code, [](const gs::AgentFlags& f) { return gs::RunSlurmAgent(f, std::cerr); });
}

}  // namespace

GPUSLICE_COMMAND(slurm) {
  namespace gs = gpuslice::slurm;
  auto* slurm = app.add_subcommand("slurm", "Cluster mode: gpuslice queues on a Slurm cluster");
  slurm->require_subcommand(1);

  // --- slurm config ----------------------------------------------------------------------
  auto cf = std::make_shared<gs::ConfigFlags>();
  cf->spec.gpu_nodes.gpus_per_node = 8;
  cf->spec.mig_nodes.gpus_per_node = 8;
  auto mig_layout = std::make_shared<std::string>();
  auto* config = slurm->add_subcommand("config", "Generate slurm.conf node/partition lines and gres.conf for the policy");
  config->footer(
      "Examples:\n"
      "  gpuslice slurm config --policy /etc/gpuslice/gpuslice.toml --nodes 'gpu[1-4]' --gpus-per-node 8 --model H100-80GB\n"
      "  gpuslice slurm config --nodes 'gpu[1-4]' --mig-nodes 'gpu[5-6]' --mig-model H100-80GB \\\n"
      "      --mig-layout 3g.40gb,2g.20gb,2g.20gb --out-dir /etc/slurm/gpuslice");
  config->add_option("--policy", cf->policy, "gpuslice queue policy (TOML); default: the built-in queues");
  config->add_option("--nodes", cf->spec.gpu_nodes.nodes, "hostlist of whole-GPU nodes, e.g. gpu[1-4]");
  config->add_option("--gpus-per-node", cf->spec.gpu_nodes.gpus_per_node, "GPUs per node")->capture_default_str();
  config->add_option("--model", cf->spec.gpu_nodes.model, "GPU model from the catalogue, e.g. H100-80GB");
  config->add_option("--gres-type", cf->spec.gpu_nodes.gres_type, "GRES type name (default: from --model)");
  config->add_option("--device-files", cf->spec.gpu_nodes.device_files, "gres.conf File= (default /dev/nvidia[0-N])");
  config->add_option("--node-params", cf->spec.gpu_nodes.node_params, "appended to the NodeName line, e.g. 'CPUs=64 RealMemory=512000'");
  config->add_option("--shards-per-gpu", cf->spec.shards_per_gpu, "shards per GPU (shared slice granularity)")->capture_default_str();
  config->add_option("--sharing", cf->sharing, "sharing GRES: shard or mps (never both, see docs/slurm.md)")->capture_default_str();
  config->add_option("--mig-nodes", cf->spec.mig_nodes.nodes, "hostlist of nodes whose GPUs are in MIG mode");
  config->add_option("--mig-gpus-per-node", cf->spec.mig_nodes.gpus_per_node, "GPUs per MIG node")->capture_default_str();
  config->add_option("--mig-model", cf->spec.mig_nodes.model, "GPU model of the MIG nodes (checks the layout)");
  config->add_option("--mig-layout", *mig_layout, "MIG instances on each GPU, e.g. 3g.40gb,2g.20gb,2g.20gb");
  config->add_option("--mig-node-params", cf->spec.mig_nodes.node_params, "appended to the MIG NodeName line");
  config->add_option("--out-dir", cf->out_dir, "write slurm.conf.gpuslice and gres.conf here instead of stdout");
  config->callback([cf, mig_layout, exit_code] {
    cf->spec.mig_nodes.mig_layout.clear();
    std::string cur;
    for (char c : *mig_layout + ",") {
      if (c == ',') {
        if (!cur.empty()) cf->spec.mig_nodes.mig_layout.push_back(cur);
        cur.clear();
      } else if (c != ' ') {
        cur += c;
      }
    }
    *exit_code = ExitFor(gs::RunSlurmConfig(*cf, std::cout, std::cerr));
  });

  // --- slurm teams -----------------------------------------------------------------------
  auto tf = std::make_shared<gs::TeamsFlags>();
  auto* teams = slurm->add_subcommand("teams", "Generate the Slurm setup of the policy's [teams]: accounts, GrpTRES, "
                                               "fair share, QOS (a sacctmgr script)");
  teams->footer(
      "Examples:\n"
      "  gpuslice slurm teams --policy /etc/gpuslice/gpuslice.toml > teams.txt\n"
      "  gpuslice slurm teams --policy /etc/gpuslice/gpuslice.toml --cluster gpu-a --out-dir /etc/slurm/gpuslice\n"
      "Writes slurm.conf lines to merge and a sacctmgr script; warnings (what Slurm cannot express) go to stderr.");
  teams->add_option("--policy", tf->policy, "gpuslice config with [teams] (TOML)")->required();
  teams->add_option("--cluster", tf->cluster, "Slurm ClusterName to add accounts to (default: every cluster)");
  teams->add_option("--sharing", tf->sharing, "sharing GRES, as given to `slurm config`: shard or mps")->capture_default_str();
  teams->add_option("--shards-per-gpu", tf->shards_per_gpu, "shards per GPU, as given to `slurm config`")->capture_default_str();
  teams->add_option("--out-dir", tf->out_dir, "write slurm.conf.teams and teams-setup.sh here instead of stdout");
  teams->callback([tf, exit_code] { *exit_code = ExitFor(gs::RunSlurmTeams(*tf, std::cout, std::cerr)); });

  // --- slurm submit ----------------------------------------------------------------------
  auto sf = std::make_shared<gs::SubmitFlags>();
  auto* submit = slurm->add_subcommand("submit", "Submit a job with sbatch, routed by queue (partition, GRES, time)");
  submit->footer(
      "Examples:\n"
      "  gpuslice slurm submit --queue interactive --fraction 0.25 -- jupyter lab --no-browser\n"
      "  gpuslice slurm submit --queue training --gpus 4 --time 12h -- python train.py\n"
      "  gpuslice slurm submit --queue inference --memory 20GiB -- python serve.py\n"
      "Prints the Slurm job id.");
  submit->add_option("--policy", sf->policy, "gpuslice queue policy (TOML); default: the built-in queues");
  submit->add_option("-q,--queue", sf->queue, "queue (= Slurm partition); default: the policy's default queue");
  submit->add_option("--gpus", sf->gpus, "whole GPUs");
  submit->add_option("--fraction", sf->fraction, "share of one GPU: 0.25 or 250m (shards)");
  submit->add_option("--memory", sf->memory, "MIG: the smallest instance with this much memory, e.g. 20GiB");
  submit->add_option("--time", sf->time, "time limit, e.g. 2h (at most the queue's)");
  submit->add_option("--kind", sf->kind, "slice kind: whole | shared | mps | mig (default: from the amount, else the queue's)");
  submit->add_option("--model", sf->model, "whole GPUs of this model, e.g. H100-80GB (a typed gpu GRES)");
  submit->add_option("--team", sf->team, "a team of the policy's [teams]: sbatch --account (see `slurm teams`)");
  submit->add_flag("--borrow", sf->borrow,
                   "borrow idle GPUs past the team's share, requeued when a team needs them: sbatch "
                   "--qos=gpuslice-borrow (preemptible queues)");
  submit->add_option("--name", sf->name, "job name");
  submit->add_option("--output", sf->output, "output file (Slurm patterns such as %j allowed)");
  submit->add_flag("--dry-run", sf->dry_run, "print the sbatch command and script instead of submitting");
  submit->add_option("command", sf->command, "command to run (after --)")->required();
  RunWithSlurm<gs::SubmitFlags>(submit, sf, exit_code, [](const gs::SubmitFlags& f) { return gs::RunSlurmSubmit(f, std::cout); });

  // --- slurm ps --------------------------------------------------------------------------
  auto pf = std::make_shared<gs::PsFlags>();
  auto* ps = slurm->add_subcommand("ps", "List Slurm jobs with their GPU utilisation (from the agents' /metrics)");
  ps->footer(
      "Examples:\n"
      "  gpuslice slurm ps\n"
      "  gpuslice slurm ps --partition interactive --metrics http://gpu1:9400/metrics --metrics http://gpu2:9400/metrics");
  ps->add_option("-p,--partition", pf->partitions, "only these partitions");
  ps->add_flag("-a,--all", pf->all, "include finished jobs slurmctld still remembers");
  ps->add_option("--metrics", pf->metrics_urls, "an agent's /metrics URL (repeatable)");
  RunWithSlurm<gs::PsFlags>(ps, pf, exit_code, [](const gs::PsFlags& f) { return gs::RunSlurmPs(f, std::cout); });

  // --- slurm agent (also `gpuslice agent --slurm`, below) ----------------------------------
  AddAgentCommand(slurm, "agent", "gpuslice slurm agent", exit_code, /*needs_slurm_flag=*/false);
}

GPUSLICE_COMMAND(agent) {
  AddAgentCommand(&app, "agent", "gpuslice agent --slurm", exit_code, /*needs_slurm_flag=*/true);
}
