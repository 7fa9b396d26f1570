// gpuslice profile: where step time goes and what to fix first (logic in src/profile/report.h).
#include <iostream>

#include "core/units.h"
#include "profile/report.h"
#include "finish.h"
#include "registry.h"

GPUSLICE_COMMAND(profile) {
  auto* sub = app.add_subcommand("profile", "Profile a training job: utilisation over time, step breakdown, what to fix first");
  sub->footer(
      "Examples:\n"
      "  gpuslice profile -- python train.py --epochs 1      run and record (10 Hz)\n"
      "  gpuslice profile --out prof --interval 50ms -- python train.py\n"
      "  gpuslice profile --pid 4242 --duration 60s           attach to a running job\n"
      "  gpuslice profile --trace rank0.json.gz,rank1.json.gz  analyse torch.profiler traces\n"
      "  gpuslice profile --job 42                            what `gpuslice serve` recorded for job 42\n"
      "  gpuslice profile --simulate 1xH100-80GB --simulate-util 30% -- python train.py\n"
      "Mark steps in Python with gpuslice_steps (on PYTHONPATH under profile): \n"
      "  for batch in gpuslice_steps.steps(loader): ...\n"
      "Writes report.json and timeline.svg with --out. See docs/profile.md.");
  auto opts = std::make_shared<gpuslice::profile::ProfileOptions>();
  auto interval = std::make_shared<std::string>("100ms");
  auto duration = std::make_shared<std::string>();
  auto util = std::make_shared<std::string>();
  sub->add_option("--trace", opts->traces, "Kineto trace(s) (.json or .json.gz), one per rank")->delimiter(',');
  // kill(-1, 0) succeeds for root: a non-positive --pid must not pass as "it exists".
  sub->add_option("--pid", opts->pid, "attach to this running process")->check(CLI::Range(1, 4194304));  // PID_MAX_LIMIT
  sub->add_option("--job", opts->job, "use what the daemon recorded for this job (GPU figures only)");
  sub->add_option("--socket", opts->socket, "daemon socket for --job (default $GPUSLICE_SOCKET or /run/gpuslice/gpuslice.sock)");
  sub->add_option("--out", opts->out_dir, "write report.json and timeline.svg (and steps.jsonl) here");
  sub->add_option("--interval", *interval, "sampling interval (default 100ms = 10 Hz)");
  sub->add_option("--duration", *duration, "stop recording after this long (default: when the program ends)");
  sub->add_option("--backend", opts->backend, "device backend for GPU figures (default nvml)");
  sub->add_option("--simulate", opts->simulate, "use a fake GPU, e.g. 1xH100-80GB");
  sub->add_option("--simulate-util", *util, "scripted utilisation of the fake GPU, e.g. 35%");
  sub->add_option("--device", opts->device, "GPU index to sample (default 0)")->check(CLI::Range(0, 1023));
  sub->add_flag("--json", opts->json_to_stdout, "print the JSON report instead of text");
  sub->add_option("command", opts->command, "program to run (after --)");
  sub->callback([=] {
    // A sampling period of 0 is a busy loop.
    auto iv = gpuslice::ParseDurationIn(*interval, gpuslice::kMillisecond, gpuslice::kHour);
    if (!iv.ok()) {
      std::cerr << "gpuslice profile: --interval: " << iv.status().message() << "\n";
      *exit_code = gpuslice::cli::kExitUsage;
      return;
    }
    opts->interval = *iv;
    if (!duration->empty()) {
      auto d = gpuslice::ParseDurationIn(*duration, gpuslice::kMillisecond, gpuslice::kMaxDuration);
      if (!d.ok()) {
        std::cerr << "gpuslice profile: --duration: " << d.status().message() << "\n";
        *exit_code = gpuslice::cli::kExitUsage;
        return;
      }
      opts->duration = *d;
    }
    if (!util->empty()) {
      std::string u = *util;
      if (!u.empty() && u.back() == '%') u.pop_back();
      char* end = nullptr;
      double v = std::strtod(u.c_str(), &end);
      if (u.empty() || *end != 0 || v < 0 || v > 100) {
        std::cerr << "gpuslice profile: --simulate-util '" << *util << "': expected 0..100 (percent)\n";
        *exit_code = gpuslice::cli::kExitUsage;
        return;
      }
      opts->simulate_util_permille = static_cast<int>(v * 10 + 0.5);
    }
    *exit_code = gpuslice::cli::Finish(gpuslice::profile::RunProfile(*opts, std::cout), opts->json_to_stdout,
                                       "gpuslice profile");
  });
}
