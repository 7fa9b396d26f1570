// gpuslice record: write a device recording (docs/recording-format.md) from any backend.
#include <iostream>

#include "devices/backend.h"
#include "devices/recording.h"
#include "finish.h"
#include "registry.h"

GPUSLICE_COMMAND(record) {
  auto* sub = app.add_subcommand("record", "Record device samples from a backend to a JSON file");
  sub->footer(
      "Examples:\n"
      "  gpuslice record --out gpus.json                      # real GPUs (nvml), 10 s at 1 s\n"
      "  gpuslice record --backend fake --simulate 8xH100-80GB --duration 30s --out fake.json\n"
      "  gpuslice record --backend replay --from gpus.json --duration 5s --out part.json");
  struct Args {
    std::string backend = "nvml";
    std::string duration = "10s";
    std::string interval = "1s";
    std::string out;
    std::string simulate = "8xH100-80GB";
    std::string from;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--backend", args->backend, "nvml | fake | replay")
      ->check(CLI::IsMember({"nvml", "fake", "replay"}))
      ->capture_default_str();
  sub->add_option("--duration", args->duration, "how long to record, e.g. 10s, 5m")->capture_default_str();
  sub->add_option("--interval", args->interval, "sampling interval, e.g. 1s, 500ms")->capture_default_str();
  sub->add_option("--out", args->out, "output file")->required();
  sub->add_option("--simulate", args->simulate, "fake backend devices, e.g. 8xH100-80GB or 2xA100-40GB,1xH100-80GB")
      ->capture_default_str();
  sub->add_option("--from", args->from, "replay backend: the recording to play back");
  sub->callback([args, exit_code] {
    using namespace gpuslice;  // NOLINT: .cc only
    // A sampling period of 0 is a busy loop; a recording is held in memory until written.
    auto duration = ParseDurationIn(args->duration, kMillisecond, 30 * 24 * kHour);
    auto interval = ParseDurationIn(args->interval, kMillisecond, kHour);
    if (!duration.ok() || !interval.ok()) {
      std::cerr << "gpuslice record: "
                << (!duration.ok() ? "--duration: " + duration.status().message()
                                   : "--interval: " + interval.status().message())
                << "\n";
      *exit_code = cli::kExitUsage;
      return;
    }
    devices::BackendOptions o;
    o.kind = args->backend;
    o.simulate = args->simulate;
    o.replay_file = args->from;
    std::string summary;
    Status s = devices::RecordToFile(o, *duration, *interval, args->out, &summary);
    if (!s.ok()) {
      *exit_code = cli::Finish(s, false, "gpuslice record");
      return;
    }
    std::cout << summary << "\n";
    *exit_code = cli::kExitOk;
  });
}
