// `gpuslice doctor`: what this host lacks to run gpuslice, and how to fix it (src/doctor).
#include <cstdio>
#include <iostream>

#include "doctor/doctor.h"
#include "registry.h"

GPUSLICE_COMMAND(doctor) {
  static gpuslice::doctor::Options options;
  static bool json = false, brief = false;
  auto* o = &options;
  auto* sub = app.add_subcommand("doctor", "Check this host: driver, GPUs, MIG, MPS, memory caps, cgroups, "
                                           "the daemon; say how to fix each failure");
  sub->footer(
      "Exit: 0 when nothing failed (warnings allowed), 1 when a check failed.\n"
      "Examples:\n"
      "  gpuslice doctor\n"
      "  gpuslice doctor --json | jq '.checks[] | select(.outcome == \"fail\")'\n"
      "  gpuslice doctor --slurm --slurm-conf /etc/slurm/slurm.conf   # a cluster node");
  sub->add_flag("--json", json, "Machine-readable JSON output");
  sub->add_flag("--brief", brief, "Only warnings and failures, then the summary");
  sub->add_option("--socket", o->socket, "The daemon's socket")->capture_default_str();
  sub->add_option("--state-dir", o->state_dir, "The daemon's state directory")->capture_default_str();
  sub->add_option("--config", o->config, "The config file serve reads")->capture_default_str();
  sub->add_flag("--slurm", o->slurm, "Cluster mode: Slurm's controller must answer");
  sub->add_option("--slurm-conf", o->slurm_conf, "With --slurm: slurm.conf to use");
  sub->add_option("--nvml-library", o->nvml_library, "NVML to load (tests: a stand-in)")
      ->capture_default_str()->group("");
  sub->add_option("--sysroot", o->sysroot, "Read /proc, /sys and /dev under this directory (tests)")
      ->group("");
  sub->callback([exit_code] {
    const gpuslice::doctor::Report report = gpuslice::doctor::RunDoctor(options);
    if (json) {
      std::cout << gpuslice::doctor::ReportJson(report).dump(2) << "\n";
    } else {
      std::cout << gpuslice::doctor::ReportText(report, brief) << std::flush;
    }
    *exit_code = report.ExitCode();
  });
}
