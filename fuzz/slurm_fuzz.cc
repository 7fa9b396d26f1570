// Fuzzes the Slurm text parsers that take no process: `scontrol show job` records
// (ParseScontrolRecord), the agents' Prometheus text merged into `gpuslice slurm ps`
// (ParseJobUtilisation; a malformed sample is skipped by design) and the simulate script that
// the agent and serve share (devices::ParseDeviceScript). Production catches nothing around them, nor does this target.
// The outputs of squeue, sinfo and sbatch are parsed inside the functions that run them:
// slurm_commands_fuzz.cc covers those.
#include "devices/scripted.h"
#include "fuzz/fuzz_util.h"
#include "slurm/agent.h"
#include "slurm/client.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  const std::string text(fuzz::AsText(data, size));
  for (const auto& [k, v] : slurm::ParseScontrolRecord(text)) {
    fuzz::Check(!k.empty(), "an empty scontrol key");
    (void)v;
  }
  (void)slurm::ParseJobUtilisation(text);
  auto script = devices::ParseDeviceScript(text);
  if (script.ok()) {
    for (const auto& p : script->processes) {
      fuzz::Check(p.pid >= 0, "a scripted process with a negative pid");
      fuzz::Check(p.sm_util >= 0 && p.sm_util <= 1000, "scripted utilisation out of 0..1000");
      fuzz::Check(p.memory >= 0, "negative scripted memory");
    }
  } else {
    fuzz::TouchError(script.status());
  }
  return 0;
}
