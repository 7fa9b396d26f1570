// Fuzzes the Slurm text parsers that take no process: `scontrol show job` records
// (ParseScontrolRecord), the agents' Prometheus text merged into `gpuslice slurm ps`
// (ParseJobUtilisation; a malformed sample is skipped by design) and the agent's simulate
// script (ParseSimulateScript). Production catches nothing around them, nor does this target.
// The outputs of squeue, sinfo and sbatch are parsed inside the functions that run them:
// slurm_commands_fuzz.cc covers those.
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
  auto procs = slurm::ParseSimulateScript(text);
  if (procs.ok()) {
    for (const auto& p : *procs) {
      fuzz::Check(p.device >= 0 && p.pid > 0, "a simulated process with a bad device or pid");
      fuzz::Check(p.sm_util >= 0 && p.sm_util <= 1000, "simulated utilisation out of 0..1000");
      fuzz::Check(p.memory >= 0, "negative simulated memory");
    }
  } else {
    fuzz::TouchError(procs.status());
  }
  return 0;
}
