// One FGD-protocol run (default openb trace inflated to 130%: ~10,866 pods on 1213 nodes) per
// policy, on one core. Target: under 0.5 s of CPU per run (CPU time is printed next to wall time
// because the build machine is shared). "Score calls" is how many times a plugin scored a node
// after the per-node cache; the plain Filter/Score loop would score every feasible node for every
// pod (~13 million for 10,866 pods on 1213 nodes) — the printed ratio.
// Usage: sim_fgd_bench [policy ...] [--seeds N]   (default: every FGD-paper policy, seed 42)
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sched/placement/placement.h"
#include "sim/fgd_command.h"
#include "sim/fgd_protocol.h"

namespace {
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace gpuslice;
  std::vector<std::string> policies;
  int seeds = 1;
  std::string trace = "default";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--trace") == 0 && i + 1 < argc) {
      trace = argv[++i];
    } else if (std::strcmp(argv[i], "--seeds") == 0 && i + 1 < argc) {
      seeds = std::atoi(argv[++i]);
    } else {
      policies.emplace_back(argv[i]);
    }
  }
  if (policies.empty()) policies = sim::FgdPaperPolicies();
  const std::string dir = std::string(GPUSLICE_DATA_DIR) + "/alibaba-gpu-v2023/";
  auto nodes = sim::ReadOpenbNodes(dir + "openb_node_list_gpu_node.csv");
  auto pods = sim::ReadOpenbPods(dir + "openb_pod_list_" + trace + ".csv");
  if (!nodes.ok() || !pods.ok()) {
    std::fprintf(stderr, "cannot read the bundled trace\n");
    return 1;
  }
  const sim::FgdInputs in = sim::MakeFgdInputs(nodes->nodes, pods->pods);  // as `sim fgd` runs it
  fmt::print("FGD protocol, openb {}: {} nodes, {} pods, {} typical shapes, seeds 42..{}\n",
             trace, in.nodes.size(), in.pods.size(), in.shapes.size(), 42 + seeds - 1);
  fmt::print("{:<15} {:>8} {:>10} {:>10} {:>10} {:>10} {:>12} {:>13}\n", "policy", "pods", "CPU s/run", "wall s/run",
             "alloc@100", "alloc@130", "Score calls", "CPU < 0.5 s");
  for (const std::string& name : policies) {
    auto policy = sched::MakePolicy(name);
    if (!policy.ok()) {
      std::fprintf(stderr, "%s\n", policy.status().message().c_str());
      return 2;
    }
    double secs = 0, alloc = 0, alloc100 = 0;
    const double cpu0 = CpuSeconds();
    std::int64_t pods_run = 0;
    std::uint64_t scored = 0;
    for (int s = 0; s < seeds; ++s) {
      sim::FgdRun run = sim::RunFgdOnce(in, **policy, 42 + s, 1.3);
      secs += run.seconds;
      alloc += run.curves.alloc_pct[130];
      alloc100 += run.curves.alloc_pct[100];
      pods_run = run.pods;
      scored += run.scored;
    }
    secs /= seeds;
    const double cpu = (CpuSeconds() - cpu0) / seeds;
    fmt::print("{:<15} {:>8} {:>10.3f} {:>10.3f} {:>9.2f}% {:>9.2f}% {:>12} {:>13}\n", name, pods_run, cpu, secs,
               alloc100 / seeds, alloc / seeds, scored / seeds, cpu < 0.5 ? "met" : "MISSED");
    fmt::print("{:<15} plain loop would make {} Score calls: {:.0f}x more\n", "", pods_run * 1213,
               static_cast<double>(pods_run * 1213) / static_cast<double>(std::max<std::uint64_t>(1, scored / seeds)));
  }
  return 0;
}
