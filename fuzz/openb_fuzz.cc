// Fuzzes the openb (Alibaba cluster-trace-gpu-v2023) readers as `gpuslice sim fgd` and `sim
// replay` call them: a node list and a pod list (the input holds both, split at a line "%%"),
// read strictly and with --skip-bad-rows, then turned into replay jobs. Production catches
// nothing around these readers, so neither does this target.
#include "fuzz/trace_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  auto parts = fuzz::SplitInput(fuzz::AsText(data, size), "\n%%\n");
  const std::string nodes_path = fuzz::WriteScratch("nodes.csv", parts[0]);
  const std::string pods_path = fuzz::WriteScratch("pods.csv", parts.size() > 1 ? parts[1] : parts[0]);
  for (bool skip : {false, true}) {
    const sim::ReadOptions ro{skip};
    auto nodes = sim::ReadOpenbNodes(nodes_path, ro);
    if (nodes.ok()) fuzz::CheckNodes(*nodes); else fuzz::TouchError(nodes.status());
    auto pods = sim::ReadOpenbPods(pods_path, ro);
    if (!pods.ok()) {
      fuzz::TouchError(pods.status());
      continue;
    }
    fuzz::CheckPods(*pods);
    auto jobs = sim::JobsFromOpenbPods(*pods, ro);
    if (jobs.ok()) fuzz::CheckJobs(*jobs); else fuzz::TouchError(jobs.status());
  }
  return 0;
}
